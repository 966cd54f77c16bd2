"""Orphans younger than retention are kept, and deleted by a later cycle once old enough.

DESIGN.md: deletion needs the newest object to be older than ``retention`` (default 7
days); anything that fails the age test stays registered and is retried. The cycles
here run with a clock moved forward instead of waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from demo_leaks import plant_leaks
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry

pytestmark = pytest.mark.spark

ML = "public/default/persistent/orders"


def test_young_orphans_wait_for_retention_then_go(
    settings: Settings, store_kit: Any, spark: Any, later: Callable[[float], Any]
) -> None:
    settings = settings.with_overrides(delete_enabled=True, grace_seconds=0, retention_seconds=7200)
    store_kit.managed_ledger(ML, entries=40, size=4000)
    planted = plant_leaks(settings, ml_name=ML)
    leaks = {leak["prefix"] for leak in planted["orphan_ledgers"] + planted["orphan_partitions"]}

    now = run_orphan_cycle(resolve(settings), spark=spark).to_dict()
    in_an_hour = run_orphan_cycle(resolve(settings), spark=spark, **later(1)).to_dict()

    for report in (now, in_an_hour):
        assert report["deleted"] == []
        assert report["phases"]["waiting_retention"]["count"] == 3
        assert {w["phase"] for w in report["waiting"]} == {"waiting-retention"}
    assert all(w["until_ms"] > in_an_hour["finished_ms"] for w in in_an_hour["waiting"]), (
        "the report says until when each one waits"
    )
    assert all(store_kit.keys(prefix) for prefix in leaks)

    in_three_hours = run_orphan_cycle(resolve(settings), spark=spark, **later(3)).to_dict()

    assert {d["prefix"] for d in in_three_hours["deleted"]} == leaks
    assert not any(store_kit.keys(prefix) for prefix in leaks)
    assert OrphanRegistry(settings).entries() == {}
