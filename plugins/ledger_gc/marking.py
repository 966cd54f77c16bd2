"""Mark-then-delete: the two metadata steps around a ledger's data delete.

The design of Pulsar PIP-129 (issue 13526): a ledger leaves the ledger list in the same
compare-and-set write that adds its ``ledger-gc.deletable.<id>`` marker; its data is
deleted afterwards; its marker is removed only once no block of it is left. So at every
instant a ledger with data is listed or marked, and a crash anywhere in between leaves a
marker that the next run retries. The trim and the managed-ledger delete both use this.

A marker is dropped without deleting anything only on evidence that its data is gone
rather than elsewhere: a ledger that recorded no entries, or one whose data the store
demonstrably holds for this managed ledger (other ledgers of it have blocks where the
layout puts them, or the run's store probe found data). Otherwise a typo in
``LEDGERGC_PREFIX`` or ``LEDGERGC_BUCKET`` would find "nothing", drop every marker and
leak the real data for good; such a marker stays, with an error naming the settings.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ledger_gc.deletion import OFFLOADED_LEDGER, Deleter, DeleteTarget, TargetOutcome
from ledger_gc.errors import RecordTooLargeError
from ledger_gc.formats.markers import (
    decode_marker_value,
    deletable_markers,
    encode_marker_value,
    marker_key,
    offload_marker_fields,
)
from ledger_gc.formats.records import properties_of, remove_properties, set_properties
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.proto.mldataformats_pb2 import ManagedLedgerInfo
from ledger_gc.rules.metadata import paths
from ledger_gc.rules.storage import offload_drivers
from ledger_gc.rules.storage.keys import LEDGERS_DIR, ledger_dir, ml_dir, parse_key
from ledger_gc.rules.storage.offload_keys import segment_keys
from ledger_gc.storage.s3_bucket import ObjectInfo

log = logging.getLogger(__name__)

# A pending marker's last error is kept short: 10,000 markers of a failing bucket must not
# grow the record past what ZooKeeper takes.
MAX_ERROR_CHARS = 160

# Why the marker of an offloaded ledger stays: the marker is the only record that still
# names the tiered-storage objects (DESIGN.md), so it goes only with both copies.
TIERED_STORAGE_OFF = (
    "its tiered-storage copy ({uuid}-ledger-{ledger_id}) is kept: tiered storage is off "
    "(set LEDGERGC_OFFLOAD_BUCKET to delete it); the marker keeps what that needs"
)
OTHER_OFFLOAD_DRIVER = (
    "its tiered-storage copy ({uuid}-ledger-{ledger_id}) was offloaded with driver "
    "{driver!r}, not to the {configured} store LEDGERGC_OFFLOAD_DRIVER names; kept "
    "(never guessed)"
)
OTHER_OFFLOAD_BUCKET = (
    "its tiered-storage copy ({uuid}-ledger-{ledger_id}) is in bucket {bucket!r}, not "
    "LEDGERGC_OFFLOAD_BUCKET={configured!r}; kept (never guessed)"
)

# Whether the audit log announced the deletion of (target class, managed ledger, ledger)
# at (prefix, bucket): evidence only where the settings point now (``AuditLog.announced``).
Audited = Callable[[str, str, int, str, str], bool]
LEDGER = "ledger"

# A guard's verdict on a marked ledger: None when it may be deleted, else why not.
Guard = Callable[[int, Mapping[str, Any]], str | None]


def mark_deletable(
    info: ManagedLedgerInfo, ledger_ids: Collection[int], marked_at: int
) -> list[int]:
    """Move ledgers from the ledger list to deletable markers, in place (pure).

    Returns the ids actually moved: an id not in the list (already marked by an earlier
    attempt of the same CAS, or never there) is left alone. A marker is compact (it is
    one of possibly thousands in one znode) and keeps what deleting the ledger's
    tiered-storage copy needs (``offload_marker_fields``).
    """
    wanted = set(ledger_ids)
    moved = [ledger.ledgerId for ledger in info.ledgerInfo if ledger.ledgerId in wanted]
    set_properties(
        info,
        {
            marker_key(ledger.ledgerId): encode_marker_value(
                size=ledger.size,
                entries=ledger.entries,
                timestamp=ledger.timestamp,
                marked_at=marked_at,
                **offload_marker_fields(ledger),
            )
            for ledger in info.ledgerInfo
            if ledger.ledgerId in wanted
        },
    )
    kept = [ledger for ledger in info.ledgerInfo if ledger.ledgerId not in wanted]
    if len(kept) != len(info.ledgerInfo):
        copies = [type(ledger)() for ledger in kept]
        for copy, ledger in zip(copies, kept, strict=True):
            copy.CopyFrom(ledger)
        del info.ledgerInfo[:]
        info.ledgerInfo.extend(copies)
    return moved


def record_failures(info: ManagedLedgerInfo, failures: dict[int, str], attempted_at: int) -> bool:
    """Note the last error and attempt count on each still-pending marker (pure)."""
    current = properties_of(info)
    notes = {}
    for ledger_id, error in failures.items():
        key = marker_key(ledger_id)
        raw = current.get(key)
        if raw is None:
            continue
        value = decode_marker_value(raw, key=key)
        value["attempts"] = int(value.get("attempts", 0)) + 1
        value["lastError"] = error[:MAX_ERROR_CHARS]
        value["lastAttemptAt"] = attempted_at
        notes[key] = json.dumps(value, separators=(",", ":"))
    set_properties(info, notes)
    return bool(notes)


@dataclass
class PurgeResult:
    """What one pass over a managed ledger's markers achieved.

    ``deleted``: targets whose blocks this pass deleted (what it freed); ``cleared``:
    markers removed with nothing to delete (no entries, or data already gone);
    ``pending``: ledger id -> why its marker stays.
    """

    ml_name: str
    deleted: list[TargetOutcome] = field(default_factory=list)
    cleared: list[int] = field(default_factory=list)
    pending: dict[int, str] = field(default_factory=dict)

    @property
    def bytes_reclaimed(self) -> int:
        """Bytes freed (not those a versioned bucket keeps: ``bytes_recoverable``)."""
        return sum(outcome.bytes for outcome in self.deleted if not outcome.recoverable)

    @property
    def bytes_recoverable(self) -> int:
        """Bytes deleted from listings but kept by a versioned bucket, still billed."""
        return sum(outcome.bytes for outcome in self.deleted if outcome.recoverable)


def ledgers_root(deleter: Deleter, ml_name: str) -> str:
    """A managed ledger's ``ledgers/`` directory (ValueError: a name the store cannot hold)."""
    return f"{ml_dir(deleter.storage.prefix, ml_name)}{LEDGERS_DIR}/"


def list_ledger_blocks(
    deleter: Deleter, ml_name: str, listed: Sequence[ObjectInfo] | None = None
) -> dict[int, list[ObjectInfo]]:
    """Every block of a managed ledger's ledgers, by ledger id: one listing of its
    ``ledgers/`` directory, however many ledgers it has (foreign keys left out).
    ``listed``: that directory's complete listing, made by the caller for many managed
    ledgers at once (``LedgerStorage.list_prefixes``)."""
    storage = deleter.storage
    blocks: dict[int, list[ObjectInfo]] = {}
    objects = storage.iter_objects(ledgers_root(deleter, ml_name)) if listed is None else listed
    for obj in objects:
        parsed = parse_key(storage.prefix, obj.key)
        if parsed.is_block and parsed.ml_name == ml_name and parsed.ledger_id is not None:
            blocks.setdefault(parsed.ledger_id, []).append(obj)
    return blocks


@dataclass
class PurgePlan:
    """One managed ledger's markers, sorted into what to delete and what not to (yet):
    ledger data in the store's bucket (``targets``), offloaded copies in the tiered
    storage bucket (``offload_targets``)."""

    result: PurgeResult
    targets: list[DeleteTarget] = field(default_factory=list)
    offload_targets: list[DeleteTarget] = field(default_factory=list)
    # Offloaded ledgers whose offload completed: their copy must exist or be audited gone.
    offload_complete: set[int] = field(default_factory=set)
    # The tiered-storage bucket of ``offload_targets`` (where their deletes are audited).
    offload_bucket: str = ""


def plan_purge(
    ml_name: str,
    info: ManagedLedgerInfo,
    deleter: Deleter,
    *,
    operation: str,
    guard: Guard | None = None,
    store_verified: bool = False,
    reason: str = "marked deletable",
    offload: Deleter | None = None,
    audited: Audited = lambda _class, _ml, _ledger, _prefix, _bucket: False,
    listed: Sequence[ObjectInfo] | None = None,
) -> PurgePlan:
    """Which marked ledgers' blocks to delete (from one listing of the managed ledger's
    ``ledgers/``), which offloaded copies (``offload``: the tiered-storage deleter, None
    when tiered storage is off), which markers to clear without deleting, and which to
    keep and why."""
    markers = deletable_markers(info, path=paths.managed_ledger_path(ml_name))
    plan = PurgePlan(PurgeResult(ml_name))
    if not markers:
        return plan
    result = plan.result
    storage = deleter.storage
    ledgers_root = f"{ml_dir(storage.prefix, ml_name)}{LEDGERS_DIR}/"
    listing = list_ledger_blocks(deleter, ml_name, listed)
    # Evidence that the settings point at this managed ledger's data: blocks of a ledger
    # its record lists or marks (not merely anything under its name: another cluster
    # sharing the bucket may hold a topic of the same name under a sibling prefix).
    known = {ledger.ledgerId for ledger in info.ledgerInfo} | set(markers)
    verified = store_verified or any(ledger_id in listing for ledger_id in known)
    for ledger_id in sorted(markers):
        marker = markers[ledger_id]
        held = guard(ledger_id, marker) if guard is not None else None
        if held is not None:
            result.pending[ledger_id] = held
            continue
        blocks = listing.get(ledger_id)
        offloaded = marker.get("offloadUuid")
        if offloaded:
            # A marker of an offloaded ledger goes only with both copies (DESIGN.md).
            kept = _plan_offloaded(plan, ml_name, ledger_id, marker, offload, operation, reason)
            if kept is not None:
                result.pending[ledger_id] = kept
        if not blocks:
            if offloaded:
                continue
            if int(marker["entries"]) == 0 and int(marker["size"]) == 0:
                result.cleared.append(ledger_id)
            elif verified or audited(
                LEDGER,
                ml_name,
                ledger_id,
                ledger_dir(storage.prefix, ml_name, ledger_id),
                storage.bucket,
            ):
                result.cleared.append(ledger_id)  # deleted by an earlier, interrupted pass
            else:
                result.pending[ledger_id] = (
                    f"no data found at s3://{storage.bucket}/"
                    f"{ledger_dir(storage.prefix, ml_name, ledger_id)} nor anywhere under this "
                    "managed ledger; check LEDGERGC_BUCKET and LEDGERGC_PREFIX (marker kept)"
                )
            continue
        plan.targets.append(
            DeleteTarget(
                prefix=ledger_dir(storage.prefix, ml_name, ledger_id),
                operation=operation,
                target_class=LEDGER,
                ml_name=ml_name,
                ledger_id=ledger_id,
                reason=reason,
                objects=tuple(blocks),
                confirm_prefix=ledgers_root,
            )
        )
    return plan


def _plan_offloaded(
    plan: PurgePlan,
    ml_name: str,
    ledger_id: int,
    marker: Mapping[str, Any],
    offload: Deleter | None,
    operation: str,
    reason: str,
) -> str | None:
    """Plan the delete of an offloaded ledger's tiered-storage copy; why it is kept when
    it cannot be (tiered storage off, or the copy is in a bucket the settings do not
    name: the marker then keeps pointing at it)."""
    uuid = str(marker["offloadUuid"])
    if offload is None:
        return TIERED_STORAGE_OFF.format(uuid=uuid, ledger_id=ledger_id)
    storage = offload.storage
    properties = dict(marker.get("offloadDriverMetadata") or {})
    target = offload_drivers.offload_target(
        marker.get("offloadDriverName"), {str(k): str(v) for k, v in properties.items()}
    )
    # The copy is where its driver wrote it: a driver of another family (or of none
    # ledger-gc reads) put it in another store, whatever its bucket is called.
    configured = str(getattr(storage, "driver", offload_drivers.S3))
    if target.driver is not None and target.family != configured:
        return OTHER_OFFLOAD_DRIVER.format(
            uuid=uuid, ledger_id=ledger_id, driver=target.driver, configured=configured
        )
    named = target.bucket
    if named and named != storage.bucket:
        return OTHER_OFFLOAD_BUCKET.format(
            uuid=uuid, ledger_id=ledger_id, bucket=named, configured=storage.bucket
        )
    data_key, _ = segment_keys(storage.prefix, uuid, ledger_id)
    plan.offload_bucket = storage.bucket
    if marker.get("offloadComplete"):
        plan.offload_complete.add(ledger_id)
    plan.offload_targets.append(
        DeleteTarget(
            prefix=data_key,
            operation=operation,
            target_class=OFFLOADED_LEDGER,
            ml_name=ml_name,
            ledger_id=ledger_id,
            reason=f"{reason} (tiered-storage copy {uuid})",
        )
    )
    return None


def finish_purge(
    plan: PurgePlan,
    outcomes: Sequence[TargetOutcome],
    store: MetadataStore,
    *,
    now_ms: int,
    dry_run: bool = False,
    offload_outcomes: Sequence[TargetOutcome] = (),
    audited: Audited = lambda _class, _ml, _ledger, _prefix, _bucket: False,
) -> PurgeResult:
    """Drop the markers of what is gone (one CAS), note why the others stay. A marker
    of an offloaded ledger goes only when its tiered-storage copy is gone too; a copy of
    a completed offload that is not found at all is gone only if the audit log says an
    earlier run deleted it (``audited``), else a wrong LEDGERGC_OFFLOAD_* would drop the
    only pointer to it."""
    result = plan.result
    if dry_run:
        result.deleted = [*outcomes, *offload_outcomes]
        result.cleared = []
        return result
    copies_left: dict[int, str] = {}
    for outcome in offload_outcomes:
        copy_id = outcome.target.ledger_id
        if copy_id is None:
            continue
        if outcome.gone:
            if outcome.objects:
                result.deleted.append(outcome)
            elif copy_id in plan.offload_complete and not audited(
                OFFLOADED_LEDGER,
                result.ml_name,
                copy_id,
                outcome.target.prefix,
                plan.offload_bucket,
            ):
                copies_left[copy_id] = (
                    f"tiered-storage copy {outcome.target.prefix} not found; check "
                    "LEDGERGC_OFFLOAD_BUCKET and LEDGERGC_OFFLOAD_PREFIX (marker kept)"
                )
        else:
            copies_left[copy_id] = (
                f"tiered-storage copy not deleted: {outcome.error or 'still present'}"
            )
    offloaded = {o.target.ledger_id for o in offload_outcomes}
    gone = list(result.cleared)
    for outcome in outcomes:
        ledger_id = outcome.target.ledger_id
        if ledger_id is None:
            continue  # only ledger targets are planned
        if outcome.gone:
            result.deleted.append(outcome)
            if ledger_id not in result.pending and ledger_id not in copies_left:
                gone.append(ledger_id)
        else:
            result.pending[ledger_id] = outcome.error or "data still present"
    # An offloaded ledger whose store data was already gone: its copy decides alone.
    listed_targets = {o.target.ledger_id for o in outcomes}
    for ledger_id in offloaded - listed_targets:
        if ledger_id is not None and ledger_id not in copies_left | result.pending.keys():
            gone.append(ledger_id)
    result.pending.update(copies_left)
    if gone or result.pending:
        _unmark(store, result.ml_name, gone, result.pending, now_ms)
    for ledger_id, error in sorted(result.pending.items()):
        log.warning("%s: ledger %d still marked: %s", result.ml_name, ledger_id, error)
    return result


def purge_marked(
    ml_name: str,
    store: MetadataStore,
    deleter: Deleter,
    *,
    operation: str,
    now_ms: int,
    info: ManagedLedgerInfo | None = None,
    guard: Guard | None = None,
    store_verified: bool = False,
    reason: str = "marked deletable",
    offload: Deleter | None = None,
    audited: Audited | None = None,
) -> PurgeResult:
    """Delete the data of every marked ledger, then drop the markers of those gone.

    Every marker is retried, this run's and every earlier run's. A marker whose data is
    not confirmed gone stays (with its last error noted), so the next run tries again.
    ``guard`` may keep a marker's data (the trim's check that no cursor still needs it);
    ``store_verified`` says the run already found data where the settings point. At most
    one metadata write: the removal of the gone markers (plus the notes). The trim does
    the same for many managed ledgers at once (``plan_purge``, one ``Deleter.delete``,
    ``finish_purge``), so that its deletes fill whole batches.
    """
    if info is None:
        info = store.get_managed_ledger(ml_name).value
    plan = plan_purge(
        ml_name,
        info,
        deleter,
        operation=operation,
        guard=guard,
        store_verified=store_verified,
        reason=reason,
        offload=offload,
        audited=audited or announced_by(deleter),
    )
    if not (plan.targets or plan.offload_targets or plan.result.cleared or plan.result.pending):
        return plan.result
    outcomes = deleter.delete(plan.targets)
    copies = offload.delete(plan.offload_targets) if offload is not None else []
    return finish_purge(
        plan,
        outcomes,
        store,
        now_ms=now_ms,
        dry_run=deleter.dry_run,
        offload_outcomes=copies,
        audited=audited or announced_by(deleter),
    )


def announced_by(deleter: Deleter) -> Audited:
    """``Audited`` from the deleter's audit log, read once, on first use."""
    cache: list[set[tuple[str, str, int, str, str | None]]] = []

    def audited(target_class: str, ml_name: str, ledger_id: int, prefix: str, bucket: str) -> bool:
        if not cache:
            cache.append(deleter.audit.announced() if deleter.audit is not None else set())
        return any(
            (target_class, ml_name, ledger_id, prefix, where) in cache[0]
            for where in (bucket, None)
        )

    return audited


def _unmark(
    store: MetadataStore,
    ml_name: str,
    gone: list[int],
    pending: dict[int, str],
    now_ms: int,
) -> None:
    """One CAS: drop the markers of what is gone, note why the others stay. The notes are
    best effort: if they would not fit in the znode, the markers go without them."""
    keys = [marker_key(ledger_id) for ledger_id in gone]

    def mutate(with_notes: bool) -> Callable[[ManagedLedgerInfo], bool]:
        def apply(current: ManagedLedgerInfo) -> bool:
            removed = remove_properties(current, keys)
            noted = with_notes and record_failures(current, pending, now_ms)
            return bool(removed) or noted

        return apply

    try:
        store.update_managed_ledger(ml_name, mutate(with_notes=True))
    except RecordTooLargeError:
        if keys:
            store.update_managed_ledger(ml_name, mutate(with_notes=False))
