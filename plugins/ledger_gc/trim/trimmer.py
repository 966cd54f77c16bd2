"""The mark-then-delete trim of managed ledgers, against ZooKeeper and S3.

For each managed ledger:

1. **Read** the record and then every durable cursor, each with its znode version (a
   cursor created after the record was read changed the record's version, see below).
2. **Decide** (``eligibility.decide_trim``, Pulsar's rules) from exactly that state; this
   is what the report shows and all a dry run does.
3. **Mark** (phase one) in one ZooKeeper ``multi`` (``MetadataStore.commit_trim``): set
   the record, with the chosen ledgers moved from the list to ``ledger-gc.deletable.<id>``
   markers, at the version it was read at; *check* every cursor at the version it was
   read at; and move the cursors that sat on the last entry of a dropped ledger to the
   first remaining one, also at their versions. If anything changed since step 1 (an ack,
   a reset, a rollover, a new cursor) the whole multi fails: read again, decide again.
4. **Delete** (phase two, ``marking.purge_marked``): the data of every marker, this run's
   and earlier runs', after a last look at the cursors (below); markers of what is gone
   go in one CAS; a failure keeps the marker, with its attempt count and last error.

Why this is safe while writers, consumers and admins keep working:

* **The decision and the mark are one atomic step.** The multi commits only if the
  record and every cursor are exactly as read, so at the instant the ledgers leave the
  list every cursor was past them and retention let them go. Nothing is assumed about
  how cursors move: a subscription reset backwards (``reset-cursor``, seek to earliest)
  between the read and the mark makes the multi fail, and the trim decides again from
  the reset position.
* **A topic deleted and created again** starts its znode versions again, so a version
  alone could match a new record the decision never saw; the record's creation zxid is
  checked just before the multi and in its answer (``commit_trim``).
* **One writing trim run at a time** (``trim/lock.py``; the DAG's shards of one run
  share it): two overlapping runs would purge, audit and report the same marked ledger
  twice.
* **New cursors.** Creating a cursor through this library re-sets the record in the same
  multi (``create_cursor_from_record``), so a trim that decided without the new cursor
  fails on the record's version; a cursor created after the mark starts at the oldest
  ledger still listed, as in Pulsar.
* **After the mark, nobody can point into marked data through the library** (a reset is
  conditioned on the record too: ``ManagedCursor.reset``). For a cursor written by any
  other means (a plain znode create or set: a multi cannot check that no child was
  added), the delete step reads every cursor again just before deleting and keeps a
  marked ledger whose data some cursor has not consumed (``unconsumed_marked_ledger``),
  putting it back in the ledger list when its data is whole (``_restore``) so the
  cursor can read it; the trim never moves such a cursor forward (which would undo a
  reset). A cursor whose position lives in a cursor ledger (BookKeeper) is unreadable
  here: the trim of its managed ledger refuses, and the guard keeps everything.
* **A broker that starts mid-run** is seen before the next batch's marks
  (``metadata_is_read_only``), and the run stops.
* **Only what the store holds is reported.** A marker whose ledger has no blocks is
  dropped as "already gone" only on evidence: blocks of the ledgers its managed ledger
  lists or marks are where the settings point, or the audit log announced its deletion;
  otherwise it stays (``marking``). A run whose sample of managed ledgers finds none of
  their listed ledgers' data refuses before marking (``probe_store``).
* **Records stay writable.** Every write keeps the record's framing (raw or Pulsar's
  compressed frame) and fits ``LEDGERGC_ZK_MAX_RECORD_BYTES``; a mark too big for one
  write is done in rounds, oldest ledgers first, each purged before the next.

A managed ledger that fails (an undecodable record, a name the store cannot hold, a
record too big) is reported and the run goes on with the next; only ZooKeeper or the
audit log becoming unavailable stops the run.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NoNodeError

from ledger_gc.deletion import OFFLOADED_LEDGER, Deleter, TargetOutcome
from ledger_gc.errors import (
    AuditUnavailableError,
    ConcurrentUpdateError,
    LedgerGcError,
    ManagedLedgerNotFoundError,
    MetadataUnavailableError,
    RecordTooLargeError,
    SafetyRefusalError,
    StoppedError,
)
from ledger_gc.formats.framing import Framing
from ledger_gc.formats.markers import deletable_markers, marker_key
from ledger_gc.formats.records import (
    decode_managed_cursor_info_framed,
    decode_managed_ledger_info_framed,
    get_property,
    remove_properties,
)
from ledger_gc.ledger.cursor import mark_delete_of
from ledger_gc.ledger.delete import DELETING_PROPERTY
from ledger_gc.marking import (
    Guard,
    PurgePlan,
    PurgeResult,
    announced_by,
    finish_purge,
    ledgers_root,
    list_ledger_blocks,
    mark_deletable,
    plan_purge,
)
from ledger_gc.metadata import paths
from ledger_gc.metadata.read_only import BROKERS_PATH, metadata_is_read_only
from ledger_gc.metadata.store import CursorWrite, MetadataStore
from ledger_gc.metadata.zk_client import guarded
from ledger_gc.positions import Position, ledger_stats
from ledger_gc.proto.mldataformats_pb2 import ManagedCursorInfo, ManagedLedgerInfo
from ledger_gc.settings import Settings
from ledger_gc.storage.keys import parse_key
from ledger_gc.storage.ledger_blocks import BlockRef
from ledger_gc.storage.s3_bucket import ObjectInfo
from ledger_gc.trim.eligibility import (
    TrimDecision,
    decide_trim,
    moved_mark_delete,
    unconsumed_marked_ledger,
)
from ledger_gc.trim.report import DeletedLedger, ManagedLedgerTrim, MarkerState, PlannedLedger

log = logging.getLogger(__name__)

OPERATION = "trim"
# Managed ledgers read per batch: big enough to amortise round trips, small enough that
# a read is still fresh when its managed ledger's turn comes (a stale one only costs a
# failed multi and a re-read).
BATCH_SIZE = 256
# Managed ledgers sampled by the store probe.
PROBE_SAMPLES = 16


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


@dataclass
class MarkPlan:
    """One multi: the record after marking, the cursors it moves, the ones it checks."""

    record: ManagedLedgerInfo
    marked: list[int]
    moves: list[CursorWrite]
    checks: list[tuple[str, int]]


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
        workers: int = 8,
        offload: Deleter | None = None,
        stamp_clock: Callable[[], int] | None = None,
    ) -> None:
        self.store = store
        # Tiered storage: deletes offloaded ledgers' copies (None: tiered storage off).
        self.offload = offload
        # The audit log's announced deletions, read once, only if a marker's data is not
        # found (``marking.plan_purge``: evidence of an earlier, interrupted run).
        self.audited = announced_by(deleter)
        # Managed ledgers decided, marked and purged at once (their requests overlap;
        # ZooKeeper and S3 answer many in parallel).
        self.workers = workers
        self.deleter = deleter
        self.settings = settings
        self.dry_run = dry_run
        self.clock = clock  # decides retention (run.py: the earlier of host's and S3's)
        # Stamps ledgers that have no creation time (the later clock: keeps them longer).
        self.stamp_clock = stamp_clock or clock
        self.store_verified = False
        # Set by a ZooKeeper watch when a broker registers (or leaves) mid-run: every
        # managed ledger's mark asks it first (``_check_writable`` reads once per batch).
        self._brokers_changed = threading.Event()
        # Asked between managed ledgers (and by the deleter between batches).
        self.should_stop = deleter.should_stop

    # --- reading ------------------------------------------------------------------------

    def read_states(self, names: Sequence[str]) -> list[LedgerState | LedgerGcError | None]:
        """Every managed ledger's record and cursors with their versions (batched reads);
        None where the managed ledger no longer exists, an error where it cannot be
        decoded (that one alone is skipped)."""
        ml_paths = [paths.managed_ledger_path(name) for name in names]
        # The record first, then its cursors: a cursor created after the record was read
        # re-set the record (``create_cursor_from_record``), so the mark's multi fails on
        # the record's version; one created before it is in the listing that follows.
        records = self.store.get_many(ml_paths)
        children = self.store.children_of_many(ml_paths)
        cursor_paths = [
            paths.cursor_path(name, cursor)
            for name, cursors in zip(names, children, strict=True)
            for cursor in cursors
        ]
        raws = iter(self.store.get_many_raw(cursor_paths))
        states: list[LedgerState | LedgerGcError | None] = []
        for path, cursors, raw_record in zip(ml_paths, children, records, strict=True):
            cursor_raws = [(cursor, next(raws)) for cursor in cursors]
            if raw_record is None:
                states.append(None)
                continue
            try:
                # Empty content is a managed ledger with no ledgers yet (Pulsar creates it
                # so); for the trim that is "nothing to trim", the safe answer.
                record, framing = decode_managed_ledger_info_framed(
                    raw_record[0], path=path, allow_empty=True
                )
                stat = raw_record[1]
                state = LedgerState(record, stat.version, framing, czxid=stat.czxid)
                for cursor, raw in cursor_raws:
                    if raw is None:
                        continue  # deleted since the listing: a deleted cursor needs nothing
                    info, cursor_framing = decode_managed_cursor_info_framed(
                        raw[0], path=f"{path}/{cursor}"
                    )
                    state.cursors[cursor] = CursorState(info, raw[1], cursor_framing)
                states.append(state)
            except LedgerGcError as exc:
                states.append(exc)
        return states

    def read_state(self, name: str) -> LedgerState:
        state = self.read_states([name])[0]
        if state is None:
            raise ManagedLedgerNotFoundError(f"managed ledger {name} not found")
        if isinstance(state, LedgerGcError):
            raise state
        return state

    # --- the store probe ----------------------------------------------------------------

    def probe_store(
        self, states: Sequence[LedgerState | LedgerGcError | None], names: Sequence[str]
    ) -> None:
        """Refuse the run if the bucket and prefix hold none of the data the metadata
        says exists: a wrong ``LEDGERGC_PREFIX`` or ``LEDGERGC_BUCKET``.

        Samples managed ledgers that list closed, non-empty ledgers whose data is not only
        in tiered storage, and asks for any one block under each one's ``ledgers/``
        directory (a LIST of at most one key). Any sample with data verifies the location
        for the run.
        """
        samples: list[tuple[str, set[int]]] = []
        for name, state in zip(names, states, strict=True):
            if not isinstance(state, LedgerState):
                continue
            closed = _closed_ledgers(state.record)
            expected = {li.ledgerId for li in closed if _holds_store_data(li)}
            if expected:
                samples.append((name, expected))
            if len(samples) >= PROBE_SAMPLES:
                break
        storage = self.deleter.storage
        for name, expected in samples:
            try:
                listing = list_ledger_blocks(self.deleter, name)
            except ValueError:
                continue  # a name the store cannot hold: that managed ledger fails alone
            # Blocks of the very ledgers the record lists, not merely something under the
            # topic's name (another cluster's copy of a same-named topic does not count).
            if expected & listing.keys():
                self.store_verified = True
                return
        if samples:
            raise SafetyRefusalError(
                f"none of {len(samples)} managed ledgers whose metadata lists closed ledgers "
                f"has any data in s3://{storage.bucket}/{storage.settings.key_prefix} (e.g. "
                f"{samples[0][0]}); check LEDGERGC_BUCKET and LEDGERGC_PREFIX. Nothing was "
                "marked or deleted"
            )

    # --- trimming -----------------------------------------------------------------------

    def trim(
        self, names: Sequence[str], results: list[ManagedLedgerTrim] | None = None
    ) -> list[ManagedLedgerTrim]:
        """Trim every managed ledger of ``names``; one failing does not stop the others.

        Batches of ``BATCH_SIZE`` managed ledgers: their records and cursors are read in a
        few requests; each is decided and marked on its own (``workers`` at a time); then
        the marked data of the whole batch is deleted together, in full DeleteObjects
        requests, and each managed ledger's markers are dropped in its own CAS.

        Each result is appended to ``results`` (a new list by default) once its batch is
        done. Raises MetadataUnavailableError when ZooKeeper is gone and
        AuditUnavailableError when the audit log cannot be written: nothing more can be
        done safely, and ``results`` then holds the managed ledgers finished so far.
        Raises StoppedError when asked to stop (``should_stop``), after the batch under
        way.
        """
        results = [] if results is None else results
        with ThreadPoolExecutor(self.workers, thread_name_prefix="ledgergc-trim") as pool:
            for start in range(0, len(names), BATCH_SIZE):
                batch = list(names[start : start + BATCH_SIZE])
                states = self.read_states(batch)
                if start == 0:
                    self.probe_store(states, batch)
                if not self.dry_run:
                    self._check_writable()
                marked, fatal = _each(
                    pool, lambda item: self.mark_one(*item), list(zip(batch, states, strict=True))
                )
                done = [item for item in marked if item is not None]
                if fatal is None and not self.dry_run:
                    failed = self.purge_many(
                        [(r, info) for r, info in done if info is not None], pool
                    )
                    done = [(r, info) for r, info in done if id(r) not in failed]
                    fatal = next(iter(failed.values()), None)
                results.extend(result for result, _ in done)
                if fatal is not None:
                    raise fatal
                if self.should_stop():
                    raise StoppedError(
                        f"stopped on request after {len(results)} of {len(names)} managed "
                        "ledgers (the delete batch under way finished and was audited); the "
                        "next run goes on from there"
                    )
        return results

    def _check_writable(self) -> None:
        """Before each batch's marks: a broker that started since (a rolling restart)
        owns these topics now and would fence one whose record changes under it. A watch
        on the brokers' znode catches one that registers *during* the batch: each mark
        asks ``_writable_now`` first, which costs no request."""
        if self.settings.metadata_read_only == "auto":
            self._watch_brokers()
        read_only, why = metadata_is_read_only(self.store, self.settings)
        if read_only:
            raise SafetyRefusalError(
                f"the metadata became read-only during the run ({why}); the trim stopped "
                "before marking more"
            )

    def _watch_brokers(self) -> None:
        def fired(_event: object) -> None:
            self._brokers_changed.set()

        def watch() -> None:
            try:
                self.store.client.get_children(BROKERS_PATH, watch=fired)
            except NoNodeError:
                if self.store.client.exists(BROKERS_PATH, watch=fired) is not None:
                    self._brokers_changed.set()  # created between the two calls

        guarded(f"watching {BROKERS_PATH}", self.store.hosts, watch)

    def _writable_now(self, name: str) -> None:
        """Before one managed ledger's mark: no broker registered since the batch began."""
        if self._brokers_changed.is_set():
            raise BrokerRegisteredError(
                f"a Pulsar broker registered under {BROKERS_PATH} during the run: the "
                f"metadata is read-only now; the trim stopped before marking {name}"
            )

    def mark_one(
        self, name: str, state: LedgerState | LedgerGcError | None
    ) -> tuple[ManagedLedgerTrim, ManagedLedgerInfo | None]:
        """Phase one for one managed ledger: plan and, unless a dry run, mark. Returns the
        result and the record as marked when it has markers to purge (else None)."""
        result = ManagedLedgerTrim(name, self.settings.retention_for(name))
        if isinstance(state, LedgerGcError):
            result.error = str(state)
            log.error("%s: trim failed, nothing done to it this run: %s", name, state)
            return result, None
        if state is None:
            result.missing = True
            return result, None
        marked: list[ManagedLedgerInfo] = []

        def run() -> None:
            self._plan(result, state)
            if not self.dry_run:
                self._writable_now(name)
                marked.append(self._apply(result, state))

        self._guarded(result, run)
        info = marked[0] if marked else None
        if info is None or not deletable_markers(info):
            return result, None
        return result, info

    def _guarded(self, result: ManagedLedgerTrim, step: Callable[[], None]) -> None:
        """Run a step for one managed ledger; its failure is its own (reported), except
        losing ZooKeeper or the audit log, which stops the run."""
        writes_before = self.store.thread_writes()
        try:
            step()
        except (MetadataUnavailableError, AuditUnavailableError, BrokerRegisteredError):
            raise
        except ManagedLedgerNotFoundError:
            result.missing = True  # deleted while we worked on it: nothing left to trim
        except Exception as exc:  # one managed ledger must never stop the others
            result.error = str(exc) if isinstance(exc, LedgerGcError) else f"{exc!r}"
            log.error(
                "%s: trim failed, nothing more done to it this run: %s",
                result.name,
                exc,
                exc_info=not isinstance(exc, LedgerGcError),
            )
        finally:
            result.zk_writes += self.store.thread_writes() - writes_before

    def _decide(self, name: str, state: LedgerState, retention: Any) -> TrimDecision:
        for cursor, cursor_state in sorted(state.cursors.items()):
            if cursor_state.info.cursorsLedgerId != -1:
                # Pulsar then keeps the live position in a BookKeeper ledger; the znode
                # has only the position of the last switch, which a reset since may have
                # moved back. Deciding from it could delete what the cursor needs.
                raise SafetyRefusalError(
                    f"cursor {cursor} of {name} keeps its position in cursor ledger "
                    f"{cursor_state.info.cursorsLedgerId} (BookKeeper), which ledger-gc "
                    "cannot read; nothing of this managed ledger was trimmed"
                )
        stats = ledger_stats(state.record)
        current_size = None
        if retention.bytes > 0 and stats and stats[-1].entries == 0:
            # Only the size quota needs the open ledger's bytes, and only when it is set.
            current_size = self.deleter.storage.ledger_payload_bytes(name, stats[-1].ledger_id)
        return decide_trim(stats, state.positions(), retention, self.clock(), current_size)

    def _plan(self, result: ManagedLedgerTrim, state: LedgerState) -> None:
        decision = self._decide(result.name, state, result.retention)
        result.cursors = len(state.cursors)
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
        markers = deletable_markers(state.record, path=path)
        result.already_marked = [_marker_state(i, value) for i, value in sorted(markers.items())]

    def _apply(self, result: ManagedLedgerTrim, state: LedgerState) -> ManagedLedgerInfo:
        """Mark what is consumed (rounds if it does not fit in one write); the record as
        it stands after the mark, whose markers phase two purges."""
        name = result.name
        conflicts = 0
        while True:
            decision = self._decide(name, state, result.retention)
            plan = self._fit(name, state, decision.ledger_ids)
            if plan is None:
                break  # nothing to mark and no cursor to move
            written = self.store.commit_trim(
                name,
                plan.record,
                state.version,
                state.framing,
                plan.checks,
                plan.moves,
                record_czxid=state.czxid,
            )
            if written is None:
                conflicts += 1
                if conflicts >= self.store.max_cas_attempts:
                    raise ConcurrentUpdateError(
                        f"{name}: the record or a cursor changed {conflicts} times while the "
                        "trim decided; retry later"
                    )
                state = self.read_state(name)  # something changed: decide again
                continue
            result.marked += plan.marked
            result.cursors_moved += [
                m.cursor for m in plan.moves if m.cursor not in result.cursors_moved
            ]
            if plan.marked:
                log.info("%s: marked %s", name, plan.marked)
            if len(plan.marked) == len(decision.ledger_ids):
                state.record, state.version = written.value, written.version
                break
            # The mark did not fit in one write: purge what is marked (the record
            # shrinks), then go on with the next round from a fresh read.
            self._purge(result, written.value)
            state = self.read_state(name)
        return state.record

    def _fit(self, name: str, state: LedgerState, chosen: list[int]) -> MarkPlan | None:
        """The largest mark of the oldest ``chosen`` ledgers that fits in one write."""
        plan = self._mark_plan(state, chosen)
        if plan is None:
            return None
        try:
            self._check_size(name, state, plan)
            return plan
        except RecordTooLargeError:
            if len(chosen) <= 1:
                raise
        low, high = 0, len(chosen) - 1  # invariant: low fits (0: nothing), high+1 does not
        best: MarkPlan | None = None
        while low < high:
            middle = (low + high + 1) // 2
            candidate = self._mark_plan(state, chosen[:middle])
            try:
                if candidate is not None:
                    self._check_size(name, state, candidate)
                low, best = middle, candidate
            except RecordTooLargeError:
                high = middle - 1
        if best is None or not best.marked:
            raise RecordTooLargeError(
                f"{name}: marking even one ledger would not fit in one ZooKeeper write "
                f"(LEDGERGC_ZK_MAX_RECORD_BYTES={self.store.max_record_bytes}); nothing marked"
            )
        log.info(
            "%s: %d ledgers to mark; %d fit in this write, the rest follow",
            name,
            len(chosen),
            len(best.marked),
        )
        return best

    def _check_size(self, name: str, state: LedgerState, plan: MarkPlan) -> None:
        self.store.encode_trim(name, plan.record, state.framing, plan.checks, plan.moves)

    def _mark_plan(self, state: LedgerState, chosen: list[int]) -> MarkPlan | None:
        record = ManagedLedgerInfo()
        record.CopyFrom(state.record)
        now = self.clock()
        stamp = max(now, self.stamp_clock())
        for ledger in record.ledgerInfo:
            if not ledger.timestamp:
                # Pulsar stamps a ledger without a timestamp with its load time and writes
                # it back; doing the same lets time retention start counting for it.
                ledger.timestamp = stamp
        marked = mark_deletable(record, chosen, now)
        markers = deletable_markers(record)
        marked_entries = {ledger_id: int(m["entries"]) for ledger_id, m in markers.items()}
        remaining = sorted(ledger.ledgerId for ledger in record.ledgerInfo)
        moves: list[CursorWrite] = []
        checks: list[tuple[str, int]] = []
        for cursor, cursor_state in sorted(state.cursors.items()):
            target = (
                moved_mark_delete(cursor_state.position, remaining[0], marked_entries)
                if remaining
                else None
            )
            if target is None:
                checks.append((cursor, cursor_state.version))
                continue
            info = ManagedCursorInfo()
            info.CopyFrom(cursor_state.info)
            info.markDeleteLedgerId, info.markDeleteEntryId = target.ledger_id, target.entry_id
            _drop_acks_through(info, target)
            moves.append(CursorWrite(cursor, info, cursor_state.version, cursor_state.framing))
        if not marked and not moves:
            return None
        if not marked:
            # Nothing to mark, only cursors to move: the record is written unchanged
            # (still at its version, so the moves are decided against it).
            record.CopyFrom(state.record)
        return MarkPlan(record, marked, moves, checks)

    # --- phase two ----------------------------------------------------------------------

    def _cursor_guard(
        self, name: str, needed: list[int], fresh: LedgerState | None = None
    ) -> Guard:
        """Just before deleting: every cursor as the leader has it now. A marked ledger
        whose data some cursor has not consumed is kept (see the module docstring), and
        its id goes to ``needed`` (to be put back in the list).

        ``fresh``: the managed ledger as ``reread`` read it for the whole batch, after a
        sync, after the batch's marks and before its deletes; without it, it is read here.
        """
        # Applied even to a managed ledger being deleted (``ledger-gc.deleting``): its
        # cursors then still need its marked ledgers, and the delete, not the trim,
        # finishes it. A stale flag on a topic in use must not switch the guard off.
        if fresh is None:
            self.store.sync(paths.managed_ledger_path(name))
            fresh = self.read_state(name)
        positions = fresh.cursors

        def guard(ledger_id: int, marker: Mapping[str, Any]) -> str | None:
            marked = {ledger_id: int(marker["entries"])}
            for cursor, state in sorted(positions.items()):
                if state.info.cursorsLedgerId != -1:
                    return (
                        f"cursor {cursor} now keeps its position in cursor ledger "
                        f"{state.info.cursorsLedgerId}, which ledger-gc cannot read; data kept"
                    )
                if unconsumed_marked_ledger(state.position, marked) is not None:
                    needed.append(ledger_id)
                    return (
                        f"cursor {cursor} at {state.position} has not consumed it (reset "
                        "back?); data kept"
                    )
            return None

        return guard

    def reread(self, names: Sequence[str]) -> list[LedgerState | LedgerGcError | None]:
        """The cursor re-read before the deletes, for a whole batch at once: one sync (a
        ZooKeeper sync brings the server this session reads from up to date with the
        leader as a whole, whatever its path), then the batched reads of ``read_states``
        instead of a sync and three reads per managed ledger."""
        if names:
            self.store.sync(paths.managed_ledger_path(names[0]))
        return self.read_states(names)

    def _list_batch(self, names: Sequence[str]) -> dict[str, list[ObjectInfo]]:
        """Every managed ledger's ``ledgers/`` directory listed for the batch at once (a
        namespace's managed ledgers in one listing when it holds little else); any that
        cannot be (a bad name, a failed listing) is listed on its own by its plan."""
        roots: dict[str, str] = {}
        for name in names:
            try:
                roots[name] = ledgers_root(self.deleter, name)
            except ValueError:
                continue  # a name the store cannot hold: that managed ledger fails alone
        try:
            listed = self.deleter.storage.list_prefixes(roots.values())
        except Exception as exc:
            log.warning(
                "cannot list the batch's %d managed ledgers at once (%s); listing each one",
                len(roots),
                exc,
            )
            return {}
        return {name: listed[root] for name, root in roots.items()}

    def _plan_purge(
        self,
        result: ManagedLedgerTrim,
        info: ManagedLedgerInfo,
        fresh: LedgerState | LedgerGcError | None = None,
        *,
        reread: bool = False,
        listed: Sequence[ObjectInfo] | None = None,
    ) -> PurgePlan:
        """``reread``: ``fresh`` is this managed ledger as ``reread`` found it (None:
        deleted since); otherwise the guard reads it itself. ``listed``: its complete
        ``ledgers/`` listing, made for the batch; otherwise it is listed here."""
        if reread:
            if fresh is None:
                raise ManagedLedgerNotFoundError(f"managed ledger {result.name} not found")
            if isinstance(fresh, LedgerGcError):
                raise fresh
        path = paths.managed_ledger_path(result.name)
        markers = deletable_markers(info, path=path)
        both = sorted(set(markers) & {ledger.ledgerId for ledger in info.ledgerInfo})
        if both:
            # Only a CAS that drops a ledger from the list may mark it; a marker on a
            # listed ledger was written by something else, and its data may be live.
            raise SafetyRefusalError(
                f"{result.name}: ledgers {both} are both listed and marked deletable in "
                f"{path}; nothing of this managed ledger was deleted. Check whether they "
                "are live and remove the wrong marker (ledger-gc.deletable.<id>) by hand"
            )
        needed: list[int] = []
        plan = plan_purge(
            result.name,
            info,
            self.deleter,
            operation=OPERATION,
            guard=self._cursor_guard(
                result.name, needed, fresh if isinstance(fresh, LedgerState) else None
            ),
            store_verified=self.store_verified,
            reason=f"trim {self.deleter.run_id}: consumed by every cursor, past retention",
            offload=self.offload,
            audited=self.audited,
            listed=listed,
        )
        deleting = get_property(info, DELETING_PROPERTY) is not None
        if needed and not deleting:  # a managed ledger being deleted gets nothing back
            for ledger_id in self._restore(result.name, markers, needed):
                plan.result.pending.pop(ledger_id, None)
                result.restored.append(ledger_id)
        return plan

    def _restore(
        self, name: str, markers: Mapping[int, Mapping[str, Any]], needed: list[int]
    ) -> list[int]:
        """Put marked ledgers that a cursor still needs back in the ledger list, when all
        their data is still there: a cursor created or reset into them by another tool
        can then read them again (Pulsar would never have dropped them). One CAS."""
        blocks = list_ledger_blocks(self.deleter, name)
        whole = [
            ledger_id
            for ledger_id in sorted(needed)
            if self._all_entries_stored(
                blocks.get(ledger_id, []), int(markers[ledger_id]["entries"])
            )
        ]
        if not whole:
            return []

        def mutate(record: ManagedLedgerInfo) -> bool:
            listed = {ledger.ledgerId for ledger in record.ledgerInfo}
            current = deletable_markers(record)
            back = [i for i in whole if i in current and i not in listed]
            for ledger_id in back:
                restore_ledger_info(record.ledgerInfo.add(), ledger_id, current[ledger_id])
            remove_properties(record, [marker_key(i) for i in back])
            ordered = sorted(record.ledgerInfo, key=lambda ledger: ledger.ledgerId)
            copies = [type(ledger)() for ledger in ordered]
            for copy, ledger in zip(copies, ordered, strict=True):
                copy.CopyFrom(ledger)
            del record.ledgerInfo[:]
            record.ledgerInfo.extend(copies)
            return bool(back)

        self.store.update_managed_ledger(name, mutate)
        log.warning("%s: ledgers %s put back in the list: a cursor still needs them", name, whole)
        return whole

    def _all_entries_stored(self, blocks: Sequence[Any], entries: int) -> bool:
        """Whether a ledger's blocks hold exactly entries ``0..entries-1``, no gap (each
        block's count read from its index: a rare path, taken only to restore)."""
        storage = self.deleter.storage
        refs = []
        for block in blocks:
            parsed = parse_key(storage.prefix, block.key)
            if parsed.ml_name is None or parsed.ledger_id is None:
                continue
            refs.append(
                BlockRef(
                    block.key,
                    parsed.ml_name,
                    parsed.ledger_id,
                    parsed.first_entry_id or 0,
                    block.size,
                )
            )
        expected_next = 0
        for ref in sorted(refs, key=lambda r: r.first_entry_id):
            if ref.first_entry_id != expected_next:
                return False
            expected_next += storage.block_stats(ref).entry_count
        return expected_next == entries

    def _finish(
        self,
        plan: PurgePlan,
        outcomes: Sequence[TargetOutcome],
        copies: Sequence[TargetOutcome],
    ) -> PurgeResult:
        return finish_purge(
            plan,
            outcomes,
            self.store,
            now_ms=self.clock(),
            offload_outcomes=copies,
            audited=self.audited,
        )

    def _purge(self, result: ManagedLedgerTrim, info: ManagedLedgerInfo) -> None:
        """Phase two for one managed ledger (between the rounds of a big mark)."""
        plan = self._plan_purge(result, info)
        outcomes = self.deleter.delete(plan.targets)
        copies = self.offload.delete(plan.offload_targets) if self.offload else []
        self._record_purge(result, info, self._finish(plan, outcomes, copies))

    def purge_many(
        self, marked: Sequence[tuple[ManagedLedgerTrim, ManagedLedgerInfo]], pool: Executor
    ) -> dict[int, Exception]:
        """Phase two for a batch: plan each managed ledger's purge, delete all their
        blocks together (full DeleteObjects batches across managed ledgers), then drop
        each one's gone markers in its own CAS.

        Returns the managed ledgers (by ``id`` of their result) that hit a run-stopping
        error (ZooKeeper or the audit log gone), with it; the caller stops the run after
        recording the others.
        """
        # Every managed ledger of the batch is marked by now; its cursors are read again
        # (all at once) before any of its data is deleted.
        fresh_states = self.reread([result.name for result, _ in marked])
        fresh_by_id = {
            id(result): fresh for (result, _), fresh in zip(marked, fresh_states, strict=True)
        }
        listings = self._list_batch([result.name for result, _ in marked])

        def plan_one(item: tuple[ManagedLedgerTrim, ManagedLedgerInfo]) -> PurgePlan | None:
            result, info = item
            plans: list[PurgePlan] = []
            self._guarded(
                result,
                lambda: plans.append(
                    self._plan_purge(
                        result,
                        info,
                        fresh_by_id[id(result)],
                        reread=True,
                        listed=listings.get(result.name),
                    )
                ),
            )
            return plans[0] if plans else None

        planned, fatal = _each(pool, plan_one, list(marked))
        if fatal is not None:
            return {
                id(result): fatal
                for (result, _), plan in zip(marked, planned, strict=True)
                if plan is None
            }
        plans = [
            (r, info, plan)
            for (r, info), plan in zip(marked, planned, strict=True)
            if plan is not None
        ]
        targets = [target for _, _, plan in plans for target in plan.targets]
        outcomes = iter(self.deleter.delete(targets))
        copy_targets = [target for _, _, plan in plans for target in plan.offload_targets]
        copies = iter(self.offload.delete(copy_targets) if self.offload else [])
        split = [
            (
                r,
                info,
                plan,
                [next(outcomes) for _ in plan.targets],
                [next(copies) for _ in plan.offload_targets],
            )
            for r, info, plan in plans
        ]

        def finish_one(
            item: tuple[
                ManagedLedgerTrim,
                ManagedLedgerInfo,
                PurgePlan,
                list[TargetOutcome],
                list[TargetOutcome],
            ],
        ) -> ManagedLedgerTrim:
            result, info, plan, done, copied = item
            self._guarded(
                result, lambda: self._record_purge(result, info, self._finish(plan, done, copied))
            )
            return result

        finished, fatal = _each(pool, finish_one, split)
        if fatal is None:
            return {}
        return {
            id(item[0]): fatal
            for item, result in zip(split, finished, strict=True)
            if result is None
        }

    def _record_purge(
        self, result: ManagedLedgerTrim, info: ManagedLedgerInfo, purged: PurgeResult
    ) -> None:
        markers = deletable_markers(info)
        for outcome in purged.deleted:
            if outcome.target.ledger_id is None:
                continue
            done = DeletedLedger(
                outcome.target.ledger_id, outcome.objects, outcome.bytes, outcome.recoverable
            )
            if outcome.target.target_class == OFFLOADED_LEDGER:
                result.offloaded_deleted.append(done)
            else:
                result.deleted.append(done)
        result.cleared += purged.cleared
        for ledger_id, error in sorted(purged.pending.items()):
            before = _marker_state(ledger_id, markers[ledger_id])
            result.pending = [p for p in result.pending if p.ledger_id != ledger_id]
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
        if purged.deleted or purged.pending or purged.cleared:
            log.info(
                "%s: deleted %d ledgers (%d bytes), cleared %d, %d pending",
                result.name,
                len(purged.deleted),
                purged.bytes_reclaimed,
                len(purged.cleared),
                len(purged.pending),
            )


def restore_ledger_info(ledger: Any, ledger_id: int, marker: Mapping[str, Any]) -> None:
    """A LedgerInfo rebuilt from its deletable marker (what the marker kept of it)."""
    ledger.ledgerId = ledger_id
    ledger.entries = int(marker["entries"])
    ledger.size = int(marker["size"])
    ledger.timestamp = int(marker["timestamp"])
    uuid_text = marker.get("offloadUuid")
    if uuid_text:
        value = uuid.UUID(str(uuid_text)).int
        msb, lsb = value >> 64, value & 0xFFFFFFFFFFFFFFFF
        context = ledger.offloadContext
        context.uidMsb = msb - (1 << 64) if msb >= 1 << 63 else msb
        context.uidLsb = lsb - (1 << 64) if lsb >= 1 << 63 else lsb
        if "offloadComplete" in marker:
            context.complete = bool(marker["offloadComplete"])
        if marker.get("offloadDriverName"):
            context.driverMetadata.name = str(marker["offloadDriverName"])
            for key, value_text in dict(marker.get("offloadDriverMetadata") or {}).items():
                context.driverMetadata.properties.add(key=str(key), value=str(value_text))


def _closed_ledgers(record: ManagedLedgerInfo) -> list[Any]:
    """Every listed ledger but the current (highest) one."""
    ledgers = sorted(record.ledgerInfo, key=lambda ledger: ledger.ledgerId)
    return ledgers[:-1]


def _holds_store_data(ledger: Any) -> bool:
    """Whether the store must hold data of this closed ledger: it has entries, and its
    data was not moved to tiered storage (offloaded and deleted from the store)."""
    context = ledger.offloadContext if ledger.HasField("offloadContext") else None
    moved = context is not None and context.complete and context.bookkeeperDeleted
    return ledger.entries > 0 and not moved


class BrokerRegisteredError(SafetyRefusalError):
    """A broker registered during the run: no managed ledger is marked after it (the
    run stops; what was marked before stays marked, and the next run purges it)."""


def _each(
    pool: Executor, step: Callable[[Any], Any], items: Sequence[Any]
) -> tuple[list[Any], Exception | None]:
    """Run ``step`` over ``items`` on the pool; each result, or None where the step raised,
    and the first exception raised (``_guarded`` lets only run-stopping ones through)."""
    futures = [pool.submit(step, item) for item in items]
    results: list[Any] = []
    first: Exception | None = None
    for future in futures:
        try:
            results.append(future.result())
        except Exception as exc:
            results.append(None)
            first = first or exc
    return results, first


def _marker_state(ledger_id: int, value: Mapping[str, Any]) -> MarkerState:
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
