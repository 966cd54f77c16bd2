"""A stale copy of the metadata must never delete live data (issue 11, item 1).

``LEDGERGC_ZK_HOSTS`` names a chroot holding an *older* copy of the store's metadata (a
DR replica, a restored snapshot): every managed ledger is there, but a quiet topic's
newest ledger is not. Every other guard passes and the live re-check reads the same
stale chroot; only the evidence of the scan itself (the ledger's id is above everything
its managed ledger lists, and above the chroot's own ledger-id counter) tells.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from demo_leaks import plant_orphan_ledgers
from ledger_gc.config.edge import block_store, resolve, zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.ledger.managed_ledger import ManagedLedger
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.rules.metadata import paths
from ledger_gc.rules.storage.keys import ledger_dir
from ledger_gc.storage.s3 import LedgerStorage

pytestmark = pytest.mark.spark

BUSY = "public/default/persistent/busy"
QUIET = "public/default/persistent/quiet"


def _client(hosts: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=30)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def _stale_copy(live: Settings) -> Settings:
    """Copy every managed ledger and the id counter to a new chroot, as a replica would."""
    root_hosts = live.zk_hosts.partition("/")[0]
    chroot = f"/replica-{uuid.uuid4().hex[:8]}"
    for root in _client(root_hosts):
        root.ensure_path(chroot)
    replica = live.with_overrides(zk_address=root_hosts + chroot)
    for source in _client(live.zk_hosts):
        for target in _client(replica.zk_hosts):
            names: list[str] = []
            with MetadataStore.open(zk_endpoint(live)) as store:
                names = store.list_managed_ledgers()
            for name in names:
                path = paths.managed_ledger_path(name)
                data, _ = source.get(path)
                target.create(path, data, makepath=True)
            counter = source.exists(paths.LEDGER_IDGEN_PATH).cversion
            target.ensure_path(paths.LEDGER_IDGEN_PATH)
            while target.exists(paths.LEDGER_IDGEN_PATH).cversion < counter:
                made = target.create(f"{paths.LEDGER_IDGEN_PATH}/ID-", b"", sequence=True)
                target.delete(made)
    return replica


def test_a_stale_metadata_copy_refuses_and_keeps_the_newest_ledger(
    settings: Settings, store_kit: Any, spark: Any
) -> None:
    eager = settings.with_overrides(delete_enabled=True, grace_seconds=0, retention_seconds=0)
    store_kit.managed_ledger(BUSY, entries=60, size=4000)
    store_kit.managed_ledger(QUIET, entries=4, size=500, per_ledger=2)
    replica = _stale_copy(eager)
    # After the copy was taken, the quiet topic is loaded again: a new current ledger,
    # registered (in the live chroot only) and written.
    with MetadataStore.open(zk_endpoint(eager)) as store:
        ml = ManagedLedger.open(QUIET, store, LedgerStorage(block_store(eager)))
        ml.add_entries([b"the newest, live data"] * 3)
        newest = ml.current_ledger_id
        ml.close()
    before = store_kit.keys()
    newest_prefix = ledger_dir(eager.prefix, QUIET, newest)
    assert store_kit.keys(newest_prefix)

    refused = run_orphan_cycle(resolve(replica), spark=spark).to_dict()

    assert store_kit.keys() == before, "live data of a quiet topic was deleted"
    assert refused["status"] == "refused"
    [refusal] = refused["refusals"]
    assert refusal["guard"] == "stale-metadata"
    assert str(newest) in refusal["reason"] and QUIET in refusal["reason"]
    assert "/ledgers/idgen" in refusal["reason"] and "LEDGERGC_ZK_HOSTS" in refusal["reason"]
    assert [h["prefix"] for h in refused["held"]] == [newest_prefix]
    assert OrphanRegistry(replica).entries() == {}

    forced = run_orphan_cycle(resolve(replica), spark=spark, force=True).to_dict()

    assert forced["status"] == "ok" and forced["refusals"][0]["forced"] is True
    assert forced["deleted"] == [] and [h["prefix"] for h in forced["held"]] == [newest_prefix]
    assert store_kit.keys() == before
    assert OrphanRegistry(replica).entries() == {}


def test_orphans_below_what_the_metadata_knows_are_still_removed(
    settings: Settings, store_kit: Any, spark: Any
) -> None:
    eager = settings.with_overrides(delete_enabled=True, grace_seconds=0, retention_seconds=0)
    store_kit.managed_ledger(BUSY, entries=60, size=4000)
    storage = LedgerStorage(block_store(eager))
    with MetadataStore.open(zk_endpoint(eager)) as store:
        # A legacy delete's leak: below the ledgers its managed ledger lists since.
        [below] = plant_orphan_ledgers(eager, store, storage, BUSY, 1, 3)
        ml = ManagedLedger.open(BUSY, store, storage)
        ml.add_entries([b"later data"] * 2)
        assert ml.current_ledger_id > below["ledger_id"]
        ml.close()
        # A leak above the listed ledgers but allocated by this chroot's id counter.
        [above] = plant_orphan_ledgers(eager, store, storage, BUSY, 1, 3)

    report = run_orphan_cycle(resolve(eager), spark=spark).to_dict()

    assert report["status"] == "ok" and report["refusals"] == [] and report["held"] == []
    assert {d["prefix"] for d in report["deleted"]} == {below["prefix"], above["prefix"]}
