"""The survey's listing of BookKeeper's leaf directories holds a bounded number of
ledger names at once (issue 36; real ZooKeeper): a dense leaf has 10,000 names, about
60 bytes each once decoded, and sixteen such leaves in flight were 18 MiB of the
driver's peak at 1,000,000 ledgers, which a 100,000-ledger survey never reached."""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.bookkeeper import scan
from ledger_gc.config.edge import zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.metadata.store import MetadataStore
from pulsar_cluster import PulsarCluster, ledger_record, ml_tags


@pytest.mark.parametrize("sparse_first", [False, True])
def test_the_listing_has_about_so_many_names_in_flight(
    settings: Settings, zk_client: KazooClient, monkeypatch: pytest.MonkeyPatch, sparse_first: bool
) -> None:
    """Dense leaves are listed a few at a time, sparse ones many at a time: each batch
    at most ``LEAF_NAMES_AT_ONCE`` names (but a leaf), whatever came before it. A
    cluster with retention has sparse old leaves and dense new ones: sized by the
    batch before, the first dense batch after sparse ones was sixteen leaves."""
    c = PulsarCluster(zk_client).init(idgen=False)
    record = bytes(ledger_record(ml_tags("public/default/persistent/t")))
    dense_leaves, sparse_leaves = (
        (range(40, 48), range(40)) if sparse_first else (range(8), range(8, 48))
    )
    dense = [leaf * 10_000 + i for leaf in dense_leaves for i in range(50)]
    sparse = [leaf * 10_000 + i for leaf in sparse_leaves for i in range(2)]
    for leaf in range(48):
        zk_client.ensure_path(c.path(leaf * 10_000).rsplit("/", 1)[0])
    pending = [zk_client.create_async(c.path(lid), record) for lid in dense + sparse]
    for op in pending:
        op.get(timeout=30)
    monkeypatch.setattr(scan, "LEAF_NAMES_AT_ONCE", 100)
    batches: list[tuple[int, int]] = []  # (leaves, names) a batch
    real = MetadataStore.children_with_stats

    def listed(store: MetadataStore, paths: list[str]) -> Any:
        got = real(store, paths)
        batches.append((len(paths), sum(len(names) for names, _ in filter(None, got))))
        return got

    monkeypatch.setattr(MetadataStore, "children_with_stats", listed)
    with MetadataStore.open(zk_endpoint(settings)) as store:
        shards, _ = scan.shard_directories(store, c.root, c.layout, ["00"])
        leaves = scan.list_leaves(store, c.root, c.layout, shards)
    assert sorted(lid for leaf in leaves.leaves for lid in leaf.ledger_ids) == sorted(
        dense + sparse
    )
    assert max(names for _, names in batches) <= 100
    assert [b for b in batches if b[1] == 100] == [(2, 100)] * 4  # (the dense leaves)
    # Sparse leaves many a batch: 40 of 2 names in a few batches, not one each.
    assert len(batches) <= 4 + 2 + 1
