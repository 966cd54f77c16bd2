"""A survey step inside another counts for itself only (``SurveyCost.step``): the
driver alone classifies each part as the cache's save takes its outcome, so the
"ledgers" step runs inside "cache_save"; its seconds and reads are not the save's too,
and no read is counted twice in the total or the peak."""

from __future__ import annotations

import time

from ledger_gc.bookkeeper.cost import SurveyCost
from ledger_gc.metadata.read_budget import METER


def test_a_step_inside_another_counts_for_itself_only() -> None:
    cost = SurveyCost()
    with cost.step("cache_save"):
        METER.count(3)
        for _ in range(2):
            with cost.step("ledgers"):
                METER.count(10)
                time.sleep(0.05)
    assert cost.reads_by_step == {"cache_save": 3, "ledgers": 20}
    assert cost.reads.total == 23
    assert cost.seconds["ledgers"] >= 0.1 > cost.seconds["cache_save"] >= 0
    with cost.step("checks"):
        METER.count(1)
    assert cost.reads.total == 24
