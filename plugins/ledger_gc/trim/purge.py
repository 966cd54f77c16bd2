"""Phase two of the trim: delete the data of marked ledgers, then drop their markers.

A marked ledger (``ledger-gc.deletable.<id>`` in its managed ledger's record, phase one:
``trimmer``) is deleted by every trim until its data is gone, this run's marks and
earlier runs' alike (``marking.plan_purge`` and ``finish_purge``):

* **A last look at the cursors first.** Just before the delete, every cursor is read
  again as the leader has it (one ``sync`` for the batch); a marked ledger whose data
  some cursor has not consumed (a cursor written by another tool, or reset back) is kept,
  and put back in the ledger list when its data is whole (``_restore``), so the cursor
  can read it. A cursor whose position lives in a cursor ledger (BookKeeper) keeps
  everything.
* **Deletes go together.** A batch's blocks (and offloaded copies) go in full
  DeleteObjects requests across its managed ledgers, audited ahead (``Deleter``); each
  managed ledger's markers of what is gone are then dropped in its own CAS.
* **A failure keeps the marker**, with its attempt count and last error, for the next
  run; a marker whose data is not found is dropped only on evidence (``marking``).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

from ledger_gc.deletion import OFFLOADED_LEDGER, Deleter, TargetOutcome
from ledger_gc.errors import (
    LedgerGcError,
    ManagedLedgerNotFoundError,
    MetadataError,
    SafetyRefusalError,
)
from ledger_gc.formats.markers import deletable_markers, marker_key
from ledger_gc.formats.records import get_property, remove_properties
from ledger_gc.ledger.delete import DELETING_PROPERTY
from ledger_gc.marking import (
    Guard,
    PurgePlan,
    PurgeResult,
    announced_by,
    finish_purge,
    ledgers_root,
    list_ledger_blocks,
    plan_purge,
)
from ledger_gc.metadata.store import MetadataStore, Versioned
from ledger_gc.proto.mldataformats_pb2 import ManagedLedgerInfo
from ledger_gc.rules.metadata import paths
from ledger_gc.rules.storage.keys import parse_key
from ledger_gc.rules.trim.eligibility import unconsumed_marked_ledger
from ledger_gc.storage.ledger_blocks import BlockRef
from ledger_gc.storage.s3_bucket import ObjectInfo
from ledger_gc.trim.report import DeletedLedger, ManagedLedgerTrim, MarkerState
from ledger_gc.trim.states import LedgerState, LedgerStateReader
from ledger_gc.trim.steps import each, run_guarded

log = logging.getLogger(__name__)

OPERATION = "trim"


class MarkedLedgerPurge:
    """Deletes the data of marked ledgers for the trim, one batch of managed ledgers (or
    one managed ledger, between the rounds of a big mark) at a time.

    ``reader`` reads managed ledgers' states (the trimmer); ``clock`` stamps a marker's failed
    attempt; ``offload`` deletes offloaded ledgers' copies (None: tiered storage off).
    ``store_verified`` on each call: the run already found data where the settings point
    (the trimmer's store probe), which is evidence for dropping a marker whose data is not
    found.
    """

    def __init__(
        self,
        store: MetadataStore,
        deleter: Deleter,
        *,
        reader: LedgerStateReader,
        clock: Callable[[], int],
        offload: Deleter | None = None,
    ) -> None:
        self.store = store
        self.deleter = deleter
        self.reader = reader
        self.clock = clock
        self.offload = offload
        # The audit log's announced deletions, read once, only if a marker's data is not
        # found (``marking.plan_purge``: evidence of an earlier, interrupted run).
        self.audited = announced_by(deleter)

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
            fresh = self.reader.read_state(name)
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
        return self.reader.read_states(names)

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
        store_verified: bool,
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
            store_verified=store_verified,
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

    def _read_after_deletes(
        self, names: Sequence[str], fresh: Sequence[LedgerState | LedgerGcError | None]
    ) -> dict[str, Versioned[ManagedLedgerInfo]]:
        """The batch's records as they stand after its deletes, read together, for the
        first attempt of each one's unmark CAS (``MetadataStore.reading_ahead``): one
        batched read instead of one read per managed ledger before its CAS. A record is
        used only if it is the very znode the batch marked (its creation zxid, as
        ``reread`` found it): a topic deleted and created again starts its versions
        again, and its unmark then reads it itself. On any error reading them, every
        unmark reads its own, and reports its own error, as before."""
        try:
            records = self.store.read_managed_ledgers(names)
        except MetadataError:
            return {}
        return {
            name: got[0]
            for name, got, state in zip(names, records, fresh, strict=True)
            if got is not None and isinstance(state, LedgerState) and got[1] == state.czxid
        }

    def purge_one(
        self, result: ManagedLedgerTrim, info: ManagedLedgerInfo, *, store_verified: bool
    ) -> None:
        """Phase two for one managed ledger (between the rounds of a big mark)."""
        plan = self._plan_purge(result, info, store_verified=store_verified)
        outcomes = self.deleter.delete(plan.targets)
        copies = self.offload.delete(plan.offload_targets) if self.offload else []
        self._record_purge(result, info, self._finish(plan, outcomes, copies))

    def purge_many(
        self,
        marked: Sequence[tuple[ManagedLedgerTrim, ManagedLedgerInfo]],
        pool: Executor,
        *,
        store_verified: bool,
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
            run_guarded(
                self.store,
                result,
                lambda: plans.append(
                    self._plan_purge(
                        result,
                        info,
                        fresh_by_id[id(result)],
                        reread=True,
                        listed=listings.get(result.name),
                        store_verified=store_verified,
                    )
                ),
            )
            return plans[0] if plans else None

        planned, fatal = each(pool, plan_one, list(marked))
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
        read_ahead = self._read_after_deletes(
            [r.name for r, _, _ in plans], [fresh_by_id[id(r)] for r, _, _ in plans]
        )

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
            run_guarded(
                self.store,
                result,
                lambda: self._record_purge(result, info, self._finish(plan, done, copied)),
            )
            return result

        with self.store.reading_ahead(read_ahead):
            finished, fatal = each(pool, finish_one, split)
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
            before = MarkerState.from_marker(ledger_id, markers[ledger_id])
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
