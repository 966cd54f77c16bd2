"""The orphan delete path audits ahead: against a real ZooKeeper and S3, an orphan whose
deletion cannot be recorded is not deleted, and one that is deleted has its ``deleting``
record written before and its ``deleted`` record after."""

from __future__ import annotations

import pytest
from pulsar_records import Ledger, ledgers_with_data, store_of

from ledger_gc.audit import AuditLog
from ledger_gc.errors import AuditUnavailableError
from ledger_gc.orphans import deleting
from ledger_gc.orphans.phases import ORPHAN_LEDGER, RegistryEntry
from ledger_gc.storage.keys import ledger_dir
from ledger_gc.storage.s3 import LedgerStorage

ML = "acme/prod/persistent/orders"


def orphan_entry(settings, storage, ledger_id: int) -> dict:
    """A registered orphan ledger as the registry hands it to the delete step."""
    newest = max(o.last_modified for o in storage.iter_objects(
        ledger_dir(settings.prefix, ML, ledger_id)))
    return RegistryEntry(
        prefix=ledger_dir(settings.prefix, ML, ledger_id), target_class=ORPHAN_LEDGER,
        ml_name=ML, ledger_id=ledger_id, first_seen_ms=0, last_seen_ms=0, first_scan=1,
        last_scan=2, scans_seen=2, objects=1, bytes=100, newest_ms=newest,
    ).__dict__


@pytest.fixture
def orphaned(zk_client, settings):
    """Ledgers 5 and 6 listed; ledger 1's data left behind (an orphan ledger)."""
    storage = LedgerStorage(settings)
    store_of(zk_client, storage, ML, [Ledger(5), Ledger(6, entries=0)])
    storage.write_block(ML, 1, 0, [b"x" * 50] * 2)
    return settings.with_overrides(retention_seconds=0), storage


def test_an_orphan_whose_deletion_cannot_be_audited_is_not_deleted(orphaned):
    settings, storage = orphaned
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    (settings.state_dir / "audit.jsonl").mkdir()  # appending to it fails
    entry = orphan_entry(settings, storage, 1)

    with pytest.raises(AuditUnavailableError, match="audit log"):
        deleting.recheck_and_delete(settings, [entry], run_id="r1", now_ms=2**62,
                                    deleting=True)

    assert 1 in ledgers_with_data(storage, ML), "deleted without an audit record"


def test_an_orphan_deletion_is_announced_before_and_recorded_after(orphaned):
    settings, storage = orphaned
    entry = orphan_entry(settings, storage, 1)

    [result] = deleting.recheck_and_delete(settings, [entry], run_id="r1", now_ms=2**62,
                                           deleting=True)

    assert result["action"] == deleting.DELETED and 1 not in ledgers_with_data(storage, ML)
    records = AuditLog(settings.state_dir).read()
    assert [(r["status"], r["target_class"], r["ledger_id"]) for r in records] == [
        ("deleting", ORPHAN_LEDGER, 1), ("deleted", ORPHAN_LEDGER, 1)
    ]
    assert records[1]["bytes"] == result["bytes"] > 0
