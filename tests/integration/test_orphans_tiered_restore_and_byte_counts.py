"""A hostile review of orphan-segment removal (issue 14), against real ZooKeeper and
SeaweedFS: each test is a way the tiered-storage path could delete what it must not,
restore into the wrong bucket, or report bytes it did not free."""

from __future__ import annotations

from typing import Any

import pytest
from pulsar_records import put_segment

from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.formats.markers import java_uuid
from ledger_gc.restore.restoring import restore_run
from ledger_gc.rules.orphans import outcomes
from ledger_gc.rules.orphans.classify import segment_target
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.s3_orphans import deleting

PREFIX = "tiered"


def _uuid(n: int) -> str:
    return java_uuid(0x1000 + n, -(0x2000 + n))


def version(s3_client: Any, bucket: str) -> None:
    s3_client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})


@pytest.fixture
def tiered(settings: Settings, s3_client: Any) -> Settings:
    bucket = f"{settings.bucket}-offload"
    s3_client.create_bucket(Bucket=bucket)
    return settings.with_overrides(
        offload_bucket=bucket,
        offload_prefix=PREFIX,
        delete_enabled=True,
        grace_seconds=0,
        retention_seconds=0,
    )


def _segment_entry(
    s3_client: Any, settings: Settings, uuid: str, ledger_id: int, ml_name: str = ""
) -> RegistryEntry:
    """A registered orphan segment (a deleted topic's), as the phases hand it over."""
    keys = put_segment(s3_client, settings.offload_bucket, PREFIX, uuid, ledger_id)
    newest = max(
        int(
            s3_client.head_object(Bucket=settings.offload_bucket, Key=key)[
                "LastModified"
            ].timestamp()
            * 1000
        )
        for key in keys
    )
    return RegistryEntry(
        prefix=segment_target(settings.offload_bucket, keys[0]),
        target_class="orphan-segment",
        ml_name=ml_name,
        ledger_id=ledger_id,
        first_seen_ms=0,
        last_seen_ms=0,
        first_scan=1,
        last_scan=2,
        scans_seen=2,
        objects=2,
        bytes=4064,
        newest_ms=newest,
    )


def test_restore_brings_orphan_segments_back_in_the_offload_bucket(
    tiered: Settings, s3_client: Any
) -> None:
    """The offload bucket is versioned, the ledger bucket is not: an orphan segment's
    delete is recoverable, and ``ledgergc restore`` must act on the offload bucket (its
    audit records name the bare data key), never refuse for, or list, the ledger bucket."""
    version(s3_client, tiered.offload_bucket)
    entry = _segment_entry(s3_client, tiered, _uuid(7), 7)
    data_key = entry.prefix.split("/", 1)[1]
    # Another segment whose key starts with this one's data key (ledger 70 of the same
    # uuid), deleted by hand during the run: not this run's to bring back.
    decoy = put_segment(s3_client, tiered.offload_bucket, PREFIX, _uuid(7), 70)
    later = entry.newest_ms + 60_000

    [result] = deleting.recheck_and_delete(
        resolve(tiered), [entry], run_id="orphans-1", now_ms=later, deleting=True
    )
    for key in decoy:
        s3_client.delete_object(Bucket=tiered.offload_bucket, Key=key)

    assert result.action == outcomes.DELETED and result.recoverable is True
    records = AuditLog(tiered).deletions()
    assert [r["bucket"] for r in records] == [tiered.offload_bucket]

    report = restore_run(resolve(tiered), "orphans-1").to_dict()

    assert report["objects_restored"] == 2 and report["errors"] == 0
    # S3 listings name no version, so the audit has none: the newest delete markers in the
    # run's window are the ones removed, and the report says so.
    assert [p["chosen_by"] for p in report["prefixes"]] == ["time"]
    assert report["unrestorable"] == 0 and report["exit_code"] == 0
    for key in (data_key, f"{data_key}-index"):
        s3_client.head_object(Bucket=tiered.offload_bucket, Key=key)
    for key in decoy:
        with pytest.raises(s3_client.exceptions.ClientError):
            s3_client.head_object(Bucket=tiered.offload_bucket, Key=key)
    restored = [r for r in AuditLog(tiered).read() if r["operation"] == "restore"]
    assert {r["bucket"] for r in restored} == {tiered.offload_bucket}


@pytest.mark.spark
@pytest.mark.parametrize("offload_prefix", ["", "ledgers/tiered"])
def test_a_shared_bucket_counts_each_object_once_in_the_byte_fraction(
    settings: Settings,
    zk_client: Any,
    s3_client: Any,
    storage: Any,
    spark: Any,
    offload_prefix: str,
) -> None:
    """LEDGERGC_OFFLOAD_BUCKET = LEDGERGC_BUCKET, prefixes overlapping (the offload prefix
    empty: it covers the ledger prefix; or inside it): both scans list the overlap, and
    counting it twice would halve the orphan fraction the guard compares with its limit.
    The segments are never taken for ledger blocks, nor ledger blocks for segments."""
    from pulsar_records import Ledger, offload, record, write_data, write_record

    from ledger_gc.orphans.cycle import run_orphan_cycle

    shared = settings.with_overrides(
        offload_bucket=settings.bucket,
        offload_prefix=offload_prefix,
        delete_enabled=True,
        grace_seconds=0,
        retention_seconds=0,
        orphan_max_fraction=0.40,
    )
    name = "acme/prod/persistent/orders"
    info = record([Ledger(i, payload=400) for i in (1, 2, 20)])
    offload(info.ledgerInfo[0], 0x1001, -0x2001, bucket=settings.bucket)
    write_record(zk_client, name, info)
    write_data(storage, name, [Ledger(i, payload=400) for i in (1, 2, 20)])
    put_segment(s3_client, settings.bucket, offload_prefix, _uuid(1), 1, ml_name=name, size=200)
    orphans = put_segment(s3_client, settings.bucket, offload_prefix, _uuid(9), 9, size=2500)
    pages = s3_client.get_paginator("list_objects_v2").paginate(Bucket=settings.bucket)
    every = {o["Key"]: o["Size"] for page in pages for o in page.get("Contents", [])}
    orphan_bytes = sum(every[k] for k in orphans)
    # The orphan segment is above the 40% limit of what the bucket really holds.
    assert orphan_bytes / sum(every.values()) > 0.40

    report = run_orphan_cycle(resolve(shared), spark=spark).to_dict()

    assert report["orphan_bytes"] == orphan_bytes
    assert report["orphan_fraction"] == pytest.approx(orphan_bytes / sum(every.values()))
    assert report["status"] == "refused"
    assert [r["guard"] for r in report["refusals"]] == ["orphan-fraction"]
    assert report["classes"]["live"]["units"] == 3  # ledger blocks stay ledger blocks
    assert report["classes"]["live-segment"]["units"] == 1
    assert set(every) == {
        o["Key"]
        for page in s3_client.get_paginator("list_objects_v2").paginate(Bucket=settings.bucket)
        for o in page.get("Contents", [])
    }
