"""The Spark side of an orphan cycle: snapshot, scan, diff and distributed deletion.

Every function takes a ``SparkSession`` (local in tests and the CLI, any cluster under
``spark-submit``) and the run's scratch ``RunPaths``; ``spark_apps/*.py`` are thin entry
points over them. Executors do the I/O with the library itself (``reading``,
``deleting``), each over its own ZooKeeper session or S3 client. The library reaches them
one way, as Spark expects: the zip ``library_zip`` builds, given to spark-submit as
``py_files`` (the DAG's operator) or as ``spark.submit.pyFiles`` (``local_session``), so a
cluster's executors need only the pinned packages (kazoo, boto3, protobuf). Each step
names its Spark jobs (``job_group``: the Spark UI says which step of which run runs).

Scale rule (issue 6: a 10M-object inventory diff in minutes with a small driver): the
object list is never collected to the driver. The diff is a Spark aggregate (per ledger,
then joined with the snapshot); only the orphan candidates, per-namespace totals and a
few sample foreign keys come back.

Scratch (``layout``, read back within the same application): ``snapshot/`` (entry_type,
ml_name, ledger_id, offload_uuid) and ``scan/`` (key, size, last_modified ms;
``offload-scan/`` the same for the offload bucket when tiered storage is on) as Parquet
datasets. Records (``run_steps``, in the state store, written last): each step's
manifest; the diff's candidates and the snapshot's facts the phases step needs.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger_gc.clock import now_ms
from ledger_gc.errors import LedgerGcError, MetadataUnavailableError, StorageError
from ledger_gc.library_zip import library_zip
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.orphans import cluster_tags, reading, run_steps
from ledger_gc.orphans.deleting import recheck_and_delete
from ledger_gc.orphans.layout import OFFLOAD_SCAN, SCAN, SNAPSHOT, RunPaths
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.orphans.run_steps import RunSteps
from ledger_gc.rules.orphans import classify, segments
from ledger_gc.rules.orphans.classify import (
    FOREIGN,
    LIVE,
    LIVE_SEGMENT,
    MARKED,
    NO_NAMESPACE,
    OFFLOAD_FOREIGN,
    ORPHAN_LEDGER,
    ORPHAN_PARTITION,
    ORPHAN_SEGMENT,
    Candidate,
    DiffResult,
)
from ledger_gc.rules.orphans.outcomes import RecheckResult
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.rules.storage import keys
from ledger_gc.settings import Settings
from ledger_gc.storage.s3 import offload_settings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

SNAPSHOT_SCHEMA = "entry_type string, ml_name string, ledger_id long, offload_uuid string"
OBJECT_SCHEMA = "key string, size long, last_modified long"
#: Managed ledgers read per executor task (one ZooKeeper session, pipelined gets).
NAMES_PER_SHARD = 2000
#: Registry entries re-checked and deleted per executor task.
ENTRIES_PER_TASK = 200
MAX_FOREIGN_SAMPLES = 50


class SparkJobError(LedgerGcError):
    """A Spark job of the orphan cycle failed; its output was not kept."""


# --- sessions --------------------------------------------------------------------------


#: Where a cycle run outside ``spark-submit`` (the CLI, the demo) computes by default.
DEFAULT_MASTER = "local[*]"


def submitted_master(submit_args: str) -> str | None:
    """The ``--master`` among spark-submit arguments (``PYSPARK_SUBMIT_ARGS``), if any."""
    import shlex

    words = shlex.split(submit_args)
    for i, word in enumerate(words):
        if word == "--master" and i + 1 < len(words):
            return words[i + 1]
        if word.startswith("--master="):
            return word.split("=", 1)[1]
    return None


def local_session(app_name: str = "ledger-gc-orphans", master: str | None = None) -> SparkSession:
    """The SparkSession of a cycle run outside ``spark-submit`` (the CLI, tests): no UI,
    and what ``configure_session`` gives every cycle's session.

    On ``master`` if given, else on the master ``PYSPARK_SUBMIT_ARGS`` names (PySpark's
    own way to point a Python program at a cluster: ``--master spark://host:7077 ...
    pyspark-shell``), else ``local[*]``. Executors run ``PYSPARK_PYTHON`` (default
    ``python3``); unless it is set, use this interpreter, the one that has kazoo and boto3.
    They get the library as spark-submit's ``py_files`` would give it
    (``spark.submit.pyFiles``): the same zip, the one way it reaches executors.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(
            master or submitted_master(os.environ.get("PYSPARK_SUBMIT_ARGS", "")) or DEFAULT_MASTER
        )
        .appName(app_name)
        .config("spark.submit.pyFiles", str(library_zip()))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    configure_session(spark)
    return spark


#: The fewest shuffle partitions a cycle's session gets (unless its submitter chose).
MIN_SHUFFLE_PARTITIONS = 8


def configure_session(spark: SparkSession) -> None:
    """What every session of a cycle needs, however it was made (``local_session``, or
    ``spark-submit`` of the apps with the task's conf).

    * Times in UTC: an inventory's zone-less LastModified (a string, a TIMESTAMP_NTZ
      column) is UTC as S3 writes it; read in the JVM's default zone (a worker's local
      time) it would move every object's age by hours, and retention with it.
    * ``spark.sql.shuffle.partitions``, unless the submitter set it: twice the cores the
      application has, at least ``MIN_SHUFFLE_PARTITIONS``. Spark's default of 200 costs
      a small store seconds per shuffle (a survey has a dozen; AQE merges partitions
      after a shuffle, not before it), and a cluster's cores are what scales it.
    """
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    context = spark.sparkContext
    if not context.getConf().contains("spark.sql.shuffle.partitions"):
        partitions = max(MIN_SHUFFLE_PARTITIONS, 2 * context.defaultParallelism)
        spark.conf.set("spark.sql.shuffle.partitions", str(partitions))


@contextmanager
def job_group(spark: SparkSession, run_id: str, step: str, description: str) -> Iterator[None]:
    """Name the Spark jobs of one step (``ledgergc-<step>``: the Spark UI's job group,
    with a description that says what runs for which cycle)."""
    context = spark.sparkContext
    context.setJobGroup(f"ledgergc-{step}", f"ledger-gc {step}: {description} (run {run_id})")
    try:
        yield
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        context.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]


def _slices(count: int, per_slice: int, spark: SparkSession, cap: int = 1024) -> int:
    wanted = -(-count // per_slice) if count else 1
    return max(1, min(cap, max(wanted, min(count, spark.sparkContext.defaultParallelism))))


_ERROR_LINE = re.compile(r"ledger_gc\.errors\.(\w+): (.+)")


def _job_error(what: str, exc: Exception) -> LedgerGcError:
    """Turn a failed Spark job into the library error an executor raised, if any."""
    text = str(exc)
    found = _ERROR_LINE.findall(text)
    if found:
        name, message = found[-1]
        cls: type[LedgerGcError] = SparkJobError
        if name == "MetadataUnavailableError":
            cls = MetadataUnavailableError
        elif name == "StorageError":
            cls = StorageError
        return cls(f"{what} failed on an executor: {message.strip()}; its output was discarded")
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return SparkJobError(f"{what} failed: {first[:500]}; its output was discarded")


# --- what the survey's steps hand each other ----------------------------------------------

# The snapshot and scans of a survey, kept on the executors (``hold``) for the rest of the
# Spark application that made them: never files on one host's disk, which the executors
# of a cluster on several hosts could not all reach.
_held: dict[tuple[RunPaths, str], DataFrame] = {}
_held_lock = threading.Lock()


def hold(run: RunPaths, step: str, frame: DataFrame) -> DataFrame:
    """Compute ``frame`` now and keep its rows in the executors' block managers (memory,
    spilling to their local disk) for the later steps of this application.

    A local checkpoint cuts the lineage: rows lost with an executor are not silently
    recomputed (a second listing or metadata read at another time, mixed with the
    first); the job that needs them fails instead, and nothing is decided."""
    kept = frame.localCheckpoint(eager=True)
    with _held_lock:
        previous = _held.pop((run, step), None)
        _held[(run, step)] = kept
    if previous is not None:
        previous.unpersist()
    return kept


def held(spark: SparkSession, run: RunPaths, step: str) -> DataFrame:
    """What ``hold`` kept for ``run``'s ``step`` in this application. Never a file: a
    dataset left on disk by another run or version could be stale, and a stale snapshot
    makes live data look orphaned."""
    with _held_lock:
        kept = _held.get((run, step))
    if kept is None:
        raise SparkJobError(
            f"the {step} of run {run.run_id} is not in this Spark application: a survey's "
            "snapshot, scan and diff run in one application (cycle.step_survey); nothing "
            "was decided"
        )
    return kept


def release(run: RunPaths) -> None:
    """Forget what ``hold`` kept for ``run`` (the survey's end); Spark frees the blocks of
    a local checkpoint once nothing refers to them (its context cleaner)."""
    with _held_lock:
        mine = [key for key in _held if key[0] == run]
        frames = [_held.pop(key) for key in mine]
    for frame in frames:
        frame.unpersist()


# --- snapshot --------------------------------------------------------------------------


def snapshot_job(
    spark: SparkSession,
    settings: Settings,
    run: RunPaths,
    *,
    clock: Callable[[], int] = now_ms,
    names_per_shard: int = NAMES_PER_SHARD,
) -> dict[str, Any]:
    """Read every managed ledger, its ledger ids and markers, sharded over executors.

    The driver lists the managed ledgers (after ``sync``); each executor task reads its
    share with pipelined gets. Any read error fails the job and no manifest is written,
    so the diff never sees a partial snapshot.
    """
    steps = RunSteps(settings, run.run_id)
    steps.start_step(run_steps.SNAPSHOT)
    started = clock()
    with MetadataStore.open(settings) as store:
        names = store.list_managed_ledgers(sync=True)
    slices = _slices(len(names), names_per_shard, spark)
    # Rows the executors produced, against rows the driver reads back: a part file that
    # stays on an executor's own disk (scratch that is not shared storage) would make the
    # snapshot silently partial, and a partial snapshot turns live data into "orphans".
    produced = spark.sparkContext.accumulator(0)

    def read_shard(part: Iterable[str]) -> list[Any]:
        rows = reading.read_managed_ledgers(settings, list(part))
        produced.add(len(rows))
        return rows

    rdd = spark.sparkContext.parallelize(names, slices).mapPartitions(read_shard)
    with job_group(spark, run.run_id, "snapshot", f"read {len(names)} managed ledgers"):
        try:
            kept = hold(run, SNAPSHOT, spark.createDataFrame(rdd, SNAPSHOT_SCHEMA))
            counts = {
                row["entry_type"]: row["count"]
                for row in kept.groupBy("entry_type").count().collect()
            }
        except Exception as exc:
            raise _job_error("the metadata snapshot", exc) from exc
    if sum(counts.values()) != produced.value:
        # (A retried task can count twice: that also stops here, which fails closed.)
        raise SparkJobError(
            f"the metadata snapshot kept {sum(counts.values())} of the {produced.value} "
            "rows its executors read; a partial snapshot would make live data look "
            "orphaned, so nothing was decided"
        )
    manifest = {
        "started_ms": started,
        "finished_ms": clock(),
        "managed_ledgers": counts.get(reading.ML_ROW, 0),
        "listed_ledgers": counts.get(reading.LISTED_ROW, 0),
        "markers": counts.get(reading.MARKED_ROW, 0),
        "managed_ledgers_listed": len(names),
        "shards": slices,
    }
    steps.write_manifest(run_steps.SNAPSHOT, manifest)
    return manifest


# --- scan ------------------------------------------------------------------------------


def scan_job(
    spark: SparkSession,
    settings: Settings,
    run: RunPaths,
    *,
    inventory: str | None = None,
    offload_inventory: str | None = None,
    clock: Callable[[], int] = now_ms,
) -> dict[str, Any]:
    """Every object under the prefix: listed in parallel by namespace, or an inventory.

    With ``inventory`` nothing is listed: the report's files are validated and pinned in
    the manifest, and the diff reads them directly (copying 10M rows would only cost).
    With tiered storage on, the offload bucket is scanned too (``offload_scan``).
    """
    what = f"inventory {inventory}" if inventory else f"list bucket {settings.bucket}"
    with job_group(spark, run.run_id, "scan", what):
        return _scan_job(spark, settings, run, inventory, offload_inventory, clock)


def _scan_job(
    spark: SparkSession,
    settings: Settings,
    run: RunPaths,
    inventory: str | None,
    offload_inventory: str | None,
    clock: Callable[[], int],
) -> dict[str, Any]:
    steps = RunSteps(settings, run.run_id)
    steps.start_step(run_steps.SCAN)
    started = clock()
    if inventory:
        frame, files, fmt = read_inventory(spark, settings, inventory)
        manifest: dict[str, Any] = {
            "source": "inventory",
            "inventory": inventory,
            "inventory_format": fmt,
            "inventory_files": files,
            "shards": 0,
        }
    else:
        shards, loose = reading.discover_shards(settings)
        rdd = spark.sparkContext.parallelize(shards, _slices(len(shards), 1, spark)).mapPartitions(
            lambda part: reading.list_prefixes(settings, list(part))
        )
        frame = spark.createDataFrame(rdd, OBJECT_SCHEMA)
        if loose:
            frame = frame.unionByName(spark.createDataFrame(reading.rows_of(loose), OBJECT_SCHEMA))
        try:
            frame = hold(run, SCAN, frame)
        except Exception as exc:
            raise _job_error("the storage scan", exc) from exc
        manifest = {"source": "listing", "inventory": None, "shards": len(shards)}
    from pyspark.sql import functions as F

    try:
        totals = frame.agg(
            F.count("*").alias("n"),
            F.sum("size").alias("b"),
            F.count_if(F.col("last_modified").isNull()).alias("undated"),
        ).collect()[0]
    except Exception as exc:
        raise _job_error("the storage scan", exc) from exc
    if totals["undated"]:
        raise StorageError(
            f"{totals['undated']} object(s) of the scan have no readable last-modified time "
            f"({inventory or 'listing'}); an object of unknown age could never be judged "
            "against retention, so the scan is not used"
        )
    manifest["offload"] = (
        offload_scan(spark, settings, run, offload_inventory) if settings.offload_bucket else None
    )
    manifest.update(
        started_ms=started,
        finished_ms=clock(),
        objects=int(totals["n"]),
        bytes=int(totals["b"] or 0),
        # Read after the listing: every ledger with a block listed above was allocated
        # before this read, so its id is below the counter in a store whose metadata is
        # current (horizon.py; issue 11).
        id_counter=reading.read_id_counter(settings),
    )
    steps.write_manifest(run_steps.SCAN, manifest)
    return manifest


def offload_scan(
    spark: SparkSession, settings: Settings, run: RunPaths, inventory: str | None
) -> dict[str, Any]:
    """The offload bucket's objects under its prefix (listing or S3 Inventory), written
    to ``offload-scan/``; its manifest is part of the scan's (``offload``)."""
    from pyspark.sql import functions as F

    offload = offload_settings(settings)
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
            rdd = spark.sparkContext.parallelize([0], 1).mapPartitions(
                lambda _: reading.list_offload_bucket(settings)
            )
            frame = spark.createDataFrame(rdd, OBJECT_SCHEMA)
        totals = (
            hold(run, OFFLOAD_SCAN, frame)
            .agg(
                F.count("*").alias("n"),
                F.sum("size").alias("b"),
                F.count_if(F.col("last_modified").isNull()).alias("undated"),
            )
            .collect()[0]
        )
    except LedgerGcError:
        raise
    except Exception as exc:
        raise _job_error(f"the scan of offload bucket {offload.bucket}", exc) from exc
    if totals["undated"]:
        raise StorageError(
            f"{totals['undated']} object(s) of offload bucket {offload.bucket} have no "
            "readable last-modified time; the scan is not used"
        )
    described.update(objects=int(totals["n"]), bytes=int(totals["b"] or 0))
    return described


def _inventory_format(path: str) -> str:
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
    spark: SparkSession, settings: Settings, path: str, files: list[str] | None = None
) -> tuple[DataFrame, list[str], str]:
    """An S3 Inventory report as (key, size, last_modified ms) rows of the store's prefix.

    Parquet: columns ``bucket`` (optional), ``key``, ``size``, ``last_modified_date``
    (timestamp, ISO string or epoch ms). CSV: S3 Inventory's headerless layout
    ``bucket, key, size, last_modified_date`` with URL-encoded keys (as S3 writes them).
    Rows of another bucket, outside the prefix, or delete markers are dropped.
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    fmt = _inventory_format(path)
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
            condition = condition & (F.col(columns["bucket"]) == settings.bucket)
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
            .where(F.col("key").startswith(settings.key_prefix))
        )
        pinned = sorted(frame.inputFiles())
    except LedgerGcError:
        raise
    except Exception as exc:
        raise _job_error(f"reading inventory {path}", exc) from exc
    return result, pinned, fmt


def scan_objects(spark: SparkSession, settings: Settings, run: RunPaths) -> DataFrame:
    """The scan's objects (key, size, last_modified), whatever its source was."""
    manifest = RunSteps(settings, run.run_id).read_manifest(run_steps.SCAN) or {}
    if manifest["source"] == "inventory":
        frame, _, _ = read_inventory(
            spark, settings, manifest["inventory"], files=manifest["inventory_files"]
        )
        return frame
    return held(spark, run, SCAN)


# --- diff ------------------------------------------------------------------------------


def diff_job(
    spark: SparkSession,
    settings: Settings,
    run: RunPaths,
    *,
    max_foreign_samples: int = MAX_FOREIGN_SAMPLES,
) -> DiffResult:
    """Classify every object (classify.py's rules) and aggregate per target/namespace;
    record the result, its candidates and the snapshot's facts (one transaction)."""
    with job_group(spark, run.run_id, "diff", "classify the scan against the snapshot"):
        return _diff_job(spark, settings, run, max_foreign_samples)


def _diff_job(
    spark: SparkSession, settings: Settings, run: RunPaths, max_foreign_samples: int
) -> DiffResult:
    from pyspark.sql import functions as F

    steps = RunSteps(settings, run.run_id)
    snapshot_manifest = steps.read_manifest(run_steps.SNAPSHOT) or {}
    scan_manifest = steps.read_manifest(run_steps.SCAN) or {}
    steps.start_step(run_steps.DIFF)
    snapshot = held(spark, run, SNAPSHOT)
    objects = scan_objects(spark, settings, run)

    parsed = objects.select("key", "size", "last_modified", *_parse_key_columns(settings))
    grouped = _ledger_groups(objects, settings).cache()
    if "offload_uuid" not in snapshot.columns:  # a snapshot of an older ledger-gc
        snapshot = snapshot.withColumn("offload_uuid", F.lit(None).cast("string"))
    try:
        result = _classify_groups(spark, snapshot, grouped, snapshot_manifest)
        result.foreign_samples = _foreign_samples(
            parsed, settings, result.classes[FOREIGN].objects, max_foreign_samples
        )
        if scan_manifest.get("offload"):
            _classify_segments(
                spark,
                settings,
                run,
                snapshot,
                result,
                scan_manifest["offload"],
                max_foreign_samples,
            )
        facts = snapshot_facts(
            spark, snapshot, result.candidates, OrphanRegistry(settings).entries().values()
        )
    except LedgerGcError:
        raise
    except Exception as exc:
        raise _job_error("the diff", exc) from exc
    finally:
        grouped.unpersist()
    steps.write_diff(
        {
            **result.to_manifest(),
            "snapshot_started_ms": snapshot_manifest["started_ms"],
            "scan_started_ms": scan_manifest["started_ms"],
            "scan_source": scan_manifest["source"],
            "id_counter": scan_manifest.get("id_counter"),
            "offload": scan_manifest.get("offload"),
            # The order of runs (a ZooKeeper sequence) and the servers' time of the scan.
            "snapshot_sequence": snapshot_manifest.get("sequence"),
            "snapshot_instant": snapshot_manifest.get("instant"),
            "scan_instant": scan_manifest.get("instant"),
            "metadata_max_ledger_id": _metadata_max_ledger_id(snapshot),
            "candidates": len(result.candidates),
            "snapshot_facts": facts,
        },
        result.candidates,
        settings.prefix,
    )
    return result


def _ledger_groups(objects: DataFrame, settings: Settings) -> DataFrame:
    """One pass over the objects: a row per ledger directory (for foreign keys: per the
    six first segments of the key; ``is_block, namespace, ml_name, ledger_id, objects,
    bytes, newest_ms, oldest_ms``), by classify.py's rules in Spark SQL (no Python UDF).

    Per key only cheap work: the first six ``/``-separated segments (the ledger
    directory, the group key) and a check of the last one (``ENTRY_FILE_RE_JAVA``, 24
    characters). The long pattern (``LEDGER_DIR_RE_JAVA``), the namespace and the ids are
    evaluated once per group, ~10x fewer than keys: the diff of 10M keys spent most of
    its time matching the whole block pattern against every key.
    """
    from pyspark.sql import functions as F

    base = settings.key_prefix
    key = F.col("key")
    # The key up to its ledger directory, the prefix included (cut once per group), and
    # its last segment; byte lengths (no character count) tell that nothing lies between.
    prefixed_directory = F.substring_index(key, "/", 6 + base.count("/"))
    entry = F.substring_index(key, "/", -1)
    entry_ok = (
        # Exactly seven segments after the prefix: the directory's six, then the entry.
        (F.octet_length(key) == F.octet_length(prefixed_directory) + 1 + F.octet_length(entry))
        & entry.rlike(classify.ENTRY_FILE_RE_JAVA)
        & (F.substring(entry, 1, keys.ID_WIDTH) <= _MAX_ID_TEXT)
    )
    in_prefix = key.startswith(base) if base else F.lit(True)
    per_directory = (
        objects.groupBy(
            F.when(in_prefix, prefixed_directory).alias("prefixed"),
            F.coalesce(in_prefix & entry_ok, F.lit(False)).alias("entry_ok"),
        )
        .agg(
            F.count("*").alias("objects"),
            F.sum("size").alias("bytes"),
            F.max("last_modified").alias("newest_ms"),
            F.min("last_modified").alias("oldest_ms"),
        )
        .withColumn("directory", F.col("prefixed").substr(len(base) + 1, 1 << 30))
    )
    ledger_text = F.substring_index("directory", "/", -1)
    is_block = F.coalesce(
        F.col("entry_ok")
        & F.col("directory").rlike(classify.LEDGER_DIR_RE_JAVA)
        & (ledger_text <= _MAX_ID_TEXT),
        F.lit(False),
    )
    # A foreign key's namespace: the pattern needs only its first four segments, which
    # its directory (its first six) holds.
    ns_hint = F.regexp_extract(F.col("directory"), classify.NAMESPACE_RE_JAVA, 1)
    typed = per_directory.select(
        is_block.alias("is_block"),
        F.when(is_block, F.substring_index("directory", "/", 2))
        .when(F.col("directory").isNotNull() & (ns_hint != ""), ns_hint)
        .otherwise(NO_NAMESPACE)
        .alias("namespace"),
        F.when(is_block, F.substring_index("directory", "/", 4)).otherwise("").alias("ml_name"),
        F.when(is_block, ledger_text.cast("long")).alias("ledger_id"),
        "objects",
        "bytes",
        "newest_ms",
        "oldest_ms",
    )
    # Cache it (the caller does): a filter on is_block would otherwise be pushed below
    # the aggregation and match the long pattern against every key again.
    return typed


# The largest ledger or entry id (a Java long) as the 20 digits of a key: for ids of
# exactly 20 digits, string order is numeric order, so no decimal cast per row is needed.
_MAX_ID_TEXT = f"{keys.MAX_ID:0{keys.ID_WIDTH}d}"


def _parse_key_columns(settings: Settings) -> list[Any]:
    """Columns ``is_block, namespace, ml_name, ledger_text`` of the ``key`` column, by
    classify.py's rules, in Spark SQL (no Python UDF: the rows never leave the JVM).

    One regular-expression match per key decides whether it is a block
    (``BLOCK_RE_JAVA``); the parts of a block key are then its ``/``-separated fields
    (``split``, no second match). Only a key that is not a block gets the namespace
    expression, and ids are compared as 20-digit strings. The diff of 10M keys spent most
    of its time evaluating four regular expressions and two decimal casts per key.
    """
    from pyspark.sql import functions as F

    base = settings.key_prefix
    in_prefix = F.col("key").startswith(base) if base else F.lit(True)
    rest = F.col("key").substr(len(base) + 1, 1 << 30)
    parts = F.split(rest, "/", 8)
    # tenant/ns/persistent/topic/ledgers/<ledger id>/<entry id>.blk
    ledger_text = parts.getItem(5)
    entry_text = F.substring(parts.getItem(6), 1, keys.ID_WIDTH)
    shaped = in_prefix & rest.rlike(classify.BLOCK_RE_JAVA)
    is_block = F.coalesce(
        shaped & (ledger_text <= _MAX_ID_TEXT) & (entry_text <= _MAX_ID_TEXT), F.lit(False)
    )
    ns_hint = F.regexp_extract(rest, classify.NAMESPACE_RE_JAVA, 1)
    namespace = (
        F.when(is_block, F.concat_ws("/", parts.getItem(0), parts.getItem(1)))
        .when(in_prefix & (ns_hint != ""), ns_hint)
        .otherwise(NO_NAMESPACE)
    )
    ml_name = F.concat_ws(
        "/", parts.getItem(0), parts.getItem(1), parts.getItem(2), parts.getItem(3)
    )
    return [
        is_block.alias("is_block"),
        namespace.alias("namespace"),
        F.when(is_block, ml_name).otherwise("").alias("ml_name"),
        F.when(is_block, ledger_text).otherwise("").alias("ledger_text"),
    ]


_ROW_COLUMNS = ("entry_type", "ml_name", "ledger_id", "offload_uuid")


def snapshot_facts(
    spark: SparkSession,
    snapshot: DataFrame,
    candidates: Iterable[Candidate],
    registered: Iterable[RegistryEntry],
) -> dict[str, Any]:
    """What the phases step needs of the snapshot, which stays in this app's scratch
    (``cycle.SnapshotFacts`` reads it back): small, because it covers only the managed
    ledgers of orphan-ledger candidates (their highest id: the horizon) and the registered
    targets (the rows that say why one is no orphan any more)."""
    from pyspark.sql import functions as F

    entries = list(registered)
    referenced = snapshot.where(F.col("entry_type") != reading.ML_ROW)

    def rows(frame: DataFrame) -> list[list[Any]]:
        return [list(row) for row in frame.select(*_ROW_COLUMNS).collect()]

    def key_frame(values: Iterable[Any], schema: str) -> DataFrame:
        return F.broadcast(spark.createDataFrame(sorted(set(values)), schema))

    ml_high: dict[str, int | None] = {}
    ledger_mls = [(c.ml_name,) for c in candidates if c.target_class == ORPHAN_LEDGER]
    if ledger_mls:
        highs = (
            snapshot.join(key_frame(ledger_mls, "ml_name string"), "ml_name")
            .groupBy("ml_name")
            .agg(F.max(F.when(F.col("entry_type") != reading.ML_ROW, F.col("ledger_id"))))
            .collect()
        )
        ml_high = {row[0]: None if row[1] is None else int(row[1]) for row in highs}
    in_mls = [e for e in entries if e.target_class != ORPHAN_SEGMENT]
    ml_rows: list[list[Any]] = []
    if in_mls:
        names = key_frame([(e.ml_name,) for e in in_mls], "ml_name string")
        ml_rows = rows(snapshot.where(F.col("entry_type") == reading.ML_ROW).join(names, "ml_name"))
        pairs = [(e.ml_name, e.ledger_id) for e in in_mls if e.ledger_id is not None]
        if pairs:
            wanted = key_frame(pairs, "ml_name string, ledger_id long")
            ml_rows += rows(referenced.join(wanted, ["ml_name", "ledger_id"]))
    segment_ids = [
        (e.ledger_id,)
        for e in entries
        if e.target_class == ORPHAN_SEGMENT and e.ledger_id is not None
    ]
    ledger_rows = (
        rows(referenced.join(key_frame(segment_ids, "ledger_id long"), "ledger_id"))
        if segment_ids
        else []
    )
    return {
        "ml_high": ml_high,
        "ml_rows": ml_rows,
        "ledger_rows": ledger_rows,
        "registered": sorted(e.prefix for e in entries),
    }


def _metadata_max_ledger_id(snapshot: DataFrame) -> int | None:
    """The highest ledger id any managed ledger lists or marks (None: no ledger at all)."""
    from pyspark.sql import functions as F

    row = snapshot.where(F.col("entry_type") != reading.ML_ROW).agg(F.max("ledger_id")).first()
    return None if row is None or row[0] is None else int(row[0])


def _classify_groups(
    spark: SparkSession, snapshot: DataFrame, grouped: DataFrame, snapshot_manifest: dict
) -> DiffResult:
    from pyspark.sql import functions as F

    refs = (
        snapshot.where(F.col("entry_type") != reading.ML_ROW)
        .groupBy("ml_name", "ledger_id")
        # Listed wins over marked should both ever appear (never double-count a ledger).
        .agg(F.max(F.when(F.col("entry_type") == reading.LISTED_ROW, 2).otherwise(1)).alias("ref"))
    )
    managed_ledgers = (
        snapshot.where(F.col("entry_type") == reading.ML_ROW)
        .select("ml_name")
        .distinct()
        .withColumn("ml_exists", F.lit(True))
    )
    # Two actions read it (the orphan rows, the totals): joined once, kept.
    classified = (
        grouped.where(F.col("is_block"))
        .join(refs, ["ml_name", "ledger_id"], "left")
        .join(managed_ledgers, "ml_name", "left")
        .withColumn(
            "class",
            F.when(F.col("ref") == 2, LIVE)
            .when(F.col("ref") == 1, MARKED)
            .when(F.col("ml_exists"), ORPHAN_LEDGER)
            .otherwise(ORPHAN_PARTITION),
        )
        .select(
            "namespace",
            "class",
            "ml_name",
            "ledger_id",
            "objects",
            "bytes",
            "newest_ms",
            "oldest_ms",
        )
        .cache()
    )
    try:
        return _collect_classes(snapshot_manifest, grouped, classified)
    finally:
        classified.unpersist()


def _collect_classes(
    snapshot_manifest: dict, grouped: DataFrame, classified: DataFrame
) -> DiffResult:
    from pyspark.sql import functions as F

    result = DiffResult(managed_ledgers=int(snapshot_manifest["managed_ledgers"]))
    totals = classified.groupBy("namespace", "class").agg(
        F.count("*").alias("units"), F.sum("objects").alias("objects"), F.sum("bytes").alias("b")
    )
    orphan_rows = classified.where(F.col("class").isin(ORPHAN_LEDGER, ORPHAN_PARTITION)).collect()
    partitions: dict[str, list[int]] = {}
    for row in orphan_rows:
        if row["class"] == ORPHAN_LEDGER:
            result.candidates.append(
                Candidate(
                    ORPHAN_LEDGER,
                    row["ml_name"],
                    int(row["ledger_id"]),
                    int(row["objects"]),
                    int(row["bytes"]),
                    int(row["newest_ms"]),
                    int(row["oldest_ms"]),
                )
            )
        else:
            part = partitions.setdefault(row["ml_name"], [0, 0, 0, 2**63, 0])
            part[0] += int(row["objects"])
            part[1] += int(row["bytes"])
            part[2] = max(part[2], int(row["newest_ms"]))
            part[3] = min(part[3], int(row["oldest_ms"]))
            part[4] = max(part[4], int(row["ledger_id"]))
    for name, (count, size, newest, oldest, top) in partitions.items():
        result.candidates.append(
            Candidate(ORPHAN_PARTITION, name, None, count, size, newest, oldest, top)
        )
    result.candidates.sort(key=lambda c: (c.target_class, c.ml_name, c.ledger_id or -1))
    for row in totals.collect():
        units = int(row["units"])
        if row["class"] == ORPHAN_PARTITION:
            units = sum(
                1
                for c in result.candidates
                if c.ledger_id is None and c.namespace == row["namespace"]
            )
        result.add(row["namespace"], row["class"], int(row["objects"]), int(row["b"]), units)
        result.block_objects += int(row["objects"])
    foreign = (
        grouped.where(~F.col("is_block"))
        .groupBy("namespace")
        .agg(F.sum("objects").alias("objects"), F.sum("bytes").alias("bytes"))
    )
    for row in foreign.collect():
        result.add(row["namespace"], FOREIGN, int(row["objects"]), int(row["bytes"]), 0)
    result.objects = sum(t.objects for t in result.classes.values())
    result.bytes = sum(t.bytes for t in result.classes.values())
    return result


def _classify_segments(
    spark: SparkSession,
    settings: Settings,
    run: RunPaths,
    snapshot: DataFrame,
    result: DiffResult,
    offload: dict[str, Any],
    max_foreign_samples: int,
) -> None:
    """The offload bucket's objects into ``result`` (``segments.py``'s rule as a join).

    Live is (uuid, ledger id) carried by a listed or marked ledger anywhere in the
    snapshot; ledger ids are store-wide unique, so the join is by id, not by name.
    """
    from pyspark.sql import functions as F

    bucket, base = offload["bucket"], offload_settings(settings).key_prefix
    objects = held(spark, run, OFFLOAD_SCAN)
    if base:
        # An inventory of the whole bucket: keys outside the prefix are not ours to judge.
        objects = objects.where(F.col("key").startswith(base))
    rest = F.col("key").substr(len(base) + 1, 1 << 30)
    uuid = F.regexp_extract(rest, segments.SEGMENT_RE_JAVA, 1)
    ledger_text = F.regexp_extract(rest, segments.SEGMENT_RE_JAVA, 2)
    is_segment = (uuid != "") & (ledger_text.cast("decimal(20,0)") <= F.lit(keys.MAX_ID))
    parsed = objects.select(
        "key",
        "size",
        "last_modified",
        F.coalesce(is_segment, F.lit(False)).alias("is_segment"),
        uuid.alias("uuid"),
        ledger_text.alias("ledger_text"),
    )
    referenced = snapshot.where(F.col("entry_type") != reading.ML_ROW)
    carriers = (
        referenced.where(F.col("offload_uuid").isNotNull())
        .select("ledger_id", F.col("offload_uuid").alias("uuid"))
        .distinct()
        .withColumn("carried", F.lit(True))
    )
    owners = referenced.groupBy("ledger_id").agg(F.min("ml_name").alias("owner"))
    grouped = (
        parsed.where(F.col("is_segment"))
        .groupBy("uuid", F.col("ledger_text").cast("long").alias("ledger_id"))
        .agg(
            F.count("*").alias("objects"),
            F.sum("size").alias("bytes"),
            F.max("last_modified").alias("newest_ms"),
            F.min("last_modified").alias("oldest_ms"),
        )
        .join(carriers, ["ledger_id", "uuid"], "left")
        .join(owners, "ledger_id", "left")
        .withColumn("class", F.when(F.col("carried"), LIVE_SEGMENT).otherwise(ORPHAN_SEGMENT))
    )
    live = (
        grouped.where(F.col("class") == LIVE_SEGMENT)
        .groupBy("owner")
        .agg(
            F.count("*").alias("units"),
            F.sum("objects").alias("objects"),
            F.sum("bytes").alias("b"),
        )
    )
    for row in live.collect():
        namespace = classify.namespace_of_ml(row["owner"] or "")
        result.add(namespace, LIVE_SEGMENT, int(row["objects"]), int(row["b"]), int(row["units"]))
        result.segment_objects += int(row["objects"])
    # Whose segments (segments.our_clusters): listings carry no user metadata, so a few
    # live data objects and every orphan-looking one are read with a HEAD (cluster_tags).
    live_keys = (
        parsed.where(F.col("is_segment") & ~F.col("key").endswith("-index"))
        .withColumn("ledger_id", F.col("ledger_text").cast("long"))
        .join(carriers, ["ledger_id", "uuid"], "inner")
        .select("key")
        .limit(segments.MAX_LIVE_SAMPLE * 8)
        .collect()
    )
    to_learn = segments.live_sample([row["key"] for row in live_keys])
    learned = cluster_tags.read_segment_tags(settings, to_learn)
    ours = segments.our_clusters(
        settings.pulsar_clusters, [learned[key] for key in to_learn if key in learned]
    )
    result.our_clusters = ours
    orphan_rows = grouped.where(F.col("class") == ORPHAN_SEGMENT).collect()
    data_keys = [f"{base}{row['uuid']}-ledger-{int(row['ledger_id'])}" for row in orphan_rows]
    tags = cluster_tags.read_segment_tags(settings, data_keys)
    for row, data_key in sorted(zip(orphan_rows, data_keys, strict=True), key=lambda p: p[1]):
        result.segment_objects += int(row["objects"])
        candidate = Candidate(
            ORPHAN_SEGMENT,
            row["owner"] or "",
            int(row["ledger_id"]),
            int(row["objects"]),
            int(row["bytes"]),
            int(row["newest_ms"]),
            int(row["oldest_ms"]),
            segment=f"{bucket}/{data_key}",
        )
        segments.add_orphan_or_other(result, candidate, data_key, bucket, tags, ours)
    foreign = parsed.where(~F.col("is_segment"))
    row = foreign.agg(F.count("*").alias("n"), F.sum("size").alias("b")).collect()[0]
    if row["n"]:
        result.add(NO_NAMESPACE, OFFLOAD_FOREIGN, int(row["n"]), int(row["b"] or 0), 0)
        room = max(0, max_foreign_samples - len(result.foreign_samples))
        for sample in sorted(r["key"] for r in foreign.select("key").limit(room).collect()):
            result.foreign_samples.append(
                {"key": f"{bucket}/{sample}", "reason": "not an offloaded-ledger segment"}
            )
    everything = objects.agg(F.count("*").alias("n"), F.sum("size").alias("b")).collect()[0]
    result.offload_objects = int(everything["n"])
    result.offload_bytes = int(everything["b"] or 0)
    # A bucket shared with the ledger scan: what it listed too is in the totals already.
    overlap = segments.counted_by_ledger_scan(settings)
    if overlap is None:
        result.objects += result.offload_objects
        result.bytes += result.offload_bytes
    else:
        own = objects.where(~F.col("key").startswith(overlap))
        counted = own.agg(F.count("*").alias("n"), F.sum("size").alias("b")).collect()[0]
        result.objects += int(counted["n"])
        result.bytes += int(counted["b"] or 0)


def _foreign_samples(
    parsed: DataFrame, settings: Settings, foreign_objects: int, limit: int
) -> list[dict[str, str]]:
    """A few foreign keys with the reason they are foreign (for the report)."""
    if not foreign_objects or limit <= 0:
        return []
    from pyspark.sql import functions as F

    rows = parsed.where(~F.col("is_block")).select("key").limit(limit).collect()
    samples = []
    for row in sorted(rows, key=lambda r: r["key"]):
        parsed_key = keys.parse_key(settings.prefix, row["key"])
        samples.append({"key": row["key"], "reason": parsed_key.reason or "not a block"})
    return samples


# --- deletion --------------------------------------------------------------------------


def distributed_delete(
    spark: SparkSession,
    settings: Settings,
    entries: list[RegistryEntry],
    *,
    run_id: str,
    now_ms: int,
    deleting: bool,
    per_task: int = ENTRIES_PER_TASK,
    ours: dict[str, Any] | None = None,
) -> list[RecheckResult]:
    """``deleting.recheck_and_delete`` over executors, ``per_task`` entries per task.

    The function never raises for one entry's trouble (it reports it), so a Spark task
    retry cannot repeat a half-done batch blindly: a retried batch re-checks again.
    """
    slices = max(1, -(-len(entries) // per_task))
    rdd = spark.sparkContext.parallelize(entries, slices).mapPartitions(
        lambda part: recheck_and_delete(
            settings, list(part), run_id=run_id, now_ms=now_ms, deleting=deleting, ours=ours
        )
    )
    verb = "re-check and delete" if deleting else "re-check (dry run)"
    with job_group(spark, run_id, "delete", f"{verb} {len(entries)} registered orphans"):
        try:
            return rdd.collect()
        except Exception as exc:
            raise _job_error("the distributed delete", exc) from exc
