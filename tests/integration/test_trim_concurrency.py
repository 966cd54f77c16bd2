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
from pulsar_records import Ledger, ledgers_with_data, store_of

from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import block_store, resolve, zk_endpoint
from ledger_gc.formats.markers import deletable_markers
from ledger_gc.ledger.cursor import ManagedCursor
from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.positions import Position
from ledger_gc.rules.storage.keys import parse_key
from ledger_gc.storage.s3 import LedgerStorage
from ledger_gc.trim.run import run_trim

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
    storage = LedgerStorage(block_store(settings))
    written: dict[Position, int] = {}
    reports = []
    stop = threading.Event()

    with (
        MetadataStore.open(zk_endpoint(settings)) as writer_store,
        MetadataStore.open(zk_endpoint(settings)) as trim_store,
    ):
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
            report = run_trim(
                resolve(settings), store=trim_store, storage=storage, record_run=False
            )
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
        marked = set(deletable_markers(info))
        with_data = {
            parse_key(storage.prefix, o.key).ledger_id
            for o in storage.iter_objects(settings.key_prefix)
        }
        assert with_data <= listed | marked

        # A last trim leaves no marker, and the audit accounts for every ledger that left.
        assert run_trim(resolve(settings), store=trim_store, storage=storage).exit_code == 0
        info = writer_store.get_managed_ledger(ML).value
        listed = {li.ledgerId for li in info.ledgerInfo}
        assert deletable_markers(info) == {}
        audited = {a["ledger_id"] for a in AuditLog(settings).read()}
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
    """Deterministic version of the race: between the trim's read and its mark, the
    writer rolls over and the consumer acks. The mark's multi fails on the versions, and
    the trim decides again from what is there now."""
    storage = LedgerStorage(block_store(settings))
    with (
        MetadataStore.open(zk_endpoint(settings)) as writer_store,
        MetadataStore.open(zk_endpoint(settings)) as trim_store,
    ):
        ml = ManagedLedger.open(
            ML, writer_store, storage, ManagedLedgerConfig(max_entries_per_ledger=2)
        )
        ml.add_entries([payload(i) for i in range(4)])
        cursor = ml.open_cursor("sub", "earliest")
        first, second, current = (li.ledger_id for li in ml.ledgers())
        cursor.mark_delete(Position(second, 1))  # ledgers `first` and `second` consumed

        real_commit = trim_store.commit_trim
        commits = []

        def racing_commit(name, record, *args, **kwargs):
            commits.append(sorted(li.ledgerId for li in record.ledgerInfo))
            if len(commits) == 1:
                ml.add_entries([payload(4), payload(5)])  # fills `current`, rolls over
                cursor.mark_delete(Position(current, 1))  # and consumes it
            return real_commit(name, record, *args, **kwargs)

        trim_store.commit_trim = racing_commit
        report = run_trim(resolve(settings), store=trim_store, storage=storage)

        [result] = report.managed_ledgers
        assert len(commits) == 2, "the failed multi made the trim decide again"
        assert commits[0] == [current] and commits[1] == [ml.current_ledger_id]
        assert result.marked == [first, second, current]
        listed = [li.ledgerId for li in writer_store.get_managed_ledger(ML).value.ledgerInfo]
        assert listed == [ml.current_ledger_id]
        ml.add_entries([payload(6)])  # the writer was not fenced
        ml.close()


HOT = [f"acme/hot/persistent/topic-{i}" for i in range(3)]
COLD = 200
TRIMS = 4
MAX_TRIMS = 12


def test_resets_acks_and_rollovers_during_trims_of_hundreds_of_ledgers_lose_nothing(
    settings, zk_client
):
    """Operators reset subscriptions back to the earliest data, consumers read and ack,
    writers roll over, all in tight loops, while back-to-back trims run over 200 quiet
    managed ledgers and 3 busy ones. Every consumer reads the entries after its position
    without a gap at every moment; no trim errs."""
    storage = LedgerStorage(block_store(settings))
    cold = {}
    for index in range(COLD):
        name = f"acme/cold/persistent/t-{index:03d}"
        position = (2, index % 3 - 1)  # ledger 2 unread, half read, or wholly read
        store_of(
            zk_client,
            storage,
            name,
            [Ledger(1), Ledger(2), Ledger(3, entries=0)],
            cursors={"sub": position},
        )
        cold[name] = position
    stop = threading.Event()
    reports = []
    with (
        MetadataStore.open(zk_endpoint(settings)) as writer_store,
        MetadataStore.open(zk_endpoint(settings)) as trim_store,
    ):
        config = ManagedLedgerConfig(max_entries_per_ledger=3)
        mls = [ManagedLedger.open(name, writer_store, storage, config) for name in HOT]
        sequences = [[0] for _ in mls]

        def write() -> None:
            for ml, seq in zip(mls, sequences, strict=True):
                ml.add_entries([payload(seq[0]), payload(seq[0] + 1)])
                seq[0] += 2
            time.sleep(0.01)

        def consumer(ml: ManagedLedger, name: str) -> Callable[[], None]:
            cursor = ml.open_cursor(name, "earliest")
            rounds = [0]

            def step() -> None:
                rounds[0] += 1
                if rounds[0] % 7 == 0:
                    # Reset to the earliest data still listed, as `reset-cursor` does.
                    first = min(
                        li.ledgerId
                        for li in writer_store.get_managed_ledger(ml.name).value.ledgerInfo
                    )
                    at = cursor.reset(Position(first, 0))
                    entries = cursor.read_entries(3)  # raises if a block it needs is gone
                    assert not entries or entries[0].position >= at, (name, at, entries[0])
                entries = cursor.read_entries(4)  # raises if a block it needs is gone
                seqs = [seq_of(e.data) for e in entries]
                assert seqs == sorted(seqs), f"{name} read out of order: {seqs}"
                if entries:
                    cursor.mark_delete(entries[-1].position)
                time.sleep(0.002)

            return step

        def trim() -> None:
            report = run_trim(
                resolve(settings), store=trim_store, storage=storage, record_run=False
            )
            reports.append(report)
            for result in report.managed_ledgers:
                assert result.error is None, (result.name, result.error)
                assert result.pending == [], (result.name, result.pending)
            # At least TRIMS trims, and on until one has trimmed a busy managed ledger: on
            # a loaded machine every mark of the first few can lose its race with a reset
            # (the trim then decides again next run, as it must), which proves nothing.
            if len(reports) >= TRIMS and (hot_deleted() > 0 or len(reports) >= MAX_TRIMS):
                stop.set()

        def hot_deleted() -> int:
            return sum(
                len(r.deleted)
                for report in reports
                for r in report.managed_ledgers
                if r.name in HOT
            )

        workers = [Worker("writer", write, stop), Worker("trim", trim, stop)]
        workers += [
            Worker(f"reader-{i}-{c}", consumer(ml, c), stop)
            for i, ml in enumerate(mls)
            for c in ("a", "b")
        ]
        for worker in workers:
            worker.start()
        stop.wait(240)  # the trims set it when done
        stop.set()
        for worker in workers:
            worker.join(timeout=60)
            assert not worker.is_alive(), f"{worker.name} did not stop"
        for worker in workers:
            if worker.error is not None:
                raise AssertionError(f"{worker.name} failed") from worker.error
        assert TRIMS <= len(reports) <= MAX_TRIMS
        assert hot_deleted() > 0, "the busy managed ledgers were trimmed while it all ran"
        resets = [w.rounds // 7 for w in workers if w.name.startswith("reader")]
        assert min(resets) > 0, "every reader reset its cursor at least once"

        # The quiet managed ledgers lost exactly what their cursor had consumed.
        for name, (_, entry_id) in cold.items():
            # (2, -1) and (2, 0): ledger 1 consumed; (2, 1), its last entry: both.
            assert ledgers_with_data(storage, name) == ({2} if entry_id < 1 else set()), name
        # Every entry after every cursor is readable, in order.
        for ml in mls:
            for cursor in ml.cursors():
                left = cursor.read_entries(10_000)
                seqs = [seq_of(e.data) for e in left]
                assert seqs == sorted(seqs)
            ml.close()
