"""The managed ledger: an append-only log made of ledgers (Pulsar's ManagedLedger).

Entries are appended to the *current* ledger; when it is full (entries, bytes or age) the
managed ledger rolls over to a new ledger. Metadata (the ledger list) lives in ZooKeeper,
entry data in S3 blocks. This class owns only the write path, reads and the ledger list;
cursors, the trim and deletion live in their own modules.

Ordering rules that keep the GC safe:
* a new ledger is registered in ``ManagedLedgerInfo`` (CAS write) before any block of it
  is written, so no scan can ever see data of a ledger that metadata does not know yet;
* a ledger leaves the list only together with its deletable marker (see ``deletion``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ledger_gc.clock import now_ms
from ledger_gc.deletion import Deleter
from ledger_gc.errors import (
    AlreadyExistsError,
    InvalidPositionError,
    ManagedLedgerClosedError,
    ManagedLedgerFencedError,
)
from ledger_gc.ledger.cursor import ManagedCursor
from ledger_gc.ledger.delete import delete_managed_ledger
from ledger_gc.ledger.entry import Entry
from ledger_gc.ledger.ids import LedgerIdAllocator
from ledger_gc.ledger.ownership import Ownership
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.proto.mldataformats_pb2 import ManagedLedgerInfo
from ledger_gc.rules.positions import (
    LedgerStat,
    Position,
    last_position,
    ledger_stats,
    next_position,
)
from ledger_gc.rules.storage.keys import validate_ml_name
from ledger_gc.storage.s3 import LedgerStorage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ManagedLedgerConfig:
    """Rollover rules, with Pulsar's broker defaults where it has one."""

    max_entries_per_ledger: int = 50_000
    max_size_per_ledger: int = 2 * 1024**3
    max_ledger_age_seconds: float = 4 * 3600
    # A ledger younger than this is never rolled over, however full: rolling over is a
    # metadata write and a new ledger, which a burst of small ledgers would make costly.
    min_ledger_age_seconds: float = 0.0


class ManagedLedger:
    """One writer's handle on a managed ledger. Thread-safe; use ``open``."""

    def __init__(
        self,
        name: str,
        store: MetadataStore,
        storage: LedgerStorage,
        config: ManagedLedgerConfig,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.name = validate_ml_name(name)
        self.store = store
        self.storage = storage
        self.config = config
        self.clock = clock
        self._ids = LedgerIdAllocator(store.client, store.hosts)
        self._ownership = Ownership(store.client, name, store.hosts)
        self._lock = threading.RLock()
        self._closed = False
        self._ledgers: list[LedgerStat] = []  # metadata's list, current one last
        self._current_entries = 0
        self._current_size = 0
        self._current_created = 0
        self._blocks: dict[int, list] = {}  # ledger id -> block refs (closed ledgers)
        self._cursors: dict[str, ManagedCursor] = {}

    # --- opening -----------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        name: str,
        store: MetadataStore,
        storage: LedgerStorage,
        config: ManagedLedgerConfig | None = None,
        *,
        create_if_missing: bool = True,
        clock: Callable[[], int] = now_ms,
    ) -> ManagedLedger:
        """Take ownership, recover the last ledger a previous writer left open, and start
        a fresh current ledger (as a Pulsar broker does when it loads a topic)."""
        ml = cls(name, store, storage, config or ManagedLedgerConfig(), clock)
        ml._ownership.acquire()
        try:
            if not store.managed_ledger_exists(name):
                if not create_if_missing:
                    store.get_managed_ledger(name)  # raises ManagedLedgerNotFoundError
                # A racing opener may have created it; we own it now, so carry on.
                with contextlib.suppress(AlreadyExistsError):
                    store.create_managed_ledger(name)
            info = store.get_managed_ledger(name).value
            recovered = ml._recover_last_ledger(info)
            ml._roll_over(recovered)
        except BaseException:
            ml._ownership.release()
            raise
        return ml

    def _recover_last_ledger(self, info: ManagedLedgerInfo) -> LedgerStat | None:
        """The true stats of the ledger a previous writer left open, from its blocks.

        Metadata only gets a ledger's counts when it is closed; if the writer died first,
        the blocks in S3 are the truth. Blocks past a gap are ignored: a block that does
        not start where the previous one ended was never acknowledged.
        """
        if not info.ledgerInfo:
            return None
        last = max(info.ledgerInfo, key=lambda ledger: ledger.ledgerId)  # id order, as Pulsar
        entries = 0
        size = 0
        for block in self.storage.list_blocks(self.name, last.ledgerId):
            if block.first_entry_id != entries:
                break
            count, payload = self.storage.block_stats(block)
            entries += count
            size += payload
        if entries == last.entries and size == last.size:
            return None
        return LedgerStat(last.ledgerId, entries, size, last.timestamp)

    # --- state -------------------------------------------------------------------------

    def _check_writable(self) -> None:
        if self._closed:
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is closed")
        self._ownership.check()

    def _check_open(self) -> None:
        if self._closed:
            raise ManagedLedgerClosedError(f"managed ledger {self.name} is closed")

    @property
    def current_ledger_id(self) -> int:
        return self._ledgers[-1].ledger_id

    def ledgers(self) -> list[LedgerStat]:
        """The ledger list with the current ledger's live counts."""
        with self._lock:
            if not self._ledgers:
                return []
            current = self._ledgers[-1]
            live = LedgerStat(
                current.ledger_id, self._current_entries, self._current_size, current.timestamp
            )
            return [*self._ledgers[:-1], live]

    def last_confirmed(self) -> Position:
        return last_position(self.ledgers())

    def total_size(self) -> int:
        return sum(ledger.size for ledger in self.ledgers())

    def _refresh_ledgers(self, info: ManagedLedgerInfo) -> None:
        """Adopt the list another writer (the trim) changed; keep our live counts."""
        stats = ledger_stats(info)
        if stats and self._ledgers and stats[-1].ledger_id == self._ledgers[-1].ledger_id:
            self._ledgers = stats

    # --- writing -----------------------------------------------------------------------

    def add_entry(self, data: bytes) -> Position:
        return self.add_entries([data])[0]

    def add_entries(self, payloads: Sequence[bytes]) -> list[Position]:
        """Append entries; a batch goes into one block unless a rollover splits it."""
        positions: list[Position] = []
        with self._lock:
            self._check_writable()
            remaining = list(payloads)
            while remaining:
                if self._is_full():
                    self._roll_over()
                room = self.config.max_entries_per_ledger - self._current_entries
                batch, remaining = remaining[: max(room, 1)], remaining[max(room, 1) :]
                positions.extend(self._write_block(batch))
            if self._is_full():
                self._roll_over()
        return positions

    def _write_block(self, batch: list[bytes]) -> list[Position]:
        ledger_id = self.current_ledger_id
        first = self._current_entries
        self.storage.write_block(self.name, ledger_id, first, batch)
        # The block is durable, but if ownership was lost while we wrote, a new owner may
        # already have recovered this ledger without it: do not acknowledge.
        self._ownership.check()
        self._current_entries += len(batch)
        self._current_size += sum(len(p) for p in batch)
        return [Position(ledger_id, first + i) for i in range(len(batch))]

    def _is_full(self) -> bool:
        """Pulsar's rule: full by entries, size or age, and never before the minimum age."""
        age = (self.clock() - self._current_created) / 1000
        quota = (
            self._current_entries >= self.config.max_entries_per_ledger
            or self._current_size >= self.config.max_size_per_ledger
        )
        aged = self._current_entries > 0 and age >= self.config.max_ledger_age_seconds
        return (quota or aged) and age >= self.config.min_ledger_age_seconds

    def roll_over(self) -> None:
        """Close the current ledger and start a new one now."""
        with self._lock:
            self._check_writable()
            self._roll_over()

    def _roll_over(self, recovered: LedgerStat | None = None) -> None:
        """One CAS write: the closing ledger's counts and the new ledger, registered
        before any block of it exists."""
        new_id = self._ids.next_id()
        created = self.clock()
        closing = recovered or (
            LedgerStat(self.current_ledger_id, self._current_entries, self._current_size, 0)
            if self._ledgers
            else None
        )
        expected_last = self._ledgers[-1].ledger_id if self._ledgers else None
        first_open = recovered is not None or not self._ledgers

        def mutate(info: ManagedLedgerInfo) -> bool:
            last = max(info.ledgerInfo, key=lambda ledger: ledger.ledgerId, default=None)
            if not first_open and (last is None or last.ledgerId != expected_last):
                raise ManagedLedgerFencedError(
                    f"managed ledger {self.name}: current ledger {expected_last} is no longer "
                    "the last one; another writer took over"
                )
            if last is not None and closing is not None and last.ledgerId == closing.ledger_id:
                last.entries = closing.entries
                last.size = closing.size
            if any(ledger.ledgerId == new_id for ledger in info.ledgerInfo):
                return True  # applied by an earlier attempt whose reply got lost
            info.ledgerInfo.add(ledgerId=new_id, entries=0, size=0, timestamp=created)
            return True

        written = self.store.update_managed_ledger(self.name, mutate)
        self._ledgers = ledger_stats(written.value)
        self._current_entries = 0
        self._current_size = 0
        self._current_created = created
        log.info("%s: rolled over to ledger %d", self.name, new_id)

    def _record_current_stats(self) -> None:
        """Write the current ledger's counts to metadata (on close)."""
        ledger_id, entries, size = (
            self.current_ledger_id,
            self._current_entries,
            self._current_size,
        )

        def mutate(info: ManagedLedgerInfo) -> bool:
            for ledger in info.ledgerInfo:
                if ledger.ledgerId == ledger_id:
                    if ledger.entries == entries and ledger.size == size:
                        return False
                    ledger.entries, ledger.size = entries, size
                    return True
            return False

        self._refresh_ledgers(self.store.update_managed_ledger(self.name, mutate).value)

    # --- reading -----------------------------------------------------------------------

    def read_entry(self, position: Position) -> Entry:
        entries = self.read_entries(position, 1)
        if not entries or entries[0].position != position:
            raise InvalidPositionError(f"{self.name}: no entry at {position}")
        return entries[0]

    def read_entries(self, start: Position, max_entries: int) -> list[Entry]:
        """Up to ``max_entries`` entries from ``start`` on, across ledgers."""
        self._check_open()
        ledgers = self.ledgers()
        result: list[Entry] = []
        position = start
        ids = [ledger.ledger_id for ledger in ledgers]
        if ledgers and position.ledger_id < ids[0]:
            position = next_position(ledgers, Position(ids[0], -1))
        while len(result) < max_entries:
            if position.ledger_id not in ids:
                break
            stat = ledgers[ids.index(position.ledger_id)]
            if position.entry_id >= stat.entries:
                following = next_position(ledgers, Position(stat.ledger_id, stat.entries - 1))
                if following.ledger_id == stat.ledger_id:
                    break  # the end of the log
                position = following
                continue
            last = min(stat.entries - 1, position.entry_id + max_entries - len(result) - 1)
            for i, data in enumerate(self._read_range(stat, position.entry_id, last)):
                result.append(Entry(Position(stat.ledger_id, position.entry_id + i), data))
            position = next_position(ledgers, Position(stat.ledger_id, last))
        return result

    def _read_range(self, stat: LedgerStat, first: int, last: int) -> list[bytes]:
        blocks = self._blocks_of(stat)
        out: list[bytes] = []
        for index, block in enumerate(blocks):
            block_end = (
                blocks[index + 1].first_entry_id - 1
                if index + 1 < len(blocks)
                else stat.entries - 1
            )
            low, high = max(first, block.first_entry_id), min(last, block_end)
            if low <= high:
                out.extend(self.storage.read_entries(self.name, stat.ledger_id, block, low, high))
        if len(out) != last - first + 1:
            raise InvalidPositionError(
                f"{self.name}: ledger {stat.ledger_id} entries {first}..{last} not all found "
                f"in storage (got {len(out)})"
            )
        return out

    def _blocks_of(self, stat: LedgerStat) -> list:
        is_current = stat.ledger_id == self.current_ledger_id
        cached = self._blocks.get(stat.ledger_id)
        if cached is not None and not is_current:
            return cached
        blocks = self.storage.list_blocks(self.name, stat.ledger_id)
        if not is_current:
            self._blocks[stat.ledger_id] = blocks
        return blocks

    # --- cursors -----------------------------------------------------------------------

    def open_cursor(self, name: str, initial_position: str = "latest") -> ManagedCursor:
        """Open a durable cursor, recovering it from ZooKeeper if it exists."""
        with self._lock:
            self._check_open()
            if name not in self._cursors:
                self._cursors[name] = ManagedCursor.open(self, name, initial_position)
            return self._cursors[name]

    def cursors(self) -> list[ManagedCursor]:
        return list(self._cursors.values())

    def delete_cursor(self, name: str) -> None:
        with self._lock:
            cursor = self._cursors.pop(name, None)
            if cursor is not None:
                cursor.close()
            self.store.delete_cursor(self.name, name)

    # --- closing -----------------------------------------------------------------------

    def close(self) -> None:
        """Persist cursors and the current ledger's counts, then give up ownership."""
        with self._lock:
            if self._closed:
                return
            try:
                for cursor in self._cursors.values():
                    cursor.close()
                if self._ledgers:
                    self._ownership.check()
                    self._record_current_stats()
            finally:
                self._closed = True
                self._ownership.release()

    def delete(self, deleter: Deleter) -> int:
        """Delete the managed ledger, its data and its cursors; return bytes reclaimed.

        Crash-safe (see ``ledger.delete``): a failed delete leaves markers that the next
        delete or trim finishes. The handle is closed afterwards either way.
        """
        with self._lock:
            self._check_writable()
            for cursor in self._cursors.values():
                cursor.close()
            try:
                return delete_managed_ledger(self.name, self.store, deleter, now_ms=self.clock())
            finally:
                self._closed = True
                self._ownership.release()

    def __enter__(self) -> ManagedLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ManagedLedger({self.name!r}, ledgers={len(self._ledgers)})"
