"""The offload listing's shards (the uuid's first hex digit, and the three ranges of keys
outside them) list every key below LEDGERGC_OFFLOAD_PREFIX exactly once, on each real
store: SeaweedFS (S3), fake-gcs-server (GCS) and Azurite (Azure). Keys sit on every
boundary: "0", "9", ":", "A", "a", "f", "g", "~", the prefix itself, and keys just
outside the prefix (never listed)."""

from __future__ import annotations

import uuid as uuidlib
from collections import Counter
from typing import Any

from ledger_gc.config.endpoints import ObjectStore
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
