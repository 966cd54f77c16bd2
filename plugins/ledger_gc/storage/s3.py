"""LedgerStorage: the store's ledger data in S3 (blocks, listings, bulk delete).

The imperative shell around ``keys`` (the layout) and ``blocks`` (the object format), in
three parts: what a managed ledger writes and reads with (``ledger_blocks``), what the GC
lists and deletes with (``gc_bucket``), and the client, errors and listing both stand on
(``s3_bucket``). ``LedgerStorage`` is all of it for the store's bucket;
``OffloadStorage`` is Pulsar's tiered-storage bucket.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.rules.storage import offload_keys
from ledger_gc.storage.bulk_delete import RetryPolicy
from ledger_gc.storage.gc_bucket import GcBucket
from ledger_gc.storage.ledger_blocks import INDEX_CACHE_SIZE, LedgerBlocks


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
    """Pulsar's tiered-storage bucket (``LEDGERGC_OFFLOAD_*``): the same listing and bulk
    delete, but what it owns are offloaded-ledger segments (``offload_keys``)."""

    def __init__(self, store: ObjectStore, client: Any = None, **kwargs: Any) -> None:
        """``store``: the tiered-storage bucket (``Endpoints.offload``)."""
        super().__init__(store, client, **kwargs)

    def owns(self, key: str) -> str | None:
        if offload_keys.parse_segment_key(self.prefix, key) is None:
            return "not an offloaded-ledger segment (<uuid>-ledger-<id>[-index]); never deleted"
        return None
