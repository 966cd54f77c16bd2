"""The run summaries of the trim and of the orphan cycle, read defensively.

The trim (``trim/report.py: run_summary``) and the orphan cycle append one summary per
run to the state store's run log (``run_log.py``). Their shapes belong to those modules and may
grow; this module is the only place in ``observability`` that knows their keys, and it
reads every key with a default (missing -> zero, empty or None), so an older or a newer
summary never breaks the page or the metrics. The keys read are listed in
``docs/OPERATIONS.md`` ("What the overview reads"). The Pulsar-metadata source's part is
read by ``pm_runs``, under the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledger_gc.observability import pm_runs
from ledger_gc.rules.bookkeeper.classify import (
    BK_CLASSES,
    BK_OFFLOADED_COPY,
    BK_ORPHAN_CLASSES,
    BK_ORPHAN_COMPACTED_LEDGER,
    BK_ORPHAN_CURSOR_LEDGER,
    BK_ORPHAN_LEDGER,
    BK_ORPHAN_PARTITION,
    BK_ORPHAN_SCHEMA_LEDGER,
)
from ledger_gc.rules.bookkeeper.classify import EXPLANATIONS as BK_EXPLANATIONS
from ledger_gc.rules.pulsar_metadata.classes import (
    PM_DEAD_BROKER,
    PM_DELETED_NAMESPACE,
    PM_DELETED_TENANT,
    PM_ORPHAN_CLASSES,
)

# The phases of an orphan cycle (``orphans/report.py``'s ``phases``). The first four are
# KIP-370's life of an orphan, shown as tiles and trends: registered (in the registry
# after the cycle), waiting in the grace window, waiting until its data is older than
# retention, deleted. The others are shown in the table and the metrics.
MAIN_PHASES = ("registered", "waiting_grace", "waiting_retention", "deleted")
PHASES = (
    *MAIN_PHASES,
    "new",
    "corrected",
    "eligible",
    "would_delete",
    "delete_failed",
)
PHASE_TITLES = {
    "registered": "Registered",
    "waiting_grace": "Waiting in grace",
    "waiting_retention": "Waiting for retention",
    "deleted": "Deleted",
    "new": "Newly registered",
    "corrected": "Corrected (no orphan any more)",
    "eligible": "Eligible for deletion",
    "would_delete": "Would delete (dry run)",
    "delete_failed": "Delete failed (retried)",
}
# Orphan classes (DESIGN.md "Orphans"), as the report and the audit log name them: a whole
# managed-ledger prefix whose znode is gone, or a ledger its managed ledger does not list.
# And, with tiered storage on, an offloaded segment (``<uuid>-ledger-<id>`` and its index)
# that no listed or marked ledger carries.
PARTITION = "orphan-partition"
LEDGER = "orphan-ledger"
SEGMENT = "orphan-segment"
CLASSES = (PARTITION, LEDGER, SEGMENT)
# With the BookKeeper source on, a cycle also registers BookKeeper ledgers (DESIGN.md
# "BookKeeper ledgers"): their orphan classes go through the same phases, so the phase
# tables carry them too, and the tiles and trends count every source. ``CLASSES`` stays
# the classes every report's ``by_class`` names (the S3 blocks' and tiered storage's).
# So do the Pulsar-metadata source's leftovers (DESIGN.md "Pulsar's own metadata"): one
# target per namespace's or tenant's znodes in one store, its bytes the znodes' data.
PHASE_CLASSES = (*CLASSES, *BK_ORPHAN_CLASSES, *PM_ORPHAN_CLASSES)
CLASS_TITLES = {
    PARTITION: "Orphan partitions",
    LEDGER: "Orphan ledgers",
    SEGMENT: "Orphan offloaded segments",
    BK_OFFLOADED_COPY: "BookKeeper copies of offloaded ledgers",
    BK_ORPHAN_LEDGER: "BookKeeper orphan ledgers",
    BK_ORPHAN_PARTITION: "BookKeeper orphan partitions",
    BK_ORPHAN_CURSOR_LEDGER: "BookKeeper orphan cursor ledgers",
    BK_ORPHAN_SCHEMA_LEDGER: "BookKeeper orphan schema ledgers",
    BK_ORPHAN_COMPACTED_LEDGER: "BookKeeper orphan compacted ledgers",
    PM_DELETED_NAMESPACE: "Deleted namespaces' znodes",
    PM_DELETED_TENANT: "Deleted tenants' znodes",
    PM_DEAD_BROKER: "Dead brokers' heartbeat znodes",
}
# The trim's outcome "error", the orphan cycle's status "failed". A trim with markers still
# pending and a cycle that a guard refused did run: their backlog and refusals are shown
# on their own.
_FAILED_OUTCOMES = {"error", "failed"}


def as_int(value: Any) -> int:
    """An integer from a summary value; anything unusable counts as 0."""
    if isinstance(value, bool):
        return int(value)
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


# {phase: {class: {"count": n, "bytes": b}}}
PhaseTable = dict[str, dict[str, dict[str, int]]]


def empty_phases() -> PhaseTable:
    """``{phase: {class: {"count": 0, "bytes": 0}}}`` for every phase and class."""
    return {p: {c: {"count": 0, "bytes": 0} for c in PHASE_CLASSES} for p in PHASES}


def run_time_ms(summary: Mapping[str, Any]) -> int | None:
    """When a run finished (ms since epoch), or started if it did not say."""
    # The trim says finished_at/started_at, the orphan cycle finished_ms/started_ms.
    for key in ("finished_at", "finished_ms", "started_at", "started_ms"):
        value = summary.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return int(value)
    return None


def succeeded(summary: Mapping[str, Any]) -> bool:
    """Whether the run completed (``outcome`` of a trim, ``status`` of an orphan cycle)."""
    outcome = summary.get("outcome", summary.get("status"))
    if isinstance(outcome, str):
        return outcome.lower() not in _FAILED_OUTCOMES
    return not summary.get("error")


def run_header(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What every run shows: id, time, outcome, dry run, where it ran from."""
    return {
        "run_id": str(summary.get("run_id") or ""),
        "time_ms": run_time_ms(summary),
        "outcome": str(summary.get("outcome") or summary.get("status") or ""),
        "succeeded": succeeded(summary),
        "dry_run": bool(summary.get("dry_run", False)),
        "source": str(summary.get("source") or ""),
    }


def cycle_sources(summary: Mapping[str, Any]) -> dict[str, bool]:
    """Which stores an orphan cycle looked at: the ledger blocks in ``LEDGERGC_BUCKET``
    (``settings.bucket``; a summary that does not say had them, as every cycle did before
    the bucket could be left empty), tiered storage (``tiered``), BookKeeper
    (``bookkeeper``), Pulsar's own metadata (``pulsar_metadata``). The page shows only
    what applies to the store."""
    settings = _mapping(summary.get("settings"))
    return {
        "blocks": bool(settings.get("bucket", True)),
        "tiered": bool(summary.get("tiered")),
        "bookkeeper": bool(summary.get("bookkeeper")),
        "pulsar_metadata": bool(summary.get("pulsar_metadata")),
    }


# --- trim -----------------------------------------------------------------------------------


def trim_totals(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A trim run's headline figures (``totals`` of ``trim/report.py: run_summary``)."""
    totals = _mapping(summary.get("totals"))
    oldest = totals.get("oldest_pending_marked_at")
    return {
        "ledgers_deleted": as_int(totals.get("ledgers_deleted")),
        "bytes_reclaimed": as_int(totals.get("bytes_reclaimed")),
        "ledgers_marked": as_int(totals.get("ledgers_marked")),
        "markers_pending": as_int(totals.get("markers_pending")),
        "bytes_pending": as_int(totals.get("bytes_pending")),
        "oldest_pending_marked_at_ms": as_int(oldest) if oldest is not None else None,
        "errors": as_int(totals.get("errors")),
    }


def trim_errors(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Errors of a trim run: failed managed ledgers, then markers whose delete failed."""
    header = run_header(summary)
    errors = []
    for item in summary.get("errors") or []:
        item = _mapping(item)
        if item.get("error"):
            errors.append(
                {
                    "ml": item.get("ml"),
                    "ledger_id": None,
                    "error": str(item["error"]),
                    "attempts": None,
                    "run_id": header["run_id"],
                    "time_ms": header["time_ms"],
                }
            )
    for marker in summary.get("pending") or []:
        marker = _mapping(marker)
        if marker.get("last_error"):
            errors.append(
                {
                    "ml": marker.get("ml"),
                    "ledger_id": marker.get("ledger_id"),
                    "error": str(marker["last_error"]),
                    "attempts": as_int(marker.get("attempts")),
                    "run_id": header["run_id"],
                    "time_ms": header["time_ms"],
                }
            )
    return errors


# --- orphans --------------------------------------------------------------------------------


def _phase_table(table: Any) -> PhaseTable:
    """``{phase: {"by_class": {class: {"count", "bytes"}}}}`` -> ``{phase: {class: leaf}}``."""
    table = _mapping(table)
    result = empty_phases()
    for phase in PHASES:
        by_class = _mapping(_mapping(table.get(phase)).get("by_class"))
        for cls in PHASE_CLASSES:
            leaf = _mapping(by_class.get(cls))
            result[phase][cls] = {
                "count": as_int(leaf.get("count")),
                "bytes": as_int(leaf.get("bytes")),
            }
    return result


def orphan_phases(summary: Mapping[str, Any]) -> PhaseTable:
    """Count and bytes per phase and class of an orphan cycle (its ``phases``)."""
    return _phase_table(summary.get("phases"))


def orphan_namespaces(summary: Mapping[str, Any]) -> dict[str, PhaseTable]:
    """The same table per ``tenant/namespace`` (``namespaces.<ns>.phases``)."""
    namespaces = _mapping(summary.get("namespaces"))
    return {
        str(ns): _phase_table(_mapping(value).get("phases"))
        for ns, value in sorted(namespaces.items())
    }


def orphan_refusals(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The safety guards that refused this cycle (``refusals``); a forced guard is listed
    too, with ``forced`` true: it did not stop the cycle."""
    header = run_header(summary)
    return [
        {
            "guard": str(item.get("guard") or ""),
            "reason": str(item.get("reason") or ""),
            "forced": bool(item.get("forced", False)),
            "run_id": header["run_id"],
            "time_ms": header["time_ms"],
        }
        for item in summary.get("refusals") or []
        if isinstance(item, Mapping)
    ]


# --- the BookKeeper source of an orphan cycle -------------------------------------------

#: Listed ledgers missing from BookKeeper kept in the overview (the run log has them all).
MISSING_LISTED_SHOWN = 5
DEFAULT_RESTORE = (
    "ledgergc restore --run <run id> re-creates deleted ledgers' metadata until the "
    "bookies' next garbage collection (gcWaitTime, 10 minutes by default)"
)


def _ledgers_leaf(value: Any) -> dict[str, int]:
    leaf = _mapping(value)
    return {"ledgers": as_int(leaf.get("ledgers")), "bytes": as_int(leaf.get("bytes"))}


def bookkeeper_figures(summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """What an orphan cycle's survey of BookKeeper found (its ``bookkeeper``), or None
    when the source was off, the cycle stopped before the survey, or the summary is older
    than the source: then there is nothing to show, not a BookKeeper with no ledgers.

    Every class of ``rules/bookkeeper/classify.py`` is present (at 0 when the survey found
    none); a class a newer summary names is kept after them, explained as it says."""
    bk = summary.get("bookkeeper")
    if not isinstance(bk, Mapping):
        return None
    classes = _mapping(bk.get("classes"))
    explanations = _mapping(bk.get("explanations"))
    names = [*BK_CLASSES, *sorted(str(c) for c in classes if c not in BK_CLASSES)]
    missing = [m for m in _list(bk.get("missing_listed")) if isinstance(m, Mapping)]
    return {
        "hosts": str(bk.get("hosts") or ""),
        "root": str(bk.get("root") or ""),
        "layout": str(bk.get("layout") or ""),
        "managed_ledgers": as_int(bk.get("managed_ledgers")),
        "ledgers": as_int(bk.get("ledgers")),
        "bytes": as_int(bk.get("bytes")),
        "orphan_bytes": as_int(bk.get("orphan_bytes")),
        "pulsar_ledgers": as_int(bk.get("pulsar_ledgers")),
        "classes": {name: _ledgers_leaf(classes.get(name)) for name in names},
        "explanations": {
            name: str(explanations.get(name) or BK_EXPLANATIONS.get(name, "")) for name in names
        },
        # Sparse, as the survey keeps it: a namespace names only the classes it has.
        "namespaces": {
            str(ns): {str(c): _ledgers_leaf(leaf) for c, leaf in sorted(_mapping(per).items())}
            for ns, per in sorted(_mapping(bk.get("namespaces")).items())
        },
        "held_reasons": {
            str(hold): as_int(count)
            for hold, count in sorted(_mapping(bk.get("held_reasons")).items())
        },
        "missing_listed": len(missing),
        "missing_listed_samples": [
            {"ml_name": str(m.get("ml_name") or ""), "ledger_id": as_int(m.get("ledger_id"))}
            for m in missing[:MISSING_LISTED_SHOWN]
        ],
        "deleted": as_int(bk.get("deleted")),
        "bytes_reclaimed": as_int(bk.get("bytes_reclaimed")),
        "live_elsewhere": {
            str(name): str(why) for name, why in sorted(_mapping(bk.get("live_elsewhere")).items())
        },
        "restore": str(bk.get("restore") or DEFAULT_RESTORE),
        "cost": survey_cost(bk.get("cost")),
        # Topics that cannot be read: a record names a ledger BookKeeper lacks.
        "bk_missing": pm_runs.bk_missing(bk),
    }


#: The BookKeeper survey's steps as its cost names them (``bookkeeper/cost.py``).
SURVEY_STEPS = (
    "references",
    "listing",
    "cache",
    "ledgers",
    "spark_wait",
    "cache_save",
    "checks",
)


def survey_cost(cost: Any) -> dict[str, Any] | None:
    """What the survey cost ZooKeeper (``bookkeeper.cost``); None for a summary older
    than those figures (nothing to show, not a survey that cost nothing)."""
    if not isinstance(cost, Mapping):
        return None
    cache = _mapping(cost.get("cache"))
    seconds = _mapping(cost.get("seconds"))
    return {
        "zk_reads": as_int(cost.get("zk_reads")),
        "zk_peak_reads_per_second": as_int(cost.get("zk_peak_reads_per_second")),
        "records_read": as_int(cost.get("records_read")),
        "records_cached": as_int(cost.get("records_cached")),
        "directories": as_int(cost.get("directories")),
        "seconds": {
            step: round(float(seconds.get(step) or 0.0), 3) for step in (*SURVEY_STEPS, "total")
        },
        "cache": {
            "enabled": bool(cache.get("enabled")),
            "full_read": bool(cache.get("full_read")),
            "why": str(cache.get("why") or ""),
            "cycles_since_full_read": as_int(cache.get("cycles_since_full_read")),
        },
    }


def zookeeper_figures(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What an orphan cycle cost ZooKeeper (its ``zookeeper``): znodes read, the most in
    one second, the bound set, per step (a summary older than these: zeros)."""
    zk = _mapping(summary.get("zookeeper"))
    bound = zk.get("max_reads_per_second")
    return {
        "reads": as_int(zk.get("reads")),
        "peak_per_second": as_int(zk.get("peak_per_second")),
        "max_reads_per_second": float(bound) if isinstance(bound, int | float) else None,
        "by_step": {
            str(step): {
                "reads": as_int(_mapping(figures).get("reads")),
                "peak_per_second": as_int(_mapping(figures).get("peak_per_second")),
            }
            for step, figures in _mapping(zk.get("by_step")).items()
            if figures
        },
    }
