"""Times and ages for people, shared by the page and the plain ``ledgergc status``."""

from __future__ import annotations

import time


def fmt_time(ms: int | None) -> str:
    """A UTC timestamp for people (``-`` when unknown)."""
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def fmt_age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 0:
        return "in the future (clock skew?)"
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds} s"
