"""The distributed delete job: ``deleting.recheck_and_delete`` over executors, for a
cycle with many registry entries due (each task its own ZooKeeper session and S3
client, as in one process).

Its I/O is the delete path's own (the live re-check, the audit record written ahead of
each delete, the bulk delete); which entries are due and what becomes of them in the
registry is the caller's (``cycle.step_delete``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from ledger_gc.metadata import read_budget
from ledger_gc.rules.orphans.outcomes import STOPPED, RecheckResult, skipped
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.s3_orphans.deleting import recheck_and_delete
from ledger_gc.spark.session import ReadsParam, job_error, job_group, zk_share

if TYPE_CHECKING:
    from pyspark.accumulators import Accumulator
    from pyspark.sql import SparkSession

    from ledger_gc.orphan_source import DeleteRequest

#: Registry entries re-checked and deleted per executor task.
ENTRIES_PER_TASK = 200


def distributed_delete(
    spark: SparkSession,
    request: DeleteRequest,
    entries: list[RegistryEntry],
    *,
    per_task: int = ENTRIES_PER_TASK,
) -> list[RecheckResult]:
    """``deleting.recheck_and_delete`` over executors, ``per_task`` entries per task.

    The function never raises for one entry's trouble (it reports it), so a Spark task
    retry cannot repeat a half-done batch blindly: a retried batch re-checks again. The
    tasks get the request's plain values only: its stop check (the driver's delete lock,
    its signals) cannot reach them, so it is asked here before the job starts.
    """
    if request.should_stop():
        return [skipped(entry, STOPPED) for entry in entries]
    run_id, now_ms = request.run_id, request.now_ms
    deleting, ours = request.deleting, request.ours
    slices = max(1, -(-len(entries) // per_task))
    endpoints = request.endpoints
    # Each task's share of the read budget, pickled with it.
    endpoints = replace(endpoints, zk=zk_share(endpoints.zk, slices, spark))
    reads: Accumulator[dict[int, int]] = spark.sparkContext.accumulator(
        {},
        ReadsParam(),  # type: ignore[arg-type]
    )

    def recheck(part: Iterable[RegistryEntry]) -> list[RecheckResult]:
        mark = read_budget.METER.mark()
        done = recheck_and_delete(
            endpoints,
            list(part),
            run_id=run_id,
            now_ms=now_ms,
            deleting=deleting,
            ours=ours,
        )
        reads.add(read_budget.METER.since(mark))
        return done

    rdd = spark.sparkContext.parallelize(entries, slices).mapPartitions(recheck)
    verb = "re-check and delete" if deleting else "re-check (dry run)"
    with job_group(spark, run_id, "delete", f"{verb} {len(entries)} registered orphans"):
        try:
            results = rdd.collect()
        except Exception as exc:
            raise job_error("the distributed delete", exc) from exc
    request.executor_reads.add(reads.value)
    return results
