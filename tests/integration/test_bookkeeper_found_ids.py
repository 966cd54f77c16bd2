"""The ids a BookKeeper survey found are the listing's less those gone before their
read (issue 36: the driver keeps no second copy of every id; real ZooKeeper).

A ledger deleted between the listing and its read is listed but not found: no check
may count it as there. Its managed ledger still lists it, so it is missing (read again
live), and the ids found are the ledgers classified, one for one.
"""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.bookkeeper import scan
from ledger_gc.bookkeeper.survey import survey
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.rules.bookkeeper import ledger_paths
from pulsar_cluster import PulsarCluster, ml_tags

NS = "public/default"
TOPIC = f"{NS}/persistent/orders"


def test_a_ledger_deleted_after_the_listing_is_not_found(
    settings: Settings, zk_client: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = PulsarCluster(zk_client).init()
    c.namespace(NS)
    present = [c.ledger(ml_tags(TOPIC)) for _ in range(12)]
    c.managed_ledger(TOPIC, present)
    deleted = present[4]
    real = scan.list_leaves

    def and_then_delete(*args: Any) -> Any:
        leaves = real(*args)
        c.bk.delete(ledger_paths.ledger_path(c.root, deleted, c.layout))
        return leaves

    monkeypatch.setattr(scan, "list_leaves", and_then_delete)
    found = survey(resolve(settings.with_overrides(bucket="")))
    assert found is not None
    assert found.ledgers == 11
    assert sorted(found.found) == sorted(set(present) - {deleted})
    assert len(found.found) == 11 and deleted not in found.found
    manifest = found.to_manifest()
    assert manifest["missing_listed"] == [{"ml_name": TOPIC, "ledger_id": deleted}]
    assert manifest["listed_in_bookkeeper"] == 11
    assert manifest["bk_missing"]["count"] == 1
