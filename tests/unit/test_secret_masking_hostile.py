"""The log masker under hostile input (issue 33's review): text that a client or a peer
chooses must neither stall a log call nor make one raise.

Each log-call case runs in a Python process of its own: the masker is the process's
record factory, which a test process must not keep.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from ledger_gc.config.secret_masking import SecretMasker

SECRET = "S3cret-pw"


def test_a_long_unbroken_token_is_masked_in_linear_time() -> None:
    """A message with a long run of word characters (a hex or base64 blob, as kazoo's
    and botocore's debug logs print packets and bodies) costs a log call time in
    proportion to its length, not its square: 64k characters in well under a second
    (the URL-password pattern took ~1 s at 16k, ~16 s at 64k)."""
    masker = SecretMasker()
    masker.add([SECRET])
    for text in ("a" * 65536, "x://u:" + "b" * 65536, "0123456789abcdef" * 4096):
        started = time.perf_counter()
        masker.mask(text)
        assert time.perf_counter() - started < 0.5, text[:12]
    # Still masked where it must be.
    assert masker.mask("postgresql://gc:" + "p" * 1000 + "@db/x") == "postgresql://gc:***@db/x"


def test_a_log_call_whose_arguments_cannot_be_printed_does_not_raise() -> None:
    """Logging swallows a message it cannot format (``--- Logging error ---`` on stderr)
    and the caller goes on; with the masker installed the log call must not raise instead
    (a py4j object's repr after the JVM is gone, a half-built object's), and what it
    writes in its place still has no secret."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import logging, sys
                from ledger_gc.config.secret_masking import install_secret_masking
                logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
                install_secret_masking([{SECRET!r}])

                class Gone:
                    def __repr__(self):
                        raise RuntimeError("the gateway is gone")
                    __str__ = __repr__

                log = logging.getLogger("py4j.java_gateway")
                log.debug("answer for %r with {SECRET}", Gone())
                log.debug(Gone())
                print("the caller went on")
                """
            ),
        ],
        capture_output=True,
        timeout=120,
    )
    out = (done.stderr + done.stdout).decode()
    assert done.returncode == 0, out
    assert "the caller went on" in out
    assert SECRET not in out


def test_a_structured_events_nested_values_are_masked() -> None:
    """A mapping as the record's message (structlog's event, or any ``log.info(dict)``)
    stays a mapping, but every value in it is masked, however deep and whatever its type
    (a nested mapping, a list, bytes): a formatter prints the whole of it."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import logging, sys
                from ledger_gc.config.secret_masking import install_secret_masking
                logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
                install_secret_masking([{SECRET!r}])
                log = logging.getLogger("structured")
                log.info({{"event": "connect", "auth": {{"password": {SECRET!r}}}}})
                log.info({{"event": "call", "args": [{SECRET!r}], "token": {SECRET!r}.encode()}})
                """
            ),
        ],
        capture_output=True,
        timeout=120,
    )
    out = (done.stderr + done.stdout).decode()
    assert done.returncode == 0, out
    assert "'event': 'connect'" in out and "'event': 'call'" in out, out
    assert SECRET not in out, out


def test_a_secret_is_masked_in_its_bytes_and_json_forms() -> None:
    """A non-ASCII secret (or one with a quote, a backslash or a newline) is written
    otherwise in a bytes repr (``b'p\\xc3\\xa4'``: a client logging what it sends) and in
    JSON (``"p\\u00e4"``: a mapping dumped as JSON in a log line)."""
    import json

    secret = 'Pä"ss\\wörd\n-7q'
    masker = SecretMasker()
    masker.add([secret])
    for shown in (
        repr(secret.encode()),
        json.dumps({"password": secret}),
        json.dumps({"password": secret}, ensure_ascii=False),
        repr({"password": secret}),
    ):
        masked = masker.mask(f"sending {shown} now")
        assert "***" in masked and "7q" not in masked and "ss\\" not in masked, (shown, masked)


def test_the_derived_forms_are_masked_as_when_every_pattern_ran() -> None:
    """The masker skips a derived pattern where its words are absent (the cost of a log
    call); it masks what running every pattern masks, whatever the case."""
    import re

    from ledger_gc.config.secret_masking import DERIVED, MASK

    texts = [
        "X-Amz-Security-Token: FQoGZXIvYXdzEJr//////////wEaDM",
        "{'AWS_SECRET_ACCESS_KEY': 'wJalrXUtnFEMI/K7MDENG', 'Token': 'abc'}",
        "<SecretAccessKey>wJalrXUt</SecretAccessKey><SessionToken>FQo</SessionToken>",
        "Authorization: AWS4-HMAC-SHA256 Credential=AKIA/x, SIGNATURE=" + "ab12" * 16,
        "SASL(challenge=b'charset=utf-8,response=\"" + "0a" * 16 + "\",qop=auth')",
        "session_passwd=b'00ff00ff00ff00ff'",
        "Auth(type=0, scheme='digest', auth='gc:pw-1')",
        "url=POSTGRESQL+psycopg://gc:pw/x+y@db:5432/x",
        "nothing secret here: GetData(path='/ledgers/00/0000/L0001')",
    ]
    for text in texts:
        everything = text
        for pattern in DERIVED:
            everything = pattern.sub(rf"\g<1>{MASK}", everything)
        assert SecretMasker().mask(text) == everything, text
        assert re.sub(r"\*\*\*", "", everything) != text or "nothing secret" in text
