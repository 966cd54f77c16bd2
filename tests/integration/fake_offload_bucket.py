"""A small in-memory ``OffloadBucket`` that keeps GCS's rules: every write a new
generation, a delete conditional on the generation listed (``ifGenerationMatch``: a
moved object is kept), soft delete (``deleted_versions``/``restore``), user metadata,
multipart upload parts owned like segments.

For the protocol paths of the tiered-storage source (the re-check, the delete, the
restore) until the real ``GcsBucket``/``AzureContainer`` are on main; fake-gcs-server
itself ignores ``ifGenerationMatch`` on delete (test_object_store_emulators.py), so a
re-write between the listing and the delete could not be shown there anyway.
``before_delete`` runs inside ``delete_listed`` before anything is deleted: a broker
writing at that moment.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import StorageError
from ledger_gc.rules.storage import offload_keys
from ledger_gc.storage.bulk_delete import DeleteResult
from ledger_gc.storage.offload_bucket import GCS, DeletedVersion, ObjectHead
from ledger_gc.storage.s3_bucket import ObjectInfo
from ledger_gc.storage.versioning import BucketVersioning

_GENERATIONS = itertools.count(1_700_000_000_000_001)


@dataclass
class _Object:
    data: bytes
    generation: str
    modified: int
    metadata: dict[str, str] = field(default_factory=dict)


class FakeGcsBucket:
    """GCS's semantics in memory (``driver`` GCS by default)."""

    def __init__(self, store: ObjectStore, *, driver: str = GCS, soft_delete: bool = True):
        self.store = store
        self.bucket = store.bucket
        self.prefix = store.prefix
        self._driver = driver
        self.soft_delete = soft_delete
        self.objects: dict[str, _Object] = {}
        self.deleted: list[tuple[str, _Object, int]] = []  # key, object, deleted at
        self.before_delete: Callable[[], None] | None = None
        self.delete_calls = 0

    # --- writing (the test's broker) --------------------------------------------------

    def put(self, key: str, data: bytes = b"x" * 100, *, modified: int | None = None, **meta: str):
        when = int(time.time() * 1000) if modified is None else modified
        self.objects[key] = _Object(data, str(next(_GENERATIONS)), when, dict(meta))
        return self.objects[key].generation

    # --- the protocol -----------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        return "fake-gcs://memory"

    @property
    def driver(self) -> str:
        return self._driver

    def check_bucket(self) -> None:
        return None

    def owns(self, key: str) -> str | None:
        if offload_keys.parse_segment_key(self.prefix, key) is not None:
            return None
        if offload_keys.parse_upload_part(self.prefix, key) is not None:
            return None
        return "not a segment or an upload part; never deleted"

    def iter_objects(
        self, prefix: str = "", *, start: str | None = None, end: str | None = None
    ) -> Iterator[ObjectInfo]:
        for key in sorted(self.objects):
            if not key.startswith(prefix) or (start and key < start) or (end and key >= end):
                continue
            obj = self.objects[key]
            yield ObjectInfo(key, len(obj.data), obj.modified, obj.generation)

    def list_prefixes(
        self, prefixes: Sequence[str], *, workers: int = 8
    ) -> dict[str, list[ObjectInfo]]:
        return {prefix: list(self.iter_objects(prefix)) for prefix in prefixes}

    def head(self, key: str) -> ObjectHead | None:
        obj = self.objects.get(key)
        if obj is None:
            return None
        meta = {k.lower(): v for k, v in obj.metadata.items()}
        return ObjectHead(key, len(obj.data), obj.modified, obj.generation, meta)

    def read_range(self, key: str, start: int, count: int) -> bytes:
        return self.objects[key].data[start : start + count]

    def delete_listed(self, objects: Sequence[ObjectInfo]) -> DeleteResult:
        self.delete_calls += 1
        if self.before_delete is not None:
            self.before_delete()
        deleted, failed, refused = 0, {}, {}
        for listed in objects:
            why_not = self.owns(listed.key)
            if why_not is not None:
                refused[listed.key] = why_not
                continue
            now = self.objects.get(listed.key)
            if now is None:
                deleted += 1
            elif listed.version is not None and now.generation != listed.version:
                failed[listed.key] = "moved since it was listed (412): kept"
            else:
                del self.objects[listed.key]
                if self.soft_delete:
                    self.deleted.append((listed.key, now, int(time.time() * 1000)))
                deleted += 1
        return DeleteResult(deleted=deleted, failed=failed, refused=refused, requests=1)

    def versioning(self) -> BucketVersioning:
        return BucketVersioning(self.bucket, "soft-delete" if self.soft_delete else "Off")

    def deleted_versions(self, key: str, earliest: int, latest: int) -> list[DeletedVersion]:
        found = [
            DeletedVersion(key, obj.generation, len(obj.data), at, "soft-delete", obj.generation)
            for k, obj, at in self.deleted
            if k == key and earliest <= at <= latest
        ]
        return sorted(found, key=lambda v: v.deleted_at, reverse=True)

    def restore(self, found: DeletedVersion) -> None:
        if found.key in self.objects:
            raise StorageError(f"{found.key} exists again: not restored over it")
        for i, (key, obj, _) in enumerate(self.deleted):
            if key == found.key and obj.generation == found.version:
                self.objects[key] = obj
                del self.deleted[i]
                return
        raise StorageError(f"{found.key} generation {found.version}: not kept")
