"""The durable orphan registry: ``<state_dir>/orphans/registry.sqlite``.

KIP-370's phases need memory across runs: when a target was first seen, on which scans,
and what happened to it. SQLite gives that with transactions, so a step that fails
half-way (a lost ZooKeeper session, a killed Airflow task) leaves the registry exactly
as it was before the step: every step writes in one ``BEGIN IMMEDIATE`` transaction,
which also serialises two cycles that overlap (a CLI run beside the DAG).

Tables:

* ``orphans``: one row per registered target, keyed by its key prefix (a ledger
  directory or a managed-ledger directory), with first/last seen times and scan numbers;
* ``scans``: one row per scan applied (numbered 1, 2, ...; ``run_id`` unique, so applying
  the same run twice is a no-op that returns the stored result);
* ``history``: an append-only row per change (registered, clock-restarted, corrected,
  deleted, gone, delete-failed) with the reason, what an operator reads to learn why a
  target left the registry.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ledger_gc.errors import LedgerGcError
from ledger_gc.orphans.layout import ORPHANS_DIR, REGISTRY_FILE
from ledger_gc.orphans.phases import RegistryEntry
from ledger_gc.orphans.timekeeping import Instant

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS orphans (
    prefix        TEXT PRIMARY KEY,
    target_class  TEXT NOT NULL,
    ml_name       TEXT NOT NULL,
    ledger_id     INTEGER,
    first_seen_ms INTEGER NOT NULL,
    last_seen_ms  INTEGER NOT NULL,
    first_scan    INTEGER NOT NULL,
    last_scan     INTEGER NOT NULL,
    scans_seen    INTEGER NOT NULL,
    objects       INTEGER NOT NULL,
    bytes         INTEGER NOT NULL,
    newest_ms     INTEGER NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT
);
CREATE TABLE IF NOT EXISTS scans (
    number      INTEGER PRIMARY KEY,
    run_id      TEXT NOT NULL UNIQUE,
    recorded_ms INTEGER NOT NULL,
    result      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS history (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    time_ms      INTEGER NOT NULL,
    run_id       TEXT NOT NULL,
    scan         INTEGER,
    prefix       TEXT NOT NULL,
    target_class TEXT NOT NULL,
    ml_name      TEXT NOT NULL,
    ledger_id    INTEGER,
    event        TEXT NOT NULL,
    reason       TEXT NOT NULL,
    objects      INTEGER NOT NULL,
    bytes        INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS history_run ON history (run_id);
CREATE INDEX IF NOT EXISTS history_prefix ON history (prefix);
"""

_ENTRY_FIELDS = tuple(RegistryEntry.__dataclass_fields__)


class RegistryError(LedgerGcError):
    """The registry file cannot be opened or is of an unknown version."""


class RegistryCorruptError(RegistryError):
    """The registry file is not a readable SQLite database (a bad disk, a stray write).

    Nothing can be decided without the registry (it is the memory of every grace
    window), so the cycle stops before it reads or deletes anything; the message names
    the file and the fix, ``ledgergc orphans --reset-registry``.
    """


#: What ``reset`` prints and the docs repeat: why a reset is safe, and what it costs.
RESET_CONSEQUENCE = (
    "every orphan's grace window starts again with the next cycle (nothing is deleted "
    "before a full grace window has passed from then)"
)


def _is_corruption(exc: sqlite3.DatabaseError) -> bool:
    """SQLite's "not a database" / "malformed" errors, not a busy lock or a full disk."""
    if type(exc) is sqlite3.DatabaseError:  # the base class: SQLITE_NOTADB, SQLITE_CORRUPT
        return True
    text = str(exc).lower()
    return "malformed" in text or "not a database" in text


@dataclass(frozen=True)
class ScanRecord:
    number: int
    run_id: str
    recorded_ms: int
    result: dict[str, Any]


def registry_path(state_dir: Path | str) -> Path:
    return Path(state_dir) / ORPHANS_DIR / REGISTRY_FILE


class OrphanRegistry:
    """The registry of one state dir. Cheap to create; each call opens its own connection."""

    def __init__(self, state_dir: Path | str, *, timeout_seconds: float = 60.0) -> None:
        self.path = registry_path(state_dir)
        self.timeout_seconds = timeout_seconds

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = sqlite3.connect(self.path, timeout=self.timeout_seconds, isolation_level=None)
        except sqlite3.Error as exc:
            raise RegistryError(f"cannot open the orphan registry {self.path}: {exc}") from exc
        try:
            conn.row_factory = sqlite3.Row
            try:
                conn.execute("PRAGMA synchronous=FULL")
                conn.execute("PRAGMA foreign_keys=ON")
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise RegistryError(
                        f"the orphan registry {self.path} has schema version {version}, "
                        f"newer than this ledger-gc understands ({SCHEMA_VERSION}); upgrade "
                        "ledger-gc"
                    )
                if version < SCHEMA_VERSION:
                    # Idempotent (IF NOT EXISTS), so two processes creating it at once is fine.
                    conn.executescript(
                        f"BEGIN IMMEDIATE;{_SCHEMA}PRAGMA user_version={SCHEMA_VERSION};COMMIT;"
                    )
            except sqlite3.DatabaseError as exc:
                raise self._error(exc) from None
            try:
                yield conn
            except sqlite3.DatabaseError as exc:
                # A damaged page found later, by a query: the same one-line error.
                if _is_corruption(exc):
                    raise self._error(exc) from None
                raise
        finally:
            conn.close()

    def _error(self, exc: sqlite3.DatabaseError) -> RegistryError:
        if not _is_corruption(exc):
            return RegistryError(f"cannot open the orphan registry {self.path}: {exc}")
        return RegistryCorruptError(
            f"the orphan registry {self.path} is damaged ({exc}); nothing was read or "
            "deleted. Run `ledgergc orphans --reset-registry` to move it aside and start a "
            f"fresh registry ({RESET_CONSEQUENCE})"
        )

    def check(self) -> None:
        """Open the registry and read its schema: raises ``RegistryCorruptError`` early,
        before a cycle starts Spark or reads the store, when the file is damaged."""
        with self._connect() as conn:
            conn.execute("SELECT count(*) FROM scans").fetchone()

    def reset(self, now_ms: int) -> Path | None:
        """Move the registry file (and SQLite's side files) aside; the next cycle starts
        a fresh one. Returns where it went (None: there was no registry)."""
        if not self.path.exists():
            return None
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now_ms / 1000))
        aside = self.path.with_name(f"{self.path.name}.corrupt-{stamp}")
        for suffix in ("", "-journal", "-wal", "-shm"):
            side = Path(f"{self.path}{suffix}")
            if side.exists():
                side.replace(Path(f"{aside}{suffix}"))
        return aside

    @contextmanager
    def transaction(self) -> Iterator[RegistryTransaction]:
        """All changes in the block, or none of them (rolled back on any exception)."""
        with self._connect() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield RegistryTransaction(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    # --- reads -------------------------------------------------------------------------

    def entries(self) -> dict[str, RegistryEntry]:
        with self._connect() as conn:
            return _entries(conn)

    def latest_scan(self) -> ScanRecord | None:
        with self._connect() as conn:
            return _latest_scan(conn)

    def scan_instants(self) -> dict[int, Instant]:
        """The servers' time of each scan that recorded one (timekeeping.py)."""
        with self._connect() as conn:
            rows = conn.execute("SELECT number, result FROM scans").fetchall()
        instants = {}
        for row in rows:
            instant = Instant.from_dict(json.loads(row["result"]).get("instant"))
            if instant is not None:
                instants[int(row["number"])] = instant
        return instants

    def scan_of_run(self, run_id: str) -> ScanRecord | None:
        with self._connect() as conn:
            row = conn.execute("SELECT * FROM scans WHERE run_id = ?", (run_id,)).fetchone()
            return _scan(row) if row else None

    def history(
        self, *, run_id: str | None = None, prefix: str | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """History rows, oldest first (the newest ``limit`` when given)."""
        query = "SELECT * FROM history"
        where, args = [], []
        if run_id is not None:
            where.append("run_id = ?")
            args.append(run_id)
        if prefix is not None:
            where.append("prefix = ?")
            args.append(prefix)
        if where:
            query += " WHERE " + " AND ".join(where)
        query += " ORDER BY id DESC"
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        with self._connect() as conn:
            rows = [dict(row) for row in conn.execute(query, args)]
        return rows[::-1]


class RegistryTransaction:
    """The writes of one step; see ``OrphanRegistry.transaction``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def entries(self) -> dict[str, RegistryEntry]:
        return _entries(self.conn)

    def latest_scan(self) -> ScanRecord | None:
        return _latest_scan(self.conn)

    def scan_of_run(self, run_id: str) -> ScanRecord | None:
        row = self.conn.execute("SELECT * FROM scans WHERE run_id = ?", (run_id,)).fetchone()
        return _scan(row) if row else None

    def record_scan(self, run_id: str, recorded_ms: int, result: dict[str, Any]) -> int:
        """Number the scan of ``run_id`` (the next number) and keep its phase result."""
        cursor = self.conn.execute(
            "INSERT INTO scans (run_id, recorded_ms, result) VALUES (?, ?, ?)",
            (run_id, recorded_ms, json.dumps(result, sort_keys=True)),
        )
        return int(cursor.lastrowid or 0)

    def set_scan_result(self, number: int, result: dict[str, Any]) -> None:
        self.conn.execute(
            "UPDATE scans SET result = ? WHERE number = ?", (json.dumps(result), number)
        )

    def upsert(self, entry: RegistryEntry) -> None:
        columns = ", ".join(_ENTRY_FIELDS)
        marks = ", ".join("?" for _ in _ENTRY_FIELDS)
        self.conn.execute(
            f"INSERT OR REPLACE INTO orphans ({columns}) VALUES ({marks})",
            tuple(getattr(entry, name) for name in _ENTRY_FIELDS),
        )

    def remove(self, prefix: str) -> None:
        self.conn.execute("DELETE FROM orphans WHERE prefix = ?", (prefix,))

    def note_failure(self, prefix: str, error: str) -> None:
        self.conn.execute(
            "UPDATE orphans SET attempts = attempts + 1, last_error = ? WHERE prefix = ?",
            (error[:2000], prefix),
        )

    def add_history(
        self,
        entry: RegistryEntry,
        event: str,
        reason: str,
        *,
        run_id: str,
        scan: int | None,
        time_ms: int | None = None,
        objects: int | None = None,
        size: int | None = None,
    ) -> None:
        self.conn.execute(
            "INSERT INTO history (time_ms, run_id, scan, prefix, target_class, ml_name, "
            "ledger_id, event, reason, objects, bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                time_ms if time_ms is not None else int(time.time() * 1000),
                run_id,
                scan,
                entry.prefix,
                entry.target_class,
                entry.ml_name,
                entry.ledger_id,
                event,
                reason,
                entry.objects if objects is None else objects,
                entry.bytes if size is None else size,
            ),
        )


def _entries(conn: sqlite3.Connection) -> dict[str, RegistryEntry]:
    rows = conn.execute("SELECT * FROM orphans ORDER BY prefix").fetchall()
    return {row["prefix"]: RegistryEntry(**{k: row[k] for k in _ENTRY_FIELDS}) for row in rows}


def _latest_scan(conn: sqlite3.Connection) -> ScanRecord | None:
    row = conn.execute("SELECT * FROM scans ORDER BY number DESC LIMIT 1").fetchone()
    return _scan(row) if row else None


def _scan(row: sqlite3.Row) -> ScanRecord:
    return ScanRecord(row["number"], row["run_id"], row["recorded_ms"], json.loads(row["result"]))


def entry_to_dict(entry: RegistryEntry) -> dict[str, Any]:
    return asdict(entry)
