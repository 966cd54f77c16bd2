"""Orphans newer than everything the metadata knows are held (issue 11, item 1), and the
ledger-id counter's reading from a znode stat (pure)."""

from __future__ import annotations

import pytest

from ledger_gc.metadata.id_counter import next_sequence
from ledger_gc.rules.orphans import guards
from ledger_gc.rules.orphans.classify import ORPHAN_LEDGER, ORPHAN_PARTITION, Candidate
from ledger_gc.rules.orphans.classify import ManagedLedgerRefs as Refs
from ledger_gc.rules.orphans.horizon import MetadataHorizon, proof_of_staleness, split_held

ML = "t/n/persistent/a"
GONE = "t/n/persistent/gone"


def _ledger(ledger_id: int) -> Candidate:
    return Candidate(ORPHAN_LEDGER, ML, ledger_id, 1, 10, 5, 5)


def _partition(top: int) -> Candidate:
    return Candidate(ORPHAN_PARTITION, GONE, None, 1, 10, 5, 5, max_ledger_id=top)


# (candidate, id counter, listed by ML, store high) -> held?
CASES = [
    (_ledger(5), 20, {3, 9}, 19, False),  # a legacy leak below the current ledger
    (_ledger(12), 20, {3, 9}, 19, False),  # above the list, but allocated by this counter
    (_ledger(25), 20, {3, 9}, 19, True),  # above the list and the counter: stale metadata
    (_ledger(25), 20, {3, 30}, 30, False),  # the list knows newer: ids from elsewhere
    (_ledger(12), None, {3, 9}, 9, True),  # no counter: above the list is held
    (_ledger(5), None, {3, 9}, 9, False),
    (_ledger(5), None, set(), 9, True),  # an empty list knows nothing newer
    (_partition(7), 20, set(), 19, False),
    (_partition(21), 20, set(), 19, True),
    (_partition(7), None, set(), 9, False),
    (_partition(12), None, set(), 9, True),
]


@pytest.mark.parametrize(("candidate", "counter", "listed", "high", "held"), CASES)
def test_what_is_held(
    candidate: Candidate, counter: int | None, listed: set[int], high: int, held: bool
) -> None:
    horizon = MetadataHorizon.of(counter, high, {ML: Refs(frozenset(listed))})
    reason = horizon.newer_than_metadata(candidate)
    assert (reason is not None) is held
    if reason:
        assert str(candidate.max_ledger_id) in reason and "/ledgers/idgen" in reason


def test_marked_ledgers_count_as_known() -> None:
    horizon = MetadataHorizon.of(None, 9, {ML: Refs(frozenset({3}), frozenset({9}))})
    assert horizon.newer_than_metadata(_ledger(7)) is None


def test_only_targets_above_the_counter_prove_the_metadata_stale() -> None:
    horizon = MetadataHorizon.of(20, 19, {ML: Refs(frozenset({3, 9}))})
    found = {"a": _ledger(5), "b": _ledger(25), "c": _partition(21)}
    usable, held = split_held(found, horizon)
    assert set(usable) == {"a"} and [h.prefix for h in held] == ["b", "c"]
    refusal = guards.stale_metadata(proof_of_staleness(held), "zk:2181/old", force=False)
    assert refusal is not None and refusal.guard == guards.STALE_METADATA
    assert "LEDGERGC_ZK_HOSTS=zk:2181/old" in refusal.reason and "25" in refusal.reason

    no_counter = MetadataHorizon.of(None, 9, {ML: Refs(frozenset({3, 9}))})
    _, held = split_held({"b": _ledger(25)}, no_counter)
    assert held and proof_of_staleness(held) == []  # held, but a race looks the same


def test_the_next_id_from_a_parent_stat() -> None:
    # Four ids drawn (create, delete): cversion 8, no child left.
    assert next_sequence(8, 0, deletes_advance=False) == 4
    assert next_sequence(8, 0, deletes_advance=True) == 8
    assert next_sequence(9, 1, deletes_advance=False) == 5  # one child not deleted yet
