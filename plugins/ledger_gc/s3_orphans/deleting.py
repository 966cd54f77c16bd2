"""Phase 3's I/O: re-check eligible entries live, one by one, and delete them in bulk.

For each entry, just before its delete (DESIGN.md "Orphans", KIP-370):

1. ``sync`` the managed ledger's znode and read it again (``phases.live_verdict``): an
   orphan ledger is still one iff its managed ledger exists and neither lists nor marks
   it; an orphan partition iff the znode still does not exist;
2. list the target's prefix again: no block left means it is gone already; a block newer
   than the scans saw means someone is writing (corrected away); a newest block younger
   than retention waits;
3. the survivors of a batch are deleted through the one delete path (``Deleter``: bulk
   DeleteObjects, only block keys of exactly that ledger, re-listed to confirm, each
   batch announced in the audit log before it is sent and recorded after).

An orphan segment (``offload:<bucket>/<uuid>-ledger-<id>``) is re-checked the same way,
by ledger id, since ledger ids are store-wide unique: after a ``sync`` the records of
the managed ledgers that may reference its ledger id are read again (the one the scan
associated with it, and the one Pulsar's offloader named in the object's user metadata,
``ManagedLedgerName``; when neither names one, every managed ledger). Any listed or
marked ledger of that id carrying the segment's uuid keeps it. Before any of that, the
objects' ``pulsarClusterName`` is read from the same HEADs: a segment whose objects name
another Pulsar cluster than this store's (``segments.why_not_ours``; a bucket shared
with a geo-replicated cluster, whose ledger ids collide with ours) is *held*: kept,
still registered, reported; a HEAD that fails keeps it too. Its two keys are listed
again, and the delete goes through the same ``Deleter`` over the offload bucket, which
deletes exactly those two keys and nothing else.

This module runs on the driver or, when there are many entries, on Spark executors
(``spark.delete.distributed_delete``), so it takes registry entries and returns plain
dataclasses (both pickle to and from executors) and writes nothing to the state store
but the audit log (written ahead of each delete, so that a step killed mid-delete leaves
a record of what it sent); the driver writes the registry.
If ZooKeeper becomes unreachable, nothing more in the batch is re-checked or deleted
(fail closed) and the results say so; the driver then fails the step.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from typing import Any

from ledger_gc import termination
from ledger_gc.audit import AuditLog
from ledger_gc.config.endpoints import Endpoints
from ledger_gc.deletion import Deleter, DeleteTarget
from ledger_gc.errors import MetadataUnavailableError
from ledger_gc.formats.markers import deletable_markers
from ledger_gc.formats.records import decode_managed_ledger_info
from ledger_gc.metadata.config_store import configuration_store
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.metadata import paths
from ledger_gc.rules.orphans import phases, segments
from ledger_gc.rules.orphans.classify import (
    OFFLOAD_ORPHAN_CLASSES,
    ORPHAN_UPLOAD_PART,
    parse_segment_target,
)
from ledger_gc.rules.orphans.outcomes import (
    CORRECTED,
    DELETED,
    FAILED,
    GONE,
    HELD,
    OPERATION,
    STOPPED,
    WAITING,
    WOULD_DELETE,
    RecheckResult,
    skipped,
)
from ledger_gc.rules.orphans.phases import Decision, ListingState, LiveState, RegistryEntry
from ledger_gc.rules.storage import offload_keys
from ledger_gc.rules.storage.keys import ledger_dir, parse_key
from ledger_gc.s3_orphans import cluster_tags
from ledger_gc.storage import offload_buckets
from ledger_gc.storage.offload_bucket import OffloadBucket
from ledger_gc.storage.s3 import LedgerStorage
from ledger_gc.storage.s3_bucket import ObjectInfo

log = logging.getLogger(__name__)

#: Entries re-checked before one bulk delete: small, so that little time passes between
#: an entry's live re-check and its delete.
BATCH_SIZE = 50


def read_live_state(store: MetadataStore, ml_name: str) -> LiveState:
    """The managed ledger as ZooKeeper's leader has it now (``sync`` first)."""
    path = paths.managed_ledger_path(ml_name)
    store.sync(path)
    raw = store.get_many_raw([path])[0]
    if raw is None:
        return LiveState(ml_exists=False)
    info = decode_managed_ledger_info(raw[0], path=path, allow_empty=True)
    return LiveState(
        ml_exists=True,
        listed=frozenset(ledger.ledgerId for ledger in info.ledgerInfo),
        marked=frozenset(deletable_markers(info, path=path)),
    )


def read_segment_carriers(
    store: MetadataStore,
    names: set[str],
    ledger_id: int,
    uuid: str,
    policies: MetadataStore | None = None,
) -> dict[str, set[str | None]]:
    """The managed ledgers (of ``names``; all of them if empty) whose listed or marked
    ledger ``ledger_id`` carries ``uuid``, as ZooKeeper's leader has them now, each with
    where that offload went (``segments.offload_place``; None: not recorded).
    ``policies``: the configuration store, where listing them all needs a namespace's
    policies (None: ``store``)."""
    from ledger_gc.s3_orphans.reading import marker_place, offload_place_of, offload_uuid_of

    store.sync(paths.MANAGED_LEDGERS_ROOT)
    candidates = (
        sorted(names)
        if names
        else store.list_managed_ledgers(sync=True, include_v1=True, policies=policies)
    )
    znodes = [paths.managed_ledger_path(name) for name in candidates]
    carriers: dict[str, set[str | None]] = {}
    for name, path, raw in zip(candidates, znodes, store.get_many_raw(znodes), strict=True):
        if raw is None:
            continue
        info = decode_managed_ledger_info(raw[0], path=path, allow_empty=True)
        for ledger in info.ledgerInfo:
            if ledger.ledgerId == ledger_id and offload_uuid_of(ledger) == uuid:
                carriers.setdefault(name, set()).add(offload_place_of(ledger))
        marker = deletable_markers(info, path=path).get(ledger_id) or {}
        if marker.get("offloadUuid") == uuid:
            carriers.setdefault(name, set()).add(marker_place(marker))
    return carriers


def read_segment_listing(
    storage: OffloadBucket, data_key: str, ledger_id: int | None
) -> tuple[ListingState, list[ObjectInfo]]:
    """The target's objects as the bucket lists them now (exactly the segment's two
    keys, or the upload part's one), with the versions a conditional delete needs."""
    wanted = {data_key} if ledger_id is None else {data_key, f"{data_key}-index"}
    found = [obj for obj in storage.iter_objects(data_key) if obj.key in wanted]
    newest = max((obj.last_modified for obj in found), default=None)
    ids = frozenset({ledger_id}) if newest is not None and ledger_id is not None else frozenset()
    return ListingState(ids, newest), found


@dataclass(frozen=True)
class Held:
    """An orphan segment that is not this store's to delete, and why."""

    reason: str


def _segment_state(
    store: MetadataStore,
    offload: OffloadBucket | None,
    entry: RegistryEntry,
    ours: segments.OurClusters,
    config: MetadataStore | None = None,
) -> tuple[LiveState, ListingState, list[ObjectInfo]] | Held | str:
    """Live state, listing and listed objects of an orphan segment or upload part, why
    it is held, or why it cannot be re-checked. ``config``: the configuration store
    (None: ``store``)."""
    where = parse_segment_target(entry.prefix)
    if offload is None or where is None or where[0] != offload.bucket:
        configured = offload.bucket if offload is not None else "none"
        return (
            f"{entry.target_class} of offload bucket {where[0] if where else '?'}, but "
            f"LEDGERGC_OFFLOAD_BUCKET is {configured}; kept"
        )
    if entry.target_class == ORPHAN_UPLOAD_PART:
        part = offload_keys.parse_upload_part(offload.prefix, where[1])
        why_not = offload.owns(where[1])
        if part is None or entry.ledger_id is not None or why_not is not None:
            return f"{where[1]} is not an upload part of this bucket ({why_not}); kept"
        listing, objects = read_segment_listing(offload, part.key, None)
        upload = f"{part.key[: -len('00000000')]}"  # <prefix><upload id>_
        newest = max(
            (
                obj.last_modified
                for obj in offload.iter_objects(upload)
                if offload_keys.parse_upload_part(offload.prefix, obj.key) is not None
            ),
            default=None,
        )
        listing = dataclasses.replace(listing, upload_newest_ms=newest)
        return LiveState(ml_exists=False), listing, objects
    segment = offload_keys.parse_segment_key(offload.prefix, where[1])
    if segment is None or segment.is_index or entry.ledger_id != segment.ledger_id:
        return f"{where[1]} is not a data segment key under LEDGERGC_OFFLOAD_PREFIX; kept"
    metadata = cluster_tags.read_segment_metadata(offload, segment.key)
    if metadata.unreadable:
        return (
            f"cannot read the user metadata of {', '.join(metadata.unreadable)} "
            "(pulsarClusterName decides whose segment it is); kept"
        )
    why = segments.why_not_ours(metadata.clusters, ours)
    if why is not None:
        return Held(why)
    names = ({entry.ml_name} - {""}) | metadata.ml_names
    found = read_segment_carriers(store, names, segment.ledger_id, segment.uuid, config)
    here = (offload.driver, offload.bucket)
    carriers = frozenset(
        name
        for name, places in found.items()
        if any(segments.is_here(place, here) for place in places)
    )
    if found and not carriers:
        elsewhere = sorted({place or "?" for places in found.values() for place in places})
        return Held(
            f"ledger {segment.ledger_id} of {', '.join(sorted(found))} carries this "
            f"segment's uuid but was offloaded to {', '.join(elsewhere)} (driverMetadata), "
            f"not to {here[0]}/{here[1]}: neither live here nor an orphan; kept"
        )
    listing, objects = read_segment_listing(offload, segment.key, segment.ledger_id)
    return LiveState(ml_exists=bool(carriers), segment_carriers=carriers), listing, objects


def read_listing(storage: LedgerStorage, entry: RegistryEntry) -> ListingState:
    """The entry's blocks as S3 lists them now (foreign keys are not the store's)."""
    ledgers: set[int] = set()
    newest: int | None = None
    for obj in storage.iter_objects(entry.prefix):
        parsed = parse_key(storage.prefix, obj.key)
        if not parsed.is_block or parsed.ml_name != entry.ml_name:
            continue
        if parsed.ledger_id is None or (
            entry.ledger_id is not None and parsed.ledger_id != entry.ledger_id
        ):
            continue
        ledgers.add(parsed.ledger_id)
        newest = obj.last_modified if newest is None else max(newest, obj.last_modified)
    return ListingState(frozenset(ledgers), newest)


def recheck_and_delete(
    endpoints: Endpoints,
    entries: Iterable[RegistryEntry],
    *,
    run_id: str,
    now_ms: int,
    deleting: bool,
    ours: dict[str, Any] | None = None,
    should_stop: Callable[[], bool] = termination.requested,
) -> list[RecheckResult]:
    """Re-check and delete (or, when not ``deleting``, only report) registry entries.

    ``ours``: the clusters whose segments are this store's (``OurClusters.to_dict``;
    None: the setting's, or, unset, only segments with no cluster name).
    ``should_stop``: asked before each entry and each delete batch (a termination
    signal, a lost delete lock): once true, nothing more is re-checked or sent, and the
    entries left are reported ``skipped``. Returns one result per entry.
    """
    clusters = segments.OurClusters.from_dict(ours) or segments.our_clusters(
        endpoints.policy.pulsar_clusters, []
    )
    items = list(entries)
    if not items:
        return []
    results: list[RecheckResult] = []
    offload_classes = OFFLOAD_ORPHAN_CLASSES
    if not endpoints.blocks.configured and any(
        e.target_class not in offload_classes for e in items
    ):
        blocks = [e for e in items if e.target_class not in offload_classes]
        why = "LEDGERGC_BUCKET is empty (the block store is off): ledger blocks are not re-checked"
        results = [RecheckResult.of(e, FAILED, why, error=why) for e in blocks]
        items = [e for e in items if e.target_class in offload_classes]
        if not items:
            return results
    storage = LedgerStorage(endpoints.blocks) if endpoints.blocks.configured else None
    # Audited ahead, batch by batch, by the delete path itself: a deletion whose record
    # cannot be written is not made (AuditUnavailableError stops the step).
    audit = AuditLog(endpoints.state)
    deleter = (
        Deleter(storage, audit, run_id, dry_run=not deleting, should_stop=should_stop)
        if storage
        else None
    )
    offload = (
        offload_buckets.offload_bucket(endpoints.offload) if endpoints.offload.configured else None
    )
    offload_deleter = (
        Deleter(offload, audit, run_id, dry_run=not deleting, should_stop=should_stop)
        if offload is not None
        else None
    )
    with ExitStack() as stack:
        try:
            store = stack.enter_context(MetadataStore.open(endpoints.zk))
            config = stack.enter_context(configuration_store(store, endpoints.config_store))
        except MetadataUnavailableError as exc:
            return [skipped(entry, str(exc)) for entry in items]
        unavailable: str | None = None
        for offset in range(0, len(items), BATCH_SIZE):
            to_delete: list[tuple[RegistryEntry, Decision]] = []
            segments_to_delete: list[tuple[RegistryEntry, Decision]] = []
            listed: dict[str, list[ObjectInfo]] = {}
            for entry in items[offset : offset + BATCH_SIZE]:
                if unavailable is None and should_stop():
                    unavailable = STOPPED
                if unavailable is not None:
                    results.append(skipped(entry, unavailable))
                    continue
                try:
                    if entry.target_class in offload_classes:
                        state = _segment_state(store, offload, entry, clusters, config)
                        if isinstance(state, Held):
                            results.append(RecheckResult.of(entry, HELD, state.reason))
                            continue
                        if isinstance(state, str):
                            results.append(RecheckResult.of(entry, FAILED, state, error=state))
                            continue
                        live, listing, listed[entry.prefix] = state
                    else:
                        assert storage is not None  # block entries were set aside above
                        live = read_live_state(store, entry.ml_name)
                        listing = read_listing(storage, entry)
                except MetadataUnavailableError as exc:
                    unavailable = str(exc)
                    results.append(skipped(entry, unavailable))
                    continue
                except Exception as exc:  # a bad record or a failed listing: keep it, retry
                    log.warning("cannot re-check %s: %s", entry.prefix, exc)
                    results.append(
                        RecheckResult.of(entry, FAILED, "re-check failed", error=str(exc))
                    )
                    continue
                decision = phases.decide(
                    entry, live, listing, now_ms, endpoints.policy.retention_seconds
                )
                if decision.action == phases.DELETE and entry.target_class in offload_classes:
                    segments_to_delete.append((entry, decision))
                elif decision.action == phases.DELETE:
                    to_delete.append((entry, decision))
                elif decision.action == phases.CORRECT:
                    results.append(RecheckResult.of(entry, CORRECTED, decision.reason))
                elif decision.action == phases.ALREADY_GONE:
                    results.append(RecheckResult.of(entry, GONE, decision.reason))
                else:
                    results.append(
                        RecheckResult.of(
                            entry, WAITING, decision.reason, until_ms=decision.until_ms
                        )
                    )
            if to_delete and deleter is not None and storage is not None:
                results.extend(_delete(deleter, storage.prefix, to_delete, deleting))
            if segments_to_delete and offload_deleter is not None:
                results.extend(_delete(offload_deleter, "", segments_to_delete, deleting, listed))
    return results


def _delete(
    deleter: Deleter,
    store_prefix: str,
    to_delete: list[tuple[RegistryEntry, Decision]],
    deleting: bool,
    listed: dict[str, list[ObjectInfo]] | None = None,
) -> list[RecheckResult]:
    """``listed``: the objects the re-check listed of each offload target; where the
    bucket names their versions (GCS, Azure) the delete is of exactly those versions
    (``delete_listed``), so an object re-written after the re-check is kept. (S3's
    listings name none: the delete path lists them again just before the delete.)"""
    targets = []
    owners = []
    for entry, decision in to_delete:
        where = parse_segment_target(entry.prefix)
        seen = (listed or {}).get(entry.prefix) or []
        versioned = tuple(seen) if seen and all(o.version is not None for o in seen) else None
        ids: tuple[int | None, ...] = decision.ledger_ids
        if entry.target_class == ORPHAN_UPLOAD_PART:
            ids = (None,)
        for ledger_id in ids:
            targets.append(
                DeleteTarget(
                    # An orphan segment: its data key, which the delete path extends to
                    # exactly the data and index keys (deletion.ORPHAN_SEGMENT); an upload
                    # part: its key, exactly.
                    prefix=where[1]
                    if where is not None
                    else ledger_dir(store_prefix, entry.ml_name, ledger_id or 0),
                    operation=OPERATION,
                    target_class=entry.target_class,
                    ml_name=entry.ml_name,
                    ledger_id=ledger_id,
                    reason=decision.reason,
                    objects=versioned,
                )
            )
            owners.append(entry.prefix)
    outcomes = deleter.delete(targets)
    results = []
    for entry, decision in to_delete:
        mine = [o for o, owner in zip(outcomes, owners, strict=True) if owner == entry.prefix]
        errors = [o.error for o in mine if o.error]
        result = RecheckResult.of(
            entry,
            DELETED if deleting else WOULD_DELETE,
            decision.reason,
            objects=sum(o.objects for o in mine),
            bytes=sum(o.bytes for o in mine),
            foreign_keys=sum(len(o.foreign_keys) for o in mine),
            # In a versioned bucket the bytes stay as noncurrent versions (not freed).
            recoverable=any(o.recoverable for o in mine),
            deleted_ledgers=[
                {
                    **asdict(o.target),
                    "objects": o.objects,
                    "bytes": o.bytes,
                    "recoverable": o.recoverable,
                    "versioning": o.versioning,
                    "noncurrent_expiration_days": o.noncurrent_expiration_days,
                }
                for o in mine
            ],
        )
        if deleting and (errors or not all(o.gone for o in mine)):
            result.action = FAILED
            result.error = errors[0] if errors else "blocks still listed after the delete"
        results.append(result)
    return results
