"""The BookKeeper survey's candidates are kept as columns (issue 36): at 10M ledgers the
500,000 candidates collected from the executors were 193 MiB of objects in the driver
(a ``BkCandidate``, its znode path and its ints each), for rows that differ only in a few
numbers. The table holds the same candidates, gives them back as ``BkCandidate``s, one
at a time, and answers the survey's questions (holds, counts, topics) without them."""

from __future__ import annotations

import pickle
import random
import sys
import tracemalloc

from ledger_gc.bookkeeper.candidate_table import BkCandidate, CandidateTable, make_candidate
from ledger_gc.rules.bookkeeper import classify, ledger_paths
from ledger_gc.rules.bookkeeper.classify import BkLedger, PulsarTags, Verdict

ROOT = "/ledgers"
LAYOUT = ledger_paths.HIERARCHICAL
CLASSES = sorted(classify.BK_ORPHAN_CLASSES)


def _row(rng: random.Random, lid: int) -> tuple[BkLedger, Verdict]:
    cls = rng.choice(CLASSES)
    owner = f"t/ns/persistent/topic-{rng.randrange(7)}"
    if cls == classify.BK_ORPHAN_SCHEMA_LEDGER:
        owner = f"t/ns/topic-{rng.randrange(7)}"
    tags = PulsarTags(classify.PULSAR, classify.MANAGED_LEDGER_COMPONENT, owner)
    size = rng.choice([0, 1, 4096, 2**40])
    ledger = BkLedger(lid, 0, 1_700_000_000_000 + rng.randrange(10**9), "CLOSED", size, 3, tags)
    return ledger, Verdict(cls, owner, "why")


def _rows(seed: int, count: int) -> list[tuple[BkLedger, Verdict]]:
    rng = random.Random(seed)
    ids = sorted(rng.sample(range(2**63 - 1000, 2**63), 5)) if seed % 3 == 0 else []
    ids += [rng.randrange(10**12) for _ in range(count)]
    return [_row(rng, lid) for lid in ids]


def _candidate(ledger: BkLedger, verdict: Verdict) -> BkCandidate:
    return make_candidate(
        ROOT,
        LAYOUT,
        ledger.ledger_id,
        verdict.ledger_class,
        verdict.owner,
        ledger.bytes,
        ledger.ctime_ms,
    )


def _table(rows: list[tuple[BkLedger, Verdict]]) -> CandidateTable:
    table = CandidateTable(ROOT, LAYOUT)
    for ledger, verdict in rows:
        table.add(ledger, verdict)
    return table


def test_a_table_gives_back_the_candidates_it_was_given_merged_in_order() -> None:
    for seed in range(12):
        parts = [_rows(seed * 10 + k, 40) for k in range(3)]
        want = [_candidate(*row) for part in parts for row in part]
        merged = CandidateTable(ROOT, LAYOUT)
        for part in parts:  # each as an executor's task returns it
            merged.extend(pickle.loads(pickle.dumps(_table(part))))
        assert len(merged) == len(want)
        assert list(merged) == want
        assert all(type(c) is type(want[0]) for c in merged)
        for cls in CLASSES:
            assert merged.count(cls) == sum(1 for c in want if c.target_class == cls)
            assert merged.ids_of(cls) == [c.ledger_id for c in want if c.target_class == cls]
        topics = {classify.topic_of(c.target_class, c.ml_name) for c in want}
        asked = {*sorted(topics)[::2], "t/ns/persistent/none"}
        assert merged.topics_among(asked) == topics & asked
        assert merged.ids_of_topics(asked) == [
            c.ledger_id for c in want if classify.topic_of(c.target_class, c.ml_name) in asked
        ]


def test_removing_ledgers_keeps_the_rest_in_order_and_returns_the_removed() -> None:
    for seed in range(12):
        rows = _rows(seed, 60)
        table = _table(rows)
        want = list(table)
        rng = random.Random(seed)
        gone = {c.ledger_id for c in rng.sample(want, rng.randrange(len(want)))}
        gone.add(-5)  # (an id that is no candidate: nothing)
        removed = table.remove(gone)
        assert removed == [c for c in want if c.ledger_id in gone]
        assert list(table) == [c for c in want if c.ledger_id not in gone]
        table.add(*rows[0])  # (still usable)
        assert len(table) == len(want) - len(removed) + 1


def test_the_table_knows_its_candidates_by_target_prefix() -> None:
    rows = _rows(3, 50)
    table = _table(rows)
    prefixes = [c.prefix("") for c in table]
    stranger = classify.target_of(ledger_paths.ledger_path(ROOT, 12345, LAYOUT))
    other_root = classify.target_of(
        ledger_paths.ledger_path("/other", rows[0][0].ledger_id, LAYOUT)
    )
    asked = [*prefixes, stranger, other_root, "s3:whatever", classify.target_of(ROOT + "/junk")]
    assert table.not_candidates(asked) == [stranger, other_root, "s3:whatever", asked[-1]]


def test_a_candidate_costs_the_table_tens_of_bytes_not_an_objects_hundreds() -> None:
    rows = _rows(4, 20_000)
    tracemalloc.start()
    try:
        table = _table(rows)
        held, _ = tracemalloc.get_traced_memory()
        back = pickle.loads(pickle.dumps(table))
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held / len(rows) < 64, held / len(rows)
    assert (after - held) / len(rows) < 64, (after - held) / len(rows)
    assert len(back) == len(rows)


def test_the_merged_table_keeps_no_map_of_its_owners() -> None:
    # At 10M ledgers the driver merged 500,000 candidates of 100,000 topics: a dict of
    # owner -> number (and the numbers as ints) was 80 bytes an owner, more than the
    # candidate's own columns. The owners are the references' own (interned) names.
    owners = [sys.intern(f"t/ns/persistent/topic-{k}") for k in range(20_000)]
    ledger = BkLedger(1, 0, 1_700_000_000_000, "CLOSED", 4096, 3)
    parts = []
    for at in range(0, len(owners), 5_000):
        part = CandidateTable(ROOT, LAYOUT)
        for k, owner in enumerate(owners[at : at + 5_000], start=at):
            part.add(ledger._replace(ledger_id=k), Verdict(CLASSES[0], owner, "why"))
        parts.append(pickle.dumps(part))
    tracemalloc.start()
    try:
        merged = CandidateTable(ROOT, LAYOUT)
        for raw in parts:  # (as the executors' tasks' results come back)
            merged.extend(pickle.loads(raw))
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held / len(owners) < 48, held / len(owners)
    assert [c.ml_name for c in merged] == owners
    assert all(c.ml_name is owner for c, owner in zip(merged, owners, strict=True))


def test_which_topics_the_candidates_hold_is_asked_of_the_few_topics_asked() -> None:
    # At 10M the survey asked which gone topics have candidates through a set of every
    # candidate's (class, owner): 100,000 pairs, 12 MiB at the top of the driver's peak.
    owners = [sys.intern(f"t/ns/persistent/topic-{k}") for k in range(20_000)]
    ledger = BkLedger(1, 0, 1_700_000_000_000, "CLOSED", 4096, 3)
    table = CandidateTable(ROOT, LAYOUT)
    for k, owner in enumerate(owners):
        table.add(ledger._replace(ledger_id=k), Verdict(CLASSES[k % len(CLASSES)], owner, "why"))
    asked = {owners[5], owners[7], "t/ns/persistent/none"}
    tracemalloc.start()
    try:
        found = table.topics_among(asked)
        ids = table.ids_of_topics(asked)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100_000, peak
    topics = [classify.topic_of(CLASSES[k % len(CLASSES)], o) for k, o in enumerate(owners)]
    assert ids == [k for k, topic in enumerate(topics) if topic in asked]
    assert found == set(topics) & asked and found
