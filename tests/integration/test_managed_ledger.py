"""The managed ledger against a real ZooKeeper and a real S3 endpoint."""

from __future__ import annotations

import threading

import pytest

from ledger_gc.config.edge import block_store, zk_endpoint
from ledger_gc.errors import (
    InvalidPositionError,
    ManagedLedgerClosedError,
    ManagedLedgerFencedError,
)
from ledger_gc.formats.records import set_property
from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.positions import Position
from ledger_gc.rules.storage.keys import ledger_dir
from ledger_gc.storage.s3 import LedgerStorage

ML = "acme/prod/persistent/orders"


class FakeClock:
    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1000)


def open_ml(store, storage, **config) -> ManagedLedger:
    return ManagedLedger.open(ML, store, storage, ManagedLedgerConfig(**config))


def payloads(count: int, tag: str = "m") -> list[bytes]:
    return [f"{tag}-{i}".encode() for i in range(count)]


def test_entries_round_trip_across_rolled_over_ledgers(store, storage):
    ml = open_ml(store, storage, max_entries_per_ledger=3)
    positions = ml.add_entries(payloads(7))
    ledgers = [p.ledger_id for p in positions]
    assert len(set(ledgers)) == 3 and ledgers == sorted(ledgers)
    assert [p.entry_id for p in positions] == [0, 1, 2, 0, 1, 2, 0]
    entries = ml.read_entries(Position(ledgers[0], 0), 100)
    assert [e.data for e in entries] == payloads(7)
    assert ml.read_entry(positions[4]).data == b"m-4"
    ml.close()

    # Closed ledgers carry their counts in metadata, Pulsar-style.
    info = store.get_managed_ledger(ML).value
    closed = [li for li in info.ledgerInfo if li.ledgerId in set(ledgers[:6])]
    assert [li.entries for li in closed] == [3, 3]
    assert all(li.size == sum(len(p) for p in payloads(3)) for li in closed)


def test_rollover_by_size_and_by_age_respecting_minimum_age(store, storage):
    clock = FakeClock()
    config = ManagedLedgerConfig(
        max_entries_per_ledger=1000,
        max_size_per_ledger=10,
        max_ledger_age_seconds=60,
        min_ledger_age_seconds=5,
    )
    ml = ManagedLedger.open(ML, store, storage, config, clock=clock)
    first = ml.add_entry(b"0123456789AB")  # over max size, but younger than min age
    second = ml.add_entry(b"x")
    assert first.ledger_id == second.ledger_id
    clock.advance(6)
    third = ml.add_entry(b"y")  # now full by size and old enough: rolled over before it
    assert third.ledger_id != first.ledger_id
    clock.advance(61)
    fourth = ml.add_entry(b"z")  # the ledger of `third` is over max age
    assert fourth.ledger_id != third.ledger_id
    ml.close()


def test_a_new_ledger_is_registered_before_any_of_its_blocks(store, storage, settings):
    ml = open_ml(store, storage)
    ml.add_entry(b"a")
    ml.roll_over()
    new_id = ml.current_ledger_id
    info = store.get_managed_ledger(ML).value
    assert info.ledgerInfo[-1].ledgerId == new_id
    assert storage.prefix_is_empty(ledger_dir(settings.prefix, ML, new_id))
    ml.close()


def test_crashed_writer_is_recovered_from_its_blocks(settings, storage):
    with MetadataStore.open(zk_endpoint(settings)) as crashed_store:
        ml = ManagedLedger.open(ML, crashed_store, storage)
        written = ml.add_entries(payloads(5))
        # The process dies: no close, no counts in metadata. Its session ends with it.
    with MetadataStore.open(zk_endpoint(settings)) as store:
        info = store.get_managed_ledger(ML).value
        assert info.ledgerInfo[-1].entries == 0
        recovered = ManagedLedger.open(ML, store, storage)
        info = store.get_managed_ledger(ML).value
        stats = {li.ledgerId: li for li in info.ledgerInfo}
        assert stats[written[0].ledger_id].entries == 5
        assert [e.data for e in recovered.read_entries(written[0], 10)] == payloads(5)
        assert recovered.current_ledger_id != written[0].ledger_id
        recovered.close()


def test_second_writer_is_refused_and_lost_session_fences(settings, store, storage):
    ml = open_ml(store, storage)
    with (
        MetadataStore.open(zk_endpoint(settings)) as other,
        pytest.raises(ManagedLedgerFencedError),
    ):
        ManagedLedger.open(ML, other, LedgerStorage(block_store(settings)))
    ml._ownership._on_state("SUSPENDED")  # what kazoo reports when the session is in doubt
    with pytest.raises(ManagedLedgerFencedError):
        ml.add_entry(b"late")


def test_closed_ledger_refuses_reads_and_writes(store, storage):
    ml = open_ml(store, storage)
    position = ml.add_entry(b"a")
    cursor = ml.open_cursor("c", "earliest")
    ml.close()
    with pytest.raises(ManagedLedgerClosedError):
        ml.add_entry(b"b")
    with pytest.raises(ManagedLedgerClosedError):
        ml.read_entry(position)
    with pytest.raises(ManagedLedgerClosedError):
        cursor.read_entries(1)


def test_cursor_reads_acks_folds_and_recovers(store, storage, settings):
    ml = open_ml(store, storage, max_entries_per_ledger=4)
    positions = ml.add_entries(payloads(10))
    earliest = ml.open_cursor("sub", "earliest")
    latest = ml.open_cursor("tail", "latest")
    assert latest.mark_delete_position == positions[-1]
    assert [e.data for e in earliest.read_entries(3)] == payloads(3)

    earliest.delete(positions[1])
    earliest.delete(positions[5])  # in the second ledger
    assert earliest.mark_delete_position < positions[0]
    earliest.mark_delete(positions[0])  # folds over the individually acked entry 1
    assert earliest.mark_delete_position == positions[1]
    for position in positions[2:5]:
        earliest.delete(position)  # crosses into ledger 2, then folds over 5
    assert earliest.mark_delete_position == positions[5]
    assert earliest.backlog() == 4
    earliest.delete(positions[8])
    with pytest.raises(InvalidPositionError):
        earliest.mark_delete(Position(positions[-1].ledger_id, 99))
    ml.close()

    with MetadataStore.open(zk_endpoint(settings)) as store2:
        reopened = ManagedLedger.open(ML, store2, LedgerStorage(block_store(settings)))
        cursor = reopened.open_cursor("sub")
        assert cursor.mark_delete_position == positions[5]
        # One (lower, upper] range covering exactly entry 8, the first of its ledger.
        [(lower, upper)] = cursor.individually_acked()
        assert upper == positions[8] and lower < positions[8] and lower >= positions[7]
        assert [e.data for e in cursor.read_entries(10)] == [b"m-6", b"m-7", b"m-9"]
        cursor.seek(positions[0])
        assert cursor.read_entries(1)[0].data == b"m-0"
        reopened.close()


def test_cas_conflicts_between_two_writers_lose_nothing(settings, store):
    store.create_managed_ledger(ML)
    rounds = 25

    def writer(tag: str) -> None:
        with MetadataStore.open(zk_endpoint(settings)) as own:
            for i in range(rounds):

                def mutate(info, i=i):
                    set_property(info, f"{tag}.{i}", "1")
                    return True

                own.update_managed_ledger(ML, mutate)

    threads = [threading.Thread(target=writer, args=(tag,)) for tag in ("a", "b", "c")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    keys = {kv.key for kv in store.get_managed_ledger(ML).value.properties}
    assert keys == {f"{tag}.{i}" for tag in "abc" for i in range(rounds)}
    assert store.get_managed_ledger(ML).version == 3 * rounds
