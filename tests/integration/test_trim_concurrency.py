"""The trim racing a writer that rolls over and consumers that ack, on real servers.

Three kinds of threads for a few seconds: a writer appending (rolling over every three
entries), a fast and a slow consumer reading every entry in order and acknowledging
(mark-delete or individual acks), and a trim running back to back with no retention.
Nothing coordinates them except ZooKeeper's compare-and-set.

What must hold: the consumers always read every entry they have not acknowledged (no
ledger they need is ever deleted), the writer is never fenced, no trim errs or writes
the record more than twice, and at the end every entry after every cursor is readable,
every ledger with data is listed or marked, and every ledger ever written is either
still listed or was deleted by the trim (audited): no marker was lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from ledger_gc import formats
from ledger_gc.audit import AuditLog
from ledger_gc.ledger.cursor import ManagedCursor
from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.positions import Position
from ledger_gc.storage.keys import parse_key
from ledger_gc.storage.s3 import LedgerStorage
from ledger_gc.trim import run_trim

ML = "acme/prod/persistent/clicks"
RUN_SECONDS = 4.0


def payload(seq: int) -> bytes:
    return f"seq-{seq:06d}".encode()


def seq_of(data: bytes) -> int:
    return int(data.decode().split("-")[1])


class Worker(threading.Thread):
    """Runs ``step`` until stopped; keeps the first exception for the test to raise."""

    def __init__(self, name: str, step: Callable[[], None], stop: threading.Event) -> None:
        super().__init__(name=name, daemon=True)
        self.step = step
        self.stop_event = stop
        self.error: BaseException | None = None
        self.rounds = 0

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                self.step()
                self.rounds += 1
        except BaseException as exc:
            self.error = exc
            self.stop_event.set()


def consume(cursor: ManagedCursor, expected: list[int], batch: int, individual: bool) -> None:
    """Read the next entries; they must be exactly the next sequence numbers; ack them."""
    entries = cursor.read_entries(batch)
    for entry in entries:
        got = seq_of(entry.data)
        assert got == expected[0], (
            f"{cursor.name} read seq {got} at {entry.position}, expected {expected[0]}: "
            "an entry was lost or reordered"
        )
        expected[0] += 1
    if not entries:
        return
    if individual:
        cursor.delete_many([e.position for e in reversed(entries)])
    else:
        cursor.mark_delete(entries[-1].position)


@pytest.mark.parametrize(
    "lagging",
    [True, False],
    ids=["a-lagging-consumer-bounds-the-trim", "consumers-caught-up-with-the-writer"],
)
def test_trim_racing_a_writer_and_consumers_loses_nothing(settings, lagging):
    storage = LedgerStorage(settings)
    written: dict[Position, int] = {}
    reports = []
    stop = threading.Event()

    with MetadataStore.open(settings) as writer_store, MetadataStore.open(settings) as trim_store:
        ml = ManagedLedger.open(
            ML, writer_store, storage, ManagedLedgerConfig(max_entries_per_ledger=3)
        )
        fast = ml.open_cursor("fast", "earliest")
        slow = ml.open_cursor("slow", "earliest")
        next_seq = [0]
        fast_expected, slow_expected = [0], [0]

        def write() -> None:
            count = 1 + next_seq[0] % 2
            seqs = range(next_seq[0], next_seq[0] + count)
            positions = ml.add_entries([payload(s) for s in seqs])
            written.update(zip(positions, seqs, strict=True))
            next_seq[0] += count
            time.sleep(0.02)

        def consume_fast() -> None:
            consume(fast, fast_expected, batch=4, individual=fast_expected[0] % 3 == 0)
            time.sleep(0.002)

        def consume_slow() -> None:
            # Lagging, it bounds the trim; caught up, the trim reaches the current ledger,
            # which it must leave to the writer.
            consume(slow, slow_expected, batch=2 if lagging else 8, individual=False)
            time.sleep(0.03 if lagging else 0.002)

        def trim() -> None:
            report = run_trim(settings, store=trim_store, storage=storage, record_run=False)
            reports.append(report)
            [result] = report.managed_ledgers
            assert result.error is None, result.error
            assert result.pending == [], result.pending
            assert result.zk_writes <= 2, f"{result.zk_writes} writes of the record"

        workers = [
            Worker("writer", write, stop),
            Worker("fast", consume_fast, stop),
            Worker("slow", consume_slow, stop),
            Worker("trim", trim, stop),
        ]
        for worker in workers:
            worker.start()
        stop.wait(RUN_SECONDS)
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
            assert not worker.is_alive(), f"{worker.name} did not stop"
        for worker in workers:
            if worker.error is not None:
                raise AssertionError(f"{worker.name} failed") from worker.error

        # The race really happened: data was trimmed while everything ran.
        assert sum(r.totals()["ledgers_deleted"] for r in reports) >= 3
        assert all(w.rounds > 5 for w in workers), {w.name: w.rounds for w in workers}

        ml.close()
        # Quiet now. Every ledger with data is listed or marked.
        info = writer_store.get_managed_ledger(ML).value
        listed = {li.ledgerId for li in info.ledgerInfo}
        marked = set(formats.deletable_markers(info))
        with_data = {
            parse_key(storage.prefix, o.key).ledger_id
            for o in storage.iter_objects(settings.key_prefix)
        }
        assert with_data <= listed | marked

        # A last trim leaves no marker, and the audit accounts for every ledger that left.
        assert run_trim(settings, store=trim_store, storage=storage).exit_code == 0
        info = writer_store.get_managed_ledger(ML).value
        listed = {li.ledgerId for li in info.ledgerInfo}
        assert formats.deletable_markers(info) == {}
        audited = {a["ledger_id"] for a in AuditLog(settings.state_dir).read()}
        ever_written = {p.ledger_id for p in written}
        assert ever_written <= listed | audited, "a ledger left the list without a marker"
        assert not listed & audited

        # Every entry after every cursor's position is still there, in order.
        reopened = ManagedLedger.open(ML, writer_store, storage, ManagedLedgerConfig())
        for name, expected in (("fast", fast_expected[0]), ("slow", slow_expected[0])):
            cursor = reopened.open_cursor(name)
            remaining = [seq_of(e.data) for e in cursor.read_entries(len(written) + 10)]
            assert remaining == list(range(expected, next_seq[0])), name
        reopened.close()


def test_a_rollover_and_an_ack_during_the_mark_make_it_decide_again(settings):
    """Deterministic version of the race: between the trim's read of the record and its
    write, the writer rolls over and the consumer acks. The CAS fails, the mutator runs
    again on the new record, and it still judges by the cursor positions read before,
    which can only keep more."""
    storage = LedgerStorage(settings)
    with MetadataStore.open(settings) as writer_store, MetadataStore.open(settings) as trim_store:
        ml = ManagedLedger.open(
            ML, writer_store, storage, ManagedLedgerConfig(max_entries_per_ledger=2)
        )
        ml.add_entries([payload(i) for i in range(4)])
        cursor = ml.open_cursor("sub", "earliest")
        first, second, current = (li.ledger_id for li in ml.ledgers())
        cursor.mark_delete(Position(second, 1))  # ledgers `first` and `second` consumed

        real_update = trim_store.update_managed_ledger
        mutator_runs = []

        def racing_update(name, mutate):
            def interfered(info):
                mutator_runs.append([li.ledgerId for li in info.ledgerInfo])
                if len(mutator_runs) == 1:
                    ml.add_entries([payload(4), payload(5)])  # fills `current`, rolls over
                    cursor.mark_delete(Position(current, 1))  # and consumes it
                return mutate(info)

            trim_store.update_managed_ledger = real_update  # only the first (mark) write
            return real_update(name, interfered)

        trim_store.update_managed_ledger = racing_update
        report = run_trim(settings, store=trim_store, storage=storage)

        [result] = report.managed_ledgers
        assert len(mutator_runs) == 2, "the CAS conflict re-ran the mutator"
        assert mutator_runs[1][-2:] == [current, ml.current_ledger_id]
        # `current` is consumed by now, but the trim judged by the cursor it had read.
        assert result.marked == [first, second]
        listed = [li.ledgerId for li in writer_store.get_managed_ledger(ML).value.ledgerInfo]
        assert listed == [current, ml.current_ledger_id]
        ml.add_entries([payload(6)])  # the writer was not fenced
        again = run_trim(settings, store=trim_store, storage=storage)
        assert again.managed_ledgers[0].marked == [current]
        ml.close()
