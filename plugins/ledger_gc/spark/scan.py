"""The storage scan job: every object under the store's prefix (and, with tiered
storage on, the offload bucket's), listed in parallel on executors or read from an S3
Inventory report, with its totals.

An object of unknown age could never be judged against retention, so a scan with one
is refused (``StorageError``), never returned. The caller records the result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import LedgerGcError, StorageError
from ledger_gc.s3_orphans import reading
from ledger_gc.spark.inventory import read_inventory
from ledger_gc.spark.session import checkpoint, job_error, task_slices

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

#: The scan's rows: an object's key, size and LastModified (ms since the epoch, UTC).
OBJECT_SCHEMA = "key string, size long, last_modified long"


@dataclass(frozen=True)
class ObjectScan:
    """One bucket's scan: its objects (``OBJECT_SCHEMA``), how they were found
    (``described``: source, inventory files, shards; what the scan's record keeps) and
    their totals.

    A listing's ``frame`` is a checkpoint (listing again later would mix two moments);
    an inventory's is the report itself, read from its pinned files.
    """

    frame: DataFrame
    described: dict[str, Any]
    objects: int
    bytes: int


def scan_store(spark: SparkSession, store: ObjectStore, inventory: str | None = None) -> ObjectScan:
    """The store's objects: listed by namespace on executors, or read from ``inventory``
    (validated and pinned; the diff reads the same files again rather than copying them)."""
    if inventory:
        frame, files, fmt = read_inventory(spark, store, inventory)
        described: dict[str, Any] = {
            "source": "inventory",
            "inventory": inventory,
            "inventory_format": fmt,
            "inventory_files": files,
            "shards": 0,
        }
    else:
        shards, loose = reading.discover_shards(store)
        rdd = spark.sparkContext.parallelize(
            shards, task_slices(len(shards), 1, spark)
        ).mapPartitions(lambda part: reading.list_prefixes(store, list(part)))
        frame = spark.createDataFrame(rdd, OBJECT_SCHEMA)
        if loose:
            frame = frame.unionByName(spark.createDataFrame(reading.rows_of(loose), OBJECT_SCHEMA))
        try:
            frame = checkpoint(frame)
        except Exception as exc:
            raise job_error("the storage scan", exc) from exc
        described = {"source": "listing", "inventory": None, "shards": len(shards)}
    try:
        objects, size, undated = _totals(frame)
    except Exception as exc:
        raise job_error("the storage scan", exc) from exc
    if undated:
        raise StorageError(
            f"{undated} object(s) of the scan have no readable last-modified time "
            f"({inventory or 'listing'}); an object of unknown age could never be judged "
            "against retention, so the scan is not used"
        )
    return ObjectScan(frame, described, objects, size)


def scan_offload(
    spark: SparkSession, offload: ObjectStore, inventory: str | None = None
) -> ObjectScan:
    """The offload bucket's objects under its prefix (listed on the executors, one task
    per shard: the uuid's first hex digit, and the keys outside those; or an S3
    Inventory of that bucket), kept as a checkpoint either way."""
    described: dict[str, Any] = {
        "bucket": offload.bucket,
        "prefix": offload.prefix,
        "source": "inventory" if inventory else "listing",
        "inventory": inventory,
    }
    try:
        if inventory:
            frame, files, fmt = read_inventory(spark, offload, inventory)
            described.update(inventory_format=fmt, inventory_files=files)
        else:
            shards = reading.offload_shards(offload)
            rdd = spark.sparkContext.parallelize(
                shards, task_slices(len(shards), 1, spark)
            ).mapPartitions(lambda part: reading.list_offload_shards(offload, list(part)))
            frame = spark.createDataFrame(rdd, OBJECT_SCHEMA)
            described["shards"] = len(shards)
        kept = checkpoint(frame)
        objects, size, undated = _totals(kept)
    except LedgerGcError:
        raise
    except Exception as exc:
        raise job_error(f"the scan of offload bucket {offload.bucket}", exc) from exc
    if undated:
        kept.unpersist()
        raise StorageError(
            f"{undated} object(s) of offload bucket {offload.bucket} have no "
            "readable last-modified time; the scan is not used"
        )
    described.update(objects=objects, bytes=size)
    return ObjectScan(kept, described, objects, size)


def _totals(frame: DataFrame) -> tuple[int, int, int]:
    """Objects, bytes, and objects without a LastModified (one pass)."""
    from pyspark.sql import functions as F

    totals = frame.agg(
        F.count("*").alias("n"),
        F.sum("size").alias("b"),
        F.count_if(F.col("last_modified").isNull()).alias("undated"),
    ).collect()[0]
    return int(totals["n"]), int(totals["b"] or 0), int(totals["undated"])
