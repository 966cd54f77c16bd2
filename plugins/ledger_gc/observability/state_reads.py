"""Reading the state store for the overview without reading all of it on every view.

The run summaries and the audit log only ever grow (one row per run, one per deleted
unit), and the Airflow page is rendered on every view. So the newest summaries are read
with a limit (``run_log.read_runs``), and the audit log's totals are kept by a tally that
reads only the rows added since its last look (``AuditTally``): audit ids commit in
increasing order, as the store serialises its writers.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger_gc.audit import DELETED, AuditLog
from ledger_gc.state import schema
from ledger_gc.state.store import StateStore
from ledger_gc.state.stores import open_store

if TYPE_CHECKING:
    from ledger_gc.state.store import StateLocation


@dataclass
class AuditTotals:
    """Totals over the whole audit log, per operation (``trim``, ``orphan-removal``...).

    ``bytes`` counts only freed bytes; ``recoverable_bytes`` those a versioned bucket kept
    as noncurrent versions (deleted from listings, still billed; ``recoverable`` records).
    """

    bytes: dict[str, int] = field(default_factory=dict)
    units: dict[str, int] = field(default_factory=dict)
    objects: dict[str, int] = field(default_factory=dict)
    recoverable_bytes: dict[str, int] = field(default_factory=dict)

    def add(self, operation: str, recoverable: bool, units: int, objects: int, size: int) -> None:
        """Add ``units`` deleted records of one operation (write-ahead ``deleting``
        records are never added: what was freed is their ``deleted`` twin)."""
        if recoverable:
            self.recoverable_bytes[operation] = self.recoverable_bytes.get(operation, 0) + size
            size = 0
        self.bytes[operation] = self.bytes.get(operation, 0) + size
        self.objects[operation] = self.objects.get(operation, 0) + objects
        self.units[operation] = self.units.get(operation, 0) + units

    def copy(self) -> AuditTotals:
        return AuditTotals(
            dict(self.bytes), dict(self.units), dict(self.objects), dict(self.recoverable_bytes)
        )


class AuditTally:
    """Running totals of the audit log, updated from the rows added since last time.

    One instance lives as long as the web server; ``refresh`` costs one indexed query that
    finds nothing when nothing was added. If the log went back (a store replaced by a fresh
    one: its newest id is below the last one counted), the tally starts over.
    """

    def __init__(self, location: StateLocation) -> None:
        self._location = location
        self._lock = threading.Lock()
        self._last_id = 0
        self._totals = AuditTotals()

    @property
    def store(self) -> StateStore:
        return open_store(self._location)

    def refresh(self) -> AuditTotals:
        """The totals as of now (a copy: callers may keep it)."""
        from sqlalchemy import func, select

        table = schema.audit
        with self._lock, self.store.read() as conn:
            newest = conn.execute(select(func.max(table.c.id))).scalar() or 0
            if newest < self._last_id:
                self._last_id, self._totals = 0, AuditTotals()
            if newest > self._last_id:
                query = (
                    select(
                        table.c.operation,
                        table.c.recoverable,
                        func.count(),
                        func.coalesce(func.sum(table.c.objects), 0),
                        func.coalesce(func.sum(table.c.bytes), 0),
                    )
                    .where(table.c.id > self._last_id, table.c.id <= newest)
                    .where(table.c.status == DELETED)
                    .group_by(table.c.operation, table.c.recoverable)
                )
                for operation, recoverable, units, objects, size in conn.execute(query):
                    self._totals.add(
                        str(operation), bool(recoverable), int(units), int(objects), int(size)
                    )
                self._last_id = newest
            return self._totals.copy()


def audit_totals(location: StateLocation) -> AuditTotals:
    """Totals of the whole audit log, read once (for one-shot callers like the CLI)."""
    return AuditTally(location).refresh()


def recent_audit_records(location: StateLocation, limit: int) -> list[dict[str, Any]]:
    """The last ``limit`` deletions of the audit log, newest first (the write-ahead
    ``deleting`` records are left out: each is followed by its ``deleted`` record)."""
    if limit <= 0:
        return []
    return AuditLog(location).read(limit, status=DELETED, newest_first=True)
