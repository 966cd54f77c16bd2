"""Individually acknowledged entries of a cursor, kept as ranges (pure).

Pulsar stores a cursor's individual acks beyond the mark-delete position as
``individualDeletedMessages``: a list of ranges open below and closed above,
``(lower, upper]``. Acks that become contiguous with the mark-delete position fold into
it, so the stored list stays short and the mark-delete position (which the trim reads)
moves as far as the consumer really got.

Inside we keep, per ledger, sorted disjoint inclusive entry intervals; a range that spans
ledgers (as Pulsar may write) is split using the ledger list.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence

from ledger_gc.rules.positions import LedgerStat, Position, next_position


class AckRanges:
    """Acked entries past the mark-delete position, per ledger as ``[first, last]``."""

    def __init__(self) -> None:
        self._by_ledger: dict[int, list[list[int]]] = {}

    def __len__(self) -> int:
        """The number of stored ranges (what Pulsar persists)."""
        return sum(len(intervals) for intervals in self._by_ledger.values())

    def __bool__(self) -> bool:
        return bool(self._by_ledger)

    def add(self, position: Position) -> None:
        self.add_interval(position.ledger_id, position.entry_id, position.entry_id)

    def add_interval(self, ledger_id: int, first: int, last: int) -> None:
        """Mark entries ``first..last`` of a ledger acked, merging touching intervals."""
        if last < first:
            return
        intervals = self._by_ledger.setdefault(ledger_id, [])
        index = bisect.bisect_left(intervals, [first, first])
        # Step back one: the interval before may touch or overlap the new one.
        if index > 0 and intervals[index - 1][1] >= first - 1:
            index -= 1
        new = [first, last]
        while index < len(intervals) and intervals[index][0] <= new[1] + 1:
            new = [min(new[0], intervals[index][0]), max(new[1], intervals[index][1])]
            del intervals[index]
        intervals.insert(index, new)

    def contains(self, position: Position) -> bool:
        intervals = self._by_ledger.get(position.ledger_id, [])
        index = bisect.bisect_right(intervals, [position.entry_id, float("inf")]) - 1
        return index >= 0 and intervals[index][0] <= position.entry_id <= intervals[index][1]

    def drop_through(self, position: Position) -> None:
        """Forget every ack at or before ``position`` (it is covered by mark-delete)."""
        for ledger_id in [lid for lid in self._by_ledger if lid < position.ledger_id]:
            del self._by_ledger[ledger_id]
        intervals = self._by_ledger.get(position.ledger_id)
        if intervals is None:
            return
        kept = []
        for first, last in intervals:
            if last <= position.entry_id:
                continue
            kept.append([max(first, position.entry_id + 1), last])
        if kept:
            self._by_ledger[position.ledger_id] = kept
        else:
            del self._by_ledger[position.ledger_id]

    def fold(self, mark_delete: Position, ledgers: Sequence[LedgerStat]) -> Position:
        """Move ``mark_delete`` over acks contiguous with it; return the new position."""
        while True:
            following = next_position(ledgers, mark_delete)
            intervals = self._by_ledger.get(following.ledger_id, [])
            if not intervals or intervals[0][0] > following.entry_id:
                break
            index = bisect.bisect_right(intervals, [following.entry_id, float("inf")]) - 1
            if index < 0 or intervals[index][1] < following.entry_id:
                break
            mark_delete = Position(following.ledger_id, intervals[index][1])
            self.drop_through(mark_delete)
        self.drop_through(mark_delete)
        return mark_delete

    def ranges(self) -> Iterator[tuple[Position, Position]]:
        """Pulsar's ``(lower, upper]`` ranges, ascending."""
        for ledger_id in sorted(self._by_ledger):
            for first, last in self._by_ledger[ledger_id]:
                yield Position(ledger_id, first - 1), Position(ledger_id, last)

    @classmethod
    def from_ranges(
        cls, ranges: Iterable[tuple[Position, Position]], ledgers: Sequence[LedgerStat]
    ) -> AckRanges:
        """Rebuild from stored ``(lower, upper]`` ranges, splitting cross-ledger ones."""
        acks = cls()
        counts = {ledger.ledger_id: ledger.entries for ledger in ledgers}
        for lower, upper in ranges:
            if lower.ledger_id == upper.ledger_id:
                acks.add_interval(lower.ledger_id, lower.entry_id + 1, upper.entry_id)
                continue
            # A range over several ledgers: the tail of the first, every ledger between
            # (whole), the head of the last. Unknown (trimmed) ledgers need no acks.
            if lower.ledger_id in counts:
                acks.add_interval(lower.ledger_id, lower.entry_id + 1, counts[lower.ledger_id] - 1)
            for ledger_id, entries in counts.items():
                if lower.ledger_id < ledger_id < upper.ledger_id:
                    acks.add_interval(ledger_id, 0, entries - 1)
            acks.add_interval(upper.ledger_id, 0, upper.entry_id)
        return acks
