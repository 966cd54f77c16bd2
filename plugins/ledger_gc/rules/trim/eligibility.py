"""Which ledgers a trim may drop: Pulsar's broker rules, as pure functions.

This is the one place that decides which consumed ledgers leave a managed ledger. It
mirrors ``ManagedLedgerImpl.internalTrimLedgers`` of Apache Pulsar:

1. The *slowest reader* is the smallest mark-delete position of the durable cursors.
   Ledgers whose id is below the slowest reader's ledger may go; the slowest reader's
   own ledger stays, because entries after the mark-delete position are still unread.
   Two refinements, both Pulsar's:

   * with no durable cursor nobody needs anything, so everything before the current
     ledger may go;
   * a cursor whose mark-delete is the *last entry* of a ledger that is not the current
     one has consumed that whole ledger, so it counts as being at the next ledger.

2. Retention then protects ledgers that readers have finished with: a ledger goes only
   if it has *expired* (``now - timestamp > retention time``) or the managed ledger is
   *over its size quota* (``total size - size to trim >= retention size``, where the
   size to trim already includes this ledger). ``-1`` means unlimited (the rule never
   lets a ledger go) and ``0`` means no retention. Either rule is enough (Pulsar's OR).

3. Only a contiguous prefix of the ledger list goes: the walk stops at the first ledger
   that is neither expired nor over quota, at the slowest reader's ledger, and at the
   current (last) ledger, which is never trimmed because a writer is appending to it.

Three details that Pulsar's broker gets from the state it holds in memory, and that a trim
from outside must reproduce from the record:

* the ledger list is taken in ledger-id order whatever order the record stores it in
  (Pulsar keeps it in a sorted map), and the current ledger is the highest id;
* a ``LedgerInfo`` with no timestamp (or 0) is as old as the moment the record was read
  (``MetaStoreImpl.updateMLInfoTimestamp`` stamps it with the load time), so time
  retention keeps it;
* the size quota compares against the managed ledger's total size *including the open
  ledger's bytes* (Pulsar counts every add); the record only has them once the ledger is
  closed, so the caller passes them in (``current_ledger_size``) when it needs them.

``tests/unit/pulsar_reference.py`` transcribes ``internalTrimLedgers`` literally, and a
property test holds ``decide_trim`` to it on random records, cursors and retention.

The functions take plain data (``LedgerStat``, ``Position``) and the time, so every rule
above is a table test or a property test with no server (``tests/unit/test_trim_*``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from ledger_gc.rules.positions import LedgerStat, Position

UNLIMITED = -1


@dataclass(frozen=True)
class TrimRetention:
    """Pulsar's retention policy: ``-1`` keeps forever, ``0`` keeps nothing consumed."""

    seconds: int = 0
    bytes: int = 0


# Why the walk over the ledger list stopped (reported by the plan, never decided on).
STOP_NO_LEDGERS = "no ledgers"
STOP_CURRENT_LEDGER = "reached the current ledger"
STOP_SLOWEST_READER = "reached the slowest reader's ledger"
STOP_RETENTION = "retention keeps the rest"


@dataclass(frozen=True)
class TrimCandidate:
    """A ledger the trim may drop, and which retention rule let it go."""

    ledger: LedgerStat
    expired: bool
    over_size_quota: bool

    @property
    def reason(self) -> str:
        reasons = [("expired", self.expired), ("over size quota", self.over_size_quota)]
        return "consumed, " + " and ".join(name for name, hit in reasons if hit)


@dataclass(frozen=True)
class TrimDecision:
    """The prefix of the ledger list a trim may drop, and why the walk stopped there."""

    candidates: tuple[TrimCandidate, ...]
    slowest_reader: Position | None  # None: no durable cursor
    slowest_reader_ledger_id: int | None  # None: no ledgers
    stop_reason: str

    @property
    def ledger_ids(self) -> list[int]:
        return [candidate.ledger.ledger_id for candidate in self.candidates]

    @property
    def size(self) -> int:
        return sum(candidate.ledger.size for candidate in self.candidates)


def slowest_reader_ledger_id(
    ledgers: Sequence[LedgerStat], mark_deletes: Sequence[Position]
) -> int | None:
    """The first ledger some durable cursor still needs (its id bounds the trim).

    ``ledgers`` is the ledger list in ascending id order (``in_id_order``), the current
    ledger last; ``None`` when it is empty. Without cursors it is the current ledger. A
    mark-delete on the last entry of a non-current ledger moves to the next listed ledger
    (Pulsar uses ``id + 1`` as an exclusive bound; the next listed id is the same bound,
    as no listed id lies between).
    A mark-delete in a ledger that is not listed (already trimmed, or never ours) keeps
    its own id: the bound is then never above what the cursor has consumed.
    """
    if not ledgers:
        return None
    if not mark_deletes:
        return ledgers[-1].ledger_id
    slowest = min(mark_deletes)
    for index, ledger in enumerate(ledgers):
        if ledger.ledger_id == slowest.ledger_id:
            consumed_whole_ledger = slowest.entry_id + 1 == ledger.entries
            if index < len(ledgers) - 1 and consumed_whole_ledger:
                return ledgers[index + 1].ledger_id
            break
    return slowest.ledger_id


def is_expired(ledger: LedgerStat, retention: TrimRetention, now_ms: int) -> bool:
    """Pulsar's ``hasLedgerRetentionExpired``: older than the retention time (-1: never)."""
    if retention.seconds < 0:
        return False
    return now_ms - ledger.timestamp > retention.seconds * 1000


def is_over_size_quota(total_size: int, size_to_trim: int, retention: TrimRetention) -> bool:
    """Pulsar's ``isLedgerRetentionOverSizeQuota``: what would remain after trimming
    ``size_to_trim`` bytes is still at least the retention size (-1: never)."""
    if retention.bytes < 0:
        return False
    return total_size - size_to_trim >= retention.bytes


def in_id_order(ledgers: Sequence[LedgerStat]) -> list[LedgerStat]:
    """The ledger list as Pulsar holds it: ascending ids, the current ledger last."""
    return sorted(ledgers, key=lambda ledger: ledger.ledger_id)


def decide_trim(
    ledgers: Sequence[LedgerStat],
    mark_deletes: Sequence[Position],
    retention: TrimRetention,
    now_ms: int,
    current_ledger_size: int | None = None,
) -> TrimDecision:
    """The ledgers a trim may drop: a prefix of the ledgers in id order, never the current
    (highest) one.

    ``mark_deletes`` are the durable cursors' mark-delete positions. The total size is the
    sum of the listed ledgers' sizes, with the current ledger's taken from
    ``current_ledger_size`` when given (its bytes so far; the record says 0 while it is
    open). Only the size quota reads it, so a caller may leave it out when the retention
    size is 0 or -1.
    """
    ledgers = [
        ledger if ledger.timestamp else replace(ledger, timestamp=now_ms)
        for ledger in in_id_order(ledgers)
    ]
    bound = slowest_reader_ledger_id(ledgers, mark_deletes)
    slowest = min(mark_deletes) if mark_deletes else None
    if bound is None:
        return TrimDecision((), slowest, None, STOP_NO_LEDGERS)
    current_id = ledgers[-1].ledger_id
    total_size = sum(ledger.size for ledger in ledgers[:-1]) + (
        ledgers[-1].size if current_ledger_size is None else current_ledger_size
    )
    size_to_trim = 0
    candidates: list[TrimCandidate] = []
    stop_reason = STOP_CURRENT_LEDGER
    for ledger in ledgers:
        if ledger.ledger_id == current_id:
            stop_reason = STOP_CURRENT_LEDGER
            break
        if ledger.ledger_id >= bound:
            stop_reason = STOP_SLOWEST_READER
            break
        size_to_trim += ledger.size
        expired = is_expired(ledger, retention, now_ms)
        over_quota = is_over_size_quota(total_size, size_to_trim, retention)
        if not (expired or over_quota):
            # Pulsar stops here too: a trim leaves no gaps in the ledger list, and later
            # ledgers are younger and would leave even less behind.
            stop_reason = STOP_RETENTION
            break
        candidates.append(TrimCandidate(ledger, expired, over_quota))
    return TrimDecision(tuple(candidates), slowest, bound, stop_reason)


def unconsumed_marked_ledger(mark_delete: Position, marked: Mapping[int, int]) -> int | None:
    """The first marked ledger (id -> entries) with an entry after ``mark_delete``, or
    None when the cursor has consumed every marked ledger's data."""
    for ledger_id in sorted(marked):
        entries = marked[ledger_id]
        if entries > 0 and mark_delete < Position(ledger_id, entries - 1):
            return ledger_id
    return None


def moved_mark_delete(
    mark_delete: Position, first_listed_ledger_id: int, marked: Mapping[int, int]
) -> Position | None:
    """Where a cursor left behind by a trim moves to, or None if it stays.

    A cursor whose mark-delete is the last entry of a ledger the trim drops (or any
    position before the first listed ledger with no marked data after it) moves to
    ``(first listed ledger, -1)``: the same point in the log ("everything before the first
    remaining ledger is consumed"), in a ledger that still exists, so the next trim's
    slowest reader is not stuck on a ledger that is gone.

    A cursor with data of a *marked* ledger still ahead of it (``marked``: id -> entries)
    never moves: it was reset back into data that is about to go, and moving it forward
    would undo the reset. Its marked ledgers are kept instead (``unconsumed_marked_ledger``).
    """
    target = Position(first_listed_ledger_id, -1)
    if mark_delete >= target or unconsumed_marked_ledger(mark_delete, marked) is not None:
        return None
    return target
