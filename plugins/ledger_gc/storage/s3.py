"""LedgerStorage: the store's ledger data in S3 (blocks, listings, bulk delete).

This is the imperative shell around ``keys`` (the layout) and ``blocks`` (the object
format). Three rules shape it:

* **A failed read is an exception, never an empty answer.** A listing that fails half
  way raises; it does not return the half it got. A GC that mistook "could not list" for
  "nothing there" would delete live data elsewhere or miss data it should keep.
* **Blocks are immutable.** They are written with ``If-None-Match: *``, so a second
  writer (a fenced broker, a retried task) can never overwrite a block another writer
  made; S3 refuses with 412 and we say so.
* **Deletes are bulk, bounded, idempotent and partial-failure tolerant**, and refuse
  every key the store does not own: ``bulk_delete.py``, the one place every delete of
  the store's data passes through.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    PartialCredentialsError,
)

from ledger_gc.errors import BlockFormatError, BucketNotFoundError, ConfigError, StorageError
from ledger_gc.rules.storage import keys, offload_keys
from ledger_gc.rules.storage.blocks import (
    ENTRY_HEADER_SIZE,
    HEADER_SIZE,
    OFFSET_SIZE,
    TRAILER_SIZE,
    Block,
    BlockIndex,
    decode_block,
    decode_entries,
    encode_block,
    parse_index,
    parse_trailer,
)
from ledger_gc.settings import Settings
from ledger_gc.storage import list_pages
from ledger_gc.storage.bulk_delete import (
    TRANSPORT_ERRORS,
    BulkDelete,
    DeleteResult,
    RetryPolicy,
    error_details,
)
from ledger_gc.storage.versioning import BucketVersioning, read_bucket_versioning

log = logging.getLogger(__name__)

#: botocore's attempts per call, the first try included (its total_max_attempts).
BOTOCORE_MAX_ATTEMPTS = 3
CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 30.0
MAX_POOL_CONNECTIONS = 32
#: How many bytes of a block's end to fetch when opening it: a block's trailer and index
#: (8 bytes per entry) fit in one request for blocks of up to ~8000 entries.
TAIL_READ_SIZE = 64 * 1024
INDEX_CACHE_SIZE = 256

_ACCESS_DENIED_CODES = frozenset(
    {"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled"}
)


class BlockExistsError(StorageError):
    """A block's key is taken: S3 refused to overwrite it (``If-None-Match: *``).

    A writer that gets this has lost a race for its ledger (another writer fenced it), so
    it must stop writing; it is a separate class so that it can be told apart from an
    outage.
    """


@dataclass(frozen=True)
class BlockRef:
    """A block object of one ledger, as listed (or as just written).

    ``last_modified`` is epoch milliseconds; it is None for a ref returned by
    ``write_block`` because S3 does not return it on PUT. ``entry_count`` is known only
    for a ref returned by ``write_block`` (a listing does not open objects).
    """

    key: str
    ml_name: str
    ledger_id: int
    first_entry_id: int
    size: int
    last_modified: int | None = None
    entry_count: int | None = None


class BlockStats(NamedTuple):
    """A block's entry count and the total size of its payloads (without framing)."""

    entry_count: int
    payload_bytes: int


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its key, size in bytes and last-modified time (epoch ms)."""

    key: str
    size: int
    last_modified: int


@dataclass(frozen=True)
class ObjectVersion:
    """One version of a key in a versioned bucket, or one delete marker."""

    key: str
    version_id: str
    is_latest: bool
    last_modified: int  # epoch ms
    size: int
    delete_marker: bool


def build_client(
    settings: Settings,
    *,
    max_attempts: int = BOTOCORE_MAX_ATTEMPTS,
    retry_mode: str = "standard",
) -> Any:
    """A boto3 S3 client for the store's endpoint and region.

    Credentials are the settings' (boto3's variables, or the ``ledgergc_s3``
    connection), else boto3's usual chain (profile, instance role). A new session per
    client, because boto3's default session is not safe to share between
    threads while clients are being created. Path-style addressing for a custom endpoint
    (SeaweedFS, MinIO, Ceph): such endpoints rarely resolve ``<bucket>.<host>`` names.
    """
    config = Config(
        region_name=settings.s3_region,
        retries={"mode": retry_mode, "total_max_attempts": max_attempts},
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        read_timeout=READ_TIMEOUT_SECONDS,
        max_pool_connections=MAX_POOL_CONNECTIONS,
        s3={"addressing_style": "path"} if settings.s3_endpoint else {},
    )
    session = boto3.session.Session(
        aws_access_key_id=settings.s3_access_key_id,
        aws_secret_access_key=settings.s3_secret_access_key,
        aws_session_token=settings.s3_session_token,
    )
    return session.client("s3", endpoint_url=settings.s3_endpoint or None, config=config)


class LedgerStorage:
    """Read, write, list and delete the store's ledger data in one bucket.

    ``client`` may be given (tests, a client with a custom retry setting); otherwise one
    is built from ``settings``. Thread-safe: boto3 clients are, and the index cache has
    its own lock.
    """

    def __init__(
        self,
        settings: Settings,
        client: Any = None,
        *,
        retry: RetryPolicy | None = None,
        index_cache_size: int = INDEX_CACHE_SIZE,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not settings.bucket:
            raise ConfigError(
                "LEDGERGC_BUCKET is empty: the S3 block store is off (a Pulsar cluster's "
                "data is in BookKeeper), so there are no ledger blocks to read, write, trim "
                "or delete; set LEDGERGC_BUCKET to the bucket that holds the store's blocks"
            )
        self.settings = settings
        self.bucket = settings.bucket
        self.prefix = settings.prefix
        self.client = client if client is not None else build_client(settings)
        list_pages.install(self.client)
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._rng = random.Random()
        self._index_cache: OrderedDict[tuple[str, int], BlockIndex] = OrderedDict()
        self._index_cache_size = index_cache_size
        self._index_lock = threading.Lock()
        self._versioning: BucketVersioning | None = None
        self._versioning_lock = threading.Lock()

    def owns(self, key: str) -> str | None:
        """None when ``key`` is one of this store's objects (a block), else why it is not
        (such a key is never deleted). ``OffloadStorage`` owns segments instead."""
        parsed = keys.parse_key(self.prefix, key)
        return None if parsed.is_block else f"foreign key ({parsed.reason}); never deleted"

    # --- connection -------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The endpoint the client talks to, for error messages."""
        return str(self.client.meta.endpoint_url)

    def check_bucket(self) -> None:
        """Fail early and clearly if the bucket is missing, forbidden or unreachable."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code, status, _ = error_details(exc)
            if status == 404 or code in ("404", "NoSuchBucket", "NotFound"):
                raise self._bucket_not_found() from exc
            raise self._error(exc, f"checking bucket '{self.bucket}'") from exc
        except BotoCoreError as exc:
            raise self._error(exc, f"checking bucket '{self.bucket}'") from exc

    def versioning(self) -> BucketVersioning:
        """Whether a delete in this bucket frees the data (read once, then cached): in a
        versioned bucket it only adds delete markers (``storage.versioning``)."""
        with self._versioning_lock:
            if self._versioning is None:
                self._versioning = read_bucket_versioning(
                    self.client, self.bucket, self.settings.key_prefix
                )
            return self._versioning

    # --- blocks -----------------------------------------------------------------------

    def write_block(
        self, ml_name: str, ledger_id: int, first_entry_id: int, payloads: Sequence[bytes]
    ) -> BlockRef:
        """Write entries ``first_entry_id, ...`` of a ledger as a new, immutable block.

        Raises BlockExistsError if the block's key is taken: S3 refused the write (412)
        because of ``If-None-Match: *`` (or 409 while another conditional write of the
        same key is in flight). SeaweedFS honours the condition too (checked in
        tests/integration/test_s3_engine.py). An S3-compatible store that ignores
        ``If-None-Match`` would overwrite instead; such a store cannot give this guarantee
        and is not supported.
        """
        key = keys.block_key(self.prefix, ml_name, ledger_id, first_entry_id)
        data = encode_block(ledger_id, first_entry_id, payloads)
        try:
            self.client.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=data,
                IfNoneMatch="*",
                ContentType="application/octet-stream",
            )
        except ClientError as exc:
            code, status, _ = error_details(exc)
            if status == 412 or code == "PreconditionFailed":
                # If botocore retried, our own first attempt may have landed before its
                # response was lost: then the object is ours and the write succeeded.
                retried = exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0)
                if not (retried and self._object_equals(key, data)):
                    raise BlockExistsError(
                        f"block {key} exists in bucket '{self.bucket}'; blocks are immutable "
                        f"and never overwritten (is another writer using ledger {ledger_id}?)"
                    ) from exc
            elif status == 409 or code == "ConditionalRequestConflict":
                raise BlockExistsError(
                    f"block {key} is being written concurrently by another writer; "
                    f"ledger {ledger_id} must have one writer"
                ) from exc
            else:
                raise self._error(exc, f"writing block {key}") from exc
        except BotoCoreError as exc:
            raise self._error(exc, f"writing block {key}") from exc
        self._remember_index(key, len(data), _index_of(data))
        return BlockRef(
            key=key,
            ml_name=ml_name,
            ledger_id=ledger_id,
            first_entry_id=first_entry_id,
            size=len(data),
            entry_count=len(payloads),
        )

    def list_blocks(self, ml_name: str, ledger_id: int) -> list[BlockRef]:
        """The ledger's blocks, in entry order. Foreign objects in its directory are skipped
        (the orphan scan reports them); a listing failure raises."""
        directory = keys.ledger_dir(self.prefix, ml_name, ledger_id)
        refs = []
        for obj in self.iter_objects(directory):
            parsed = keys.parse_key(self.prefix, obj.key)
            if not parsed.is_block:
                log.debug("skipping foreign key %s in %s: %s", obj.key, directory, parsed.reason)
                continue
            assert parsed.first_entry_id is not None
            refs.append(
                BlockRef(
                    key=obj.key,
                    ml_name=ml_name,
                    ledger_id=ledger_id,
                    first_entry_id=parsed.first_entry_id,
                    size=obj.size,
                    last_modified=obj.last_modified,
                )
            )
        refs.sort(key=lambda ref: ref.first_entry_id)
        return refs

    def ledger_payload_bytes(self, ml_name: str, ledger_id: int) -> int:
        """The entry bytes written so far to a ledger (an open one's size, which metadata
        records only on close), from its blocks: each block's framing is known from its
        size and entry count, and only the last block's count needs a read of its tail."""
        blocks = self.list_blocks(ml_name, ledger_id)
        total = 0
        for block, following in zip(blocks, [*blocks[1:], None], strict=True):
            if following is None:
                total += self.block_stats(block).payload_bytes
            else:
                count = following.first_entry_id - block.first_entry_id
                total += (
                    block.size
                    - HEADER_SIZE
                    - TRAILER_SIZE
                    - count * (ENTRY_HEADER_SIZE + OFFSET_SIZE)
                )
        return total

    def read_block(self, ml_name: str, ledger_id: int, block: BlockRef) -> Block:
        """Download and decode a whole block, checking its header against its key."""
        self._check_ref(ml_name, ledger_id, block)
        data = self._get(block.key, None, f"reading block {block.key}")
        return decode_block(
            data, expected_ledger_id=ledger_id, expected_first_entry_id=block.first_entry_id
        )

    def block_stats(self, block: BlockRef) -> BlockStats:
        """How many entries a block holds and their payload bytes, from its index alone.

        A writer recovering a ledger its predecessor left open needs these counts (the
        metadata only gets them when a ledger is closed); reading the tail is enough.
        """
        index = self._block_index(block)
        payload_bytes = index.index_offset - HEADER_SIZE - index.entry_count * ENTRY_HEADER_SIZE
        return BlockStats(index.entry_count, payload_bytes)

    def read_entries(
        self, ml_name: str, ledger_id: int, block: BlockRef, first: int, last: int
    ) -> list[bytes]:
        """Entries ``first..last`` (inclusive, ledger entry ids) of one block.

        Reads only the block's tail (once per block; the index is cached) and one byte
        range spanning exactly those entries. Raises ValueError if the range is not
        inside the block, BlockFormatError if the bytes are corrupt.
        """
        self._check_ref(ml_name, ledger_id, block)
        index = self._block_index(block)
        rel_first = first - block.first_entry_id
        rel_last = last - block.first_entry_id
        if not 0 <= rel_first <= rel_last < index.entry_count:
            raise ValueError(
                f"entries {first}..{last} are not inside block {block.key}, which holds "
                f"entries {block.first_entry_id}..{block.first_entry_id + index.entry_count - 1}"
            )
        start, end = index.byte_range(rel_first, rel_last)
        span = self._get(block.key, (start, end), f"reading entries {first}..{last} of {block.key}")
        return decode_entries(
            span,
            first,
            count=rel_last - rel_first + 1,
            offsets=[offset - start for offset in index.offsets[rel_first : rel_last + 1]],
        )

    # --- listing ----------------------------------------------------------------------

    def iter_objects(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix`` (a full key prefix; "" is the
        whole bucket), in the store's order, a ListObjectsV2 page at a time.

        Raises StorageError if any page fails: a partial listing is never returned as if
        it were complete.
        """
        for objects, _more in self._object_pages(prefix):
            yield from objects

    def _object_pages(self, prefix: str) -> Iterator[tuple[list[ObjectInfo], bool]]:
        """The pages of one listing as (objects, more pages follow), the objects read
        without botocore's per-key parse (``list_pages``). A truncated page without a new
        continuation token raises: it would loop, or end the listing early."""
        token: str | None = None
        seen: set[str] = set()
        while True:
            request: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
            if token:
                request["ContinuationToken"] = token
            try:
                with list_pages.parsing_here():
                    page = self.client.list_objects_v2(**request)
            except (ClientError, BotoCoreError) as exc:
                raise self._error(exc, f"listing '{prefix}'") from exc
            objects = [ObjectInfo(*row) for row in list_pages.objects_of(page)]
            if not page.get("IsTruncated"):
                yield objects, False
                return
            token = page.get("NextContinuationToken")
            if not token or token in seen:
                raise StorageError(
                    f"listing '{prefix}' in bucket '{self.bucket}' at {self.endpoint}: a "
                    "truncated page came without a new continuation token; the listing is "
                    "not used"
                )
            seen.add(token)
            yield objects, True

    def list_prefixes(
        self, prefixes: Iterable[str], *, workers: int = 8
    ) -> dict[str, list[ObjectInfo]]:
        """Every object under each of ``prefixes``, with as few
        LIST requests as the layout allows: prefixes that share a parent directory two
        levels up (a managed ledger's ``ledgers/`` under its namespace) are listed
        together, with one listing of that parent, when it holds little else.

        Why a parent listing and not ``StartAfter`` ranges: S3 returns keys in binary
        order, but other stores do not (SeaweedFS walks its directory tree, so ``a/x``
        comes before ``a-b/x``, and a ``StartAfter`` of ``a-`` skips ``a/``). A complete
        listing of a prefix is correct in any order; so a parent is listed to its end,
        or, past ``max(1, n // 4)`` pages for ``n`` of the prefixes under it (the cost
        of a few single listings), abandoned for one listing per prefix. Groups are
        listed ``workers`` at a time. Raises StorageError as ``iter_objects``.
        """
        wanted = sorted(set(prefixes))
        groups: dict[str, list[str]] = {}
        for prefix in wanted:
            # A key prefix that is not a directory (an offloaded segment's name) is
            # listed on its own: a parent's keys are matched to prefixes at slashes.
            parent = _parent_dir(prefix, levels=2) if prefix.endswith("/") else prefix
            groups.setdefault(parent, []).append(prefix)
        found: dict[str, list[ObjectInfo]] = {prefix: [] for prefix in wanted}

        def list_group(item: tuple[str, list[str]]) -> dict[str, list[ObjectInfo]]:
            parent, members = item
            if len(members) > 1 and parent != members[0]:
                listed = self._list_bounded(parent, max_pages=max(1, len(members) // 4))
                if listed is not None:
                    return _assign(listed, members)
            return {prefix: list(self.iter_objects(prefix)) for prefix in members}

        items = list(groups.items())
        if len(items) == 1 or workers <= 1:
            results = [list_group(item) for item in items]
        else:
            with ThreadPoolExecutor(
                min(workers, len(items)), thread_name_prefix="ledgergc-list"
            ) as pool:
                results = list(pool.map(list_group, items))
        for result in results:
            found.update(result)
        return found

    def _list_bounded(self, prefix: str, *, max_pages: int) -> list[ObjectInfo] | None:
        """Everything under ``prefix`` if it fits in ``max_pages`` LIST pages, else None."""
        listed: list[ObjectInfo] = []
        for number, (objects, more) in enumerate(self._object_pages(prefix), start=1):
            listed.extend(objects)
            if not more:
                break
            if number == max_pages:
                return None
        return listed

    def iter_versions(self, prefix: str) -> Iterator[ObjectVersion]:
        """Every version and delete marker of the keys under ``prefix``
        (ListObjectVersions, paginated); a failed page raises, as ``iter_objects``."""
        paginator = self.client.get_paginator("list_object_versions")
        try:
            for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
                for item in page.get("Versions", ()):
                    yield ObjectVersion(
                        key=item["Key"],
                        version_id=str(item["VersionId"]),
                        is_latest=bool(item["IsLatest"]),
                        last_modified=list_pages.epoch_ms(item["LastModified"]),
                        size=int(item.get("Size", 0)),
                        delete_marker=False,
                    )
                for item in page.get("DeleteMarkers", ()):
                    yield ObjectVersion(
                        key=item["Key"],
                        version_id=str(item["VersionId"]),
                        is_latest=bool(item["IsLatest"]),
                        last_modified=list_pages.epoch_ms(item["LastModified"]),
                        size=0,
                        delete_marker=True,
                    )
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, f"listing the versions of '{prefix}'") from exc

    def remove_delete_marker(self, key: str, version_id: str) -> None:
        """Delete one delete marker (DeleteObject with its VersionId), which makes the
        version before it current again. Only a block key of this store is touched."""
        why_not = self.owns(key)
        if why_not is not None:
            raise StorageError(f"{key}: {why_not}")
        try:
            self.client.delete_object(Bucket=self.bucket, Key=key, VersionId=version_id)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, f"removing the delete marker {version_id} of {key}") from exc

    def prefix_is_empty(self, prefix: str, *, blocks_only: bool = False) -> bool:
        """True if nothing is stored under ``prefix`` (one LIST with MaxKeys=1).

        With ``blocks_only`` foreign objects are ignored: "no data of the store is left",
        which is what a trim must confirm before removing its marker, since foreign
        objects are never deleted and would otherwise keep the marker forever.
        """
        if blocks_only:
            return not any(
                keys.parse_key(self.prefix, obj.key).is_block for obj in self.iter_objects(prefix)
            )
        try:
            response = self.client.list_objects_v2(Bucket=self.bucket, Prefix=prefix, MaxKeys=1)
        except (ClientError, BotoCoreError) as exc:
            raise self._error(exc, f"listing '{prefix}'") from exc
        return not response.get("Contents")

    # --- deletion ---------------------------------------------------------------------

    def delete_keys(self, keys_to_delete: Iterable[str], *, max_workers: int = 1) -> DeleteResult:
        """Delete the store's keys in bulk (``bulk_delete``): report, do not raise, keys
        that could not be deleted; refuse foreign keys (``owns``)."""
        return self.bulk_delete().delete_keys(keys_to_delete, max_workers=max_workers)

    def bulk_delete(self) -> BulkDelete:
        return BulkDelete(
            self.client,
            self.bucket,
            owns=self.owns,
            fatal=self._error,
            endpoint=self.endpoint,
            retry=self.retry,
            sleep=self._sleep,
            rng=self._rng,
        )

    def delete_prefix_data(self, prefix: str, *, max_workers: int = 1) -> DeleteResult:
        """Delete every block under ``prefix`` (a managed-ledger or ledger directory).

        ``prefix`` must end with "/": without it, ``.../persistent/topic`` would also
        match ``.../persistent/topic-2``. Foreign objects under it are listed in
        ``refused`` and left in place.
        """
        if not prefix.endswith("/") or not prefix.strip("/"):
            raise ValueError(f"prefix {prefix!r} must be a non-empty directory ending in '/'")
        if not prefix.startswith(self.settings.key_prefix):
            raise ValueError(
                f"prefix {prefix!r} is outside the store's prefix {self.settings.key_prefix!r}"
            )
        return self.delete_keys(
            (obj.key for obj in self.iter_objects(prefix)), max_workers=max_workers
        )

    # --- internals --------------------------------------------------------------------

    def _check_ref(self, ml_name: str, ledger_id: int, block: BlockRef) -> None:
        expected = keys.block_key(self.prefix, ml_name, ledger_id, block.first_entry_id)
        if block.key != expected:
            raise ValueError(
                f"block {block.key} is not a block of ledger {ledger_id} of {ml_name} "
                f"(expected {expected})"
            )

    def _block_index(self, block: BlockRef) -> BlockIndex:
        """The block's index: from the cache, or from a suffix GET (plus one more GET if
        the index is larger than the suffix)."""
        cache_key = (block.key, block.size)
        with self._index_lock:
            index = self._index_cache.get(cache_key)
            if index is not None:
                self._index_cache.move_to_end(cache_key)
                return index
        if block.size < HEADER_SIZE + TRAILER_SIZE:
            raise BlockFormatError(
                f"block {block.key} is {block.size} bytes, too small to be a block: truncated"
            )
        tail = self._get(
            block.key,
            (max(0, block.size - TAIL_READ_SIZE), block.size),
            f"reading the index of {block.key}",
        )
        trailer = parse_trailer(tail, object_size=block.size)
        tail_start = block.size - len(tail)
        if trailer.index_offset >= tail_start:
            start = trailer.index_offset - tail_start
            raw_index = tail[start : start + trailer.index_size]
        else:
            raw_index = self._get(
                block.key,
                (trailer.index_offset, trailer.index_offset + trailer.index_size),
                f"reading the index of {block.key}",
            )
        index = parse_index(raw_index, trailer)
        self._remember_index(block.key, block.size, index)
        return index

    def _remember_index(self, key: str, size: int, index: BlockIndex) -> None:
        with self._index_lock:
            self._index_cache[(key, size)] = index
            self._index_cache.move_to_end((key, size))
            while len(self._index_cache) > self._index_cache_size:
                self._index_cache.popitem(last=False)

    def _get(self, key: str, byte_range: tuple[int, int] | None, what: str) -> bytes:
        """GET an object, or its ``[start, end)`` bytes; a short answer is corruption."""
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": key}
        if byte_range is not None:
            params["Range"] = f"bytes={byte_range[0]}-{byte_range[1] - 1}"
        try:
            response = self.client.get_object(**params)
            data: bytes = response["Body"].read()
        except ClientError as exc:
            code, status, _ = error_details(exc)
            if code in ("NoSuchKey", "404") or status == 404:
                with self._index_lock:
                    for cache_key in [k for k in self._index_cache if k[0] == key]:
                        del self._index_cache[cache_key]
                raise StorageError(
                    f"{what}: object {key} not found in bucket '{self.bucket}' at "
                    f"{self.endpoint} (deleted by a trim, or never written)"
                ) from exc
            if code == "InvalidRange" or status == 416:
                raise BlockFormatError(
                    f"{what}: byte range {params.get('Range')} is outside the object; "
                    "the listed size or the block's index is wrong"
                ) from exc
            raise self._error(exc, what) from exc
        except BotoCoreError as exc:
            raise self._error(exc, what) from exc
        if byte_range is not None and len(data) != byte_range[1] - byte_range[0]:
            raise BlockFormatError(
                f"{what}: asked for bytes {byte_range[0]}..{byte_range[1] - 1}, got "
                f"{len(data)} bytes; the object is shorter than its listing or index says"
            )
        return data

    def _object_equals(self, key: str, data: bytes) -> bool:
        """True if the object at ``key`` is exactly ``data`` (compared by MD5 ETag, then
        by content when the ETag is not a plain MD5, e.g. with SSE-KMS)."""
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except (ClientError, BotoCoreError):
            return False
        if head.get("ContentLength") != len(data):
            return False
        etag = str(head.get("ETag", "")).strip('"')
        if etag == hashlib.md5(data, usedforsecurity=False).hexdigest():
            return True
        try:
            return self._get(key, None, f"comparing {key}") == data
        except StorageError:
            return False

    def _bucket_not_found(self) -> BucketNotFoundError:
        return BucketNotFoundError(
            f"bucket '{self.bucket}' not found at {self.endpoint}; create it or set LEDGERGC_BUCKET"
        )

    def _error(self, exc: Exception, what: str) -> StorageError:
        """Turn a boto error into a StorageError that names the endpoint and the fix."""
        if isinstance(exc, ClientError):
            code, status, message = error_details(exc)
            if code == "NoSuchBucket":
                return self._bucket_not_found()
            if code in _ACCESS_DENIED_CODES or status == 403:
                return StorageError(
                    f"{what}: access denied to bucket '{self.bucket}' at {self.endpoint} "
                    f"({code}); check the AWS credentials (AWS_ACCESS_KEY_ID / AWS_PROFILE) "
                    "and the bucket policy"
                )
            return StorageError(
                f"{what}: S3 at {self.endpoint} answered {code} (HTTP {status}): {message}"
            )
        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            return StorageError(
                f"{what}: no AWS credentials for S3 at {self.endpoint}; set "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
            )
        if isinstance(exc, TRANSPORT_ERRORS):
            return StorageError(
                f"{what}: S3 endpoint {self.endpoint} unreachable ({exc}); check "
                "LEDGERGC_S3_ENDPOINT and that the server is running. Nothing was deleted "
                "on the strength of this failure."
            )
        return StorageError(f"{what}: S3 at {self.endpoint} failed: {exc}")


def _parent_dir(prefix: str, *, levels: int) -> str:
    """``prefix`` (a directory, ending in ``/``) ``levels`` directories up; "" at the top."""
    parts = prefix.rstrip("/").split("/")
    kept = parts[: max(0, len(parts) - levels)]
    return "/".join(kept) + "/" if kept else ""


def _assign(listed: Sequence[ObjectInfo], prefixes: Sequence[str]) -> dict[str, list[ObjectInfo]]:
    """The objects of a parent's listing under each of ``prefixes`` (directories, ending in
    ``/``; other keys dropped)."""
    found: dict[str, list[ObjectInfo]] = {prefix: [] for prefix in prefixes}
    for obj in listed:
        head = obj.key
        # A prefix ends in "/", so it is the key cut after one of its slashes.
        cut = head.find("/")
        while cut != -1:
            bucket = found.get(head[: cut + 1])
            if bucket is not None:
                bucket.append(obj)  # (and under any prefix nested in this one)
            cut = head.find("/", cut + 1)
    return found


def _index_of(data: bytes) -> BlockIndex:
    """The index of a block we just encoded (to prime the cache for read-after-write)."""
    trailer = parse_trailer(data, object_size=len(data))
    return parse_index(
        data[trailer.index_offset : trailer.index_offset + trailer.index_size], trailer
    )


def offload_settings(settings: Settings) -> Settings:
    """The settings seen from the offload bucket: its bucket, prefix and endpoint."""
    return settings.with_overrides(
        bucket=settings.offload_bucket,
        prefix=settings.offload_prefix,
        s3_endpoint=settings.offload_s3_endpoint or settings.s3_endpoint,
    )


class OffloadStorage(LedgerStorage):
    """Pulsar's tiered-storage bucket (``LEDGERGC_OFFLOAD_*``): the same listing and bulk
    delete, but what it owns are offloaded-ledger segments (``offload_keys``)."""

    def __init__(self, settings: Settings, client: Any = None, **kwargs: Any) -> None:
        super().__init__(offload_settings(settings), client, **kwargs)

    def owns(self, key: str) -> str | None:
        if offload_keys.parse_segment_key(self.prefix, key) is None:
            return "not an offloaded-ledger segment (<uuid>-ledger-<id>[-index]); never deleted"
        return None
