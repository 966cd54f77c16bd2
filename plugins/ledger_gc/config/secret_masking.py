"""One log filter for every logger of a process: no secret in any log record.

Secrets are masked where they enter the logs, not where someone remembered to look: the
process's edge (the ``ledgergc`` command, an Airflow task, a Spark application, an
executor unpickling its settings) calls ``install_secret_masking`` with the secret values
it holds (``ledger_gc.config.secret_values``), and from then on every record of every
logger has them as ``***``: ledger-gc's own, kazoo's and py4j's (which do not propagate
to the root), botocore's and urllib3's, Airflow's, at any level.

Two ways in, one masker (``SecretMasker``):

* the log record factory (``logging.setLogRecordFactory``): every record a logger makes
  is masked as it is made, whatever handler later takes it, including handlers added
  after the install and loggers that do not propagate;
* a filter on every handler there is (the root's, every logger's, ``logging.lastResort``):
  records made otherwise (``logging.makeLogRecord``, a record from another process)
  are masked before a handler writes them.

A record is masked whole: its message formatted with its args (then the args dropped), its
traceback text and its stack. Besides the values given, the masker knows the forms of
secrets that no setting names, because a client derives them anew: the session token in a
signed request (``x-amz-security-token``), a request's signature, the secret key and
token in an STS answer, a SASL DIGEST-MD5 ``response=`` (an MD5 of the password), a
ZooKeeper session's password, a digest ACL's ``user:base64(sha1)``, a URL's password,
an Azure SAS's ``sig=`` in a request URL, a connection string's ``AccountKey=``.

A leaf: it imports nothing of ledger-gc, so every layer (and an executor) may use it.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

MASK = "***"

#: Secrets in the forms clients log them, whose values no setting holds. Group 1 is what
#: is kept before the masked value.
DERIVED: tuple[re.Pattern[str], ...] = (
    # botocore: the session token in a request's headers, its canonical request or a
    # presigned URL's query; the secret key and token of credentials as a mapping or
    # keyword (an STS answer parsed, a config), and of an STS answer's XML.
    re.compile(
        r"(?i)((?:x-amz-security-token|secret_?access_?key|session_?token|aws_secret_access_key"
        r"|aws_session_token|secret_key|token)['\"]?\s*[:=]\s*b?['\"]?)[^'\"\s,&}<>)]+"
    ),
    re.compile(r"(<(?:SecretAccessKey|SessionToken)>)[^<]+"),
    # a signed request's signature (SigV4's Authorization header, the signer's log, a
    # presigned URL): it authenticates that request to anyone who replays it.
    re.compile(r"(?i)(signature['\"]?\s*[:=]\s*b?['\"]?\s*)[0-9a-f]{40,64}"),
    # SASL DIGEST-MD5: the client's response and the server's rspauth, MD5s of the password.
    re.compile(r"((?:response|rspauth)=\"?)[0-9a-fA-F]{32}"),
    # kazoo: a session's password (who has it may take the session over).
    re.compile(r"(session_passwd[:=]\s*b?['\"]?)[0-9a-fA-F]{8,}"),
    # ZooKeeper digest auth and a digest ACL's id: user:password, user:base64(sha1(...)).
    re.compile(r"(scheme='digest', (?:auth|id)='[^':]*:)[^']+"),
    # a URL's password: scheme://user:password@ (as SQLAlchemy reads it, up to the @).
    # Bounded, and a scheme only where a word starts: unbounded, a long run of word
    # characters (a hex or base64 blob in a debug log) was tried from each of its
    # characters, a log call quadratic in its length (seconds at 16k characters).
    re.compile(r"(?<![\w+.-])([A-Za-z][\w+.-]{0,31}://[^:/@\s]{0,256}:)[^@\s]{1,1024}(?=@)"),
    # an Azure SAS's signature in a URL's query (the SDK re-encodes it, "/" as "%2F": a
    # form the SAS as configured does not hold), and an Azure connection string's key
    # and SAS.
    re.compile(r"(?i)([?&]sig=)[^&\s\"'<>]{1,1024}"),
    re.compile(r"(?i)((?:AccountKey|SharedAccessSignature)=)[^;\s\"'<>]{1,2048}"),
)
#: What the (case-folded) text holds wherever the ``DERIVED`` pattern of the same place
#: can match: a text without any of them is not searched with it. Most log lines hold
#: none, and the patterns were most of what masking a record cost (3x a record's cost).
_NEEDLES: tuple[tuple[str, ...], ...] = (
    ("token", "secret"),
    ("secretaccesskey", "sessiontoken"),
    ("signature",),
    ("response=", "rspauth="),
    ("session_passwd",),
    ("scheme='digest'",),
    ("://",),
    ("sig=",),
    ("accountkey=", "sharedaccesssignature="),
)
_MARK = "_ledgergc_masked"


class SecretMasker(logging.Filter):
    """Masks the secrets it was given, and the derived forms (``DERIVED``), in text and in
    log records. Thread-safe; secrets only accumulate (a process never "unlearns" one)."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._secrets: frozenset[str] = frozenset()
        self._known: re.Pattern[str] | None = None

    @property
    def secrets(self) -> frozenset[str]:
        return self._secrets

    def add(self, secrets: Iterable[str | None]) -> None:
        """Mask these values too, and the forms a log line may write them in: ``repr``
        (a log of a mapping shows a quote or a backslash escaped), a bytes repr (a client
        logging what it sends: ``\xc3\xa4`` for ``ä``), JSON (``\u00e4``, ``\"``).
        Empty values are ignored."""
        new = set()
        for secret in secrets:
            if not secret or not secret.strip():
                continue
            new.add(secret)
            new.add(repr(secret)[1:-1])
            new.add(repr(secret.encode("utf-8", "surrogateescape"))[2:-1])
            new.add(json.dumps(secret)[1:-1])
            new.add(json.dumps(secret, ensure_ascii=False)[1:-1])
        with self._lock:
            if new <= self._secrets:
                return
            self._secrets = self._secrets | new
            longest_first = sorted(self._secrets, key=len, reverse=True)
            self._known = re.compile("|".join(re.escape(s) for s in longest_first))

    def mask(self, text: str) -> str:
        """``text`` with every secret and derived secret as ``***``."""
        known = self._known
        if known is not None:
            text = known.sub(MASK, text)
        folded = text.casefold()
        for pattern, needles in zip(DERIVED, _NEEDLES, strict=True):
            if any(needle in folded for needle in needles):
                text = pattern.sub(rf"\g<1>{MASK}", text)
        return text

    def mask_record(self, record: logging.LogRecord) -> None:
        """Mask ``record`` in place, once: its message (formatted with its args, which are
        then dropped), its traceback's text and its stack."""
        if record.args is None and getattr(record, _MARK, None) is record.msg:
            return  # masked as made, unchanged since (``makeLogRecord`` changes it after)
        if isinstance(record.msg, Mapping) and not record.args:
            # An event as structured loggers hand it (structlog's): kept a mapping.
            record.msg = self._mask_value(record.msg)
        else:
            try:
                message = record.getMessage()
            except Exception:  # a bad format: what a handler's error report would print
                message = _unformatted(record)
            record.msg, record.args = self.mask(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.mask(record.exc_text)
        if record.stack_info:
            record.stack_info = self.mask(record.stack_info)
        setattr(record, _MARK, record.msg)

    def _mask_value(self, value: Any, depth: int = 0) -> Any:
        """A structured event's value masked, its shape kept: a mapping, a list or a
        tuple value by value (a formatter prints all of it, nested or not); text
        masked; anything else that prints a secret (bytes, an object) replaced by its
        masked text; deeper than a few levels, the masked text of the rest."""
        if isinstance(value, str):
            return self.mask(value)
        if isinstance(value, bool | int | float) or value is None:
            return value
        if depth < 8 and isinstance(value, Mapping):
            return {key: self._mask_value(item, depth + 1) for key, item in value.items()}
        if depth < 8 and type(value) in (list, tuple):  # a namedtuple: its repr below
            return type(value)(self._mask_value(item, depth + 1) for item in value)
        try:
            shown = repr(value)
        except Exception:  # an object that cannot print itself prints no secret either
            return value
        masked = self.mask(shown)
        return value if masked == shown else masked

    def filter(self, record: logging.LogRecord) -> bool:
        self.mask_record(record)
        return True


def _unformatted(record: logging.LogRecord) -> str:
    """A record's message and args as text when they do not format, without raising: a
    log call must not fail because of what it logs (logging itself only reports a
    message it cannot format), and an object's ``str`` or ``repr`` may raise (a py4j
    object once the JVM is gone, a half-built object)."""

    def text(value: object, show: Callable[[object], str]) -> str:
        try:
            return show(value)
        except Exception as exc:
            return f"<unprintable {type(value).__name__}: {type(exc).__name__}>"

    args = record.args if isinstance(record.args, tuple) else (record.args,)
    message = text(record.msg, str)
    if not args or args == ((),):
        return message
    shown = ", ".join(text(arg, repr) for arg in args)
    return f"{message} (log arguments that do not fit it: {shown})"


#: The process's one masker.
MASKER = SecretMasker()
_install_lock = threading.Lock()
_factory_installed = False


def install_secret_masking(secrets: Iterable[str | None] = ()) -> SecretMasker:
    """Mask ``secrets`` (and the derived forms) in every log record of this process from
    now on; callable again with more (each edge adds what it learns: the settings, then
    temporary credentials). Returns the process's masker."""
    global _factory_installed
    MASKER.add(secrets)
    with _install_lock:
        if not _factory_installed:
            logging.setLogRecordFactory(_masking_factory(logging.getLogRecordFactory()))
            _factory_installed = True
    for handler in _every_handler():
        if MASKER not in handler.filters:
            handler.addFilter(MASKER)
    return MASKER


def mask(text: str) -> str:
    """``text`` as this process's masker shows it (for text that is not a log record)."""
    return MASKER.mask(text)


def _masking_factory(make: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        MASKER.mask_record(record)
        return record

    return factory


def _every_handler() -> list[logging.Handler]:
    """The root's handlers, every logger's, and the last resort (a process that set up no
    logging, as a Spark executor: warnings go to stderr through it)."""
    handlers: list[logging.Handler] = list(logging.getLogger().handlers)
    for logger in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(logger, logging.Logger):
            handlers.extend(logger.handlers)
    if logging.lastResort is not None:
        handlers.append(logging.lastResort)
    return handlers
