"""Shared start-up of the ledger-gc ``spark-submit`` entry points (``orphan_*.py``).

Puts the repository's ``plugins/`` on the path when ``ledger_gc`` is not installed (a
checkout submitted as is), then hands over to ``ledger_gc.orphans.apps``.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"


def main(step: str, argv: Sequence[str] | None = None) -> int:
    if importlib.util.find_spec("ledger_gc") is None:
        sys.path.insert(0, str(PLUGINS))
    from ledger_gc.orphans.apps import run_app

    return run_app(step, argv)
