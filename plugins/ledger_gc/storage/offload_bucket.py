"""The bucket Pulsar offloads to, whichever store it is in: one interface over S3, Google
Cloud Storage and Azure Blob Storage.

Pulsar's jclouds offloaders write the same ``<uuid>-ledger-<id>[-index]`` objects on all
three (DESIGN.md "Tiered storage on Google Cloud Storage and Azure Blob Storage"), so the
tiered-storage source, its live re-check, its delete, its restore and the
``bk-offloaded-copy`` check are written once, against ``OffloadBucket``; what differs is
below it: how a store lists, what names an object's version (an S3 ETag, a GCS
generation, an Azure ETag), how a delete is made conditional on it, and what the store
keeps of a deleted object (S3 versions, GCS soft delete or noncurrent generations, Azure
soft delete or versions).

Two rules every implementation keeps, as ``s3_bucket`` does:

* **A failed read is an exception, never an empty answer** (``StorageError``; a missing
  bucket ``BucketNotFoundError``). ``head`` answers None only for "no such object".
* **A delete cannot hit a moved object.** ``delete_listed`` deletes each object only if
  it is still the version that was listed (GCS ``ifGenerationMatch``, Azure
  ``If-Match``); an object re-written since is kept and reported in ``failed`` with a
  reason that says it moved. S3's DeleteObjects has no such condition: there the
  re-listing just before the delete is the check (``Deleter``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.storage.bulk_delete import DeleteResult
from ledger_gc.storage.s3_bucket import ObjectInfo
from ledger_gc.storage.versioning import BucketVersioning

#: The three families of store (``ObjectStore.driver`` as ``rules.storage`` normalises
#: Pulsar's driver names to them).
S3, GCS, AZURE = "s3", "gcs", "azure"

#: Objects per conditional batch delete: GCS's batch API takes at most 100 calls, Azure's
#: Blob Batch at most 256 sub-requests.
GCS_BATCH = 100
AZURE_BATCH = 256


@dataclass(frozen=True)
class ObjectHead:
    """One object as a HEAD (GCS ``get_blob``, Azure ``get_blob_properties``) sees it.

    ``version``: the GCS generation (decimal text), the Azure ETag (without quotes), the
    S3 ETag; what ``delete_listed`` conditions a delete on. ``metadata``: the user
    metadata, keys in lower case (S3 and Azure fold them; Pulsar's readers compare them
    case-insensitively).
    """

    key: str
    size: int
    last_modified: int  # epoch ms
    version: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DeletedVersion:
    """A deleted object that the bucket still keeps, and how to bring it back.

    ``version``: what the store's restore takes (an S3 delete marker's version id, a GCS
    generation, an Azure version id or "" for a soft-deleted blob); ``how``: "delete-marker",
    "soft-delete" or "noncurrent-version", for the audit and the report.

    ``listed_version``: the object's version while it was live, as ``ObjectInfo.version``
    named it (a GCS generation, an Azure ETag without quotes): what a run's write-ahead
    audit records of each object it deletes, so that a restore brings back exactly the
    version the run deleted and not another deleted near the same time. None where the
    store's listings name none (S3), or the store did not say.
    """

    key: str
    version: str
    size: int
    deleted_at: int  # epoch ms; 0 when the store does not say
    how: str
    listed_version: str | None = None


@runtime_checkable
class OffloadBucket(Protocol):
    """What ledger-gc needs of the offload bucket (or container)."""

    store: ObjectStore
    #: The bucket (GCS) or container (Azure).
    bucket: str
    #: ``LEDGERGC_OFFLOAD_PREFIX`` ("" at the root, as the jclouds offloaders write).
    prefix: str

    @property
    def endpoint(self) -> str:
        """Where the store is, for messages (never with a credential in it)."""
        ...

    @property
    def driver(self) -> str:
        """``S3``, ``GCS`` or ``AZURE``."""
        ...

    def check_bucket(self) -> None:
        """Raise ``BucketNotFoundError``/``StorageError`` (one line, naming the setting to
        fix) when the bucket is missing, forbidden or unreachable."""
        ...

    def owns(self, key: str) -> str | None:
        """None when ``key`` is an object ledger-gc may delete here (a segment, a GCS
        upload part), else why not; such a key is never deleted."""
        ...

    def iter_objects(
        self, prefix: str = "", *, start: str | None = None, end: str | None = None
    ) -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix`` and, when given, sorts at or
        after ``start`` and before ``end`` (a shard of the bucket), each with its
        ``version``; a page that fails raises."""
        ...

    def list_prefixes(
        self, prefixes: Sequence[str], *, workers: int = 8
    ) -> dict[str, list[ObjectInfo]]:
        """Every object under each of ``prefixes`` (the delete's confirmation)."""
        ...

    def head(self, key: str) -> ObjectHead | None:
        """The object now (None: there is none); any other answer raises."""
        ...

    def read_range(self, key: str, start: int, count: int) -> bytes:
        """``count`` bytes of the object from ``start`` (the offload index's header)."""
        ...

    def delete_listed(self, objects: Sequence[ObjectInfo]) -> DeleteResult:
        """Delete these objects, each only if it is still the ``version`` listed (where
        the store can condition a delete), in the store's batches; refuse what it does
        not ``own``. An object already gone counts as deleted; one that moved is in
        ``failed`` ("moved since it was listed: kept")."""
        ...

    def versioning(self) -> BucketVersioning:
        """What a delete here does to the data (read once): whether the store keeps it
        (``keeps_deleted_data``), for how long, and a sentence for the report that says
        whether a delete can be undone."""
        ...

    def deleted_versions(self, key: str, earliest: int, latest: int) -> list[DeletedVersion]:
        """What the bucket keeps of ``key`` deleted between ``earliest`` and ``latest``
        (epoch ms), newest first, each with its ``listed_version`` where the store names
        one (every version kept in the window, not only the newest: the restore picks the
        one the run's audit names); [] when nothing is kept."""
        ...

    def restore(self, found: DeletedVersion) -> None:
        """Make ``found`` the object again, never over an object written since (a key
        that exists now is left alone: ``StorageError`` says so)."""
        ...
