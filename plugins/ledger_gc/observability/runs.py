"""The run summaries of the trim and of the orphan cycle, read defensively.

The trim (``trim/report.py: run_summary``) and the orphan cycle append one summary per
run to the state store's run log (``run_log.py``). Their shapes belong to those modules and may
grow; this module is the only place in ``observability`` that knows their keys, and it
reads every key with a default (missing -> zero, empty or None), so an older or a newer
summary never breaks the page or the metrics. The keys read are listed in
``docs/OPERATIONS.md`` ("What the overview reads").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
CLASS_TITLES = {
    PARTITION: "Orphan partitions",
    LEDGER: "Orphan ledgers",
    SEGMENT: "Orphan offloaded segments",
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


# {phase: {class: {"count": n, "bytes": b}}}
PhaseTable = dict[str, dict[str, dict[str, int]]]


def empty_phases() -> PhaseTable:
    """``{phase: {class: {"count": 0, "bytes": 0}}}`` for every phase and class."""
    return {p: {c: {"count": 0, "bytes": 0} for c in CLASSES} for p in PHASES}


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
        for cls in CLASSES:
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
