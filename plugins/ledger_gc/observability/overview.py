"""One dict that says how the GC is doing, built from the state store (and live metadata).

The Airflow page, its JSON endpoint, the Prometheus metrics and ``ledgergc status --json``
all show this same dict, so what an operator reads on the page, what an alert fires on
and what a script checks can never disagree. It reads only the state store (the newest
run summaries, the audit log through a tally) plus, optionally, a live status from ZooKeeper
that the caller already has (``ledgergc status``) or caches (the web server).

Shape (every key always present; numbers are ints, times ms since the epoch)::

    generated_at_ms, state_dir, state_url (password masked)
    orphans: latest (run header | None), sources ({blocks, tiered, bookkeeper,
             pulsar_metadata}: the stores the latest cycle looked at | None), phases
             {phase: {class: {count, bytes}}} (class: every one of ``runs.PHASE_CLASSES``,
             BookKeeper's and Pulsar metadata's orphan classes too),
             phase_totals {phase: {count, bytes}}, namespaces {ns: phases-table},
             trend [{run_id, time_ms, phases {phase: {count, bytes}}}], refusals [...],
             bookkeeper (None with the source off | {hosts, root, layout,
             managed_ledgers, ledgers, bytes, orphan_bytes, pulsar_ledgers,
             classes {class: {ledgers, bytes}}, explanations {class: text},
             namespaces {ns: {class: {ledgers, bytes}}}, held_reasons {hold: n},
             missing_listed, missing_listed_samples, deleted, bytes_reclaimed,
             live_elsewhere {topic: why}, restore, cost {zk_reads,
             zk_peak_reads_per_second, records_read, records_cached, directories,
             seconds {step: s}, cache {enabled, full_read, why,
             cycles_since_full_read}}, bk_missing {count, samples [{topic,
             ledger_id, named_by}]}),
             zookeeper {reads, peak_per_second, max_reads_per_second (None: no
             bound), by_step {step: {reads, peak_per_second}}} (the latest cycle),
             pulsar_metadata (None with the source off | {local_hosts, config_hosts,
             namespaces, tenants, local_znodes {before, deleted, after},
             znodes_deleted {store: n}, classes {class: {store: {leftovers, znodes,
             bytes, ledgers, ledger_bytes}}}, explanations {class: text},
             stuck_deletes, not_replicated, leftovers, held [{name, store, class, why,
             znodes, ledgers, command}], held_count, held_back {ledgers, bytes, targets {target:
             {ledgers, bytes}}}})
    trim:    latest (run header + totals | None), backlog {source, pending_markers,
             pending_bytes, oldest_marked_at_ms, oldest_age_seconds, live_error},
             last_errors [...], trend [{run_id, time_ms, ledgers_deleted,
             bytes_reclaimed, markers_pending}]
    deletions: recent [audit records, newest first], reclaimed_bytes {operation: bytes},
               recoverable_bytes {operation: bytes} (kept by a versioned bucket),
               deleted_units {operation: n}
    last_success: {"trim" | "orphans": {run_id, time_ms} | None}
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ledger_gc import run_log
from ledger_gc.observability import pm_runs, runs
from ledger_gc.observability.state_reads import (
    AuditTotals,
    audit_totals,
    recent_audit_records,
)
from ledger_gc.state.store import StateStore
from ledger_gc.state.stores import open_store

if TYPE_CHECKING:
    from ledger_gc.state.store import StateLocation

# Deleting operations (``deletion.DeleteTarget.operation``) that always appear, at 0 before
# their first deletion: a counter that is missing cannot be told apart from a broken one.
KNOWN_OPERATIONS = ("orphan-removal", "trim")
DEFAULT_TREND_RUNS = 20
DEFAULT_RECENT = 20
# Refusals and errors are collected from this many latest runs: old ones are history,
# and the audit log and run logs keep them for whoever needs to dig.
RECENT_RUNS_FOR_EVENTS = 5


def build_overview(
    location: StateLocation,
    *,
    live_status: Mapping[str, Any] | None = None,
    live_error: str | None = None,
    totals: AuditTotals | None = None,
    now_ms: int | None = None,
    trend_runs: int = DEFAULT_TREND_RUNS,
    recent: int = DEFAULT_RECENT,
) -> dict[str, Any]:
    """The overview of the GC's state.

    ``live_status`` is a ``StoreStatus.to_dict()`` (as ``ledgergc status`` has it); without
    it the trim backlog comes from the latest trim run and says so (``backlog.source``).
    ``totals`` lets a long-lived caller pass an ``AuditTally``'s totals instead of having
    the whole audit log read here.
    """
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    store = open_store(location)
    trim_runs = run_log.read_runs(store, run_log.TRIM, trend_runs)
    orphan_runs = run_log.read_runs(store, run_log.ORPHANS, trend_runs)
    totals = totals if totals is not None else audit_totals(store)
    return {
        "generated_at_ms": now,
        "state_dir": str(store.state_dir or ""),
        "state_url": store.display_url,
        "orphans": _orphans(orphan_runs),
        "trim": _trim(trim_runs, live_status, live_error, now, recent),
        "deletions": {
            "recent": recent_audit_records(store, recent),
            "reclaimed_bytes": _with_known_operations(totals.bytes),
            "recoverable_bytes": _with_known_operations(totals.recoverable_bytes),
            "deleted_units": _with_known_operations(totals.units),
        },
        "last_success": {
            kind: _last_success(store, kind) for kind in (run_log.TRIM, run_log.ORPHANS)
        },
    }


def _with_known_operations(values: Mapping[str, int]) -> dict[str, int]:
    return dict(sorted({**dict.fromkeys(KNOWN_OPERATIONS, 0), **values}.items()))


def _orphans(cycles: list[dict[str, Any]]) -> dict[str, Any]:
    latest = cycles[-1] if cycles else None
    phases = runs.orphan_phases(latest) if latest else runs.empty_phases()
    trend = [
        {
            **_point(cycle),
            "phases": _sum_classes(runs.orphan_phases(cycle)),
        }
        for cycle in cycles
    ]
    refusals = [
        refusal
        for cycle in reversed(cycles[-RECENT_RUNS_FOR_EVENTS:])
        for refusal in runs.orphan_refusals(cycle)
    ]
    return {
        "latest": runs.run_header(latest) if latest else None,
        "sources": runs.cycle_sources(latest) if latest else None,
        "phases": phases,
        "phase_totals": _sum_classes(phases),
        "namespaces": runs.orphan_namespaces(latest) if latest else {},
        "trend": trend,
        "refusals": refusals,
        # The latest cycle's survey of BookKeeper: an older cycle's would show ledgers
        # that this one may have deleted, or a source since turned off.
        "bookkeeper": runs.bookkeeper_figures(latest) if latest else None,
        # What the latest cycle cost the ZooKeeper it read (every source, every step).
        "zookeeper": runs.zookeeper_figures(latest) if latest else runs.zookeeper_figures({}),
        # The latest cycle's survey of Pulsar's own metadata (None: the source was off).
        "pulsar_metadata": pm_runs.pulsar_metadata_figures(latest) if latest else None,
    }


def _sum_classes(phases: Mapping[str, Mapping[str, Mapping[str, int]]]) -> dict[str, Any]:
    return {
        phase: {
            "count": sum(leaf["count"] for leaf in by_class.values()),
            "bytes": sum(leaf["bytes"] for leaf in by_class.values()),
        }
        for phase, by_class in phases.items()
    }


def _point(summary: Mapping[str, Any]) -> dict[str, Any]:
    header = runs.run_header(summary)
    return {"run_id": header["run_id"], "time_ms": header["time_ms"]}


def _trim(
    trim_runs: list[dict[str, Any]],
    live_status: Mapping[str, Any] | None,
    live_error: str | None,
    now: int,
    recent: int,
) -> dict[str, Any]:
    latest = trim_runs[-1] if trim_runs else None
    if live_status is not None:
        backlog, errors = _live_backlog(live_status)
    elif latest is not None:
        totals = runs.trim_totals(latest)
        backlog = {
            "source": "last_run",
            "pending_markers": totals["markers_pending"],
            "pending_bytes": totals["bytes_pending"],
            "oldest_marked_at_ms": totals["oldest_pending_marked_at_ms"],
        }
        errors = []
    else:
        backlog = {
            "source": "none",
            "pending_markers": 0,
            "pending_bytes": 0,
            "oldest_marked_at_ms": None,
        }
        errors = []
    oldest = backlog["oldest_marked_at_ms"]
    backlog["oldest_age_seconds"] = None if oldest is None else max(now - oldest, 0) / 1000
    backlog["live_error"] = live_error
    # Then the errors of the latest runs: failed runs and managed ledgers, and (without a
    # live read, which has the freshest word on each marker still there) their markers'.
    for summary in reversed(trim_runs[-RECENT_RUNS_FOR_EVENTS:]):
        errors.extend(
            e for e in runs.trim_errors(summary) if live_status is None or e["ledger_id"] is None
        )
    return {
        "latest": {**runs.run_header(latest), **runs.trim_totals(latest)} if latest else None,
        "backlog": backlog,
        "last_errors": errors[:recent],
        "trend": [_trim_point(summary) for summary in trim_runs],
    }


def _trim_point(summary: Mapping[str, Any]) -> dict[str, Any]:
    totals = runs.trim_totals(summary)
    return {
        **_point(summary),
        **{k: totals[k] for k in ("ledgers_deleted", "bytes_reclaimed", "markers_pending")},
    }


def _live_backlog(status: Mapping[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The trim backlog from a ``StoreStatus.to_dict()``: every marker still in metadata."""
    markers = [
        (ml.get("name"), marker)
        for ml in status.get("managed_ledgers") or []
        for marker in ml.get("markers") or []
    ]
    marked_at = [runs.as_int(m.get("marked_at")) for _, m in markers if m.get("marked_at")]
    errors = [
        {
            "ml": name,
            "ledger_id": marker.get("ledger_id"),
            "error": str(marker["last_error"]),
            "attempts": runs.as_int(marker.get("attempts")),
            "run_id": None,
            "time_ms": None,
        }
        for name, marker in markers
        if marker.get("last_error")
    ]
    errors.sort(key=lambda e: -e["attempts"])
    backlog = {
        "source": "live",
        "pending_markers": len(markers),
        "pending_bytes": sum(runs.as_int(m.get("size")) for _, m in markers),
        "oldest_marked_at_ms": min(marked_at) if marked_at else None,
    }
    return backlog, errors


def _last_success(store: StateStore, kind: str) -> dict[str, Any] | None:
    summary = run_log.last_matching(store, kind, runs.succeeded)
    return _point(summary) if summary else None
