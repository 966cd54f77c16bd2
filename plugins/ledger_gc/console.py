"""What every ``ledgergc`` subcommand shares: exit codes, JSON output, sizes for people.

A leaf module (it imports nothing of ledger-gc), so the subcommands and the observability
modules use it without importing ``cli``, which imports them: no import cycle.
"""

from __future__ import annotations

import json
import sys
from typing import Any

EXIT_OK = 0
EXIT_INCOMPLETE = 1  # ran, but left work undone (e.g. markers whose delete failed)
EXIT_ERROR = 2  # bad input or a failure before anything destructive: one line on stderr


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def human_bytes(count: int | None) -> str:
    if count is None:
        return "-"
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"
