"""The offload listing's shards (the uuid's first hex digit, and the three ranges of keys
outside them) list every key below LEDGERGC_OFFLOAD_PREFIX exactly once, on each real
store: SeaweedFS (S3), fake-gcs-server (GCS) and Azurite (Azure). Keys sit on every
boundary: "0", "9", ":", "A", "a", "f", "g", "~", the prefix itself, and keys just
outside the prefix (never listed)."""

from __future__ import annotations

import uuid as uuidlib
from collections import Counter
from typing import Any

import pytest
from azure.core.exceptions import HttpResponseError
from google.api_core import exceptions as api

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import StorageError
from ledger_gc.s3_orphans import reading
from ledger_gc.storage.offload_bucket import AZURE, GCS
from local_stack.azurite import AZURITE_ACCOUNT, AZURITE_KEY, AzuriteBlobServer
from local_stack.fake_gcs import FakeGcsServer

PREFIX = "tiered"
INSIDE = [
    "0",
    "0zz",
    "00000000-0000-4000-8000-000000000000-ledger-1",
    "9",
    "9~",
    "9fffffff-0000-4000-8000-000000000000-ledger-2-index",
    ":",
    "A",
    "Z-upper",
    "`",
    "a",
    "a0",
    "f",
    "ffffffff-ffff-4fff-8fff-ffffffffffff_00000001",
    "g",
    "g0",
    "z",
    "~",
    "-dash",
    ".dot",
    "sub/0-in-a-folder",
]
OUTSIDE = ["tiered", "tiered0", "tiereda", "other/0", "0-at-root"]


def _listed(store: ObjectStore) -> Counter[str]:
    reading._OFFLOAD.clear()
    return Counter(row[0] for row in reading.list_offload_bucket(store))


def _expected() -> Counter[str]:
    return Counter(f"{PREFIX}/{key}" for key in INSIDE)


def test_s3_shards_list_each_key_once(s3_client: Any, local_stack: Any) -> None:
    bucket = f"sh-{uuidlib.uuid4().hex[:10]}"
    s3_client.create_bucket(Bucket=bucket)
    for key in [f"{PREFIX}/{k}" for k in INSIDE] + OUTSIDE:
        s3_client.put_object(Bucket=bucket, Key=key, Body=b"x")
    store = ObjectStore(
        bucket,
        prefix=PREFIX,
        endpoint=local_stack.s3_endpoint,
        access_key_id="testing",
        secret_access_key="testing",
        region="us-east-1",
    )
    assert _listed(store) == _expected()


def test_gcs_shards_list_each_key_once(fake_gcs: FakeGcsServer) -> None:
    raw = fake_gcs.client().create_bucket(f"sh-{uuidlib.uuid4().hex[:10]}")
    # fake-gcs-server keeps objects as files: "tiered" cannot be both a file and the
    # folder of "tiered/..." there (a 500), so that one key is left out on GCS.
    for key in [f"{PREFIX}/{k}" for k in INSIDE] + [k for k in OUTSIDE if k != PREFIX]:
        raw.blob(key).upload_from_string(b"x")
    store = ObjectStore(raw.name, prefix=PREFIX, endpoint=fake_gcs.endpoint, driver=GCS)
    assert _listed(store) == _expected()


def test_azure_shards_list_each_key_once(azurite: AzuriteBlobServer) -> None:
    raw = azurite.client().create_container(f"sh-{uuidlib.uuid4().hex[:10]}")
    for key in [f"{PREFIX}/{k}" for k in INSIDE] + OUTSIDE:
        raw.upload_blob(key, b"x")
    store = ObjectStore(
        raw.container_name,
        prefix=PREFIX,
        endpoint=azurite.account_url,
        driver=AZURE,
        azure_account=AZURITE_ACCOUNT,
        azure_key=AZURITE_KEY,
    )
    assert _listed(store) == _expected()


def test_a_gcs_page_refused_mid_listing_fails_the_shard(
    fake_gcs: FakeGcsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second page of a shard refused (a 403, never retried): the shard raises, it
    never ends early as if the bucket had no more objects."""
    raw = fake_gcs.client().create_bucket(f"sh-{uuidlib.uuid4().hex[:10]}")
    for n in range(5):
        raw.blob(f"{PREFIX}/a{n}").upload_from_string(b"x")
    store = ObjectStore(raw.name, prefix=PREFIX, endpoint=fake_gcs.endpoint, driver=GCS)
    reading._OFFLOAD.clear()
    bucket = reading.offload_bucket_for(store)
    monkeypatch.setattr(bucket, "page_size", 2)
    calls = bucket.client._connection.api_request
    seen: list[int] = []  # pages asked for after the first

    def refused_second_page(*args: Any, **kwargs: Any) -> Any:
        if "pageToken" in (kwargs.get("query_params") or {}):
            seen.append(1)
            raise api.Forbidden("no storage.objects.list")
        return calls(*args, **kwargs)

    monkeypatch.setattr(bucket.client._connection, "api_request", refused_second_page)
    rows = reading.list_offload_shards(store, [(f"{PREFIX}/a", None, None)])
    with pytest.raises(StorageError, match="refused"):
        list(rows)
    assert seen == [1]


def test_an_azure_page_failing_mid_listing_fails_the_shard(
    azurite: AzuriteBlobServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = azurite.client().create_container(f"sh-{uuidlib.uuid4().hex[:10]}")
    for n in range(5):
        raw.upload_blob(f"{PREFIX}/a{n}", b"x")
    store = ObjectStore(
        raw.container_name,
        prefix=PREFIX,
        endpoint=azurite.account_url,
        driver=AZURE,
        azure_account=AZURITE_ACCOUNT,
        azure_key=AZURITE_KEY,
    )
    reading._OFFLOAD.clear()
    bucket = reading.offload_bucket_for(store)
    listing = bucket.container.list_blobs

    def fails_after_two(*args: Any, **kwargs: Any) -> Any:
        for n, blob in enumerate(listing(*args, **kwargs)):
            if n == 2:
                raise HttpResponseError("the service is busy")
            yield blob

    monkeypatch.setattr(bucket.container, "list_blobs", fails_after_two)
    with pytest.raises(StorageError):
        list(reading.list_offload_shards(store, [(f"{PREFIX}/a", None, None)]))
