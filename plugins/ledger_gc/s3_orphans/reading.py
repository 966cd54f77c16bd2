"""The reads a scan is made of: one shard of the metadata snapshot, one shard of the listing.

These run on Spark executors (``ledger_gc.spark``), each over its own ZooKeeper session or S3
client, and they are plain functions so that tests can call them without Spark. Both
follow errors.py's rule: a read that fails raises, it never returns part of an answer
as if it were all of it (DESIGN.md invariant 3).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from botocore.exceptions import BotoCoreError, ClientError

from ledger_gc.config.endpoints import ObjectStore, ZkEndpoint
from ledger_gc.errors import StorageError
from ledger_gc.formats.markers import deletable_markers, java_uuid
from ledger_gc.formats.records import LedgerInfo, decode_managed_ledger_info
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.metadata import paths
from ledger_gc.rules.orphans import segments
from ledger_gc.rules.orphans.classify import ManagedLedgerRefs, MetadataSnapshot
from ledger_gc.rules.storage import offload_drivers, offload_keys
from ledger_gc.storage import list_pages, offload_buckets
from ledger_gc.storage.offload_bucket import OffloadBucket
from ledger_gc.storage.s3 import LedgerStorage
from ledger_gc.storage.s3_bucket import ObjectInfo

# Row types of the snapshot dataset: (entry_type, ml_name, ledger_id, offload_uuid,
# offload_place): the place is where that offload went (``segments.offload_place``).
ML_ROW = "ml"
LISTED_ROW = "listed"
MARKED_ROW = "marked"

SnapshotRow = tuple[str, str, int | None, str | None, str | None]
ObjectRow = tuple[str, int, int]


def read_managed_ledgers(zk: ZkEndpoint, names: Sequence[str]) -> list[SnapshotRow]:
    """Snapshot rows of some managed ledgers: one ``ml`` row each, plus one row per
    listed and per marked ledger id, with the offload uuid it carries (the listed
    LedgerInfo's ``offloadContext``, set before an offload uploads anything; the
    marker's ``offloadUuid``). Pipelined reads over one session.

    A managed ledger deleted since it was listed has no rows (it is absent now). An empty
    znode is a managed ledger with no ledgers, as Pulsar creates it. A znode or marker
    that does not decode raises: guessing would turn every ledger of it into an orphan.
    """
    if not names:
        return []
    ml_paths = [paths.managed_ledger_path(name) for name in names]
    with MetadataStore.open(zk) as store:
        # This session may be on another server of the ensemble than the driver's listing.
        store.sync(paths.MANAGED_LEDGERS_ROOT)
        raws = store.get_many_raw(ml_paths)
    rows: list[SnapshotRow] = []
    for name, path, raw in zip(names, ml_paths, raws, strict=True):
        if raw is None:
            continue
        info = decode_managed_ledger_info(raw[0], path=path, allow_empty=True)
        rows.append((ML_ROW, name, None, None, None))
        rows.extend(
            (LISTED_ROW, name, ledger.ledgerId, offload_uuid_of(ledger), offload_place_of(ledger))
            for ledger in info.ledgerInfo
        )
        rows.extend(
            (MARKED_ROW, name, lid, _marker_uuid(marker), marker_place(marker))
            for lid, marker in deletable_markers(info, path=path).items()
        )
    return rows


def offload_uuid_of(ledger: LedgerInfo) -> str | None:
    """The offload uuid a listed ledger carries (None: never offloaded)."""
    if not ledger.HasField("offloadContext"):
        return None
    context = ledger.offloadContext
    if not (context.HasField("uidMsb") or context.HasField("uidLsb")):
        return None
    return java_uuid(context.uidMsb, context.uidLsb)


def offload_place_of(ledger: LedgerInfo) -> str | None:
    """Where a listed ledger's offload went (``segments.offload_place``): its
    ``offloadContext.driverMetadata`` name and ``bucket`` property (None: not recorded)."""
    if not ledger.HasField("offloadContext"):
        return None
    metadata = ledger.offloadContext.driverMetadata
    target = offload_drivers.offload_target(
        metadata.name, {p.key: p.value for p in metadata.properties}
    )
    return segments.offload_place(target.driver, target.bucket)


def marker_place(marker: dict) -> str | None:
    """Where a marked ledger's offload went, as its marker names it."""
    details = marker.get("offloadDriverMetadata")
    bucket = details.get("bucket") if isinstance(details, dict) else None
    return segments.offload_place(marker.get("offloadDriverName"), bucket)


def _marker_uuid(marker: dict) -> str | None:
    value = marker.get("offloadUuid")
    return str(value) if value else None


def snapshot_from_rows(rows: Sequence[SnapshotRow]) -> MetadataSnapshot:
    """The pure snapshot of some rows (for the reference diff and the tests)."""
    listed: dict[str, set[int]] = {}
    marked: dict[str, set[int]] = {}
    offloads: dict[tuple[str, int], set[str]] = {}
    places: dict[tuple[str, int, str], str] = {}
    for row in rows:
        entry_type, name, ledger_id = row[0], row[1], row[2]
        uuid = row[3] if len(row) > 3 else None  # rows of an older snapshot have none
        place = row[4] if len(row) > 4 else None
        listed.setdefault(name, set())
        marked.setdefault(name, set())
        if entry_type == LISTED_ROW and ledger_id is not None:
            listed[name].add(ledger_id)
        elif entry_type == MARKED_ROW and ledger_id is not None:
            marked[name].add(ledger_id)
        if uuid and ledger_id is not None and entry_type != ML_ROW:
            offloads.setdefault((name, ledger_id), set()).add(uuid)
            if place:
                places[(name, ledger_id, uuid)] = place
    return MetadataSnapshot(
        {
            name: ManagedLedgerRefs(frozenset(listed[name]), frozenset(marked[name]))
            for name in listed
        },
        {key: frozenset(uuids) for key, uuids in offloads.items()},
        places,
    )


# --- listing ---------------------------------------------------------------------------


def _list_level(storage: LedgerStorage, prefix: str) -> tuple[list[str], list[ObjectInfo]]:
    """One ``/``-delimited level under ``prefix``: its sub-prefixes and its own objects."""
    subdirs: list[str] = []
    objects: list[ObjectInfo] = []
    paginator = storage.client.get_paginator("list_objects_v2")
    try:
        for page in paginator.paginate(Bucket=storage.bucket, Prefix=prefix, Delimiter="/"):
            subdirs.extend(item["Prefix"] for item in page.get("CommonPrefixes", ()))
            objects.extend(
                ObjectInfo(
                    item["Key"], int(item["Size"]), list_pages.epoch_ms(item["LastModified"])
                )
                for item in page.get("Contents", ())
            )
    except (ClientError, BotoCoreError) as exc:
        raise StorageError(
            f"listing '{prefix}' in bucket '{storage.bucket}' at {storage.endpoint} failed "
            f"({exc}); the scan stopped and nothing was deleted"
        ) from exc
    return subdirs, objects


def discover_shards(store: ObjectStore, *, threads: int = 16) -> tuple[list[str], list[ObjectInfo]]:
    """Split the prefix into namespace prefixes (``<prefix>/<tenant>/<ns>/``) for parallel
    listing; objects that lie above that level (all foreign) are returned directly.
    With the block store off (``LEDGERGC_BUCKET`` empty) there is nothing to list."""
    if not store.configured:
        return [], []
    storage = storage_for(store)
    tenants, loose = _list_level(storage, store.key_prefix)
    shards: list[str] = []
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ledgergc-scan") as pool:
        for namespaces, objects in pool.map(lambda t: _list_level(storage, t), tenants):
            shards.extend(namespaces)
            loose.extend(objects)
    return sorted(shards), loose


def storage_for(store: ObjectStore) -> LedgerStorage:
    """One ``LedgerStorage`` per store per process, reused by every task it runs.

    Building a boto3 client costs more CPU than listing a small namespace (its service
    model is loaded and its endpoint resolved each time), and the scan runs one task per
    namespace in the same reused Python workers; clients are thread-safe. Keyed by
    process too: a forked child must not use its parent's client, whose pooled
    connections it would share (two processes reading one socket get each other's
    answers). And keyed by the credentials (part of the store's identity, not of its
    ``repr``): two stores that differ only in them must not share a client.
    """
    key = (os.getpid(), store)
    with _STORAGE_LOCK:
        storage = _STORAGES.get(key)
        if storage is None:
            storage = _STORAGES[key] = LedgerStorage(store)
        return storage


_STORAGES: dict[tuple[int, ObjectStore], LedgerStorage] = {}
_STORAGE_LOCK = threading.Lock()


def list_prefixes(store: ObjectStore, prefixes: Sequence[str]) -> Iterator[ObjectRow]:
    """Every object under each prefix, as (key, size, last modified ms) rows."""
    if not prefixes:
        return  # an empty partition (the block store off has none at all)
    storage = storage_for(store)
    for prefix in prefixes:
        for obj in storage.iter_objects(prefix):
            yield (obj.key, obj.size, obj.last_modified)


def rows_of(objects: Sequence[ObjectInfo]) -> list[ObjectRow]:
    return [(obj.key, obj.size, obj.last_modified) for obj in objects]


def offload_shards(offload: ObjectStore) -> list[tuple[str, str | None, str | None]]:
    """The offload listing's shards as (prefix, start, end): one per first hex digit of
    the uuid (every segment and upload part starts with one), and the three ranges of
    keys outside them (foreign keys), so that each key is listed exactly once."""
    shards: list[tuple[str, str | None, str | None]] = [
        (prefix, None, None) for prefix in offload_keys.shard_prefixes(offload.prefix)
    ]
    shards += [
        (offload.key_prefix, start, end)
        for start, end in offload_keys.outside_shards(offload.prefix)
    ]
    return shards


def list_offload_shards(
    offload: ObjectStore, shards: Sequence[tuple[str, str | None, str | None]]
) -> Iterator[ObjectRow]:
    """Every object of some shards of the offload bucket (``offload_shards``), as rows,
    through the store's ``OffloadBucket`` (S3, GCS or Azure; one per process)."""
    if not shards:
        return
    bucket = offload_bucket_for(offload)
    for prefix, start, end in shards:
        for obj in bucket.iter_objects(prefix, start=start, end=end):
            yield (obj.key, obj.size, obj.last_modified)


def offload_bucket_for(offload: ObjectStore) -> OffloadBucket:
    """One ``OffloadBucket`` per store per process (as ``storage_for``)."""
    key = (os.getpid(), offload)
    with _STORAGE_LOCK:
        bucket = _OFFLOAD.get(key)
        if bucket is None:
            bucket = _OFFLOAD[key] = offload_buckets.offload_bucket(offload)
        return bucket


_OFFLOAD: dict[tuple[int, ObjectStore], OffloadBucket] = {}


def list_offload_bucket(offload: ObjectStore) -> Iterator[ObjectRow]:
    """Every object of the offload bucket under ``LEDGERGC_OFFLOAD_PREFIX`` as rows,
    shard after shard (the scan runs the shards on executors: ``scan.scan_offload``)."""
    yield from list_offload_shards(offload, offload_shards(offload))
