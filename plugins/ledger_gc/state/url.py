"""Which database a run's state lives in, and how to name it in a message.

``LEDGERGC_STATE_URL`` is a SQLAlchemy URL; unset, the store is the embedded SQLite file
``<LEDGERGC_STATE_DIR>/state.sqlite``. ``postgresql://`` means the psycopg 3 driver (the
one ledger-gc installs), not SQLAlchemy's default psycopg2. A URL's password never
appears in a message or a page: ``masked`` replaces it with ``***``.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from ledger_gc.errors import ConfigError

STATE_FILE = "state.sqlite"
SUPPORTED = ("sqlite", "postgresql")
_EXAMPLE = (
    "set it like postgresql+psycopg://ledgergc:PASSWORD@db.example.com:5432/ledgergc, or "
    "leave it empty for SQLite in LEDGERGC_STATE_DIR"
)


def default_state_url(state_dir: Path | str) -> str:
    """The embedded store of a state dir: an absolute SQLite file URL."""
    return f"sqlite:///{(Path(state_dir) / STATE_FILE).resolve()}"


def check_state_url(raw: str) -> str:
    """The URL as the store will use it, or ``ConfigError`` naming the setting and the fix.

    Checked here by its form only (``urllib``, not SQLAlchemy: settings stay importable by
    the pure rule modules); the store parses it again when it connects."""
    text = raw.strip()
    parts = urlsplit(text)
    if not parts.scheme or "://" not in text:
        raise ConfigError(
            f"LEDGERGC_STATE_URL={masked(text)!r} is not a SQLAlchemy URL "
            f"(dialect://...); {_EXAMPLE}"
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
            f"LEDGERGC_STATE_URL={text!r} names no file (an in-memory SQLite is not shared "
            "by the tasks); use sqlite:////absolute/path/state.sqlite"
        )
    if backend == "postgresql" and not parts.hostname:
        raise ConfigError(f"LEDGERGC_STATE_URL={masked(text)!r} names no host; {_EXAMPLE}")
    if backend == "postgresql" and not driver:
        text = "postgresql+psycopg" + text[len(parts.scheme) :]
    return text


def masked(url: str) -> str:
    """The URL with its password replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, tail = rest.partition("/")
    credentials, at, host = authority.rpartition("@")
    if not at or ":" not in credentials:
        return url
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}{slash}{tail}"
