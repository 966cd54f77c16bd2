"""A driver of the suite's Spark standalone cluster (``test_bookkeeper_scale``): the
BookKeeper survey of the tree the test built, as a cycle runs it, on the cluster's
executors in parts of ``part`` ledgers (argv[1]), then on this process alone; prints
one JSON line per survey: its classes, candidates and cost, and this process's peak
resident memory. A process of its own: a test process may hold a local SparkContext,
and one process has one."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from ledger_gc.bookkeeper import survey as bk_survey
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.spark.session import local_session


def _peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _line(label: str, found: bk_survey.BookKeeperSurvey | None) -> dict[str, Any]:
    assert found is not None
    manifest = found.to_manifest()
    return {
        "label": label,
        "classes": {name: totals["ledgers"] for name, totals in manifest["classes"].items()},
        "held_reasons": manifest["held_reasons"],
        "candidates": sorted((c["ledger_id"], c["target_class"]) for c in found.candidates),
        "ledgers": found.ledgers,
        "found": len(found.found),
        "missing_listed": len(found.missing_listed),
        "above_counter": found.above_counter,
        "records_read": found.cost.records_read,
        "records_cached": found.cost.records_cached,
        "executor_seconds": found.cost.task_seconds,
        "executor_tasks": found.cost.executor_tasks,
        "peak_rss_mib": round(_peak_rss_mib(), 1),
    }


def main() -> int:
    bk_survey.PART_LEDGERS = int(sys.argv[1])
    bk_survey.SPARK_OVER_SECONDS = 0.0  # (a small tree: on the executors all the same)
    endpoints = resolve(Settings.from_env())
    spark = local_session("ledger-gc-bk-scale")
    try:
        for label in ("first", "second"):  # the second from the record cache
            print(json.dumps(_line(label, bk_survey.survey(endpoints, spark=spark))), flush=True)
    finally:
        spark.stop()
    # This process alone, every record read (the cache off): what the executors must match.
    alone = replace(endpoints, policy=replace(endpoints.policy, bk_record_cache=False))
    print(json.dumps(_line("driver", bk_survey.survey(alone))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
