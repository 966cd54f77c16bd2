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
4. **Delete** (phase two, ``purge.MarkedLedgerPurge``): the data of every marker, this
   run's and earlier runs', after a last look at the cursors (below); markers of what is
   gone go in one CAS; a failure keeps the marker, with its attempt count and last error.

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
  putting it back in the ledger list when its data is whole (``purge``) so the
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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NoNodeError

from ledger_gc.config.policy import Policy
from ledger_gc.deletion import Deleter
from ledger_gc.errors import (
    ConcurrentUpdateError,
    LedgerGcError,
    ManagedLedgerNotFoundError,
    RecordTooLargeError,
    SafetyRefusalError,
    StoppedError,
)
from ledger_gc.formats.markers import deletable_markers
from ledger_gc.formats.records import (
    decode_managed_cursor_info_framed,
    decode_managed_ledger_info_framed,
)
from ledger_gc.marking import list_ledger_blocks, mark_deletable
from ledger_gc.metadata.read_only import BROKERS_PATH, metadata_is_read_only
from ledger_gc.metadata.store import CursorWrite, MetadataStore
from ledger_gc.metadata.zk_client import guarded
from ledger_gc.proto.mldataformats_pb2 import ManagedCursorInfo, ManagedLedgerInfo
from ledger_gc.rules.metadata import paths
from ledger_gc.rules.positions import Position, ledger_stats
from ledger_gc.rules.trim.eligibility import TrimDecision, decide_trim, moved_mark_delete
from ledger_gc.trim.purge import MarkedLedgerPurge
from ledger_gc.trim.report import ManagedLedgerTrim, MarkerState, PlannedLedger
from ledger_gc.trim.states import CursorState, LedgerState
from ledger_gc.trim.steps import BrokerRegisteredError, each, run_guarded

log = logging.getLogger(__name__)

# Managed ledgers read per batch: big enough to amortise round trips, small enough that
# a read is still fresh when its managed ledger's turn comes (a stale one only costs a
# failed multi and a re-read).
BATCH_SIZE = 256
# Managed ledgers sampled by the store probe.
PROBE_SAMPLES = 16


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
        policy: Policy,
        *,
        dry_run: bool,
        clock: Callable[[], int],
        workers: int = 8,
        offload: Deleter | None = None,
        stamp_clock: Callable[[], int] | None = None,
    ) -> None:
        self.store = store
        # Phase two; ``offload`` deletes offloaded ledgers' copies (None: tiered storage
        # off).
        self.purge = MarkedLedgerPurge(store, deleter, reader=self, clock=clock, offload=offload)
        # Managed ledgers decided, marked and purged at once (their requests overlap;
        # ZooKeeper and S3 answer many in parallel).
        self.workers = workers
        self.deleter = deleter
        self.policy = policy
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
                f"has any data in s3://{storage.bucket}/{storage.store.key_prefix} (e.g. "
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
                marked, fatal = each(
                    pool, lambda item: self.mark_one(*item), list(zip(batch, states, strict=True))
                )
                done = [item for item in marked if item is not None]
                if fatal is None and not self.dry_run:
                    failed = self.purge.purge_many(
                        [(r, info) for r, info in done if info is not None],
                        pool,
                        store_verified=self.store_verified,
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
        if self.policy.metadata_read_only == "auto":
            self._watch_brokers()
        read_only, why = metadata_is_read_only(self.store, self.policy.metadata_read_only)
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
        result = ManagedLedgerTrim(name, self.policy.retention_for(name))
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

        run_guarded(self.store, result, run)
        info = marked[0] if marked else None
        if info is None or not deletable_markers(info):
            return result, None
        return result, info

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
        result.already_marked = [
            MarkerState.from_marker(i, value) for i, value in sorted(markers.items())
        ]

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
            self.purge.purge_one(result, written.value, store_verified=self.store_verified)
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
