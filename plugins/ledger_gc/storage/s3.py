"""LedgerStorage: the store's ledger data in S3 (blocks, listings, bulk delete).

The imperative shell around ``keys`` (the layout) and ``blocks`` (the object format), in
three parts: what a managed ledger writes and reads with (``ledger_blocks``), what the GC
lists and deletes with (``gc_bucket``), and the client, errors and listing both stand on
(``s3_bucket``). ``LedgerStorage`` is all of it for the store's bucket;
``OffloadStorage`` is Pulsar's tiered-storage bucket on S3, the S3 ``OffloadBucket``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.rules.storage import offload_keys
from ledger_gc.storage import list_pages
from ledger_gc.storage.bulk_delete import DeleteResult, RetryPolicy, error_details
from ledger_gc.storage.gc_bucket import GcBucket, run_markers
from ledger_gc.storage.ledger_blocks import INDEX_CACHE_SIZE, LedgerBlocks
from ledger_gc.storage.offload_bucket import S3, DeletedVersion, ObjectHead
from ledger_gc.storage.s3_bucket import ObjectInfo

#: How S3 names the delete markers it keeps of a deleted key (``DeletedVersion.how``).
DELETE_MARKER = "delete-marker"


class LedgerStorage(LedgerBlocks, GcBucket):
    """Read, write, list and delete the store's ledger data in one bucket.

    ``client`` may be given (tests, a client with a custom retry setting); otherwise one
    is built from ``store``. Thread-safe: boto3 clients are, and the index cache has
    its own lock.
    """

    def __init__(
        self,
        store: ObjectStore,
        client: Any = None,
        *,
        retry: RetryPolicy | None = None,
        index_cache_size: int = INDEX_CACHE_SIZE,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(store, client, retry=retry, index_cache_size=index_cache_size, sleep=sleep)


class OffloadStorage(LedgerStorage):
    """Pulsar's tiered-storage bucket (``LEDGERGC_OFFLOAD_*``) on S3: the ``OffloadBucket``
    of the S3 family. The same listing and bulk delete as the store's bucket, but what
    it owns are offloaded-ledger segments (``offload_keys``).

    S3's DeleteObjects has no per-key condition (``ObjectInfo.version`` is None in its
    listings), so ``delete_listed`` is the bulk delete: a re-write between the listing
    and the delete is caught by the re-listing just before it (``Deleter``)."""

    def __init__(self, store: ObjectStore, client: Any = None, **kwargs: Any) -> None:
        """``store``: the tiered-storage bucket (``Endpoints.offload``)."""
        super().__init__(store, client, **kwargs)

    @property
    def driver(self) -> str:
        return S3

    def owns(self, key: str) -> str | None:
        # GCS's multipart parts (``<uuid>_<8 digits>``) are jclouds' on GCS only: on
        # S3 such a key is someone else's.
        return offload_keys.why_not_a_segment(self.prefix, key)

    def iter_objects(
        self, prefix: str = "", *, start: str | None = None, end: str | None = None
    ) -> Iterator[ObjectInfo]:
        """Every object under ``prefix``, at or after ``start`` and before ``end``.

        ``start`` is sent as ListObjectsV2's ``StartAfter`` (a key just before it: S3's is
        exclusive), ``end`` ends the listing at the first key at or past it: S3 lists in
        binary key order, and SeaweedFS's directory walk agrees at a first-character
        boundary below the prefix, which is how the offload scan shards the bucket."""
        if start is None and end is None:
            yield from super().iter_objects(prefix)
            return
        for obj in self._range_pages(prefix, start):
            if start is not None and obj.key < start:
                continue
            if end is not None and obj.key >= end:
                return
            yield obj

    def _range_pages(self, prefix: str, start: str | None) -> Iterator[ObjectInfo]:
        after = _before(start) if start and start > prefix else None
        for objects, _more in self._object_pages(prefix, after):
            yield from objects

    def head(self, key: str) -> ObjectHead | None:
        try:
            answer = self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            code, status, _ = error_details(exc)
            if status == 404 or code in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self._error(exc, f"reading {key}") from exc
        except BotoCoreError as exc:
            raise self._error(exc, f"reading {key}") from exc
        metadata = {str(k).lower(): str(v) for k, v in (answer.get("Metadata") or {}).items()}
        return ObjectHead(
            key,
            int(answer.get("ContentLength", 0)),
            list_pages.epoch_ms(answer["LastModified"]),
            str(answer.get("ETag", "")).strip('"') or None,
            metadata,
        )

    def read_range(self, key: str, start: int, count: int) -> bytes:
        if count <= 0:
            return b""
        try:
            answer = self.client.get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes={start}-{start + count - 1}"
            )
            return bytes(answer["Body"].read())
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, f"reading {key}") from exc

    def delete_listed(self, objects: Sequence[ObjectInfo]) -> DeleteResult:
        return self.delete_keys(obj.key for obj in objects)

    def deleted_versions(self, key: str, earliest: int, latest: int) -> list[DeletedVersion]:
        """The delete markers made on ``key`` between ``earliest`` and ``latest`` that
        hide a data version (``run_markers``), as one ``DeletedVersion`` whose
        ``version`` lists the markers' ids, newest first."""
        versions = [v for v in self.iter_versions(key) if v.key == key]
        found = run_markers(versions, earliest, latest)
        if found is None:
            return []
        markers, data = found
        return [
            DeletedVersion(
                key,
                ",".join(marker.version_id for marker in markers),
                data.size,
                markers[0].last_modified,
                DELETE_MARKER,
            )
        ]

    def restore(self, found: DeletedVersion) -> None:
        """Remove the delete markers ``found`` names (newest first): the data version
        under them is current again. A key written since has a data version on top, so
        its markers are not the latest: S3 would keep the newer data current anyway."""
        for version_id in found.version.split(","):
            self.remove_delete_marker(found.key, version_id)


def _before(start: str) -> str:
    """A key that sorts just before ``start`` (ListObjectsV2's StartAfter is exclusive):
    its last character one lower, then the highest code point (every key starting with
    that lower character is a key before ``start`` too, so nothing at or after it is
    skipped; the filter drops what this lets through)."""
    last = ord(start[-1])
    if last == 0:
        return start[:-1]
    return f"{start[:-1]}{chr(last - 1)}\uffff"
