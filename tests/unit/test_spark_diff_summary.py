"""The diff's one action returns summary rows (``spark.diff._summary``): per namespace
and class, and per ledger for orphans. Turning them into the ``DiffResult`` is plain
Python, tested here without Spark (the Spark side is ``test_orphans_spark_diff``)."""

from __future__ import annotations

from typing import Any

from ledger_gc.rules.orphans.classify import (
    FOREIGN,
    LIVE,
    MARKED,
    NO_NAMESPACE,
    ORPHAN_LEDGER,
    ORPHAN_PARTITION,
    Candidate,
)
from ledger_gc.spark.diff import _result

ML = "t1/ns1/persistent/orders"
GONE = "t1/ns1/persistent/gone"


def _row(
    namespace: str,
    name: str,
    objects: int,
    size: int,
    *,
    units: int = 1,
    ml: str | None = None,
    ledger: int | None = None,
    newest: int = 0,
    oldest: int = 0,
    high: int | None = None,
) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "class": name,
        "orphan_ml": ml,
        "orphan_ledger": ledger,
        "units": units,
        "objects": objects,
        "bytes": size,
        "newest_ms": newest,
        "oldest_ms": oldest,
        "high": high,
    }


def test_summary_rows_make_the_totals_and_the_candidates() -> None:
    rows = [
        _row("t1/ns1", LIVE, 20, 2000, units=2, high=12),
        _row("t1/ns1", MARKED, 3, 300, high=12),
        _row("t1/ns1", ORPHAN_LEDGER, 2, 20, ml=ML, ledger=5, newest=50, oldest=40, high=12),
        _row("t1/ns1", ORPHAN_LEDGER, 1, 10, ml=ML, ledger=3, newest=30, oldest=30, high=12),
        _row("t1/ns1", ORPHAN_PARTITION, 4, 40, ml=GONE, ledger=7, newest=70, oldest=60),
        _row("t1/ns1", ORPHAN_PARTITION, 1, 10, ml=GONE, ledger=9, newest=90, oldest=90),
        _row("t1/ns1", FOREIGN, 2, 5, units=2),
        _row(NO_NAMESPACE, FOREIGN, 1, 1),
    ]

    diff = _result(rows, managed_ledgers=1)

    result = diff.result
    assert result.candidates == [
        Candidate(ORPHAN_LEDGER, ML, 3, 1, 10, 30, 30),
        Candidate(ORPHAN_LEDGER, ML, 5, 2, 20, 50, 40),
        Candidate(ORPHAN_PARTITION, GONE, None, 5, 50, 90, 60, 9),
    ]
    assert diff.ml_high == {ML: 12}
    totals = {name: totals.to_dict() for name, totals in result.classes.items()}
    assert totals[LIVE] == {"objects": 20, "bytes": 2000, "units": 2}
    assert totals[ORPHAN_LEDGER] == {"objects": 3, "bytes": 30, "units": 2}
    # A partition's unit is its managed ledger, however many ledger directories it has.
    assert totals[ORPHAN_PARTITION] == {"objects": 5, "bytes": 50, "units": 1}
    assert totals[FOREIGN] == {"objects": 3, "bytes": 6, "units": 0}
    assert result.namespaces[NO_NAMESPACE][FOREIGN].objects == 1
    assert result.block_objects == 31
    assert (result.objects, result.bytes) == (34, 2386)
    assert result.managed_ledgers == 1


def test_a_managed_ledger_that_lists_no_ledger_has_no_high() -> None:
    rows = [_row("t1/ns1", ORPHAN_LEDGER, 1, 1, ml=ML, ledger=4, newest=1, oldest=1)]

    assert _result(rows, managed_ledgers=1).ml_high == {ML: None}
