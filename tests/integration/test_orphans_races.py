"""The races KIP-370's grace window and the live re-check exist for.

A scan reads metadata first and lists storage second; a writer that registers a ledger
(or creates a managed ledger) in between and writes it before the listing makes live
data look orphaned for one scan. It may be registered, but it must be corrected away
and never deleted, even with grace and retention at zero.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from demo_leaks import plant_orphan_ledgers
from ledger_gc.config.edge import block_store, resolve, zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.ledger.managed_ledger import ManagedLedger
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.orphans import cycle, survey_steps
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.proto.mldataformats_pb2 import ManagedLedgerInfo
from ledger_gc.rules.orphans import phases
from ledger_gc.rules.storage.keys import ledger_dir, ml_dir
from ledger_gc.storage.s3 import LedgerStorage

pytestmark = pytest.mark.spark

ML = "public/default/persistent/orders"
NEW_ML = "public/default/persistent/created-after-the-snapshot"


def test_a_writer_between_snapshot_and_listing_is_registered_then_corrected_never_deleted(
    settings: Settings, store_kit: Any, spark: Any
) -> None:
    settings = settings.with_overrides(delete_enabled=True, grace_seconds=0, retention_seconds=0)
    store_kit.managed_ledger(ML, entries=40, size=4000)
    storage = LedgerStorage(block_store(settings))
    run_id = "race"
    with MetadataStore.open(zk_endpoint(settings)) as store:
        writer = ManagedLedger.open(ML, store, storage)
        writer.add_entry(b"before the snapshot")
        survey_steps.step_snapshot(resolve(settings), run_id, spark)
        # After the snapshot: a rollover registers a new ledger, a new topic appears;
        # both are written before the listing.
        writer.roll_over()
        new_ledger = writer.current_ledger_id
        writer.add_entries([b"after the snapshot"] * 3)
        other = ManagedLedger.open(NEW_ML, store, storage)
        other.add_entries([b"a new topic"] * 3)
        survey_steps.step_scan(resolve(settings), run_id, spark)
        survey_steps.step_diff(resolve(settings), run_id, spark)
        cycle.step_phases(resolve(settings), run_id, force=True)
        raced = {ledger_dir(settings.prefix, ML, new_ledger), ml_dir(settings.prefix, NEW_ML)}
        assert set(OrphanRegistry(settings).entries()) == raced
        before = store_kit.keys()

        result = cycle.step_delete(resolve(settings), run_id, spark=spark)

        assert {r.prefix: r.action for r in result.results} == dict.fromkeys(raced, "corrected")
        assert store_kit.keys() == before
        assert OrphanRegistry(settings).entries() == {}
        events = [
            (row["prefix"], row["event"]) for row in OrphanRegistry(settings).history(run_id=run_id)
        ]
        assert sorted(events) == sorted(
            [(p, phases.REGISTERED) for p in raced] + [(p, phases.CORRECTED) for p in raced]
        )
        # The writers keep going; the next cycle sees them as live.
        writer.add_entry(b"still writing")
        report = run_orphan_cycle(resolve(settings), spark=spark, force=True).to_dict()
        writer.close()
        other.close()
    assert report["phases"]["new"]["count"] == 0
    assert report["classes"]["orphan-ledger"]["units"] == 0
    assert report["classes"]["orphan-partition"]["units"] == 0
    assert store_kit.keys() >= before


def test_an_orphan_listed_again_inside_the_grace_window_leaves_the_registry(
    settings: Settings, store_kit: Any, spark: Any
) -> None:
    store_kit.managed_ledger(ML, entries=40, size=4000)
    with MetadataStore.open(zk_endpoint(settings)) as store:
        [leak] = plant_orphan_ledgers(
            settings, store, LedgerStorage(block_store(settings)), ML, 1, 3
        )
    enabled = settings.with_overrides(delete_enabled=True)  # default grace: a day

    first = run_orphan_cycle(resolve(enabled), spark=spark).to_dict()
    assert [w["prefix"] for w in first["waiting"]] == [leak["prefix"]]

    def relist(info: ManagedLedgerInfo) -> bool:
        # Restored by an operator (or a broker that never finished dropping it).
        entries = [(li.ledgerId, li) for li in info.ledgerInfo]
        restored = ManagedLedgerInfo.LedgerInfo(ledgerId=leak["ledger_id"], entries=3)
        ordered = sorted([*entries, (leak["ledger_id"], restored)], key=lambda e: e[0])
        del info.ledgerInfo[:]
        info.ledgerInfo.extend(li for _, li in ordered)
        return True

    with MetadataStore.open(zk_endpoint(settings)) as store:
        store.update_managed_ledger(ML, relist)

    second = run_orphan_cycle(resolve(enabled), spark=spark).to_dict()

    assert [(c["prefix"], c["reason"]) for c in second["corrected"]] == [
        (leak["prefix"], f"ledger {leak['ledger_id']} is listed again by {ML}")
    ]
    assert OrphanRegistry(settings).entries() == {}
    assert second["classes"]["orphan-ledger"]["units"] == 0
    assert store_kit.keys(leak["prefix"])


def test_new_data_in_a_registered_orphan_corrects_it_and_restarts_its_clock(
    settings: Settings, store_kit: Any, spark: Any, later: Callable[[float], Any]
) -> None:
    store_kit.managed_ledger(ML, entries=40, size=4000)
    storage = LedgerStorage(block_store(settings))
    with MetadataStore.open(zk_endpoint(settings)) as store:
        [leak] = plant_orphan_ledgers(settings, store, storage, ML, 1, 3)
    run_orphan_cycle(resolve(settings), spark=spark)
    storage.write_block(ML, leak["ledger_id"], 3, [b"someone is still writing"])

    second = run_orphan_cycle(resolve(settings), spark=spark).to_dict()

    [corrected] = second["corrected"]
    assert corrected["prefix"] == leak["prefix"]
    assert corrected["reason"].startswith("new data arrived")
    third = run_orphan_cycle(resolve(settings), spark=spark, **later(0.5)).to_dict()
    [entry] = OrphanRegistry(settings).entries().values()
    assert third["phases"]["new"]["count"] == 1
    assert entry.first_seen_ms > second["started_ms"]
