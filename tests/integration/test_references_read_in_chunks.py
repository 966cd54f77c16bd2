"""Pulsar's references read a chunk of records at a time (issue 36), against a real
ZooKeeper: at 10M ledgers the records of 100,000 topics, read whole, took the driver's
memory from 100 to 476 MiB before one was decoded. The references are the same as a
read of every record at once."""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.bookkeeper.references import read_references
from ledger_gc.config.edge import zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.metadata import store as store_module
from ledger_gc.metadata.store import MetadataStore
from pulsar_cluster import PulsarCluster, ml_tags

NS = "public/default"


def test_the_references_are_read_a_chunk_at_a_time_and_are_the_whole_reads(
    zk_client: KazooClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = PulsarCluster(zk_client).init()
    cluster.namespace(NS)
    for number in range(11):
        name = f"{NS}/persistent/t{number}"
        ids = [cluster.ledger(ml_tags(name)) for _ in range(3)]
        cluster.managed_ledger(name, ids)
        cluster.cursor(name, "sub", cursors_ledger_id=cluster.ledger(ml_tags(name)))
        cluster.schema(f"{NS}/t{number}", [(0, cluster.ledger({}))])
    with MetadataStore.open(zk_endpoint(settings)) as whole_store:
        whole = read_references(whole_store)
    asked: list[int] = []
    get_many = MetadataStore.get_many

    def counted(self: MetadataStore, znodes: Any) -> Any:
        asked.append(len(znodes))
        return get_many(self, znodes)

    monkeypatch.setattr(store_module, "READ_CHUNK", 4)
    monkeypatch.setattr(MetadataStore, "get_many", counted)
    with MetadataStore.open(zk_endpoint(settings)) as store:
        chunked = read_references(store)

    assert asked and max(asked) <= 4
    assert sum(asked) >= 33  # every record (11 managed ledgers, cursors, schemas)
    assert chunked == whole
    assert len(chunked.listed) == 11 and len(chunked.cursors) == 11 and len(chunked.schemas) == 11
