"""A managed ledger as the trim read it: its record and cursors, each with its version.

The trim decides and marks from exactly this state (the mark's multi checks every version
in it), and its purge guards the delete with a fresh one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ledger_gc.errors import LedgerGcError
from ledger_gc.formats.framing import Framing
from ledger_gc.ledger.cursor import mark_delete_of
from ledger_gc.proto.mldataformats_pb2 import ManagedCursorInfo, ManagedLedgerInfo
from ledger_gc.rules.positions import Position


@dataclass(frozen=True)
class CursorState:
    info: ManagedCursorInfo
    version: int
    framing: Framing

    @property
    def position(self) -> Position:
        return mark_delete_of(self.info)


@dataclass
class LedgerState:
    """A managed ledger's record and cursors, each at the version it was read at."""

    record: ManagedLedgerInfo
    version: int
    framing: Framing
    cursors: dict[str, CursorState] = field(default_factory=dict)
    # The record znode's creation zxid: versions start again when a topic is deleted
    # and created again, this does not (``MetadataStore.commit_trim``).
    czxid: int | None = None

    def positions(self) -> list[Position]:
        return [cursor.position for cursor in self.cursors.values()]


class LedgerStateReader(Protocol):
    """Reads managed ledgers' states (``ManagedLedgerTrimmer`` does)."""

    def read_states(self, names: Sequence[str]) -> list[LedgerState | LedgerGcError | None]:
        """Each managed ledger's state; None where it is gone, an error where it does not
        decode."""
        ...

    def read_state(self, name: str) -> LedgerState:
        """One managed ledger's state; raises where ``read_states`` has None or an error."""
        ...
