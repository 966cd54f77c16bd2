"""The append-only audit log of every deletion, in the state store (``ledger_gc.state``).

Operators must be able to answer "what did the GC delete, when, and why" long after the
fact (``ledgergc audit``). Each append is one committed transaction of the state store
(``ledgergc_audit``), so concurrent Airflow tasks, on one host or many, never interleave
or lose records.

The log is **write-ahead**: a ``deleting`` record (what is about to go, and why) is
committed *before* the delete it announces, and a ``deleted`` record with what
was really freed after it. A deletion whose ``deleting`` record cannot be written is not
made (``AuditUnavailableError``); a process killed between the two leaves a ``deleting``
record with no ``deleted`` one, which an operator reads as "may have been deleted". A
delete the store refused is closed by a ``not-deleted`` record saying why.
Totals of freed bytes count ``deleted`` records only (and records of older versions,
which wrote after the delete and had no status), and only those not ``recoverable``.

In a versioned bucket a delete frees nothing: the data stays as noncurrent versions
behind delete markers. Such records say ``recoverable: true``, with the bucket's
``versioning`` and the ``noncurrent_expiration_days`` of the lifecycle rule that will
free them (null: none, the bytes stay billed). ``ledgergc restore`` reads them, and
writes its own records (``operation: "restore"``, ``restoring`` before the change,
``restored`` after).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger_gc.errors import AuditUnavailableError
from ledger_gc.state import schema
from ledger_gc.state.store import StateError, StateStore
from ledger_gc.state.stores import open_store

if TYPE_CHECKING:
    from ledger_gc.state.store import StateLocation

DELETING = "deleting"  # written before the delete: the intent
DELETED = "deleted"  # written after it: what was confirmed gone
# Written after a delete the store refused (the record moved, the lock was lost, no
# permission): the announced delete was not made. It closes its ``deleting`` record, so
# that nothing (``ledgergc restore``, an operator) reads that one as "may be gone".
NOT_DELETED = "not-deleted"
RESTORE = "restore"  # the operation of `ledgergc restore` records
RESTORING = "restoring"  # written before delete markers are removed
RESTORED = "restored"  # written after: what was brought back
NOT_RESTORED = "not-restored"  # written after a restore the store refused: nothing changed
_COLUMNS = tuple(c.name for c in schema.audit.columns if c.name not in ("id", "extra"))


@dataclass(frozen=True)
class AuditRecord:
    """One deleted (or restored) unit: a trimmed ledger, an orphan ledger or an orphan
    partition."""

    operation: str  # "trim" | "managed-ledger-delete" | "orphan-removal"
    target_class: str  # "ledger" | "orphan-ledger" | "orphan-partition"
    ml_name: str
    ledger_id: int | None
    prefix: str
    objects: int
    bytes: int
    reason: str
    run_id: str
    time_ms: int = 0
    status: str = DELETED
    # A versioned bucket keeps what was deleted: not freed, and ``ledgergc restore`` can
    # bring it back. ``versioning``: the bucket's state when the delete ran.
    recoverable: bool = False
    versioning: str | None = None
    noncurrent_expiration_days: int | None = None
    # The bucket the delete went to (None in records of older versions): with
    # ``prefix``, where the announced data was, so that an announcement is evidence of
    # a deletion only where the settings point now (``announced``), and
    # where ``ledgergc restore`` acts (a segment's prefix is a bare key of the offload bucket).
    bucket: str | None = None
    # What a restore needs beyond the columns (stored as JSON in ``extra``): for a
    # BookKeeper ledger, its znode, the version deleted and the record's bytes (base64).
    extra: dict[str, Any] | None = None

    def to_json(self) -> str:
        record = dict(vars(self))  # flat fields: asdict's deep copy is not needed
        record.update(record.pop("extra") or {})  # as ``record_of`` reads it back
        record["time_ms"] = self.time_ms or int(time.time() * 1000)
        return json.dumps(record, sort_keys=True, separators=(",", ":"))


class AuditLog:
    """The audit log of a state store (``location``: settings, a store or a state dir)."""

    def __init__(self, location: StateLocation) -> None:
        self._location = location
        self._store: StateStore | None = None

    @property
    def store(self) -> StateStore:
        if self._store is None:
            self._store = open_store(self._location)
        return self._store

    @property
    def path(self) -> str:
        """Where the log is, for messages: the store's URL, password masked."""
        return self.store.display_url

    def check(self) -> None:
        """Raise ``AuditUnavailableError`` now if the log could not be written, before a
        run marks or deletes anything."""
        try:
            self.store.check()
        except StateError as exc:
            raise AuditUnavailableError(str(exc)) from None

    def append(self, records: Iterable[AuditRecord]) -> int:
        """Commit the records in one transaction; raises AuditUnavailableError (naming the
        store) if it cannot, and then the caller deletes nothing."""
        rows = [_row(record) for record in records]
        if not rows:
            return 0
        try:
            with self.store.write() as conn:
                conn.execute(schema.audit.insert(), rows)
        except StateError as exc:
            raise AuditUnavailableError(f"cannot append to the audit log: {exc}") from None
        except Exception as exc:
            raise AuditUnavailableError(
                f"cannot append to the audit log in {self.store.display_url} "
                f"({' '.join(str(exc).split())[:300]}); nothing was deleted. Check "
                "LEDGERGC_STATE_URL / LEDGERGC_STATE_DIR, then run again"
            ) from None
        return len(rows)

    def read(
        self,
        limit: int | None = None,
        *,
        run_id: str | None = None,
        target_class: str | None = None,
        since_ms: int | None = None,
        status: str | None = None,
        newest_first: bool = False,
    ) -> list[dict[str, Any]]:
        """Records oldest first (the last ``limit`` when given), optionally only those of
        one run, one target class, from a time on, or of one status."""
        from sqlalchemy import select

        table = schema.audit
        query = select(table)
        if run_id is not None:
            query = query.where(table.c.run_id == run_id)
        if target_class is not None:
            query = query.where(table.c.target_class == target_class)
        if since_ms is not None:
            query = query.where(table.c.time_ms >= since_ms)
        if status is not None:
            query = query.where(table.c.status == status)
        query = query.order_by(table.c.id.desc())
        if limit:
            query = query.limit(int(limit))
        with self.store.read() as conn:
            records = [record_of(row) for row in conn.execute(query).mappings()]
        return records if newest_first else records[::-1]

    def announced(self) -> set[tuple[str, str, int, str, str | None]]:
        """(target class, managed ledger, ledger id, prefix, bucket) of every ledger-level
        deletion the log announced (``deleting``) or recorded: the evidence that a ledger
        whose data is not found any more was deleted by ledger-gc, not misplaced by a
        setting. It is evidence only for the same prefix and bucket (None: a record of an
        older version, which did not say): an announcement whose delete failed says
        nothing of a bucket or prefix that a wrong setting now points at."""
        from sqlalchemy import select

        table = schema.audit
        query = (
            select(
                table.c.target_class,
                table.c.ml_name,
                table.c.ledger_id,
                table.c.prefix,
                table.c.bucket,
            )
            .where(table.c.ledger_id.is_not(None))
            .distinct()
        )
        with self.store.read() as conn:
            return {(str(c), str(m), int(i), str(p), b) for c, m, i, p, b in conn.execute(query)}

    def deletions(self) -> list[dict[str, Any]]:
        """The ``deleted`` records (what was freed), oldest first; write-ahead
        ``deleting`` records are left out."""
        return self.read(status=DELETED)


def _row(record: AuditRecord) -> dict[str, Any]:
    # Flat fields (``extra`` becomes JSON below): asdict's recursive deep copy cost 5x
    # as much, two rows (deleting, deleted) per ledger a trim deletes.
    row = dict(vars(record))
    row["time_ms"] = record.time_ms or int(time.time() * 1000)
    row["extra"] = json.dumps(record.extra, sort_keys=True) if record.extra else None
    return row


def record_of(row: Any) -> dict[str, Any]:
    """A stored row as the record's dict (the shape ``AuditRecord.to_json`` writes)."""
    record = {name: row[name] for name in _COLUMNS}
    record["recoverable"] = bool(record["recoverable"])
    if row["extra"]:
        record.update(json.loads(row["extra"]))
    return record
