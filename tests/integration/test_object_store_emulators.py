"""The local Google Cloud Storage (fake-gcs-server) and Azure Blob Storage (Azurite): what
they do as the real stores do, and what they do not.

These are the servers the GCS and Azure object stores of tiered storage (issue 35) are
tested on. Each test puts the objects Pulsar's jclouds offloaders write
(``<uuid>-ledger-<id>`` and ``<uuid>-ledger-<id>-index``) and a foreign object, then
lists, heads and deletes them as ledger-gc will. Where an emulator does NOT behave as the
real store, a test named ``test_<emulator>_...`` asserts what it does instead: code that
relies on the real behaviour there must be tested with a fault injected at the client,
and such a test fails, and says so, the day a new emulator version starts to behave.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from azure.core import MatchConditions
from azure.core.exceptions import HttpResponseError, ResourceModifiedError
from azure.storage.blob import RetentionPolicy
from google.api_core.exceptions import InternalServerError, PreconditionFailed

from local_stack.azurite import AzuriteBlobServer
from local_stack.fake_gcs import FakeGcsServer

LEDGER_ID = 4242
DATA = b"offloaded entries of one ledger"
INDEX = b"index block"


def segment_names(prefix: str = "") -> tuple[str, str]:
    """A new ``<uuid>-ledger-<id>`` data object's name and its ``-index`` object's."""
    data = f"{prefix}{uuid.uuid4()}-ledger-{LEDGER_ID}"
    return data, f"{data}-index"


# --- fake-gcs-server --------------------------------------------------------------------------


@pytest.fixture
def gcs_bucket(fake_gcs: FakeGcsServer) -> Iterator[Any]:
    """A new bucket on the session's fake-gcs-server."""
    client = fake_gcs.client()
    yield client.create_bucket(f"t-{uuid.uuid4().hex[:12]}")


def test_fake_gcs_server_lists_heads_and_deletes_offloaded_segments(
    fake_gcs: FakeGcsServer, gcs_bucket: Any
) -> None:
    client = fake_gcs.client()
    data, index = segment_names()
    gcs_bucket.blob(data).upload_from_string(DATA)
    gcs_bucket.blob(index).upload_from_string(INDEX)
    gcs_bucket.blob("foreign/report.csv").upload_from_string(b"not Pulsar's")

    listed = {b.name: b for b in client.list_blobs(gcs_bucket.name, prefix=data[:36])}
    assert {name: b.size for name, b in listed.items()} == {data: len(DATA), index: len(INDEX)}
    assert all(isinstance(b.generation, int) and b.generation > 0 for b in listed.values())

    head = gcs_bucket.get_blob(data)
    assert (head.size, head.generation) == (len(DATA), listed[data].generation)
    assert gcs_bucket.blob(data).download_as_bytes(start=0, end=4) == DATA[:5]

    # A rewrite is a new generation, and a write conditioned on the old one is refused.
    gcs_bucket.blob(index).upload_from_string(INDEX + b"!")
    rewritten = gcs_bucket.get_blob(index)
    assert rewritten.generation != listed[index].generation
    with pytest.raises(PreconditionFailed):
        gcs_bucket.blob(index).upload_from_string(
            INDEX, if_generation_match=listed[index].generation
        )

    gcs_bucket.blob(data).delete(if_generation_match=listed[data].generation)
    gcs_bucket.blob(index).delete(if_generation_match=rewritten.generation)
    assert [b.name for b in client.list_blobs(gcs_bucket.name)] == ["foreign/report.csv"]


def test_fake_gcs_server_ignores_if_generation_match_on_delete(gcs_bucket: Any) -> None:
    # GCS answers 412 and keeps the object; fake-gcs-server 1.54.0 deletes it anyway. The
    # "re-written between listing and delete: kept" safety must inject the 412 at the client.
    data, _ = segment_names()
    gcs_bucket.blob(data).upload_from_string(DATA)
    listed_generation = gcs_bucket.get_blob(data).generation
    gcs_bucket.blob(data).upload_from_string(DATA + b" rewritten")
    assert gcs_bucket.get_blob(data).generation != listed_generation

    gcs_bucket.blob(data).delete(if_generation_match=listed_generation)  # no PreconditionFailed

    assert gcs_bucket.get_blob(data) is None


def test_fake_gcs_server_fails_a_batch_without_content_ids(gcs_bucket: Any) -> None:
    # google-cloud-storage 3.17.1 sends no Content-ID per part and fake-gcs-server 1.54.0
    # drops such parts: the client's batch() fails as a whole and deletes nothing. A batch
    # delete must be tested with Content-IDs of its own, or one object at a time here.
    client = gcs_bucket.client  # a batch collects the calls of its own client only
    data, index = segment_names()
    gcs_bucket.blob(data).upload_from_string(DATA)
    gcs_bucket.blob(index).upload_from_string(INDEX)

    with pytest.raises(ValueError, match="not multi-part"), client.batch():
        gcs_bucket.blob(data).delete()
        gcs_bucket.blob(index).delete()

    assert sorted(b.name for b in client.list_blobs(gcs_bucket.name)) == [data, index]


def test_fake_gcs_server_keeps_no_version_or_soft_deleted_copy(
    fake_gcs: FakeGcsServer, gcs_bucket: Any
) -> None:
    # Its filesystem backend refuses versioning (500), and a listing of soft-deleted objects
    # ignores the flag and returns the live ones: a restore through a noncurrent version or
    # soft delete cannot be shown on it as configured here.
    client = fake_gcs.client()
    kept, deleted = segment_names()
    gcs_bucket.blob(kept).upload_from_string(DATA)
    gcs_bucket.blob(deleted).upload_from_string(INDEX)

    gcs_bucket.versioning_enabled = True
    with pytest.raises(InternalServerError, match="does not support versioning"):
        gcs_bucket.patch()

    gcs_bucket.blob(deleted).delete()
    assert [b.name for b in client.list_blobs(gcs_bucket.name, soft_deleted=True)] == [kept]


# --- Azurite ----------------------------------------------------------------------------------


@pytest.fixture
def container(azurite: AzuriteBlobServer) -> Any:
    """A new container on the session's Azurite."""
    return azurite.client().create_container(f"t-{uuid.uuid4().hex[:12]}")


def test_azurite_lists_heads_and_deletes_offloaded_segments(container: Any) -> None:
    data, index = segment_names()
    container.upload_blob(data, DATA)
    container.upload_blob(index, INDEX)
    container.upload_blob("foreign/report.csv", b"not Pulsar's")

    listed = {b.name: b for b in container.list_blobs(name_starts_with=data[:36])}
    assert {name: b.size for name, b in listed.items()} == {data: len(DATA), index: len(INDEX)}
    assert all(b.etag for b in listed.values())

    # The listing's ETag comes bare (as Azure's XML gives it), a head's quoted (as the HTTP
    # header): compare them unquoted. Either form works in an If-Match.
    head = container.get_blob_client(data).get_blob_properties()
    assert (head.size, head.etag) == (len(DATA), f'"{listed[data].etag}"')
    assert container.download_blob(data, offset=0, length=5).readall() == DATA[:5]

    # A rewrite is a new ETag, and a delete conditioned on the listed one is refused: kept.
    container.upload_blob(index, INDEX + b"!", overwrite=True)
    with pytest.raises(ResourceModifiedError):
        container.delete_blob(
            index, etag=listed[index].etag, match_condition=MatchConditions.IfNotModified
        )

    container.delete_blob(
        data, etag=listed[data].etag, match_condition=MatchConditions.IfNotModified
    )
    assert sorted(b.name for b in container.list_blobs()) == sorted(["foreign/report.csv", index])


def test_azurite_batch_delete_honours_if_match_per_blob(container: Any) -> None:
    data, index = segment_names()
    container.upload_blob(data, DATA)
    container.upload_blob(index, INDEX)
    etags = {b.name: b.etag for b in container.list_blobs()}
    container.upload_blob(index, INDEX + b"!", overwrite=True)

    answers = container.delete_blobs(
        *(
            {"name": name, "etag": etags[name], "match_condition": MatchConditions.IfNotModified}
            for name in (data, index)
        ),
        raise_on_any_failure=False,
    )

    assert [answer.status_code for answer in answers] == [202, 412]
    assert [b.name for b in container.list_blobs()] == [index]


def test_azurite_has_no_soft_delete_or_versions(azurite: AzuriteBlobServer, container: Any) -> None:
    # Azurite 3.35.0 accepts a delete retention policy and reports it back, but keeps no
    # deleted blob (a listing with deleted ones shows only the live) and has no undelete:
    # a restore through soft delete or a previous version must be covered by a fault
    # injected at the client.
    service = azurite.client()
    service.set_service_properties(delete_retention_policy=RetentionPolicy(enabled=True, days=1))
    assert service.get_service_properties()["delete_retention_policy"].enabled
    kept, deleted = segment_names()
    container.upload_blob(kept, DATA)
    container.upload_blob(deleted, INDEX)

    container.delete_blob(deleted)

    listed = list(container.list_blobs(include=["deleted", "versions"]))
    assert [(b.name, b.deleted, b.version_id) for b in listed] == [(kept, None, None)]
    with pytest.raises(HttpResponseError, match="not implemented"):
        container.get_blob_client(deleted).undelete_blob()
