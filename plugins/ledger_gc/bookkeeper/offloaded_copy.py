"""Look at a ``bk-offloaded-copy``'s offloaded objects before its BookKeeper copy goes.

The rules are ``rules.bookkeeper.offloaded_copy``; this is their I/O: a HEAD of the data
object and of the index in ``LEDGERGC_OFFLOAD_BUCKET`` (under ``LEDGERGC_OFFLOAD_PREFIX``,
in the store ``LEDGERGC_OFFLOAD_DRIVER`` names: S3, GCS or Azure, through the
``OffloadBucket`` that ``storage.offload_buckets`` makes, as the tiered-storage source
reads it), and the index's first 16 bytes (the length the offload wrote). Asked
by the survey (so the report shows such a ledger held) and again by the live re-check
just before the delete, which is the decision that must hold. Any answer but the
objects themselves (a 403, a timeout) holds the ledger: it is retried next cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

from ledger_gc.bookkeeper import references
from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.bookkeeper.offloaded_copy import (
    INDEX_HEADER_BYTES,
    ObjectsRead,
    OffloadedCopy,
    why_not_confirmed,
    why_unverifiable,
)
from ledger_gc.rules.storage import offload_keys
from ledger_gc.storage.offload_bucket import OffloadBucket
from ledger_gc.storage.offload_buckets import offload_bucket

log = logging.getLogger(__name__)

#: Concurrent checks of the survey's offloaded copies.
THREADS = 16


class _Unreadable(Exception):
    """An answer that is neither the object nor "no such key"."""


def hold_reason(
    offload: ObjectStore,
    ledger_id: int,
    copy: OffloadedCopy | None,
    storage: OffloadBucket | None = None,
) -> str | None:
    """Why ledger ``ledger_id``'s BookKeeper copy must stay (None: its offloaded copy is
    there, whole). ``offload``: tiered storage (``LEDGERGC_OFFLOAD_*``)."""
    why = why_unverifiable(copy, offload.bucket, family=offload.driver)
    if why is not None or copy is None:
        return why
    storage = storage or offload_bucket(offload)
    keys = offload_keys.segment_keys(storage.prefix, copy.uuid, ledger_id)
    try:
        read = _read(storage, keys)
    except _Unreadable as exc:
        return f"its offloaded copy cannot be read ({exc}); held"
    why = why_not_confirmed(copy, keys, read)
    return None if why is None else f"{why} (bucket {storage.bucket}); held"


def hold_reasons(
    offload: ObjectStore, copies: Mapping[int, OffloadedCopy | None]
) -> dict[int, str]:
    """``hold_reason`` of many ledgers (the survey's candidates), on a few threads:
    ledger id -> why, for those that must stay."""
    if not copies:
        return {}
    storage = offload_bucket(offload) if offload.configured else None
    items = sorted(copies.items())
    with ThreadPoolExecutor(max_workers=min(THREADS, len(items))) as pool:
        found = list(pool.map(lambda item: hold_reason(offload, item[0], item[1], storage), items))
    return {lid: why for (lid, _), why in zip(items, found, strict=True) if why is not None}


def live_hold_reason(
    offload: ObjectStore, pulsar: MetadataStore, ml_name: str, ledger_id: int
) -> str | None:
    """``hold_reason`` with the ledger's offloadContext read again, live (the delete's
    re-check: the one the survey read may be a cycle old)."""
    refs = references.read_live_references(pulsar, ml_name, None)
    if refs.offloaded_deleted.get(ledger_id) != ml_name:
        return f"{ml_name} no longer lists it as offloaded with bookkeeperDeleted=true; held"
    return hold_reason(offload, ledger_id, refs.offload_copies.get(ledger_id))


def _read(storage: OffloadBucket, keys: tuple[str, str]) -> ObjectsRead:
    data_key, index_key = keys
    data = _head(storage, data_key)
    index = _head(storage, index_key)
    header = None
    if index is not None:
        header = _first_bytes(storage, index_key, min(index, INDEX_HEADER_BYTES))
    return ObjectsRead(data, index, header)


def _head(storage: OffloadBucket, key: str) -> int | None:
    """The object's length, None when there is none (a delete marker's 404 included)."""
    try:
        head = storage.head(key)
    except Exception as exc:
        log.warning("cannot HEAD %s/%s: %s", storage.bucket, key, exc)
        raise _Unreadable(f"HEAD {key}: {exc}") from exc
    return None if head is None else head.size


def _first_bytes(storage: OffloadBucket, key: str, count: int) -> bytes:
    if count <= 0:
        return b""
    try:
        return bytes(storage.read_range(key, 0, count))
    except Exception as exc:
        log.warning("cannot read %s/%s: %s", storage.bucket, key, exc)
        raise _Unreadable(f"GET {key}: {exc}") from exc
