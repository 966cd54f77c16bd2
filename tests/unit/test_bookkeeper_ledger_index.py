"""The classification's compact per-ledger indexes (issue 36): ``LedgerIndex`` answers
as the dict it replaces, ``LedgerIds`` as the frozenset, and a classifier cut to some id
ranges (what a Spark task is sent) judges every ledger in them as the whole one does."""

from __future__ import annotations

import pickle
import random
import sys
import tracemalloc
from array import array
from bisect import bisect_left
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_bookkeeper_classify import scenarios

from ledger_gc.bookkeeper.survey import pack_part, unpack_part
from ledger_gc.rules.bookkeeper import ledger_index
from ledger_gc.rules.bookkeeper.classify import (
    HOLD_NAME_SPELLING,
    BkLedger,
    Classifier,
    PulsarReferences,
    PulsarTags,
)
from ledger_gc.rules.bookkeeper.ledger_index import (
    FoundIds,
    GroupTable,
    LeafIds,
    LedgerIds,
    LedgerIndex,
)

groups = st.lists(
    st.tuples(st.sampled_from("abcdef"), st.lists(st.integers(0, 60), max_size=8)), max_size=8
)


@settings(max_examples=200, deadline=None)
@given(groups=groups, probe=st.lists(st.integers(-2, 64), max_size=20))
def test_an_index_answers_as_the_dict_of_the_first_label_found(
    groups: list[tuple[str, list[int]]], probe: list[int]
) -> None:
    want: dict[int, str] = {}
    for label, ids in groups:
        for lid in ids:
            want.setdefault(lid, label)
    index = LedgerIndex.build(groups)
    assert dict(index.items()) == want
    assert len(index) == len(want)
    assert index.high == max(want, default=None)
    for lid in probe:
        assert (lid in index) == (lid in want)
        assert index.get(lid) == want.get(lid)
    again = pickle.loads(pickle.dumps(index))
    assert dict(again.items()) == want


@settings(max_examples=200, deadline=None)
@given(
    groups=groups,
    spans=st.lists(st.tuples(st.integers(0, 60), st.integers(1, 20)), max_size=4),
)
def test_an_index_cut_to_ranges_keeps_exactly_their_entries(
    groups: list[tuple[str, list[int]]], spans: list[tuple[int, int]]
) -> None:
    index = LedgerIndex.build(groups)
    ranges: list[tuple[int, int]] = []
    for low, width in sorted(spans):  # disjoint, sorted
        low = max(low, ranges[-1][1] if ranges else 0)
        ranges.append((low, low + width))
    part = index.within(ranges)
    want = {lid: label for lid, label in index.items() if any(a <= lid < b for a, b in ranges)}
    assert dict(part.items()) == want


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.integers(0, 99), max_size=30), other=st.frozensets(st.integers(0, 99)))
def test_ledger_ids_behave_as_the_frozenset(ids: list[int], other: frozenset[int]) -> None:
    mine, want = LedgerIds(ids), frozenset(ids)
    assert mine == want and want == mine
    assert len(mine) == len(want) and sorted(mine) == sorted(want)
    assert (mine | other) == (want | other) == (other | mine)
    assert (mine & other) == (want & other)
    assert (mine - other) == (want - other)
    assert (other - mine) == (other - want)
    assert all((lid in mine) == (lid in want) for lid in range(-1, 101))
    assert max(mine, default=None) == max(want, default=None)
    assert pickle.loads(pickle.dumps(mine)) == want
    runs = [sorted(ids[: len(ids) // 2]), sorted(ids[len(ids) // 2 :])]
    assert LedgerIds.merged(runs) == want


@settings(max_examples=300, deadline=None)
@given(
    base=st.sampled_from([0, 7, 2**31, 2**40, 2**63 - 2**33]),
    offsets=st.lists(st.integers(0, 2**33), max_size=12),
    probe=st.lists(st.integers(-3, 2**33 + 3), max_size=12),
    low=st.integers(-3, 2**33 + 3),
)
def test_a_managed_ledgers_ids_in_four_bytes_each_where_they_span_less_than_2_to_32(
    base: int, offsets: list[int], probe: list[int], low: int
) -> None:
    """A managed ledger's listed ids (issue 36: every topic's, in the driver for the
    whole survey, 80 MB at 10M) as its first id and four-byte offsets from it, where
    they fit (a cluster's ids rarely span four billion), else eight bytes an id: the
    same set either way."""
    want = sorted({base + o for o in offsets if base + o < 2**63})
    mine = LedgerIds(want)
    assert list(mine) == want and len(mine) == len(want) and mine == frozenset(want)
    assert list(mine.sorted_array()) == want and mine.sorted_array().typecode == "q"
    for lid in (base + p for p in probe):
        assert (lid in mine) == (lid in frozenset(want))
    start = base + low
    assert list(mine.at_least(start)) == [lid for lid in want if lid >= start]
    assert list(mine.at_least(start, start + 2**32)) == [
        lid for lid in want if start <= lid < start + 2**32
    ]
    assert mine.high == (want[-1] if want else None)
    assert pickle.loads(pickle.dumps(mine)) == mine and mine - {start} == set(want) - {start}
    assert mine.itemsize == (4 if not want or want[-1] - want[0] < 2**32 else 8)


def test_a_part_is_packed_as_it_is_pickled() -> None:
    """The common classifier at 100,000 topics pickled to 16 MB: packed from the whole
    pickle, the driver held it and its packed copy at once, at the peak of its survey.
    Packed as the pickler writes, it holds the packed bytes and a frame. (Here the
    references themselves: the common part now pickles its names packed.)"""
    names = [f"tenant/ns/persistent/topic-{t}" for t in range(40_000)]
    common = PulsarReferences(listed={name: LedgerIds([t]) for t, name in enumerate(names)})

    class Nowhere:
        def write(self, data: bytes) -> int:
            return len(data)

    def peak_of(pack: Callable[[], object]) -> int:
        tracemalloc.start()
        try:
            pack()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    pickler_alone = peak_of(lambda: pickle.dump(common, Nowhere(), pickle.HIGHEST_PROTOCOL))
    packed, pickled = pack_part(common)
    assert pickled > 1_000_000 > 2 * len(packed)
    assert peak_of(lambda: pack_part(common)) < pickler_alone + 2 * len(packed) + 200_000
    assert unpack_part(packed) == common


@settings(max_examples=300, deadline=None)
@given(
    scenario=scenarios(),
    shared=st.booleans(),
    cut=st.integers(0, 30),
    width=st.integers(1, 30),
)
def test_a_classifier_cut_to_a_range_judges_its_ledgers_as_the_whole_one(
    scenario: tuple[PulsarReferences, list[BkLedger]], shared: bool, cut: int, width: int
) -> None:
    """What a Spark task is sent (``Classifier.within``) classifies every ledger of its
    directories exactly as the driver's whole classifier: class, owner, reason, hold."""
    refs, ledgers = scenario
    whole = Classifier(refs, shared=shared)
    # The indexes answer as the dicts they replace (owner_of: the last listing wins).
    assert dict(whole.referenced.items()) == refs.referenced()
    owners = {lid: name for name, ids in refs.listed.items() for lid in ids}
    assert dict(whole.owner_of.items()) == owners
    sent, _ = pack_part(([], whole.within([(cut, cut + width), (cut + width + 5, 200)])))
    _, part = unpack_part(sent)  # as a task gets it
    for bk in ledgers:
        if cut <= bk.ledger_id < cut + width or bk.ledger_id >= cut + width + 5:
            assert part.classify(bk) == whole.classify(bk)
            assert part.gone_topic(bk.tags) == whole.gone_topic(bk.tags)
            assert part.owner_of.get(bk.ledger_id) == whole.owner_of.get(bk.ledger_id)


def test_a_part_is_sent_packed_at_a_fraction_of_its_pickle() -> None:
    """A task's part is mostly sorted ids: packed, the driver's JVM holds a fraction of
    them for every task while the job runs (the size, not the time, is the point)."""
    names = [f"tenant/ns/persistent/topic-{t}" for t in range(1_000)]
    refs = PulsarReferences(
        listed={name: LedgerIds(range(t * 100, t * 100 + 100)) for t, name in enumerate(names)}
    )
    whole = Classifier(refs)
    packed, pickled = pack_part(([], whole.within([(0, 100_000)])))
    assert len(unpack_part(packed)[1].referenced) == 100_000
    assert len(packed) * 4 < pickled


@settings(max_examples=300, deadline=None)
@given(
    scenario=scenarios(),
    shared=st.booleans(),
    cut=st.integers(0, 30),
    width=st.integers(1, 30),
)
def test_a_part_cut_from_the_references_is_the_whole_index_cut(
    scenario: tuple[PulsarReferences, list[BkLedger]], shared: bool, cut: int, width: int
) -> None:
    """The driver of a survey on Spark cuts each task's classifier from the references
    without building the whole cluster's indexes (issue 36: 24 bytes a ledger of the
    cluster in the driver); the part judges and answers exactly as a cut of the whole."""
    refs, ledgers = scenario
    ranges = [(cut, cut + width), (cut + width + 5, 200)]
    fresh = Classifier(refs, shared=shared)
    _, part = unpack_part(pack_part(([], fresh.within(ranges)))[0])
    assert fresh._referenced is None and fresh._owner_of is None  # never built whole
    whole = Classifier(refs, shared=shared)
    assert fresh.high == whole.referenced.high == max(refs.referenced(), default=None)
    cut_whole = whole.within(ranges)
    assert dict(part.referenced.items()) == dict(cut_whole.referenced.items())
    assert dict(part.owner_of.items()) == dict(cut_whole.owner_of.items())
    for bk in ledgers:
        if cut <= bk.ledger_id < cut + width or bk.ledger_id >= cut + width + 5:
            assert part.classify(bk) == whole.classify(bk)
            assert part.gone_topic(bk.tags) == whole.gone_topic(bk.tags)


directories = st.lists(
    st.lists(st.integers(0, 199), max_size=12) | st.lists(st.integers(0, 60), min_size=20),
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(
    runs=directories,
    gone=st.frozensets(st.integers(-5, 205), max_size=8),
    other=st.frozensets(st.integers(-5, 205), max_size=8),
    low=st.integers(-5, 205),
    below=st.none() | st.integers(-5, 205),
    by_directory=st.booleans(),
    leaf_ids=st.booleans(),
)
def test_found_ids_are_the_listing_less_what_was_gone(
    runs: list[list[int]],
    gone: frozenset[int],
    other: frozenset[int],
    low: int,
    below: int | None,
    by_directory: bool,
    leaf_ids: bool,
) -> None:
    """The ids a survey found, kept as the listing's own arrays less the ids gone before
    their read, answer every check as the set of them does (``missing_listed``,
    ``above_counter``, ``_why_not``, the hand-offs): directories of disjoint ranges as a
    layout lists them, or any runs at all."""
    if by_directory:  # each directory its own range of ids, sorted, as a listing's
        listing = [array("q", sorted({d * 200 + i for i in run})) for d, run in enumerate(runs)]
        gone = frozenset(d * 200 + g for d in range(len(runs)) for g in gone)
        if leaf_ids:  # (as the survey keeps a leaf directory's listing)
            listing = [LeafIds.of(run) for run in listing]  # type: ignore[misc]
    else:
        listing = [array("q", run) for run in runs]
    want = frozenset(lid for run in listing for lid in run) - gone
    found = FoundIds(listing, gone)
    assert found == want and want == found
    assert len(found) == len(want) and list(found) == sorted(want)
    assert all((lid in found) == (lid in want) for lid in range(-5, 1300))
    assert "1" not in found
    less = found - other
    assert less == want - other and (other - found) == (other - want)
    assert list(found.at_least(low, below)) == [
        lid for lid in sorted(want) if lid >= low and (below is None or lid < below)
    ]
    assert pickle.loads(pickle.dumps(less)) == want - other
    # The ids of a sorted list (a managed ledger's) these lack, asked at once.
    lists = (sorted(other), sorted(want)[::3], list(range(-3, 1300, 7)), [])
    for asked in lists:
        assert found.lacking(asked) == [lid for lid in asked if lid not in want]
        assert less.lacking(asked) == [lid for lid in asked if lid not in want - other]
    # ...and of many lists at once, a chunk of them a pass (every managed ledger's).
    named = [(n, LedgerIds(asked)) for n, asked in enumerate(lists)]
    assert list(less.lacking_each(named, ids_at_once=2)) == [
        (n, [lid for lid in asked if lid not in want - other]) for n, asked in enumerate(lists)
    ]
    assert FoundIds() == frozenset() and len(FoundIds()) == 0


def test_every_managed_ledgers_listed_ids_are_checked_a_chunk_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The survey checks every listed ledger against the ledgers found (which ones
    BookKeeper lacks). Pulsar's ids come from one counter, so a topic's ledgers lie in
    as many leaf directories as it has ledgers: asked a topic at a time, each
    directory was searched once a topic (7 s at 1M ledgers of 10,000 topics, against
    0.2 s for ids in blocks). Many topics' ids are now asked at once, each directory
    searched once a chunk."""
    topics, per, width = 400, 20, 400  # (20 directories, each with ids of every topic)
    leaves = [
        LeafIds.of(array("q", [lid for lid in range(d * width, (d + 1) * width) if lid % 97]))
        for d in range(topics * per // width)
    ]
    found = FoundIds(leaves)
    listed = [(t, LedgerIds(range(t, topics * per, topics))) for t in range(topics)]
    searches = 0
    has = LeafIds.has

    def counted(leaf: LeafIds, offsets: Any) -> Any:
        nonlocal searches
        searches += 1
        return has(leaf, offsets)

    monkeypatch.setattr(LeafIds, "has", counted)
    got = list(found.lacking_each(listed, ids_at_once=2_000))
    monkeypatch.undo()
    assert got == [(t, [lid for lid in ids if lid % 97 == 0]) for t, ids in listed]
    assert searches <= len(leaves) * (topics * per // 2_000 + 1)  # (not topics * leaves)


def test_an_index_keeps_64_bit_ids_and_the_first_label_of_each() -> None:
    """BookKeeper's ids are longs: the numpy sort keeps every bit, and of an id named
    twice (a managed ledger's and a cursor's) the first label."""
    top = 2**63 - 1
    index = LedgerIndex.build(
        [("ml", [top, 2**40, 7]), ("cursor", [2**40, 3]), ("schema", [top - 1, 7])]
    )
    assert list(index.items()) == [
        (3, "cursor"),
        (7, "ml"),
        (2**40, "ml"),
        (top - 1, "schema"),
        (top, "ml"),
    ]
    assert LedgerIndex.build([]).high is None


@settings(max_examples=300, deadline=None)
@given(
    groups=st.lists(
        st.tuples(
            st.sampled_from("abcdef"),
            st.one_of(
                st.lists(st.integers(0, 300), max_size=8).map(LedgerIds),
                st.frozensets(st.integers(0, 300), max_size=5),
                st.tuples(st.integers(0, 300)),
            ),
        ),
        max_size=10,
    ),
    bounds=st.lists(st.integers(0, 310), min_size=2, max_size=9, unique=True),
    parts=st.integers(1, 4),
    at_once=st.integers(1, 40),
)
def test_a_group_table_indexes_each_part_as_the_whole_index_cut(
    groups: list[tuple[str, Any]], bounds: list[int], parts: int, at_once: int
) -> None:
    """Every part's index, made from the references in passes over the groups (a few
    parts' ids at a time, ``at_once``), is the whole index cut to the part's spans:
    the same ids, and for an id of several groups the first group's label."""
    pieces = list(pairwise(sorted(bounds)))[::2]  # (disjoint, sorted; some left out)
    mine = [pieces[p::parts] for p in range(parts)]  # (a part's spans interleaved)
    table = GroupTable.labelled(groups)
    whole = LedgerIndex.build(groups)
    got = list(table.indexes(mine, ids_at_once=at_once))
    assert len(got) == len(mine)
    for index, spans in zip(got, mine, strict=True):
        assert list(index.items()) == list(whole.within(spans).items())
        assert pickle.loads(pickle.dumps(index)).get(index.high or 0) == index.get(index.high or 0)


def test_interleaved_ids_are_read_once_a_pass_not_once_a_part(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pulsar hands out ledger ids from one counter, so a topic's ledgers lie among
    every other topic's and each of its records reaches into every task's part. Cut a
    group a part at a time, the driver widened and cut every record once a part: at
    100,000 topics and 40 parts, 27 s. A group's ids are now read once a pass, a pass
    making the indexes of the parts its ``ids_at_once`` holds."""
    topics, per, parts = 200, 20, 20
    listed = {
        f"t/ns/persistent/t-{t}": LedgerIds(range(t, topics * per, topics)) for t in range(topics)
    }
    table = GroupTable.labelled(listed.items())
    width = topics * per // parts
    spans = [[(p * width, (p + 1) * width)] for p in range(parts)]
    reads = 0
    for name in ("sorted_array", "numpy", "offsets"):
        method = getattr(LedgerIds, name)

        def read(ids: LedgerIds, method: Callable[[LedgerIds], Any] = method) -> Any:
            nonlocal reads
            reads += 1
            return method(ids)

        monkeypatch.setattr(LedgerIds, name, read)
    got = [list(index.items()) for index in table.indexes(spans, ids_at_once=4 * width)]
    monkeypatch.undo()
    whole = LedgerIndex.build(listed.items())
    assert got == [list(whole.within(s).items()) for s in spans]
    assert reads <= topics * (1 + parts // 4)  # (which parts each reaches, then five passes)


@settings(max_examples=300, deadline=None)
@given(
    groups=st.lists(
        st.tuples(
            st.integers(0, 2),
            st.sampled_from("abcdef"),
            st.lists(st.integers(0, 300), max_size=6),
        ),
        max_size=10,
    ),
    bounds=st.lists(st.integers(0, 310), min_size=2, max_size=9, unique=True),
    parts=st.integers(1, 4),
    at_once=st.integers(1, 40),
)
def test_a_parts_owners_come_from_the_same_pick_as_its_index(
    groups: list[tuple[int, str, list[int]]], bounds: list[int], parts: int, at_once: int
) -> None:
    """The survey's driver cuts two indexes a part, the references' (each id's first
    record) and the listed ids' owners (each id's last managed ledger listing it): made
    from one table, each topic's ids are read once a pass for both, not once for each
    (two passes over every topic, and two parts' picks held for each, at the cut's
    peak). The owners are what ``LedgerIndex.build`` of the owner kind's groups, the
    last first, cut to the part, has."""
    pieces = list(pairwise(sorted(bounds)))[::2]
    mine = [pieces[p::parts] for p in range(parts)]
    table = GroupTable(groups, ("{}", "x {}", "y {}"))
    whole = LedgerIndex.build((table.label(at), table.ids(at)) for at in range(len(table)))
    owners = [(key, ids) for kind, key, ids in reversed(groups) if kind == 0]
    whole_owners = LedgerIndex.build(owners)
    got = list(table.index_pairs(mine, owner_kind=0, ids_at_once=at_once))
    assert len(got) == len(mine)
    for (index, owned), spans in zip(got, mine, strict=True):
        assert list(index.items()) == list(whole.within(spans).items())
        assert list(owned.items()) == list(whole_owners.within(spans).items())


def test_the_cut_reads_each_topics_ids_once_a_pass_for_both_indexes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``Classifier.cuts`` reads the references once a pass for a part's index and its
    owners: each topic's ids come from the driver's spill file, 0.44 us a topic a read,
    and at 10M ledgers a pass reads 100,000 topics."""
    topics, per, parts = 200, 20, 8
    refs = PulsarReferences(
        listed={
            f"t/ns/persistent/t-{t}": LedgerIds(range(t, topics * per, topics))
            for t in range(topics)
        }
    )
    width = topics * per // parts
    spans = [[(p * width, (p + 1) * width)] for p in range(parts)]
    reads = 0
    method = LedgerIds.offsets

    def read(ids: LedgerIds) -> Any:
        nonlocal reads
        reads += 1
        return method(ids)

    monkeypatch.setattr(LedgerIds, "offsets", read)
    monkeypatch.setattr(ledger_index, "IDS_AT_ONCE", 2 * width)
    cuts = list(Classifier(refs).cuts(spans))
    monkeypatch.undo()
    assert reads == topics * (1 + parts // 2)  # (which parts each reaches, then 4 passes)
    whole = Classifier(refs)
    for cut, mine in zip(cuts, spans, strict=True):
        assert list(cut.referenced.items()) == list(whole.referenced.within(mine).items())
        assert list(cut.owner_of.items()) == list(whole.owner_of.within(mine).items())


def test_the_cuts_peak_is_the_parts_picks_and_its_two_indexes() -> None:
    """The driver of a survey on Spark peaked making a part's indexes: each table's
    pick of two parts, then a sort's order and sorted copies of each and every index
    made twice, 94 bytes an id of a part. Now: one pick (12 bytes an id of each part
    the pass holds), the id and its group sorted as one number in place, and each
    index (12 bytes an id, two a part) written once."""
    topics = 2_000
    names = [sys.intern(f"t/ns/persistent/topic-{t:05d}") for t in range(topics)]
    refs = PulsarReferences(
        listed={name: LedgerIds(range(t, topics * 100, topics)) for t, name in enumerate(names)}
    )
    classifier = Classifier(refs)
    list(Classifier(refs).cuts([[(0, 1)]]))  # (numpy imported before the count)
    spans = [[(0, topics * 50)], [(topics * 50, topics * 100)]]  # (one pass: both parts)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cuts = classifier.cuts(spans)
        first = next(cuts)
        del first
        second = next(cuts)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert len(second.referenced) == len(second.owner_of) == topics * 50
    assert peak / (topics * 50) < 80, peak / (topics * 50)


def test_a_part_cut_at_the_highest_ledger_id() -> None:
    """BookKeeper accepts ledger id 2**63 - 1 (``ledger_paths.MAX_LEDGER_ID``); a Spark
    task whose directory holds it has a span ending at 2**63, beyond a signed 64-bit
    array. Its part is cut from the references as any other, not a failed cycle."""
    top = 2**63 - 1
    refs = PulsarReferences(listed={"t/ns/persistent/a": LedgerIds([7, top])})
    part = Classifier(refs).within([(top, top + 1)])
    assert part.referenced.get(top) == "listed by t/ns/persistent/a"
    assert part.referenced.get(7) is None
    table = refs.reference_table()
    (index,) = table.indexes([[(8, 2**63)]])
    assert list(index.items()) == [(top, "listed by t/ns/persistent/a")]


@settings(max_examples=300, deadline=None)
@given(
    scenario=scenarios(),
    edges=st.lists(st.integers(1, 30), min_size=1, max_size=6, unique=True),
    interleave=st.booleans(),
)
def test_every_part_cut_at_once_is_the_whole_index_cut(
    scenario: tuple[PulsarReferences, list[BkLedger]], edges: list[int], interleave: bool
) -> None:
    """A survey's driver cuts all its tasks' classifiers in one pass over the references
    (``Classifier.parts``: which parts each record's ledgers fall in, asked once); each
    part is exactly the whole index cut to its ranges, whatever the records span (a
    managed ledger whose new ledger is far above the rest reaches into every part)."""
    refs, _ = scenario
    bounds = [0, *sorted(edges), 201]
    pieces = list(pairwise(bounds))
    if interleave:  # (a part of several ranges, the parts' ranges interleaved)
        parts = [pieces[0::2], pieces[1::2]] if len(pieces) > 1 else [pieces]
    else:
        parts = [[piece] for piece in pieces]
    fresh = Classifier(refs)
    cut = list(fresh.parts(parts))
    assert fresh._referenced is None and fresh._owner_of is None  # never built whole
    whole = Classifier(refs)
    for mine, ranges in zip(cut, parts, strict=True):
        want = whole.within(ranges)
        assert dict(mine.referenced.items()) == dict(want.referenced.items())
        assert dict(mine.owner_of.items()) == dict(want.owner_of.items())
        assert mine.handed_off == want.handed_off


@settings(max_examples=300, deadline=None)
@given(
    base=st.sampled_from([0, 10_000, 2**63 - 10_000]),
    width=st.sampled_from([1, 8, 9, 300, 10_000]),
    density=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32 - 1),
    probe=st.lists(st.integers(-3, 10_003), max_size=10),
)
def test_a_dense_leafs_ids_in_a_bit_each(
    base: int, width: int, density: float, seed: int, probe: list[int]
) -> None:
    """A leaf directory of a live cluster holds most of its 10,000 ids (ledger ids are
    handed out in order, and a trim takes a few of each leaf's): its listing as a bit an
    id of its span where that is smaller than two bytes an id (1,250 bytes for a full
    leaf, not 20,000: 20 MB at 10M), read as the array of the same ids either way."""
    rng = random.Random(seed)
    offsets = sorted({0, *(o for o in range(width) if rng.random() < density)})
    want = array("q", [base + o for o in offsets])
    got = LeafIds.of(want)
    assert isinstance(got, LeafIds)
    assert got.nbytes <= min(2 * len(want), width // 8 + 1) + 8
    assert len(got) == len(want) and list(got) == list(want) and got == want
    assert got.tolist() == list(want) and list(got.numpy()[1]) == offsets
    for at in (0, -1, len(want) // 2, -len(want)):
        assert got[at] == want[at]
    assert list(got[1:-1]) == list(want[1:-1]) and list(got[::3]) == list(want[::3])
    for lid in (base + p for p in [*probe, *offsets[:5], width - 1]):
        assert (lid in got) == (lid in want)
        assert got.position(lid) == (bisect_left(want, lid) if lid in want else None)
        assert bisect_left(got, lid) == bisect_left(want, lid)
    assert list(pickle.loads(pickle.dumps(got))) == list(want)
    found = FoundIds([got])
    asked = sorted({base + p for p in probe if 0 <= p < 10_000} | set(want[::2]))
    assert found.lacking(asked) == [lid for lid in asked if lid not in want]


@settings(max_examples=300, deadline=None)
@given(
    base=st.sampled_from([0, 10_000, 2**31 - 1, 2**63 - 10_000]),
    offsets=st.lists(st.integers(0, 9_999), max_size=40),
    probe=st.lists(st.integers(-3, 10_003), max_size=10),
)
def test_a_leafs_ids_are_the_array_of_them_in_two_bytes_each(
    base: int, offsets: list[int], probe: list[int]
) -> None:
    """A leaf directory's listing (at most 10,000 consecutive ids) kept as a base and
    each id's two-byte offset (issue 36: the survey keeps every leaf's listing in the
    driver, 80 MB at 10M as eight-byte ids): read as the array of the same ids."""
    want = array("q", sorted({base + o for o in offsets}))
    got = LeafIds.of(want)
    assert len(got) == len(want) and list(got) == list(want) and got == want
    for at in range(-len(want), len(want)):
        assert got[at] == want[at]
    assert list(got[1:-1]) == list(want[1:-1]) and list(got[::2]) == list(want[::2])
    for lid in (base + p for p in probe):
        assert (lid in got) == (lid in want)
        assert bisect_left(got, lid) == bisect_left(want, lid)
    back = pickle.loads(pickle.dumps(got))
    assert list(back) == list(want)
    assert isinstance(got, LeafIds) and got.itemsize == 2
    wide = array("q", [5, 5 + 70_000])  # (not one leaf's: kept as it is)
    assert LeafIds.of(wide) is wide


def test_a_tasks_cut_grows_with_its_ledgers_not_with_the_topics() -> None:
    """Each Spark task was sent the whole classifier of its part, with every topic's
    name, highest id and cursor (16 MB pickled at 100,000 topics, forty tasks each): now
    that common part goes once (``common``, a broadcast) and a task's own cut carries
    its ledgers only, whatever the number of topics."""

    def cut_and_common(topics: int) -> tuple[int, int]:
        listed = {
            f"t/ns/persistent/topic-{t}": LedgerIds(range(1_000 + t * 10, 1_000 + t * 10 + 9))
            for t in range(topics)
        }
        listed["t/ns/persistent/mine"] = LedgerIds(range(0, 500))
        refs = PulsarReferences(
            listed=listed,
            cursors={(name, "sub"): -1 for name in listed},
            namespaces=frozenset(["t/ns"]),
        )
        classifier = Classifier(refs)
        (cut,) = classifier.cuts([[(0, 1_000)]])
        assert len(cut.referenced) == len(cut.owner_of) == 500
        return pack_part(cut)[1], pack_part(classifier.common())[1]

    few_cut, few_common = cut_and_common(200)
    many_cut, many_common = cut_and_common(20_000)
    assert many_cut == few_cut
    assert many_common > 50 * few_common


def test_the_common_part_holds_the_topics_once() -> None:
    """The common classifier kept a copy of the cursors and every topic's key (its
    name split and decoded, for the rare ledger of a topic this metadata lacks): at
    100,000 topics 20 MB in the driver and in every executor. The cursors are the
    references' own, and the keys are made where a task first needs them."""
    listed = {f"t/ns/persistent/topic-{t}": LedgerIds([2 * t]) for t in range(2_000)}
    refs = PulsarReferences(
        listed=listed,
        cursors={(name, "sub"): -1 for name in listed},
        namespaces=frozenset(["t/ns"]),
    )
    common = Classifier(refs).common()
    alone = pickle.dumps((common.refs, common.ml_high), pickle.HIGHEST_PROTOCOL)
    assert pack_part(common)[1] < 1.05 * len(alone)
    tags = {
        "application": b"pulsar",
        "component": b"managed-ledger",
        "pulsar/managed-ledger": b"t/ns/persistent/topic%2D7",
    }
    gone = BkLedger(5, 0, 1, state="CLOSED", length=10, tags=PulsarTags.of(tags))
    assert common.classify(gone).hold == HOLD_NAME_SPELLING  # (a key made when asked)


def test_a_group_table_holds_no_object_of_its_own_a_group() -> None:
    """Cutting the references to the tasks made a label (``listed by <name>``), a
    tuple and, for a cursor's one ledger, an array for every record, all at once: at
    100,000 topics, 30 MB at the driver's peak. The table keeps each group's kind, its
    key and its ids as the references hold them, and makes a label only for a group
    some part has."""
    names = [f"t/ns/persistent/topic-{t}" for t in range(5_000)]
    refs = PulsarReferences(
        listed={name: LedgerIds(range(t * 10, t * 10 + 9)) for t, name in enumerate(names)},
        cursors={(name, "sub"): t * 10 + 9 for t, name in enumerate(names)},
    )
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        table = refs.reference_table()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 40 * 2 * len(names)
    spans = [(20, 35), (49_985, 49_995)]
    (index,) = table.indexes([spans])
    got: dict[str, list[int]] = {}
    for lid, label in index.items():
        got.setdefault(label, []).append(lid)
    assert got == {
        "listed by t/ns/persistent/topic-2": [20, 21, 22, 23, 24, 25, 26, 27, 28],
        "ledger of cursor sub of t/ns/persistent/topic-2": [29],
        "listed by t/ns/persistent/topic-3": [30, 31, 32, 33, 34],
        "listed by t/ns/persistent/topic-4998": [49_985, 49_986, 49_987, 49_988],
        "ledger of cursor sub of t/ns/persistent/topic-4998": [49_989],
        "listed by t/ns/persistent/topic-4999": [49_990, 49_991, 49_992, 49_993, 49_994],
    }


def test_the_drivers_classifier_holds_nothing_a_topic() -> None:
    """The classifier kept each topic's highest id in a dict of its own (8 MB at
    100,000 topics in the driver for the whole survey), where the references answer it:
    only the common part sent to the executors, whose references have no ids, has one."""
    listed = {
        f"t/ns/persistent/topic-{t}": LedgerIds(range(t * 10, t * 10 + 9)) for t in range(5_000)
    }
    refs = PulsarReferences(listed=listed, marked={"t/ns/persistent/topic-3": frozenset({99})})
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        classifier = Classifier(refs)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 10 * len(listed)
    want = {name: refs.ml_high(name) for name in listed}
    assert dict(classifier.ml_high) == want and dict(classifier.common().ml_high) == want
    assert classifier.ml_high.get("t/ns/persistent/topic-3") == 99
    assert classifier.ml_high.get("t/ns/persistent/none") is None


def test_the_common_part_is_packed_without_a_dict_or_a_memo_entry_a_topic() -> None:
    """The common classifier copied each topic's highest id and name into dicts of its
    own, and the pickler's memo then held every name and cursor key: at 100,000 topics
    23 MiB in the driver for a broadcast it only sends. It reads the references' own,
    and is pickled as a string of names and an array of ids."""
    topics = 40_000
    sub = "sub"
    listed = {
        sys.intern(f"t/ns/persistent/topic-{t:06d}"): LedgerIds(range(t * 100, t * 100 + 95))
        for t in range(topics)
    }
    listed["t/ns/persistent/empty"] = LedgerIds()
    cursors = {(name, sub): -1 for name in listed}
    cursors["t/ns/persistent/topic-000007", "old"] = 12
    refs = PulsarReferences(listed=listed, cursors=cursors, namespaces=frozenset(["t/ns"]))
    classifier = Classifier(refs)
    tracemalloc.start()
    try:
        packed, _ = pack_part(classifier.common())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak / topics < 150, peak / topics
    back = unpack_part(packed)
    assert dict(back.ml_high) == {name: refs.ml_high(name) for name in listed}
    assert back.ml_high["t/ns/persistent/empty"] is None
    assert dict(back.cursor_ids) == cursors and back.refs.cursors is back.cursor_ids
    assert list(back.refs.listed) == list(listed)
    assert all(not ids for ids in back.refs.listed.values())
    assert back.ml_high == classifier.common().ml_high


def test_a_managed_ledgers_ids_cost_little_beside_their_four_bytes_each() -> None:
    """The driver holds every topic's listed ids for the whole survey: as an object and
    an array of offsets, 130 bytes a topic beside the ids (13 MB at 100,000 topics).
    The offsets are one bytes object."""
    tracemalloc.start()
    try:
        sets = [LedgerIds(range(t * 1_000, t * 1_000 + 99)) for t in range(10_000)]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    beside = (held - 8 * len(sets)) / len(sets) - 99 * 4
    assert beside < 120, beside
    ids = sets[7]
    assert list(ids) == list(range(7_000, 7_099)) and ids.high == 7_098 and len(ids) == 99
    assert 7_050 in ids and 7_099 not in ids and ids.itemsize == 4
    assert pickle.loads(pickle.dumps(ids)) == ids and ids.sorted_array()[0] == 7_000


def test_an_index_is_packed_without_a_copy_of_its_arrays() -> None:
    """A Spark task's cut is two indexes of its 250,000 ledgers; pickled, each array
    was first copied whole into a bytes (6 MB a part in the driver as it packed it).
    From protocol 5 the pickler is handed the arrays themselves."""
    index = LedgerIndex.build(
        (f"listed by t/ns/persistent/topic-{t}", range(t * 1_000, t * 1_000 + 990))
        for t in range(500)
    )
    raw = 12 * len(index)

    tracemalloc.start()
    try:
        packed, _ = pack_part(index)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < raw / 2, (peak, raw)
    for back in (unpack_part(packed), pickle.loads(pickle.dumps(index, 4))):
        assert list(back.items()) == list(index.items())


def test_a_part_that_reaches_every_topic_makes_no_label_a_topic() -> None:
    """Pulsar hands out ledger ids from one counter, so every Spark task's part holds a
    ledger of every topic: each part's index of the references made ``listed by
    <name>`` for each (8.5 MB a part at 100,000 topics, in the driver as it cut and
    packed the parts, and again in every task), and copied its list of labels. A
    part's labels are made when asked: a kind and a key (the references' own) a
    group."""
    topics = 5_000
    names = [sys.intern(f"t/ns/persistent/topic-{t:05d}") for t in range(topics)]
    refs = PulsarReferences(
        listed={name: LedgerIds(range(t, topics * 95, topics)) for t, name in enumerate(names)},
        cursors={(name, "sub"): topics * 95 + t for t, name in enumerate(names)},
    )
    classifier = Classifier(refs)
    spans = [[(0, topics)], [(topics * 95, topics * 96)]]  # (a ledger of each topic, a cursor's)
    list(Classifier(refs).cuts([[(0, 1)]]))  # (numpy imported before the count)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cuts = list(classifier.cuts(spans))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # (each ledger's id and code in two indexes: 24 bytes; a label's kind and key: 9)
    assert held / (2 * topics) < 48, held / (2 * topics)
    whole = Classifier(refs)
    for cut, mine in zip(cuts, spans, strict=True):
        for index, full in ((cut.referenced, whole.referenced), (cut.owner_of, whole.owner_of)):
            want = list(full.within(mine).items())
            assert list(index.items()) == want
            assert list(unpack_part(pack_part(index)[0]).items()) == want
            assert list(pickle.loads(pickle.dumps(index, 4)).items()) == want
    assert cuts[0].referenced[7] == "listed by t/ns/persistent/topic-00007"
    cursor_label = cuts[1].referenced[topics * 95 + 7]
    assert cursor_label == "ledger of cursor sub of t/ns/persistent/topic-00007"
    assert cuts[1].referenced[topics * 95 + 7] is cursor_label  # (made once)
    assert cuts[0].owner_of[7] is names[7]


def test_parts_whose_spans_overlap_are_refused() -> None:
    """An id in two parts' spans was placed in one of them only: the other part's
    index lacked it, and there its ledger looked unreferenced. The survey's parts are
    whole leaf directories, which never overlap; nothing held it to that."""
    table = GroupTable.labelled([("a", range(0, 100))])
    with pytest.raises(ValueError, match="overlap"):
        list(table.indexes([[(0, 100)], [(50, 60)]]))
    with pytest.raises(ValueError, match="overlap"):
        list(table.indexes([[(0, 10), (40, 60)], [(59, 70)]]))
    (same,) = table.indexes([[(0, 60), (50, 100)]])  # (one part's own: no harm)
    assert list(same) == list(range(100))
    touching = [list(index) for index in table.indexes([[(0, 50)], [(50, 100)]])]
    assert touching == [list(range(50)), list(range(50, 100))]
