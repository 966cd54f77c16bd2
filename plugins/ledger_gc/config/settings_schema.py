"""How a setting is declared: one ``SettingSpec`` on its ``Settings`` field, read by all.

Why this exists (issue 20): the settings used to be listed by hand in ``from_env``,
``to_env``, the Airflow variable's mapping, the list of secrets to mask and the README's
table, and the lists drifted: a quoted number in the ``ledgergc_settings`` variable
reached a task as a string and failed it with a TypeError, and bounds were checked for the
environment only. Now each field is declared once, with its variable, its kind of value,
its bounds, whether it is secret and a line for the docs (``setting``), and every reader
and writer loops over the declarations (``declared``): reading the environment, writing
it for a child process, accepting a JSON value, checking bounds, masking secrets and
rendering the README's table (``ledger_gc.config.settings_table``).

Pure: no I/O and no import of ``ledger_gc.config.settings`` (which declares its fields with this).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from secrets import token_bytes
from typing import Any, TypeVar

from ledger_gc.errors import ConfigError

T = TypeVar("T")

#: The key under which a field's specs are kept in its ``dataclasses.field`` metadata.
_METADATA_KEY = "ledger_gc.setting"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Kind:
    """A kind of value: how it is read from text, accepted from JSON or Python, written back.

    ``parse`` and ``accept`` raise ``ValueError`` or ``TypeError`` for a bad value; the
    spec turns that into one ``ConfigError`` line naming the variable.
    """

    #: What a good value is, for errors: "is not a whole number".
    name: str
    #: Environment text (never empty) -> value.
    parse: Callable[[str], Any]
    #: A value as JSON or a caller gives it (a string is parsed) -> value.
    accept: Callable[[Any], Any]
    #: Value -> the environment text that ``parse`` reads back.
    format: Callable[[Any], str]


def _text_accept(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{type(value).__name__} is not text")
    return value


def _integer_parse(raw: str) -> int:
    return int(raw.strip())


def _integer_accept(value: Any) -> int:
    if isinstance(value, str):
        return _integer_parse(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{type(value).__name__} is not a number")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{value} is not whole")
    return int(value)


def _number_parse(raw: str) -> float:
    value = float(raw)
    if not math.isfinite(value):
        raise ValueError(f"{raw} is not finite")
    return value


def _number_accept(value: Any) -> float:
    if isinstance(value, str):
        return _number_parse(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{type(value).__name__} is not a number")
    return _number_parse(repr(float(value)))


def _flag_parse(raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(raw)


def _flag_accept(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _flag_parse(value)
    raise TypeError(f"{type(value).__name__} is not a boolean")


def _word_parse(raw: str) -> str:
    return raw.strip().lower()


def _path_accept(value: Any) -> Path:
    if isinstance(value, str | Path):
        return Path(value)
    raise TypeError(f"{type(value).__name__} is not a path")


def _names_parse(raw: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in raw.split(",")) if raw.strip() else ()


def _names_accept(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return _names_parse(value)
    if isinstance(value, list | tuple) and all(isinstance(name, str) for name in value):
        return tuple(value)
    raise TypeError(f"{type(value).__name__} is not a list of names")


TEXT = Kind("text", str, _text_accept, str)
INTEGER = Kind("a whole number", _integer_parse, _integer_accept, str)
NUMBER = Kind("a number", _number_parse, _number_accept, lambda value: repr(float(value)))
FLAG = Kind(
    "a boolean (true/false)",
    _flag_parse,
    _flag_accept,
    lambda value: "true" if value else "false",
)
#: A word out of ``SettingSpec.choices``, compared lower-case.
WORD = Kind("a word", _word_parse, lambda value: _word_parse(_text_accept(value)), str)
#: A directory: written back absolute, so that a child process in another working
#: directory (spark-submit, ``airflow tasks test``) uses the same one.
PATH = Kind("a path", Path, _path_accept, lambda value: str(Path(value).resolve()))
#: Comma-separated names ("" or blanks: none).
NAMES = Kind("a comma-separated list of names", _names_parse, _names_accept, ",".join)


def _whole(value: Any) -> str | None:
    return str(value)


def _after_colon(value: Any) -> str | None:
    """``user:password`` -> the password (ZooKeeper digest auth)."""
    return str(value).partition(":")[2] or None


def _url_password(value: Any) -> str | None:
    """A URL's password as written in it (``postgresql+psycopg://user:password@host/db``),
    found where SQLAlchemy finds it (``state.url``): it may hold ``/`` and ``+``."""
    from ledger_gc.state.url import written_password

    return written_password(str(value))


#: What of a secret setting's value is hidden: all of it, the password of ``user:password``,
#: or a URL's password.
SECRET_WHOLE = _whole
SECRET_AFTER_COLON = _after_colon
SECRET_URL_PASSWORD = _url_password


@dataclass(frozen=True)
class SettingSpec:
    """One setting, declared once: the variable, the kind, the bounds, secrecy and docs.

    ``field`` (the ``Settings`` attribute) is filled in by ``declared``; ``part`` names
    the attribute of a composite field's value that this variable sets (the two halves of
    ``trim_retention``).
    """

    env: str
    kind: Kind
    doc: str
    part: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    #: The minimum itself is refused ("above 0").
    exclusive_minimum: bool = False
    #: Said after a bound in errors: "must be 0 or more seconds".
    unit: str = ""
    #: Said after a bounds error: how to choose a good value.
    hint: str = ""
    choices: tuple[str, ...] = ()
    #: ``check(env, value)`` raises ``ConfigError`` for a value of a bad form.
    check: Callable[[str, Any], None] | None = None
    #: The value as the settings keep it (e.g. a prefix without slashes).
    normalize: Callable[[Any], Any] | None = None
    #: Which part of the value is secret (``SECRET_*``); None: not secret.
    secret: Callable[[Any], str | None] | None = None
    #: The README's default column, when the default value alone would not say it.
    default_doc: str | None = None
    #: Set but empty is a value (an empty bucket: no block store), not "unset".
    empty_is_set: bool = False
    #: Read when ``env`` is unset (a boto3 variable the setting defaults to).
    fallback_env: str | None = None
    #: ``to_env`` leaves the variable out while the value is None or empty text (credentials,
    #: which boto3 would read as set; values whose absence is the default).
    omit_when_empty: bool = False
    #: False: ``to_env`` never writes it; a child process gets the values it set instead
    #: (``LEDGERGC_PULSAR_CONF``: a Spark driver on another host has no broker.conf).
    inherited: bool = True
    #: Older keys of the setting in the ``ledgergc_settings`` variable and run params
    #: (a renamed setting's old field name), still read.
    also_keys: tuple[str, ...] = ()
    field: str = ""

    @property
    def key(self) -> str:
        """The key in the ``ledgergc_settings`` variable and in run params."""
        return f"{self.field}_{self.part}" if self.part else self.field

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key that names this setting there: ``key``, and the variable's name in
        lower case without ``LEDGERGC_`` where that differs (``pulsar_cluster``)."""
        from_env = self.env.removeprefix("LEDGERGC_").lower()
        named = self.env.startswith("LEDGERGC_") and from_env != self.key
        keys = (self.key, from_env) if named else (self.key,)
        return keys + tuple(key for key in self.also_keys if key not in keys)

    def read_env(self, environ: Mapping[str, str]) -> tuple[bool, Any]:
        """``(found, value)`` from the environment; ``found`` False: the default stands."""
        raw = environ.get(self.env)
        if raw is None or (raw == "" and not self.empty_is_set):
            raw = environ.get(self.fallback_env) if self.fallback_env else None
            if not raw:
                return False, None
        try:
            value = self.kind.parse(raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{self.env}={raw!r} is not {self.kind.name}") from exc
        return True, self.accept(value)

    def accept(self, value: Any, *, source: str | None = None) -> Any:
        """The value as the settings keep it: converted, bounds and form checked.

        ``source`` names where the value came from when it is not the environment
        (``ledgergc_settings``, the run's params); the error names both it and ``env``.
        """
        if value is None:
            return None
        try:
            value = self.kind.accept(value)
        except (TypeError, ValueError) as exc:
            raise self.error(value, f"is not {self.kind.name}", source) from exc
        self._check_bounds(value, source)
        if self.choices and value not in self.choices:
            raise self.error(value, f"must be {_either(self.choices)}", source)
        if self.check is not None:
            try:
                self.check(self.env, value)
            except ConfigError as exc:
                if source is None:
                    raise
                raise ConfigError(f"{source}: {self.key}: {exc}") from exc
        return self.normalize(value) if self.normalize is not None else value

    def to_text(self, value: Any) -> str | None:
        """The environment text of a value, or None when ``to_env`` leaves it out."""
        if value is None or (self.omit_when_empty and _is_empty(value)):
            return None if self.omit_when_empty else ""
        return self.kind.format(value)

    def text_of(self, value: Any) -> str:
        """A value as text for people ("" for none), its secret left in."""
        return "" if value is None else self.kind.format(value)

    def shown(self, text: str, value: Any) -> str:
        """``text`` (of ``value``) with its secret part, if any, as ``***``."""
        secret = self.secret_of(value)
        return text.replace(secret, "***") if secret else text

    def secret_of(self, value: Any) -> str | None:
        """What of this value a log or a page must never show; None: nothing."""
        if self.secret is None or value is None or value == "":
            return None
        return self.secret(value)

    def error(self, value: Any, problem: str, source: str | None = None) -> ConfigError:
        """One line naming the setting, the value (never a secret) and the problem."""
        shown = "***" if self.secret is not None else repr(value)
        if source is None:
            return ConfigError(f"{self.env}={shown} {problem}")
        return ConfigError(f"{source}: {self.key}={shown} {problem} ({self.env})")

    def _check_bounds(self, value: Any, source: str | None) -> None:
        if self.minimum is None and self.maximum is None:
            return
        low_ok = (
            self.minimum is None
            or value > self.minimum
            or (value == self.minimum and not self.exclusive_minimum)
        )
        high_ok = self.maximum is None or value <= self.maximum
        if low_ok and high_ok:
            return
        raise self.error(value, f"must be {self.bounds_text()}", source)

    def bounds_text(self) -> str:
        """The bounds in words: "0 or more seconds", "above 0 and at most 1"."""
        words = []
        if self.minimum is not None:
            low = _number_text(self.minimum)
            words.append(f"above {low}" if self.exclusive_minimum else f"{low} or more")
        if self.maximum is not None:
            words.append(f"at most {_number_text(self.maximum)}")
        text = " and ".join(words) + (f" {self.unit}" if self.unit else "")
        return text + (f"; {self.hint}" if self.hint else "")


@dataclass(frozen=True)
class Origin:
    """Where a setting's value came from (``ledgergc status --json`` shows it).

    ``source``: ``env``, ``broker.conf``, ``connection``, ``variable``, ``params`` or
    ``code`` (a caller set it); ``detail``: which key of which file, which connection;
    ``given``: the value as it was written there, when the settings keep another form of
    it (an address in Pulsar's or BookKeeper's form: errors and ``status`` show this;
    never kept for a secret setting); ``value``: the text of the value the settings kept
    (filled in when they are made; of a secret setting, a keyed fingerprint of it), so
    that an origin whose value has been replaced since is known to be stale. Neither
    holds a secret in clear: origins go wherever the settings go (a pickle to each Spark
    executor, a repr in a traceback).
    """

    source: str
    detail: str = ""
    given: str | None = None
    value: str | None = None

    def describe(self) -> str:
        """Where, in words: "metadataStoreUrl in /etc/pulsar/broker.conf", "connection
        ledgergc_zookeeper", "grace_seconds in ledgergc_settings"."""
        if self.source == "connection":
            return f"connection {self.detail}"
        return self.detail or self.source

    def settled(self, spec: SettingSpec, raw: Any, value: Any) -> Origin | None:
        """This origin for ``value`` (read from ``raw``), or None when it no longer
        describes it (the value was replaced since)."""
        text = spec.text_of(value)
        kept = text if spec.secret is None else _fingerprint(text)
        if self.value is not None and self.value != kept:
            return None
        given = None if spec.secret is not None else _given(self.given, raw, text)
        return dataclasses.replace(self, value=kept, given=given)


#: The key of this process's fingerprints of secret values. A fingerprint only says
#: whether the value changed; unkeyed, a password's would let anyone who holds it test
#: guesses of the password. (Another process's copy cannot check it: a copy it makes
#: there forgets where that secret came from, which only ``status`` would show.)
_FINGERPRINT_KEY = token_bytes(16)


def _fingerprint(text: str) -> str:
    return hmac.new(_FINGERPRINT_KEY, text.encode(), hashlib.sha256).hexdigest()[:16]


def _given(given: str | None, raw: Any, kept: str) -> str | None:
    """The spelling to keep: the one given, when it differs from the value's own."""
    spelled = given if given is not None else _text_of(raw)
    return None if spelled == kept else spelled


def _text_of(raw: Any) -> str | None:
    return raw if isinstance(raw, str) else None


def setting(default: T, *specs: SettingSpec, repr: bool | None = None) -> T:
    """A ``Settings`` field declared by its spec(s) (several for a composite value).

    A field with a secret stays out of ``repr`` (and so out of logs and tracebacks).
    """
    hidden = any(spec.secret is not None for spec in specs)
    return dataclasses.field(  # type: ignore[no-any-return]
        default=default,
        repr=(not hidden) if repr is None else repr,
        metadata={_METADATA_KEY: specs},
    )


def setting_factory(factory: Callable[[], T], *specs: SettingSpec) -> T:
    """``setting`` for a mutable default (a mapping), made fresh per instance."""
    return dataclasses.field(  # type: ignore[no-any-return]
        default_factory=factory, metadata={_METADATA_KEY: specs}
    )


def declared(settings_class: type) -> tuple[SettingSpec, ...]:
    """Every spec of a settings dataclass, in field order, each with its ``field`` set.

    Kept once made: every ``Settings`` made walks these to check its values."""
    specs = _DECLARED.get(settings_class)
    if specs is None:
        specs = _DECLARED[settings_class] = tuple(
            dataclasses.replace(spec, field=f.name)
            for f in dataclasses.fields(settings_class)
            for spec in f.metadata.get(_METADATA_KEY, ())
        )
    return specs


_DECLARED: dict[type, tuple[SettingSpec, ...]] = {}


def default_of(settings_class: type, spec: SettingSpec) -> Any:
    """The value a spec's variable has when it is unset."""
    [f] = [f for f in dataclasses.fields(settings_class) if f.name == spec.field]
    value = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
    return getattr(value, spec.part) if spec.part else value


def _is_empty(value: Any) -> bool:
    """An empty text or collection; a ``False`` flag or a 0 is a value (``to_env`` keeps
    it: BookKeeper's ``false`` must not fall back to Pulsar's ``true``)."""
    return isinstance(value, str | tuple | list | dict) and not value


def _either(choices: tuple[str, ...]) -> str:
    return ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
