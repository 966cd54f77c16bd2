"""Wall-clock time in milliseconds since the epoch, the unit of every timestamp in the
store (LedgerInfo.timestamp, markers' markedAt, the registry). Code that decides by time
takes a ``clock`` argument defaulting to this, so tests can move time."""

from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)
