"""The survey's Spark steps with their records: each step reads what it needs from the
state store, runs its Spark job (``ledger_gc.spark``), and records the result; the jobs
themselves never touch the store.

``cycle.step_snapshot``, ``step_scan`` and ``step_diff`` call these in one Spark
application. The snapshot and the listing stay on its executors between them
(``spark.session.hold``: checkpoints, never files another host could not read);
records (``run_steps``) are each step's manifest, and the diff's candidates and the
snapshot's facts the phases step needs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ledger_gc.clock import now_ms
from ledger_gc.metadata import id_counter
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.orphans import run_steps
from ledger_gc.orphans.layout import OFFLOAD_SCAN, SCAN, SNAPSHOT, RunPaths
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.orphans.run_steps import RunSteps
from ledger_gc.rules.orphans.classify import DiffResult
from ledger_gc.settings import Settings
from ledger_gc.spark import session
from ledger_gc.spark.diff import MAX_FOREIGN_SAMPLES, diff_blocks
from ledger_gc.spark.inventory import read_inventory
from ledger_gc.spark.scan import scan_offload, scan_store
from ledger_gc.spark.segment_diff import diff_segments
from ledger_gc.spark.snapshot import NAMES_PER_SHARD, read_snapshot
from ledger_gc.spark.snapshot_facts import metadata_max_ledger_id, registered_facts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def hold(run: RunPaths, step: str, frame: DataFrame) -> DataFrame:
    """Checkpoint ``frame`` now and keep it as ``run``'s ``step`` (``SNAPSHOT``, ``SCAN``,
    ``OFFLOAD_SCAN``), as the snapshot and scan steps leave theirs for the diff."""
    return session.hold(run.run_id, step, session.checkpoint(frame))


def release(run: RunPaths) -> None:
    """Forget what the survey of ``run`` kept on the executors (its end)."""
    session.release(run.run_id)


def snapshot_job(
    spark: SparkSession,
    settings: Settings,
    run: RunPaths,
    *,
    clock: Callable[[], int] = now_ms,
    names_per_shard: int = NAMES_PER_SHARD,
) -> dict[str, Any]:
    """Read every managed ledger (listed by the driver after ``sync``) on executors and
    record the counts; any read error fails the step and no record is written."""
    steps = RunSteps(settings, run.run_id)
    steps.start_step(run_steps.SNAPSHOT)
    started = clock()
    with MetadataStore.open(settings) as store:
        names = store.list_managed_ledgers(sync=True)
    with session.job_group(spark, run.run_id, "snapshot", f"read {len(names)} managed ledgers"):
        read = read_snapshot(spark, settings, names, names_per_shard=names_per_shard)
    session.hold(run.run_id, SNAPSHOT, read.frame)
    manifest = {
        "started_ms": started,
        "finished_ms": clock(),
        **read.manifest_counts(),
        "managed_ledgers_listed": len(names),
    }
    steps.write_manifest(run_steps.SNAPSHOT, manifest)
    return manifest


def scan_job(
    spark: SparkSession,
    settings: Settings,
    run: RunPaths,
    *,
    inventory: str | None = None,
    offload_inventory: str | None = None,
    clock: Callable[[], int] = now_ms,
) -> dict[str, Any]:
    """Every object under the prefix (and the offload bucket's with tiered storage on),
    recorded with its totals and the ledger-id counter read after it."""
    what = f"inventory {inventory}" if inventory else f"list bucket {settings.bucket}"
    with session.job_group(spark, run.run_id, "scan", what):
        steps = RunSteps(settings, run.run_id)
        steps.start_step(run_steps.SCAN)
        started = clock()
        store = scan_store(spark, settings, inventory)
        if store.described["source"] == "listing":
            session.hold(run.run_id, SCAN, store.frame)
        manifest: dict[str, Any] = dict(store.described)
        manifest["offload"] = None
        if settings.offload_bucket:
            offload = scan_offload(spark, settings, offload_inventory)
            session.hold(run.run_id, OFFLOAD_SCAN, offload.frame)
            manifest["offload"] = offload.described
        manifest.update(
            started_ms=started,
            finished_ms=clock(),
            objects=store.objects,
            bytes=store.bytes,
            # Read after the listing: every ledger with a block listed above was allocated
            # before this read, so its id is below the counter in a store whose metadata is
            # current (horizon.py; issue 11).
            id_counter=id_counter.read_id_counter(settings),
        )
        steps.write_manifest(run_steps.SCAN, manifest)
        return manifest


def _scan_objects(
    spark: SparkSession, settings: Settings, run: RunPaths, scan: dict[str, Any]
) -> DataFrame:
    """The scan's objects, whatever its source: an inventory's pinned files read again,
    or the listing this application holds."""
    if scan["source"] == "inventory":
        frame, _, _ = read_inventory(
            spark, settings, scan["inventory"], files=scan["inventory_files"]
        )
        return frame
    return session.held(run.run_id, SCAN)


def diff_job(
    spark: SparkSession,
    settings: Settings,
    run: RunPaths,
    *,
    max_foreign_samples: int = MAX_FOREIGN_SAMPLES,
) -> DiffResult:
    """Classify the scan against the snapshot (classify.py's rules); record the result,
    its candidates and the snapshot's facts (one transaction)."""
    with session.job_group(spark, run.run_id, "diff", "classify the scan against the snapshot"):
        return _diff_job(spark, settings, run, max_foreign_samples)


def _diff_job(
    spark: SparkSession, settings: Settings, run: RunPaths, max_foreign_samples: int
) -> DiffResult:
    from pyspark.sql import functions as F

    steps = RunSteps(settings, run.run_id)
    snapshot_manifest = steps.read_manifest(run_steps.SNAPSHOT) or {}
    scan_manifest = steps.read_manifest(run_steps.SCAN) or {}
    steps.start_step(run_steps.DIFF)
    snapshot = session.held(run.run_id, SNAPSHOT)
    objects = _scan_objects(spark, settings, run, scan_manifest)
    if "offload_uuid" not in snapshot.columns:  # a snapshot of an older ledger-gc
        snapshot = snapshot.withColumn("offload_uuid", F.lit(None).cast("string"))
    blocks = diff_blocks(
        snapshot,
        objects,
        settings,
        managed_ledgers=int(snapshot_manifest["managed_ledgers"]),
        max_foreign_samples=max_foreign_samples,
    )
    result = blocks.result
    if scan_manifest.get("offload"):
        diff_segments(
            snapshot,
            session.held(run.run_id, OFFLOAD_SCAN),
            settings,
            result,
            scan_manifest["offload"],
            max_foreign_samples=max_foreign_samples,
        )
    registered = OrphanRegistry(settings).entries().values()
    facts = {"ml_high": blocks.ml_high, **registered_facts(snapshot, registered)}
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
            "metadata_max_ledger_id": metadata_max_ledger_id(snapshot),
            "candidates": len(result.candidates),
            "snapshot_facts": facts,
        },
        result.candidates,
        settings.prefix,
    )
    return result
