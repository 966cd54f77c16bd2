"""A wrong clock on the host that runs a cycle (issue 11, item 2).

(a) A clock two days slow during one cycle registers orphans as first seen two days
ago; the next cycle, a minute later with a correct clock, must not delete them. (b) A
clock ten days fast during one cycle must not make every later cycle refuse as
"stale-run" for ten days, nor hold deletion back that long. Time decisions rest on the
servers' clocks (ZooKeeper's znode times, S3's Date and LastModified), and the order of
runs on a ZooKeeper sequence; the host's clock is only compared with them and warned
about. ``later(hours)`` moves the whole world (host and servers) forward instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from demo_leaks import plant_leaks
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans.cycle import run_orphan_cycle

pytestmark = pytest.mark.spark

ML = "public/default/persistent/orders"
DAY_MS = 24 * 3600 * 1000


def _off(ms: int) -> Callable[[], int]:
    return lambda: int(time.time() * 1000) + ms


def test_a_slow_clock_at_registration_does_not_shorten_the_grace_window(
    settings: Settings, store_kit: Any, spark: Any
) -> None:
    enabled = settings.with_overrides(delete_enabled=True, retention_seconds=0)  # grace: 1 day
    store_kit.managed_ledger(ML, entries=60, size=4000)
    plant_leaks(enabled, ml_name=ML)
    before = store_kit.keys()

    slow = run_orphan_cycle(resolve(enabled), spark=spark, clock=_off(-2 * DAY_MS)).to_dict()
    correct = run_orphan_cycle(resolve(enabled), spark=spark).to_dict()

    assert slow["phases"]["new"]["count"] == 3
    assert any("behind" in w for w in slow["warnings"]), slow["warnings"]
    assert correct["status"] == "ok" and correct["deleted"] == []
    assert correct["phases"]["waiting_grace"]["count"] == 3
    assert store_kit.keys() == before


def test_a_fast_clock_neither_blocks_later_cycles_nor_removal(
    settings: Settings, store_kit: Any, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    enabled = settings.with_overrides(
        delete_enabled=True, grace_seconds=3600, retention_seconds=3600
    )
    store_kit.managed_ledger(ML, entries=60, size=4000)
    planted = plant_leaks(enabled, ml_name=ML)
    leaks = {leak["prefix"] for leak in planted["orphan_ledgers"] + planted["orphan_partitions"]}

    fast = run_orphan_cycle(resolve(enabled), spark=spark, clock=_off(10 * DAY_MS)).to_dict()
    next_cycle = run_orphan_cycle(resolve(enabled), spark=spark).to_dict()

    assert fast["status"] == "ok" and fast["deleted"] == []  # not past retention either
    assert any("ahead" in w for w in fast["warnings"]), fast["warnings"]
    assert next_cycle["status"] == "ok", next_cycle["refusals"]
    assert next_cycle["refusals"] == [] and next_cycle["deleted"] == []

    two_hours_on = run_orphan_cycle(resolve(enabled), spark=spark, **later(2)).to_dict()

    assert two_hours_on["status"] == "ok", two_hours_on["refusals"]
    assert {d["prefix"] for d in two_hours_on["deleted"]} == leaks


def test_a_reset_run_sequence_does_not_make_every_later_cycle_stale(
    settings: Settings, store_kit: Any, spark: Any, zk_client: Any
) -> None:
    """The order of runs is ZooKeeper's sequence under /ledger-gc/ticks. That counter
    starts again when its parent is made anew: a failover to a DR ZooKeeper, metadata
    copied to a new ensemble, an operator removing /ledger-gc. Before the fix every
    later cycle was refused as "stale-run" (for as many cycles as the old counter was
    ahead), with a reason that said its scan was older when it was newer."""
    from ledger_gc.orphans.witness import TICKS_PATH

    store_kit.managed_ledger(ML, entries=60, size=4000)
    plant_leaks(settings, ml_name=ML)
    for _ in range(30):  # a store with some history: the counter is well on
        zk_client.delete(zk_client.create(f"{TICKS_PATH}/t-", b"", sequence=True, makepath=True))
    first = run_orphan_cycle(resolve(settings), spark=spark).to_dict()
    zk_client.delete(TICKS_PATH)  # the counter starts again

    after = run_orphan_cycle(resolve(settings), spark=spark).to_dict()

    assert first["status"] == "ok" and first["phases"]["new"]["count"] == 3
    assert after["refusals"] == [], after["refusals"]
    assert after["status"] == "ok" and after["phases"]["waiting_grace"]["count"] == 3


def test_a_scan_older_than_the_one_applied_is_still_refused(
    settings: Settings, store_kit: Any, spark: Any
) -> None:
    """The other side of the rule above: a run whose snapshot came first (by ZooKeeper's
    sequence *and* its clock) but reaches phases after a newer run applied its scan (a
    delayed DAG task) is not applied."""
    from ledger_gc.orphans import cycle, survey_steps

    store_kit.managed_ledger(ML, entries=60, size=4000)
    plant_leaks(settings, ml_name=ML)
    survey_steps.step_snapshot(resolve(settings), "delayed", spark)
    survey_steps.step_scan(resolve(settings), "delayed", spark)
    survey_steps.step_diff(resolve(settings), "delayed", spark)
    newer = run_orphan_cycle(resolve(settings), spark=spark).to_dict()

    late = cycle.step_phases(resolve(settings), "delayed")

    assert newer["status"] == "ok" and newer["refusals"] == []
    assert late.applied is False
    assert [r["guard"] for r in late.refusals] == ["stale-run"]
