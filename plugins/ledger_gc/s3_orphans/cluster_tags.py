"""Read the Pulsar cluster name of offloaded segments (the I/O of ``segments.our_clusters``).

A listing, and an S3 Inventory, report no user metadata, so the name is read with one
HEAD per segment: of a few live segments (to learn this store's names) and of every
orphan-looking one, in the diff (threads on the driver), and again, with both objects,
at the live re-check just before a delete (``deleting.py``): that is the decision that
must hold. A HEAD that fails leaves the segment unread here; the diff then keeps it an
orphan candidate and the re-check, which reads it again, keeps it when it cannot.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.rules.orphans.segments import CLUSTER_METADATA
from ledger_gc.storage import offload_buckets
from ledger_gc.storage.offload_bucket import OffloadBucket

log = logging.getLogger(__name__)

#: The user-metadata key under which Pulsar's blob-store offloader names the managed
#: ledger of an offloaded ledger's objects (S3 returns metadata keys in lower case).
ML_NAME_METADATA = "managedledgername"
#: Concurrent HEADs of the diff's reads.
THREADS = 16


@dataclass
class SegmentMetadata:
    """What the user metadata of a segment's objects says."""

    ml_names: set[str] = field(default_factory=set)
    clusters: set[str | None] = field(default_factory=set)  # None: an object with no name
    unreadable: list[str] = field(default_factory=list)  # keys whose HEAD failed (not 404)


def cluster_of(metadata: Mapping[str, str] | None) -> str | None:
    """The cluster name in an object's user metadata (keys compared case-insensitively,
    as Pulsar's scanner does), None when it has none."""
    for name, value in (metadata or {}).items():
        if name.lower() == CLUSTER_METADATA and value:
            return value
    return None


def read_segment_metadata(storage: OffloadBucket, data_key: str) -> SegmentMetadata:
    """Both objects' user metadata (the data object's, and the index's that Pulsar
    writes with the same user metadata), read with the bucket's ``head``; a missing
    object is skipped."""
    found = SegmentMetadata()
    for key in (data_key, f"{data_key}-index"):
        try:
            head = storage.head(key)
        except Exception as exc:
            log.warning("cannot read the user metadata of %s/%s: %s", storage.bucket, key, exc)
            found.unreadable.append(key)
            continue
        if head is None:
            continue
        found.clusters.add(cluster_of(head.metadata))
        for name, value in head.metadata.items():
            if name.lower() == ML_NAME_METADATA and value:
                found.ml_names.add(value)
    return found


def _tag(storage: OffloadBucket, data_key: str) -> tuple[str, str | None, bool]:
    """(key, cluster name, read?) from the data object, else from its index."""
    for key in (data_key, f"{data_key}-index"):
        try:
            head = storage.head(key)
        except Exception as exc:
            log.warning("cannot read the user metadata of %s/%s: %s", storage.bucket, key, exc)
            return data_key, None, False
        if head is None:
            continue
        return data_key, cluster_of(head.metadata), True
    return data_key, None, False


def read_segment_tags(offload: ObjectStore, data_keys: Sequence[str]) -> dict[str, str | None]:
    """data key -> the segment's cluster name (None: it has none); a segment that could
    not be read is absent (the diff keeps it an orphan candidate)."""
    if not data_keys:
        return {}
    storage = offload_buckets.offload_bucket(offload)
    with ThreadPoolExecutor(max_workers=min(THREADS, len(data_keys))) as pool:
        read = list(pool.map(lambda key: _tag(storage, key), data_keys))
    return {key: tag for key, tag, ok in read if ok}
