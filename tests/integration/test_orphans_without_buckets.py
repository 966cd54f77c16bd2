"""A cycle with no bucket to scan (a Pulsar cluster: BookKeeper alone) skips the S3
source's Spark jobs, and records what they would have: the same diff fields, the run's
ZooKeeper sequence and the servers' times, no candidates, and no read of any managed
ledger's record."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.metadata.read_budget import METER
from ledger_gc.orphan_source import SurveyRequest
from ledger_gc.orphans import run_steps, survey_steps
from ledger_gc.orphans.records import ScanRecord, SnapshotRecord
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.rules.orphans.phases import RegistryEntry
from pulsar_cluster import PulsarCluster, ml_tags

pytestmark = pytest.mark.spark

#: Fields that differ between any two surveys (when they ran).
MOMENTS = ("snapshot_started_ms", "scan_started_ms", "snapshot_instant", "scan_instant")


def request(settings: Settings, spark: Any, run_id: str) -> SurveyRequest:
    return SurveyRequest(
        endpoints=resolve(settings),
        run_id=run_id,
        spark=spark,
        clock=lambda: int(time.time() * 1000),
        registry=OrphanRegistry(settings),
    )


@pytest.fixture
def no_buckets(settings: Settings, zk_client: KazooClient) -> Settings:
    c = PulsarCluster(zk_client).init()
    c.namespace("public/default")
    for topic in ("a", "b", "c"):
        name = f"public/default/persistent/{topic}"
        c.managed_ledger(name, [c.ledger(ml_tags(name)) for _ in range(3)])
    return settings.with_overrides(bucket="", offload_bucket="")


def test_nothing_to_scan_records_what_the_spark_jobs_would(
    no_buckets: Settings, spark: Any
) -> None:
    skipped_request = request(no_buckets, spark, "skipped")
    assert survey_steps.nothing_to_scan(skipped_request)
    mark = METER.mark()
    skipped = survey_steps.survey(skipped_request)
    reads = sum(METER.since(mark).values())
    full = survey_steps.diff_job(
        spark, resolve(no_buckets), _full_survey(no_buckets, spark, "full")
    )
    assert skipped.candidates == full.candidates == []
    same = {k: v for k, v in skipped.record.items() if k not in MOMENTS}
    assert same == {k: v for k, v in full.record.items() if k not in MOMENTS} | {
        "snapshot_sequence": same["snapshot_sequence"],  # a later run: a later number
        # The block horizon's evidence: no block, no candidate of this source to hold.
        "id_counter": None,
        "metadata_max_ledger_id": None,
    }
    assert skipped.record["snapshot_sequence"] is not None
    assert skipped.record["scan_instant"] and skipped.record["snapshot_instant"]
    steps = run_steps.RunSteps(no_buckets, "skipped")
    assert steps.read_record(run_steps.SNAPSHOT, SnapshotRecord).managed_ledgers == 3
    assert steps.read_record(run_steps.SCAN, ScanRecord).objects == 0
    assert reads < 20  # the managed ledgers listed, none of their records read


def _full_survey(settings: Settings, spark: Any, run_id: str) -> Any:
    """The snapshot and scan as the Spark jobs make them (the diff reads them back)."""
    from ledger_gc.orphans.layout import RunPaths

    survey_steps.step_snapshot(resolve(settings), run_id, spark)
    survey_steps.step_scan(resolve(settings), run_id, spark)
    return RunPaths(settings.state_dir, run_id)


def test_a_registered_s3_target_takes_the_full_survey(no_buckets: Settings, spark: Any) -> None:
    """Its facts come from the snapshot (why it is no orphan any more)."""
    entry = RegistryEntry(
        prefix="ledgers/public/default/persistent/a/",
        target_class="orphan-partition",
        ml_name="public/default/persistent/a",
        ledger_id=None,
        first_seen_ms=1,
        last_seen_ms=1,
        first_scan=1,
        last_scan=1,
        scans_seen=1,
        objects=1,
        bytes=1,
        newest_ms=1,
    )
    with OrphanRegistry(no_buckets).transaction() as txn:
        txn.upsert(entry)
    assert not survey_steps.nothing_to_scan(request(no_buckets, spark, "with-entry"))
