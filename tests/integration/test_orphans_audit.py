"""The orphan delete path audits ahead: against a real ZooKeeper and S3, an orphan whose
deletion cannot be recorded is not deleted, and one that is deleted has its ``deleting``
record written before and its ``deleted`` record after; on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal

import pytest
from pulsar_records import Ledger, ledgers_with_data, store_of
from state_faults import audit_refused

from ledger_gc import deletion
from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import block_store, resolve
from ledger_gc.errors import AuditUnavailableError
from ledger_gc.rules.orphans import outcomes
from ledger_gc.rules.orphans.phases import ORPHAN_LEDGER, RegistryEntry
from ledger_gc.rules.storage.keys import ledger_dir
from ledger_gc.s3_orphans import deleting
from ledger_gc.storage.s3 import LedgerStorage
from ledger_gc.termination import stop_on_signals

ML = "acme/prod/persistent/orders"


def orphan_entry(settings, storage, ledger_id: int) -> RegistryEntry:
    """A registered orphan ledger as the registry hands it to the delete step."""
    newest = max(
        o.last_modified for o in storage.iter_objects(ledger_dir(settings.prefix, ML, ledger_id))
    )
    return RegistryEntry(
        prefix=ledger_dir(settings.prefix, ML, ledger_id),
        target_class=ORPHAN_LEDGER,
        ml_name=ML,
        ledger_id=ledger_id,
        first_seen_ms=0,
        last_seen_ms=0,
        first_scan=1,
        last_scan=2,
        scans_seen=2,
        objects=1,
        bytes=100,
        newest_ms=newest,
    )


@pytest.fixture
def orphaned(zk_client, settings):
    """Ledgers 5 and 6 listed; ledger 1's data left behind (an orphan ledger)."""
    storage = LedgerStorage(block_store(settings))
    store_of(zk_client, storage, ML, [Ledger(5), Ledger(6, entries=0)])
    storage.write_block(ML, 1, 0, [b"x" * 50] * 2)
    return settings.with_overrides(retention_seconds=0), storage


pytestmark = pytest.mark.state_backends


def test_an_orphan_whose_deletion_cannot_be_audited_is_not_deleted(orphaned):
    settings, storage = orphaned
    entry = orphan_entry(settings, storage, 1)

    with audit_refused(settings), pytest.raises(AuditUnavailableError, match="audit log"):
        deleting.recheck_and_delete(
            resolve(settings), [entry], run_id="r1", now_ms=2**62, deleting=True
        )

    assert 1 in ledgers_with_data(storage, ML), "deleted without an audit record"


def test_an_orphan_deletion_is_announced_before_and_recorded_after(orphaned):
    settings, storage = orphaned
    entry = orphan_entry(settings, storage, 1)

    [result] = deleting.recheck_and_delete(
        resolve(settings), [entry], run_id="r1", now_ms=2**62, deleting=True
    )

    assert result.action == outcomes.DELETED and 1 not in ledgers_with_data(storage, ML)
    records = AuditLog(settings).read()
    assert [(r["status"], r["target_class"], r["ledger_id"]) for r in records] == [
        ("deleting", ORPHAN_LEDGER, 1),
        ("deleted", ORPHAN_LEDGER, 1),
    ]
    assert records[1]["bytes"] == result.bytes > 0


def test_sigterm_mid_delete_finishes_the_batch_audits_it_and_stops(
    zk_client, settings, monkeypatch
):
    """Issue 11 item 4b: a task timeout or pod eviction (SIGTERM) while orphans are being
    deleted. The DeleteObjects batch under way finishes and is recorded (``deleting``
    before, ``deleted`` after), nothing new starts, the rest stays registered (its result
    says it was not attempted), and the next run deletes it."""
    monkeypatch.setattr(deletion, "MAX_KEYS_PER_DELETE", 10)
    storage = LedgerStorage(block_store(settings))
    store_of(zk_client, storage, ML, [Ledger(50), Ledger(51, entries=0)])
    for ledger_id in range(1, 31):  # 30 orphan ledgers of one block each
        storage.write_block(ML, ledger_id, 0, [b"x" * 20])
    settings = settings.with_overrides(retention_seconds=0)
    entries = [orphan_entry(settings, storage, ledger_id) for ledger_id in range(1, 31)]
    signalled = LedgerStorage(block_store(settings))
    real_delete = signalled.delete_keys
    batches: list[int] = []

    def delete_then_signal(keys):
        batches.append(len(keys))
        if len(batches) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # a real signal, mid-batch
        return real_delete(keys)

    signalled.delete_keys = delete_then_signal
    monkeypatch.setattr(deleting, "LedgerStorage", lambda _store: signalled)
    with stop_on_signals() as stop:
        results = deleting.recheck_and_delete(
            resolve(settings), entries, run_id="r1", now_ms=2**62, deleting=True
        )

    assert stop() and batches == [10], "nothing new started after the signal"
    done = {r.ledger_id for r in results if r.action == outcomes.DELETED}
    stopped = {r.ledger_id for r in results if r.error == deletion.STOPPED}
    assert len(done) == 10 and stopped == set(range(1, 31)) - done
    assert ledgers_with_data(storage, ML) == {50} | stopped, "audited = deleted"
    records = AuditLog(settings).read()
    announced = {r["ledger_id"] for r in records if r["status"] == "deleting"}
    recorded = {r["ledger_id"] for r in records if r["status"] == "deleted"}
    assert announced == recorded == done

    monkeypatch.setattr(deleting, "LedgerStorage", LedgerStorage)
    rest = [e for e in entries if e.ledger_id in stopped]
    finished = deleting.recheck_and_delete(
        resolve(settings), rest, run_id="r2", now_ms=2**62, deleting=True
    )
    assert {r.action for r in finished} == {outcomes.DELETED}
    assert ledgers_with_data(storage, ML) == {50}
