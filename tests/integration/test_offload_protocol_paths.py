"""The tiered-storage source's re-check, delete and restore through ``OffloadBucket``,
against real ZooKeeper (and SeaweedFS for S3), with a GCS-like bucket in memory
(``fake_offload_bucket``) where the path needs a store that conditions a delete on the
version listed: fake-gcs-server ignores ``ifGenerationMatch`` on delete.

Safety cases of issue 35: an object re-written between the listing and the delete is
kept; a ledger offloaded to GCS while ledger-gc is configured for S3 (or the reverse)
makes no orphan of the configured bucket; foreign objects are never deleted. And the
new class ``orphan-upload-part``: old GCS multipart leftovers deleted, young ones wait.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from fake_offload_bucket import FakeGcsBucket
from kazoo.client import KazooClient
from pulsar_records import Ledger, offload, put_segment, record, write_record

from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.formats.markers import java_uuid
from ledger_gc.restore.restoring import restore_run
from ledger_gc.rules.orphans import outcomes
from ledger_gc.rules.orphans.classify import segment_target
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.s3_orphans import deleting
from ledger_gc.storage import offload_buckets

A = "acme/prod/persistent/orders"
GONE = "acme/prod/persistent/deleted-topic"
DAY_MS = 86_400_000


def _uuid(n: int) -> tuple[int, int, str]:
    msb, lsb = 0x1000 + n, -(0x2000 + n)
    return msb, lsb, java_uuid(msb, lsb)


@pytest.fixture
def gcs(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> tuple[Settings, FakeGcsBucket]:
    """Tiered storage on a GCS-like bucket (in memory), eager: deletion on, no grace,
    no retention; the factory hands out this one bucket."""
    tiered = settings.with_overrides(
        offload_bucket="gcs-offload",
        offload_prefix="",
        delete_enabled=True,
        grace_seconds=0,
        retention_seconds=0,
    )
    bucket = FakeGcsBucket(resolve(tiered).offload)
    monkeypatch.setattr(offload_buckets, "offload_bucket", lambda store, client=None: bucket)
    return tiered, bucket


def _entry(bucket: str, key: str, target_class: str, ledger_id: int | None, newest: int, ml=""):
    return RegistryEntry(
        prefix=segment_target(bucket, key),
        target_class=target_class,
        ml_name=ml,
        ledger_id=ledger_id,
        first_seen_ms=0,
        last_seen_ms=0,
        first_scan=1,
        last_scan=2,
        scans_seen=2,
        objects=2,
        bytes=200,
        newest_ms=newest,
    )


def test_an_object_re_written_between_the_listing_and_the_delete_is_kept(
    gcs: tuple[Settings, FakeGcsBucket], zk_client: KazooClient
) -> None:
    settings, bucket = gcs
    _, _, uuid = _uuid(7)
    data = f"{uuid}-ledger-7"
    old = int(time.time() * 1000) - DAY_MS
    listed = {
        data: bucket.put(data, modified=old),
        f"{data}-index": bucket.put(f"{data}-index", modified=old),
    }
    # A broker writes the data object again after the re-check listed it.
    bucket.before_delete = lambda: bucket.put(data, b"new", modified=old)
    entry = _entry(bucket.bucket, data, "orphan-segment", 7, old, GONE)

    [result] = deleting.recheck_and_delete(
        resolve(settings), [entry], run_id="orphans-1", now_ms=old + 2 * DAY_MS, deleting=True
    )

    assert result.action == outcomes.FAILED and "moved since it was listed" in str(result.error)
    assert data in bucket.objects and bucket.objects[data].data == b"new"  # kept
    assert f"{data}-index" not in bucket.objects  # the unmoved index went
    [ahead] = [r for r in AuditLog(settings).read() if r["status"] == "deleting"]
    assert ahead["versions"] == listed  # the write-ahead record names each version


@pytest.mark.parametrize("offloaded_to", ["aws-s3", "google-cloud-storage"])
def test_a_ledger_offloaded_to_another_driver_or_bucket_is_no_orphan_here(
    gcs: tuple[Settings, FakeGcsBucket], zk_client: KazooClient, offloaded_to: str
) -> None:
    """Configured for GCS; A lists ledger 5 with the segment's uuid, offloaded to S3 (or to
    another GCS bucket): the segment in the configured bucket is neither live nor an
    orphan here. Held, never deleted."""
    settings, bucket = gcs
    msb, lsb, uuid = _uuid(5)
    info = record([Ledger(5), Ledger(6)])
    offload(info.ledgerInfo[0], msb, lsb, bucket="elsewhere")
    info.ledgerInfo[0].offloadContext.driverMetadata.name = offloaded_to
    write_record(zk_client, A, info)
    data = f"{uuid}-ledger-5"
    old = int(time.time() * 1000) - DAY_MS
    bucket.put(data, modified=old, ManagedLedgerName=A)
    bucket.put(f"{data}-index", modified=old, ManagedLedgerName=A)
    entry = _entry(bucket.bucket, data, "orphan-segment", 5, old, A)

    [result] = deleting.recheck_and_delete(
        resolve(settings), [entry], run_id="orphans-1", now_ms=old + 2 * DAY_MS, deleting=True
    )

    assert result.action == outcomes.HELD, result
    assert "offloaded to" in result.reason and "elsewhere" in result.reason
    assert {data, f"{data}-index"} <= set(bucket.objects) and bucket.delete_calls == 0


def test_a_ledger_offloaded_to_gcs_is_no_orphan_of_the_configured_s3_bucket(
    settings: Settings, zk_client: KazooClient, s3_client: Any
) -> None:
    """The reverse, on SeaweedFS: configured for S3, the ledger names GCS."""
    name = f"{settings.bucket}-offload"
    s3_client.create_bucket(Bucket=name)
    tiered = settings.with_overrides(
        offload_bucket=name, offload_prefix="t", delete_enabled=True, retention_seconds=0
    )
    msb, lsb, uuid = _uuid(5)
    info = record([Ledger(5)])
    offload(info.ledgerInfo[0], msb, lsb, bucket=name)
    info.ledgerInfo[0].offloadContext.driverMetadata.name = "google-cloud-storage"
    write_record(zk_client, A, info)
    keys = put_segment(s3_client, name, "t", uuid, 5, ml_name=A)
    newest = max(
        int(s3_client.head_object(Bucket=name, Key=k)["LastModified"].timestamp() * 1000)
        for k in keys
    )
    entry = _entry(name, keys[0], "orphan-segment", 5, newest, A)

    [result] = deleting.recheck_and_delete(
        resolve(tiered), [entry], run_id="orphans-1", now_ms=newest + DAY_MS, deleting=True
    )

    assert result.action == outcomes.HELD, result
    assert "gcs/" in result.reason
    left = {o["Key"] for o in s3_client.list_objects_v2(Bucket=name).get("Contents", [])}
    assert left == set(keys)


def test_old_upload_parts_are_deleted_young_ones_wait_foreign_keys_never(
    gcs: tuple[Settings, FakeGcsBucket], zk_client: KazooClient
) -> None:
    settings, bucket = gcs
    _, _, uuid = _uuid(1)
    _, _, running = _uuid(2)
    now = int(time.time() * 1000)
    # Two uploads: one stopped long ago, one still writing (an old part of an upload
    # that wrote a part since waits too: test_offload_real_stores).
    old_part, young_part = f"{uuid}_00000001", f"{running}_00000002"
    bucket.put(old_part, modified=now - 10 * DAY_MS)
    bucket.put(young_part, modified=now - 1000)
    bucket.put(f"{uuid}_1", modified=now - 10 * DAY_MS)  # not 8 digits: foreign
    week = settings.with_overrides(retention_seconds=7 * 86_400)
    entries = [
        _entry(bucket.bucket, old_part, "orphan-upload-part", None, now - 10 * DAY_MS),
        _entry(bucket.bucket, young_part, "orphan-upload-part", None, now - 1000),
        _entry(bucket.bucket, f"{uuid}_1", "orphan-upload-part", None, now - 10 * DAY_MS),
    ]

    results = deleting.recheck_and_delete(
        resolve(week), entries, run_id="orphans-1", now_ms=now, deleting=True
    )

    actions = {r.prefix.rpartition("/")[2]: r.action for r in results}
    assert actions == {
        old_part: outcomes.DELETED,
        young_part: outcomes.WAITING,
        f"{uuid}_1": outcomes.FAILED,  # not an upload part of this bucket: kept
    }
    assert set(bucket.objects) == {young_part, f"{uuid}_1"}
    [ahead] = [r for r in AuditLog(week).read() if r["status"] == "deleting"]
    assert ahead["target_class"] == "orphan-upload-part" and old_part in ahead["versions"]


def test_a_segment_deleted_from_a_soft_delete_bucket_is_restored(
    gcs: tuple[Settings, FakeGcsBucket], zk_client: KazooClient
) -> None:
    settings, bucket = gcs
    _, _, uuid = _uuid(8)
    data = f"{uuid}-ledger-8"
    old = int(time.time() * 1000) - DAY_MS
    bucket.put(data, b"d" * 40, modified=old)
    bucket.put(f"{data}-index", b"i" * 10, modified=old)
    entry = _entry(bucket.bucket, data, "orphan-segment", 8, old, GONE)
    [result] = deleting.recheck_and_delete(
        resolve(settings), [entry], run_id="orphans-9", now_ms=old + 2 * DAY_MS, deleting=True
    )
    assert result.action == outcomes.DELETED and result.recoverable is True
    assert not bucket.objects

    report = restore_run(resolve(settings), "orphans-9").to_dict()

    assert report["objects_restored"] == 2 and report["bytes_restored"] == 50, report
    assert bucket.objects[data].data == b"d" * 40
    again = restore_run(resolve(settings), "orphans-9").to_dict()
    assert again["objects_restored"] == 0 and again["errors"] == 0
