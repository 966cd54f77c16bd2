"""S3 Inventory reports as the scan's objects: (key, size, last_modified ms) rows of the
store's prefix, in Parquet or S3's CSV layout, read by Spark directly (copying 10M rows
into a listing would only cost)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import LedgerGcError, StorageError
from ledger_gc.spark.session import job_error

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def inventory_format(path: str) -> str:
    """``parquet`` or ``csv``, from the name of the report or of the files in its folder."""
    lowered = path.lower().rstrip("/")
    if lowered.endswith(".parquet"):
        return "parquet"
    if lowered.endswith((".csv", ".csv.gz")):
        return "csv"
    local = Path(path.removeprefix("file://"))
    if local.is_dir():
        names = [p.name.lower() for p in local.rglob("*") if p.is_file()]
        if any(n.endswith(".parquet") for n in names):
            return "parquet"
        if any(n.endswith((".csv", ".csv.gz")) for n in names):
            return "csv"
    raise StorageError(
        f"inventory {path}: not recognised as Parquet or CSV (name the file .parquet, .csv or "
        ".csv.gz, or point at a folder of them)"
    )


def read_inventory(
    spark: SparkSession, store: ObjectStore, path: str, files: list[str] | None = None
) -> tuple[DataFrame, list[str], str]:
    """An S3 Inventory report as (key, size, last_modified ms) rows of the bucket and
    prefix of ``store`` (the block store, or tiered storage); also the data files
    it was read from (pinned: the scan's record names them, and the diff reads exactly
    those) and its format.

    Parquet: columns ``bucket`` (optional), ``key``, ``size``, ``last_modified_date``
    (timestamp, ISO string or epoch ms). CSV: S3 Inventory's headerless layout
    ``bucket, key, size, last_modified_date`` with URL-encoded keys (as S3 writes them).
    Rows of another bucket, outside the prefix, or delete markers are dropped.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fmt = inventory_format(path)
    source = files or [path]
    try:
        # Only the data files of a folder (S3 Inventory puts its manifests beside them).
        if fmt == "parquet":
            frame = spark.read.parquet(
                *source, pathGlobFilter="*.parquet", recursiveFileLookup=True
            )
            key = F.col("key")
        else:
            frame = spark.read.csv(
                source,
                schema="bucket string, key string, size long, last_modified_date string",
                pathGlobFilter="*.{csv,csv.gz}",
                recursiveFileLookup=True,
            )
            key = F.url_decode(F.col("key"))
        columns = {name.lower(): name for name in frame.columns}
        missing = {"key", "size", "last_modified_date"} - set(columns)
        if missing:
            raise StorageError(
                f"inventory {path} lacks column(s) {', '.join(sorted(missing))}; S3 Inventory "
                "must include Size and LastModifiedDate"
            )
        modified = frame.schema[columns["last_modified_date"]].dataType
        lm = F.col(columns["last_modified_date"])
        if isinstance(modified, T.TimestampType | T.TimestampNTZType):
            lm = F.unix_millis(lm)
        elif isinstance(modified, T.StringType):
            lm = F.unix_millis(lm.cast("timestamp"))
        else:
            lm = lm.cast("long")
        condition = F.lit(True)
        if "bucket" in columns:
            condition = condition & (F.col(columns["bucket"]) == store.bucket)
        if "is_delete_marker" in columns:
            condition = condition & ~F.coalesce(F.col(columns["is_delete_marker"]), F.lit(False))
        if "is_latest" in columns:
            condition = condition & F.coalesce(F.col(columns["is_latest"]), F.lit(True))
        result = (
            frame.where(condition)
            .select(
                key.alias("key"),
                F.coalesce(F.col(columns["size"]).cast("long"), F.lit(0)).alias("size"),
                lm.alias("last_modified"),
            )
            .where(F.col("key").startswith(store.key_prefix))
        )
        pinned = sorted(frame.inputFiles())
    except LedgerGcError:
        raise
    except Exception as exc:
        raise job_error(f"reading inventory {path}", exc) from exc
    return result, pinned, fmt
