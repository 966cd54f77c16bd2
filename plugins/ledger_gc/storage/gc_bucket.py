"""What the GC lists and deletes with: many prefixes at once, object versions, and the
one bulk delete.

**Deletes are bulk, bounded, idempotent and partial-failure tolerant**, and refuse every
key the store does not own (``owns``): ``bulk_delete.py``, the one place every delete of
the store's data passes through. Listings raise rather than return part of an answer
(``s3_bucket``).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import StorageError
from ledger_gc.rules.storage import keys
from ledger_gc.storage import list_pages
from ledger_gc.storage.bulk_delete import BulkDelete, DeleteResult, RetryPolicy
from ledger_gc.storage.s3_bucket import ObjectInfo, S3Bucket
from ledger_gc.storage.versioning import BucketVersioning, read_bucket_versioning


@dataclass(frozen=True)
class ObjectVersion:
    """One version of a key in a versioned bucket, or one delete marker."""

    key: str
    version_id: str
    is_latest: bool
    last_modified: int  # epoch ms
    size: int
    delete_marker: bool


class GcBucket(S3Bucket):
    """List, check and delete the store's data in its bucket, as the trim, the managed
    ledger's delete, orphan removal and restore do.

    ``retry`` and ``sleep`` pace the bulk delete's retries. Thread-safe: boto3 clients
    are, and the cached versioning answer has its own lock.
    """

    def __init__(
        self,
        store: ObjectStore,
        client: Any = None,
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        **kwargs: Any,
    ) -> None:
        super().__init__(store, client, **kwargs)
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._rng = random.Random()
        self._versioning: BucketVersioning | None = None
        self._versioning_lock = threading.Lock()

    def owns(self, key: str) -> str | None:
        """None when ``key`` is one of this store's objects (a block), else why it is not
        (such a key is never deleted). ``OffloadStorage`` owns segments instead."""
        parsed = keys.parse_key(self.prefix, key)
        return None if parsed.is_block else f"foreign key ({parsed.reason}); never deleted"

    def versioning(self) -> BucketVersioning:
        """Whether a delete in this bucket frees the data (read once, then cached): in a
        versioned bucket it only adds delete markers (``storage.versioning``)."""
        with self._versioning_lock:
            if self._versioning is None:
                self._versioning = read_bucket_versioning(
                    self.client, self.bucket, self.store.key_prefix
                )
            return self._versioning

    # --- listing ----------------------------------------------------------------------

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
        if not prefix.startswith(self.store.key_prefix):
            raise ValueError(
                f"prefix {prefix!r} is outside the store's prefix {self.store.key_prefix!r}"
            )
        return self.delete_keys(
            (obj.key for obj in self.iter_objects(prefix)), max_workers=max_workers
        )


def run_markers(
    versions: list[ObjectVersion], earliest: int, latest_ms: int
) -> tuple[list[ObjectVersion], ObjectVersion] | None:
    """The delete markers on top of one key's versions that the run made (between
    ``earliest`` and ``latest_ms``), newest first, and the data version under them; None
    when the key's latest version is data, a marker from another time is in the way (a
    later delete, which is not this run's to undo), or no data is under them (pure).

    A retried DeleteObjects may stack several markers on one key; all of them go."""
    top = [v for v in versions if v.is_latest]
    rest = sorted(
        (v for v in versions if not v.is_latest), key=lambda v: v.last_modified, reverse=True
    )
    found: list[ObjectVersion] = []
    for version in top[:1] + rest:
        if not version.delete_marker:
            return (found, version) if found else None
        if not earliest <= version.last_modified <= latest_ms:
            return None
        found.append(version)
    return None


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
