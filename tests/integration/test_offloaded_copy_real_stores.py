"""A ``bk-offloaded-copy``'s GCS or Azure copy as fake-gcs-server and Azurite really answer
it (``bookkeeper.offloaded_copy.hold_reason`` through the real ``GcsBucket`` and
``AzureContainer``): confirmed only whole; held when the data is truncated, the index is
missing, the copy is in another container, or the HEAD is refused (Azurite: a wrong
account key, a real 403; fake-gcs-server checks no credentials, so the 403 is injected
at the client)."""

from __future__ import annotations

import struct
import uuid as uuidlib
from typing import Any

import pytest
from google.api_core import exceptions as api

from ledger_gc.bookkeeper.offloaded_copy import hold_reason
from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.rules.bookkeeper.offloaded_copy import INDEX_MAGIC, OffloadedCopy
from ledger_gc.rules.storage.offload_keys import segment_keys
from ledger_gc.storage.azure_container import AzureContainer
from ledger_gc.storage.gcs_bucket import GcsBucket
from ledger_gc.storage.offload_bucket import AZURE, GCS
from local_stack.azurite import AZURITE_ACCOUNT, AZURITE_KEY, AzuriteBlobServer
from local_stack.fake_gcs import FakeGcsServer

UUID = "0a1b2c3d-0000-4000-8000-00000000000a"
DATA = b"e" * 300


def _index(length: int) -> bytes:
    return struct.pack(">IIq", INDEX_MAGIC, 64, length) + b"\0" * 48


def _copy(driver: str, bucket: str) -> OffloadedCopy:
    return OffloadedCopy(UUID, driver, bucket, ledger_size=250)


def _plant(put: Any) -> None:
    """Ledger 1 whole; 2 truncated (the data shorter than its index says); 3 no index."""
    for ledger_id, data, index in (
        (1, DATA, _index(len(DATA))),
        (2, DATA[:120], _index(len(DATA))),
        (3, DATA, None),
    ):
        data_key, index_key = segment_keys("", UUID, ledger_id)
        put(data_key, data)
        if index is not None:
            put(index_key, index)


@pytest.fixture
def gcs(fake_gcs: FakeGcsServer) -> tuple[ObjectStore, GcsBucket]:
    raw = fake_gcs.client().create_bucket(f"bk-{uuidlib.uuid4().hex[:10]}")
    _plant(lambda key, body: raw.blob(key).upload_from_string(body))
    store = ObjectStore(raw.name, endpoint=fake_gcs.endpoint, driver=GCS)
    return store, GcsBucket(store)


@pytest.fixture
def azure(azurite: AzuriteBlobServer) -> tuple[ObjectStore, AzureContainer]:
    raw = azurite.client().create_container(f"bk-{uuidlib.uuid4().hex[:10]}")
    _plant(lambda key, body: raw.upload_blob(key, body))
    store = ObjectStore(
        raw.container_name,
        endpoint=azurite.account_url,
        driver=AZURE,
        azure_account=AZURITE_ACCOUNT,
        azure_key=AZURITE_KEY,
    )
    return store, AzureContainer(store)


@pytest.mark.parametrize("which", ["gcs", "azure"])
def test_only_a_whole_copy_in_the_configured_store_is_confirmed(
    which: str, request: pytest.FixtureRequest
) -> None:
    store, bucket = request.getfixturevalue(which)
    driver = "google-cloud-storage" if which == "gcs" else "azureblob"
    copy = _copy(driver, store.bucket)

    assert hold_reason(store, 1, copy, bucket) is None
    assert "holds 120 bytes, but the offload wrote 300" in str(hold_reason(store, 2, copy, bucket))
    assert "index" in str(hold_reason(store, 3, copy, bucket))
    assert "does not exist" in str(hold_reason(store, 4, copy, bucket))
    elsewhere = _copy(driver, "another-container")
    assert "another-container" in str(hold_reason(store, 1, elsewhere, bucket))
    other = "azureblob" if which == "gcs" else "google-cloud-storage"
    assert "held" in str(hold_reason(store, 1, _copy(other, store.bucket), bucket))


def test_an_azure_head_refused_holds_the_copy(azure: tuple[ObjectStore, AzureContainer]) -> None:
    store, _ = azure
    wrong = ObjectStore(
        store.bucket,
        endpoint=store.endpoint,
        driver=AZURE,
        azure_account=AZURITE_ACCOUNT,
        azure_key="d3Jvbmc=" * 11,
    )
    why = hold_reason(wrong, 1, _copy("azureblob", store.bucket), AzureContainer(wrong))
    assert why is not None and "cannot be read" in why and "held" in why


def test_a_gcs_head_refused_holds_the_copy(
    gcs: tuple[ObjectStore, GcsBucket], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, bucket = gcs

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise api.Forbidden("no storage.objects.get")

    monkeypatch.setattr(bucket._gcs, "get_blob", refused)
    why = hold_reason(store, 1, _copy("google-cloud-storage", store.bucket), bucket)
    assert why is not None and "cannot be read" in why and "held" in why
