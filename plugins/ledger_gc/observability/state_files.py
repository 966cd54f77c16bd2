"""Reading the state dir's JSON-lines logs without reading all of them on every view.

The run logs and the audit log only ever grow (one line per run, one per deleted unit),
and the Airflow page is rendered on every view. So the newest lines are read from the
end of the file (``tail_records``), and the audit log's totals are kept by a tally that
reads only the bytes appended since its last look (``AuditTally``). A torn last line
(a writer that crashed mid-append) is skipped, as ``audit.py`` and ``run_log.py`` do.
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ledger_gc.audit import AuditLog

_BLOCK = 64 * 1024


def tail_records(path: Path, limit: int) -> list[dict[str, Any]]:
    """The last ``limit`` JSON objects of a JSON-lines file, oldest first ([] if absent)."""
    if limit <= 0:
        return []
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below, after the seek loop
    except FileNotFoundError:
        return []
    with handle:
        end = handle.seek(0, os.SEEK_END)
        data = b""
        position = end
        # Read blocks backwards until the buffer holds more than `limit` line breaks (the
        # first partial line is then dropped) or the start of the file is reached.
        while position > 0 and data.count(b"\n") <= limit:
            step = min(_BLOCK, position)
            position -= step
            handle.seek(position)
            data = handle.read(step) + data
    lines = data.split(b"\n")
    if position > 0:
        lines = lines[1:]  # starts mid-line
    records: list[dict[str, Any]] = []
    for line in reversed(lines):
        if len(records) == limit:
            break
        record = _parse(line)
        if record is not None:
            records.append(record)
    records.reverse()
    return records


def _parse(line: bytes) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        value = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None  # a torn line from a crashed writer
    return value if isinstance(value, dict) else None


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

    def add(self, record: dict[str, Any]) -> None:
        if record.get("status", "deleted") != "deleted":
            return  # a write-ahead "deleting" record: what was freed is its "deleted" twin
        operation = str(record.get("operation") or "unknown")
        size = _int(record.get("bytes"))
        if record.get("recoverable"):
            self.recoverable_bytes[operation] = self.recoverable_bytes.get(operation, 0) + size
            size = 0
        self.bytes[operation] = self.bytes.get(operation, 0) + size
        self.objects[operation] = self.objects.get(operation, 0) + _int(record.get("objects"))
        self.units[operation] = self.units.get(operation, 0) + 1

    def copy(self) -> AuditTotals:
        return AuditTotals(
            dict(self.bytes), dict(self.units), dict(self.objects), dict(self.recoverable_bytes)
        )


class AuditTally:
    """Running totals of the audit log, updated from the bytes appended since last time.

    One instance lives as long as the web server; ``refresh`` costs a ``stat`` when nothing
    was appended. If the file was replaced or truncated (its inode changed or it shrank),
    the tally starts over, so it never double-counts or keeps counting a removed file.
    """

    def __init__(self, state_dir: Path | str) -> None:
        self.path = AuditLog(state_dir).path
        self._lock = threading.Lock()
        self._inode: int | None = None
        self._offset = 0
        self._totals = AuditTotals()

    def refresh(self) -> AuditTotals:
        """The totals as of now (a copy: callers may keep it)."""
        with self._lock:
            try:
                stat = self.path.stat()
            except FileNotFoundError:
                self._inode, self._offset, self._totals = None, 0, AuditTotals()
                return AuditTotals()
            if stat.st_ino != self._inode or stat.st_size < self._offset:
                self._inode, self._offset, self._totals = stat.st_ino, 0, AuditTotals()
            if stat.st_size > self._offset:
                self._read_from_offset()
            return self._totals.copy()

    def _read_from_offset(self) -> None:
        with open(self.path, "rb") as handle:
            handle.seek(self._offset)
            data = handle.read()
        # Only complete lines count; a line still being written is read next time.
        complete = data[: data.rfind(b"\n") + 1]
        for line in complete.split(b"\n"):
            record = _parse(line)
            if record is not None:
                self._totals.add(record)
        self._offset += len(complete)


def audit_totals(state_dir: Path | str) -> AuditTotals:
    """Totals of the whole audit log, read once (for one-shot callers like the CLI)."""
    return AuditTally(state_dir).refresh()


def recent_audit_records(state_dir: Path | str, limit: int) -> list[dict[str, Any]]:
    """The last ``limit`` deletions of the audit log, newest first (the write-ahead
    ``deleting`` records are left out: each is followed by its ``deleted`` record)."""
    records = tail_records(AuditLog(state_dir).path, 2 * limit)
    deleted = [r for r in records if r.get("status", "deleted") == "deleted"]
    return list(reversed(deleted[-limit:]))


def last_matching(path: Path, predicate: Any, *, window: int = 50) -> dict[str, Any] | None:
    """The newest record of a JSON-lines file for which ``predicate`` holds.

    Looks at the last ``window`` lines first, and reads the whole file only when none of
    them matches (a long streak of failed runs), which is rare and then worth the cost.
    """
    recent = tail_records(path, window)
    for record in reversed(recent):
        if predicate(record):
            return record
    if len(recent) < window:
        return None  # that was the whole file
    older: deque[dict[str, Any]] = deque()
    try:
        with open(path, "rb") as handle:
            for line in handle:
                record = _parse(line)
                if record is not None and predicate(record):
                    older.append(record)
                    if len(older) > 1:
                        older.popleft()
    except FileNotFoundError:
        return None
    return older[-1] if older else None


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0
