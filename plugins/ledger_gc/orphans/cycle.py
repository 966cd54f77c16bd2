"""One orphan cycle: survey, initialize/correct, delete, report; the engine, written
once for every source of orphans (``sources``: the S3 store's blocks and segments,
BookKeeper's ledgers).

Each step is a function over the run's records in the state store (``run_steps``) and
the registry, so the same code runs in one process (``run_orphan_cycle``: the CLI and
the demo) or as separate Airflow tasks on different workers (``dags/orphan_removal.py``),
and any step can be re-run on its own:

* ``step_survey`` (one Spark application) runs every source's survey (the S3 source's
  is a snapshot, a scan and a diff: ``survey_steps``); what the later steps need (the
  counts, the guard inputs, the candidates, the snapshot's facts about registered
  targets) is the run's ``DiffRecord`` and candidates in the state store. A re-run
  overwrites them;
* ``step_phases`` (guards, then phases 1 and 2) applies a run's scan to the registry in
  one transaction, once: the registry numbers the scan and remembers the run id;
* ``step_delete`` (phase 3) re-checks and deletes what the registry says is due, and
  applies the outcome in one transaction; if ZooKeeper goes away mid-way it records
  nothing and fails (what it did delete is in the audit log, and the next run finds
  those prefixes empty and closes them as ``gone``);
* ``step_report`` appends the summary to the run log, also for a failed cycle.

Every step takes the run's ``Endpoints`` (``config/endpoints.py``: the servers, the
stores and the policy, resolved from the settings by the CLI command or the Airflow task
that runs it), never the settings. Deletion happens only with the policy's
``delete_enabled`` and without ``dry_run``; by default a cycle registers, corrects and
reports what it would delete (DESIGN.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import TYPE_CHECKING, Any, cast

from ledger_gc import termination
from ledger_gc.clock import now_ms
from ledger_gc.config.endpoints import Endpoints
from ledger_gc.config.policy import Policy
from ledger_gc.errors import LedgerGcError, MetadataError
from ledger_gc.metadata import read_budget
from ledger_gc.orphan_source import DeleteRequest, ScanComparison, SurveyRequest
from ledger_gc.orphans import report
from ledger_gc.orphans.delete_lock import DeleteLock, DeleteLockBusy, delete_lock
from ledger_gc.orphans.layout import new_run_id
from ledger_gc.orphans.options import CycleOptions
from ledger_gc.orphans.preflight import check_servers
from ledger_gc.orphans.records import DeleteRecord, DiffRecord, PhasesRecord, ScanRecord
from ledger_gc.orphans.registry import OrphanRegistry, RegistryTransaction
from ledger_gc.orphans.run_steps import DELETE, DIFF, PHASES, SCAN, RunSteps
from ledger_gc.orphans.sources import (
    SOURCES,
    compare_scan_by_source,
    delete_by_source,
    held_by_source,
    hold_by_source,
    reasons_by_source,
    summarize_by_source,
    survey_refusals,
    survey_sources,
)
from ledger_gc.orphans.witness import ServerClocks, observe
from ledger_gc.rules.orphans import guards, horizon, outcomes, phases, segments, timekeeping
from ledger_gc.rules.orphans.classify import Candidate
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.rules.orphans.timekeeping import Instant
from ledger_gc.state.batching import batches

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

Clock = Callable[[], int]


class DeleteLockLost(LedgerGcError):
    """The delete lock was lost while this cycle deleted (its session expired): it
    stopped before its next request; the run is incomplete (exit 1), not wrong."""


class OrphanCycleError(LedgerGcError):
    """A cycle failed; ``report`` is the summary that was appended to the run log."""

    def __init__(self, message: str, report: report.CycleReport) -> None:
        super().__init__(message)
        self.report = report


# --- the survey ------------------------------------------------------------------------


def step_survey(
    endpoints: Endpoints,
    run_id: str,
    spark: SparkSession,
    *,
    inventory: str | None = None,
    offload_inventory: str | None = None,
    clock: Clock = now_ms,
    witness: ServerClocks | None = None,
) -> dict[str, Any]:
    """Every source's survey in one Spark application (one JVM start-up): the S3 store's
    snapshot, scan and diff, then BookKeeper's (orphans/sources.py). Their findings are
    the run's diff record and candidates, recorded in one transaction; a re-run
    overwrites them. Returns a short summary (the app prints it; the record holds the
    rest).

    The registry is read by each source for its own targets, streamed
    (``orphan_source.Registered``); the record keeps its mark, read before any source
    reads it (``DiffRecord.registry_mark``), not the prefixes it held."""
    registry = OrphanRegistry(endpoints.state)
    request = SurveyRequest(
        endpoints=endpoints,
        run_id=run_id,
        spark=spark,
        clock=clock,
        registry=registry,
        # (a source below the engine reads ZooKeeper's clock by it: the Pulsar metadata's)
        witness=witness or ServerClocks(),
        inventory=inventory,
        offload_inventory=offload_inventory,
    )
    steps = RunSteps(endpoints.state, run_id)
    steps.start_step(DIFF)
    mark = registry.mark()
    diff, candidates = survey_sources(request)
    diff = replace(diff, registry_mark=mark)
    steps.write_diff(diff, candidates, endpoints.blocks.prefix)
    scan = steps.read_record(SCAN, ScanRecord, required=False) or ScanRecord()
    return {
        "run_id": run_id,
        "managed_ledgers": diff.managed_ledgers,
        "objects": scan.objects,  # the store's (the diff's count has the offload bucket's)
        "bytes": scan.bytes,
        "candidates": diff.candidates,
        "orphan_bytes": diff.orphan_bytes,
        "orphan_fraction": diff.orphan_fraction,
    }


# --- phases 1 and 2 --------------------------------------------------------------------


#: Candidates (and registered entries) the phases step decides on at a time: its memory
#: is a batch's plus what is per topic or managed ledger, never per target. A candidate
#: is about 1.2 KB of a batch (its row, its ``Candidate``, its entry, its history
#: event): 10,000 a batch were 12 MiB, the top of a 1M-ledger survey's driver on Spark.
PHASES_BATCH = 2_500


@dataclass
class _ScanView:
    """What the phases step keeps of the whole scan's candidates (a first pass over
    them, a batch at a time): those the sources hold back, and each source's summary
    for its comparison with the previous scan (``OrphanSource.summarize``)."""

    held: list[horizon.Held]
    summaries: dict[str, set[str]]


def _view_scan(steps: RunSteps, diff: DiffRecord, store_prefix: str, batch: int) -> _ScanView:
    held_by: dict[str, list[horizon.Held]] = {}
    summaries: dict[str, set[str]] = {}
    for page in batches(steps.iter_candidates(), batch):
        usable, held = hold_by_source({c.prefix(store_prefix): c for c in page}, diff)
        for item in held:
            held_by.setdefault(item.candidate.target_class, []).append(item)
        summarize_by_source(usable.values(), summaries)
    # As hold_by_source over every candidate at once: each source's held by prefix, in
    # the order of the sources (only the S3 source holds any).
    held = [
        item
        for source in SOURCES
        for item in sorted(
            (i for cls, items in held_by.items() if source.owns(cls) for i in items),
            key=lambda i: i.prefix,
        )
    ]
    return _ScanView(held, summaries)


def step_phases(
    endpoints: Endpoints,
    run_id: str,
    *,
    force: bool = False,
    clock: Clock = now_ms,
    batch: int = PHASES_BATCH,
) -> PhasesRecord:
    """Guards, then initialize and correct, in one registry transaction (idempotent).

    Reads only the state store: the survey's diff record (guard inputs, snapshot facts)
    and candidates, and the registry; records its result there (``PHASES``). The
    candidates and the registry are read ``batch`` at a time, never all at once."""
    steps = RunSteps(endpoints.state, run_id)
    diff = steps.read_record(DIFF, DiffRecord) or DiffRecord()
    steps.start_step(PHASES)
    refusals = survey_refusals(diff, endpoints.policy.orphan_max_fraction, force=force)
    view = _view_scan(steps, diff, endpoints.blocks.prefix, batch)
    held = view.held
    stale = guards.stale_metadata(horizon.proof_of_staleness(held), endpoints.zk.hosts, force=force)
    if stale is not None:
        refusals.insert(0, stale)
    for item in held:
        log.warning("orphan cycle %s holds %s: %s", run_id, item.prefix, item.reason)
    registry = OrphanRegistry(endpoints.state)
    result = PhasesRecord(
        forced=force,
        refusals=[r.to_dict() for r in refusals],
        held=[item.to_dict() for item in held],
        # Whose offloaded segments are this store's, as the diff learned it: kept with
        # the scan in the registry, where the delete step reads it (segments.py).
        our_clusters=diff.our_clusters,
    )
    if guards.blocking(refusals):
        for refusal in guards.blocking(refusals):
            log.warning("orphan cycle %s refused: %s", run_id, refusal.reason)
        steps.write_record(PHASES, result)
        return result
    # The scan's time as the servers' clocks read it (scan step); a run of an older
    # ledger-gc has none, and then no grace time passes from it (timekeeping.py).
    instant = Instant.from_dict(diff.scan_instant) or Instant(clock())
    # The result is recorded after the registry's transaction (a second write while it
    # is open would wait for it): a crash in between leaves the scan applied and no
    # record, and the re-run finds the scan of this run and records its result.
    scan = _Scan(steps, diff, endpoints.blocks.prefix, view, instant, batch)
    applied = _apply_scan(registry, run_id, result, scan)
    steps.write_record(PHASES, applied)
    return applied


@dataclass(frozen=True)
class _Scan:
    """One run's scan as the phases apply it: where its candidates are, and what the
    first pass over them kept (``_ScanView``)."""

    steps: RunSteps
    diff: DiffRecord
    store_prefix: str
    view: _ScanView
    instant: Instant
    batch: int


@dataclass
class _Applied:
    """The counts of what a scan did to the registry, and the candidates its sources'
    comparison held (recorded with the others held)."""

    added: int = 0
    seen: int = 0
    restarted: int = 0
    corrected: int = 0
    held_now: dict[str, str] = field(default_factory=dict)  # prefix: why
    held_rows: list[dict[str, Any]] = field(default_factory=list)

    def write(
        self,
        txn: RegistryTransaction,
        changes: phases.PhaseChanges,
        run_id: str,
        number: int,
        now: int,
        before: Mapping[str, RegistryEntry],
    ) -> None:
        """One batch's changes, written in the step's transaction (``before``: the
        registered entries they were decided from, by prefix)."""
        again: list[str] = []
        rewritten: list[RegistryEntry] = []
        for entry in changes.seen:
            if _as_registered(entry, before):
                again.append(entry.prefix)
            else:
                rewritten.append(entry)
        txn.see_again(again, number, now)
        txn.upsert_many(chain(changes.added, rewritten, (entry for entry, _ in changes.restarted)))
        for entry, _ in changes.corrected:
            txn.remove(entry.prefix)
        txn.add_history_many(
            chain(
                ((entry, phases.REGISTERED, "first seen orphaned") for entry in changes.added),
                ((entry, phases.CLOCK_RESTARTED, why) for entry, why in changes.restarted),
                ((entry, phases.CORRECTED, why) for entry, why in changes.corrected),
            ),
            run_id=run_id,
            scan=number,
            time_ms=now,
        )
        self.added += len(changes.added)
        self.seen += len(changes.seen)
        self.restarted += len(changes.restarted)
        self.corrected += len(changes.corrected)


def _as_registered(seen: RegistryEntry, before: Mapping[str, RegistryEntry]) -> bool:
    """Whether an entry seen again has the data it was registered with (its objects,
    bytes and newest block): then only its clock moved (``RegistryTransaction.see_again``)."""
    was = before.get(seen.prefix)
    return (
        was is not None
        and (seen.objects, seen.bytes, seen.newest_ms) == (was.objects, was.bytes, was.newest_ms)
        and (seen.last_scan, seen.scans_seen) == (was.last_scan + 1, was.scans_seen + 1)
    )


def _apply_scan(
    registry: OrphanRegistry, run_id: str, result: PhasesRecord, scan: _Scan
) -> PhasesRecord:
    """Phases 1 and 2 in one registry transaction, once per run id: the candidates a
    batch at a time (with the entries of their prefixes), then the registered entries
    this scan did not see, a batch at a time."""
    diff = scan.diff
    now = scan.instant.now_ms()
    sequence = diff.snapshot_sequence
    with registry.transaction() as txn:
        done = txn.scan_of_run(run_id)
        if done is not None:
            return PhasesRecord.from_dict(done.result)
        latest = txn.latest_scan()
        before = PhasesRecord.from_dict(latest.result) if latest is not None else PhasesRecord()
        # Ordered by ZooKeeper's sequence, not by any host's clock: a run whose clock
        # was days fast must not make every later run look older (issue 11).
        newer = before.snapshot_sequence if latest is not None else None
        if (
            latest is not None
            and newer is not None
            and sequence is not None
            and newer > sequence
            and not _sequence_restarted(before, diff)
        ):
            stale = guards.Refusal(
                guards.STALE_RUN,
                f"run {latest.run_id} already applied a scan whose snapshot was taken later "
                f"(#{latest.number}, ZooKeeper sequence {newer} > {sequence}); this run's "
                "scan is older and is not applied",
            )
            return replace(result, refusals=[*result.refusals, stale.to_dict()])
        number = txn.record_scan(run_id, now, {})
        # What each source sees against the previous applied scan (e.g. a gone topic
        # whose BookKeeper ledgers still grow): held now, remembered for the next.
        compared, record = compare_scan_by_source(scan.view.summaries, diff, before, number)
        tally = _Applied()
        for page in scan.steps.candidate_pages(txn.conn, scan.batch):
            _apply_candidates(txn, page, scan, compared, tally, run_id, number, now)
        _correct_unseen(txn, scan, compared, tally, run_id, number, now)
        applied = replace(
            result,
            applied=True,
            held=[*result.held, *tally.held_rows],
            scan_number=number,
            snapshot_started_ms=diff.snapshot_started_ms,
            snapshot_sequence=sequence,
            snapshot_instant=diff.snapshot_instant,
            instant=scan.instant.to_dict() if diff.scan_instant else None,
            added=tally.added,
            seen=tally.seen,
            restarted=tally.restarted,
            corrected=tally.corrected,
            **record,
        )
        txn.set_scan_result(number, applied.to_dict())
    return applied


def _apply_candidates(
    txn: RegistryTransaction,
    page: list[Candidate],
    scan: _Scan,
    compared: dict[str, ScanComparison],
    tally: _Applied,
    run_id: str,
    number: int,
    now: int,
) -> None:
    """Phase 1 and the new-data correction for one batch of candidates: those the
    sources let through, against the registered entries of the same prefixes. A
    candidate the comparison holds (by itself or by its registered entry) is not
    registered; its entry is corrected with the unseen ones (``_correct_unseen``)."""
    candidates, _ = hold_by_source({c.prefix(scan.store_prefix): c for c in page}, scan.diff)
    entries = txn.entries_of(candidates)
    for prefix in list(candidates):
        candidate = candidates[prefix]
        entry = entries.get(prefix)
        why = held_by_source(compared, candidate.target_class, candidate.ml_name)
        if why is None and entry is not None:
            why = held_by_source(compared, entry.target_class, entry.ml_name)
        if why is not None:
            del candidates[prefix]
            entries.pop(prefix, None)
            tally.held_now[prefix] = why
            tally.held_rows.append(horizon.Held(candidate, prefix, why, False).to_dict())
    changes = phases.initialize_and_correct(entries, candidates, number, now, {})
    tally.write(txn, changes, run_id, number, now, entries)


def _correct_unseen(
    txn: RegistryTransaction,
    scan: _Scan,
    compared: dict[str, ScanComparison],
    tally: _Applied,
    run_id: str,
    number: int,
    now: int,
) -> None:
    """Phase 2 for the registered entries this scan did not find orphaned (after the
    candidates' batches, every entry a usable candidate saw has this scan's number or
    is gone): each corrected with why, a batch at a time."""
    diff = scan.diff
    held_reasons = {item.prefix: item.reason for item in scan.view.held}
    surveyed = _surveyed(txn, diff)
    for page in txn.unseen_pages(number, scan.batch):
        # An entry registered after the survey read the registry (another cycle's) has
        # no facts here; it gets the generic reason (reasons are text, never a verdict).
        missing = [entry for entry in page if surveyed(entry)]
        reasons = reasons_by_source(missing, diff, number)
        for entry in page:
            why = tally.held_now.get(entry.prefix) or held_by_source(
                compared, entry.target_class, entry.ml_name
            )
            if why is None:
                why = held_reasons.get(entry.prefix)
            if why is not None:
                reasons[entry.prefix] = why
        unseen = {entry.prefix: entry for entry in page}
        changes = phases.initialize_and_correct(unseen, {}, number, now, reasons)
        tally.write(txn, changes, run_id, number, now, unseen)


def _surveyed(txn: RegistryTransaction, diff: DiffRecord) -> Callable[[RegistryEntry], bool]:
    """Whether a registered entry was in the registry when the survey read it: by the
    registry's mark the survey kept (``RegistryTransaction.surveyed``), or, in a record
    an older ledger-gc wrote (an upgrade mid-run), by its list of the prefixes."""
    if diff.registry_mark is None:
        listed = diff.registered
        return lambda entry: entry.prefix in listed
    return txn.surveyed(diff.registry_mark)


def _sequence_restarted(latest: PhasesRecord, diff: DiffRecord) -> bool:
    """Whether ZooKeeper's own clock says this run's snapshot came *after* the latest
    applied one although its sequence is lower: the counter under ``/ledger-gc/ticks``
    started again (a DR failover, metadata copied to a new ensemble, ``/ledger-gc``
    removed). Then the sequence orders nothing, and refusing would stop every cycle until
    the new counter passed the old one. Runs without both snapshot times (older
    ledger-gc) are ordered by the sequence alone."""
    before = Instant.from_dict(latest.snapshot_instant)
    now = Instant.from_dict(diff.snapshot_instant)
    if before is None or now is None or before.zk_ms is None or now.zk_ms is None:
        return False
    if now.zk_ms <= before.zk_ms:
        return False
    log.warning(
        "ZooKeeper's run sequence went back (%s < %s) while its clock went on: the counter "
        "under /ledger-gc/ticks started again; ordering runs by ZooKeeper's time from here",
        diff.snapshot_sequence,
        latest.snapshot_sequence,
    )
    return True


# --- phase 3 ---------------------------------------------------------------------------


def step_delete(
    endpoints: Endpoints,
    run_id: str,
    *,
    options: CycleOptions = CycleOptions(),
    spark: SparkSession | None = None,
    clock: Clock = now_ms,
    distribute_over: int | None = None,
    lock_wait_seconds: float | None = None,
    witness: ServerClocks | None = None,
) -> DeleteRecord:
    """Phase 3: re-check and delete (or report) what is due; one registry transaction.

    Runs under the delete lock (``delete_lock.py``): at most one cycle deletes at a time,
    and each re-reads the registry once it holds the lock. ``lock_wait_seconds``
    defaults to the policy's ``orphan_lock_wait_seconds``; more eligible entries than
    ``distribute_over`` (default: its ``orphan_delete_spark_over``) go to ``spark``'s
    executors."""
    steps = RunSteps(endpoints.state, run_id)
    applied = steps.read_record(PHASES, PhasesRecord) or PhasesRecord()
    # What an earlier attempt of this step deleted (Airflow's retry of the task, same
    # run: say its lock was lost half-way) stays in this run's record and report.
    earlier = steps.read_record(DELETE, DeleteRecord, required=False)
    carried = [r for r in earlier.results if r.action == outcomes.DELETED] if earlier else []
    steps.start_step(DELETE)
    deleting_now = options.deleting(endpoints.policy)
    result = DeleteRecord(deleting=deleting_now)
    record = _DeleteRecorder(steps, carried)
    if not applied.applied:
        result = replace(
            result, skipped="the scan was not applied (see the refusals); nothing deleted"
        )
        return record(result)
    policy = endpoints.policy
    wait = policy.orphan_lock_wait_seconds if lock_wait_seconds is None else lock_wait_seconds
    if distribute_over is None:
        distribute_over = policy.orphan_delete_spark_over
    # BookKeeper's znode deletes are fenced by a lock of its ensemble's when its sessions
    # are not Pulsar's, and the configuration store's (a deleted tenant's partitioned-
    # topic metadata) by one of its own when it is not the local store: all are taken
    # before anything is read or sent.
    bookkeeper = endpoints.bookkeeper.zk if endpoints.bookkeeper_on else None
    config_store = endpoints.configuration if endpoints.pulsar_metadata_on else None
    try:
        with delete_lock(
            endpoints.zk, run_id, wait, bookkeeper=bookkeeper, config_store=config_store
        ) as lock:
            return _delete_under_lock(
                endpoints,
                record,
                result,
                spark,
                clock,
                witness,
                distribute_over,
                lock,
            )
    except DeleteLockBusy as exc:
        log.warning("orphan cycle %s: %s", run_id, exc)
        return record(replace(result, skipped=str(exc), lock_busy=True))


@dataclass(frozen=True)
class _DeleteRecorder:
    """Writes the delete step's record with what earlier attempts of it deleted."""

    steps: RunSteps
    carried: list[outcomes.RecheckResult]

    def __call__(self, result: DeleteRecord) -> DeleteRecord:
        if self.carried:
            result = replace(result, results=[*self.carried, *result.results])
        self.steps.write_record(DELETE, result)
        return result


def delete_needs_spark(endpoints: Endpoints) -> bool:
    """Whether the delete step has work for executors: more registered orphans than
    ``endpoints.policy.orphan_delete_spark_over`` (an upper bound of what can be due, read
    without the lock; ``step_delete`` decides again under it)."""
    return OrphanRegistry(endpoints.state).count() > endpoints.policy.orphan_delete_spark_over


def _delete_under_lock(
    endpoints: Endpoints,
    record: _DeleteRecorder,
    result: DeleteRecord,
    spark: SparkSession | None,
    clock: Clock,
    witness: ServerClocks | None,
    distribute_over: int,
    lock: DeleteLock,
) -> DeleteRecord:
    """Phase 3 proper, holding the delete lock. Everything is read *after* the lock was
    had: an overlapping cycle that held it before may have deleted, or applied a newer
    scan, and what it closed must not be deleted or audited again."""
    run_id = record.steps.run_id
    registry = OrphanRegistry(endpoints.state)
    latest = registry.latest_scan()
    if latest is None or latest.run_id != run_id:
        result = replace(
            result,
            skipped=f"a newer scan (run {latest.run_id if latest else '?'}) was applied "
            "since; only the latest run may delete",
        )
        return record(result)
    # Now, as the servers' clocks say: grace counts what they measured since each
    # entry's first scan, retention compares with S3's own LastModified (timekeeping.py).
    _, instant, warnings = observe(endpoints.zk, endpoints.blocks, run_id, witness, clock)
    now = instant.now_ms()
    result = replace(result, now_instant=instant.to_dict(), clock_warnings=warnings)
    # The registry streamed, only the due entries kept (phases.plan_deletion's eligible).
    eligible = phases.eligible_entries(
        registry.iter_entries(),
        latest.number,
        now,
        endpoints.policy.grace_seconds,
        endpoints.policy.retention_seconds,
        timekeeping.GraceClock(registry.scan_instants(), instant),
    )
    ours = _our_clusters(endpoints.policy, latest.result).to_dict()
    result = replace(result, eligible=len(eligible), our_clusters=ours)

    # A signal, or the lock lost with its session: stop before the next request.
    def stop() -> bool:
        return termination.requested() or lock.should_stop()

    # Each source re-checks and deletes what it owns (orphans/sources.py): the S3 blocks
    # and segments in batches (on Spark's executors when many), BookKeeper one znode at
    # a time.
    request = DeleteRequest(
        endpoints=endpoints,
        run_id=run_id,
        now_ms=now,
        deleting=result.deleting,
        should_stop=stop,
        spark=spark,
        distribute_over=distribute_over,
        ours=ours,
        fence_for=lock.fence_for,
    )
    mark = read_budget.METER.mark()
    results = delete_by_source(request, eligible)
    reads = read_budget.Reads.merged([read_budget.METER.since(mark)])
    reads.add(request.executor_reads.per_second)
    # Audited ahead by the delete path (deletion.Deleter).
    result = replace(result, results=results, zk_reads=reads.to_dict())
    unavailable = [r for r in results if r.unavailable]
    if unavailable:
        result = record(replace(result, failed=unavailable[0].error))
        done = sum(1 for r in results if r.action == outcomes.DELETED)
        # A delete sent whose answer was lost says so (it may have been applied).
        sent = [r.reason for r in unavailable if r.action == outcomes.FAILED]
        raise MetadataError(
            f"ZooKeeper became unavailable during the orphan delete ({unavailable[0].error}); "
            f"{len(unavailable)} entries were not re-checked and nothing more was deleted "
            f"({done} deleted before, see the audit log); the registry is unchanged and the "
            "next run retries" + "".join(f"; {reason}" for reason in sent)
        )
    if lock.lost() is not None:
        # What was deleted is in the audit log; the registry is left for the cycle that
        # holds the lock now (it re-checks, and closes what is gone as ``gone``). A
        # ZooKeeper outage loses the lock too, and is reported as such above.
        record(replace(result, skipped=lock.lost(), lock_lost=True))
        raise DeleteLockLost(str(lock.lost()))
    _apply_delete_results(registry, results, run_id, latest.number, now)
    return record(result)


def _our_clusters(policy: Policy, scan_result: dict[str, Any]) -> segments.OurClusters:
    """The clusters whose segments the delete step may delete: LEDGERGC_PULSAR_CLUSTER as
    it is now, else what the applied scan learned from the store's live segments (a scan
    applied by an older ledger-gc learned nothing: only nameless segments are ours)."""
    if policy.pulsar_clusters:
        return segments.our_clusters(policy.pulsar_clusters, [])
    learned = segments.OurClusters.from_dict(scan_result.get("our_clusters"))
    return learned or segments.our_clusters((), [])


def _apply_delete_results(
    registry: OrphanRegistry,
    results: list[outcomes.RecheckResult],
    run_id: str,
    scan: int,
    now: int,
) -> None:
    events = {
        outcomes.DELETED: phases.DELETED,
        outcomes.GONE: phases.GONE,
        outcomes.CORRECTED: phases.CORRECTED,
    }
    with registry.transaction() as txn:
        # Only the entries the results name (the registry may hold 500,000; a dry run's
        # first cycles none of them).
        entries = txn.entries_of({result.prefix for result in results})
        for result in results:
            entry = entries.get(result.prefix)
            if entry is None:
                continue
            action = result.action
            if action in events:
                txn.remove(entry.prefix)
                sizes: dict[str, int] = (
                    {"objects": result.objects, "size": result.bytes}
                    if action == outcomes.DELETED
                    else {}
                )
                txn.add_history(
                    entry,
                    events[action],
                    result.reason,
                    run_id=run_id,
                    scan=scan,
                    time_ms=now,
                    **sizes,
                )
            elif action == outcomes.HELD:
                txn.add_history(
                    entry, phases.HELD, result.reason, run_id=run_id, scan=scan, time_ms=now
                )
            elif action == outcomes.FAILED:
                error = result.error or result.reason
                txn.note_failure(entry.prefix, error)
                txn.add_history(
                    entry, phases.DELETE_FAILED, error, run_id=run_id, scan=scan, time_ms=now
                )


# --- report and the whole cycle --------------------------------------------------------


def step_report(
    endpoints: Endpoints,
    run_id: str,
    *,
    options: CycleOptions = CycleOptions(),
    clock: Clock = now_ms,
    started_ms: int | None = None,
    error: BaseException | str | None = None,
) -> report.CycleReport:
    """Build the cycle's report from its records and the registry; append it to the run log."""
    cycle_report = report.build_report(
        endpoints, run_id, options=options, now_ms=clock(), started_ms=started_ms, error=error
    )
    report.publish(endpoints, cycle_report)
    return cycle_report


def run_orphan_cycle(
    endpoints: Endpoints,
    *,
    dry_run: bool | None = None,
    force: bool = False,
    inventory: str | None = None,
    offload_inventory: str | None = None,
    run_id: str | None = None,
    spark: SparkSession | None = None,
    clock: Clock | None = None,
    witness: ServerClocks | None = None,
) -> report.CycleReport:
    """Run one full cycle in this process and return its report (also in the run log).

    ``spark=None`` uses (or creates) a local session (``local[*]``). ``clock`` (epoch ms)
    is this host's clock (tests give it a wrong one); ``witness`` reads the servers'
    clocks (tests: ``ServerClocks(offset_ms=...)`` for time that passed). Raises
    ``OrphanCycleError`` (with the failed run's report) when a step fails: nothing is
    deleted after a failure. ``endpoints``: what the caller (the edge) resolved its
    settings to.
    """
    clock = clock or now_ms
    # A damaged registry stops the cycle here, before Spark starts or anything is read:
    # one error naming the file and the fix, and no failed-run report that would need
    # the registry too (issue 11).
    OrphanRegistry(endpoints.state).check()
    run_id = run_id or new_run_id(now_ms=clock())
    options = CycleOptions(
        dry_run=dry_run, force=force, inventory=inventory, offload_inventory=offload_inventory
    )
    started = clock()
    # The servers before Spark starts: one that cannot be reached (or a BookKeeper
    # layout that cannot be read) is one line, exit 2, and no run in the run log.
    check_servers(endpoints)
    try:
        if spark is None:
            from ledger_gc.spark.session import LazySession, local_session

            # Made when a step needs it (or starts it early): a Pulsar cluster's cycle
            # whose ledgers' records are cached needs none.
            spark = cast("SparkSession", LazySession(local_session))
        step_survey(
            endpoints,
            run_id,
            spark,
            inventory=inventory,
            offload_inventory=offload_inventory,
            clock=clock,
            witness=witness,
        )
        step_phases(endpoints, run_id, force=force, clock=clock)
        step_delete(
            endpoints,
            run_id,
            options=options,
            spark=spark,
            clock=clock,
            witness=witness,
        )
    except Exception as exc:
        failed = step_report(
            endpoints, run_id, options=options, clock=clock, started_ms=started, error=exc
        )
        if isinstance(exc, LedgerGcError):
            raise OrphanCycleError(str(exc), failed) from exc
        raise
    return step_report(endpoints, run_id, options=options, clock=clock, started_ms=started)
