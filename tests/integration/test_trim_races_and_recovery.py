"""Hostile review of the mark-then-delete trim (branch trim-review).

Each test shows one way the trim deletes live data, leaks data while reporting it gone,
loses a deletion from the audit, or gets stuck, against the real ZooKeeper and S3 of the
test stack. They fail on the code under review; the docstrings say what breaks.
"""

from __future__ import annotations

import dataclasses
import functools
import time as time_module

import pytest
from pulsar_records import (
    Ledger,
    ledgers_with_data,
    listed_and_marked,
    store_of,
    write_cursor,
    writer,
)

from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import block_store, resolve, zk_endpoint
from ledger_gc.errors import SafetyRefusalError, StorageError
from ledger_gc.formats.markers import deletable_markers, java_uuid
from ledger_gc.formats.records import encode_managed_cursor_info
from ledger_gc.ledger.cursor import mark_delete_of
from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.proto.mldataformats_pb2 import ManagedCursorInfo
from ledger_gc.rules.metadata import paths
from ledger_gc.rules.positions import Position
from ledger_gc.storage.s3 import LedgerStorage
from ledger_gc.trim import run as trim_run
from ledger_gc.trim.run import run_trim
from ledger_gc.trim.trimmer import ManagedLedgerTrimmer

ML = "acme/prod/persistent/orders"


# --- 1. a subscription created between the trim's children listing and record read ----


def test_a_subscription_created_between_listing_cursors_and_reading_the_record_is_not_skipped(
    store, storage, settings
):
    """``read_states`` lists the cursors *before* it reads the record. A subscription
    created (through the library, which re-sets the record in the same multi) in between
    is missing from the decision, and the record version the multi checks is already the
    one after the creation: the multi commits. The new "earliest" subscription then sits
    at (first ledger, -1) while its ledgers leave the ledger list: it can never read them
    (the consumer silently skips them), and the guard keeps their markers for ever."""
    ml, ids = writer(store, storage)
    ml.open_cursor("sub", "earliest").mark_delete(Position(ids[2], 1))  # 0..2 consumed
    ml_path = paths.managed_ledger_path(ML)
    with MetadataStore.open(zk_endpoint(settings)) as trim_store:
        real = trim_store.children_of_many
        done = []

        def children_then_subscribe(znodes):
            children = real(znodes)
            if ml_path in znodes and not done:
                done.append(True)
                ml.open_cursor("late", "earliest")  # a new subscription, via the library
            return children

        trim_store.children_of_many = children_then_subscribe
        report = run_trim(resolve(settings), store=trim_store)

    assert done, "the race window was not hit"
    [result] = report.managed_ledgers
    late = mark_delete_of(store.get_cursor(ML, "late").value)
    assert late == Position(ids[0], -1)
    # The ledgers the new subscription has not read must stay listed (readable).
    assert listed_and_marked(store)[0] == ids, (
        f"ledgers {result.marked} left the list although subscription 'late' at {late} has "
        "read none of them"
    )
    ml.close()


# --- 2. the confirmation listing fails after DeleteObjects ------------------------------


def test_a_failed_confirmation_listing_after_the_delete_is_reported_not_a_crash(
    store, storage, settings, zk_client
):
    """``Deleter._delete_batch`` computes ``block.key in left`` before it looks at
    ``left is None`` (the confirming listing failed): a TypeError after the
    DeleteObjects went out. The run dies with an unexpected exception, the deletes of the
    batch get no ``deleted`` audit record, every other managed ledger of the batch is
    left unfinished and the report is lost."""
    ledgers = [Ledger(1), Ledger(2), Ledger(3, entries=0)]
    store_of(zk_client, storage, ML, ledgers, cursors={"sub": (2, 1)})
    trim_storage = LedgerStorage(block_store(settings))
    real_delete, real_iter = trim_storage.delete_keys, trim_storage.iter_objects
    deleted = []

    def delete_keys(keys, **kwargs):
        deleted.append(list(keys))
        return real_delete(deleted[-1], **kwargs)

    def iter_objects(prefix=""):
        if deleted:  # the listing that confirms the delete: S3 answers 503 every retry
            raise StorageError(f"listing '{prefix}': 503 SlowDown (injected)")
        return real_iter(prefix)

    trim_storage.delete_keys = delete_keys
    trim_storage.iter_objects = iter_objects
    report = run_trim(resolve(settings), store=store, storage=trim_storage)  # must not raise

    [result] = report.managed_ledgers
    assert sorted(p.ledger_id for p in result.pending) == [1, 2]
    assert all("confirm" in (p.last_error or "") for p in result.pending)
    assert listed_and_marked(store)[1].keys() == {1, 2}, "the markers stay for the next run"


# --- 3. a wrong LEDGERGC_PREFIX that holds a sibling cluster's data -----------------------


def test_a_prefix_holding_another_clusters_copy_of_the_topic_does_not_clear_markers(
    store, storage, settings, zk_client
):
    """The store probe and the evidence rule only ask whether *anything* is stored under
    the managed ledger's ``ledgers/`` directory. Two Pulsar clusters sharing a bucket
    (prefixes ``ledgers`` and ``ledgers-b``) have the same topic names; with
    LEDGERGC_PREFIX set to the other cluster's prefix, the probe passes on the sibling's
    copy of the topic, and every marker of this cluster is "cleared" (reported gone, no
    data found) while its data stays under the right prefix: neither listed, nor marked,
    nor gone. (Had the sibling used the same ledger ids, its ledgers would have been
    deleted.)"""
    ours = [Ledger(1), Ledger(2), Ledger(3), Ledger(4, entries=0)]
    store_of(zk_client, storage, ML, ours, cursors={"sub": (3, 1)})  # 1..3 consumed
    wrong = dataclasses.replace(settings, prefix="ledgers-b")
    sibling = LedgerStorage(block_store(wrong))
    for ledger_id in (101, 102, 103):  # the other cluster's ledgers of the same topic
        sibling.write_block(ML, ledger_id, 0, [b"y" * 50] * 2)

    # The probe asks for blocks of the ledgers the record lists, not for anything under
    # the topic's name: the sibling's copy does not verify the prefix, so the run refuses.
    with pytest.raises(SafetyRefusalError, match="LEDGERGC_PREFIX"):
        run_trim(resolve(wrong), store=store, storage=sibling)

    listed, markers = listed_and_marked(store)
    assert listed == [1, 2, 3, 4] and markers == {}
    assert {1, 2, 3} <= ledgers_with_data(storage, ML)


# --- 4. a crash between the delete and the unmark, on an idle topic -----------------------


def test_markers_of_data_deleted_before_a_crash_are_cleared_by_the_next_run(
    store, storage, settings, zk_client, monkeypatch
):
    """The trim deletes the data, then crashes (or loses the audit log, or hits the
    TypeError above) before the CAS that drops the markers. On an idle topic whose only
    listed ledger is the empty current one, the next runs find no block under the managed
    ledger and no other managed ledger for the probe to sample: "not verified", so the
    markers stay for ever with "check LEDGERGC_BUCKET and LEDGERGC_PREFIX", although the
    audit log records that this very run deleted their data."""
    ledgers = [Ledger(1), Ledger(2), Ledger(3, entries=0)]
    store_of(zk_client, storage, ML, ledgers, cursors={"sub": (2, 1)})

    import ledger_gc.marking as marking

    def crash(*args, **kwargs):
        raise RuntimeError("killed between the delete and the unmark (injected)")

    monkeypatch.setattr(marking, "_unmark", crash)
    first = run_trim(resolve(settings), store=store)
    monkeypatch.undo()
    assert first.managed_ledgers[0].marked == [1, 2]
    assert ledgers_with_data(storage, ML) == set()
    audited = {r["ledger_id"] for r in AuditLog(settings).deletions()}
    assert {1, 2} <= audited

    for _ in range(2):
        report = run_trim(resolve(settings), store=store)
    [result] = report.managed_ledgers
    assert listed_and_marked(store)[1] == {}, "markers stuck: " + "; ".join(
        f"{p.ledger_id}: {p.last_error}" for p in result.pending
    )


# --- 5. the cursor guard reads a cursor-ledger cursor's stale znode position -------------


def test_the_cursor_guard_keeps_data_when_a_cursor_moved_to_a_cursor_ledger(
    store, storage, settings, zk_client
):
    """``_decide`` refuses a managed ledger with a cursor whose position lives in a
    cursor ledger (cursorsLedgerId != -1): the znode only has the position of the last
    switch, which a reset since may have moved back. The guard before the delete does not:
    a cursor that switched to a cursor ledger after the mark (its znode still shows the
    old, consumed position) lets the trim delete data the cursor may need again."""
    ml, ids = writer(store, storage)
    ml.open_cursor("sub", "earliest").mark_delete(Position(ids[2], 1))
    with MetadataStore.open(zk_endpoint(settings)) as trim_store:
        real = trim_store.commit_trim

        def mark_then_broker_switches_cursor(*args, **kwargs):
            written = real(*args, **kwargs)
            info = ManagedCursorInfo(
                cursorsLedgerId=777, markDeleteLedgerId=ids[2], markDeleteEntryId=1
            )
            zk_client.set(paths.cursor_path(ML, "sub"), encode_managed_cursor_info(info))
            return written

        trim_store.commit_trim = mark_then_broker_switches_cursor
        report = run_trim(resolve(settings), store=trim_store)

    [result] = report.managed_ledgers
    assert result.marked == ids[:3]
    assert result.deleted == [], (
        "the guard trusted the znode position of a cursor kept in cursor ledger 777"
    )
    assert ledgers_with_data(storage, ML) >= set(ids[:3])
    ml.close()


# --- 6. the same evidence rule makes an interrupted managed-ledger delete unfinishable ----


def test_an_interrupted_managed_ledger_delete_can_be_finished_by_running_it_again(
    store, storage, settings, monkeypatch
):
    """``delete_managed_ledger`` promises "safe to call again after any failure". Killed
    after its data is deleted but before the markers go, the second call finds no block
    left under the managed ledger (``store_verified`` is never passed on this path), keeps
    every marker as "no data found ... check LEDGERGC_BUCKET" and raises
    DeleteFailedError: on every retry, for ever. The topic can never be deleted."""
    import ledger_gc.marking as marking
    from ledger_gc.deletion import Deleter
    from ledger_gc.ledger.delete import delete_managed_ledger

    ml, _ = writer(store, storage)
    ml.close()
    deleter = Deleter(storage, AuditLog(settings), "review-delete")

    def crash(*args, **kwargs):
        raise RuntimeError("killed between the delete and the unmark (injected)")

    monkeypatch.setattr(marking, "_unmark", crash)
    with pytest.raises(RuntimeError):
        delete_managed_ledger(ML, store, deleter)
    monkeypatch.undo()
    assert ledgers_with_data(storage, ML) == set()

    delete_managed_ledger(ML, store, deleter)  # the retry the docstring promises
    assert not store.managed_ledger_exists(ML)


# --- 7. the store probe and Pulsar's offloaded, BookKeeper-deleted ledgers -----------------


def test_topics_whose_closed_ledgers_live_only_in_tiered_storage_do_not_stop_every_trim(
    store, storage, settings, zk_client, s3_client
):
    """Pulsar deletes an offloaded ledger's BookKeeper copy after the offload deletion
    lag (``bookkeeperDeleted``); the ledger stays listed, its data only in tiered storage.
    The store probe samples topics that list closed, non-empty ledgers and asks for any
    block of them in the store; it does not skip offloaded ledgers. When the sampled
    topics (the first 16 in name order) hold only such ledgers and an idle current one,
    the probe finds "no data" and refuses the whole run, every run: nothing is ever
    trimmed, in any topic (here a 17th topic with ordinary data too), and the tiered
    copies are never deleted."""
    from pulsar_records import record, write_record

    offload_bucket = f"{settings.bucket}-offload"
    s3_client.create_bucket(Bucket=offload_bucket)
    archive = [f"archive/old/persistent/t{i:02d}" for i in range(16)]
    for number, name in enumerate(archive):
        info = record([Ledger(1), Ledger(2), Ledger(3, entries=0)])
        for index in (0, 1):
            msb = 0x100 * (number + 1) + index
            context = info.ledgerInfo[index].offloadContext
            context.uidMsb, context.uidLsb, context.complete = msb, 0x99, True
            context.bookkeeperDeleted = True
            context.driverMetadata.name = "aws-s3"
            context.driverMetadata.properties.add(key="bucket", value=offload_bucket)
            uuid = java_uuid(msb, 0x99)
            for suffix in ("", "-index"):
                s3_client.put_object(
                    Bucket=offload_bucket,
                    Key=f"tiered/{uuid}-ledger-{index + 1}{suffix}",
                    Body=b"o",
                )
        write_record(zk_client, name, info)  # no block in the store: BookKeeper copies gone
        write_cursor(zk_client, name, "sub", 2, 1)  # ledgers 1 and 2 consumed
    # Another topic, later in name order, with its data in the store as usual.
    other = "zeta/prod/persistent/events"
    store_of(zk_client, storage, other, [Ledger(7), Ledger(8, entries=0)], cursors={"sub": (7, 1)})
    tiered = settings.with_overrides(offload_bucket=offload_bucket, offload_prefix="tiered")

    # refuses: SafetyRefusalError "none of 16 managed ledgers ..."
    report = run_trim(resolve(tiered))

    by_name = {r.name: r for r in report.managed_ledgers}
    assert by_name[archive[0]].marked == [1, 2]
    assert by_name[other].marked == [7]


# --- 8. a Pulsar broker that starts while the trim runs -----------------------------------


def test_a_broker_registering_during_the_run_stops_the_marks(store, storage, settings, zk_client):
    """``metadata_is_read_only`` is asked once, before the run. A broker that starts
    while a long trim runs (a rolling restart of the cluster) owns the topics from then
    on; the trim keeps changing their records under it (the broker then fences the
    topic, and its consumers read ledgers the trim is deleting). The marks should stop
    once a broker is registered."""
    names = [f"acme/prod/persistent/t{i}" for i in range(3)]
    for name in names:
        store_of(
            zk_client,
            storage,
            name,
            [Ledger(1), Ledger(2), Ledger(3, entries=0)],
            cursors={"sub": (2, 1)},
        )
    with MetadataStore.open(zk_endpoint(settings)) as trim_store:
        real = trim_store.children_of_many
        started = []

        def broker_starts_after_the_run_began(znodes):
            children = real(znodes)
            if (
                any(z.startswith(paths.managed_ledger_path(names[0])) for z in znodes)
                and not started
            ):
                started.append(True)
                zk_client.create(
                    "/loadbalance/brokers/broker-1:8080", b"{}", ephemeral=True, makepath=True
                )
            return children

        trim_store.children_of_many = broker_starts_after_the_run_began
        with pytest.raises(SafetyRefusalError, match="read-only during the run"):
            run_trim(resolve(settings.with_overrides(metadata_read_only="auto")), store=trim_store)

    assert started
    for name in names:
        info = store.get_managed_ledger(name).value
        assert deletable_markers(info) == {}, f"{name} marked under a live broker"
        assert sorted(li.ledgerId for li in info.ledgerInfo) == [1, 2, 3]


# --- 9. a cursor created by a plain znode create between the read and the multi -------------


def test_a_cursor_created_outside_the_library_during_the_trim_can_still_read_its_ledgers(
    store, storage, settings, zk_client
):
    """``commit_trim`` checks the cursors it read; ZooKeeper's multi cannot check that no
    child was added, so a cursor created by a plain create (a Pulsar tool, a broker)
    between the read and the multi is not seen: the ledgers it starts at leave the list.
    The guard then keeps their data (pending for ever, until the cursor passes them), but
    the subscription can no longer read them: reading from its position skips to the first
    ledger still listed, and once it acks past, the data is deleted unread. A guard that
    finds a cursor needing a marked ledger whose data is intact should put the ledger
    back in the list (a CAS), not only keep its data."""
    ml, ids = writer(store, storage)
    ml.open_cursor("sub", "earliest").mark_delete(Position(ids[2], 1))
    with MetadataStore.open(zk_endpoint(settings)) as trim_store:
        real = trim_store.commit_trim

        def raw_create_then_commit(*args, **kwargs):
            if not zk_client.exists(paths.cursor_path(ML, "tool")):
                write_cursor(zk_client, ML, "tool", ids[0], -1)
            return real(*args, **kwargs)

        trim_store.commit_trim = raw_create_then_commit
        run_trim(resolve(settings), store=trim_store)
    ml.close()

    assert ledgers_with_data(storage, ML) >= set(ids[:3]), "the guard kept the data"
    with MetadataStore.open(zk_endpoint(settings)) as reader_store:
        reader = ManagedLedger.open(
            ML, reader_store, storage, ManagedLedgerConfig(max_entries_per_ledger=2)
        )
        first = reader.open_cursor("tool").read_entries(1)
        reader.close()
    assert first and first[0].position == Position(ids[0], 0), (
        f"subscription 'tool' at {ids[0]}:-1 reads {first[0].position if first else None} "
        f"first: ledgers {ids[:3]} are unreadable for it"
    )


def test_a_broker_registering_between_two_marks_of_a_batch_stops_the_next_mark(
    store, storage, settings, zk_client, monkeypatch
):
    """The read-only check runs once per batch; a broker that registers after the batch's
    first mark must stop the marks that follow it in the same batch (issue 20: 164
    managed ledgers were first marked after the broker's znode existed)."""
    names = [f"acme/prod/persistent/t{i}" for i in range(4)]
    for name in names:
        store_of(
            zk_client,
            storage,
            name,
            [Ledger(1), Ledger(2), Ledger(3, entries=0)],
            cursors={"sub": (2, 1)},
        )
    with MetadataStore.open(zk_endpoint(settings)) as trim_store:
        real = trim_store.commit_trim
        commits = []

        def broker_starts_after_the_first_mark(name, *args, **kwargs):
            written = real(name, *args, **kwargs)
            commits.append(name)
            if len(commits) == 1:
                zk_client.create(
                    "/loadbalance/brokers/broker-1:8080", b"{}", ephemeral=True, makepath=True
                )
                time_module.sleep(0.5)  # the watch's notification arrives
            return written

        trim_store.commit_trim = broker_starts_after_the_first_mark
        # One mark at a time, so that "the next mark" is well defined (with N workers, up
        # to N marks already past their check are in flight when a broker registers).
        monkeypatch.setattr(
            trim_run, "ManagedLedgerTrimmer", functools.partial(ManagedLedgerTrimmer, workers=1)
        )
        report = run_trim(
            resolve(settings.with_overrides(metadata_read_only="auto")), store=trim_store
        )
    assert "registered under /loadbalance/brokers" in (report.error or "")
    assert len(commits) == 1
    marked = [n for n in names if deletable_markers(store.get_managed_ledger(n).value)]
    assert marked == commits  # only the one marked before the broker registered
