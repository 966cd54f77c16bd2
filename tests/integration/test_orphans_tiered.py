"""Pulsar's tiered storage in the orphan cycle, against real ZooKeeper and SeaweedFS.

Every test tries to make the cycle delete an offloaded segment that is live, or a key of
the offload bucket that is not a segment, and shows it does not; and that a segment no
ledger carries (a deleted topic's, a failed offload's previous uuid) is found and, with
deletion on, deleted with both its objects, audited ahead.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient
from pulsar_records import Ledger, offload, put_segment, record, write_data, write_record

from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import resolve, zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.formats.markers import encode_marker_value, java_uuid, marker_key
from ledger_gc.formats.records import decode_managed_ledger_info
from ledger_gc.orphans import cycle, survey_steps
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.proto.mldataformats_pb2 import ManagedLedgerInfo
from ledger_gc.rules.metadata import paths

pytestmark = pytest.mark.spark

A = "acme/prod/persistent/orders"
GONE = "acme/prod/persistent/deleted-topic"
PREFIX = "tiered"


def _uuid(n: int) -> tuple[int, int, str]:
    msb, lsb = 0x1000 + n, -(0x2000 + n)
    return msb, lsb, java_uuid(msb, lsb)


def bucket_keys(s3_client: Any, bucket: str) -> set[str]:
    pages = s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return {o["Key"] for page in pages for o in page.get("Contents", [])}


@pytest.fixture
def tiered(settings: Settings, s3_client: Any) -> Settings:
    bucket = f"{settings.bucket}-offload"
    s3_client.create_bucket(Bucket=bucket)
    return settings.with_overrides(offload_bucket=bucket, offload_prefix=PREFIX)


@pytest.fixture
def eager(tiered: Settings) -> Settings:
    """Deletion on, no grace, no retention, no byte-fraction limit: nothing but the
    classification and the live re-check stands between a live segment and its delete."""
    return tiered.with_overrides(
        delete_enabled=True, grace_seconds=0, retention_seconds=0, orphan_max_fraction=1.0
    )


def offloaded_store(zk: KazooClient, s3_client: Any, settings: Settings) -> dict[str, Any]:
    """Managed ledger A and the offload bucket as a Pulsar cluster leaves them:

    * 1: offloaded, complete, BookKeeper copy deleted (live);
    * 2: offloaded, complete, still on BookKeeper (live);
    * 3: offload in progress (uuid written, complete = false), only its data uploaded (live);
    * 4: re-offloaded: listed under uuid 4b, the failed attempt 4a left only its data object;
    * 5: re-offloaded: listed under 5b, the failed attempt 5a left only its index object;
    * 6: marked deletable by the trim, its marker names uuid 6 (live: the trim owns it);
    * 7, 8: a deleted topic's offloaded ledgers (orphans);
    * 20: A's current ledger, never offloaded;

    beside the streaming offloader's objects and other data sharing the bucket (foreign).
    """
    bucket = settings.offload_bucket
    info = record([Ledger(i) for i in (1, 2, 3, 4, 5, 20)])
    by_id = {li.ledgerId: li for li in info.ledgerInfo}
    u = {n: _uuid(n) for n in (1, 2, 3, 40, 41, 50, 51, 6, 7, 8, 99)}
    offload(by_id[1], *u[1][:2], bookkeeper_deleted=True, bucket=bucket)
    offload(by_id[2], *u[2][:2], bookkeeper_deleted=False, bucket=bucket)
    offload(by_id[3], *u[3][:2], complete=False, bucket=bucket)
    offload(by_id[4], *u[41][:2], bucket=bucket)
    offload(by_id[5], *u[51][:2], bucket=bucket)
    marker = encode_marker_value(10, 2, 1, 1)
    value = {
        **json.loads(marker),
        "offloadUuid": u[6][2],
        "offloadComplete": True,
        "offloadDriverName": "aws-s3",
        "offloadDriverMetadata": {"bucket": bucket},
    }
    info.properties.add(key=marker_key(6), value=json.dumps(value))
    write_record(zk, A, info)
    write_data_for = [Ledger(i) for i in (2, 3, 4, 5, 20)]
    live = []
    live += put_segment(s3_client, bucket, PREFIX, u[1][2], 1, ml_name=A)
    live += put_segment(s3_client, bucket, PREFIX, u[2][2], 2, ml_name=A)
    live += put_segment(s3_client, bucket, PREFIX, u[3][2], 3, ml_name=A, index=False)
    live += put_segment(s3_client, bucket, PREFIX, u[41][2], 4, ml_name=A)
    live += put_segment(s3_client, bucket, PREFIX, u[51][2], 5, ml_name=A)
    live += put_segment(s3_client, bucket, PREFIX, u[6][2], 6, ml_name=A)
    orphans = {
        "stale-data": put_segment(s3_client, bucket, PREFIX, u[40][2], 4, ml_name=A, index=False),
        "stale-index": put_segment(s3_client, bucket, PREFIX, u[50][2], 5, ml_name=A, data=False),
        "gone-7": put_segment(s3_client, bucket, PREFIX, u[7][2], 7, ml_name=GONE),
        "gone-8": put_segment(s3_client, bucket, PREFIX, u[8][2], 8),  # no metadata at all
    }
    foreign = [
        f"{PREFIX}/{u[99][2]}",
        f"{PREFIX}/{u[99][2]}-index",  # streaming offloader
        f"{PREFIX}/{u[1][2]}-ledger-1.tmp",
        f"{PREFIX}/{u[1][2].upper()}-ledger-1",
        f"{PREFIX}/{u[1][2]}-ledger-01",
        f"{PREFIX}/notes.txt",
        "elsewhere/x",
        f"{u[7][2]}-ledger-7",
    ]  # a segment key, but outside the offload prefix
    for key in foreign:
        s3_client.put_object(Bucket=bucket, Key=key, Body=b"someone else's")
    return {
        "uuids": u,
        "live": live,
        "orphans": orphans,
        "foreign": foreign,
        "ledger_data": write_data_for,
    }


def test_each_segment_is_classified_and_only_orphan_segments_are_deleted(
    eager: Settings, zk_client: KazooClient, s3_client: Any, storage: Any, spark: Any
) -> None:
    built = offloaded_store(zk_client, s3_client, eager)
    write_data(storage, A, built["ledger_data"])
    orphan_keys = {k for keys in built["orphans"].values() for k in keys}

    report = run_orphan_cycle(resolve(eager), spark=spark).to_dict()

    assert report["status"] == "ok", report["refusals"]
    classes = report["classes"]
    assert classes["live-segment"]["units"] == 6  # 1, 2, 3 (in progress), 4b, 5b, 6 (marked)
    assert classes["live-segment"]["objects"] == 11  # 3 has no index yet
    assert classes["orphan-segment"]["units"] == 4
    assert classes["orphan-segment"]["objects"] == 6
    assert classes["offload-foreign"]["objects"] == 6  # outside the prefix is not scanned
    by_ledger = {item["ledger_id"]: item for item in report["deleted"]}
    assert set(by_ledger) == {4, 5, 7, 8}
    assert all(item["target_class"] == "orphan-segment" for item in by_ledger.values())
    assert sum(item["objects"] for item in by_ledger.values()) == len(orphan_keys) == 6
    # The stale attempt of ledger 4 is associated with A (it lists 4 under another uuid);
    # a deleted topic's segment with no managed ledger at all.
    assert by_ledger[4]["ml_name"] == A and by_ledger[7]["ml_name"] == ""
    left = bucket_keys(s3_client, eager.offload_bucket)
    assert left == set(built["live"]) | set(built["foreign"])
    tiered = report["tiered"]
    assert tiered["orphan_segments"] == 4 and tiered["deleted"] == 4
    assert tiered["bytes_reclaimed"] == classes["orphan-segment"]["bytes"] > 0
    # Audited ahead: a "deleting" record before each "deleted" one, offload keys named.
    records = AuditLog(eager).read()
    segment_records = [r for r in records if r.get("target_class") == "orphan-segment"]
    assert [r["status"] for r in segment_records].count("deleting") == 4
    assert [r["status"] for r in segment_records].count("deleted") == 4

    again = run_orphan_cycle(resolve(eager), spark=spark).to_dict()
    assert again["deleted"] == [] and again["classes"]["orphan-segment"]["units"] == 0
    assert bucket_keys(s3_client, eager.offload_bucket) == left


def live_store(zk: KazooClient, s3_client: Any, settings: Settings) -> None:
    """A lists ledger 10, offloaded with its two objects, and 20 (current)."""
    info = record([Ledger(10), Ledger(20)])
    msb, lsb, uuid = _uuid(10)
    offload(info.ledgerInfo[0], msb, lsb, bucket=settings.offload_bucket)
    write_record(zk, A, info)
    put_segment(s3_client, settings.offload_bucket, PREFIX, uuid, 10, ml_name=A)


def _relist(
    zk: KazooClient,
    name: str,
    ledger_id: int,
    msb: int,
    lsb: int,
    *,
    bucket: str,
    complete: bool = False,
) -> None:
    """Put ``ledger_id`` into ``name``'s ledger list carrying uuid (msb, lsb): an operator
    restoring it, or an offload starting (uuid written before the upload)."""
    path = paths.managed_ledger_path(name)
    info = ManagedLedgerInfo()
    if zk.exists(path):
        info = decode_managed_ledger_info(zk.get(path)[0], path=path, allow_empty=True)
    kept = [li for li in info.ledgerInfo if li.ledgerId != ledger_id]
    restored = ManagedLedgerInfo.LedgerInfo(ledgerId=ledger_id, entries=2, size=100, timestamp=1)
    offload(restored, msb, lsb, complete=complete, bucket=bucket)  # (its driverMetadata)
    del info.ledgerInfo[:]
    info.ledgerInfo.extend(sorted([*kept, restored], key=lambda li: li.ledgerId))
    write_record(zk, name, info)


def test_a_segment_re_listed_or_whose_offload_starts_in_the_grace_window_is_kept(
    tiered: Settings,
    zk_client: KazooClient,
    s3_client: Any,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
) -> None:
    built = offloaded_store(zk_client, s3_client, tiered)
    enabled = tiered.with_overrides(
        delete_enabled=True, retention_seconds=0, orphan_max_fraction=1.0
    )  # default grace: a day
    first = run_orphan_cycle(resolve(enabled), spark=spark).to_dict()
    assert first["phases"]["new"]["by_class"]["orphan-segment"]["count"] == 4
    u = built["uuids"]
    # An offload of ledger 4 starts again under the old uuid (written before the upload);
    # the deleted topic is re-created and an operator restores ledger 7 into it.
    _relist(zk_client, A, 4, *u[40][:2], bucket=tiered.offload_bucket)
    _relist(zk_client, GONE, 7, *u[7][:2], bucket=tiered.offload_bucket, complete=True)

    second = run_orphan_cycle(resolve(enabled), spark=spark, **later(25)).to_dict()

    corrected = {c["ledger_id"]: c["reason"] for c in second["corrected"]}
    assert set(corrected) == {4, 7}
    assert "carries its offload uuid" in corrected[4] and A in corrected[4]
    assert GONE in corrected[7]
    assert {d["ledger_id"] for d in second["deleted"]} == {5, 8}
    left = bucket_keys(s3_client, tiered.offload_bucket)
    assert set(built["orphans"]["stale-data"]) <= left and set(built["orphans"]["gone-7"]) <= left


@pytest.mark.parametrize("with_metadata", [True, False])
def test_the_live_re_check_keeps_a_segment_re_listed_after_the_scan(
    eager: Settings, zk_client: KazooClient, s3_client: Any, spark: Any, with_metadata: bool
) -> None:
    """Re-listed between the scan and the delete, into a managed ledger the snapshot did
    not associate with it: found through the object's ManagedLedgerName, or, without it,
    by reading every managed ledger."""
    live_store(zk_client, s3_client, eager)
    msb, lsb, uuid = _uuid(7)
    keys = put_segment(
        s3_client, eager.offload_bucket, PREFIX, uuid, 7, ml_name=GONE if with_metadata else None
    )
    run_id = f"recheck-{with_metadata}"
    survey_steps.step_snapshot(resolve(eager), run_id, spark)
    survey_steps.step_scan(resolve(eager), run_id, spark)
    survey_steps.step_diff(resolve(eager), run_id, spark)
    applied = cycle.step_phases(resolve(eager), run_id)
    assert applied.added == 1
    _relist(zk_client, GONE, 7, msb, lsb, bucket=eager.offload_bucket, complete=True)

    result = cycle.step_delete(resolve(eager), run_id)

    [outcome] = result.results
    assert outcome.action == "corrected"
    assert "carries this segment's offload uuid" in outcome.reason
    assert set(keys) <= bucket_keys(s3_client, eager.offload_bucket)
    assert OrphanRegistry(eager).entries() == {}


def test_an_offload_bucket_with_no_live_segment_is_refused(
    eager: Settings, zk_client: KazooClient, s3_client: Any, spark: Any
) -> None:
    """LEDGERGC_OFFLOAD_BUCKET pointing at another cluster's tiered storage: every segment
    looks orphaned, even when they are few beside this store's bytes."""
    write_record(zk_client, A, record([Ledger(10), Ledger(20)]))
    theirs = put_segment(s3_client, eager.offload_bucket, PREFIX, _uuid(3)[2], 3, size=10)

    report = run_orphan_cycle(resolve(eager), spark=spark).to_dict()

    assert report["status"] == "refused"
    [refusal] = report["refusals"]
    assert refusal["guard"] == "no-live-segments"
    assert "LEDGERGC_OFFLOAD_BUCKET" in refusal["reason"]
    assert set(theirs) <= bucket_keys(s3_client, eager.offload_bucket)


@pytest.mark.parametrize("chroot", ["empty", "wrong"])
def test_empty_metadata_or_a_wrong_chroot_beside_a_full_offload_bucket_deletes_nothing(
    tiered: Settings, zk_client: KazooClient, s3_client: Any, spark: Any, chroot: str
) -> None:
    offloaded_store(zk_client, s3_client, tiered)
    before = bucket_keys(s3_client, tiered.offload_bucket)
    hosts = tiered.zk_hosts.partition("/")[0]
    other = f"/wrong-{uuidlib.uuid4().hex[:8]}"
    client = KazooClient(hosts=hosts)
    client.start(timeout=30)
    client.ensure_path(other + ("/managed-ledgers" if chroot == "empty" else ""))
    client.stop()
    client.close()
    wrong = tiered.with_overrides(
        zk_address=hosts + other, delete_enabled=True, grace_seconds=0, retention_seconds=0
    )

    report = run_orphan_cycle(resolve(wrong), spark=spark).to_dict()

    assert report["status"] == "refused"
    guards = {r["guard"]: r["reason"] for r in report["refusals"]}
    assert {"zero-managed-ledgers", "orphan-fraction", "no-live-segments"} <= set(guards)
    assert "offloaded-ledger segment objects" in guards["zero-managed-ledgers"]
    assert report["deleted"] == [] and report["phases"]["new"]["count"] == 0
    assert bucket_keys(s3_client, tiered.offload_bucket) == before


def test_the_byte_fraction_guard_counts_the_offload_bucket(
    tiered: Settings, zk_client: KazooClient, s3_client: Any, storage: Any, spark: Any
) -> None:
    built = offloaded_store(zk_client, s3_client, tiered)
    write_data(storage, A, built["ledger_data"])
    before = bucket_keys(s3_client, tiered.offload_bucket)
    eager = tiered.with_overrides(delete_enabled=True, grace_seconds=0, retention_seconds=0)

    report = run_orphan_cycle(resolve(eager), spark=spark).to_dict()

    assert report["status"] == "refused"
    [refusal] = report["refusals"]
    assert refusal["guard"] == "orphan-fraction"
    all_bytes = report["scan"]["bytes"] + report["tiered"]["bytes"]
    assert report["orphan_bytes"] == report["classes"]["orphan-segment"]["bytes"]
    assert report["orphan_fraction"] == pytest.approx(report["orphan_bytes"] / all_bytes)
    assert bucket_keys(s3_client, tiered.offload_bucket) == before


def test_a_segment_newer_than_the_metadata_is_held_never_registered(
    eager: Settings, zk_client: KazooClient, s3_client: Any, spark: Any
) -> None:
    """Ledger 500 has offloaded objects, but no managed ledger lists anything above 20 and
    the chroot's id counter is at 100: the metadata is older than the data."""
    live_store(zk_client, s3_client, eager)
    for _ in range(100):
        made = zk_client.create("/ledgers/idgen/ID-", b"", sequence=True, makepath=True)
        zk_client.delete(made)
    keys = put_segment(s3_client, eager.offload_bucket, PREFIX, _uuid(5)[2], 500, ml_name=A)

    report = run_orphan_cycle(resolve(eager), spark=spark).to_dict()

    assert report["status"] == "refused"
    assert [r["guard"] for r in report["refusals"]] == ["stale-metadata"]
    [held] = report["held"]
    assert held["target_class"] == "orphan-segment" and held["ledger_id"] == 500
    assert set(keys) <= bucket_keys(s3_client, eager.offload_bucket)


V1 = "acme/us-west/ns1/persistent/clicks"


def test_a_v1_topics_offloaded_segments_are_live(
    eager: Settings, zk_client: KazooClient, s3_client: Any, storage: Any, spark: Any
) -> None:
    """A v1 namespace (``property/cluster/namespace``) stands beside v2 ones: its topic's
    offloaded ledgers are listed in its record like any other, so their segments are
    live, in the scan and in the live re-check alike (DESIGN.md: managed-ledger paths
    are read by the namespaces the metadata has)."""
    bucket = eager.offload_bucket
    info = record([Ledger(i) for i in (30, 31)])
    v1_uuid = _uuid(30)
    offload(info.ledgerInfo[0], *v1_uuid[:2], bookkeeper_deleted=True, bucket=bucket)
    write_record(zk_client, V1, info)
    zk_client.ensure_path(f"/admin/policies/{V1.rsplit('/', 2)[0]}")
    # (Its v2 neighbour's namespace has policies too: a namespace without them, where
    # /admin/policies exists, is a deleted one's leftover to the Pulsar-metadata source.)
    zk_client.ensure_path(f"/admin/policies/{A.rsplit('/', 2)[0]}")
    # As an offloader that names no managed ledger in the object's metadata wrote it:
    # the re-check then reads every managed ledger for its carrier.
    live = put_segment(s3_client, bucket, PREFIX, v1_uuid[2], 30)
    v2 = record([Ledger(39), Ledger(40)])
    offload(v2.ledgerInfo[0], *_uuid(39)[:2], bookkeeper_deleted=True, bucket=bucket)
    write_record(zk_client, A, v2)
    write_data(storage, A, [Ledger(40)])
    live += put_segment(s3_client, bucket, PREFIX, _uuid(39)[2], 39, ml_name=A)
    gone = put_segment(s3_client, bucket, PREFIX, _uuid(35)[2], 35, ml_name=GONE)
    for _ in range(2):
        run_orphan_cycle(resolve(eager), spark=spark)
    keys = bucket_keys(s3_client, bucket)
    assert set(live) <= keys, "a v1 topic's offloaded segment was deleted"
    assert not set(gone) & keys  # the cycle did run and delete a real orphan segment
    # The live re-check, which reads every managed ledger when the segment names none,
    # finds the v1 topic that carries it.
    from ledger_gc.metadata.store import MetadataStore
    from ledger_gc.s3_orphans.deleting import read_segment_carriers

    with MetadataStore.open(zk_endpoint(eager)) as store:
        carriers = read_segment_carriers(store, set(), 30, v1_uuid[2])
        assert carriers == {V1: {f"s3/{bucket}"}}  # with where its offload went
