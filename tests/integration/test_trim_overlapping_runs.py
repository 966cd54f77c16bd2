"""Defects a hostile review of the trim found (issue 10 follow-up), each against a real
ZooKeeper and S3: what must hold, and the scenario that broke it."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import block_store, resolve, zk_endpoint
from ledger_gc.deletion import Deleter
from ledger_gc.formats.markers import deletable_markers
from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.positions import Position
from ledger_gc.rules.storage.keys import ml_dir, parse_key
from ledger_gc.rules.trim.eligibility import TrimRetention
from ledger_gc.storage.bulk_delete import RetryPolicy
from ledger_gc.storage.s3 import LedgerStorage
from ledger_gc.trim.lock import TRIM_LOCK_PATH
from ledger_gc.trim.run import TrimScope, run_trim
from ledger_gc.trim.trimmer import ManagedLedgerTrimmer

ML = "acme/prod/persistent/orders"
DAY_MS = 86_400_000


def consumed_topic(store, storage, ledgers: int = 4) -> tuple[ManagedLedger, list[int]]:
    """``ledgers`` full ledgers, the cursor "sub" at the end of the second-to-last one."""
    ml = ManagedLedger.open(ML, store, storage, ManagedLedgerConfig(max_entries_per_ledger=2))
    ml.add_entries([f"entry-{i}".encode() * 20 for i in range(2 * ledgers)])
    ids = [li.ledgerId for li in store.get_managed_ledger(ML).value.ledgerInfo]
    cursor = ml.open_cursor("sub", "earliest")
    cursor.mark_delete(Position(ids[ledgers - 2], 1))
    return ml, ids


def test_two_overlapping_trims_delete_and_audit_each_ledger_once(store, storage, settings):
    """A CLI trim beside the DAG's: both read the markers and list the blocks before
    either deletes. Before the fix both deleted, both wrote ``deleted`` audit records and
    both reports claimed the bytes (reclaimed bytes counted twice)."""
    ml, ids = consumed_topic(store, storage)
    both_listed = threading.Barrier(2)

    def trim_once() -> object:
        with MetadataStore.open(zk_endpoint(settings)) as own_store:
            own_storage = LedgerStorage(block_store(settings))
            real = own_storage.delete_keys

            def delete_after_the_other_listed(keys):
                # Wait (a while) until the other trim has listed too; a trim that cannot
                # overlap (the fix) times out here and goes on alone.
                with contextlib.suppress(threading.BrokenBarrierError):
                    both_listed.wait(timeout=3)
                return real(keys)

            own_storage.delete_keys = delete_after_the_other_listed
            return run_trim(resolve(settings), store=own_store, storage=own_storage)

    reports: list[object] = []
    threads = [threading.Thread(target=lambda: reports.append(trim_once())) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(reports) == 2

    deleted = Counter(r["ledger_id"] for r in AuditLog(settings).deletions())
    assert deleted == Counter(ids[:3]), f"audited more than once: {deleted}"
    claimed = sum(r.totals()["bytes_reclaimed"] for r in reports)  # type: ignore[attr-defined]
    audited = sum(r["bytes"] for r in AuditLog(settings).deletions())
    assert claimed == audited > 0
    ml.close()


def test_a_fast_host_clock_does_not_expire_what_time_retention_keeps(store, storage, settings):
    """Retention keeps consumed ledgers for a day. The host running the trim has a clock
    ten days fast (S3's clock is right). Before the fix the trim believed the host, found
    every consumed ledger "expired" and deleted data retention promised to keep."""
    ml, ids = consumed_topic(store, storage)
    settings = dataclasses.replace(settings, trim_retention=TrimRetention(86_400, -1))
    ten_days_fast = lambda: int(time.time() * 1000) + 10 * DAY_MS  # noqa: E731

    report = run_trim(resolve(settings), clock=ten_days_fast)

    [result] = report.managed_ledgers
    assert result.marked == [] and result.deleted == []
    info = store.get_managed_ledger(ML).value
    assert [li.ledgerId for li in info.ledgerInfo] == ids
    ml.close()


def test_a_trim_lock_held_elsewhere_marks_and_deletes_nothing_and_says_why(
    store, storage, settings, zk_client
):
    ml, ids = consumed_topic(store, storage)
    other = zk_client.create(
        f"{TRIM_LOCK_PATH}/holder-", b"trim-elsewhere", ephemeral=True, sequence=True, makepath=True
    )
    try:
        report = run_trim(resolve(settings), lock_wait_seconds=0.5)
    finally:
        zk_client.delete(other)

    assert report.exit_code == 2 and "trim-elsewhere" in (report.error or "")
    assert [li.ledgerId for li in store.get_managed_ledger(ML).value.ledgerInfo] == ids
    assert AuditLog(settings).read() == []
    assert run_trim(resolve(settings)).managed_ledgers[0].marked == ids[:3]  # once it is free
    ml.close()


def test_the_shards_of_one_run_trim_side_by_side(store, storage, settings):
    """The DAG trims disjoint shards of managed ledgers in parallel tasks of one run (one
    run id): the lock lets them all in at once, and keeps other runs out."""
    names = ["acme/prod/persistent/a", "acme/prod/persistent/b"]
    for name in names:
        ml = ManagedLedger.open(name, store, storage, ManagedLedgerConfig(max_entries_per_ledger=2))
        ml.add_entries([b"x" * 40] * 6)
        ml.close()
    together = threading.Barrier(2)

    def shard(name: str) -> object:
        with MetadataStore.open(zk_endpoint(settings)) as own_store:
            own_storage = LedgerStorage(block_store(settings))
            real = own_storage.delete_keys

            def delete_when_both_are_in(keys):
                together.wait(timeout=20)  # breaks (and fails the shard) if they serialise
                return real(keys)

            own_storage.delete_keys = delete_when_both_are_in
            return run_trim(
                resolve(settings),
                scope=TrimScope.of([name]),
                run_id="dag-run-1",
                store=own_store,
                storage=own_storage,
                lock_wait_seconds=30,
            )

    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(shard, names))

    assert [r.exit_code for r in reports] == [0, 0]  # type: ignore[attr-defined]
    assert all(r.managed_ledgers[0].deleted for r in reports)  # type: ignore[attr-defined]


def test_a_failed_delete_announced_under_the_right_prefix_is_no_evidence_under_a_wrong_one(
    store, storage, settings
):
    """A trim announces its deletes (``deleting`` records), S3 answers 503 and the data
    stays, markers pending. The topic is quiet: only its current ledger is listed, so the
    store probe has nothing to sample. The next trim runs with a typo in LEDGERGC_PREFIX.
    Before the fix, the write-ahead records of the *failed* deletes counted as evidence
    that the data was gone: every marker was cleared and the data, still under the right
    prefix, was neither listed nor marked."""
    from test_trim_safety import S3Fault

    ml = ManagedLedger.open(ML, store, storage, ManagedLedgerConfig(max_entries_per_ledger=2))
    ml.add_entries([f"entry-{i}".encode() * 20 for i in range(6)])
    ml.open_cursor("sub", "earliest").mark_delete(ml.last_confirmed())  # all consumed
    ids = [li.ledgerId for li in store.get_managed_ledger(ML).value.ledgerInfo]
    failing = LedgerStorage(
        block_store(settings), retry=RetryPolicy(max_attempts=1, base_delay=0.001)
    )
    S3Fault(failing)
    first = run_trim(resolve(settings), storage=failing)
    consumed = ids[:-1]
    assert [m.ledger_id for m in first.managed_ledgers[0].pending] == consumed

    typo = dataclasses.replace(settings, prefix="ledgrs")
    report = run_trim(resolve(typo))

    [result] = report.managed_ledgers
    assert result.cleared == [] and result.deleted == []
    info = store.get_managed_ledger(ML).value
    assert sorted(deletable_markers(info)) == consumed, "markers of live data dropped"
    assert [li.ledgerId for li in info.ledgerInfo] == ids[-1:]
    assert set(consumed) <= {
        parse_key(storage.prefix, o.key).ledger_id
        for o in storage.iter_objects(settings.key_prefix)
    }
    ml.close()


def test_a_topic_deleted_and_recreated_during_the_trim_keeps_its_new_record(
    store, storage, settings, monkeypatch
):
    """Between the trim's read and its mark, the topic is deleted and created again by
    the same steps, so its new record has the very version the trim read (ZooKeeper
    versions start again with a new znode). The mark's multi checks versions only, so
    before the fix it wrote the *old* topic's record (less the marked ledgers) over the
    new one: the new topic's ledgers were neither listed nor marked, live data that the
    orphan cycle would then remove."""
    config = ManagedLedgerConfig(max_entries_per_ledger=2)

    def build() -> None:
        ml = ManagedLedger.open(ML, store, storage, config)
        ml.add_entries([f"entry-{i}".encode() * 20 for i in range(6)])
        ml.close()  # no cursor: every ledger but the current one is consumed

    other = ManagedLedger.open("acme/prod/persistent/a-other", store, storage, config)
    other.add_entries([b"other"] * 4)  # the store probe finds data where settings point
    other.close()
    build()
    read_at = store.get_managed_ledger(ML).version
    real = ManagedLedgerTrimmer.read_states
    recreated: list[set[int]] = []

    def read_then_recreate(self, names):
        states = real(self, names)
        if not recreated:
            ManagedLedger.open(ML, store, storage, config).delete(Deleter(storage, None, "x"))
            build()
            new = store.get_managed_ledger(ML)
            assert new.version == read_at, "the test needs the same version again"
            recreated.append({li.ledgerId for li in new.value.ledgerInfo})
        return states

    monkeypatch.setattr(ManagedLedgerTrimmer, "read_states", read_then_recreate)
    run_trim(resolve(settings))

    info = store.get_managed_ledger(ML).value
    known = {li.ledgerId for li in info.ledgerInfo} | set(deletable_markers(info))
    with_data = {
        parse_key(storage.prefix, o.key).ledger_id
        for o in storage.iter_objects(ml_dir(storage.prefix, ML))
    }
    assert with_data <= known, f"live ledgers {with_data - known} dropped from the record"
    assert known <= recreated[0], f"ledgers {known - recreated[0]} of the deleted topic"
