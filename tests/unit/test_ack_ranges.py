from hypothesis import given
from hypothesis import strategies as st

from ledger_gc.rules.ledger.ack_ranges import AckRanges
from ledger_gc.rules.positions import LedgerStat, Position, next_position

LEDGERS = [LedgerStat(1, 4, 0, 0), LedgerStat(2, 0, 0, 0), LedgerStat(3, 5, 0, 0)]
ALL = [Position(1, e) for e in range(4)] + [Position(3, e) for e in range(5)]


def test_touching_acks_merge_into_one_range():
    acks = AckRanges()
    for entry in (3, 1, 2):
        acks.add(Position(3, entry))
    assert list(acks.ranges()) == [(Position(3, 0), Position(3, 3))]  # (3:0, 3:3]


def test_fold_moves_mark_delete_across_an_empty_ledger():
    acks = AckRanges()
    acks.add(Position(1, 3))
    acks.add(Position(3, 0))
    acks.add(Position(3, 2))
    mark_delete = acks.fold(Position(1, 2), LEDGERS)
    assert mark_delete == Position(3, 0)
    assert list(acks.ranges()) == [(Position(3, 1), Position(3, 2))]


def test_ranges_spanning_ledgers_are_split_on_load():
    acks = AckRanges.from_ranges([(Position(1, 1), Position(3, 1))], LEDGERS)
    assert acks.contains(Position(1, 2)) and acks.contains(Position(3, 1))
    assert not acks.contains(Position(1, 1)) and not acks.contains(Position(3, 2))


@given(st.lists(st.sampled_from(ALL), unique=True))
def test_fold_matches_a_naive_walk(acked):
    acks = AckRanges()
    for position in acked:
        acks.add(position)
    mark_delete = acks.fold(Position(1, -1), LEDGERS)
    expected = Position(1, -1)
    while next_position(LEDGERS, expected) in set(acked):
        expected = next_position(LEDGERS, expected)
    assert mark_delete == expected
    remaining = {p for p in acked if p > expected}
    assert {p for p in ALL if acks.contains(p)} == remaining
    # Stored ranges are disjoint, non-touching and sorted.
    ranges = list(acks.ranges())
    assert ranges == sorted(ranges)
