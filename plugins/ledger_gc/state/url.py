"""Which database a run's state lives in, and how to name it in a message.

``LEDGERGC_STATE_URL`` is a SQLAlchemy URL; unset, the store is the embedded SQLite file
``<LEDGERGC_STATE_DIR>/state.sqlite``. ``postgresql://`` means the psycopg 3 driver (the
one ledger-gc installs), not SQLAlchemy's default psycopg2. A URL's password never
appears in a message or a page: ``masked`` replaces it with ``***``.
"""

from __future__ import annotations

from pathlib import Path

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
    """The URL as the store will use it, or ``ConfigError`` naming the setting and the fix."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    text = raw.strip()
    try:
        url = make_url(text)
    except (ArgumentError, ValueError) as exc:
        raise ConfigError(
            f"LEDGERGC_STATE_URL={masked(text)!r} is not a SQLAlchemy URL ({exc}); {_EXAMPLE}"
        ) from None
    backend, _, driver = url.drivername.partition("+")
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
    if backend == "sqlite" and not url.database:
        raise ConfigError(
            f"LEDGERGC_STATE_URL={text!r} names no file (an in-memory SQLite is not shared "
            "by the tasks); use sqlite:////absolute/path/state.sqlite"
        )
    if backend == "postgresql" and not driver:
        text = url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return text


def masked(url: str) -> str:
    """The URL with its password replaced by ``***`` (unparseable text is returned as is,
    less anything between ``:`` and ``@`` of its authority)."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        head, at, tail = url.rpartition("@")
        if not at:
            return url
        scheme, sep, user = head.partition("://")
        return f"{scheme}{sep}{user.split(':', 1)[0]}:***@{tail}"


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None for another backend)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    return Path(parsed.database)
