"""DESIGN.md's guards against acting on a wrong picture of the store, and foreign keys.

Deletion is enabled and grace and retention are zero in every test here: nothing but the
guards (and the key parser) stands between a misconfiguration and lost data.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kazoo.client import KazooClient

from demo_leaks import plant_leaks
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans.cycle import OrphanCycleError, run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.rules.storage.keys import ledger_dir, ml_dir
from ledger_gc.run_log import read_runs

pytestmark = pytest.mark.spark

ML = "public/default/persistent/orders"


@pytest.fixture
def eager(settings: Settings) -> Settings:
    return settings.with_overrides(delete_enabled=True, grace_seconds=0, retention_seconds=0)


def _other_chroot(settings: Settings, create: bool) -> Settings:
    hosts, _, _ = settings.zk_hosts.partition("/")
    chroot = f"/wrong-{uuid.uuid4().hex[:8]}"
    if create:
        client = KazooClient(hosts=hosts)
        client.start(timeout=30)
        client.ensure_path(chroot)
        client.stop()
        client.close()
    return settings.with_overrides(zk_address=hosts + chroot)


def test_an_empty_chroot_beside_a_full_bucket_is_refused(
    eager: Settings, store_kit: Any, spark: Any
) -> None:
    store_kit.managed_ledger(ML, entries=20)
    plant_leaks(eager, ml_name=ML)
    before = store_kit.keys()
    wrong = _other_chroot(eager, create=True)

    report = run_orphan_cycle(resolve(wrong), spark=spark).to_dict()

    assert report["status"] == "refused"
    # Everything looks orphaned, so the fraction guard trips too.
    guards = {r["guard"]: r for r in report["refusals"]}
    assert set(guards) == {"zero-managed-ledgers", "orphan-fraction"}
    assert "LEDGERGC_ZK_HOSTS" in guards["zero-managed-ledgers"]["reason"]
    assert report["deleted"] == [] and report["phases"]["new"]["count"] == 0
    assert store_kit.keys() == before
    registry = OrphanRegistry(eager)
    assert registry.entries() == {} and registry.latest_scan() is None


def test_a_chroot_that_does_not_exist_fails_with_its_name(
    eager: Settings, store_kit: Any, spark: Any
) -> None:
    store_kit.managed_ledger(ML, entries=5)
    wrong = _other_chroot(eager, create=False)

    with pytest.raises(OrphanCycleError, match="chroot") as failure:
        run_orphan_cycle(resolve(wrong), spark=spark)

    report = failure.value.report.to_dict()
    assert report["status"] == "failed"
    assert [r["guard"] for r in report["refusals"]] == ["metadata-read"]
    [logged] = read_runs(eager, "orphans")
    assert logged["status"] == "failed" and "chroot" in logged["error"]


def test_orphans_above_the_byte_fraction_are_refused_unless_forced(
    eager: Settings, store_kit: Any, spark: Any
) -> None:
    store_kit.managed_ledger(ML, entries=2, size=100)
    planted = plant_leaks(eager, ml_name=ML, entries=40)
    before = store_kit.keys()

    refused = run_orphan_cycle(resolve(eager), spark=spark).to_dict()

    assert refused["status"] == "refused"
    assert refused["orphan_fraction"] > 0.1
    assert [r["guard"] for r in refused["refusals"]] == ["orphan-fraction"]
    assert store_kit.keys() == before

    forced = run_orphan_cycle(resolve(eager), spark=spark, force=True).to_dict()

    assert forced["status"] == "ok"
    assert forced["refusals"][0]["forced"] is True
    assert {d["prefix"] for d in forced["deleted"]} == {
        leak["prefix"] for leak in planted["orphan_ledgers"] + planted["orphan_partitions"]
    }


def test_foreign_keys_are_reported_and_never_deleted(
    eager: Settings, store_kit: Any, spark: Any
) -> None:
    store_kit.managed_ledger(ML, entries=40, size=4000)
    planted = plant_leaks(eager, ml_name=ML)
    orphan = planted["orphan_ledgers"][0]
    partition = planted["orphan_partitions"][0]
    prefix = eager.prefix
    foreign = {
        *planted["foreign_keys"],
        store_kit.put(f"{ml_dir(prefix, ML)}README"),
        store_kit.put(f"{orphan['prefix']}00000000000000000000.blk.tmp"),
        store_kit.put(f"{orphan['prefix']}0000000000000000003.blk"),
        store_kit.put(f"{partition['prefix']}ledgers/1/00000000000000000000.blk"),
        store_kit.put(f"{ledger_dir(prefix, ML, 999)}nested/00000000000000000000.blk"),
    }

    report = run_orphan_cycle(resolve(eager), spark=spark).to_dict()

    assert report["status"] == "ok"
    assert len(report["deleted"]) == 3
    assert report["foreign"]["objects"] == len(foreign)
    assert {s["key"] for s in report["foreign"]["samples"]} == foreign
    assert all(s["reason"] for s in report["foreign"]["samples"])
    assert store_kit.keys() >= foreign
    assert store_kit.keys(orphan["prefix"]) <= foreign  # its blocks went, the rest stayed
