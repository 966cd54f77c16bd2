"""Which database a run's state lives in, and how to name it in a message.

``LEDGERGC_STATE_URL`` is a SQLAlchemy URL; unset, the store is the embedded SQLite file
``<LEDGERGC_STATE_DIR>/state.sqlite``. ``postgresql://`` means the psycopg 3 driver (the
one ledger-gc installs), not SQLAlchemy's default psycopg2. A URL's password never
appears in a message or a page: ``masked`` replaces it with ``***``.

The password is found where SQLAlchemy finds it (``sqlalchemy.engine.url.make_url``):
after ``dialect://``, the user runs up to a ``:`` (or a ``/``, then there is none) and
the password from that ``:`` up to the first ``@``, so it may hold ``/``, ``:``, ``+``,
``=``, ``?`` or ``#`` as written; ``@`` and ``%`` come escaped (``%40``, ``%25``), and
SQLAlchemy unescapes it. ``urlsplit`` ends the authority at the first ``/`` instead: a
mask that read the URL its way left a base64 password (``/`` and ``+``) in clear. A URL
without one may carry it in its query (``?password=...``): SQLAlchemy hands the query to
the driver, and psycopg logs in with it; that one is a password too.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, unquote_plus, urlsplit

from ledger_gc.errors import ConfigError

STATE_FILE = "state.sqlite"
SUPPORTED = ("sqlite", "postgresql")
_EXAMPLE = (
    "set it like postgresql+psycopg://ledgergc:PASSWORD@db.example.com:5432/ledgergc, or "
    "leave it empty for SQLite in LEDGERGC_STATE_DIR"
)


#: The credentials of a URL as SQLAlchemy reads them: ``dialect://user:password@``.
_CREDENTIALS = re.compile(r"[\w+]+://[^:/]*:(?P<password>[^@]*)@")
#: A password among the query's parameters, which SQLAlchemy passes to the driver.
_QUERY_PASSWORD = re.compile(r"[?&]password=(?P<password>[^&#]*)")


def written_password(url: str) -> str | None:
    """The URL's password as written in it (escapes and all), or None: what a mask hides
    in the URL's text. The one before the ``@``, else the query's."""
    found = _CREDENTIALS.match(url)
    if found is not None and found.group("password"):
        return found.group("password")
    found = _QUERY_PASSWORD.search(url)
    return (found.group("password") or None) if found else None


def password(url: str) -> str | None:
    """The URL's password as the database receives it (SQLAlchemy unescapes it, a query's
    as a query), or None: what a mask hides in any other text (a driver's message, a log
    line)."""
    written = written_password(url)
    if not written:
        return None
    credentials = _CREDENTIALS.match(url)
    in_query = credentials is None or not credentials.group("password")
    return unquote_plus(written) if in_query else unquote(written)


def default_state_url(state_dir: Path | str) -> str:
    """The embedded store of a state dir: an absolute SQLite file URL."""
    return f"sqlite:///{(Path(state_dir) / STATE_FILE).resolve()}"


def check_state_url(raw: str) -> str:
    """The URL as the store will use it, or ``ConfigError`` naming the setting and the fix.

    Checked here by its form only (``urllib`` on the URL with its password masked, which
    then has nothing ``urlsplit`` reads otherwise than SQLAlchemy; not SQLAlchemy itself:
    settings stay importable by the pure rule modules); the store parses it again when it
    connects."""
    text = raw.strip()
    parts = urlsplit(masked(text))
    if not parts.scheme or "://" not in text:
        # Not in the form the mask reads: a password in it would show; so not quoted.
        raise ConfigError(
            f"LEDGERGC_STATE_URL is not a SQLAlchemy URL (dialect://...; its value is not "
            f"shown, as it may hold a password); {_EXAMPLE}"
        )
    backend, _, driver = parts.scheme.partition("+")
    if backend not in SUPPORTED:
        raise ConfigError(
            f"LEDGERGC_STATE_URL={masked(text)!r}: {backend} is not supported (SQLite or "
            f"PostgreSQL); {_EXAMPLE}"
        )
    if backend == "postgresql" and driver not in ("", "psycopg"):
        raise ConfigError(
            f"LEDGERGC_STATE_URL={masked(text)!r}: driver {driver} is not installed; use "
            "postgresql+psycopg:// (or postgresql://)"
        )
    if backend == "sqlite" and parts.path in ("", "/", "/:memory:"):
        raise ConfigError(
            f"LEDGERGC_STATE_URL={masked(text)!r} names no file (an in-memory SQLite is not shared "
            "by the tasks); use sqlite:////absolute/path/state.sqlite"
        )
    if backend == "postgresql" and not parts.hostname:
        raise ConfigError(f"LEDGERGC_STATE_URL={masked(text)!r} names no host; {_EXAMPLE}")
    if backend == "postgresql" and not driver:
        text = "postgresql+psycopg" + text[len(parts.scheme) :]
    return text


def masked(url: str) -> str:
    """The URL with its password (as SQLAlchemy reads it) and its query's replaced by
    ``***``."""
    url = _QUERY_PASSWORD.sub(lambda found: found.group().split("=", 1)[0] + "=***", url)
    found = _CREDENTIALS.match(url)
    if found is None or not found.group("password"):
        return url
    return f"{url[: found.start('password')]}***{url[found.end('password') :]}"
