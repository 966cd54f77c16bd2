"""The metadata snapshot job: every managed ledger's ledger ids and markers, read by
executors in shards (each task one ZooKeeper session with pipelined gets).

The caller lists the names (after a ``sync``) and records the result; the job reads,
checkpoints and counts. Any read error fails the job, so a partial snapshot is never
returned: it would turn live data into "orphans".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger_gc.config.endpoints import ZkEndpoint
from ledger_gc.metadata import read_budget
from ledger_gc.s3_orphans import reading
from ledger_gc.spark.session import (
    ReadsParam,
    SparkJobError,
    checkpoint,
    job_error,
    task_slices,
    zk_share,
)

if TYPE_CHECKING:
    from pyspark.accumulators import Accumulator
    from pyspark.sql import DataFrame, SparkSession

#: The snapshot's rows: one ``ml`` row per managed ledger, one per listed or marked ledger.
SNAPSHOT_SCHEMA = (
    "entry_type string, ml_name string, ledger_id long, offload_uuid string, offload_place string"
)
#: Managed ledgers read per executor task (one ZooKeeper session, pipelined gets).
NAMES_PER_SHARD = 2000


@dataclass(frozen=True)
class SnapshotRead:
    """The snapshot (a checkpoint, ``SNAPSHOT_SCHEMA``), its rows by entry type, and the
    tasks that read it."""

    frame: DataFrame
    counts: dict[str, int]
    shards: int
    zk_reads: dict[int, int]  # znodes its tasks read, per second

    def manifest_counts(self) -> dict[str, int]:
        """The counts as the snapshot's record names them."""
        return {
            "managed_ledgers": self.counts.get(reading.ML_ROW, 0),
            "listed_ledgers": self.counts.get(reading.LISTED_ROW, 0),
            "markers": self.counts.get(reading.MARKED_ROW, 0),
            "shards": self.shards,
        }


def read_snapshot(
    spark: SparkSession,
    zk: ZkEndpoint,
    names: list[str],
    *,
    names_per_shard: int = NAMES_PER_SHARD,
) -> SnapshotRead:
    """Read the managed ledgers ``names`` on executors, ``names_per_shard`` per task,
    each task over its own session to ``zk`` (pickled with the task)."""
    slices = task_slices(len(names), names_per_shard, spark)
    # Rows the executors produced, against rows the driver reads back: a part file that
    # stays on an executor's own disk (scratch that is not shared storage) would make the
    # snapshot silently partial, and a partial snapshot turns live data into "orphans".
    produced = spark.sparkContext.accumulator(0)
    reads: Accumulator[dict[int, int]] = spark.sparkContext.accumulator(
        {},
        ReadsParam(),  # type: ignore[arg-type]
    )
    mine = zk_share(zk, slices, spark)  # each task's share of the read budget

    def read_shard(part: Iterable[str]) -> list[Any]:
        mark = read_budget.METER.mark()
        rows = reading.read_managed_ledgers(mine, list(part))
        produced.add(len(rows))
        reads.add(read_budget.METER.since(mark))
        return rows

    rdd = spark.sparkContext.parallelize(names, slices).mapPartitions(read_shard)
    try:
        kept = checkpoint(spark.createDataFrame(rdd, SNAPSHOT_SCHEMA))
        counts = {
            row["entry_type"]: row["count"] for row in kept.groupBy("entry_type").count().collect()
        }
    except Exception as exc:
        raise job_error("the metadata snapshot", exc) from exc
    if sum(counts.values()) != produced.value:
        # (A retried task can count twice: that also stops here, which fails closed.)
        kept.unpersist()
        raise SparkJobError(
            f"the metadata snapshot kept {sum(counts.values())} of the {produced.value} "
            "rows its executors read; a partial snapshot would make live data look "
            "orphaned, so nothing was decided"
        )
    return SnapshotRead(kept, counts, slices, dict(reads.value))
