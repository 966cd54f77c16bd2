"""Durable cursors: a consumer's place in a managed ledger (Pulsar's ManagedCursor).

A cursor keeps a *mark-delete* position (everything up to it is consumed) and the entries
acknowledged individually beyond it. Both are persisted in the cursor's znode
(``cursorsLedgerId = -1``: the position is stored in the znode, not in a cursor ledger).
The trim reads the slowest mark-delete position to decide which ledgers are consumed.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Protocol

from ledger_gc.errors import (
    AlreadyExistsError,
    CursorNotFoundError,
    InvalidPositionError,
    ManagedLedgerClosedError,
)
from ledger_gc.proto.mldataformats_pb2 import ManagedCursorInfo, ManagedLedgerInfo
from ledger_gc.rules.ledger.ack_ranges import AckRanges
from ledger_gc.rules.positions import (
    LedgerStat,
    Position,
    count_entries_between,
    first_position,
    last_position,
    ledger_stats,
    next_position,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from ledger_gc.ledger.entry import Entry
    from ledger_gc.metadata.store import MetadataStore


class CursorLedger(Protocol):
    """What a cursor needs of its managed ledger (``ManagedLedger`` is one).

    A protocol rather than the class, so that the managed ledger, which opens cursors,
    can import this module and this module need not import it back.
    """

    name: str
    store: MetadataStore
    clock: Callable[[], int]

    def ledgers(self) -> list[LedgerStat]: ...

    def last_confirmed(self) -> Position: ...

    def read_entries(self, start: Position, max_entries: int) -> list[Entry]: ...


def _with_current(ledgers: list[LedgerStat], ml: CursorLedger) -> list[LedgerStat]:
    """The record's ledgers with the writer's live count for its current ledger (the
    record has the current ledger's entries only once it is closed)."""
    own = {stat.ledger_id: stat for stat in ml.ledgers()}
    return [own.get(stat.ledger_id, stat) if stat is ledgers[-1] else stat for stat in ledgers]


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

    def __init__(self, ml: CursorLedger, name: str, info: ManagedCursorInfo) -> None:
        self.ml = ml
        self.name = name
        self._lock = threading.RLock()
        self._closed = False
        self._mark_delete = mark_delete_of(info)
        self._acks = AckRanges.from_ranges(ranges_of(info), ml.ledgers())
        self._read_position = next_position(ml.ledgers(), self._mark_delete)

    @classmethod
    def open(cls, ml: CursorLedger, name: str, initial_position: str = "latest") -> ManagedCursor:
        if initial_position not in INITIAL_POSITIONS:
            raise ValueError(f"initial_position must be one of {INITIAL_POSITIONS}")
        try:
            info = ml.store.get_cursor(ml.name, name).value
        except CursorNotFoundError:

            def initial(record: ManagedLedgerInfo) -> ManagedCursorInfo:
                # From the record as ZooKeeper has it, not this writer's view: a trim may
                # have dropped ledgers since, and "earliest" is the oldest one listed.
                ledgers = _with_current(ledger_stats(record), ml)
                start = (
                    last_position(ledgers)
                    if initial_position == "latest"
                    else first_position(ledgers)
                )
                return ManagedCursorInfo(
                    cursorsLedgerId=-1,
                    markDeleteLedgerId=start.ledger_id,
                    markDeleteEntryId=start.entry_id,
                    lastActive=ml.clock(),
                )

            try:
                info = ml.store.create_cursor_from_record(ml.name, name, initial).value
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

    def reset(self, position: Position) -> Position:
        """Reset the subscription so that ``position`` is read next (Pulsar's
        ``resetCursor``): the mark-delete moves to just before it, backwards or forwards,
        and individual acks are dropped. Returns the position actually reset to.

        The reset is written in one multi with a check of the managed ledger's record, so
        it lands on a ledger that is still listed: a target in a ledger a trim has dropped
        (marked) resolves to the first ledger still listed, as Pulsar resolves a reset to
        a ledger that no longer exists. A trim deciding concurrently sees the cursor's
        version change and decides again (see ``trim.trimmer``).
        """
        with self._lock:
            self._check_open()
            target: list[Position] = []

            def mutate(record: ManagedLedgerInfo, info: ManagedCursorInfo) -> None:
                listed = [stat.ledger_id for stat in ledger_stats(record)]
                wanted = position
                if listed and wanted.ledger_id not in listed:
                    later = [ledger_id for ledger_id in listed if ledger_id > wanted.ledger_id]
                    wanted = Position(later[0] if later else listed[-1], 0)
                mark_delete = Position(wanted.ledger_id, wanted.entry_id - 1)
                target[:] = [wanted]
                info.cursorsLedgerId = -1
                info.markDeleteLedgerId = mark_delete.ledger_id
                info.markDeleteEntryId = mark_delete.entry_id
                del info.individualDeletedMessages[:]
                info.lastActive = self.ml.clock()

            written = self.ml.store.update_cursor_against_record(self.ml.name, self.name, mutate)
            self._mark_delete = mark_delete_of(written.value)
            self._acks = AckRanges.from_ranges([], self.ml.ledgers())
            self._read_position = target[0]
            return target[0]

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
