"""``StateStore``: the engine of one state URL, its transactions, and its errors.

Every change is one transaction, and writers are serialised, as the orphan registry's
``BEGIN IMMEDIATE`` always did on SQLite: two overlapping cycles (a CLI run beside the DAG)
each see the other's whole step or none of it. On PostgreSQL a transaction-scoped advisory
lock (``pg_advisory_xact_lock``) taken first thing in every write transaction does the
same; it also makes ids (audit, history, runs) commit in increasing order, which lets a
reader follow the audit log by id (``observability.state_reads.AuditTally``).

The schema is migrated on first use in each process (Alembic, ``migrations/``): the
version is read, and only when it is behind is the upgrade run, in a write transaction,
so two processes that start at once migrate once. A database of a newer version is
refused (upgrade ledger-gc).

A store that cannot be used raises one error that names the URL (password masked) and
the fix: ``StateCorruptError`` (SQLite's file is damaged: ``ledgergc orphans
--reset-registry`` moves it aside), ``StateUnavailableError`` (unreachable, a refused
login, a locked file). Nothing is read or deleted after either.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger_gc.errors import LedgerGcError
from ledger_gc.state.schema import HEAD_REVISION, VERSION_TABLE
from ledger_gc.state.url import masked

if TYPE_CHECKING:
    from typing import TypeAlias

    from sqlalchemy.engine import Connection, Engine

    from ledger_gc.config.endpoints import StateEndpoint
    from ledger_gc.config.settings import Settings

    # Any of these names a store: the store itself, a run's state endpoint or settings
    # (their state URL, and their state dir for the one-time import), a state dir (its
    # embedded SQLite) or a URL.
    StateLocation: TypeAlias = "StateStore | StateEndpoint | Settings | Path | str"

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# The advisory lock that serialises writers on PostgreSQL (any fixed 63-bit number).
_WRITE_LOCK_KEY = zlib.crc32(b"ledger-gc state store writers") + (1 << 40)
_SQLITE_BUSY_SECONDS = 60.0
_CONNECT_TIMEOUT_SECONDS = 10

#: What a registry reset costs (``ledgergc orphans --reset-registry`` prints it, and every
#: error that recommends a reset): why it is safe, and what it costs.
RESET_CONSEQUENCE = (
    "every orphan's grace window starts again with the next cycle (nothing is deleted "
    "before a full grace window has passed from then)"
)
RESET_HINT = "Run `ledgergc orphans --reset-registry` to move it aside and start a fresh store"


class StateError(LedgerGcError):
    """The state store cannot be used; nothing was read or deleted."""


class StateUnavailableError(StateError):
    """The store is unreachable, refused the login, or stayed locked."""


class StateCorruptError(StateError):
    """The store's SQLite file is not a readable database (a bad disk, a stray write)."""


class StateVersionError(StateError):
    """The store was migrated by a newer ledger-gc."""


class StateMissingError(StateError):
    """A command that only reads was pointed at a store no ledger-gc has written."""


def _is_corruption(exc: BaseException) -> bool:
    """SQLite's "not a database" / "malformed" errors, not a busy lock or a full disk."""
    if type(exc) is sqlite3.DatabaseError:  # the base class: SQLITE_NOTADB, SQLITE_CORRUPT
        return True
    text = str(exc).lower()
    return isinstance(exc, sqlite3.DatabaseError) and (
        "malformed" in text or "not a database" in text
    )


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None for another backend)."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        return None
    return Path(parsed.database)


class StateStore:
    """The store at one URL. Cheap to create; the engine is made on first use."""

    def __init__(self, url: str, *, state_dir: Path | None = None) -> None:
        self.url = url
        self.state_dir = state_dir
        self.display_url = masked(url)
        self.sqlite_file = sqlite_path(url)
        self._engine: Engine | None = None
        self._ready = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<StateStore {self.display_url}>"

    @property
    def dialect(self) -> str:
        return "sqlite" if self.sqlite_file is not None else "postgresql"

    # --- engine and errors ---------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        with self._lock:
            if self._engine is None:
                self._engine = self._make_engine()
            return self._engine

    def _make_engine(self) -> Engine:
        from sqlalchemy import create_engine, event
        from sqlalchemy.pool import NullPool

        if self.sqlite_file is None:
            return create_engine(
                self.url,
                pool_pre_ping=True,
                pool_size=2,
                connect_args={
                    "connect_timeout": _CONNECT_TIMEOUT_SECONDS,
                    "application_name": "ledger-gc",
                },
            )
        try:
            self.sqlite_file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateUnavailableError(
                f"the state store {self.display_url} cannot be created ({exc.strerror}); "
                "nothing was read or deleted. Make LEDGERGC_STATE_DIR writable or set "
                "LEDGERGC_STATE_URL"
            ) from None
        # A connection per use: SQLite's is cheap, and none is shared across a fork.
        engine = create_engine(
            self.url, poolclass=NullPool, connect_args={"timeout": _SQLITE_BUSY_SECONDS}
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            # pysqlite's own transaction handling would not begin before DDL or a read:
            # the transactions are begun here instead (SQLAlchemy's documented recipe).
            dbapi_conn.isolation_level = None
            dbapi_conn.execute("PRAGMA synchronous=FULL")
            dbapi_conn.execute("PRAGMA foreign_keys=ON")

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            write = conn.get_execution_options().get("ledgergc_write")
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine

    @contextmanager
    def _errors(self) -> Iterator[None]:
        """Turn a database's failure into one line naming the URL and the fix."""
        from sqlalchemy.exc import DBAPIError

        try:
            yield
        except DBAPIError as exc:
            error = self.translate(exc)
            if error is None:
                raise
            raise error from None

    def translate(self, exc: BaseException) -> StateError | None:
        """The one-line error of a database failure (None: not the store's fault)."""
        from sqlalchemy.exc import DBAPIError, OperationalError

        orig: BaseException = exc
        if isinstance(exc, DBAPIError) and exc.orig is not None:
            orig = exc.orig
        reason = " ".join(str(orig).split()) or type(orig).__name__
        if _is_corruption(orig):
            return StateCorruptError(
                f"the state store {self.display_url} is damaged ({reason}); nothing was "
                f"read or deleted. {RESET_HINT} (every orphan's grace window starts again; "
                "the old file keeps the audit log and run summaries)"
            )
        if isinstance(exc, OperationalError) or isinstance(orig, sqlite3.OperationalError):
            fix = (
                "check LEDGERGC_STATE_DIR (a writable local disk, not a network share) or "
                "LEDGERGC_STATE_URL"
                if self.sqlite_file is not None
                else "check LEDGERGC_STATE_URL: the server is up and reachable, the user, "
                "password and database are right"
            )
            return StateUnavailableError(
                f"the state store {self.display_url} cannot be used ({reason[:300]}); "
                f"nothing was read or deleted; {fix}"
            )
        return None

    # --- transactions -------------------------------------------------------------------

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection in a read transaction (rolled back at the end)."""
        self.ready()
        with self._errors(), self.engine.connect() as conn:
            yield conn

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """One write transaction, serialised with every other writer: committed when the
        block ends, rolled back (nothing of it kept) on any exception."""
        self.ready()
        with self._errors(), self._write_connection() as conn:
            yield conn

    @contextmanager
    def _write_connection(self) -> Iterator[Connection]:
        from sqlalchemy import text

        with self.engine.connect() as conn:
            conn.execution_options(ledgergc_write=True)
            with conn.begin():
                if self.dialect == "postgresql":
                    lock = text("SELECT pg_advisory_xact_lock(:key)")
                    conn.execute(lock, {"key": _WRITE_LOCK_KEY})
                yield conn

    # --- schema -------------------------------------------------------------------------

    def ready(self) -> None:
        """Migrate the schema to this version's head, once per process."""
        if self._ready:
            return
        with self._errors():
            self._migrate()
        self._ready = True

    def check(self) -> None:
        """Open the store and read it: raises the one-line error early, before a run
        starts Spark or reads the metadata, when the store is damaged or unreachable."""
        from sqlalchemy import func, select

        from ledger_gc.state import schema

        with self.read() as conn:
            conn.execute(select(func.count()).select_from(schema.scans)).scalar()

    def exists(self) -> bool:
        """Whether a ledger-gc has written this store: its SQLite file exists, or its
        PostgreSQL database has the schema's version table. Creates nothing."""
        if self.sqlite_file is not None:
            return self.sqlite_file.is_file()
        from sqlalchemy import inspect

        with self._errors(), self.engine.connect() as conn:
            return bool(inspect(conn).has_table(VERSION_TABLE))

    def _migrate(self) -> None:
        from alembic import command
        from alembic.config import Config
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory
        from alembic.util.exc import CommandError

        def current(conn: Connection) -> str | None:
            context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            return context.get_current_revision()

        with self.engine.connect() as conn:
            if current(conn) == HEAD_REVISION:
                return  # the usual case, and the only one on an executor (see schema.py)
        # Behind (a new store, an upgrade): migrate, also from the py_files zip of a
        # Spark driver (the survey may be the first task to touch a new store).
        config = Config()
        config.set_main_option("script_location", str(migrations_dir()))
        script = ScriptDirectory.from_config(config)
        head = script.get_current_head()
        with self._write_connection() as conn:
            revision = current(conn)  # again: another process may have migrated meanwhile
            if revision == head:
                return
            try:
                if revision is not None:
                    script.get_revision(revision)
            except CommandError:
                raise StateVersionError(
                    f"the state store {self.display_url} has schema version {revision}, "
                    "newer than this ledger-gc understands; upgrade ledger-gc"
                ) from None
            config.attributes["connection"] = conn
            command.upgrade(config, "head")

    def dispose(self) -> None:
        """Close pooled connections (tests; a process about to fork)."""
        with self._lock:
            if self._engine is not None:
                self._engine.dispose()
                self._engine = None
            self._ready = False


@functools.cache
def migrations_dir() -> Path:
    """The Alembic scripts as a directory on disk.

    A Spark driver may import ledger_gc from the zip that spark-submit's ``py_files``
    ships (library_zip, spark.session): Alembic reads scripts from a directory, so the
    zip's ``migrations/`` is extracted once per process into a temporary directory.
    """
    if MIGRATIONS_DIR.is_dir():
        return MIGRATIONS_DIR
    import tempfile
    import zipfile

    archive = getattr(globals().get("__loader__"), "archive", None)  # a zipimporter's
    if archive is None:
        raise StateError(f"the state store's migrations are missing ({MIGRATIONS_DIR})")
    inside = "ledger_gc/state/migrations/"
    target = Path(tempfile.mkdtemp(prefix="ledger_gc-migrations-"))
    with zipfile.ZipFile(archive) as bundle:
        for name in bundle.namelist():
            if name.startswith(inside) and not name.endswith("/"):
                bundle.extract(name, target)
    return target / inside
