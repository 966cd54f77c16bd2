"""The durable orphan registry, in the state store (``ledger_gc.state``).

KIP-370's phases need memory across runs: when a target was first seen, on which scans,
and what happened to it. The state store gives that with transactions, so a step that
fails half-way (a lost ZooKeeper session, a killed Airflow task) leaves the registry
exactly as it was before the step: every step writes in one transaction, and writers are
serialised (SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's advisory lock), which also
serialises two cycles that overlap (a CLI run beside the DAG).

Tables (``state/schema.py``):

* ``ledgergc_orphans``: one row per registered target, keyed by its key prefix (a ledger
  directory or a managed-ledger directory), with first/last seen times and scan numbers;
* ``ledgergc_scans``: one row per scan applied (numbered 1, 2, ... with no gap; ``run_id``
  unique, so applying the same run twice is a no-op that returns the stored result);
* ``ledgergc_history``: an append-only row per change (registered, clock-restarted,
  corrected, deleted, gone, delete-failed) with the reason, what an operator reads to
  learn why a target left the registry.

Before the state store, the registry was its own SQLite file,
``<state_dir>/orphans/registry.sqlite`` (``registry_path``); it is imported once
(``state/legacy_import.py``).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.rules.orphans.timekeeping import Instant
from ledger_gc.state import schema
from ledger_gc.state.batching import batches
from ledger_gc.state.legacy_import import LEGACY_REGISTRY, source_key
from ledger_gc.state.store import StateCorruptError, StateError, StateStore
from ledger_gc.state.stores import open_store

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, RowMapping

    from ledger_gc.state.store import StateLocation

T = TypeVar("T")
_ENTRY_FIELDS = tuple(RegistryEntry.__dataclass_fields__)
#: Prefixes per ``IN (...)`` and rows per insert of the batched writes.
_IN_BATCH = 500
_INSERT_BATCH = 1000
#: Rows fetched at a time by the reads that stream (a server-side cursor on PostgreSQL):
#: a registry of 500,000 entries is never all in the driver's memory at once.
_STREAM_BATCH = 2000

# The registry's errors are the store's: one line naming the store and the fix.
RegistryError = StateError
RegistryCorruptError = StateCorruptError


@dataclass(frozen=True)
class ScanRecord:
    number: int
    run_id: str
    recorded_ms: int
    result: dict[str, Any]


def registry_path(state_dir: Path | str) -> Path:
    """The registry file of a state dir written before the state store (imported once)."""
    return Path(state_dir) / LEGACY_REGISTRY


class OrphanRegistry:
    """The registry in a state store. Cheap to create; each call is its own transaction.

    ``location``: the run's state endpoint or settings (their ``LEDGERGC_STATE_URL``), a
    ``StateStore``, or a state dir (its embedded SQLite store).
    """

    def __init__(self, location: StateLocation) -> None:
        self._location = location
        self._store: StateStore | None = None
        state_dir = getattr(location, "state_dir", None)
        if isinstance(location, (str, Path)) and "://" not in str(location):
            state_dir = Path(location)
        self.state_dir = Path(state_dir) if state_dir is not None else None

    @property
    def store(self) -> StateStore:
        """The store, opened on first use (which migrates and imports, and may fail)."""
        if self._store is None:
            self._store = open_store(self._location)
        return self._store

    @property
    def path(self) -> str:
        """Where the registry is, for messages: the store's URL, password masked."""
        return self.store.display_url if self._store is not None else _describe(self._location)

    def check(self) -> None:
        """Open the store and read the registry: raises the store's one-line error early,
        before a cycle starts Spark or reads the metadata, when it is damaged or down."""
        self.store.check()

    def reset(self, now_ms: int) -> str | None:
        """Start a fresh registry; returns what was done (None: there was nothing).

        A state dir's old registry file not imported yet (e.g. a damaged one) is moved
        aside, and so is a damaged SQLite store (with the audit log and run summaries in
        it: they stay readable in the moved file). Otherwise the registry's rows (orphans
        and scans; the history stays) are removed in one transaction.
        """
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now_ms / 1000))
        if self.state_dir is not None:
            legacy = registry_path(self.state_dir)
            if legacy.exists() and not self._imported(legacy):
                return str(_move_aside(legacy, stamp))
        try:
            store = self.store
            with store.write() as conn:
                removed = conn.execute(schema.orphans.delete()).rowcount
                scans = conn.execute(schema.scans.delete()).rowcount
        except StateCorruptError:
            store = StateStore(self._store.url if self._store else _url_of(self._location))
            if store.sqlite_file is None or not store.sqlite_file.exists():
                raise
            aside = _move_aside(store.sqlite_file, stamp)
            from ledger_gc.state.stores import forget_stores

            forget_stores()
            self._store = None
            return str(aside)
        if not removed and not scans:
            return None
        return f"{removed} registered orphans and {scans} scans removed from {store.display_url}"

    def _imported(self, legacy: Path) -> bool:
        from sqlalchemy import select

        try:
            with StateStore(_url_of(self._location)).read() as conn:
                row = conn.execute(
                    select(schema.imports.c.source).where(
                        schema.imports.c.source == source_key(legacy)
                    )
                ).first()
        except StateError:
            return False
        return row is not None

    @contextmanager
    def transaction(self) -> Iterator[RegistryTransaction]:
        """All changes in the block, or none of them (rolled back on any exception)."""
        with self.store.write() as conn:
            yield RegistryTransaction(conn)

    # --- reads -------------------------------------------------------------------------

    def entries(self) -> dict[str, RegistryEntry]:
        with self.store.read() as conn:
            return _entries(conn)

    def iter_entries(self) -> Iterator[RegistryEntry]:
        """The entries by prefix, streamed from the store (for a reader that only counts
        or picks a few: the report, the metrics; ``entries`` holds them all at once)."""
        with self.store.read() as conn:
            yield from _iter_entries(conn)

    def prefixes(self, scheme: str) -> Iterator[str]:
        """The prefixes that start with ``scheme`` (one source's targets, e.g.
        ``bookkeeper:``), by prefix, streamed: a survey that explains its own registered
        targets reads only theirs, never another source's or a whole entry."""
        from sqlalchemy import func, select

        column = schema.orphans.c.prefix
        query = (
            select(column)
            # (a compared substring, not LIKE: SQLite's LIKE ignores case, and a range
            # would follow PostgreSQL's collation, not the scheme's characters)
            .where(func.substr(column, 1, len(scheme)) == scheme)
            .order_by(column)
            .execution_options(yield_per=_STREAM_BATCH)
        )
        with self.store.read() as conn:
            for (prefix,) in conn.execute(query):
                yield prefix

    def entries_of_classes(self, classes: Iterable[str]) -> Iterator[RegistryEntry]:
        """The entries of these target classes (one source's), by prefix, streamed."""
        where = schema.orphans.c.target_class.in_(sorted(set(classes)))
        with self.store.read() as conn:
            yield from _iter_entries(conn, where)

    def holds_any(self, classes: Iterable[str]) -> bool:
        """Whether any entry is of these target classes (one row looked for, none read)."""
        from sqlalchemy import exists, select

        table = schema.orphans
        query = select(exists().where(table.c.target_class.in_(sorted(set(classes)))))
        with self.store.read() as conn:
            return bool(conn.execute(query).scalar())

    def mark(self) -> dict[str, Any]:
        """The registry as it is now, in a few bytes: its latest scan's number and run
        (``{"scan": 0, "run_id": None}``: none). Every entry registered now was first
        registered by a scan up to it, and every entry registered later by a later one,
        or after a reset (``RegistryTransaction.surveyed`` tells which): a survey keeps
        this instead of the list of what it read."""
        from sqlalchemy import select

        table = schema.scans
        query = select(table.c.number, table.c.run_id).order_by(table.c.number.desc()).limit(1)
        with self.store.read() as conn:
            row = conn.execute(query).first()
        if row is None:
            return {"scan": 0, "run_id": None}
        return {"scan": int(row[0]), "run_id": str(row[1])}

    def count(self) -> int:
        """How many entries the registry holds (one query, no row read)."""
        from sqlalchemy import func, select

        with self.store.read() as conn:
            return int(conn.execute(select(func.count()).select_from(schema.orphans)).scalar_one())

    def latest_scan(self) -> ScanRecord | None:
        with self.store.read() as conn:
            return _latest_scan(conn)

    def scan_instants(self) -> dict[int, Instant]:
        """The servers' time of each scan that recorded one (timekeeping.py)."""
        from sqlalchemy import select

        with self.store.read() as conn:
            rows = conn.execute(select(schema.scans.c.number, schema.scans.c.result)).all()
        instants = {}
        for number, result in rows:
            instant = Instant.from_dict(json.loads(result).get("instant"))
            if instant is not None:
                instants[int(number)] = instant
        return instants

    def scan_run_ids(self) -> dict[int, str]:
        """The run that applied each scan, by scan number (links from a registered
        orphan to the DAG runs that saw it)."""
        from sqlalchemy import select

        with self.store.read() as conn:
            rows = conn.execute(select(schema.scans.c.number, schema.scans.c.run_id)).all()
        return {int(number): str(run_id) for number, run_id in rows}

    def scan_of_run(self, run_id: str) -> ScanRecord | None:
        with self.store.read() as conn:
            return _scan_of_run(conn, run_id)

    def history(
        self, *, run_id: str | None = None, prefix: str | None = None, limit: int | None = None
    ) -> list[dict[str, Any]]:
        """History rows, oldest first (the newest ``limit`` when given)."""
        from sqlalchemy import select

        table = schema.history
        query = select(table)
        if run_id is not None:
            query = query.where(table.c.run_id == run_id)
        if prefix is not None:
            query = query.where(table.c.prefix == prefix)
        query = query.order_by(table.c.id.desc())
        if limit is not None:
            query = query.limit(int(limit))
        with self.store.read() as conn:
            rows = [dict(row) for row in conn.execute(query).mappings()]
        return rows[::-1]

    def iter_history(self, *, run_id: str, columns: Iterable[str]) -> Iterator[RowMapping]:
        """One run's history rows, oldest first, streamed (``history`` holds them all as
        dicts: 50,000 rows of a large cluster's first scan were 57 MiB of the driver's
        heap); only ``columns`` are read. Each row is valid while the iteration runs."""
        from sqlalchemy import select

        table = schema.history
        query = (
            select(*(table.c[name] for name in columns))
            .where(table.c.run_id == run_id)
            .order_by(table.c.id)
            .execution_options(yield_per=_STREAM_BATCH)
        )
        with self.store.read() as conn:
            yield from conn.execute(query).mappings()


class RegistryTransaction:
    """The writes of one step; see ``OrphanRegistry.transaction``."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def entries(self) -> dict[str, RegistryEntry]:
        return _entries(self.conn)

    def entries_of(self, prefixes: Iterable[str]) -> dict[str, RegistryEntry]:
        """The registered entries among ``prefixes`` (a step that changes a few of the
        registry's entries reads those, not all of them)."""
        from sqlalchemy import select

        table = schema.orphans
        columns = [table.c[k] for k in _ENTRY_FIELDS]
        found: dict[str, RegistryEntry] = {}
        for batch in batches(prefixes, _IN_BATCH):
            rows = self.conn.execute(select(*columns).where(table.c.prefix.in_(batch)))
            found.update((row[0], RegistryEntry(*row)) for row in rows)
        return found

    def unseen_pages(self, scan: int, size: int) -> Iterator[list[RegistryEntry]]:
        """The entries whose ``last_scan`` is below ``scan``, by prefix, ``size`` at a
        time; each page is its own query after the previous page's last prefix, so the
        transaction may change or remove entries between pages (the phases step
        corrects a page before it reads the next)."""
        from sqlalchemy import select

        table = schema.orphans
        columns = [table.c[k] for k in _ENTRY_FIELDS]
        after: str | None = None
        while True:
            query = select(*columns).where(table.c.last_scan < scan)
            if after is not None:
                query = query.where(table.c.prefix > after)
            rows = self.conn.execute(query.order_by(table.c.prefix).limit(size)).all()
            if not rows:
                return
            yield [RegistryEntry(prefix, sys.intern(cls), *rest) for prefix, cls, *rest in rows]
            after = rows[-1][0]

    def latest_scan(self) -> ScanRecord | None:
        return _latest_scan(self.conn)

    def surveyed(self, mark: dict[str, Any]) -> Callable[[RegistryEntry], bool]:
        """Whether an entry registered now was in the registry when ``mark``
        (``OrphanRegistry.mark``) was read: first registered by a scan up to the mark's.

        An entry removed and registered again since is a new entry (its first scan is
        the later one), and so is a restarted one. A registry reset since numbers its
        scans from 1 again: then the mark's scan is another run's, or none, and nothing
        registered now was there."""
        from sqlalchemy import select

        through = int(mark.get("scan") or 0)
        if through:
            table = schema.scans
            number = self.conn.execute(
                select(table.c.number).where(table.c.run_id == mark.get("run_id"))
            ).scalar()
            if number != through:
                return lambda entry: False
        return lambda entry: entry.first_scan <= through

    def scan_of_run(self, run_id: str) -> ScanRecord | None:
        return _scan_of_run(self.conn, run_id)

    def record_scan(self, run_id: str, recorded_ms: int, result: dict[str, Any]) -> int:
        """Number the scan of ``run_id`` (the next number, no gap: the transaction is
        serialised) and keep its phase result. A run recorded before: IntegrityError."""
        from sqlalchemy import func, select

        latest = self.conn.execute(select(func.max(schema.scans.c.number))).scalar()
        number = int(latest or 0) + 1
        self.conn.execute(
            schema.scans.insert().values(
                number=number,
                run_id=run_id,
                recorded_ms=recorded_ms,
                result=json.dumps(result, sort_keys=True),
            )
        )
        return number

    def set_scan_result(self, number: int, result: dict[str, Any]) -> None:
        self.conn.execute(
            schema.scans.update()
            .where(schema.scans.c.number == number)
            .values(result=json.dumps(result))
        )

    def upsert(self, entry: RegistryEntry) -> None:
        self.upsert_many([entry])

    def upsert_many(self, entries: Iterable[RegistryEntry]) -> None:
        """Write entries (replacing those of the same prefixes) in a few statements: a
        scan of a large cluster sees tens of thousands, one statement each cost minutes.
        The rows are made a batch at a time (all at once they were another copy of every
        entry in the driver's memory); a prefix given twice keeps its last entry."""
        table = schema.orphans
        for batch in batches(entries, _INSERT_BATCH):
            rows = {e.prefix: {k: getattr(e, k) for k in _ENTRY_FIELDS} for e in batch}
            prefixes = list(rows)
            for start in range(0, len(prefixes), _IN_BATCH):
                chunk = prefixes[start : start + _IN_BATCH]
                self.conn.execute(table.delete().where(table.c.prefix.in_(chunk)))
            self.conn.execute(table.insert(), list(rows.values()))

    def see_again(self, prefixes: Iterable[str], scan: int, now_ms: int) -> None:
        """Entries ``scan`` found orphaned again with their data as registered: only
        their clock moves on (seen now, by ``scan``, one scan more), one statement a
        batch. In a steady state every registered target is seen again each cycle, and
        ``upsert_many`` rewrote each whole (a delete and an insert a row). Each must be
        registered with the previous scan as its last: else a ``StateError`` (its
        transaction rolls back), never a row set that the phases did not decide."""
        table = schema.orphans
        for chunk in batches(prefixes, _IN_BATCH):
            moved = self.conn.execute(
                table.update()
                .where(table.c.prefix.in_(chunk), table.c.last_scan == scan - 1)
                .values(last_seen_ms=now_ms, last_scan=scan, scans_seen=table.c.scans_seen + 1)
            ).rowcount
            asked = len(set(chunk))
            if moved != asked:
                raise StateError(
                    f"{asked - moved} of {asked} orphans seen again by "
                    f"scan {scan} are not registered with scan {scan - 1} as their last; "
                    "nothing of this scan was applied"
                )

    def remove(self, prefix: str) -> None:
        self.conn.execute(schema.orphans.delete().where(schema.orphans.c.prefix == prefix))

    def note_failure(self, prefix: str, error: str) -> None:
        table = schema.orphans
        self.conn.execute(
            table.update()
            .where(table.c.prefix == prefix)
            .values(attempts=table.c.attempts + 1, last_error=error[:2000])
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
            schema.history.insert().values(
                time_ms=time_ms if time_ms is not None else int(time.time() * 1000),
                run_id=run_id,
                scan=scan,
                prefix=entry.prefix,
                target_class=entry.target_class,
                ml_name=entry.ml_name,
                ledger_id=entry.ledger_id,
                event=event,
                reason=reason,
                objects=entry.objects if objects is None else objects,
                bytes=entry.bytes if size is None else size,
            )
        )

    def add_history_many(
        self,
        events: Iterable[tuple[RegistryEntry, str, str]],
        *,
        run_id: str,
        scan: int | None,
        time_ms: int,
    ) -> None:
        """``add_history`` of many ``(entry, event, reason)``, in order, in few statements
        (their rows made a batch at a time)."""
        for batch in batches(events, _INSERT_BATCH):
            rows = [
                {
                    "time_ms": time_ms,
                    "run_id": run_id,
                    "scan": scan,
                    "prefix": entry.prefix,
                    "target_class": entry.target_class,
                    "ml_name": entry.ml_name,
                    "ledger_id": entry.ledger_id,
                    "event": event,
                    "reason": reason,
                    "objects": entry.objects,
                    "bytes": entry.bytes,
                }
                for entry, event, reason in batch
            ]
            self.conn.execute(schema.history.insert(), rows)


def _entries(conn: Connection) -> dict[str, RegistryEntry]:
    return {entry.prefix: entry for entry in _iter_entries(conn)}


def _iter_entries(conn: Connection, where: Any = None) -> Iterator[RegistryEntry]:
    """The entries (those ``where`` selects, if given) by prefix, streamed."""
    from sqlalchemy import select

    columns = [schema.orphans.c[k] for k in _ENTRY_FIELDS]
    query = select(*columns).order_by(schema.orphans.c.prefix)
    if where is not None:
        query = query.where(where)
    rows = conn.execute(query.execution_options(yield_per=_STREAM_BATCH))
    for prefix, target_class, *rest in rows:  # (fields in order)
        # One string per class, not one per row (a registry holds 500,000 of a class).
        yield RegistryEntry(prefix, sys.intern(target_class), *rest)


def _latest_scan(conn: Connection) -> ScanRecord | None:
    from sqlalchemy import select

    row = (
        conn.execute(select(schema.scans).order_by(schema.scans.c.number.desc()).limit(1))
        .mappings()
        .first()
    )
    return _scan(row) if row else None


def _scan_of_run(conn: Connection, run_id: str) -> ScanRecord | None:
    from sqlalchemy import select

    row = (
        conn.execute(select(schema.scans).where(schema.scans.c.run_id == run_id)).mappings().first()
    )
    return _scan(row) if row else None


def _scan(row: RowMapping) -> ScanRecord:
    return ScanRecord(row["number"], row["run_id"], row["recorded_ms"], json.loads(row["result"]))


def _url_of(location: Any) -> str:
    from ledger_gc.state.url import default_state_url

    if isinstance(location, StateStore):
        return location.url
    if hasattr(location, "state_dir"):  # a state endpoint (or settings), by attribute
        return location.state_url or default_state_url(Path(location.state_dir))
    if isinstance(location, str) and "://" in location:
        return location
    return default_state_url(Path(location))


def _describe(location: Any) -> str:
    from ledger_gc.state.url import masked

    return masked(_url_of(location))


def _move_aside(path: Path, stamp: str) -> Path:
    """Move a SQLite file (and its side files) to ``<name>.corrupt-<stamp>``."""
    aside = path.with_name(f"{path.name}.corrupt-{stamp}")
    for suffix in ("", "-journal", "-wal", "-shm"):
        side = Path(f"{path}{suffix}")
        if side.exists():
            side.replace(Path(f"{aside}{suffix}"))
    return aside


def entry_to_dict(entry: RegistryEntry) -> dict[str, Any]:
    return asdict(entry)
