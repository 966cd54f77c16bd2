"""The tiered-storage source on Google Cloud Storage and Azure Blob Storage, with the real
``GcsBucket`` (fake-gcs-server) and ``AzureContainer`` (Azurite): the whole orphan cycle
(Spark executors list the bucket in shards through the factory), the re-check and the
conditional delete.

* GCS: a live segment kept, an orphan segment and an old upload part deleted, a segment
  whose ledger was offloaded to S3 held, foreign objects never deleted.
* Azure: the same, where ``<uuid>_<8 digits>`` is foreign (parts are jclouds' on GCS
  only); and a blob re-written between the re-check's listing and the delete is kept:
  Azurite honours ``If-Match`` per blob in a batch, so that one is real. (fake-gcs-server
  ignores ``ifGenerationMatch`` on delete: the GCS side of that case is
  ``test_offload_protocol_paths`` with a GCS-like bucket in memory, and GcsBucket's own
  tests with the fault injected at the client.)

The endpoints' offload store is set here as the edge resolves it for each emulator
(driver, endpoint, the emulator's account), whatever the settings' credentials chain.
"""

from __future__ import annotations

import dataclasses
import time
import uuid as uuidlib
from typing import Any

import pytest
from kazoo.client import KazooClient
from pulsar_records import Ledger, offload, record, write_record

from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import resolve
from ledger_gc.config.endpoints import Endpoints, ObjectStore
from ledger_gc.config.settings import Settings
from ledger_gc.formats.markers import java_uuid
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.rules.orphans import outcomes
from ledger_gc.rules.orphans.classify import segment_target
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.s3_orphans import deleting
from ledger_gc.storage import offload_buckets
from ledger_gc.storage.azure_container import AzureContainer
from ledger_gc.storage.offload_bucket import AZURE, GCS
from local_stack.azurite import AZURITE_ACCOUNT, AZURITE_KEY, AzuriteBlobServer
from local_stack.fake_gcs import FakeGcsServer

A = "acme/prod/persistent/orders"
GONE = "acme/prod/persistent/deleted-topic"
DAY_MS = 86_400_000


def _uuid(n: int) -> tuple[int, int, str]:
    msb, lsb = (n << 60) | 0x1000, -(0x2000 + n)
    return msb, lsb, java_uuid(msb, lsb)


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


def _ledgers(zk: KazooClient, bucket: str) -> dict[int, tuple[int, int, str]]:
    """A lists 1 (offloaded here), 2 (offloaded to S3, a bucket of the same name)."""
    u = {n: _uuid(n) for n in (1, 2, 3, 4)}
    info = record([Ledger(1), Ledger(2), Ledger(9)])
    offload(info.ledgerInfo[0], *u[1][:2], bucket=bucket)
    offload(info.ledgerInfo[1], *u[2][:2], bucket=bucket)
    info.ledgerInfo[1].offloadContext.driverMetadata.name = "aws-s3"
    write_record(zk, A, info)
    return u


def _cycle_classes(endpoints: Endpoints, spark: Any) -> dict[str, Any]:
    report = run_orphan_cycle(endpoints, spark=spark).to_dict()
    assert report["status"] == "ok", report["refusals"]
    return report


@pytest.mark.spark
def test_a_cycle_on_gcs_deletes_orphan_segments_and_old_upload_parts_only(
    settings: Settings,
    zk_client: KazooClient,
    fake_gcs: FakeGcsServer,
    spark: Any,
) -> None:
    raw = fake_gcs.client().create_bucket(f"g-{uuidlib.uuid4().hex[:10]}")
    u = _ledgers(zk_client, raw.name)
    _set_driver(zk_client, 1, "google-cloud-storage")
    keys = {
        "live": [f"{u[1][2]}-ledger-1", f"{u[1][2]}-ledger-1-index"],
        "elsewhere": [f"{u[2][2]}-ledger-2", f"{u[2][2]}-ledger-2-index"],
        "orphan": [f"{u[3][2]}-ledger-3", f"{u[3][2]}-ledger-3-index"],
        "part": [f"{u[4][2]}_00000001", f"{u[4][2]}_00000002"],
        "foreign": [f"{u[4][2]}_1", "notes.txt", f"{u[4][2]}"],
    }
    for group, names in keys.items():
        for name in names:
            blob = raw.blob(name)
            blob.metadata = {"ManagedLedgerName": GONE if group == "orphan" else A}
            blob.upload_from_string(b"x" * 50)
    endpoints = _eager(settings, ObjectStore(raw.name, endpoint=fake_gcs.endpoint, driver=GCS))

    report = _cycle_classes(endpoints, spark)

    classes = report["classes"]
    assert classes["live-segment"]["units"] == 1
    assert classes["other-bucket-segment"]["units"] == 1
    assert classes["orphan-segment"]["units"] == 1
    assert classes["orphan-upload-part"]["units"] == 2
    assert classes["offload-foreign"]["objects"] == 3
    assert report["tiered"]["upload_parts_deleted"] == 2 and report["tiered"]["deleted"] == 1
    left = {blob.name for blob in raw.client.list_blobs(raw.name)}
    assert left == {*keys["live"], *keys["elsewhere"], *keys["foreign"]}
    ahead = [r for r in AuditLog(endpoints.state).read() if r["status"] == "deleting"]
    # GCS names each object's generation in the write-ahead record.
    assert all(set(r["versions"]) for r in ahead) and len(ahead) == 3


def _set_driver(zk: KazooClient, ledger_id: int, driver: str) -> None:
    from ledger_gc.formats.records import decode_managed_ledger_info
    from ledger_gc.rules.metadata import paths

    path = paths.managed_ledger_path(A)
    info = decode_managed_ledger_info(zk.get(path)[0], path=path, allow_empty=True)
    for ledger in info.ledgerInfo:
        if ledger.ledgerId == ledger_id:
            ledger.offloadContext.driverMetadata.name = driver
    write_record(zk, A, info)


def _azure(azurite: AzuriteBlobServer) -> tuple[Any, ObjectStore]:
    raw = azurite.client().create_container(f"z-{uuidlib.uuid4().hex[:10]}")
    store = ObjectStore(
        raw.container_name,
        endpoint=azurite.account_url,
        driver=AZURE,
        azure_account=AZURITE_ACCOUNT,
        azure_key=AZURITE_KEY,
    )
    return raw, store


@pytest.mark.spark
def test_a_cycle_on_azure_deletes_orphan_segments_and_nothing_else(
    settings: Settings,
    zk_client: KazooClient,
    azurite: AzuriteBlobServer,
    spark: Any,
) -> None:
    raw, store = _azure(azurite)
    u = _ledgers(zk_client, raw.container_name)
    _set_driver(zk_client, 1, "azureblob")
    keys = {
        "live": [f"{u[1][2]}-ledger-1", f"{u[1][2]}-ledger-1-index"],
        "elsewhere": [f"{u[2][2]}-ledger-2", f"{u[2][2]}-ledger-2-index"],
        "orphan": [f"{u[3][2]}-ledger-3", f"{u[3][2]}-ledger-3-index"],
        "foreign": [f"{u[4][2]}_00000001", "notes.txt"],  # no upload parts on Azure
    }
    for names in keys.values():
        for name in names:
            raw.upload_blob(name, b"x" * 50, metadata={"ManagedLedgerName": A})

    report = _cycle_classes(_eager(settings, store), spark)

    classes = report["classes"]
    assert classes["live-segment"]["units"] == 1
    assert classes["other-bucket-segment"]["units"] == 1
    assert classes["orphan-segment"]["units"] == 1
    assert classes["orphan-upload-part"]["units"] == 0
    assert classes["offload-foreign"]["objects"] == 2
    left = {blob.name for blob in raw.list_blobs()}
    assert left == {*keys["live"], *keys["elsewhere"], *keys["foreign"]}


def test_a_blob_re_written_between_the_re_check_and_the_delete_is_kept_on_azure(
    settings: Settings,
    zk_client: KazooClient,
    azurite: AzuriteBlobServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw, store = _azure(azurite)
    _, _, uuid = _uuid(7)
    data = f"{uuid}-ledger-7"
    for name in (data, f"{data}-index"):
        raw.upload_blob(name, b"old" * 10)
    container = AzureContainer(store)
    sent = container.delete_listed

    def a_broker_writes_first(objects: Any) -> Any:
        raw.upload_blob(data, b"new", overwrite=True)  # a new ETag
        return sent(objects)

    monkeypatch.setattr(container, "delete_listed", a_broker_writes_first)
    monkeypatch.setattr(offload_buckets, "offload_bucket", lambda s, client=None: container)
    newest = max(o.last_modified for o in container.iter_objects(uuid))
    entry = RegistryEntry(
        prefix=segment_target(raw.container_name, data),
        target_class="orphan-segment",
        ml_name=GONE,
        ledger_id=7,
        first_seen_ms=0,
        last_seen_ms=0,
        first_scan=1,
        last_scan=2,
        scans_seen=2,
        objects=2,
        bytes=60,
        newest_ms=newest,
    )
    endpoints = _eager(settings, store)

    [result] = deleting.recheck_and_delete(
        endpoints,
        [entry],
        run_id="orphans-1",
        now_ms=int(time.time() * 1000) + DAY_MS,
        deleting=True,
    )

    assert result.action == outcomes.FAILED, result
    left = {blob.name: raw.download_blob(blob.name).readall() for blob in raw.list_blobs()}
    assert left == {data: b"new"}  # the re-written blob kept, the unmoved index deleted
    [ahead] = [r for r in AuditLog(endpoints.state).read() if r["status"] == "deleting"]
    assert set(ahead["versions"]) == {data, f"{data}-index"}


def _part_entry(bucket: str, key: str, newest: int) -> RegistryEntry:
    return RegistryEntry(
        prefix=segment_target(bucket, key),
        target_class="orphan-upload-part",
        ml_name="",
        ledger_id=None,
        first_seen_ms=0,
        last_seen_ms=0,
        first_scan=1,
        last_scan=2,
        scans_seen=2,
        objects=1,
        bytes=50,
        newest_ms=newest,
    )


def test_an_old_part_of_an_upload_still_running_is_kept_on_gcs(
    settings: Settings, zk_client: KazooClient, fake_gcs: FakeGcsServer
) -> None:
    """jclouds writes one upload's parts ``<upload id>_00000001``, ``_00000002``, ... and
    composes them at the end: a part older than retention whose upload wrote another part
    since is of an upload still running (or just stopped), and deleting it would break
    that upload's compose. The upload's newest part decides, not the part's own age."""
    raw = fake_gcs.client().create_bucket(f"g-{uuidlib.uuid4().hex[:10]}")
    _, _, upload = _uuid(5)
    first, second = f"{upload}_00000001", f"{upload}_00000002"
    raw.blob(first).upload_from_string(b"x" * 50)
    time.sleep(1.5)
    raw.blob(second).upload_from_string(b"y" * 50)
    written = {b.name: int(b.updated.timestamp() * 1000) for b in raw.client.list_blobs(raw.name)}
    store = ObjectStore(raw.name, endpoint=fake_gcs.endpoint, driver=GCS)
    endpoints = dataclasses.replace(
        _eager(settings, store),
        policy=dataclasses.replace(_eager(settings, store).policy, retention_seconds=1),
    )
    # The first part is past retention (1 s), the second, written since, is not.
    now = written[second] + 500
    assert now - written[first] >= 1000

    results = deleting.recheck_and_delete(
        endpoints,
        [
            _part_entry(raw.name, first, written[first]),
            _part_entry(raw.name, second, written[second]),
        ],
        run_id="orphans-1",
        now_ms=now,
        deleting=True,
    )

    assert {r.action for r in results} == {outcomes.WAITING}, results
    assert {b.name for b in raw.client.list_blobs(raw.name)} == {first, second}
