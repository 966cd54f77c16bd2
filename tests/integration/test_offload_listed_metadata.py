"""Whose segments, read from the listing on GCS and Azure (issue 35): GCS's objects.list
and Azure's List Blobs return each object's user metadata, so the offload scan carries
the ``pulsarClusterName`` Pulsar's offloader writes, and the diff decides whose segments
they are (``segments.our_clusters``, ``why_not_ours``) without a HEAD per segment. S3's
listing carries none: there the diff still reads them with HEADs (the tests of
``test_orphans_tiered_clusters``). The live re-check before a delete still HEADs: that
decision must be live.

Against fake-gcs-server (metadata set on upload) and Azurite, with real ZooKeeper and
Spark: a bucket shared with another cluster, whose segments look orphaned here.
"""

from __future__ import annotations

import dataclasses
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient
from pulsar_records import Ledger, offload, record, write_record

from ledger_gc.config.edge import resolve
from ledger_gc.config.endpoints import Endpoints, ObjectStore
from ledger_gc.config.settings import Settings
from ledger_gc.formats.markers import java_uuid
from ledger_gc.orphans import cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.storage import offload_buckets
from ledger_gc.storage.azure_container import AzureContainer
from ledger_gc.storage.gcs_bucket import GcsBucket
from ledger_gc.storage.offload_bucket import AZURE, GCS, ObjectHead, OffloadBucket
from local_stack.azurite import AZURITE_ACCOUNT, AZURITE_KEY, AzuriteBlobServer
from local_stack.fake_gcs import FakeGcsServer

A = "acme/prod/persistent/orders"
GONE = "acme/prod/persistent/deleted-topic"
OURS, THEIRS = "us-east", "us-west"
DRIVER_NAME = {GCS: "google-cloud-storage", AZURE: "azureblob"}

#: (key, metadata) -> None: one object written to the emulator's bucket.
Put = Callable[[str, dict[str, str]], None]


def _uuid(n: int) -> tuple[int, int, str]:
    msb, lsb = ((n % 8) << 60) | (0x3000 + n), -(0x4000 + n)
    return msb, lsb, java_uuid(msb, lsb)


def _gcs(fake_gcs: FakeGcsServer) -> tuple[ObjectStore, Put, Callable[[], set[str]]]:
    raw = fake_gcs.client().create_bucket(f"m-{uuidlib.uuid4().hex[:10]}")

    def put(key: str, metadata: dict[str, str]) -> None:
        blob = raw.blob(key)
        blob.metadata = metadata or None
        blob.upload_from_string(b"x" * 50)

    store = ObjectStore(raw.name, endpoint=fake_gcs.endpoint, driver=GCS)
    return store, put, lambda: {blob.name for blob in raw.client.list_blobs(raw.name)}


def _azure(azurite: AzuriteBlobServer) -> tuple[ObjectStore, Put, Callable[[], set[str]]]:
    raw = azurite.client().create_container(f"m-{uuidlib.uuid4().hex[:10]}")

    def put(key: str, metadata: dict[str, str]) -> None:
        raw.upload_blob(key, b"x" * 50, metadata=metadata or None)

    store = ObjectStore(
        raw.container_name,
        endpoint=azurite.account_url,
        driver=AZURE,
        azure_account=AZURITE_ACCOUNT,
        azure_key=AZURITE_KEY,
    )
    return store, put, lambda: {blob.name for blob in raw.list_blobs()}


@pytest.fixture(params=[GCS, AZURE])
def emulator(
    request: pytest.FixtureRequest,
) -> tuple[ObjectStore, Put, Callable[[], set[str]]]:
    if request.param == GCS:
        return _gcs(request.getfixturevalue("fake_gcs"))
    return _azure(request.getfixturevalue("azurite"))


def _bucket(store: ObjectStore) -> OffloadBucket:
    return GcsBucket(store) if store.driver == GCS else AzureContainer(store)


def test_the_listing_carries_the_cluster_and_managed_ledger_names(
    emulator: tuple[ObjectStore, Put, Callable[[], set[str]]],
) -> None:
    """Lower-case keys, only the two names Pulsar's readers need; () for an object that
    has no user metadata (distinct from None: a listing that carries none, as S3's)."""
    store, put, _ = emulator
    put("a", {"pulsarClusterName": OURS, "ManagedLedgerName": A, "role": "data"})
    put("b", {"Role": "index"})
    put("c", {})

    listed = {obj.key: obj.metadata for obj in _bucket(store).iter_objects("")}

    assert listed == {
        "a": (("managedledgername", A), ("pulsarclustername", OURS)),
        "b": (),
        "c": (),
    }


class _CountingBucket:
    """The real bucket, its HEADs counted (the diff runs on the driver, in this process)."""

    def __init__(self, inner: OffloadBucket, heads: list[str]) -> None:
        self._inner, self._heads = inner, heads

    def head(self, key: str) -> ObjectHead | None:
        self._heads.append(key)
        return self._inner.head(key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _segment(put: Put, uuid: str, ledger_id: int, ml_name: str, cluster: str) -> list[str]:
    """The two objects BlobStoreManagedLedgerOffloader writes, both with its metadata."""
    keys = [f"{uuid}-ledger-{ledger_id}", f"{uuid}-ledger-{ledger_id}-index"]
    for key, role in zip(keys, ("data", "index"), strict=True):
        put(key, {"role": role, "ManagedLedgerName": ml_name, "pulsarClusterName": cluster})
    return keys


def _shared_bucket(zk: KazooClient, store: ObjectStore, put: Put) -> dict[str, list[str]]:
    """Ours: A lists ledgers 10 and 11, offloaded here (tagged us-east); another cluster's
    live ledgers 10, 11 and 3 in the same bucket (tagged us-west: orphan-looking here);
    our orphans: ledger 7 of a deleted topic and a failed offload's uuid of ledger 10."""
    info = record([Ledger(10), Ledger(11), Ledger(20)])
    for ledger in info.ledgerInfo[:2]:
        offload(ledger, *_uuid(ledger.ledgerId)[:2], bookkeeper_deleted=True, bucket=store.bucket)
        ledger.offloadContext.driverMetadata.name = DRIVER_NAME[store.driver]
    write_record(zk, A, info)
    built: dict[str, list[str]] = {"live": [], "theirs": [], "orphans": []}
    for n in (10, 11):
        built["live"] += _segment(put, _uuid(n)[2], n, A, OURS)
    for n in (10, 11, 3):
        built["theirs"] += _segment(put, _uuid(100 + n)[2], n, A, THEIRS)
    built["orphans"] += _segment(put, _uuid(7)[2], 7, GONE, OURS)
    built["orphans"] += _segment(put, _uuid(50)[2], 10, A, OURS)
    return built


def _eager(settings: Settings, offload: ObjectStore) -> Endpoints:
    eager = settings.with_overrides(
        offload_bucket=offload.bucket,
        offload_prefix="",
        delete_enabled=True,
        grace_seconds=0,
        retention_seconds=0,
        orphan_max_fraction=1.0,
    )
    return dataclasses.replace(resolve(eager), offload=offload)


@pytest.mark.spark
def test_the_diff_reads_whose_segments_from_the_listing_without_a_head(
    settings: Settings,
    zk_client: KazooClient,
    emulator: tuple[ObjectStore, Put, Callable[[], set[str]]],
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, put, keys_left = emulator
    built = _shared_bucket(zk_client, store, put)
    endpoints = _eager(settings, store)
    heads: list[str] = []
    monkeypatch.setattr(
        offload_buckets,
        "offload_bucket",
        lambda s, client=None: _CountingBucket(_bucket(s), heads),
    )
    run_id = f"listed-{store.driver}"

    cycle.step_survey(endpoints, run_id, spark)

    assert heads == []  # the diff read every name from the listing
    assert cycle.step_phases(endpoints, run_id).added == 2  # theirs never registered
    assert {e.ledger_id for e in OrphanRegistry(endpoints.state).entries().values()} == {7, 10}
    cycle.step_delete(endpoints, run_id)
    report = cycle.step_report(endpoints, run_id).to_dict()
    # The live re-check before each delete still reads both objects with a HEAD.
    assert sorted(heads) == sorted(built["orphans"])
    assert keys_left() == {*built["live"], *built["theirs"]}
    tiered = report["tiered"]
    assert tiered["other_cluster_segments"] == 3
    assert tiered["other_clusters"] == {THEIRS: 3}
    assert tiered["our_clusters"]["names"] == [OURS]
    assert tiered["our_clusters"]["source"] == "learned"
    assert tiered["deleted"] == 2
