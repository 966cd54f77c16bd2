"""Trim eligibility: Pulsar's broker rules as a table, and the properties that make the trim
safe (never the current ledger, never what a cursor still needs, always a prefix)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pulsar_reference import JavaLedgerInfo, internal_trim_ledgers

from ledger_gc.rules.positions import LedgerStat, Position
from ledger_gc.rules.trim.eligibility import (
    STOP_CURRENT_LEDGER,
    STOP_NO_LEDGERS,
    STOP_RETENTION,
    STOP_SLOWEST_READER,
    TrimRetention,
    decide_trim,
    is_expired,
    is_over_size_quota,
    moved_mark_delete,
    slowest_reader_ledger_id,
    unconsumed_marked_ledger,
)

NOW = 1_700_000_000_000
HOUR_MS = 3_600_000
NO_RETENTION = TrimRetention(0, 0)
KEEP_FOREVER = TrimRetention(-1, -1)


def ledgers(*specs: int | tuple) -> list[LedgerStat]:
    """``3`` is ledger 3 with 10 entries of 100 bytes created 10 h ago; a tuple gives
    (id, entries, size, hours ago)."""
    stats = []
    for spec in specs:
        ledger_id, entries, size, hours = spec if isinstance(spec, tuple) else (spec, 10, 100, 10)
        stats.append(LedgerStat(ledger_id, entries, size, NOW - int(hours * HOUR_MS)))
    return stats


def P(ledger_id: int, entry_id: int) -> Position:  # P(1, 9) reads like "1:9"
    return Position(ledger_id, entry_id)


def trimmed(stats, cursors, retention=NO_RETENTION, now=NOW) -> list[int]:
    return decide_trim(stats, cursors, retention, now).ledger_ids


# --- the slowest reader -------------------------------------------------------------


@pytest.mark.parametrize(
    ("stats", "cursors", "expected", "why"),
    [
        (ledgers(1, 2, 3), [], [1, 2], "no cursors: everything before the current ledger"),
        (ledgers(1), [], [], "a single ledger is the current one"),
        (ledgers(), [], [], "no ledgers"),
        (ledgers(1), [P(1, 9)], [], "cursor at the end of the only (current) ledger"),
        (ledgers(1, 2, 3), [P(2, 5)], [1], "cursor inside ledger 2 keeps it"),
        (ledgers(1, 2, 3), [P(2, -1)], [1], "cursor before ledger 2's first entry"),
        (ledgers(1, 2, 3), [P(1, -1)], [], "cursor before everything"),
        (ledgers(1, 2, 3), [P(1, 9)], [1], "last entry of non-current ledger 1: it is done"),
        (ledgers(1, 2, 3), [P(2, 9)], [1, 2], "last entry of non-current ledger 2"),
        (ledgers(1, 2, 3), [P(3, 9)], [1, 2], "at the end of the current ledger: never it"),
        (ledgers(1, 2, 3), [P(3, 4), P(2, 3)], [1], "the slowest of two cursors decides"),
        (ledgers(1, 2, 3), [P(3, 4), P(1, 8)], [], "one entry of ledger 1 still unread"),
        (ledgers(10, 20, 35), [P(20, 9)], [10, 20], "ids need not be contiguous"),
        (
            ledgers(1, (2, 0, 0, 10), 3, 4),
            [P(2, -1)],
            [1, 2],
            "an empty non-current ledger is consumed by a cursor before it",
        ),
        (ledgers(1, (2, 0, 0, 10), 3), [P(1, 9)], [1], "end of 1: the reader is at empty 2"),
        (ledgers(3, 4, 5), [P(2, 5)], [], "cursor in a ledger no longer listed: bound 2"),
        (ledgers(3, 4, 5), [P(9, 0)], [3, 4], "cursor past the list: never the current"),
        (ledgers(1, 2, 3), [P(-1, -1)], [], "cursor created on an empty managed ledger"),
    ],
)
def test_the_slowest_reader_bounds_the_trim(stats, cursors, expected, why):
    assert trimmed(stats, cursors) == expected, why


def test_slowest_reader_ledger_id_follows_pulsars_rules():
    stats = ledgers(1, 2, 3)
    assert slowest_reader_ledger_id([], []) is None
    assert slowest_reader_ledger_id(stats, []) == 3
    assert slowest_reader_ledger_id(stats, [P(1, 9)]) == 2
    assert slowest_reader_ledger_id(stats, [P(1, 8)]) == 1
    assert slowest_reader_ledger_id(stats, [P(3, 9)]) == 3


# --- retention -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retention", "expected", "why"),
    [
        (TrimRetention(0, 0), [1, 2, 3], "no retention: all consumed ledgers go"),
        (TrimRetention(-1, -1), [], "-1 and -1: keep forever"),
        (TrimRetention(-1, 0), [1, 2, 3], "size 0 is always over quota, whatever the time"),
        (TrimRetention(0, -1), [1, 2, 3], "time 0: every ledger of the past has expired"),
        (TrimRetention(5 * 3600, -1), [1, 2], "only ledgers older than 5 h (3 is 4 h old)"),
        (TrimRetention(6 * 3600, -1), [1], "ledger 2 is exactly 6 h old: not *more* than"),
        (TrimRetention(100 * 3600, -1), [], "nothing old enough"),
        (TrimRetention(-1, 200), [1, 2], "400 bytes; after 1 and 2 exactly 200 remain"),
        (TrimRetention(-1, 201), [1], "after 1, 300 remain; after 2 only 200 < 201"),
        (TrimRetention(-1, 400), [], "trimming anything would go below 400"),
        (TrimRetention(7 * 3600, 300), [1], "1 by time and size alike, 2 by neither"),
        (TrimRetention(5 * 3600, 10_000), [1, 2], "time alone lets 1 and 2 go (OR)"),
    ],
)
def test_retention_by_time_or_size(retention, expected, why):
    # Ledgers 1, 2, 3 created 8, 6 and 4 hours ago, 100 bytes each; 4 is current.
    stats = ledgers((1, 10, 100, 8), (2, 10, 100, 6), (3, 10, 100, 4), (4, 10, 100, 0))
    assert trimmed(stats, [P(4, 0)], retention) == expected, why


def test_a_retained_ledger_stops_the_walk_even_if_later_ones_expired():
    # Clock skew made ledger 2 look older than ledger 1; Pulsar still stops at 1.
    stats = ledgers((1, 10, 100, 1), (2, 10, 100, 9), (3, 10, 100, 0))
    decision = decide_trim(stats, [P(3, 0)], TrimRetention(2 * 3600, -1), NOW)
    assert decision.ledger_ids == [] and decision.stop_reason == STOP_RETENTION


def test_empty_ledgers_are_trimmed_like_any_other():
    stats = ledgers((1, 0, 0, 9), (2, 0, 0, 8), (3, 10, 100, 0))
    assert trimmed(stats, []) == [1, 2]
    # With size retention, an empty ledger frees nothing but is still over quota.
    assert trimmed(stats, [], TrimRetention(-1, 100)) == [1, 2]


def test_stop_reasons_and_reasons_are_reported():
    stats = ledgers(1, 2, 3)
    assert decide_trim([], [], NO_RETENTION, NOW).stop_reason == STOP_NO_LEDGERS
    assert decide_trim(stats, [], NO_RETENTION, NOW).stop_reason == STOP_CURRENT_LEDGER
    decision = decide_trim(stats, [P(2, 0)], NO_RETENTION, NOW)
    assert decision.stop_reason == STOP_SLOWEST_READER
    assert decision.slowest_reader == P(2, 0) and decision.slowest_reader_ledger_id == 2
    assert decision.candidates[0].reason == "consumed, expired and over size quota"
    assert decision.size == 100


def test_the_retention_predicates_at_their_edges():
    ledger = LedgerStat(1, 1, 1, NOW - 1000)
    assert is_expired(ledger, TrimRetention(0, 0), NOW)
    assert not is_expired(ledger, TrimRetention(1, 0), NOW)  # 1000 ms is not > 1 s
    assert not is_expired(ledger, TrimRetention(-1, 0), NOW)
    assert is_over_size_quota(100, 50, TrimRetention(0, 50))
    assert not is_over_size_quota(100, 51, TrimRetention(0, 50))
    assert not is_over_size_quota(100, 100, TrimRetention(0, -1))


def test_cursors_left_behind_move_to_the_first_remaining_ledger():
    # Ledger 3 (10 entries) was marked; a cursor on its last entry has consumed it.
    marked = {3: 10}
    assert moved_mark_delete(P(3, 9), 5, marked) == P(5, -1)
    assert moved_mark_delete(P(-1, -1), 5, {}) == P(5, -1)
    assert moved_mark_delete(P(5, -1), 5, marked) is None
    assert moved_mark_delete(P(5, 3), 5, marked) is None
    assert moved_mark_delete(P(7, 0), 5, marked) is None


def test_a_cursor_reset_into_marked_data_never_moves_forward():
    # Moving it would undo the reset and let the marked data go.
    assert moved_mark_delete(P(3, 4), 5, {3: 10}) is None
    assert moved_mark_delete(P(-1, -1), 5, {3: 10}) is None
    assert moved_mark_delete(P(-1, -1), 5, {3: 0}) == P(5, -1)  # an empty ledger holds nothing
    assert unconsumed_marked_ledger(P(3, 4), {3: 10, 4: 2}) == 3
    assert unconsumed_marked_ledger(P(3, 9), {3: 10, 4: 2}) == 4
    assert unconsumed_marked_ledger(P(4, 1), {3: 10, 4: 2}) is None


def test_ledgers_are_decided_in_id_order_whatever_the_stored_order():
    stats = [LedgerStat(5, 10, 100, 1), LedgerStat(1, 10, 100, 1), LedgerStat(3, 10, 100, 1)]
    # The cursor is in ledger 3: only ledger 1 is consumed, whatever order is stored.
    decision = decide_trim(stats, [P(3, 4)], NO_RETENTION, NOW)
    assert decision.ledger_ids == [1]


def test_a_ledger_without_timestamp_is_as_old_as_the_read():
    stats = [LedgerStat(1, 10, 100, 0), LedgerStat(2, 0, 0, 0)]
    keep_one_hour = TrimRetention(3600, -1)
    assert decide_trim(stats, [P(2, -1)], keep_one_hour, NOW).ledger_ids == []
    assert decide_trim(stats, [P(2, -1)], TrimRetention(0, -1), NOW).ledger_ids == []


def test_size_retention_counts_the_open_ledgers_bytes():
    stats = [LedgerStat(1, 10, 100, 1), LedgerStat(2, 0, 0, 0)]
    keep_100_bytes = TrimRetention(-1, 100)
    # Without the open ledger's bytes, 0 bytes would remain: under the quota, keep.
    assert decide_trim(stats, [P(2, -1)], keep_100_bytes, NOW).ledger_ids == []
    # With 100 bytes already in the open ledger, 100 remain after the trim: over quota.
    assert decide_trim(
        stats, [P(2, -1)], keep_100_bytes, NOW, current_ledger_size=100
    ).ledger_ids == [1]


# --- properties ------------------------------------------------------------------------


def valid_positions(stats: list[LedgerStat]) -> st.SearchStrategy[Position]:
    """Positions a cursor can hold: in a closed listed ledger at most its last entry; in
    the current ledger (whose live count metadata does not know) or in a ledger no longer
    listed, any entry."""
    by_id = {s.ledger_id: s for s in stats}
    current = stats[-1].ledger_id if stats else None
    top = (current or 0) + 2

    def clamp(position: Position) -> Position:
        ledger = by_id.get(position.ledger_id)
        if ledger is None or ledger.ledger_id == current:
            return position
        return Position(ledger.ledger_id, min(position.entry_id, ledger.entries - 1))

    near = st.builds(Position, st.sampled_from(sorted(by_id) or [0]), st.integers(-1, 4))
    anywhere = st.builds(Position, st.integers(-1, top), st.integers(-1, 4))
    return st.one_of(near, anywhere).map(clamp)


@st.composite
def managed_ledgers(draw):
    """A ledger list (ascending, maybe sparse ids), cursors on it and a retention."""
    stats, ledger_id = [], draw(st.integers(0, 5))
    for _ in range(draw(st.integers(0, 8))):
        ledger_id += draw(st.integers(1, 3))
        stats.append(
            LedgerStat(
                ledger_id,
                draw(st.integers(0, 4)),
                draw(st.integers(0, 300)),
                NOW - draw(st.integers(0, 10)) * HOUR_MS,
            )
        )
    cursors = draw(st.lists(valid_positions(stats), max_size=4)) if stats else []
    bound = st.one_of(st.just(-1), st.just(0), st.integers(1, 1500))
    retention = TrimRetention(draw(bound), draw(bound))
    return stats, cursors, retention


@settings(max_examples=250, deadline=None)
@given(managed_ledgers())
def test_only_a_prefix_never_the_current_ledger_never_unread_entries(case):
    stats, cursors, retention = case
    decision = decide_trim(stats, cursors, retention, NOW)
    chosen = decision.ledger_ids

    assert chosen == [s.ledger_id for s in stats[: len(chosen)]], "a prefix of the list"
    if stats:
        assert stats[-1].ledger_id not in chosen, "never the current ledger"
        assert all(i < decision.slowest_reader_ledger_id for i in chosen)
    if cursors:
        slowest = min(cursors)
        by_id = {s.ledger_id: s for s in stats}
        for ledger_id in chosen:
            last_entry = Position(ledger_id, by_id[ledger_id].entries - 1)
            assert last_entry <= slowest, "every entry of a trimmed ledger was consumed"


@settings(max_examples=150, deadline=None)
@given(managed_ledgers(), st.data())
def test_older_cursor_positions_never_trim_more(case, data):
    """Why the trim may read cursors before the record: cursors only move forward, and
    judging by where they *were* can only trim the same or less."""
    stats, cursors, retention = case
    if not cursors:
        return
    later = [max(p, data.draw(valid_positions(stats))) for p in cursors]
    before = set(decide_trim(stats, cursors, retention, NOW).ledger_ids)
    after = set(decide_trim(stats, later, retention, NOW).ledger_ids)
    assert before <= after


# --- the trim against a model of Pulsar's own decision -------------------------------


@st.composite
def pulsar_records(draw):
    """A record as a broker may have stored it (any order, timestamps maybe missing),
    durable cursors on it, a retention policy and the open ledger's bytes so far."""
    ids = draw(st.lists(st.integers(0, 40), min_size=0, max_size=9, unique=True))
    stored = [
        JavaLedgerInfo(
            ledger_id,
            draw(st.integers(0, 4)),
            draw(st.integers(0, 300)),
            draw(
                st.sampled_from(
                    [0, NOW - 10_000_000, NOW - 3_600_001, NOW - 3_600_000, NOW - 1_000, NOW]
                )
            ),
        )
        for ledger_id in ids
    ]
    stored = draw(st.permutations(stored))
    stats = sorted(
        (LedgerStat(li.ledger_id, li.entries, li.size, li.timestamp) for li in stored),
        key=lambda s: s.ledger_id,
    )
    cursors = draw(st.lists(valid_positions(stats), max_size=3))
    retention = TrimRetention(
        draw(st.sampled_from([-1, 0, 1, 3600, 100_000])),
        draw(st.sampled_from([-1, 0, 1, 100, 250, 600, 10_000])),
    )
    current_bytes = draw(st.integers(0, 400))
    return stored, cursors, retention, current_bytes


@settings(max_examples=600, deadline=None)
@given(pulsar_records())
def test_the_trim_chooses_what_pulsar_would(case):
    stored, cursors, retention, current_bytes = case
    expected = internal_trim_ledgers(
        stored,
        [(p.ledger_id, p.entry_id) for p in cursors],
        retention.seconds * 1000 if retention.seconds >= 0 else -1,
        retention.bytes,
        now_ms=NOW,
        load_time_ms=NOW,
        current_ledger_bytes=current_bytes,
    )
    stats = [LedgerStat(li.ledger_id, li.entries, li.size, li.timestamp) for li in stored]
    current_size = current_bytes if stats else None
    decision = decide_trim(stats, cursors, retention, NOW, current_ledger_size=current_size)
    assert decision.ledger_ids == expected
