"""An offload bucket shared with another Pulsar cluster, against real ZooKeeper and
SeaweedFS (geo-replicated clusters commonly share one bucket).

Ledger ids collide across BookKeeper clusters and the other cluster's metadata is not in
our ZooKeeper, so its live ``<uuid>-ledger-<id>`` objects look like orphan segments here.
Pulsar's offloader writes its cluster's name into every offloaded object's user metadata
(``LedgerOffloader.METADATA_PULSAR_CLUSTER_NAME``, "pulsarClusterName"); a segment is
only ever deleted when that name is this store's (``segments.our_clusters``), and the
other cluster's bytes do not count as orphans for the byte-fraction guard.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from pulsar_records import Ledger, offload, put_segment, record, write_data, write_record

from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.formats.markers import java_uuid
from ledger_gc.orphans import cycle, survey_steps
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry

pytestmark = pytest.mark.spark

A = "acme/prod/persistent/orders"  # geo-replicated: the same topic name in both clusters
GONE = "acme/prod/persistent/deleted-topic"
PREFIX = "tiered"
OURS, THEIRS = "us-east", "us-west"


def _uuid(n: int) -> tuple[int, int, str]:
    msb, lsb = 0x1000 + n, -(0x2000 + n)
    return msb, lsb, java_uuid(msb, lsb)


def bucket_keys(s3_client: Any, bucket: str) -> set[str]:
    pages = s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"] for page in pages for o in page.get("Contents", [])}


@pytest.fixture
def shared(settings: Settings, s3_client: Any) -> Settings:
    """Deletion on, no grace, no retention, the default 10 % byte-fraction limit."""
    bucket = f"{settings.bucket}-offload"
    s3_client.create_bucket(Bucket=bucket)
    return settings.with_overrides(
        offload_bucket=bucket,
        offload_prefix=PREFIX,
        delete_enabled=True,
        grace_seconds=0,
        retention_seconds=0,
    )


def two_clusters(
    zk: KazooClient,
    s3_client: Any,
    storage: Any,
    settings: Settings,
    *,
    our_tag: str | None = OURS,
) -> dict[str, list[str]]:
    """Our managed ledger A lists ledgers 10 and 11 (offloaded, tagged ``our_tag``) and
    20; cluster B (tag us-west) has live offloaded ledgers 10, 11 and 3 of its own A in
    the same bucket, much bigger than ours; our orphans are ledger 7 of a deleted topic
    and a failed offload's previous uuid of ledger 10, both tagged us-east."""
    bucket = settings.offload_bucket
    info = record([Ledger(10), Ledger(11), Ledger(20)])
    by_id = {li.ledgerId: li for li in info.ledgerInfo}
    offload(by_id[10], *_uuid(10)[:2], bookkeeper_deleted=True, bucket=bucket)
    offload(by_id[11], *_uuid(11)[:2], bookkeeper_deleted=True, bucket=bucket)
    write_record(zk, A, info)
    write_data(storage, A, [Ledger(20)])
    live = []
    for n in (10, 11):
        live += put_segment(s3_client, bucket, PREFIX, _uuid(n)[2], n, ml_name=A, cluster=our_tag)
    theirs = []
    for n in (10, 11, 3):
        theirs += put_segment(
            s3_client, bucket, PREFIX, _uuid(100 + n)[2], n, ml_name=A, cluster=THEIRS, size=40_000
        )
    orphans = put_segment(
        s3_client, bucket, PREFIX, _uuid(7)[2], 7, ml_name=GONE, cluster=OURS, size=500
    )
    orphans += put_segment(
        s3_client, bucket, PREFIX, _uuid(50)[2], 10, ml_name=A, cluster=OURS, size=500
    )
    return {"live": live, "theirs": theirs, "orphans": orphans}


def test_another_clusters_segments_in_a_shared_bucket_are_held_and_ours_deleted(
    shared: Settings, zk_client: KazooClient, s3_client: Any, storage: Any, spark: Any
) -> None:
    built = two_clusters(zk_client, s3_client, storage, shared)
    # Counted as orphans, B's bytes alone would trip the 10 % byte-fraction guard.
    sizes = {
        o["Key"]: o["Size"]
        for o in s3_client.list_objects_v2(Bucket=shared.offload_bucket)["Contents"]
    }
    assert sum(sizes[k] for k in built["theirs"]) / sum(sizes.values()) > 0.10

    report = run_orphan_cycle(resolve(shared), spark=spark).to_dict()

    assert report["status"] == "ok", report["refusals"]
    assert {(d["ledger_id"], d["target_class"]) for d in report["deleted"]} == {
        (7, "orphan-segment"),
        (10, "orphan-segment"),
    }
    left = bucket_keys(s3_client, shared.offload_bucket)
    assert left == set(built["live"]) | set(built["theirs"])
    classes = report["classes"]
    assert classes["other-cluster-segment"]["units"] == 3
    assert classes["other-cluster-segment"]["bytes"] == sum(sizes[k] for k in built["theirs"])
    assert classes["orphan-segment"]["units"] == 2
    assert report["orphan_bytes"] == classes["orphan-segment"]["bytes"]
    tiered = report["tiered"]
    assert tiered["other_cluster_segments"] == 3
    assert tiered["other_clusters"] == {THEIRS: 3}
    assert tiered["our_clusters"]["names"] == [OURS]
    assert tiered["our_clusters"]["source"] == "learned"
    assert report["phases"]["new"]["count"] == 2  # B's are never registered
    assert any(f"pulsarClusterName={THEIRS}" in item["reason"] for item in tiered["held"])

    again = run_orphan_cycle(resolve(shared), spark=spark).to_dict()
    assert again["status"] == "ok" and again["deleted"] == []
    assert bucket_keys(s3_client, shared.offload_bucket) == left


def test_the_live_re_check_holds_another_clusters_segment_the_diff_could_not_read(
    shared: Settings,
    zk_client: KazooClient,
    s3_client: Any,
    storage: Any,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The decision that must hold is the one just before the delete: when the diff could
    not read the objects' user metadata (a failed HEAD), B's segments are registered as
    orphans, and the re-check reads ``pulsarClusterName`` itself and keeps them."""
    from ledger_gc.s3_orphans import cluster_tags

    built = two_clusters(zk_client, s3_client, storage, shared)
    eager = shared.with_overrides(orphan_max_fraction=1.0)
    real = cluster_tags.read_segment_tags
    monkeypatch.setattr(
        cluster_tags,
        "read_segment_tags",
        lambda offload, keys: {} if len(keys) > 2 else real(offload, keys),
    )
    run_id = "shared-recheck"
    survey_steps.step_snapshot(resolve(eager), run_id, spark)
    survey_steps.step_scan(resolve(eager), run_id, spark)
    survey_steps.step_diff(resolve(eager), run_id, spark)
    monkeypatch.setattr(cluster_tags, "read_segment_tags", real)
    assert cycle.step_phases(resolve(eager), run_id).added == 5

    result = cycle.step_delete(resolve(eager), run_id)
    report = cycle.step_report(resolve(eager), run_id).to_dict()

    actions = {(r.ledger_id, r.action) for r in result.results}
    assert actions == {(7, "deleted"), (10, "deleted"), (10, "held"), (11, "held"), (3, "held")}
    held = [r for r in result.results if r.action == "held"]
    assert all(f"another cluster's segment (pulsarClusterName={THEIRS})" in r.reason for r in held)
    assert set(built["theirs"]) <= bucket_keys(s3_client, eager.offload_bucket)
    assert not set(built["orphans"]) & bucket_keys(s3_client, eager.offload_bucket)
    # Kept registered (the next scan's diff classifies them), counted apart in the report.
    registered = OrphanRegistry(eager).entries()
    assert {e.ledger_id for e in registered.values()} == {10, 11, 3}
    assert report["tiered"]["held_at_recheck"] == 3
    assert report["tiered"]["deleted"] == 2


@pytest.mark.parametrize("setting", [OURS, f"{OURS},(untagged)"])
def test_the_setting_names_our_cluster_when_our_live_segments_carry_no_tag(
    shared: Settings,
    zk_client: KazooClient,
    s3_client: Any,
    storage: Any,
    spark: Any,
    setting: str,
) -> None:
    """Our live segments predate tagging (nothing to learn a name from): B's tagged
    segments stay; our tagged orphans go because the setting names us; an untagged orphan
    goes only when the setting says untagged segments are ours too."""
    built = two_clusters(zk_client, s3_client, storage, shared, our_tag=None)
    untagged = put_segment(s3_client, shared.offload_bucket, PREFIX, _uuid(8)[2], 8, size=500)
    named = shared.with_overrides(
        pulsar_clusters=Settings.from_env({"LEDGERGC_PULSAR_CLUSTER": setting}).pulsar_clusters
    )

    report = run_orphan_cycle(resolve(named), spark=spark).to_dict()

    assert report["status"] == "ok", report["refusals"]
    deleted = {d["ledger_id"] for d in report["deleted"]}
    left = bucket_keys(s3_client, shared.offload_bucket)
    assert set(built["theirs"]) <= left and set(built["live"]) <= left
    assert not set(built["orphans"]) & left
    assert report["tiered"]["our_clusters"]["source"] == "setting"
    if setting == OURS:
        assert deleted == {7, 10}
        assert set(untagged) <= left
        assert report["tiered"]["other_clusters"] == {THEIRS: 3, "(untagged)": 1}
    else:
        assert deleted == {7, 8, 10}
        assert report["tiered"]["other_clusters"] == {THEIRS: 3}


def test_a_bad_pulsar_cluster_setting_is_exit_2_and_one_line(settings: Settings) -> None:
    ledgergc = Path(sys.executable).with_name("ledgergc")
    env = {**os.environ, **settings.to_env(), "LEDGERGC_PULSAR_CLUSTER": "us east,"}
    result = subprocess.run(
        [str(ledgergc), "orphans"], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "LEDGERGC_PULSAR_CLUSTER" in lines[0], result.stderr
