"""The report of an orphan cycle: what ``ledgergc orphans`` prints and the run log keeps.

One JSON object per cycle is appended to the state store's run log
(``run_log.append_run(state, "orphans", ...)``), built from the run's step records
(``run_steps``) and the registry, so the report task may run on any worker. The Airflow
view and the Prometheus metrics read it, so its fields are a contract. All times are
epoch milliseconds, sizes bytes.

Top level:

``kind`` "orphans"; ``run_id``; ``status`` "ok" | "refused" (a guard stopped the
cycle; nothing registered or deleted) | "failed" (a step raised; see ``error``);
``started_ms``, ``finished_ms``, ``duration_seconds``; ``dry_run`` (true unless
deleting for real), ``delete_enabled``, ``forced``; ``settings`` (grace_seconds,
retention_seconds, orphan_max_fraction, bucket, prefix, zk_hosts); ``error``,
``error_type`` (null unless failed).

``snapshot``: managed_ledgers, listed_ledgers, markers, started_ms (null if the step did
not complete). ``scan``: source ("listing" | "inventory"), inventory, objects, bytes,
started_ms.

``classes``: for each of ``live``, ``marked``, ``orphan-ledger``, ``orphan-partition``,
``foreign``, ``live-segment``, ``orphan-segment``, ``offload-foreign``: ``{"objects",
"bytes", "units"}`` (units: ledgers; partitions for orphan partitions; segments, each a
data and an index object, for the segment classes; 0 for foreign). ``orphan_bytes``,
``orphan_fraction`` (of all scanned bytes, the offload bucket's included).

``phases``: for each phase below, ``{"count", "bytes", "by_class": {"orphan-ledger":
{"count", "bytes"}, "orphan-partition": {...}}}``; bytes are the registry's (last scan):

* ``registered``: entries in the registry after the cycle;
* ``new``: registered by this cycle (initialize);
* ``corrected``: removed by this cycle because no longer orphaned (correction, or the
  live re-check);
* ``waiting_grace``: registered, grace window not over;
* ``waiting_retention``: grace over, newest object younger than retention;
* ``eligible``: past both (deleted now, or waiting for deletion to be enabled/retried);
* ``would_delete``: confirmed by the live re-check, not deleted because of a dry run;
* ``deleted``: deleted by this cycle (bytes as deleted);
* ``delete_failed``: a delete or re-check that failed; retried next cycle.

``namespaces``: ``{"tenant/ns": {"classes": {...as above...}, "phases": {...as
above...}}}``; keys outside any managed-ledger directory count under ``"(none)"``.

``refusals``: ``[{"guard", "reason", "forced"}]``, guards ``metadata-read``,
``zero-managed-ledgers``, ``orphan-fraction``, ``no-live-segments``, ``stale-metadata``,
``stale-run`` (a
forced guard is listed with ``forced: true`` and did not stop the cycle).

``held``: ``[{"prefix", "target_class", "ml_name", "ledger_id", "bytes", "reason"}]``:
orphan-looking targets newer than everything the metadata knows (``horizon.py``); never
registered or deleted.

``warnings``: what the cycle noticed about clocks (this host's against ZooKeeper's and
S3's, see ``timekeeping.py``); they never change a decision.

``delete_skipped``: why phase 3 deleted nothing (null: it ran); ``pending``: true when
that was because another cycle held the delete lock (exit status 1; the next run
retries).

``deleted``, ``would_delete``: ``[{"prefix", "target_class", "ml_name", "ledger_id",
"objects", "bytes", "reason"}]`` (``deleted`` items also ``recoverable``).
``bytes_reclaimed``: bytes this cycle deleted and freed; ``bytes_recoverable``: bytes it
deleted in a versioned bucket, which keeps them as noncurrent versions (not freed).
``waiting``: ``[{"prefix", "target_class", "ml_name",
"ledger_id", "bytes", "phase", "first_seen_ms", "until_ms"}]`` soonest first (at most
``MAX_LISTED``; ``waiting_total`` counts all). ``corrected``: ``[{"prefix",
"target_class", "ml_name", "ledger_id", "reason"}]``. ``failed``: ``[{"prefix",
"error"}]``. ``foreign``: ``{"objects", "bytes", "samples": [{"key", "reason"}]}``.
``registry``: ``{"entries", "bytes", "scan_number"}``.

``zookeeper``: what the cycle cost the ZooKeeper ensemble(s) it read: ``{"reads",
"peak_per_second", "max_reads_per_second", "by_step": {"snapshot", "pulsar_metadata",
"bookkeeper", "delete"}}``, each step ``{"reads", "peak_per_second"}`` (null if it did not run):
znodes read (every read of a multi-read counts), by the driver and the executors
together, and the most in one second of the wall clock; ``max_reads_per_second`` is
``LEDGERGC_ZK_MAX_READS_PER_SECOND`` (null: no bound). The BookKeeper survey's own
figures (records read and served from its record cache, time per step) are in
``bookkeeper.cost``.

``pulsar_metadata``: null with the Pulsar-metadata source off, else its survey's
manifest (``rules/pulsar_metadata/classes.PulsarMetadataManifest``: ``classes`` class ->
store -> ``{"leftovers", "znodes", "bytes", "ledgers", "ledger_bytes"}``, ``samples``,
``held``, ``leftovers``, ``local_znodes``...) with ``ledger_bytes`` filled from the
BookKeeper survey, and ``held_back`` ``{"ledgers", "bytes"}`` (BookKeeper ledgers every
leftover names, held ones included), ``stuck_deletes`` and ``not_replicated_here`` (the
samples of those classes: ``{"name", "store", "class", "why", "command"}``),
``deleted`` (leftovers), ``znodes_deleted``, ``bytes_reclaimed`` (znodes' data).

``tiered``: null with tiered storage off, else ``{"bucket", "prefix", "source",
"objects", "bytes", "live_segments", "orphan_segments", "orphan_bytes",
"foreign_objects", "deleted", "bytes_reclaimed", "other_cluster_segments",
"other_cluster_bytes", "other_clusters", "other_bucket_segments", "other_bucket_bytes",
"orphan_upload_parts", "orphan_upload_part_bytes", "upload_parts_deleted",
"upload_part_bytes_reclaimed", "our_clusters", "held_at_recheck", "held"}``:
the offload bucket as scanned and what this cycle deleted from it (segments, bytes).
``other_bucket_segments``/``_bytes``: segments whose ledgers were offloaded to another
driver or bucket (``driverMetadata``; class ``other-bucket-segment``: kept, listed in
``held``); ``orphan_upload_parts``/``_bytes``: GCS multipart leftovers found
(``orphan-upload-part``), ``upload_parts_deleted`` and ``upload_part_bytes_reclaimed``
what this cycle deleted of them.
``other_cluster_segments``/``_bytes``: segments whose objects name another Pulsar cluster
(class ``other-cluster-segment``; never registered or deleted, not orphans for the
byte-fraction guard); ``other_clusters``: their count per ``pulsarClusterName``
(``(untagged)``: objects with none); ``our_clusters``: ``{"names", "untagged",
"source", "sampled"}``, the names taken as this store's (``source`` "setting" or
"learned" from ``sampled`` live segments); ``held_at_recheck``: registered segments the
live re-check kept as another cluster's; ``held``: ``[{"prefix", "target_class",
"ml_name", "ledger_id", "bytes", "reason"}]``, some of both.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger_gc import run_log
from ledger_gc.bookkeeper.survey import with_later_holds
from ledger_gc.config.endpoints import Endpoints, ZkEndpoint
from ledger_gc.orphans import layout, run_steps
from ledger_gc.orphans.records import (
    CycleStatus,
    DeleteRecord,
    DiffRecord,
    PhasesRecord,
    ScanRecord,
    SnapshotRecord,
)
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.orphans.run_steps import DELETE, DIFF, PHASES, SCAN, SNAPSHOT, RunSteps
from ledger_gc.rules.bookkeeper.classify import BK_TARGET_CLASSES
from ledger_gc.rules.bookkeeper.records import BYTES_MEANING
from ledger_gc.rules.orphans import outcomes, phases, timekeeping
from ledger_gc.rules.orphans.classify import (
    CLASSES,
    FOREIGN,
    LIVE_SEGMENT,
    NO_NAMESPACE,
    OFFLOAD_FOREIGN,
    ORPHAN_CLASSES,
    ORPHAN_SEGMENT,
    ORPHAN_UPLOAD_PART,
    OTHER_BUCKET_SEGMENT,
    OTHER_CLUSTER_SEGMENT,
)
from ledger_gc.rules.orphans.guards import METADATA_READ
from ledger_gc.rules.orphans.outcomes import RecheckResult
from ledger_gc.rules.orphans.timekeeping import Instant
from ledger_gc.rules.pulsar_metadata.classes import (
    PM_NOT_REPLICATED_HERE,
    PM_ORPHAN_CLASSES,
    PM_STUCK_DELETE,
    parse_target,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import RowMapping

    from ledger_gc.orphans.options import CycleOptions

KIND = run_log.ORPHANS
PHASE_NAMES = (
    "registered",
    "new",
    "corrected",
    "waiting_grace",
    "waiting_retention",
    "eligible",
    "would_delete",
    "deleted",
    "delete_failed",
)
MAX_LISTED = 200
#: Run folders kept in the state dir (each holds a full listing of the bucket).
KEEP_RUN_FOLDERS = 10


@dataclass(frozen=True)
class CycleReport:
    """The report of one cycle: how it ended, and ``to_dict()``, the JSON described in
    the module's docstring (a contract of the page and the metrics, so kept a mapping)."""

    run_id: str
    status: CycleStatus
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return self.data

    @property
    def deleted(self) -> list[dict[str, Any]]:
        return list(self.data["deleted"])

    @property
    def refusals(self) -> list[dict[str, Any]]:
        return list(self.data["refusals"])

    def phase(self, name: str) -> dict[str, Any]:
        return dict(self.data["phases"][name])


def _empty_phase() -> dict[str, Any]:
    return {
        "count": 0,
        "bytes": 0,
        "by_class": {name: {"count": 0, "bytes": 0} for name in ORPHAN_CLASSES},
    }


class _PhaseTally:
    """Counts and bytes per phase, class and namespace.

    Summed flat, by (phase, namespace, class), as they are added (the report adds one
    for every registered entry: 500,000 at a 10M-ledger cluster); ``total`` and
    ``namespaces`` are made from the sums when read."""

    def __init__(self) -> None:
        self._sums: dict[tuple[str, str, str], list[int]] = {}

    def add(self, phase: str, namespace: str, target_class: str, size: int) -> None:
        key = (phase, namespace, target_class)
        sums = self._sums.get(key)
        if sums is None:
            sums = self._sums[key] = [0, 0]
        sums[0] += 1
        sums[1] += size

    @property
    def total(self) -> dict[str, Any]:
        total = {name: _empty_phase() for name in PHASE_NAMES}
        for (phase, _, target_class), sums in self._sums.items():
            _count(total[phase], target_class, sums)
        return total

    @property
    def namespaces(self) -> dict[str, dict[str, Any]]:
        namespaces: dict[str, dict[str, Any]] = {}
        for (phase, namespace, target_class), sums in self._sums.items():
            per_ns = namespaces.get(namespace)
            if per_ns is None:
                per_ns = namespaces[namespace] = {n: _empty_phase() for n in PHASE_NAMES}
            _count(per_ns[phase], target_class, sums)
        return namespaces


def _count(bucket: dict[str, Any], target_class: str, sums: list[int]) -> None:
    count, size = sums
    bucket["count"] += count
    bucket["bytes"] += size
    by_class = bucket["by_class"].setdefault(target_class, {"count": 0, "bytes": 0})
    by_class["count"] += count
    by_class["bytes"] += size


def _target(item: Mapping[str, Any] | RowMapping, **extra: Any) -> dict[str, Any]:
    return {
        "prefix": item["prefix"],
        "target_class": item["target_class"],
        "ml_name": item["ml_name"],
        "ledger_id": item["ledger_id"],
        **extra,
    }


#: The history columns the report reads (a row's other columns are not needed).
_HISTORY_COLUMNS = ("prefix", "target_class", "ml_name", "ledger_id", "event", "reason", "bytes")


@dataclass(frozen=True)
class _Registered:
    """What the report says of the registry: its size, and the waiting entries soonest
    first (the first ``MAX_LISTED``; ``waiting_total`` counts all)."""

    entries: int
    bytes: int
    waiting: list[dict[str, Any]]
    waiting_total: int


def _waiting_order(waiting: phases.Waiting) -> tuple[bool, int, str]:
    """Soonest first; "after the next scan" (no time) last; then by prefix (unique)."""
    return (waiting.until_ms is None, waiting.until_ms or 0, waiting.entry.prefix)


def _tally_registry(
    registry: OrphanRegistry,
    tally: _PhaseTally,
    latest_scan: int | None,
    instant: Instant,
    endpoints: Endpoints,
) -> _Registered:
    """Walk the registry once, streamed: every entry counted as registered and in its
    phase (``tally``), only the ``MAX_LISTED`` soonest waiting ones kept. A registry of
    500,000 entries (a 10M-ledger cluster's first scan) is never held whole: as a dict of
    entries, a grace time per prefix and a waiting item per entry it was over 1 GB."""
    grace_elapsed = timekeeping.GraceClock(registry.scan_instants(), instant)
    now = instant.now_ms()
    policy = endpoints.policy
    counts = {"entries": 0, "bytes": 0, "waiting": 0}
    namespaces: dict[str, str] = {}  # managed ledger -> its namespace (a topic's entries)

    def waiting() -> Iterator[phases.Waiting]:
        for entry in registry.iter_entries():
            counts["entries"] += 1
            counts["bytes"] += entry.bytes
            namespace = namespaces.get(entry.ml_name)
            if namespace is None:
                namespace = namespaces[entry.ml_name] = entry.namespace
            tally.add("registered", namespace, entry.target_class, entry.bytes)
            if latest_scan is None:
                continue
            where = phases.entry_phase(
                entry,
                latest_scan,
                now,
                policy.grace_seconds,
                policy.retention_seconds,
                grace_elapsed_ms=grace_elapsed(entry),
            )
            if where is None:
                tally.add("eligible", namespace, entry.target_class, entry.bytes)
                continue
            name = _WAITING_PHASES.get(where.phase)
            if name:
                tally.add(name, namespace, entry.target_class, entry.bytes)
            counts["waiting"] += 1
            yield where

    soonest = heapq.nsmallest(MAX_LISTED, waiting(), key=_waiting_order)
    return _Registered(
        entries=counts["entries"],
        bytes=counts["bytes"],
        waiting=[
            {
                "prefix": where.entry.prefix,
                "target_class": where.entry.target_class,
                "ml_name": where.entry.ml_name,
                "ledger_id": where.entry.ledger_id,
                "bytes": where.entry.bytes,
                "phase": where.phase,
                "first_seen_ms": where.entry.first_seen_ms,
                "until_ms": where.until_ms,
            }
            for where in soonest
        ],
        waiting_total=counts["waiting"],
    )


def _result_item(result: RecheckResult) -> dict[str, Any]:
    """A re-check's result as the report's ``deleted`` and ``would_delete`` list it."""
    return _target(vars(result), objects=result.objects, bytes=result.bytes, reason=result.reason)


_WAITING_PHASES = {
    phases.WAITING_GRACE: "waiting_grace",
    phases.WAITING_RETENTION: "waiting_retention",
}


def build_report(
    endpoints: Endpoints,
    run_id: str,
    *,
    options: CycleOptions,
    now_ms: int,
    started_ms: int | None = None,
    error: BaseException | str | None = None,
) -> CycleReport:
    """Assemble the report from the run's step records, the registry and its history."""
    steps = RunSteps(endpoints.state, run_id)
    snapshot = steps.read_record(SNAPSHOT, SnapshotRecord, required=False)
    scan = steps.read_record(SCAN, ScanRecord, required=False)
    diff = steps.read_record(DIFF, DiffRecord, required=False)
    applied = steps.read_record(PHASES, PhasesRecord, required=False)
    deleted = steps.read_record(DELETE, DeleteRecord, required=False)
    found = {SNAPSHOT: snapshot, SCAN: scan, DIFF: diff, PHASES: applied, DELETE: deleted}
    registry = OrphanRegistry(endpoints.state)
    latest = registry.latest_scan()

    refusals: list[dict[str, Any]] = list(applied.refusals) if applied else []
    status = CycleStatus.OK
    error_text = error_type = None
    if error is not None:
        status = CycleStatus.FAILED
        error_text = str(error)
        error_type = type(error).__name__ if isinstance(error, BaseException) else "Error"
        if snapshot is None and error_type.startswith("Metadata"):
            refusals.append(
                {
                    "guard": METADATA_READ,
                    "reason": f"the metadata snapshot could not be read ({error_text}); "
                    "a partial snapshot is never used, nothing was deleted",
                    "forced": False,
                }
            )
    elif applied is not None and not applied.applied:
        status = CycleStatus.REFUSED
    elif any(record is None for record in found.values()):
        missing = ", ".join(step for step, record in found.items() if record is None)
        status = CycleStatus.FAILED
        error_text = f"the cycle did not complete: no output from {missing} (see the task logs)"
        error_type = "Incomplete"

    tally = _PhaseTally()
    delete_results = deleted.results if deleted else []
    # The phase of each entry as the delete step judged it: the servers' time it read
    # (timekeeping.py). A cycle that did not get that far has no such time, and its
    # entries show as waiting for grace (no evidence that any time has passed).
    instant = Instant.from_dict(deleted.now_instant if deleted else None) or Instant(now_ms)
    registered = _tally_registry(
        registry, tally, latest.number if latest is not None else None, instant, endpoints
    )
    corrected: list[dict[str, Any]] = []
    deleted_list: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    # Streamed and tallied row by row: a large cluster's first scan registers tens of
    # thousands, of which only the first MAX_LISTED of each list are reported.
    for row in registry.iter_history(run_id=run_id, columns=_HISTORY_COLUMNS):
        namespace = _namespace(row["ml_name"])
        if row["event"] == phases.REGISTERED:
            tally.add("new", namespace, row["target_class"], row["bytes"])
        elif row["event"] == phases.CORRECTED:
            tally.add("corrected", namespace, row["target_class"], row["bytes"])
            if len(corrected) < MAX_LISTED:
                corrected.append(_target(row, reason=row["reason"]))
        elif row["event"] == phases.DELETE_FAILED:
            tally.add("delete_failed", namespace, row["target_class"], row["bytes"])
            if len(failed) < MAX_LISTED:
                failed.append({"prefix": row["prefix"], "error": row["reason"]})
    would_delete: list[dict[str, Any]] = []
    for result in delete_results:
        # What was deleted is what the delete step's results say, each once: the
        # registry's history of it is written only when the step ends well (a cycle
        # that lost its lock mid-way deleted some and applied none).
        if result.action == outcomes.DELETED:
            tally.add("deleted", result.namespace, result.target_class, result.bytes)
            if len(deleted_list) < MAX_LISTED:
                deleted_list.append(_result_item(result))
        elif result.action == outcomes.WOULD_DELETE:
            tally.add("would_delete", result.namespace, result.target_class, result.bytes)
            if len(would_delete) < MAX_LISTED:
                would_delete.append(_result_item(result))
        elif result.action == outcomes.SKIPPED and len(failed) < MAX_LISTED:
            failed.append({"prefix": result.prefix, "error": result.error})

    # A versioned bucket keeps deleted bytes as noncurrent versions: recoverable, not freed.
    recoverable_prefixes = {
        r.prefix for r in delete_results if r.action == outcomes.DELETED and r.recoverable
    }
    for item in deleted_list:
        item["recoverable"] = item["prefix"] in recoverable_prefixes
    bytes_deleted = [r for r in delete_results if r.action == outcomes.DELETED]
    bytes_recoverable = sum(r.bytes for r in bytes_deleted if r.recoverable)
    bytes_reclaimed = sum(r.bytes for r in bytes_deleted if not r.recoverable)
    classes = {name: {"objects": 0, "bytes": 0, "units": 0} for name in CLASSES}
    ns_classes: dict[str, Any] = {}
    if diff is not None:
        classes.update(diff.classes)
        ns_classes = diff.namespaces
    namespaces = {}
    phases_by_ns = tally.namespaces
    for namespace in sorted(set(ns_classes) | set(phases_by_ns)):
        namespaces[namespace] = {
            "classes": ns_classes.get(
                namespace, {name: {"objects": 0, "bytes": 0, "units": 0} for name in CLASSES}
            ),
            "phases": phases_by_ns.get(namespace, {name: _empty_phase() for name in PHASE_NAMES}),
        }
    finished = now_ms
    if started_ms is None and snapshot is not None:
        started_ms = snapshot.started_ms
    started = now_ms if started_ms is None else started_ms
    deleting_now = deleted.deleting if deleted else options.deleting(endpoints.policy)
    data: dict[str, Any] = {
        "kind": KIND,
        "run_id": run_id,
        "status": status,
        "started_ms": started,
        "finished_ms": finished,
        "time_ms": finished,
        "duration_seconds": round((finished - started) / 1000, 3),
        "dry_run": not deleting_now,
        "delete_enabled": endpoints.policy.delete_enabled,
        "forced": options.force,
        "error": error_text,
        "error_type": error_type,
        "settings": {
            "grace_seconds": endpoints.policy.grace_seconds,
            "retention_seconds": endpoints.policy.retention_seconds,
            "orphan_max_fraction": endpoints.policy.orphan_max_fraction,
            "bucket": endpoints.blocks.bucket,
            "prefix": endpoints.blocks.prefix,
            "zk_hosts": endpoints.zk.hosts,
        },
        "snapshot": {
            "managed_ledgers": snapshot.managed_ledgers if snapshot else None,
            "listed_ledgers": snapshot.listed_ledgers if snapshot else None,
            "markers": snapshot.markers if snapshot else None,
            "started_ms": snapshot.started_ms if snapshot else None,
        },
        "scan": {
            "source": scan.source if scan else "inventory" if options.inventory else "listing",
            "inventory": scan.inventory if scan else options.inventory,
            "objects": scan.objects if scan else None,
            "bytes": scan.bytes if scan else None,
            "started_ms": scan.started_ms if scan else None,
        },
        "classes": classes,
        "orphan_bytes": diff.orphan_bytes if diff else 0,
        "orphan_fraction": diff.orphan_fraction if diff else 0.0,
        "phases": tally.total,
        "namespaces": namespaces,
        "refusals": refusals,
        "held": list(applied.held if applied else [])[:MAX_LISTED],
        "warnings": list(
            dict.fromkeys(
                [
                    *(snapshot.clock_warnings if snapshot else []),
                    *(scan.clock_warnings if scan else []),
                    *(deleted.clock_warnings if deleted else []),
                ]
            )
        ),
        "delete_skipped": deleted.skipped if deleted else None,
        # Work left for the next run because another cycle held the delete lock.
        "pending": bool(deleted and deleted.lock_busy),
        "bytes_reclaimed": bytes_reclaimed,
        "bytes_recoverable": bytes_recoverable,
        "deleted": deleted_list,
        "would_delete": would_delete,
        "waiting": registered.waiting,
        "waiting_total": registered.waiting_total,
        "corrected": corrected,
        "failed": failed,
        "foreign": {
            "objects": classes[FOREIGN]["objects"],
            "bytes": classes[FOREIGN]["bytes"],
            "samples": diff.foreign_samples if diff else [],
        },
        "registry": {
            "entries": registered.entries,
            "bytes": registered.bytes,
            "scan_number": applied.scan_number if applied else None,
        },
        "zookeeper": _zookeeper(endpoints.zk, snapshot, diff, deleted),
        "tiered": _tiered(scan, classes, bytes_deleted, diff, delete_results),
        "bookkeeper": _bookkeeper(diff, applied, delete_results),
        "pulsar_metadata": _pulsar_metadata(diff, delete_results),
    }
    return CycleReport(run_id, status, data)


def _zookeeper(
    zk: ZkEndpoint,
    snapshot: SnapshotRecord | None,
    diff: DiffRecord | None,
    deleted: DeleteRecord | None,
) -> dict[str, Any]:
    """The reads each step made (steps run one after another: the cycle's peak is the
    highest step's)."""
    survey_cost = ((diff.bookkeeper if diff else None) or {}).get("cost") or {}
    pm_cost = ((diff.pulsar_metadata if diff else None) or {}).get("cost") or {}
    by_step: dict[str, dict[str, int] | None] = {
        "snapshot": snapshot.zk_reads if snapshot else None,
        # (its survey reads Pulsar's references, which BookKeeper's then uses)
        "pulsar_metadata": {
            "reads": pm_cost["zk_reads"],
            "peak_per_second": pm_cost["zk_peak_reads_per_second"],
        }
        if pm_cost
        else None,
        "bookkeeper": {
            "reads": survey_cost["zk_reads"],
            "peak_per_second": survey_cost["zk_peak_reads_per_second"],
        }
        if survey_cost
        else None,
        "delete": deleted.zk_reads if deleted else None,
    }
    ran = [step for step in by_step.values() if step]
    return {
        "reads": sum(step["reads"] for step in ran),
        "peak_per_second": max((step["peak_per_second"] for step in ran), default=0),
        "max_reads_per_second": zk.max_reads_per_second or None,
        "by_step": by_step,
    }


def _tiered(
    scan: ScanRecord | None,
    classes: dict[str, Any],
    deleted: list[RecheckResult],
    diff: DiffRecord | None,
    delete_results: list[RecheckResult],
) -> dict[str, Any] | None:
    """The offload bucket's part of the cycle (None when tiered storage is off)."""
    offload = scan.offload if scan else None
    if not offload:
        return None
    segments = [r for r in deleted if r.target_class == ORPHAN_SEGMENT]
    held_now = [r for r in delete_results if r.action == outcomes.HELD]
    held = [_target(vars(r), bytes=r.bytes or 0, reason=r.reason) for r in held_now] + list(
        diff.other_cluster_samples if diff else []
    )
    held += list(diff.other_bucket_samples if diff else [])
    parts = [r for r in deleted if r.target_class == ORPHAN_UPLOAD_PART]

    def total(name: str, what: str) -> int:
        return int((classes.get(name) or {}).get(what) or 0)

    return {
        "bucket": offload.get("bucket"),
        "prefix": offload.get("prefix"),
        "source": offload.get("source"),
        "objects": offload.get("objects"),
        "bytes": offload.get("bytes"),
        "live_segments": classes[LIVE_SEGMENT]["units"],
        "orphan_segments": classes[ORPHAN_SEGMENT]["units"],
        "orphan_bytes": classes[ORPHAN_SEGMENT]["bytes"],
        "foreign_objects": classes[OFFLOAD_FOREIGN]["objects"],
        "deleted": len(segments),
        "bytes_reclaimed": sum(r.bytes for r in segments if not r.recoverable),
        "other_cluster_segments": classes[OTHER_CLUSTER_SEGMENT]["units"],
        "other_cluster_bytes": classes[OTHER_CLUSTER_SEGMENT]["bytes"],
        "other_clusters": dict(diff.other_clusters if diff else {}),
        # Segments whose ledgers were offloaded to another driver or bucket (kept).
        "other_bucket_segments": total(OTHER_BUCKET_SEGMENT, "units"),
        "other_bucket_bytes": total(OTHER_BUCKET_SEGMENT, "bytes"),
        # GCS multipart leftovers (orphan-upload-part).
        "orphan_upload_parts": total(ORPHAN_UPLOAD_PART, "units"),
        "orphan_upload_part_bytes": total(ORPHAN_UPLOAD_PART, "bytes"),
        "upload_parts_deleted": len(parts),
        "upload_part_bytes_reclaimed": sum(r.bytes for r in parts if not r.recoverable),
        "our_clusters": diff.our_clusters if diff else None,
        "held_at_recheck": len(held_now),
        "held": held[:MAX_LISTED],
    }


def _bookkeeper(
    diff: DiffRecord | None,
    applied: PhasesRecord | None,
    delete_results: list[RecheckResult],
) -> dict[str, Any] | None:
    """The BookKeeper source's part of the cycle (None when it is off): the survey's
    totals per class (each explained), what it held and why, and what was deleted."""
    survey = diff.bookkeeper if diff else None
    if not survey:
        return None
    survey = with_later_holds(survey, applied.held if applied else [])
    freed = [
        r
        for r in delete_results
        if r.action == outcomes.DELETED and r.target_class in BK_TARGET_CLASSES
    ]
    return {key: value for key, value in survey.items() if key != "registered_reasons"} | {
        "deleted": len(freed),
        "bytes_reclaimed": sum(r.bytes for r in freed),
        # Topics another Pulsar cluster sharing this BookKeeper writes (cycle.py): held.
        "live_elsewhere": dict(applied.bookkeeper_live_elsewhere if applied else {}),
        "restore": (
            "ledgergc restore --run <run id> re-creates deleted ledgers' metadata until the "
            "bookies' next garbage collection (gcWaitTime, 10 minutes by default)"
        ),
    }


def _pulsar_metadata(
    diff: DiffRecord | None, delete_results: list[RecheckResult]
) -> dict[str, Any] | None:
    """The Pulsar-metadata source's part of the cycle (None when it is off): its
    survey's leftovers per class and store, each with the BookKeeper ledgers and bytes
    its records name (the BookKeeper survey's ``leftover_ledgers``: what the metadata
    holds back), the held leftovers with why, the stuck deletes with the command that
    finishes each, the namespaces not replicated here, and what was deleted."""
    survey = diff.pulsar_metadata if diff else None
    if not survey:
        return None
    out = {key: value for key, value in survey.items() if key != "registered_reasons"}
    held_back = ((diff.bookkeeper if diff else None) or {}).get("leftover_ledgers") or {}
    classes = {
        cls: {store: dict(t) for store, t in per.items()} for cls, per in out["classes"].items()
    }
    total = {"ledgers": 0, "bytes": 0}
    held = set(out.get("held_targets") or [item["target"] for item in out.get("held") or []])
    for target, cls in (out.get("leftovers") or {}).items():
        found = held_back.get(target)
        if not found:
            continue
        total["ledgers"] += found["ledgers"]
        total["bytes"] += found["bytes"]
        parsed = parse_target(target)
        totals = classes.get(cls, {}).get(parsed[0]) if parsed else None
        if totals is not None and target not in held:  # (a held one: its own line)
            totals["ledger_bytes"] += found["bytes"]
    for item in out.get("held") or []:
        found = held_back.get(item["target"]) or {}
        item["ledger_bytes"] = found.get("bytes", 0)
    freed = [
        r
        for r in delete_results
        if r.action == outcomes.DELETED and r.target_class in PM_ORPHAN_CLASSES
    ]
    samples = out.get("samples") or {}
    return out | {
        "classes": classes,
        "held_back": total,
        "stuck_deletes": samples.get(PM_STUCK_DELETE, []),
        "not_replicated_here": samples.get(PM_NOT_REPLICATED_HERE, []),
        "deleted": len(freed),
        "znodes_deleted": sum(r.objects for r in freed),
        "bytes_reclaimed": sum(r.bytes for r in freed),
    }


def _namespace(ml_name: str) -> str:
    parts = ml_name.split("/")
    return f"{parts[0]}/{parts[1]}" if len(parts) >= 2 else NO_NAMESPACE


def publish(endpoints: Endpoints, cycle_report: CycleReport) -> None:
    """Append the run log; forget the step records of old runs (and a crashed survey's
    scratch on this worker)."""
    state = endpoints.state
    run_log.append_run(state, KIND, cycle_report.to_dict())
    run_steps.prune_runs(state, KEEP_RUN_FOLDERS, current=cycle_report.run_id)
    layout.prune_runs(state.state_dir, KEEP_RUN_FOLDERS, current=cycle_report.run_id)


# --- text ------------------------------------------------------------------------------


def _size(count: int | None) -> str:
    from ledger_gc.console import human_bytes

    return human_bytes(count)


def _when(ms: int | None) -> str:
    if ms is None:
        return "after the next scan"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def _bookkeeper_lines(bk: dict[str, Any]) -> Iterable[str]:
    yield (
        f"  BookKeeper {bk['hosts']}{bk['root']} ({bk['layout']}): {bk['ledgers']} ledgers, "
        f"{_size(bk['bytes'])}; {bk['managed_ledgers']} managed ledgers reference them; "
        f"deleted {bk['deleted']} ledgers, {_size(bk['bytes_reclaimed'])} reclaimed "
        f"({BYTES_MEANING})"
    )
    for name, totals in bk["classes"].items():
        if totals["ledgers"]:
            yield (
                f"    {name:<27} {totals['ledgers']:>8} ledgers {_size(totals['bytes']):>10}"
                f"  {bk['explanations'].get(name, '')}"
            )
    for hold, count in (bk.get("held_reasons") or {}).items():
        yield f"    held: {count} x {hold}"
    if bk.get("missing_listed"):
        yield (
            f"    {len(bk['missing_listed'])} listed ledgers are missing from BookKeeper "
            f"(e.g. {bk['missing_listed'][0]})"
        )
    unreadable = bk.get("unreadable") or {}
    if unreadable.get("ledgers"):
        yield f"    bk-unreadable: {unreadable['note']}"
    missing = bk.get("bk_missing") or {}
    if missing.get("count"):
        named = ", ".join(
            f"{m['topic']} ledger {m['ledger_id']} (named by {m['named_by']})"
            for m in (missing.get("samples") or [])[:3]
        )
        yield (
            f"    bk-missing: {missing['count']} ledgers that Pulsar records name are not in "
            f'BookKeeper, so their topics cannot be read (Pulsar\'s "No such ledger"); '
            f"reported, never deleted: {named}"
        )
    for name, why in (bk.get("live_elsewhere") or {}).items():
        yield f"    BookKeeper looks shared: every ledger of {name} is held: {why}"
    cost = bk.get("cost")
    if cost:
        seconds = ", ".join(f"{step} {s:.1f}" for step, s in cost["seconds"].items() if s)
        yield (
            f"    cost to ZooKeeper: {cost['zk_reads']} znodes read (peak "
            f"{cost['zk_peak_reads_per_second']}/s), {cost['records_read']} ledger records "
            f"read, {cost['records_cached']} from the record cache "
            f"({cost['cache'].get('why', '')}); seconds: {seconds}"
        )
        if cost["cache"].get("cannot"):
            yield f"    record cache: {cost['cache']['cannot']}"
    if bk["deleted"]:
        yield f"    {bk['restore']}"


def _pulsar_metadata_lines(pm: dict[str, Any]) -> Iterable[str]:
    held_back = pm["held_back"]
    yield (
        f"  Pulsar metadata {pm['local_hosts']} (configuration store {pm['config_hosts']}): "
        f"{pm['namespaces']} namespaces, {pm['tenants']} tenants, {pm['local_znodes']} znodes "
        f"counted; leftovers hold back {held_back['ledgers']} BookKeeper ledgers "
        f"({_size(held_back['bytes'])}); deleted {pm['deleted']} leftovers, "
        f"{pm['znodes_deleted']} znodes"
    )
    for name, per in pm["classes"].items():
        for store, totals in per.items():
            yield (
                f"    {name:<23} {store:<6} {totals['leftovers']:>6} leftovers "
                f"{totals['znodes']:>7} znodes {_size(totals['bytes']):>10}, "
                f"{totals['ledgers']} ledgers {_size(totals['ledger_bytes'])}  "
                f"{pm['explanations'].get(name, '')}"
            )
    for item in pm.get("held") or []:
        yield (
            f"    held {item['target']} ({item['znodes']} znodes, "
            f"{_size(item.get('ledger_bytes', 0))} of ledgers): {item['why']}"
        )
    for item in pm["stuck_deletes"][:20]:
        yield f"    stuck delete {item['name']}: {item['why']}; finish it: {item['command']}"
    for item in pm["not_replicated_here"][:20]:
        yield f"    not replicated here {item['name']}: {item['why']}"


def render_text(cycle_report: CycleReport) -> Iterable[str]:
    """The human-readable report, line by line."""
    data = cycle_report.to_dict()
    mode = "dry run (set LEDGERGC_DELETE_ENABLED=true to delete)" if data["dry_run"] else "deleting"
    yield f"orphan cycle {data['run_id']}: {data['status']}, {mode}"
    if data["error"]:
        yield f"  error: {data['error']}"
    for refusal in data["refusals"]:
        forced = " (forced past)" if refusal.get("forced") else ""
        yield f"  refused by {refusal['guard']}{forced}: {refusal['reason']}"
    snap, scan = data["snapshot"], data["scan"]
    if snap["managed_ledgers"] is not None and snap["listed_ledgers"] is None:
        # No bucket to judge: the S3 source only counted the managed ledgers.
        yield f"  snapshot: {snap['managed_ledgers']} managed ledgers (no bucket to scan)"
    elif snap["managed_ledgers"] is not None:
        yield (
            f"  snapshot: {snap['managed_ledgers']} managed ledgers, {snap['listed_ledgers']} "
            f"ledgers, {snap['markers']} markers"
        )
    if scan["objects"] is not None:
        source = f"inventory {scan['inventory']}" if scan["source"] == "inventory" else "listing"
        yield f"  scan ({source}): {scan['objects']} objects, {_size(scan['bytes'])}"
    tiered = data.get("tiered")
    if tiered:
        yield (
            f"  tiered storage {tiered['bucket']}/{tiered['prefix']} ({tiered['source']}): "
            f"{tiered['objects']} objects, {tiered['live_segments']} live segments, "
            f"{tiered['orphan_segments']} orphan segments ({_size(tiered['orphan_bytes'])}), "
            f"{tiered['foreign_objects']} foreign objects (never deleted); deleted "
            f"{tiered['deleted']} segments, {_size(tiered['bytes_reclaimed'])} reclaimed"
        )
        if tiered.get("other_cluster_segments") or tiered.get("held_at_recheck"):
            clusters = ", ".join(
                f"{name}: {count}" for name, count in (tiered.get("other_clusters") or {}).items()
            )
            yield (
                f"  held as another cluster's (never deleted): "
                f"{tiered['other_cluster_segments']} segments "
                f"({_size(tiered['other_cluster_bytes'])}; {clusters or 'none in the diff'}), "
                f"{tiered['held_at_recheck']} more at the live re-check; this store's "
                f"clusters: {(tiered.get('our_clusters') or {}).get('names') or 'none named'}"
            )
        if tiered.get("other_bucket_segments"):
            yield (
                f"  held as offloaded elsewhere (never deleted): "
                f"{tiered['other_bucket_segments']} segments "
                f"({_size(tiered['other_bucket_bytes'])}) whose ledgers' driverMetadata names "
                "another driver or bucket"
            )
        if tiered.get("orphan_upload_parts") or tiered.get("upload_parts_deleted"):
            yield (
                f"  GCS upload parts left by stopped uploads: {tiered['orphan_upload_parts']} "
                f"({_size(tiered['orphan_upload_part_bytes'])}); deleted "
                f"{tiered['upload_parts_deleted']}, "
                f"{_size(tiered['upload_part_bytes_reclaimed'])} reclaimed"
            )
    bookkeeper = data.get("bookkeeper")
    if bookkeeper:
        yield from _bookkeeper_lines(bookkeeper)
    pulsar_metadata = data.get("pulsar_metadata")
    if pulsar_metadata:
        yield from _pulsar_metadata_lines(pulsar_metadata)
    yield "  classes:"
    for name in CLASSES:
        totals = data["classes"][name]
        yield (
            f"    {name:<17} {totals['objects']:>8} objects {_size(totals['bytes']):>10}"
            f"  {totals['units']:>6} units"
        )
    yield f"  orphans are {data['orphan_fraction']:.2%} of all bytes"
    yield "  phases:"
    for name in PHASE_NAMES:
        phase = data["phases"][name]
        yield f"    {name:<17} {phase['count']:>8} targets {_size(phase['bytes']):>10}"
    zookeeper = data.get("zookeeper")
    if zookeeper:
        bound = zookeeper["max_reads_per_second"]
        yield (
            f"  ZooKeeper: {zookeeper['reads']} znodes read this cycle, at most "
            f"{zookeeper['peak_per_second']} in one second "
            f"({f'bound: {bound:g}/s' if bound else 'no bound set'})"
        )
    for warning in data.get("warnings", []):
        yield f"  warning: {warning}"
    if data.get("pending"):
        yield f"  delete skipped (pending): {data['delete_skipped']}"
    for item in data.get("held", []):
        yield f"  held (newer than the metadata, kept) {item['prefix']}: {item['reason']}"
    for item in data["deleted"]:
        kept = ", recoverable: kept by the versioned bucket" if item.get("recoverable") else ""
        yield (
            f"  deleted {item['prefix']} ({item['objects']} objects, {_size(item['bytes'])}{kept})"
        )
    if data.get("bytes_recoverable"):
        yield (
            f"  {_size(data['bytes_recoverable'])} deleted but recoverable, not reclaimed: the "
            "bucket is versioned, so they stay billed as noncurrent versions until a "
            "lifecycle rule (NoncurrentVersionExpiration) expires them; see docs/OPERATIONS.md"
        )
    for item in data["would_delete"]:
        yield f"  would delete {item['prefix']} ({item['objects']} objects, {_size(item['bytes'])})"
    for item in data["corrected"]:
        yield f"  corrected {item['prefix']}: {item['reason']}"
    for item in data["waiting"][:20]:
        yield (
            f"  waiting ({item['phase']}) {item['prefix']} {_size(item['bytes'])} until "
            f"{_when(item['until_ms'])}"
        )
    if data["waiting_total"] > 20:
        yield f"  ... and {data['waiting_total'] - 20} more waiting"
    for item in data["failed"]:
        yield f"  failed {item['prefix']}: {item['error']}"
    foreign = data["foreign"]
    if foreign["objects"]:
        yield (
            f"  foreign keys under the prefix (never deleted): {foreign['objects']} objects, "
            f"{_size(foreign['bytes'])}"
        )
        for sample in foreign["samples"][:10]:
            yield f"    {sample['key']} ({sample['reason']})"
