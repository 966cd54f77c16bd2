"""Summaries of past runs (trim, orphan cycle), one JSON line per run in the state dir.

The trim and the orphan cycle append a summary when they finish; ``ledgergc status``,
the metrics and the Airflow view read them to show trends and last-run times without
touching ZooKeeper or S3.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

TRIM = "trim"
ORPHANS = "orphans"


def run_log_path(state_dir: Path | str, kind: str) -> Path:
    return Path(state_dir) / kind / "runs.jsonl"


def append_run(state_dir: Path | str, kind: str, summary: dict[str, Any]) -> None:
    path = run_log_path(state_dir, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(summary, sort_keys=True, separators=(",", ":"), default=str) + "\n"
    with open(path, "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_runs(state_dir: Path | str, kind: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Summaries oldest first (the last ``limit`` when given); a torn line is skipped."""
    path = run_log_path(state_dir, kind)
    if not path.exists():
        return []
    runs = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                runs.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return runs[-limit:] if limit else runs
