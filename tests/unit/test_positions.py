from ledger_gc.rules.positions import (
    LedgerStat,
    Position,
    count_entries_between,
    first_position,
    last_position,
    next_position,
    previous_position,
)

LEDGERS = [LedgerStat(3, 2, 20, 0), LedgerStat(5, 0, 0, 0), LedgerStat(8, 3, 30, 0)]


def test_positions_order_by_ledger_then_entry():
    assert Position(3, 9) < Position(5, 0) < Position(5, 1)
    assert Position.parse("8:2") == Position(8, 2)
    assert str(Position(8, 2)) == "8:2"


def test_next_position_walks_entries_and_skips_empty_ledgers():
    assert next_position(LEDGERS, Position(3, -1)) == Position(3, 0)
    assert next_position(LEDGERS, Position(3, 0)) == Position(3, 1)
    assert next_position(LEDGERS, Position(3, 1)) == Position(8, 0)  # ledger 5 is empty
    assert next_position(LEDGERS, Position(5, -1)) == Position(8, 0)
    assert next_position(LEDGERS, Position(8, 2)) == Position(8, 3)  # the end: next add


def test_previous_position_and_bounds():
    assert previous_position(LEDGERS, Position(8, 0)) == Position(3, 1)
    assert previous_position(LEDGERS, Position(8, 2)) == Position(8, 1)
    assert previous_position(LEDGERS, Position(3, 0)) == Position(3, -1)
    assert last_position(LEDGERS) == Position(8, 2)
    assert first_position(LEDGERS) == Position(3, -1)
    assert last_position([LedgerStat(4, 0, 0, 0)]) == Position(4, -1)


def test_count_entries_between():
    assert count_entries_between(LEDGERS, Position(3, -1), Position(8, 2)) == 5
    assert count_entries_between(LEDGERS, Position(3, 1), Position(8, 2)) == 3
    assert count_entries_between(LEDGERS, Position(8, 2), Position(8, 2)) == 0
