"""The demo's writers into Google Cloud Storage and Azure Blob Storage, with boto3's
``put_object``/``delete_object`` keywords, so that ``PulsarCluster`` writes its
offloader's objects to any of the three stores the same way (its ``s3`` field).

Only for planting a demo's objects: ledger-gc itself reads and deletes through its own
``OffloadBucket`` classes (``ledger_gc.storage.gcs_bucket``, ``azure_container``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class GcsObjects:
    """Objects in buckets of a ``google.cloud.storage.Client``."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def create_bucket(self, bucket: str, *, versioning: bool = True) -> None:
        """Create ``bucket`` with object versioning on (so a deleted object's generation
        stays, noncurrent, and a restore can bring it back), unless it exists."""
        if self.client.lookup_bucket(bucket) is None:
            made = self.client.bucket(bucket)
            made.versioning_enabled = versioning
            self.client.create_bucket(made)

    def put_object(
        self, *, Bucket: str, Key: str, Body: bytes, Metadata: Mapping[str, str] | None = None
    ) -> None:
        blob = self.client.bucket(Bucket).blob(Key)
        blob.metadata = dict(Metadata or {})
        blob.upload_from_string(Body)

    def delete_object(self, *, Bucket: str, Key: str) -> None:
        self.client.bucket(Bucket).delete_blob(Key)

    def sizes(self, bucket: str) -> dict[str, int]:
        """Every live object's key and size."""
        return {blob.name: int(blob.size or 0) for blob in self.client.list_blobs(bucket)}


class AzureObjects:
    """Blobs in containers of an ``azure.storage.blob.BlobServiceClient``."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def create_bucket(self, bucket: str) -> None:
        """Create container ``bucket`` unless it exists."""
        container = self.client.get_container_client(bucket)
        if not container.exists():
            container.create_container()

    def put_object(
        self, *, Bucket: str, Key: str, Body: bytes, Metadata: Mapping[str, str] | None = None
    ) -> None:
        self.client.get_blob_client(Bucket, Key).upload_blob(
            Body, overwrite=True, metadata=dict(Metadata or {})
        )

    def delete_object(self, *, Bucket: str, Key: str) -> None:
        self.client.get_blob_client(Bucket, Key).delete_blob()

    def sizes(self, bucket: str) -> dict[str, int]:
        """Every blob's name and size."""
        container = self.client.get_container_client(bucket)
        return {blob.name: int(blob.size or 0) for blob in container.list_blobs()}
