"""The ``ledgergc_runs`` row of a run summary, as the run log and the one-time import write it."""

from __future__ import annotations

import json
import time
from typing import Any


def summary_row(kind: str, summary: dict[str, Any]) -> dict[str, Any]:
    """The ``ledgergc_runs`` row of a summary."""
    run_id = summary.get("run_id")
    return {
        "kind": kind,
        "run_id": None if run_id is None else str(run_id),
        "recorded_ms": int(time.time() * 1000),
        "summary": json.dumps(summary, sort_keys=True, separators=(",", ":"), default=str),
    }
