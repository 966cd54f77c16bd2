"""The mark-then-delete trim of managed ledgers, against ZooKeeper and S3.

For each managed ledger, in this order:

1. **Read the cursors** (every durable cursor's mark-delete position).
2. **Plan**: read the ``ManagedLedgerInfo`` and apply ``eligibility.decide_trim``; this is
   what the report shows and all a dry run does.
3. **Mark** (phase one): one compare-and-set write that drops the chosen ledgers from the
   ledger list and adds a ``ledger-gc.deletable.<id>`` marker for each (``marking``).
   The choice is made *again inside the CAS mutator*, from the record that attempt read,
   never taken from the plan.
4. **Move cursors** left behind to ``(first remaining ledger, -1)``, as Pulsar does.
5. **Delete** (phase two): ``marking.purge_marked`` deletes the data of *every* marker
   (this run's and every earlier run's) through the one delete path, confirms nothing
   is left, and removes the markers of the gone ledgers in one CAS; a failure keeps the
   marker, with its attempt count and last error, for the next run.

So a managed ledger costs at most two writes of its record per trim (mark, unmark), plus
one write per cursor that had to move.

Why reading cursors first and the record later is safe, with no lock against writers
and consumers that keep running (a rollover, an ack) while the trim does:

* **Cursors only move forward.** A mark-delete position never goes back (an old or
  duplicate ack is a no-op, and a concurrent write keeps the further position), so the
  positions read in step 1 are at or behind the cursors' true positions at the moment
  of the mark. ``decide_trim`` is monotonic in them: slower cursors can only bound the
  trim lower. Stale cursor positions therefore make the trim keep more, never less.
  Reading the record first and the cursors second would be the unsafe order: a record
  from before a rollover, judged against cursors from after it, could show as "not the
  current ledger" a ledger that was, and treat a cursor on it as done with it.
* **The ledger list only grows at the end and shrinks at the front.** Writers append
  new ledgers (always the new current ledger, with the highest id) and never drop one;
  only a trim drops, and only a prefix. A ledger appended concurrently is the current
  ledger or later and never a prefix candidate; if it lands between our read and our
  write, the CAS fails on the version and the mutator runs again on the new record.
* **The mutator decides from the record it is given.** The CAS loop re-runs it after
  every conflict, on a fresh read; it uses only that record, the cursor positions of
  step 1 and the run's clock, so a retry can never act on a list it did not see.
* **A cursor created after step 1** (a new subscription at "earliest") is not in the
  snapshot. Nothing is deleted before step 4, which re-reads the cursors after the mark
  and moves any that point before the first remaining ledger, so a new subscription
  starts at the oldest data still listed, as in Pulsar, where data consumed by every
  existing subscription is not kept for future ones (retention is for that).

A managed ledger that a writer is rolling over is never fenced by the trim: the trim
never removes the last ledger, which is what a writer's rollover checks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ledger_gc import formats
from ledger_gc.deletion import Deleter
from ledger_gc.errors import (
    CursorNotFoundError,
    LedgerGcError,
    ManagedLedgerNotFoundError,
    MetadataUnavailableError,
    SafetyRefusalError,
)
from ledger_gc.ledger.cursor import mark_delete_of
from ledger_gc.ledger.managed_ledger import ledger_stats
from ledger_gc.marking import mark_deletable, purge_marked
from ledger_gc.metadata import paths
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.positions import Position
from ledger_gc.proto.mldataformats_pb2 import ManagedCursorInfo, ManagedLedgerInfo
from ledger_gc.settings import Settings
from ledger_gc.trim.eligibility import TrimDecision, decide_trim, moved_mark_delete
from ledger_gc.trim.report import (
    DeletedLedger,
    ManagedLedgerTrim,
    MarkerState,
    PlannedLedger,
)

log = logging.getLogger(__name__)

OPERATION = "trim"
# Managed ledgers read per pipelined batch: big enough to amortise round trips, small
# enough that a plan is still fresh when its managed ledger's turn comes.
BATCH_SIZE = 256


@dataclass(frozen=True)
class CursorSnapshot:
    """The durable cursors of one managed ledger: name -> mark-delete position."""

    positions: dict[str, Position]

    @property
    def mark_deletes(self) -> list[Position]:
        return list(self.positions.values())


class ManagedLedgerTrimmer:
    """Trims managed ledgers one after the other over one store, storage and deleter."""

    def __init__(
        self,
        store: MetadataStore,
        deleter: Deleter,
        settings: Settings,
        *,
        dry_run: bool,
        clock: Callable[[], int],
    ) -> None:
        self.store = store
        self.deleter = deleter
        self.settings = settings
        self.dry_run = dry_run
        self.clock = clock

    # --- reading ------------------------------------------------------------------------

    def read_cursors(self, names: Sequence[str]) -> list[CursorSnapshot | LedgerGcError]:
        """Every managed ledger's cursor positions (pipelined); an error stands in for a
        managed ledger whose cursors cannot be decoded, so it alone is skipped."""
        ml_paths = [paths.managed_ledger_path(name) for name in names]
        children = self.store.children_of_many(ml_paths)
        cursor_paths = [
            paths.cursor_path(name, cursor)
            for name, cursors in zip(names, children, strict=True)
            for cursor in cursors
        ]
        raws = iter(self.store.get_many_raw(cursor_paths))
        snapshots: list[CursorSnapshot | LedgerGcError] = []
        for name, cursors in zip(names, children, strict=True):
            positions: dict[str, Position] = {}
            failure: LedgerGcError | None = None
            for cursor in cursors:
                raw = next(raws)
                if raw is None:
                    continue  # deleted since the listing: a deleted cursor needs nothing
                try:
                    info = formats.decode_managed_cursor_info(
                        raw[0], path=paths.cursor_path(name, cursor)
                    )
                except LedgerGcError as exc:
                    failure = exc
                    continue
                positions[cursor] = mark_delete_of(info)
            snapshots.append(failure if failure is not None else CursorSnapshot(positions))
        return snapshots

    def read_records(self, names: Sequence[str]) -> list[ManagedLedgerInfo | LedgerGcError | None]:
        """Every managed ledger's record (pipelined); None where it no longer exists."""
        ml_paths = [paths.managed_ledger_path(name) for name in names]
        records: list[ManagedLedgerInfo | LedgerGcError | None] = []
        for path, raw in zip(ml_paths, self.store.get_many_raw(ml_paths), strict=True):
            if raw is None:
                records.append(None)
                continue
            try:
                # Empty content is a managed ledger with no ledgers yet (Pulsar creates it
                # so). Unlike an orphan scan, the trim reads that as "nothing to trim",
                # which is the safe answer.
                records.append(
                    formats.decode_managed_ledger_info(raw[0], path=path, allow_empty=True)
                )
            except LedgerGcError as exc:
                records.append(exc)
        return records

    # --- trimming -----------------------------------------------------------------------

    def trim(
        self, names: Sequence[str], results: list[ManagedLedgerTrim] | None = None
    ) -> list[ManagedLedgerTrim]:
        """Trim every managed ledger of ``names``; one failing does not stop the others.

        Each result is appended to ``results`` (a new list by default) as soon as it is
        known. Raises MetadataUnavailableError when ZooKeeper is gone: nothing more can be
        done safely, and ``results`` then holds the managed ledgers finished so far.
        """
        results = [] if results is None else results
        for start in range(0, len(names), BATCH_SIZE):
            batch = list(names[start : start + BATCH_SIZE])
            # Cursors strictly before records: see the module docstring.
            cursors = self.read_cursors(batch)
            records = self.read_records(batch)
            for name, snapshot, record in zip(batch, cursors, records, strict=True):
                results.append(self.trim_one(name, snapshot, record))
        return results

    def trim_one(
        self,
        name: str,
        snapshot: CursorSnapshot | LedgerGcError,
        record: ManagedLedgerInfo | LedgerGcError | None,
    ) -> ManagedLedgerTrim:
        result = ManagedLedgerTrim(name, self.settings.retention_for(name))
        writes_before = self.store.writes
        try:
            if isinstance(snapshot, LedgerGcError):
                raise snapshot
            if isinstance(record, LedgerGcError):
                raise record
            if record is None:
                result.missing = True
                return result
            self._plan(result, snapshot, record)
            if self.dry_run:
                return result
            self._apply(result, snapshot, record)
        except MetadataUnavailableError:
            raise
        except ManagedLedgerNotFoundError:
            result.missing = True  # deleted while we worked on it: nothing left to trim
        except LedgerGcError as exc:
            result.error = str(exc)
            log.error("%s: trim failed, nothing more done to it this run: %s", name, exc)
        finally:
            result.zk_writes = self.store.writes - writes_before - len(result.cursors_moved)
        return result

    def _plan(
        self, result: ManagedLedgerTrim, snapshot: CursorSnapshot, record: ManagedLedgerInfo
    ) -> None:
        decision = decide_trim(
            ledger_stats(record), snapshot.mark_deletes, result.retention, self.clock()
        )
        result.cursors = len(snapshot.positions)
        result.slowest_reader = str(decision.slowest_reader) if decision.slowest_reader else None
        result.slowest_reader_ledger_id = decision.slowest_reader_ledger_id
        result.stop_reason = decision.stop_reason
        result.to_mark = [
            PlannedLedger(
                c.ledger.ledger_id, c.ledger.entries, c.ledger.size, c.ledger.timestamp, c.reason
            )
            for c in decision.candidates
        ]
        path = paths.managed_ledger_path(result.name)
        result.already_marked = [
            _marker_state(ledger_id, value)
            for ledger_id, value in sorted(formats.deletable_markers(record, path=path).items())
        ]

    def _apply(
        self, result: ManagedLedgerTrim, snapshot: CursorSnapshot, record: ManagedLedgerInfo
    ) -> None:
        name = result.name
        info = record
        if result.to_mark:
            info = self._mark(result, snapshot)
        if info.ledgerInfo:
            first_listed = info.ledgerInfo[0].ledgerId
            behind = any(moved_mark_delete(md, first_listed) for md in snapshot.mark_deletes)
            if result.marked or behind:
                self._move_cursors(result, first_listed)
        if formats.deletable_markers(info, path=paths.managed_ledger_path(name)):
            self._delete_marked(result, info)
        if result.marked or result.deleted or result.pending or result.cursors_moved:
            log.info(
                "%s: marked %s, deleted %d ledgers (%d bytes), %d pending, cursors moved: %s",
                name,
                result.marked or "nothing",
                len(result.deleted),
                sum(d.bytes for d in result.deleted),
                len(result.pending),
                result.cursors_moved or "none",
            )

    def _mark(self, result: ManagedLedgerTrim, snapshot: CursorSnapshot) -> ManagedLedgerInfo:
        """Phase one: one CAS that drops the eligible prefix and marks it."""
        now = self.clock()
        reason = f"trim {self.deleter.run_id}: consumed by every cursor, past retention"
        marked: list[int] = []
        decisions: list[TrimDecision] = []

        def mutate(info: ManagedLedgerInfo) -> bool:
            # Decided again from *this* record (the CAS re-reads it on every conflict) and
            # the cursor positions read before any record: see the module docstring.
            decision = decide_trim(ledger_stats(info), snapshot.mark_deletes, result.retention, now)
            decisions[:] = [decision]
            marked[:] = mark_deletable(info, decision.ledger_ids, now, reason)
            return bool(marked)

        written = self.store.update_managed_ledger(result.name, mutate)
        result.marked = list(marked)
        if decisions and decisions[0].ledger_ids != [p.ledger_id for p in result.to_mark]:
            log.info(
                "%s: the record changed since the plan; marked %s instead of %s",
                result.name,
                result.marked,
                [p.ledger_id for p in result.to_mark],
            )
        return written.value

    def _move_cursors(self, result: ManagedLedgerTrim, first_listed: int) -> None:
        """Move every cursor whose mark-delete is before the first listed ledger.

        The cursors are read again here, after the mark, so that a cursor created since
        the snapshot is moved too. Each move is a CAS on the cursor's znode that only
        ever moves it forward, so it cannot undo an ack that lands meanwhile, and the
        consumer's next write keeps the further of the two positions (``ManagedCursor``).
        Running this again (after a crash between mark and move) finds the same cursors.
        """
        name = result.name
        fresh = self.read_cursors([name])[0]
        if isinstance(fresh, LedgerGcError):
            raise fresh
        for cursor, position in sorted(fresh.positions.items()):
            if moved_mark_delete(position, first_listed) is None:
                continue
            moved: list[bool] = []

            def mutate(info: ManagedCursorInfo, moved: list[bool] = moved) -> bool:
                target = moved_mark_delete(mark_delete_of(info), first_listed)
                moved[:] = [target is not None]
                if target is None:
                    return False  # the consumer got past it meanwhile
                info.markDeleteLedgerId = target.ledger_id
                info.markDeleteEntryId = target.entry_id
                _drop_acks_through(info, target)
                return True

            try:
                self.store.update_cursor(name, cursor, mutate)
            except CursorNotFoundError:
                continue  # deleted meanwhile
            if moved and moved[0]:
                result.cursors_moved.append(cursor)

    def _delete_marked(self, result: ManagedLedgerTrim, info: ManagedLedgerInfo) -> None:
        """Phase two: delete every marker's data; unmark what is gone, in one CAS."""
        path = paths.managed_ledger_path(result.name)
        markers = formats.deletable_markers(info, path=path)
        both = sorted(set(markers) & {ledger.ledgerId for ledger in info.ledgerInfo})
        if both:
            # Only a CAS that drops a ledger from the list may mark it; a marker on a
            # listed ledger was written by something else, and its data may be live.
            raise SafetyRefusalError(
                f"{result.name}: ledgers {both} are both listed and marked deletable in "
                f"{path}; nothing of this managed ledger was deleted. Check whether they "
                "are live and remove the wrong marker (ledger-gc.deletable.<id>) by hand"
            )
        purged = purge_marked(
            result.name,
            self.store,
            self.deleter,
            operation=OPERATION,
            now_ms=self.clock(),
            info=info,
        )
        result.deleted = [
            DeletedLedger(o.target.ledger_id, o.objects, o.bytes)
            for o in purged.deleted
            if o.target.ledger_id is not None
        ]
        for ledger_id, error in sorted(purged.pending.items()):
            before = _marker_state(ledger_id, markers[ledger_id])
            result.pending.append(
                MarkerState(
                    ledger_id=ledger_id,
                    size=before.size,
                    entries=before.entries,
                    marked_at=before.marked_at,
                    attempts=before.attempts + 1,
                    last_error=error,
                )
            )


def _marker_state(ledger_id: int, value: dict) -> MarkerState:
    last_error = value.get("lastError")
    return MarkerState(
        ledger_id=ledger_id,
        size=int(value["size"]),
        entries=int(value["entries"]),
        marked_at=int(value["markedAt"]),
        attempts=int(value.get("attempts", 0)),
        last_error=str(last_error) if last_error is not None else None,
    )


def _drop_acks_through(info: ManagedCursorInfo, position: Position) -> None:
    """Keep the individually acked ranges consistent with a moved mark-delete: a range
    wholly at or before it goes, one that straddles it starts at it."""
    ranges = info.individualDeletedMessages
    for index in reversed(range(len(ranges))):
        lower, upper = ranges[index].lowerEndpoint, ranges[index].upperEndpoint
        if Position(upper.ledgerId, upper.entryId) <= position:
            del ranges[index]
        elif Position(lower.ledgerId, lower.entryId) < position:
            lower.ledgerId, lower.entryId = position.ledger_id, position.entry_id
