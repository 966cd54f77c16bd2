"""The append-only audit log of every deletion (JSON lines in the state dir).

Operators must be able to answer "what did the GC delete, when, and why" long after the
fact. Records are appended under an exclusive file lock and fsynced, so concurrent Airflow
tasks on one host never interleave half lines; a reader skips a torn last line.

The log is **write-ahead**: a ``deleting`` record (what is about to go, and why) is
appended and fsynced *before* the delete it announces, and a ``deleted`` record with what
was really freed after it. A deletion whose ``deleting`` record cannot be written is not
made (``AuditUnavailableError``); a process killed between the two leaves a ``deleting``
record with no ``deleted`` one, which an operator reads as "may have been deleted".
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

import fcntl
import json
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ledger_gc.errors import AuditUnavailableError

AUDIT_FILE = "audit.jsonl"
DELETING = "deleting"  # written before the delete: the intent
DELETED = "deleted"  # written after it: what was confirmed gone
RESTORE = "restore"  # the operation of `ledgergc restore` records
RESTORING = "restoring"  # written before delete markers are removed
RESTORED = "restored"  # written after: what was brought back


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

    def to_json(self) -> str:
        record = asdict(self)
        record["time_ms"] = self.time_ms or int(time.time() * 1000)
        return json.dumps(record, sort_keys=True, separators=(",", ":"))


class AuditLog:
    def __init__(self, state_dir: Path | str) -> None:
        self.path = Path(state_dir) / AUDIT_FILE

    def append(self, records: Iterable[AuditRecord]) -> int:
        """Append and fsync; raises AuditUnavailableError (naming the file) if it cannot."""
        lines = [record.to_json() + "\n" for record in records]
        if not lines:
            return 0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX)
                try:
                    handle.write("".join(lines))
                    handle.flush()
                    os.fsync(handle.fileno())
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)
        except OSError as exc:
            raise AuditUnavailableError(
                f"cannot append to the audit log {self.path} ({exc.strerror or exc}); nothing "
                "was deleted. Free space or make LEDGERGC_STATE_DIR writable, then run again"
            ) from exc
        return len(lines)

    def read(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Records oldest first (the last ``limit`` when given)."""
        if not self.path.exists():
            return []
        records = []
        with open(self.path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # a torn line from a crashed writer; the rest is intact
        return records[-limit:] if limit else records

    def announced(self) -> set[tuple[str, str, int, str, str | None]]:
        """(target class, managed ledger, ledger id, prefix, bucket) of every ledger-level
        deletion the log announced (``deleting``) or recorded: the evidence that a ledger
        whose data is not found any more was deleted by ledger-gc, not misplaced by a
        setting. It is evidence only for the same prefix and bucket (None: a record of an
        older version, which did not say): an announcement whose delete failed says
        nothing of a bucket or prefix that a wrong setting now points at."""
        return {
            (
                str(r.get("target_class")),
                str(r.get("ml_name")),
                int(r["ledger_id"]),
                str(r.get("prefix")),
                r.get("bucket"),
            )
            for r in self.read()
            if r.get("ledger_id") is not None
        }

    def deletions(self) -> list[dict[str, Any]]:
        """The ``deleted`` records (what was freed), oldest first; write-ahead
        ``deleting`` records are left out."""
        return [r for r in self.read() if r.get("status", DELETED) == DELETED]
