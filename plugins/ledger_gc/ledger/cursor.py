"""Durable cursors: a consumer's place in a managed ledger (Pulsar's ManagedCursor).

A cursor keeps a *mark-delete* position (everything up to it is consumed) and the entries
acknowledged individually beyond it. Both are persisted in the cursor's znode
(``cursorsLedgerId = -1``: the position is stored in the znode, not in a cursor ledger).
The trim reads the slowest mark-delete position to decide which ledgers are consumed.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ledger_gc.errors import (
    AlreadyExistsError,
    CursorNotFoundError,
    InvalidPositionError,
    ManagedLedgerClosedError,
)
from ledger_gc.ledger.ack_ranges import AckRanges
from ledger_gc.positions import (
    Position,
    count_entries_between,
    first_position,
    last_position,
    next_position,
)
from ledger_gc.proto.mldataformats_pb2 import ManagedCursorInfo

if TYPE_CHECKING:
    from ledger_gc.ledger.managed_ledger import Entry, ManagedLedger

INITIAL_POSITIONS = ("latest", "earliest")


def mark_delete_of(info: ManagedCursorInfo) -> Position:
    return Position(info.markDeleteLedgerId, info.markDeleteEntryId)


def ranges_of(info: ManagedCursorInfo) -> list[tuple[Position, Position]]:
    return [
        (
            Position(r.lowerEndpoint.ledgerId, r.lowerEndpoint.entryId),
            Position(r.upperEndpoint.ledgerId, r.upperEndpoint.entryId),
        )
        for r in info.individualDeletedMessages
    ]


class ManagedCursor:
    """A durable cursor on an open managed ledger; get one from ``open_cursor``."""

    def __init__(self, ml: ManagedLedger, name: str, info: ManagedCursorInfo) -> None:
        self.ml = ml
        self.name = name
        self._lock = threading.RLock()
        self._closed = False
        self._mark_delete = mark_delete_of(info)
        self._acks = AckRanges.from_ranges(ranges_of(info), ml.ledgers())
        self._read_position = next_position(ml.ledgers(), self._mark_delete)

    @classmethod
    def open(cls, ml: ManagedLedger, name: str, initial_position: str = "latest") -> ManagedCursor:
        if initial_position not in INITIAL_POSITIONS:
            raise ValueError(f"initial_position must be one of {INITIAL_POSITIONS}")
        try:
            info = ml.store.get_cursor(ml.name, name).value
        except CursorNotFoundError:
            ledgers = ml.ledgers()
            start = (
                last_position(ledgers) if initial_position == "latest" else first_position(ledgers)
            )
            info = ManagedCursorInfo(
                cursorsLedgerId=-1,
                markDeleteLedgerId=start.ledger_id,
                markDeleteEntryId=start.entry_id,
                lastActive=ml.clock(),
            )
            try:
                ml.store.create_cursor(ml.name, name, info)
            except AlreadyExistsError:
                info = ml.store.get_cursor(ml.name, name).value
        return cls(ml, name, info)

    # --- positions ---------------------------------------------------------------------

    @property
    def mark_delete_position(self) -> Position:
        return self._mark_delete

    @property
    def read_position(self) -> Position:
        return self._read_position

    def individually_acked(self) -> list[tuple[Position, Position]]:
        """The ``(lower, upper]`` ranges acked beyond the mark-delete position."""
        with self._lock:
            return list(self._acks.ranges())

    def backlog(self) -> int:
        """Entries not yet consumed (after mark-delete, not individually acked)."""
        with self._lock:
            ledgers = self.ml.ledgers()
            pending = count_entries_between(ledgers, self._mark_delete, last_position(ledgers))
            acked = sum(
                count_entries_between(ledgers, lower, upper) for lower, upper in self._acks.ranges()
            )
            return max(pending - acked, 0)

    # --- reading -----------------------------------------------------------------------

    def read_entries(self, max_entries: int) -> list[Entry]:
        """The next entries from the read position; individually acked ones are skipped."""
        with self._lock:
            self._check_open()
            out: list[Entry] = []
            while len(out) < max_entries:
                batch = self.ml.read_entries(self._read_position, max_entries - len(out))
                if not batch:
                    break
                self._read_position = next_position(self.ml.ledgers(), batch[-1].position)
                out.extend(e for e in batch if not self._acks.contains(e.position))
            return out

    def has_more_entries(self) -> bool:
        return self._read_position <= self.ml.last_confirmed()

    def seek(self, position: Position) -> None:
        """Move the read position (not the mark-delete position), as Pulsar's seek."""
        with self._lock:
            self._check_open()
            self._read_position = position

    # --- acknowledging -----------------------------------------------------------------

    def mark_delete(self, position: Position) -> None:
        """Everything up to and including ``position`` is consumed; persisted at once."""
        with self._lock:
            self._check_open()
            if position > self.ml.last_confirmed():
                raise InvalidPositionError(
                    f"cursor {self.name}: cannot mark-delete {position}, past the last entry "
                    f"{self.ml.last_confirmed()}"
                )
            if position <= self._mark_delete:
                return  # already consumed: an old or duplicate ack is a no-op, as in Pulsar
            self._mark_delete = self._acks.fold(position, self.ml.ledgers())
            self._advance_read_position()
            self._persist()

    def delete(self, position: Position) -> None:
        """Acknowledge one entry (an individual ack); folds into mark-delete when it can."""
        self.delete_many([position])

    def delete_many(self, positions: list[Position]) -> None:
        with self._lock:
            self._check_open()
            last = self.ml.last_confirmed()
            for position in positions:
                if position > last or position.entry_id < 0:
                    raise InvalidPositionError(f"cursor {self.name}: no entry at {position}")
                if position > self._mark_delete:
                    self._acks.add(position)
            self._mark_delete = self._acks.fold(self._mark_delete, self.ml.ledgers())
            self._advance_read_position()
            self._persist()

    def _advance_read_position(self) -> None:
        following = next_position(self.ml.ledgers(), self._mark_delete)
        self._read_position = max(self._read_position, following)

    # --- persistence -------------------------------------------------------------------

    def _persist(self) -> None:
        """Write mark-delete and acks with CAS; merge with a concurrent trim's move.

        The trim moves a mark-delete that points into a ledger it dropped to the start of
        the next ledger (the same place, in a ledger that still exists). On a conflict we
        keep whichever position is further on, so neither write is lost.
        """

        def mutate(info: ManagedCursorInfo) -> bool:
            stored = mark_delete_of(info)
            if stored > self._mark_delete:
                self._mark_delete = stored
                self._acks.drop_through(stored)
                self._advance_read_position()
            info.cursorsLedgerId = -1
            info.markDeleteLedgerId = self._mark_delete.ledger_id
            info.markDeleteEntryId = self._mark_delete.entry_id
            del info.individualDeletedMessages[:]
            for lower, upper in self._acks.ranges():
                item = info.individualDeletedMessages.add()
                item.lowerEndpoint.ledgerId, item.lowerEndpoint.entryId = (
                    lower.ledger_id,
                    lower.entry_id,
                )
                item.upperEndpoint.ledgerId, item.upperEndpoint.entryId = (
                    upper.ledger_id,
                    upper.entry_id,
                )
            info.lastActive = self.ml.clock()
            return True

        self.ml.store.update_cursor(self.ml.name, self.name, mutate)

    def _check_open(self) -> None:
        if self._closed:
            raise ManagedLedgerClosedError(f"cursor {self.name} of {self.ml.name} is closed")

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True

    def __repr__(self) -> str:
        return f"ManagedCursor({self.name!r}, mark_delete={self._mark_delete})"
