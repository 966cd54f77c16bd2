"""Every registered orphan with when it can be deleted: the page's table, its JSON and
``ledgergc orphans --list``, all from this one function.

Reads only the state store (the registry, its scans, the newest orphan-cycle summary);
the schedule itself is ``orphans.schedule`` (pure). The newest cycle's guard refusals
count: a guard that stopped it stops every deletion until a cycle passes it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ledger_gc import run_log
from ledger_gc.observability import runs
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.rules.orphans import schedule
from ledger_gc.state.stores import open_store

if TYPE_CHECKING:
    from ledger_gc.config.settings import Settings

#: The DAG whose runs the page links to (run ids of command-line cycles start ``cli-``).
ORPHAN_DAG_ID = "orphan_removal"


def registered_orphans(settings: Settings, *, now_ms: int | None = None) -> dict[str, Any]:
    """``{generated_at_ms, state_url, grace_seconds, retention_seconds, delete_enabled,
    latest_scan, blocking_guards, orphans: [ScheduledOrphan.to_dict()...]}``."""
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    store = open_store(settings)
    registry = OrphanRegistry(store)
    latest = registry.latest_scan()
    newest_cycle = run_log.read_runs(store, run_log.ORPHANS, 1)
    guards = sorted(
        {
            refusal["guard"] or "unnamed"
            for refusal in (runs.orphan_refusals(newest_cycle[-1]) if newest_cycle else [])
            if not refusal["forced"]
        }
    )
    scheduled = schedule.schedule(
        registry.entries().values(),
        latest_scan=latest.number if latest else None,
        scan_instants=registry.scan_instants(),
        run_ids=registry.scan_run_ids(),
        host_now_ms=now,
        grace_seconds=settings.grace_seconds,
        retention_seconds=settings.retention_seconds,
        delete_enabled=settings.delete_enabled,
        blocking_guards=guards,
    )
    return {
        "generated_at_ms": now,
        "state_url": store.display_url,
        "grace_seconds": settings.grace_seconds,
        "retention_seconds": settings.retention_seconds,
        "delete_enabled": settings.delete_enabled,
        "latest_scan": latest.number if latest else None,
        "blocking_guards": guards,
        "orphans": [item.to_dict() for item in scheduled],
    }


def dag_run_id(run_id: str | None) -> str | None:
    """The Airflow DAG run a cycle's run id names (None: a command-line cycle)."""
    if not run_id or run_id.startswith("cli-"):
        return None
    return run_id
