"""The S3 source's survey: the metadata snapshot, the storage scan and the diff, each a
step that reads what it needs from the state store, runs its Spark job
(``ledger_gc.spark``) and records the result; the jobs themselves never touch the store.

``survey`` runs the three in one Spark application (``orphans.sources.S3Source``): the
snapshot and the listing stay on its executors between them (``spark.session.hold``:
checkpoints, never files another host could not read) and are forgotten at the end.
The snapshot is taken before the scan starts (the horizon and stale-run rules rely on
that order). The snapshot's and the scan's records are this source's own; the diff's
fields and candidates are its ``Findings``, which the engine records with every other
source's (``cycle.step_survey``). ``step_snapshot``, ``step_scan`` and ``step_diff`` run
one step on its own (a re-run; tests put a writer or an admin between two of them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ledger_gc.bookkeeper.survey import SHARED_MANAGED_LEDGERS
from ledger_gc.clock import now_ms
from ledger_gc.config.endpoints import Endpoints, ObjectStore
from ledger_gc.metadata import id_counter, read_budget
from ledger_gc.metadata.config_store import configuration_store
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.orphan_source import Findings, SurveyRequest
from ledger_gc.orphans import run_steps
from ledger_gc.orphans.layout import OFFLOAD_SCAN, SCAN, SNAPSHOT, RunPaths
from ledger_gc.orphans.records import DiffRecord, ScanRecord, SnapshotRecord
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.orphans.run_steps import MissingStepOutputError, RunSteps
from ledger_gc.orphans.witness import ServerClocks, observe
from ledger_gc.rules.orphans.classify import ORPHAN_CLASSES, DiffResult
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


def survey(request: SurveyRequest) -> Findings:
    """Snapshot, scan and diff in ``request.spark`` (one JVM start-up, not three): the
    S3 source's findings. What this application held is dropped at the end, whatever
    happened: the later steps read only the state store's records."""
    endpoints, run_id, spark = request.endpoints, request.run_id, request.spark
    if nothing_to_scan(request):
        return without_buckets(request)
    run = RunPaths(endpoints.state.state_dir, run_id)
    try:
        step_snapshot(endpoints, run_id, spark, clock=request.clock, witness=request.witness)
        step_scan(
            endpoints,
            run_id,
            spark,
            inventory=request.inventory,
            offload_inventory=request.offload_inventory,
            clock=request.clock,
            witness=request.witness,
        )
        return diff_job(spark, endpoints, run)
    finally:
        release(run)
        run.remove()


def nothing_to_scan(request: SurveyRequest) -> bool:
    """Whether this source has nothing to survey: no block store, tiered storage off,
    no inventory given, and none of its targets registered (a Pulsar cluster's cycle,
    BookKeeper alone). Then its Spark jobs (reading every managed ledger again, the
    scans, the diff) would find nothing, at the cost of seconds and a read of every
    managed-ledger znode."""
    endpoints = request.endpoints
    return (
        not endpoints.blocks.configured
        and not endpoints.offload.configured
        and not request.inventory
        and not request.offload_inventory
        and not request.registry.holds_any(ORPHAN_CLASSES)
    )


def without_buckets(request: SurveyRequest) -> Findings:
    """The records of a survey with nothing to scan (``nothing_to_scan``), as the full
    survey would make them: the run's ZooKeeper sequence and the servers' times (the run
    order and every grace window depend on them), the managed ledgers' count, no
    objects, no candidates. The tree listed to count them is handed to the later
    sources of this survey (``request.shared``), whose reads of Pulsar's references
    then do not list ``/managed-ledgers`` again."""
    endpoints, run_id, clock = request.endpoints, request.run_id, request.clock
    zk = endpoints.zk
    steps = RunSteps(endpoints.state, run_id)
    steps.start_step(run_steps.SNAPSHOT)
    sequence, instant, warnings = observe(zk, endpoints.blocks, run_id, request.witness, clock)
    started = clock()
    mark = read_budget.METER.mark()
    with (
        MetadataStore.open(zk) as store,
        configuration_store(store, endpoints.config_store) as config,
    ):
        tree = store.managed_ledger_tree(sync=True, policies=config)
    request.shared[SHARED_MANAGED_LEDGERS] = tree
    names = tree.names  # v1 ones too (``list_managed_ledgers(include_v1=True)``)
    snapshot = SnapshotRecord(
        started_ms=started,
        finished_ms=clock(),
        managed_ledgers=len(names),
        shards=0,
        managed_ledgers_listed=len(names),
        sequence=sequence,
        instant=instant.to_dict(),
        clock_warnings=warnings,
        zk_reads=read_budget.Reads.merged([read_budget.METER.since(mark)]).to_dict(),
    )
    steps.write_record(run_steps.SNAPSHOT, snapshot)
    steps.start_step(run_steps.SCAN)
    scanned = clock()
    _, instant, warnings = observe(zk, endpoints.blocks, run_id, request.witness, clock)
    scan = ScanRecord(
        source="listing",
        started_ms=scanned,
        finished_ms=clock(),
        objects=0,
        bytes=0,
        instant=instant.to_dict(),
        clock_warnings=warnings,
    )
    steps.write_record(run_steps.SCAN, scan)
    facts: dict[str, Any] = {"ml_high": {}, "ml_rows": [], "ledger_rows": []}
    result = DiffResult(managed_ledgers=len(names))
    return Findings(_fields(result, snapshot, scan, facts, None), [])


def step_snapshot(
    endpoints: Endpoints,
    run_id: str,
    spark: SparkSession,
    *,
    clock: Callable[[], int] = now_ms,
    witness: ServerClocks | None = None,
    names_per_shard: int = NAMES_PER_SHARD,
) -> SnapshotRecord:
    """Read every managed ledger (listed by the driver after ``sync``) on executors,
    numbered first by a ZooKeeper sequence: runs are ordered by that number
    (``step_phases``' stale-run check), never by a host's clock. Any read error fails
    the step and no record is written."""
    zk = endpoints.zk
    steps = RunSteps(endpoints.state, run_id)
    steps.start_step(run_steps.SNAPSHOT)
    sequence, instant, warnings = observe(zk, endpoints.blocks, run_id, witness, clock)
    started = clock()
    mark = read_budget.METER.mark()
    with (
        MetadataStore.open(zk) as store,
        configuration_store(store, endpoints.config_store) as config,
    ):
        # v1 topics (property/cluster/ns) too: their records name offloaded segments, and
        # a segment no record read names would look orphaned. (No block of the store is
        # ever a v1 name's: its keys are foreign to the layout.) Namespaces' policies,
        # where a level's shape needs them, are the configuration store's.
        names = store.list_managed_ledgers(sync=True, include_v1=True, policies=config)
    with session.job_group(spark, run_id, "snapshot", f"read {len(names)} managed ledgers"):
        read = read_snapshot(spark, zk, names, names_per_shard=names_per_shard)
    session.hold(run_id, SNAPSHOT, read.frame)
    reads = read_budget.Reads.merged([read_budget.METER.since(mark), read.zk_reads])
    record = SnapshotRecord(
        started_ms=started,
        finished_ms=clock(),
        **read.manifest_counts(),
        managed_ledgers_listed=len(names),
        sequence=sequence,
        instant=instant.to_dict(),
        clock_warnings=warnings,
        zk_reads=reads.to_dict(),
    )
    steps.write_record(run_steps.SNAPSHOT, record)
    return record


def step_scan(
    endpoints: Endpoints,
    run_id: str,
    spark: SparkSession,
    *,
    inventory: str | None = None,
    offload_inventory: str | None = None,
    clock: Callable[[], int] = now_ms,
    witness: ServerClocks | None = None,
) -> ScanRecord:
    """Every object under the prefix (and the offload bucket's with tiered storage on),
    with its totals and the ledger-id counter read after it. The servers' time read
    after it is the scan's time, from which the grace window of every orphan it
    registers runs (timekeeping.py)."""
    zk = endpoints.zk
    what = f"inventory {inventory}" if inventory else f"list bucket {endpoints.blocks.bucket}"
    with session.job_group(spark, run_id, "scan", what):
        steps = RunSteps(endpoints.state, run_id)
        steps.start_step(run_steps.SCAN)
        started = clock()
        store = scan_store(spark, endpoints.blocks, inventory)
        if store.described["source"] == "listing":
            session.hold(run_id, SCAN, store.frame)
        offload = None
        if endpoints.offload.configured:
            offloaded = scan_offload(spark, endpoints.offload, offload_inventory)
            session.hold(run_id, OFFLOAD_SCAN, offloaded.frame)
            offload = offloaded.described
        record = ScanRecord(
            **store.described,
            offload=offload,
            started_ms=started,
            finished_ms=clock(),
            objects=store.objects,
            bytes=store.bytes,
            # Read after the listing: every ledger with a block listed above was allocated
            # before this read, so its id is below the counter in a store whose metadata
            # is current (horizon.py; issue 11).
            id_counter=id_counter.read_id_counter(zk),
        )
    _, instant, warnings = observe(zk, endpoints.blocks, run_id, witness, clock)
    record = replace(record, instant=instant.to_dict(), clock_warnings=warnings)
    steps.write_record(run_steps.SCAN, record)
    return record


def step_diff(endpoints: Endpoints, run_id: str, spark: SparkSession) -> DiffRecord:
    """The diff on its own: this source's findings recorded as the run's whole diff (no
    other source surveyed in this run: its part of the record says it was off)."""
    steps = RunSteps(endpoints.state, run_id)
    steps.start_step(run_steps.DIFF)  # a failed re-run leaves no output, not the last one's
    mark = OrphanRegistry(endpoints.state).mark()  # (before the diff reads the registry)
    findings = diff_job(spark, endpoints, RunPaths(endpoints.state.state_dir, run_id))
    record = DiffRecord.from_dict(
        findings.record | {"candidates": len(findings.candidates), "registry_mark": mark}
    )
    steps.write_diff(record, findings.candidates, endpoints.blocks.prefix)
    return record


def _scan_objects(
    spark: SparkSession, store: ObjectStore, run: RunPaths, scan: ScanRecord
) -> DataFrame:
    """The scan's objects, whatever its source: an inventory's pinned files read again,
    or the listing this application holds."""
    if scan.source == "inventory":
        if not scan.inventory or not scan.inventory_files:
            # Reading the folder again could read a newer delivery than the one scanned.
            raise MissingStepOutputError(
                f"the scan of run {run.run_id} names no inventory files; run the scan again"
            )
        frame, _, _ = read_inventory(spark, store, scan.inventory, files=scan.inventory_files)
        return frame
    return session.held(run.run_id, SCAN)


def diff_job(
    spark: SparkSession,
    endpoints: Endpoints,
    run: RunPaths,
    *,
    max_foreign_samples: int = MAX_FOREIGN_SAMPLES,
) -> Findings:
    """Classify the scan against the snapshot (classify.py's rules): the diff record's
    fields of this source (with the snapshot's facts about registered targets that the
    phases step needs) and its candidates. Records nothing."""
    with session.job_group(spark, run.run_id, "diff", "classify the scan against the snapshot"):
        result, fields = classify(spark, endpoints, run, max_foreign_samples)
    return Findings(fields, result.candidates)


def classify(
    spark: SparkSession,
    endpoints: Endpoints,
    run: RunPaths,
    max_foreign_samples: int,
) -> tuple[DiffResult, dict[str, Any]]:
    """``diff_job``'s work: the classification itself, and the record's fields."""
    from pyspark.sql import functions as F

    steps = RunSteps(endpoints.state, run.run_id)
    snapshot_record = steps.read_record(run_steps.SNAPSHOT, SnapshotRecord) or SnapshotRecord()
    scan_record = steps.read_record(run_steps.SCAN, ScanRecord) or ScanRecord()
    snapshot = session.held(run.run_id, SNAPSHOT)
    objects = _scan_objects(spark, endpoints.blocks, run, scan_record)
    if "offload_uuid" not in snapshot.columns:  # a snapshot of an older ledger-gc
        snapshot = snapshot.withColumn("offload_uuid", F.lit(None).cast("string"))
    if "offload_place" not in snapshot.columns:  # older still: no offload's place
        snapshot = snapshot.withColumn("offload_place", F.lit(None).cast("string"))
    blocks = diff_blocks(
        snapshot,
        objects,
        endpoints.blocks,
        managed_ledgers=int(snapshot_record.managed_ledgers or 0),
        max_foreign_samples=max_foreign_samples,
    )
    result = blocks.result
    if scan_record.offload:
        diff_segments(
            snapshot,
            session.held(run.run_id, OFFLOAD_SCAN),
            (endpoints.blocks, endpoints.offload),
            endpoints.policy.pulsar_clusters,
            result,
            scan_record.offload,
            max_foreign_samples=max_foreign_samples,
        )
    # This source's registered targets only, streamed (the registry's other entries are
    # other sources', and many).
    registered = OrphanRegistry(endpoints.state).entries_of_classes(ORPHAN_CLASSES)
    facts = {"ml_high": blocks.ml_high, **registered_facts(snapshot, registered)}
    fields = _fields(result, snapshot_record, scan_record, facts, metadata_max_ledger_id(snapshot))
    return result, fields


def _fields(
    result: DiffResult,
    snapshot_record: SnapshotRecord,
    scan_record: ScanRecord,
    facts: dict[str, Any],
    metadata_max: int | None,
) -> dict[str, Any]:
    """This source's fields of the run's diff record."""
    fields = {
        **result.to_manifest(),
        "snapshot_started_ms": snapshot_record.started_ms,
        "scan_started_ms": scan_record.started_ms,
        "scan_source": scan_record.source,
        "id_counter": scan_record.id_counter,
        "offload": scan_record.offload,
        # The order of runs (a ZooKeeper sequence) and the servers' time of the scan.
        "snapshot_sequence": snapshot_record.sequence,
        "snapshot_instant": snapshot_record.instant,
        "scan_instant": scan_record.instant,
        "metadata_max_ledger_id": metadata_max,
        "snapshot_facts": facts,
    }
    fields.pop("candidates")  # every source's count, the engine's to set
    return fields
