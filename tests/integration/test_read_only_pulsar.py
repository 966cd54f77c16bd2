"""Against a live Pulsar (brokers registered under /loadbalance/brokers) ledger-gc writes
no Pulsar metadata: counted at the kazoo client (every create, set, delete and multi this
process sends) and at the server (every znode of /managed-ledgers and /ledgers keeps its
versions and zxids, which also covers what Spark executors might send).

Decision: the orphan cycle's own coordination znodes under ``/ledger-gc/`` (the delete
lock, the run-sequence and id-counter probes) are the only writes allowed. No broker
reads or watches ``/ledger-gc``, so they cannot fence a topic or change what a broker
sees; without them two overlapping cycles could delete or audit the same orphan twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient, TransactionRequest
from pulsar_records import Ledger, store_of
from test_orphans_tiered import PREFIX, offloaded_store

from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.errors import SafetyRefusalError
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.trim.run import run_trim

PULSAR_ROOTS = ("/managed-ledgers", "/ledgers")
OUR_ROOT = "/ledger-gc"


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str]]]:
    """Every write request this process sends to ZooKeeper: (operation, path)."""
    sent: list[tuple[str, str]] = []

    def spy(name: str, original: Any) -> Any:
        def call(self: Any, path: str, *args: Any, **kwargs: Any) -> Any:
            sent.append((name, path))
            return original(self, path, *args, **kwargs)

        return call

    for name in ("create_async", "set_async", "delete_async", "set_acls_async"):
        monkeypatch.setattr(KazooClient, name, spy(name, getattr(KazooClient, name)))
    commit = TransactionRequest.commit_async

    def commit_spy(self: TransactionRequest) -> Any:
        sent.extend(("multi", op.path) for op in self.operations)
        return commit(self)

    monkeypatch.setattr(TransactionRequest, "commit_async", commit_spy)
    yield sent


def pulsar_znodes(zk: KazooClient) -> dict[str, tuple[int, int, int, int, int]]:
    """Every znode of Pulsar's metadata with what any write to it or its children moves."""
    seen = {}
    stack = [root for root in PULSAR_ROOTS if zk.exists(root)]
    while stack:
        path = stack.pop()
        _, stat = zk.get(path)
        seen[path] = (stat.mzxid, stat.pzxid, stat.version, stat.cversion, stat.aversion)
        stack.extend(f"{path.rstrip('/')}/{child}" for child in zk.get_children(path))
    return seen


def register_broker(zk: KazooClient) -> None:
    zk.create("/loadbalance/brokers/broker-1.pulsar:8080", b"{}", ephemeral=True, makepath=True)


def test_the_orphan_cycle_under_live_brokers_writes_only_its_own_znodes(
    settings: Settings,
    zk_client: KazooClient,
    s3_client: Any,
    spark: Any,
    writes: list[tuple[str, str]],
) -> None:
    bucket = f"{settings.bucket}-offload"
    s3_client.create_bucket(Bucket=bucket)
    tiered = settings.with_overrides(
        offload_bucket=bucket,
        offload_prefix=PREFIX,
        delete_enabled=True,
        grace_seconds=0,
        retention_seconds=0,
        orphan_max_fraction=1.0,
        metadata_read_only="auto",
    )
    offloaded_store(zk_client, s3_client, tiered)
    register_broker(zk_client)
    before = pulsar_znodes(zk_client)
    writes.clear()

    report = run_orphan_cycle(resolve(tiered), spark=spark).to_dict()

    assert report["status"] == "ok"
    assert {d["ledger_id"] for d in report["deleted"]} == {4, 5, 7, 8}  # segment removal ran
    assert writes, "the cycle's delete lock and probes are expected writes"
    theirs = [w for w in writes if w[1] != OUR_ROOT and not w[1].startswith(OUR_ROOT + "/")]
    assert theirs == []
    assert pulsar_znodes(zk_client) == before


def test_the_trim_under_live_brokers_refuses_and_sends_no_write(
    settings: Settings, zk_client: KazooClient, storage: Any, writes: list[tuple[str, str]]
) -> None:
    name = "acme/prod/persistent/orders"
    store_of(
        zk_client,
        storage,
        name,
        [Ledger(1), Ledger(2), Ledger(3, entries=0)],
        cursors={"sub": (2, 1)},
    )
    register_broker(zk_client)
    before = pulsar_znodes(zk_client)
    writes.clear()

    with pytest.raises(SafetyRefusalError, match=r"read-only .*brokers are registered"):
        run_trim(resolve(settings.with_overrides(metadata_read_only="auto")))

    assert writes == []
    assert pulsar_znodes(zk_client) == before
