"""The offload container on Azure Blob Storage (``AzureContainer``), against Azurite.

Pulsar's ``azureblob`` offloader writes ``<uuid>-ledger-<id>`` and ``-index`` blobs; the
container lists them with their ETags, heads them, reads the index header, and deletes
them only while they are still the blob that was listed (``If-Match`` per blob in a
Blob Batch). Azurite honours ``If-Match`` in a batch, so the moved-blob test is real.

Azurite 3.35 keeps no soft-deleted blob and no versions, and has no undelete
(``test_object_store_emulators.test_azurite_has_no_soft_delete_or_versions``): the
restore tests inject, at the client, the listing Azure would answer with soft delete or
versioning on, and let Azurite do the rest (the copy back and its ``If-None-Match``).
"""

from __future__ import annotations

import gc
import socket
import tracemalloc
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from azure.core.exceptions import ClientAuthenticationError, HttpResponseError
from azure.storage.blob import BlobProperties, BlobServiceClient, RetentionPolicy

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import BucketNotFoundError, StorageError
from ledger_gc.storage.azure_container import AzureContainer
from ledger_gc.storage.offload_bucket import AZURE, AZURE_BATCH, DeletedVersion, OffloadBucket
from ledger_gc.storage.s3_bucket import ObjectInfo
from ledger_gc.storage.versioning import OFF, UNKNOWN
from local_stack.azurite import AZURITE_ACCOUNT, AZURITE_KEY, AzuriteBlobServer

DATA = b"offloaded entries of one ledger"
INDEX = b"index block header and entries"


def segments(first_digit: str = "", ledger_id: int = 7, prefix: str = "") -> tuple[str, str]:
    """A new ledger's data and index blob names, its uuid starting with ``first_digit``."""
    uid = str(uuid.uuid4())
    if first_digit:
        uid = first_digit + uid[1:]
    data = f"{prefix}{uid}-ledger-{ledger_id}"
    return data, f"{data}-index"


def store_for(azurite: AzuriteBlobServer, container: str, **changes: Any) -> ObjectStore:
    """The offload store as the edge resolves it for Azurite: endpoint, account and key."""
    fields: dict[str, Any] = {
        "bucket": container,
        "driver": AZURE,
        "endpoint": azurite.account_url,
        "azure_account": AZURITE_ACCOUNT,
        "azure_key": AZURITE_KEY,
    }
    return ObjectStore(**{**fields, **changes})


@pytest.fixture
def raw(azurite: AzuriteBlobServer) -> Any:
    """A new container on the session's Azurite (the SDK's ContainerClient)."""
    return azurite.client().create_container(f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def bucket(azurite: AzuriteBlobServer, raw: Any) -> AzureContainer:
    """``AzureContainer`` over ``raw``, its client built from the store (not injected)."""
    return AzureContainer(store_for(azurite, raw.container_name))


def upload_many(raw: Any, names: list[str], data: bytes = DATA) -> None:
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: raw.upload_blob(name, data), names))


# --- listing ---------------------------------------------------------------------------------


def test_lists_every_blob_with_its_etag_and_by_first_digit_shard(
    bucket: AzureContainer, raw: Any
) -> None:
    assert isinstance(bucket, OffloadBucket)
    assert (bucket.driver, bucket.bucket, bucket.prefix) == (AZURE, raw.container_name, "")
    by_digit = {digit: segments(digit) for digit in "03af"}
    foreign = ["!readme", ":between", "_underscore", "zz/other.csv"]
    upload_many(raw, [name for pair in by_digit.values() for name in pair] + foreign)

    listed = {obj.key: obj for obj in bucket.iter_objects()}
    assert sorted(listed) == sorted([n for pair in by_digit.values() for n in pair] + foreign)
    etags = {b.name: b.etag for b in raw.list_blobs()}
    assert {key: obj.version for key, obj in listed.items()} == etags
    assert all(obj.version and '"' not in obj.version for obj in listed.values())
    assert all(obj.size == len(DATA) and obj.last_modified > 0 for obj in listed.values())

    # One shard per uuid digit: a one-character range is listed by name prefix.
    assert [o.key for o in bucket.iter_objects("3")] == sorted(by_digit["3"])
    assert [o.key for o in bucket.iter_objects(start="a", end="b")] == sorted(by_digit["a"])
    # The keys outside the 16 shards (offload_keys.outside_shards' ranges).
    assert [o.key for o in bucket.iter_objects(end="0")] == ["!readme"]
    assert [o.key for o in bucket.iter_objects(start=":", end="a")] == [":between", "_underscore"]
    assert [o.key for o in bucket.iter_objects(start="g")] == ["zz/other.csv"]
    # A range wider than one character: filtered, in order.
    assert [o.key for o in bucket.iter_objects(start="1", end="b")] == sorted(
        [*by_digit["3"], *by_digit["a"], ":between", "_underscore"]
    )

    assert bucket.list_prefixes([by_digit["0"][0], "f"]) == {
        by_digit["0"][0]: [listed[n] for n in sorted(by_digit["0"])],
        "f": [listed[n] for n in sorted(by_digit["f"])],
    }


def test_the_ranges_outside_the_shards_read_none_of_the_shards_names(
    bucket: AzureContainer, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Azure lists by name prefix only: the scan's ranges of the keys outside the 16 uuid
    shards are listed one first character at a time, so they read the foreign names and
    not the millions of segments (each range read the whole container before)."""
    shards = [name for digit in "0123456789abcdef" for name in segments(digit)]
    foreign = ["!readme", ":between", "Upper", "_underscore", "g-first", "zz/other.csv", "~tilde"]
    upload_many(raw, shards + foreign)
    read: list[str] = []
    listing = bucket.container.list_blobs

    def counted(*args: Any, **kwargs: Any) -> Iterator[Any]:
        for blob in listing(*args, **kwargs):
            read.append(blob.name)
            yield blob

    monkeypatch.setattr(bucket.container, "list_blobs", counted)
    found = [o.key for o in bucket.iter_objects(start=":", end="a")]
    found += [o.key for o in bucket.iter_objects(start="g")]
    assert found == [":between", "Upper", "_underscore", "g-first", "zz/other.csv", "~tilde"]
    assert sorted(read) == sorted(found)


def test_lists_under_the_store_prefix(azurite: AzuriteBlobServer, raw: Any) -> None:
    bucket = AzureContainer(store_for(azurite, raw.container_name, prefix="offload"))
    data, index = segments("5", prefix="offload/")
    upload_many(raw, [data, index, "5-at-the-root"])

    assert [o.key for o in bucket.iter_objects("offload/5")] == [data, index]
    assert [o.key for o in bucket.iter_objects("offload/", start="offload/5")] == [data, index]
    assert bucket.owns(data) is None
    assert bucket.owns(data.removeprefix("offload/")) is not None


def test_listing_memory_stays_flat_in_the_number_of_blobs(
    azurite: AzuriteBlobServer, raw: Any
) -> None:
    names = [f"{d}{uuid.uuid4().hex[1:]}" for d in "01" for _ in range(600)]
    upload_many(raw, names, b"")
    bucket = AzureContainer(store_for(azurite, raw.container_name), page_size=50)

    def peak_listing(prefix: str) -> tuple[int, int]:
        gc.collect()
        tracemalloc.start()
        try:
            count = sum(1 for _ in bucket.iter_objects(prefix))
            return count, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, small_peak = peak_listing("0")
    large, large_peak = peak_listing("")
    assert (small, large) == (600, 1200)
    # Twice the blobs, twelve more pages: the peak is one page's, not the listing's.
    assert large_peak < 1.3 * small_peak, (small_peak, large_peak)


# --- head and range read ---------------------------------------------------------------------


def test_head_reads_size_etag_and_metadata_in_lower_case(bucket: AzureContainer, raw: Any) -> None:
    data, index = segments()
    raw.upload_blob(data, DATA, metadata={"PulsarCluster": "east", "ManagedLedger": "t/ns/x"})

    head = bucket.head(data)
    listed = next(iter(bucket.iter_objects(data)))
    assert head is not None
    assert (head.key, head.size, head.version) == (data, len(DATA), listed.version)
    assert head.last_modified == listed.last_modified
    assert dict(head.metadata) == {"pulsarcluster": "east", "managedledger": "t/ns/x"}
    assert bucket.head(index) is None


def test_read_range_reads_the_bytes_asked_for(bucket: AzureContainer, raw: Any) -> None:
    data, index = segments()
    raw.upload_blob(index, INDEX)

    assert bucket.read_range(index, 0, 5) == INDEX[:5]
    assert bucket.read_range(index, 6, 6) == INDEX[6:12]
    assert bucket.read_range(index, 0, 0) == b""
    with pytest.raises(StorageError, match=data):
        bucket.read_range(data, 0, 4)  # no such blob: an error, never b""
    with pytest.raises(StorageError, match="416"):
        bucket.read_range(index, len(INDEX) + 10, 4)  # past the end (a truncated blob)


# --- conditional batch delete ----------------------------------------------------------------


def test_batch_delete_keeps_a_blob_rewritten_since_it_was_listed(
    bucket: AzureContainer, raw: Any
) -> None:
    names = [name for _ in range(AZURE_BATCH // 2 + 10) for name in segments()]
    foreign = "notes/keep-me.txt"
    upload_many(raw, [*names, foreign])
    listed = list(bucket.iter_objects())
    assert len(listed) == len(names) + 1 > AZURE_BATCH
    moved, gone = names[0], names[1]
    raw.upload_blob(moved, DATA + b" appended", overwrite=True)  # a new ETag
    raw.delete_blob(gone)  # deleted by someone else since the listing

    result = bucket.delete_listed(listed)

    assert result.requests == 2  # 256 + the rest, one Blob Batch each
    assert result.deleted == len(names) - 1  # the one already gone counts as deleted
    assert list(result.failed) == [moved]
    assert "moved since it was listed" in result.failed[moved]
    assert list(result.refused) == [foreign]
    assert sorted(b.name for b in raw.list_blobs()) == sorted([moved, foreign])
    assert raw.download_blob(moved).readall() == DATA + b" appended"


def test_a_412_whose_second_look_fails_keeps_that_blob_and_counts_the_rest(
    bucket: AzureContainer, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 412 is looked at once more (gone or moved?); when that read fails, the blob is
    kept as not known to be deleted, and the batch's other answers still count: the
    failure must not throw away what the batch did."""
    names = segments()
    upload_many(raw, names)
    listed = list(bucket.iter_objects())
    moved = names[0]
    raw.upload_blob(moved, DATA + b" appended", overwrite=True)  # a new ETag: a real 412

    def unreachable(key: str) -> Any:
        raise StorageError(f"reading {key}: Azure Blob unreachable")

    monkeypatch.setattr(bucket, "head", unreachable)
    result = bucket.delete_listed(listed)

    assert result.deleted == 1
    assert list(result.failed) == [moved] and "unreachable" in result.failed[moved]
    assert [b.name for b in raw.list_blobs()] == [moved]


def test_a_blob_listed_without_a_last_modified_time_fails_the_listing(
    bucket: AzureContainer, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blob of unknown age is never judged against retention (read as 0, 1970, it
    would be past any). Azure always sends Last-Modified; the answer without it is
    injected."""
    upload_many(raw, segments())
    listing = bucket.container.list_blobs

    def without_time(*args: Any, **kwargs: Any) -> Any:
        for blob in listing(*args, **kwargs):
            blob.last_modified = None
            yield blob

    monkeypatch.setattr(bucket.container, "list_blobs", without_time)

    with pytest.raises(StorageError, match="no last-modified time"):
        list(bucket.iter_objects())


def test_foreign_keys_are_refused_and_never_sent(bucket: AzureContainer, raw: Any) -> None:
    data, _index = segments()
    foreign = [f"{data}.bak", f"{uuid.uuid4()}", f"{uuid.uuid4()}_00000001", "x/" + data]
    upload_many(raw, foreign)

    result = bucket.delete_listed(list(bucket.iter_objects()))

    assert sorted(result.refused) == sorted(foreign)
    assert (result.deleted, result.failed, result.requests) == (0, {}, 0)
    assert len(list(raw.list_blobs())) == len(foreign)
    assert bucket.owns(data) is None
    assert bucket.owns(f"{data}-index") is None


def test_an_object_listed_without_an_etag_is_not_deleted(bucket: AzureContainer, raw: Any) -> None:
    data, _index = segments()
    raw.upload_blob(data, DATA)

    result = bucket.delete_listed([ObjectInfo(data, len(DATA), 0, None)])

    assert list(result.failed) == [data]
    assert [b.name for b in raw.list_blobs()] == [data]


# --- errors ----------------------------------------------------------------------------------


def test_a_missing_container_is_one_line_naming_the_setting(
    azurite: AzuriteBlobServer,
) -> None:
    bucket = AzureContainer(store_for(azurite, "no-such-container"))

    with pytest.raises(BucketNotFoundError) as raised:
        bucket.check_bucket()
    message = str(raised.value)
    assert "\n" not in message
    assert "'no-such-container'" in message
    assert "LEDGERGC_OFFLOAD_BUCKET" in message
    assert azurite.account_url in message
    with pytest.raises(BucketNotFoundError):
        list(bucket.iter_objects())


def test_a_wrong_key_is_one_line_naming_the_credentials_without_the_key(
    azurite: AzuriteBlobServer, raw: Any
) -> None:
    wrong = "V3JvbmdLZXk" + AZURITE_KEY[11:]
    bucket = AzureContainer(store_for(azurite, raw.container_name, azure_key=wrong))

    for attempt in (bucket.check_bucket, lambda: list(bucket.iter_objects())):
        with pytest.raises(StorageError) as raised:
            attempt()
        message = str(raised.value)
        assert "\n" not in message
        assert "AZURE_STORAGE_ACCESS_KEY" in message
        assert "wasb_default" in message
        assert wrong not in message
        assert AZURITE_KEY not in message


def test_an_unreachable_endpoint_is_one_line_naming_the_setting() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/{AZURITE_ACCOUNT}"
    credential = {"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY}
    # No retries: the error, not the SDK's backoff, is under test.
    client = BlobServiceClient(url, credential=credential, retry_total=0)
    bucket = AzureContainer(ObjectStore("c", driver=AZURE, endpoint=url), client=client)

    with pytest.raises(StorageError) as raised:
        bucket.check_bucket()
    message = str(raised.value)
    assert "\n" not in message
    assert url in message and "LEDGERGC_OFFLOAD_ENDPOINT" in message
    assert "unreachable" in message


def test_a_connection_string_and_a_sas_reach_the_container(
    azurite: AzuriteBlobServer, raw: Any
) -> None:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    data, _index = segments()
    raw.upload_blob(data, DATA)
    sas = generate_container_sas(
        AZURITE_ACCOUNT,
        raw.container_name,
        account_key=AZURITE_KEY,
        permission=ContainerSasPermissions(read=True, list=True, delete=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    by_string = ObjectStore(
        raw.container_name, driver=AZURE, azure_connection_string=azurite.connection_string
    )
    by_sas = store_for(azurite, raw.container_name, azure_key=None, azure_sas=sas)

    for store in (by_string, by_sas):
        bucket = AzureContainer(store)
        bucket.check_bucket()
        assert [o.key for o in bucket.iter_objects()] == [data]
        assert sas not in bucket.endpoint
        assert AZURITE_KEY not in bucket.endpoint


# --- what a delete leaves behind: soft delete and versions -----------------------------------


class Service:
    """A BlobServiceClient that answers as ``fault`` says for service properties and
    hands out ``container`` (the rest: Azurite's)."""

    def __init__(self, real: Any, container: Any = None, properties_fault: Any = None):
        self.real, self.container, self.properties_fault = real, container, properties_fault

    def get_container_client(self, name: str) -> Any:
        return self.container or self.real.get_container_client(name)

    def get_service_properties(self, **kwargs: Any) -> Any:
        if self.properties_fault is not None:
            raise self.properties_fault
        return self.real.get_service_properties(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class KeepsDeleted:
    """A ContainerClient over Azurite's that lists ``kept`` as Azure with blob soft delete
    or versioning on would (``include=["deleted", "versions"]``), undeletes a soft-deleted
    blob by writing its data back, and reads version ``v`` from the blob ``versions[v]``
    (what Azure's ``?versionid=`` URL would read). Azurite keeps none of them."""

    def __init__(self, real: Any, kept: list[tuple[BlobProperties, bytes]], versions: dict):
        self.real, self.kept, self.versions = real, kept, versions
        self.undeleted: list[str] = []

    def list_blobs(self, name_starts_with: str | None = None, include: Any = None, **kw: Any):
        live = list(self.real.list_blobs(name_starts_with=name_starts_with, **kw))
        if not include:
            return live
        kept = [p for p, _ in self.kept if p.name.startswith(name_starts_with or "")]
        return kept + live

    def get_blob_client(self, blob: str, version_id: str | None = None) -> Any:
        if version_id is not None:
            return self.real.get_blob_client(self.versions[version_id])
        return Undeletable(self.real.get_blob_client(blob), self)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class Undeletable:
    def __init__(self, real: Any, container: KeepsDeleted):
        self.real, self.container = real, container

    def undelete_blob(self, **kwargs: Any) -> None:
        """Azure brings back the blob as it was last deleted."""
        deleted = [(p, d) for p, d in self.container.kept if p.name == self.real.blob_name]
        props, data = max(deleted, key=lambda kept: kept[0].deleted_time)
        self.real.upload_blob(data, overwrite=True)
        self.container.undeleted.append(props.name)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def kept_blob(name: str, size: int, *, deleted_at=None, version_id=None, created=None):
    props = BlobProperties()
    props.name, props.size = name, size
    props.deleted = deleted_at is not None
    props.deleted_time = deleted_at
    props.version_id = version_id
    props.is_current_version = False if version_id else None
    props.last_modified = created or datetime.now(UTC) - timedelta(days=30)
    return props


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def test_versioning_reads_blob_soft_delete_retention(azurite: AzuriteBlobServer, raw: Any) -> None:
    service = azurite.client()
    bucket = AzureContainer(store_for(azurite, raw.container_name))
    raw.upload_blob(segments()[0], DATA)
    try:
        service.set_service_properties(
            delete_retention_policy=RetentionPolicy(enabled=True, days=3)
        )
        kept = bucket.versioning()
        service.set_service_properties(delete_retention_policy=RetentionPolicy(enabled=False))
        freed = bucket.versioning()
    finally:
        service.set_service_properties(delete_retention_policy=RetentionPolicy(enabled=False))

    assert kept.keeps_deleted_data
    assert (kept.how, kept.retention_days, kept.noncurrent_expiration_days) == ("soft-delete", 3, 3)
    assert "soft delete" in kept.note and "3 days" in kept.note
    assert kept.to_dict()["how"] == "soft-delete"
    # Azurite lists blobs without version ids: versioning is off there.
    assert not freed.keeps_deleted_data
    assert (freed.versioning, freed.how) == (OFF, "none")
    assert "cannot be undone" in freed.note
    assert raw.container_name in freed.note


def test_versioning_is_unknown_when_the_service_properties_are_refused(
    azurite: AzuriteBlobServer, raw: Any
) -> None:
    # A SAS scoped to the container cannot read the account's service properties: Azure
    # answers 403 (AuthorizationPermissionMismatch); injected, Azurite lets the key read them.
    refused = ClientAuthenticationError("This request is not authorized to perform this operation")
    refused.status_code = 403
    service = Service(azurite.client(), properties_fault=refused)
    bucket = AzureContainer(store_for(azurite, raw.container_name), client=service)

    found = bucket.versioning()

    assert found.keeps_deleted_data
    assert found.versioning == UNKNOWN
    assert "unknown" in found.note and "recoverable" in found.note


def test_versioning_sees_versions_in_the_listing(azurite: AzuriteBlobServer, raw: Any) -> None:
    data, _ = segments()
    raw.upload_blob(data, DATA)
    version = kept_blob(data, len(DATA), version_id="2026-11-01T00:00:00.0000000Z")
    version.is_current_version = True
    service = Service(azurite.client(), KeepsDeleted(raw, [(version, DATA)], {}))
    azurite.client().set_service_properties(delete_retention_policy=RetentionPolicy(enabled=False))
    bucket = AzureContainer(store_for(azurite, raw.container_name), client=service)

    found = bucket.versioning()

    assert found.keeps_deleted_data
    assert found.how == "versions"
    assert "previous versions" in found.note


def test_restore_undeletes_a_soft_deleted_blob_unless_written_since(
    azurite: AzuriteBlobServer, raw: Any
) -> None:
    data, index = segments()
    now = datetime.now(UTC)
    kept = [
        (kept_blob(data, len(DATA), deleted_at=now - timedelta(minutes=5)), DATA),
        (kept_blob(index, len(INDEX), deleted_at=now - timedelta(minutes=5)), INDEX),
        (kept_blob(data, 3, deleted_at=now - timedelta(days=2)), b"old"),  # another time
    ]
    kept[0][0].etag = '"0x8DD00000000000A"'  # the ETag it had: what a run's audit names
    container = KeepsDeleted(raw, kept, {})
    bucket = AzureContainer(
        store_for(azurite, raw.container_name), client=Service(azurite.client(), container)
    )
    window = (ms(now - timedelta(hours=1)), ms(now))
    raw.upload_blob(index, b"written since")

    found = bucket.deleted_versions(data, *window)
    assert found == [
        DeletedVersion(
            data, "", len(DATA), ms(now - timedelta(minutes=5)), "soft-delete", "0x8DD00000000000A"
        )
    ]
    bucket.restore(found[0])
    assert raw.download_blob(data).readall() == DATA
    assert container.undeleted == [data]

    (again,) = bucket.deleted_versions(index, *window)
    with pytest.raises(StorageError, match="written since"):
        bucket.restore(again)
    assert raw.download_blob(index).readall() == b"written since"
    assert bucket.deleted_versions(data, ms(now), ms(now) + 1) == []


def test_restore_copies_a_previous_version_back_never_over_a_newer_blob(
    azurite: AzuriteBlobServer, raw: Any
) -> None:
    data, index = segments()
    old, older = "2026-11-20T10:00:00.0000000Z", "2026-11-01T10:00:00.0000000Z"
    created = datetime.now(UTC) - timedelta(days=9)
    # What Azure's ?versionid= URL reads: Azurite has no versions, so each is a blob.
    raw.upload_blob("version-store/new", DATA)
    raw.upload_blob("version-store/old", b"first")
    kept = [
        (kept_blob(data, 5, version_id=older, created=created - timedelta(days=19)), b""),
        (kept_blob(data, len(DATA), version_id=old, created=created), b""),
        (kept_blob(index, len(DATA), version_id=old, created=created), b""),
    ]
    kept[0][0].etag, kept[1][0].etag = '"0x8DD000000000001"', '"0x8DD000000000002"'
    versions = {old: "version-store/new", older: "version-store/old"}
    container = KeepsDeleted(raw, kept, versions)
    bucket = AzureContainer(
        store_for(azurite, raw.container_name), client=Service(azurite.client(), container)
    )
    now = ms(datetime.now(UTC))

    # Every previous version, newest first, each with the ETag it had: a restore matches
    # it against the ETag the run's audit names (test_restore_exact_version.py).
    found = bucket.deleted_versions(data, now - 3_600_000, now)
    assert found == [
        DeletedVersion(data, old, len(DATA), 0, "noncurrent-version", "0x8DD000000000002"),
        DeletedVersion(data, older, 5, 0, "noncurrent-version", "0x8DD000000000001"),
    ]
    bucket.restore(found[0])
    assert raw.download_blob(data).readall() == DATA

    # A blob written at the key since: the copy carries If-None-Match "*", and Azure (here
    # Azurite, for real) refuses it; the newer blob stays.
    raw.upload_blob(index, b"written since")
    (again,) = bucket.deleted_versions(index, now - 3_600_000, now)
    with pytest.raises(StorageError, match="written since"):
        bucket.restore(again)
    assert raw.download_blob(index).readall() == b"written since"


def test_restore_refuses_a_copy_that_lost_the_race(azurite: AzuriteBlobServer, raw: Any) -> None:
    # The head said "absent", then a broker wrote the key before the copy: the copy's own
    # If-None-Match "*" is what keeps the new blob (Azurite answers 409 BlobAlreadyExists).
    data, _ = segments()
    raw.upload_blob("version-store/v", DATA)
    version = "2026-11-20T10:00:00.0000000Z"
    container = KeepsDeleted(raw, [], {version: "version-store/v"})
    bucket = AzureContainer(
        store_for(azurite, raw.container_name), client=Service(azurite.client(), container)
    )
    bucket.head = lambda key: None  # type: ignore[method-assign]
    raw.upload_blob(data, b"written since")

    with pytest.raises(StorageError, match="written since"):
        bucket.restore(DeletedVersion(data, version, len(DATA), 0, "noncurrent-version"))
    assert raw.download_blob(data).readall() == b"written since"


def test_the_sdk_error_text_never_reaches_a_message(azurite: AzuriteBlobServer, raw: Any) -> None:
    # Azure's error text is several lines (the XML body, "String to sign used was ...").
    fault = HttpResponseError("line one\nAuthorization: SharedKey devstoreaccount1:c2VjcmV0")
    fault.status_code = 500
    service = Service(azurite.client(), properties_fault=fault)
    bucket = AzureContainer(store_for(azurite, raw.container_name), client=service)

    found = bucket.versioning()
    assert found.versioning == UNKNOWN
    assert "c2VjcmV0" not in found.note
