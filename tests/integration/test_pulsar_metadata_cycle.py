"""Pulsar's own metadata through whole orphan cycles against a real ZooKeeper (issue 34):
a namespace deleted half way loses its records on the first cycle past the grace
window, its persistent parents on a later one, and the BookKeeper ledgers its records
named are handed to the BookKeeper source, which deletes them past their own grace;
the live namespace's records and ledgers stay throughout."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient
from test_pulsar_metadata_survey import GONE, GONE_TOPIC, half_deleted_namespace, live_namespace

from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans.cycle import run_orphan_cycle
from pulsar_cluster import PulsarCluster

pytestmark = pytest.mark.spark

TARGET = f"pulsar-metadata:local:{GONE}"


def test_a_half_deleted_namespace_goes_records_first_then_parents_then_its_ledgers(
    pulsar: Settings,
    cluster: PulsarCluster,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
    zk_client: KazooClient,
) -> None:
    live = live_namespace(cluster)
    gone = half_deleted_namespace(cluster)

    def cycle(hours: float) -> dict[str, Any]:
        report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(hours)).to_dict()
        assert report["status"] == "ok", report["refusals"]
        return report

    def ledgers(ids: list[int]) -> list[bool]:
        return [zk_client.exists(cluster.path(lid)) is not None for lid in ids]

    assert cycle(0)["deleted"] == []  # registered
    first = cycle(25)  # past the grace window: its records
    assert [(d["prefix"], d["objects"]) for d in first["deleted"]] == [(TARGET, 5)]
    assert not zk_client.exists(f"/managed-ledgers/{GONE_TOPIC}")
    assert zk_client.exists(f"/managed-ledgers/{GONE}")  # never by the cycle that emptied it
    assert ledgers(gone) == [True] * len(gone)  # handed off, under their own grace
    assert cycle(50)["deleted"] == []  # its parents registered, the ledgers' grace runs
    last = cycle(75)
    deleted = {d["prefix"]: d["objects"] for d in last["deleted"]}
    assert deleted.pop(TARGET) == 4  # its persistent parents
    assert len(deleted) == len(gone) and all(p.startswith("bookkeeper:") for p in deleted)
    assert ledgers(gone) == [False] * len(gone)
    assert not zk_client.exists(f"/managed-ledgers/{GONE}")
    assert ledgers(live) == [True] * len(live)
    assert zk_client.exists("/managed-ledgers/acme/live/persistent/orders")
    assert cycle(100)["deleted"] == []
    pm = [r for r in AuditLog(pulsar).read() if r["target_class"] == "pm-deleted-namespace"]
    assert sum(1 for r in pm if r["status"] == "deleted") == 9
