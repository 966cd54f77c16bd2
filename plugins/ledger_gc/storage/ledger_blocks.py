"""What a managed ledger writes and reads its entries with: the blocks of its ledgers.

**Blocks are immutable.** They are written with ``If-None-Match: *``, so a second writer
(a fenced broker, a retried task) can never overwrite a block another writer made; S3
refuses with 412 and we say so. A read is checked against the block's key and index; a
failed or short read raises (``s3_bucket``). The object format is ``blocks``.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from botocore.exceptions import BotoCoreError, ClientError

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import BlockFormatError, StorageError
from ledger_gc.rules.storage import keys
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
from ledger_gc.storage.bulk_delete import error_details
from ledger_gc.storage.s3_bucket import S3Bucket

log = logging.getLogger(__name__)

#: How many bytes of a block's end to fetch when opening it: a block's trailer and index
#: (8 bytes per entry) fit in one request for blocks of up to ~8000 entries.
TAIL_READ_SIZE = 64 * 1024
INDEX_CACHE_SIZE = 256


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


class LedgerBlocks(S3Bucket):
    """Write, list and read the blocks of a managed ledger's ledgers in the store's bucket.

    Thread-safe: boto3 clients are, and the index cache has its own lock.
    """

    def __init__(
        self,
        store: ObjectStore,
        client: Any = None,
        *,
        index_cache_size: int = INDEX_CACHE_SIZE,
        **kwargs: Any,
    ) -> None:
        super().__init__(store, client, **kwargs)
        self._index_cache: OrderedDict[tuple[str, int], BlockIndex] = OrderedDict()
        self._index_cache_size = index_cache_size
        self._index_lock = threading.Lock()

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


def _index_of(data: bytes) -> BlockIndex:
    """The index of a block we just encoded (to prime the cache for read-after-write)."""
    trailer = parse_trailer(data, object_size=len(data))
    return parse_index(
        data[trailer.index_offset : trailer.index_offset + trailer.index_size], trailer
    )
