"""A versioned bucket: a delete adds delete markers and frees nothing, so the trim, the
audit log and the metrics must say "recoverable", never "reclaimed"; ``ledgergc restore``
brings such a run's data back. Against the local stack's S3 (SeaweedFS), which keeps
object versions once ``put_bucket_versioning`` turns them on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import resolve
from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.observability.metrics import render_metrics
from ledger_gc.observability.overview import build_overview
from ledger_gc.rules.orphans import outcomes
from ledger_gc.rules.positions import Position
from ledger_gc.rules.storage.keys import ml_dir
from ledger_gc.trim.run import run_trim

ML = "acme/prod/persistent/orders"
LEDGERGC = Path(sys.executable).parent / "ledgergc"


def run_ledgergc(settings, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "LEDGERGC_ZK_HOSTS": settings.zk_hosts,
        "LEDGERGC_S3_ENDPOINT": settings.s3_endpoint or "",
        "LEDGERGC_BUCKET": settings.bucket,
        "LEDGERGC_PREFIX": settings.prefix,
        "LEDGERGC_STATE_DIR": str(settings.state_dir),
    }
    return subprocess.run(
        [str(LEDGERGC), *args], env=env, capture_output=True, text=True, timeout=120
    )


def version(s3_client, bucket: str) -> None:
    s3_client.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})


def expire_noncurrent(s3_client, bucket: str, days: int) -> None:
    s3_client.put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={
            "Rules": [
                {
                    "ID": "expire-old-versions",
                    "Status": "Enabled",
                    "Filter": {"Prefix": ""},
                    "NoncurrentVersionExpiration": {"NoncurrentDays": days},
                }
            ]
        },
    )


def consumed_ledgers(store, storage) -> tuple[ManagedLedger, list[int], dict[str, int]]:
    """Three full ledgers, the first two consumed; their blocks (key -> size)."""
    ml = ManagedLedger.open(ML, store, storage, ManagedLedgerConfig(max_entries_per_ledger=3))
    for i in range(3):
        ml.add_entries([f"entry-{i}-{j}".encode() * 20 for j in range(3)])
    ids = [li.ledgerId for li in store.get_managed_ledger(ML).value.ledgerInfo]
    ml.open_cursor("sub", "earliest").mark_delete(Position(ids[1], 2))
    blocks = {
        obj.key: obj.size
        for obj in storage.iter_objects(ml_dir(storage.prefix, ML))
        if int(obj.key.split("/ledgers/")[1].split("/")[0]) in ids[:2]
    }
    return ml, ids, blocks


def metric(text: str, name: str, operation: str) -> float:
    for line in text.splitlines():
        if line.startswith(f'{name}{{operation="{operation}"}}'):
            return float(line.split()[-1])
    raise AssertionError(f"{name} for {operation} not in:\n{text}")


def test_a_trim_in_a_versioned_bucket_reports_recoverable_bytes_not_reclaimed(
    store, storage, settings, s3_client
):
    version(s3_client, settings.bucket)
    ml, ids, blocks = consumed_ledgers(store, storage)

    report = run_trim(resolve(settings))

    data = report.to_dict()
    totals = data["totals"]
    assert report.exit_code == 0
    assert totals["ledgers_deleted"] == 2
    assert totals["bytes_reclaimed"] == 0
    assert totals["bytes_recoverable"] == sum(blocks.values()) > 0
    [result] = data["managed_ledgers"]
    assert all(d["recoverable"] for d in result["deleted"])
    # The marker semantics stay: the data is gone from listings, so the markers go.
    assert result["pending"] == [] and not set(blocks) & {
        o.key for o in storage.iter_objects(settings.key_prefix)
    }
    bucket = data["bucket"]
    assert bucket["versioning"] == "Enabled" and bucket["noncurrent_expiration_days"] is None
    assert "billed" in bucket["note"] and "NoncurrentVersionExpiration" in bucket["note"]

    deleted = AuditLog(settings).deletions()
    assert [r["ledger_id"] for r in deleted] == ids[:2]
    assert all(r["recoverable"] is True and r["versioning"] == "Enabled" for r in deleted)

    overview = build_overview(settings)
    text = render_metrics(overview)
    assert metric(text, "ledgergc_reclaimed_bytes_total", "trim") == 0
    assert metric(text, "ledgergc_recoverable_bytes_total", "trim") == sum(blocks.values())
    ml.close()


def test_a_trim_in_an_unversioned_bucket_still_reclaims(store, storage, settings):
    ml, _, blocks = consumed_ledgers(store, storage)

    totals = run_trim(resolve(settings)).to_dict()["totals"]

    assert totals["bytes_reclaimed"] == sum(blocks.values()) and totals["bytes_recoverable"] == 0
    assert all(r["recoverable"] is False for r in AuditLog(settings).deletions())
    text = render_metrics(build_overview(settings))
    assert metric(text, "ledgergc_reclaimed_bytes_total", "trim") == sum(blocks.values())
    ml.close()


def test_the_report_names_the_lifecycle_rule_that_expires_old_versions(
    store, storage, settings, s3_client, capsys
):
    from ledger_gc.commands.trim import print_text

    version(s3_client, settings.bucket)
    expire_noncurrent(s3_client, settings.bucket, 7)
    ml, _, _ = consumed_ledgers(store, storage)

    data = run_trim(resolve(settings)).to_dict()

    assert data["bucket"]["noncurrent_expiration_days"] == 7
    assert "7 days" in data["bucket"]["note"]
    print_text(data, settings)
    text = capsys.readouterr().out
    assert "0 B reclaimed" in text and "recoverable, not reclaimed" in text
    assert "expire-old-versions" in text and "7 days" in text
    deleted = AuditLog(settings).deletions()
    assert deleted and all(r["noncurrent_expiration_days"] == 7 for r in deleted)
    ml.close()


def test_restore_brings_a_trimmed_ledger_back_and_is_audited(store, storage, settings, s3_client):
    version(s3_client, settings.bucket)
    ml, ids, blocks = consumed_ledgers(store, storage)
    report = run_trim(resolve(settings))
    assert report.totals()["bytes_recoverable"] > 0
    for key in blocks:
        with pytest.raises(s3_client.exceptions.NoSuchKey):
            s3_client.get_object(Bucket=settings.bucket, Key=key)

    dry = run_ledgergc(settings, "restore", "--run", report.run_id, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["objects_restored"] == 0
    with pytest.raises(s3_client.exceptions.NoSuchKey):
        s3_client.get_object(Bucket=settings.bucket, Key=next(iter(blocks)))

    done = run_ledgergc(settings, "restore", "--run", report.run_id, "--json")

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["objects_restored"] == len(blocks)
    assert {p["ledger_id"] for p in result["prefixes"]} == set(ids[:2])
    assert "metadata" in result["note"] and "orphan" in result["note"]
    for key, size in blocks.items():
        body = s3_client.get_object(Bucket=settings.bucket, Key=key)["Body"].read()
        assert len(body) == size
    restores = [r for r in AuditLog(settings).read() if r["operation"] == "restore"]
    assert {r["ledger_id"] for r in restores} == set(ids[:2])
    assert {r["status"] for r in restores} == {"restoring", "restored"}

    again = run_ledgergc(settings, "restore", "--run", report.run_id, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["objects_restored"] == 0
    ml.close()


def test_restore_refuses_an_unversioned_bucket_and_an_unknown_run(
    store, storage, settings, s3_client
):
    ml, _, _ = consumed_ledgers(store, storage)
    report = run_trim(resolve(settings))

    refused = run_ledgergc(settings, "restore", "--run", report.run_id)
    assert refused.returncode == 2
    [line] = refused.stderr.strip().splitlines()
    assert "not versioned" in line and settings.bucket in line

    version(s3_client, settings.bucket)
    unknown = run_ledgergc(settings, "restore", "--run", "no-such-run")
    assert unknown.returncode == 2
    [line] = unknown.stderr.strip().splitlines()
    assert "no-such-run" in line
    ml.close()


def test_an_orphan_deleted_from_a_versioned_bucket_is_recoverable_not_reclaimed(
    storage, settings, s3_client
):
    """The orphan cycle's delete step (no Spark needed): its results, its audit records
    (written by the delete path) and the cycle's report."""
    from ledger_gc.rules.orphans.phases import RegistryEntry
    from ledger_gc.s3_orphans import deleting

    version(s3_client, settings.bucket)
    gone_topic = "acme/prod/persistent/deleted-topic"  # no znode: an orphan partition
    block = storage.write_block(gone_topic, 7, 0, [b"x" * 500])
    [listed] = list(storage.iter_objects(ml_dir(storage.prefix, gone_topic)))
    entry = RegistryEntry(
        prefix=ml_dir(storage.prefix, gone_topic),
        target_class="orphan-partition",
        ml_name=gone_topic,
        ledger_id=None,
        first_seen_ms=0,
        last_seen_ms=0,
        first_scan=1,
        last_scan=2,
        scans_seen=2,
        objects=1,
        bytes=block.size,
        newest_ms=listed.last_modified,
    )
    later = listed.last_modified + (settings.retention_seconds + 60) * 1000

    [result] = deleting.recheck_and_delete(
        resolve(settings), [entry], run_id="orphans-1", now_ms=later, deleting=True
    )

    assert result.action == outcomes.DELETED and result.recoverable is True
    assert result.bytes == block.size
    [record] = AuditLog(settings).deletions()
    assert record["operation"] == "orphan-removal" and record["recoverable"] is True
    text = render_metrics(build_overview(settings))
    assert metric(text, "ledgergc_reclaimed_bytes_total", "orphan-removal") == 0
    assert metric(text, "ledgergc_recoverable_bytes_total", "orphan-removal") == block.size

    # The cycle's report counts them apart, from the delete step's results.
    from ledger_gc.orphans.options import CycleOptions
    from ledger_gc.orphans.report import build_report, render_text
    from ledger_gc.orphans.run_steps import DELETE, RunSteps

    RunSteps(settings, "orphans-1").write_manifest(
        DELETE, {"deleting": True, "results": [result.to_dict()]}
    )
    report = build_report(resolve(settings), "orphans-1", options=CycleOptions(), now_ms=later)
    assert report.to_dict()["bytes_recoverable"] == block.size
    assert report.to_dict()["bytes_reclaimed"] == 0
    assert any("recoverable, not reclaimed" in line for line in render_text(report))
