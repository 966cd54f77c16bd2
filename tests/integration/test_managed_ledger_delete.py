"""Deleting a managed ledger, interrupted at each step and resumed: nothing leaks."""

from __future__ import annotations

import pytest

from ledger_gc.audit import AuditLog
from ledger_gc.deletion import Deleter
from ledger_gc.errors import DeleteFailedError, ManagedLedgerNotFoundError
from ledger_gc.formats.markers import deletable_markers
from ledger_gc.ledger.delete import delete_managed_ledger
from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.rules.storage.keys import ml_dir
from ledger_gc.storage.bulk_delete import DeleteResult

ML = "acme/prod/persistent/payments"


class Crash(Exception):
    """Stands for the process dying at that point."""


@pytest.fixture
def deleter(storage, settings):
    return Deleter(storage, AuditLog(settings), run_id="test")


def populated(store, storage) -> ManagedLedger:
    ml = ManagedLedger.open(ML, store, storage, ManagedLedgerConfig(max_entries_per_ledger=2))
    ml.add_entries([b"x" * 10] * 7)
    ml.open_cursor("sub", "earliest")
    return ml


def objects(storage, settings) -> list[str]:
    return [o.key for o in storage.iter_objects(ml_dir(settings.prefix, ML))]


def finish(store, deleter) -> None:
    """What an operator (or the next run) does after a crash: run the delete again."""
    delete_managed_ledger(ML, store, deleter)
    assert not store.managed_ledger_exists(ML)


def test_a_delete_removes_data_cursors_and_znode_and_is_audited(store, storage, deleter, settings):
    ml = populated(store, storage)
    reclaimed = ml.delete(deleter)
    assert reclaimed > 0
    assert objects(storage, settings) == []
    with pytest.raises(ManagedLedgerNotFoundError):
        store.get_managed_ledger(ML)
    audit = AuditLog(settings).deletions()
    assert {r["operation"] for r in audit} == {"managed-ledger-delete"}
    assert sum(r["bytes"] for r in audit) == reclaimed


def test_crash_after_marking_leaves_only_marked_ledgers_then_resumes(
    store, storage, deleter, settings, monkeypatch
):
    ml = populated(store, storage)
    listed = [li.ledgerId for li in store.get_managed_ledger(ML).value.ledgerInfo]

    def die(_targets):
        raise Crash

    monkeypatch.setattr(deleter, "delete", die)
    with pytest.raises(Crash):
        ml.delete(deleter)
    info = store.get_managed_ledger(ML).value
    # Every ledger with data is marked: the invariant the GC relies on.
    assert not info.ledgerInfo
    assert set(deletable_markers(info)) == set(listed)
    assert objects(storage, settings)
    monkeypatch.undo()
    finish(store, deleter)
    assert objects(storage, settings) == []


def test_failed_object_deletes_keep_markers_until_a_later_run(
    store, storage, deleter, settings, monkeypatch
):
    ml = populated(store, storage)
    real = storage.delete_keys

    def half_fails(keys, **kwargs):
        keys = list(keys)
        result = real(keys[::2], **kwargs)
        return DeleteResult(
            deleted=result.deleted,
            failed={**result.failed, **{k: "InternalError" for k in keys[1::2]}},
        )

    monkeypatch.setattr(storage, "delete_keys", half_fails)
    with pytest.raises(DeleteFailedError):
        ml.delete(deleter)
    info = store.get_managed_ledger(ML).value
    pending = deletable_markers(info)
    assert pending and all(m["attempts"] == 1 for m in pending.values())
    assert all("InternalError" in m["lastError"] for m in pending.values())
    assert store.list_cursors(ML) == ["sub"]  # nothing past the failed step ran
    monkeypatch.undo()
    finish(store, deleter)
    assert objects(storage, settings) == []


def test_crash_before_the_znode_is_removed_resumes(store, storage, deleter, settings, monkeypatch):
    ml = populated(store, storage)

    def die(*_args):
        raise Crash

    monkeypatch.setattr(store, "delete_managed_ledger_node", die)
    with pytest.raises(Crash):
        ml.delete(deleter)
    assert objects(storage, settings) == []
    assert store.list_cursors(ML) == []
    monkeypatch.undo()
    finish(store, deleter)


def test_a_foreign_object_in_a_ledger_dir_is_never_deleted(store, storage, deleter, settings):
    ml = populated(store, storage)
    first = store.get_managed_ledger(ML).value.ledgerInfo[0].ledgerId
    foreign = f"{ml_dir(settings.prefix, ML)}ledgers/{first:020d}/README.txt"
    storage.client.put_object(Bucket=settings.bucket, Key=foreign, Body=b"not ours")
    ml.delete(deleter)
    assert objects(storage, settings) == [foreign]
