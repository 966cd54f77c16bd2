"""The factory of offload buckets: S3's class for an S3 store, GCS's and Azure's imported
only when the store is theirs, and a missing module or SDK one line naming it."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import ConfigError
from ledger_gc.storage import offload_buckets
from ledger_gc.storage.offload_bucket import AZURE, GCS, S3
from ledger_gc.storage.offload_buckets import offload_bucket
from ledger_gc.storage.s3 import OffloadStorage


def test_an_s3_store_is_s3s_offload_storage() -> None:
    store = ObjectStore("offload", "tiered", "http://127.0.0.1:1", "us-east-1", driver=S3)
    bucket = offload_bucket(store)
    assert isinstance(bucket, OffloadStorage)
    assert (bucket.bucket, bucket.prefix) == ("offload", "tiered")


@pytest.mark.parametrize(
    ("driver", "module", "expected"),
    [
        (GCS, "ledger_gc.storage.gcs_bucket", "LEDGERGC_OFFLOAD_DRIVER=google-cloud-storage"),
        (AZURE, "ledger_gc.storage.azure_container", "LEDGERGC_OFFLOAD_DRIVER=azureblob"),
    ],
)
def test_a_store_whose_module_is_missing_is_one_line(
    monkeypatch: pytest.MonkeyPatch, driver: str, module: str, expected: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # importing it fails, as if not there
    with pytest.raises(ConfigError) as raised:
        offload_bucket(ObjectStore("b", driver=driver))
    message = str(raised.value)
    assert expected in message and module in message and "\n" not in message


@pytest.mark.parametrize(
    ("driver", "sdk", "package"),
    [
        (GCS, "google.cloud.storage", "google-cloud-storage"),
        (AZURE, "azure.storage.blob", "azure-storage-blob"),
    ],
)
def test_a_store_whose_sdk_is_missing_names_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, driver: str, sdk: str, package: str
) -> None:
    """The implementation imports its SDK; without it, the error names the package."""
    (tmp_path / "fake_store_impl.py").write_text(
        textwrap.dedent(
            f"""
            import {sdk}

            class Store:
                def __init__(self, store, client=None):
                    self.store = store
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, sdk, None)
    implementation = offload_buckets.IMPLEMENTATIONS[driver]
    monkeypatch.setitem(
        offload_buckets.IMPLEMENTATIONS,
        driver,
        implementation._replace(module="fake_store_impl", cls="Store"),
    )
    with pytest.raises(ConfigError) as raised:
        offload_bucket(ObjectStore("b", driver=driver))
    message = str(raised.value)
    assert f"needs the {package} package" in message and sdk in message, message
    assert "\n" not in message


def test_an_unknown_driver_is_one_line() -> None:
    with pytest.raises(ConfigError, match="LEDGERGC_OFFLOAD_DRIVER"):
        offload_bucket(ObjectStore("b", driver="filesystem"))
