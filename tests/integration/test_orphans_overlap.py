"""Two orphan cycles on one state at once (issue 11, item 3): a CLI run beside the DAG.

Both pass the latest-run check while the first still deletes; without a lock both
delete the same orphans and audit them twice, inflating the bytes reclaimed. The delete
phase is serialised by a ZooKeeper lock, and the second cycle, once it has the lock,
re-reads the registry: what the first deleted is no longer there to delete or count.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kazoo.client import KazooClient

from demo_leaks import plant_leaks
from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import resolve
from ledger_gc.config.endpoints import Endpoints
from ledger_gc.config.settings import Settings
from ledger_gc.orphans import cycle, survey_steps
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.s3_orphans import deleting

pytestmark = pytest.mark.spark

ML = "public/default/persistent/orders"
LOCK = "/ledger-gc/locks/orphan-delete"


def test_overlapping_cycles_delete_and_audit_each_orphan_once(
    settings: Settings, store_kit: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    eager = settings.with_overrides(delete_enabled=True, grace_seconds=0, retention_seconds=0)
    store_kit.managed_ledger(ML, entries=60, size=4000)
    planted = plant_leaks(eager, ml_name=ML)
    leaks = planted["orphan_ledgers"] + planted["orphan_partitions"]
    for step in (survey_steps.step_snapshot, survey_steps.step_scan):
        step(resolve(eager), "first", spark)
        step(resolve(eager), "second", spark)
    survey_steps.step_diff(resolve(eager), "first", spark)
    survey_steps.step_diff(resolve(eager), "second", spark)
    cycle.step_phases(resolve(eager), "first")

    first_deleting = threading.Event()
    second_applied = threading.Event()
    second_rechecking = threading.Event()
    real = deleting.recheck_and_delete

    def slow_first(endpoints: Endpoints, entries: Any, *, run_id: str, **kwargs: Any) -> Any:
        if run_id == "first":  # a long delete: the second cycle catches up meanwhile
            first_deleting.set()
            second_applied.wait(60)
            second_rechecking.wait(5)
        else:
            second_rechecking.set()
        return real(endpoints, entries, run_id=run_id, **kwargs)

    monkeypatch.setattr(deleting, "recheck_and_delete", slow_first)
    results: dict[str, Any] = {}

    def delete(run_id: str) -> None:
        results[run_id] = cycle.step_delete(resolve(eager), run_id)

    first = threading.Thread(target=delete, args=("first",))
    first.start()
    assert first_deleting.wait(60)
    assert cycle.step_phases(resolve(eager), "second").applied  # passes the latest-run check
    second_applied.set()
    second = threading.Thread(target=delete, args=("second",))
    second.start()
    first.join(120)
    second.join(120)

    deleted = {
        run_id: {r.prefix for r in result.results if r.action == "deleted"}
        for run_id, result in results.items()
    }
    assert deleted == {"first": {leak["prefix"] for leak in leaks}, "second": set()}
    audited = AuditLog(eager).deletions()
    assert sum(r["bytes"] for r in audited) == sum(leak["bytes"] for leak in leaks)
    assert {r["run_id"] for r in audited} == {"first"}
    assert OrphanRegistry(eager).entries() == {}
    second_report = cycle.step_report(resolve(eager), "second").to_dict()
    assert second_report["deleted"] == [] and second_report["phases"]["deleted"]["count"] == 0


def test_a_delete_lock_held_elsewhere_deletes_nothing_and_says_why(
    settings: Settings, store_kit: Any, spark: Any, zk_client: KazooClient
) -> None:
    eager = settings.with_overrides(delete_enabled=True, grace_seconds=0, retention_seconds=0)
    store_kit.managed_ledger(ML, entries=60, size=4000)
    plant_leaks(eager, ml_name=ML)
    before = store_kit.keys()
    holder = zk_client.Lock(LOCK, identifier="a-cycle-that-hangs")
    assert holder.acquire(timeout=10)
    try:
        report = run_orphan_cycle(
            resolve(eager.with_overrides(orphan_lock_wait_seconds=1)), spark=spark
        ).to_dict()
    finally:
        holder.release()

    assert store_kit.keys() == before
    assert report["deleted"] == [] and AuditLog(eager).read() == []
    assert LOCK in report["delete_skipped"] and "a-cycle-that-hangs" in report["delete_skipped"]
    assert report["pending"] is True
    assert len(OrphanRegistry(eager).entries()) == 3  # kept for the next run
