"""The append-only audit log of every deletion (JSON lines in the state dir).

Operators must be able to answer "what did the GC delete, when, and why" long after the
fact. Records are appended under an exclusive file lock and fsynced, so concurrent Airflow
tasks on one host never interleave half lines; a reader skips a torn last line.
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

AUDIT_FILE = "audit.jsonl"


@dataclass(frozen=True)
class AuditRecord:
    """One deleted unit: a trimmed ledger, an orphan ledger or an orphan partition."""

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

    def to_json(self) -> str:
        record = asdict(self)
        record["time_ms"] = self.time_ms or int(time.time() * 1000)
        return json.dumps(record, sort_keys=True, separators=(",", ":"))


class AuditLog:
    def __init__(self, state_dir: Path | str) -> None:
        self.path = Path(state_dir) / AUDIT_FILE

    def append(self, records: Iterable[AuditRecord]) -> int:
        lines = [record.to_json() + "\n" for record in records]
        if not lines:
            return 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                handle.write("".join(lines))
                handle.flush()
                os.fsync(handle.fileno())
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
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
