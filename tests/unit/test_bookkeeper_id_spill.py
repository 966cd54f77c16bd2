"""Every managed ledger's listed ids, spilled to a file of the survey's driver
(``IdSpill``): what the cut to the Spark tasks and the check of the listed ledgers read
a chunk at a time, held in the process no more (issue 36: 38 MiB of the driver's growth
from 1M to 10M ledgers). A spilled set answers as the set it was."""

from __future__ import annotations

import errno
import logging
import os
import pickle
import sys
import tracemalloc
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_gc.bookkeeper import id_spill
from ledger_gc.bookkeeper.id_spill import IdSpill, SpilledIds
from ledger_gc.rules.bookkeeper.classify import Classifier, PulsarReferences
from ledger_gc.rules.bookkeeper.ledger_index import FoundIds, LedgerIds

id_sets = st.lists(
    st.one_of(
        st.lists(st.integers(0, 5_000), max_size=40),
        st.lists(st.integers(2**40, 2**40 + 50), max_size=5),
        st.lists(st.sampled_from([0, 2**33, 2**62]), max_size=3),  # (eight bytes an id)
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(
    sets=id_sets,
    probe=st.lists(st.integers(-1, 5_010), max_size=20),
    block=st.sampled_from([8, 64, 1 << 20]),
)
def test_a_spilled_set_answers_as_the_set_it_was(
    sets: list[list[int]], probe: list[int], block: int
) -> None:
    spill = IdSpill(block_bytes=block, flush_bytes=block)
    kept = [LedgerIds(ids) for ids in sets]
    spilled = [spill.add(ids) for ids in kept]
    for ids, got in zip(reversed(kept), reversed(spilled), strict=True):  # (out of order)
        want = frozenset(ids)
        assert got == want and want == got and len(got) == len(want)
        assert list(got) == sorted(want) and got.high == max(want, default=None)
        assert got.itemsize == ids.itemsize
        assert list(got.sorted_array()) == sorted(want)
        assert list(got.numpy()) == sorted(want)
        assert list(got.at_least(100, 4_000)) == [i for i in sorted(want) if 100 <= i < 4_000]
        for lid in probe:
            assert (lid in got) == (lid in want)
        assert got | set(probe) == want | set(probe) and got & set(probe) == want & set(probe)
        assert got - set(probe) == want - set(probe) and got ^ set(probe) == want ^ set(probe)
        if ids.itemsize == 4 and len(ids):
            assert got.offsets() == ids.offsets()
        back = pickle.loads(pickle.dumps(got, pickle.HIGHEST_PROTOCOL))
        assert type(back) is LedgerIds and back == want  # (an executor gets the ids)
    found = FoundIds([array("q", range(0, 5_000, 3))])
    names = [f"t{n}" for n in range(len(kept))]
    assert list(found.lacking_each(zip(names, spilled, strict=True))) == list(
        found.lacking_each(zip(names, kept, strict=True))
    )


def test_ids_spilled_after_a_read_are_read_back_as_written() -> None:
    """Adding ids after a read (the cache holds a block) and reading them at once."""
    spill = IdSpill(block_bytes=64, flush_bytes=1 << 20)
    first = spill.add(LedgerIds(range(10, 30)))
    assert list(first) == list(range(10, 30))
    later = [spill.add(LedgerIds(range(t * 100, t * 100 + 7))) for t in range(50)]
    assert [list(ids) for ids in later] == [list(range(t * 100, t * 100 + 7)) for t in range(50)]
    assert list(first) == list(range(10, 30))


def test_a_pass_over_every_set_in_either_order_reads_each_block_once() -> None:
    """The owners' index reads the topics last first: a block read from the asked set
    on was read again for every topic."""
    spill = IdSpill(block_bytes=4_096, flush_bytes=4_096)
    sets = [spill.add(LedgerIds(range(t, 50_000, 500))) for t in range(500)]
    blocks = -(-500 * 100 * 4 // 4_096)
    for order in (sets, sets[::-1]):
        before = spill.reads
        assert [len(list(ids)) for ids in order] == [100] * 500
        assert spill.reads - before <= blocks + 1


def test_the_driver_holds_no_listed_id() -> None:
    """At 100,000 topics of 95 listed ledgers the driver held 38 MiB of their four-byte
    offsets, and an object and a base of each (12 MiB more) for the whole survey."""
    spill = IdSpill(flush_bytes=4_096)  # (what waits to be written: a block at most)
    topics = 10_000
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        listed = [spill.add(LedgerIds(range(t, topics * 95, topics))) for t in range(topics)]
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held / topics < 150, held / topics
    assert list(listed[7]) == list(range(7, topics * 95, topics))


def test_a_classifier_of_spilled_references_cuts_the_parts_as_of_the_sets() -> None:
    topics = 500
    names = [sys.intern(f"t/ns/persistent/topic-{t}") for t in range(topics)]
    sets = {name: LedgerIds(range(t, topics * 95, topics)) for t, name in enumerate(names)}
    spill = IdSpill(block_bytes=4_096)
    spilled = {name: spill.add(ids) for name, ids in sets.items()}
    parts = [[(0, 20_000)], [(20_000, 30_000), (40_000, 47_500)]]
    for want, got in zip(
        Classifier(PulsarReferences(listed=sets)).cuts(parts),
        Classifier(PulsarReferences(listed=spilled)).cuts(parts),
        strict=True,
    ):
        assert list(got.owner_of.items()) == list(want.owner_of.items())
        assert list(got.referenced.items()) == list(want.referenced.items())


def test_without_a_place_to_spill_the_ids_stay_in_memory(tmp_path) -> None:  # type: ignore[no-untyped-def]
    spill = IdSpill(directory=str(tmp_path / "gone"))
    ids = LedgerIds(range(5, 50))
    kept = spill.add(ids)
    assert kept is ids and not spill.spilled
    assert isinstance(IdSpill(directory=str(tmp_path)).add(ids), SpilledIds)


def test_a_spill_refuses_a_set_it_cannot_keep() -> None:
    with pytest.raises(TypeError):
        IdSpill().add(frozenset({1, 2}))  # type: ignore[arg-type]


class _FillingDisk:
    """``os`` as the spill sees it, on a disk that takes ``room`` more bytes: a write
    past it is cut short, and the next one refused (ENOSPC), as Linux does."""

    def __init__(self, room: int) -> None:
        self.room = room

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        if self.room <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        taken = min(self.room, len(data))
        self.room -= taken
        return os.pwrite(fd, bytes(data[:taken]), offset)


@pytest.mark.parametrize("room", [0, 1_000, 6_001])
def test_a_full_disk_keeps_the_rest_of_the_ids_in_memory_each_as_it_was(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, room: int
) -> None:
    """A write the disk cut short was written again whole after the part that went
    out: every set after it read back shifted, listed ids missing and others there (a
    referenced ledger would look unreferenced). And a full disk failed the cycle. What
    does not fit stays in memory, and each set answers as it was."""
    monkeypatch.setattr(id_spill, "os", _FillingDisk(room))
    spill = IdSpill(block_bytes=512, flush_bytes=2_000)
    sets = [LedgerIds(range(t, 40_000, 97)) for t in range(30)]
    spilled = [spill.add(ids) for ids in sets]
    with caplog.at_level(logging.WARNING, logger=id_spill.__name__):
        for order in (spilled, spilled[::-1]):
            assert [list(got) for got in order] == [
                list(ids) for ids in (sets if order is spilled else sets[::-1])
            ]
    assert spill.written <= room
    assert "TMPDIR" in caplog.text and caplog.text.count("WARNING") == 1


class _StuckDisk(_FillingDisk):
    """A file system that takes nothing and says so with 0 (no error)."""

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        return 0


def test_a_disk_that_takes_nothing_without_an_error_is_a_full_one(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A write that returned 0 was tried again for ever: the cycle hung."""
    monkeypatch.setattr(id_spill, "os", _StuckDisk(0))
    spill = IdSpill(block_bytes=512, flush_bytes=100)
    sets = [LedgerIds(range(t, 5_000, 31)) for t in range(5)]
    with caplog.at_level(logging.WARNING, logger=id_spill.__name__):
        spilled = [spill.add(ids) for ids in sets]
    assert [list(got) for got in spilled] == [list(ids) for ids in sets]
    assert spill.written == 0 and "took no more" in caplog.text
