"""One entry of a managed ledger as a reader gets it: where it is and its bytes."""

from __future__ import annotations

from dataclasses import dataclass

from ledger_gc.rules.positions import Position


@dataclass(frozen=True)
class Entry:
    position: Position
    data: bytes
