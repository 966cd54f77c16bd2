"""Pulsar's references read a chunk of records at a time (issue 36), against a real
ZooKeeper: at 10M ledgers the records of 100,000 topics, read whole, took the driver's
memory from 100 to 476 MiB before one was decoded. The references are the same as a
read of every record at once."""

from __future__ import annotations

import pickle
import sys
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.bookkeeper.references import read_references
from ledger_gc.config.edge import zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.formats.markers import encode_marker_value, marker_key
from ledger_gc.metadata import store as store_module
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.proto.mldataformats_pb2 import ManagedLedgerInfo
from ledger_gc.rules.bookkeeper.cursor_ledgers import CursorLedgers
from ledger_gc.rules.metadata import paths
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
    # A subscription's name is held once, however many topics have it (the references'
    # keys for the whole survey: 5 MB at 100,000 topics as a string each).
    assert len({id(cursor) for _, cursor in chunked.cursors}) == 1
    # The cursors are columns, their topics the references' own names (a dict of
    # tuples was 100 bytes a cursor, 10 MiB at 100,000 topics).
    assert isinstance(chunked.cursors, CursorLedgers)
    assert all(topic in chunked.listed for topic, _ in chunked.cursors)
    # The topics' names are the interned ones: the candidates' owners, back from the
    # executors as copies (100,000 names at 10M), are interned onto them, not kept twice.
    copies = [pickle.loads(pickle.dumps(name)) for name in chunked.listed]
    assert all(sys.intern(copy) is name for copy, name in zip(copies, chunked.listed, strict=True))


def test_only_managed_ledgers_with_deletable_markers_have_a_marked_entry(
    zk_client: KazooClient, settings: Settings
) -> None:
    """An empty set a topic is 216 bytes: at 100,000 topics, 24 MB the driver held for
    markers that almost no topic has."""
    cluster = PulsarCluster(zk_client).init()
    cluster.namespace(NS)
    names = [f"{NS}/persistent/t{number}" for number in range(3)]
    for name in names:
        cluster.managed_ledger(name, [cluster.ledger(ml_tags(name))])
    trimmed = cluster.ledger(ml_tags(names[1]))
    path = paths.managed_ledger_path(names[1])
    info = ManagedLedgerInfo.FromString(zk_client.get(path)[0])
    marker = info.properties.add()
    marker.key, marker.value = marker_key(trimmed), encode_marker_value(1, 1, 1, 1)
    zk_client.set(path, info.SerializeToString())

    with MetadataStore.open(zk_endpoint(settings)) as store:
        refs = read_references(store)

    assert set(refs.listed) == set(names)
    assert dict(refs.marked) == {names[1]: frozenset({trimmed})}
