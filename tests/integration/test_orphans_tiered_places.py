"""Where each ledger's offload went, in the whole orphan cycle (Spark, real ZooKeeper and
SeaweedFS): a segment whose ledger's driverMetadata names another driver (GCS) or another
bucket is neither live nor an orphan of the configured S3 bucket: held, reported, never
deleted, while a true orphan beside it is deleted. The listing runs in shards."""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.client import KazooClient
from pulsar_records import Ledger, offload, put_segment, record, write_record

from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.formats.markers import java_uuid
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.report import render_text

pytestmark = pytest.mark.spark

A = "acme/prod/persistent/orders"
GONE = "acme/prod/persistent/deleted-topic"


def _uuid(n: int) -> tuple[int, int, str]:
    msb, lsb = (n << 60) | 0x1000, -(0x2000 + n)  # first hex digits spread over shards
    return msb, lsb, java_uuid(msb, lsb)


def test_segments_of_ledgers_offloaded_elsewhere_are_held_and_true_orphans_deleted(
    settings: Settings, zk_client: KazooClient, s3_client: Any, spark: Any
) -> None:
    bucket = f"{settings.bucket}-offload"
    s3_client.create_bucket(Bucket=bucket)
    eager = settings.with_overrides(
        offload_bucket=bucket,
        offload_prefix="",
        delete_enabled=True,
        grace_seconds=0,
        retention_seconds=0,
        orphan_max_fraction=1.0,
    )
    info = record([Ledger(1), Ledger(2), Ledger(3), Ledger(9)])
    u = {n: _uuid(n) for n in (1, 2, 3, 4)}
    offload(info.ledgerInfo[0], *u[1][:2], bucket=bucket)  # here: live
    offload(info.ledgerInfo[1], *u[2][:2], bucket=bucket)
    info.ledgerInfo[1].offloadContext.driverMetadata.name = "google-cloud-storage"  # GCS
    offload(info.ledgerInfo[2], *u[3][:2], bucket="another-bucket")  # S3, elsewhere
    write_record(zk_client, A, info)
    live = put_segment(s3_client, bucket, "", u[1][2], 1, ml_name=A)
    elsewhere = put_segment(s3_client, bucket, "", u[2][2], 2, ml_name=A)
    elsewhere += put_segment(s3_client, bucket, "", u[3][2], 3, ml_name=A)
    orphan = put_segment(s3_client, bucket, "", u[4][2], 4, ml_name=GONE)
    s3_client.put_object(Bucket=bucket, Key=f"{u[4][2]}_00000001", Body=b"x")  # S3: foreign

    cycle = run_orphan_cycle(resolve(eager), spark=spark)
    report = cycle.to_dict()

    assert report["status"] == "ok", report["refusals"]
    classes = report["classes"]
    assert classes["live-segment"]["units"] == 1
    assert classes["other-bucket-segment"]["units"] == 2
    assert classes["orphan-segment"]["units"] == 1
    assert classes["orphan-upload-part"]["units"] == 0  # parts are GCS's; on S3 foreign
    assert classes["offload-foreign"]["objects"] == 1
    tiered = report["tiered"]
    assert tiered["other_bucket_segments"] == 2 and tiered["deleted"] == 1
    held = {item["prefix"]: item["reason"] for item in tiered["held"]}
    assert "gcs/" in held[f"offload:{bucket}/{u[2][2]}-ledger-2"]
    assert "s3/another-bucket" in held[f"offload:{bucket}/{u[3][2]}-ledger-3"]
    pages = s3_client.list_objects_v2(Bucket=bucket).get("Contents", [])
    left = {o["Key"] for o in pages}
    assert left == {*live, *elsewhere, f"{u[4][2]}_00000001"} and not set(orphan) & left
    assert any("offloaded elsewhere" in line for line in render_text(cycle))
