"""Positions in a managed ledger and the arithmetic over them (pure).

A position is (ledgerId, entryId), ordered first by ledger then by entry, as in Pulsar.
The managed ledger's ledger list gives the number of entries of each ledger; the
functions here walk it to find the position after or before another, skipping empty
ledgers, so the managed ledger, its cursors and the trim all agree on what "next" means.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from functools import total_ordering

from ledger_gc.proto.mldataformats_pb2 import ManagedLedgerInfo


@total_ordering
@dataclass(frozen=True, slots=True)
class Position:
    """A (ledger id, entry id) pair. Entry id -1 means "before the first entry"."""

    ledger_id: int
    entry_id: int

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Position):
            return NotImplemented
        return (self.ledger_id, self.entry_id) < (other.ledger_id, other.entry_id)

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """Parse ``"ledgerId:entryId"`` (how positions are shown and taken by the CLI)."""
        ledger, sep, entry = text.partition(":")
        if not sep:
            raise ValueError(f"position {text!r} is not ledgerId:entryId")
        return cls(int(ledger), int(entry))


@dataclass(frozen=True, slots=True)
class LedgerStat:
    """What the metadata says of one ledger (ManagedLedgerInfo.LedgerInfo)."""

    ledger_id: int
    entries: int
    size: int
    timestamp: int  # creation time, ms since the epoch


def ledger_stats(info: ManagedLedgerInfo) -> list[LedgerStat]:
    """The ledger list of a record as plain stats, in ledger-id order whatever order the
    record stores them in (Pulsar keeps its ledgers in a sorted map)."""
    return sorted(
        (
            LedgerStat(ledger.ledgerId, ledger.entries, ledger.size, ledger.timestamp)
            for ledger in info.ledgerInfo
        ),
        key=lambda stat: stat.ledger_id,
    )


def next_position(ledgers: Sequence[LedgerStat], position: Position) -> Position:
    """The first position after ``position``.

    ``ledgers`` is the ledger list in ascending id order with entry counts (the current
    ledger's count as the writer knows it). Past the last entry of a ledger the answer is
    the first entry of the next non-empty ledger; past everything it is the position the
    next add will get in the last ledger (the "read position at the end").
    """
    ids = [ledger.ledger_id for ledger in ledgers]
    index = bisect.bisect_left(ids, position.ledger_id)
    if index < len(ledgers) and ids[index] == position.ledger_id:
        if position.entry_id + 1 < ledgers[index].entries:
            return Position(position.ledger_id, position.entry_id + 1)
        index += 1
    for ledger in ledgers[index:]:
        if ledger.entries > 0:
            return Position(ledger.ledger_id, 0)
    if not ledgers:
        return Position(position.ledger_id, position.entry_id + 1)
    last = ledgers[-1]
    if position.ledger_id > last.ledger_id:
        return Position(position.ledger_id, position.entry_id + 1)
    return Position(last.ledger_id, last.entries)


def previous_position(ledgers: Sequence[LedgerStat], position: Position) -> Position:
    """The last position before ``position`` (entry -1 of the first ledger at the start)."""
    if position.entry_id > 0:
        return Position(position.ledger_id, position.entry_id - 1)
    ids = [ledger.ledger_id for ledger in ledgers]
    index = bisect.bisect_left(ids, position.ledger_id)
    for ledger in reversed(ledgers[:index]):
        if ledger.entries > 0:
            return Position(ledger.ledger_id, ledger.entries - 1)
    first = ledgers[0].ledger_id if ledgers else position.ledger_id
    return Position(min(first, position.ledger_id), -1)


def last_position(ledgers: Sequence[LedgerStat]) -> Position:
    """The last entry written (entry -1 of the first ledger when there is none)."""
    for ledger in reversed(ledgers):
        if ledger.entries > 0:
            return Position(ledger.ledger_id, ledger.entries - 1)
    return Position(ledgers[0].ledger_id if ledgers else -1, -1)


def first_position(ledgers: Sequence[LedgerStat]) -> Position:
    """The position before the first entry: where an "earliest" cursor starts."""
    return Position(ledgers[0].ledger_id if ledgers else -1, -1)


def count_entries_between(ledgers: Sequence[LedgerStat], after: Position, up_to: Position) -> int:
    """How many entries lie in (after, up_to]: a cursor's backlog, for example."""
    total = 0
    for ledger in ledgers:
        low = after.entry_id + 1 if ledger.ledger_id == after.ledger_id else 0
        high = up_to.entry_id if ledger.ledger_id == up_to.ledger_id else ledger.entries - 1
        if ledger.ledger_id < after.ledger_id or ledger.ledger_id > up_to.ledger_id:
            continue
        high = min(high, ledger.entries - 1)
        if high >= low:
            total += high - low + 1
    return total
