"""A ``bk-offloaded-copy`` goes only while its offloaded copy is there (real ZooKeeper and
S3).

Pulsar marks a ledger offloaded (``complete``, ``bookkeeperDeleted``) and reads it from
tiered storage; the BookKeeper copy is one it meant to delete. But a lifecycle rule, a
wrong bucket or an upload marked complete that never finished leave the BookKeeper copy
as the last one: before it goes, both offloaded objects must be in
``LEDGERGC_OFFLOAD_BUCKET``, the data object of the length the offload wrote (its index
says), else it is held, in the survey's report and at the live re-check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.formats.records import decode_managed_ledger_info, encode_managed_ledger_info
from ledger_gc.orphans import cycle
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.rules.bookkeeper import classify as bk
from pulsar_cluster import PulsarCluster, ml_tags

pytestmark = pytest.mark.spark

NS = "public/default"
TOPIC = f"{NS}/persistent/orders"
DAY_H = 24.0


def exists(c: PulsarCluster, ledger_id: int) -> bool:
    return c.client.exists(c.path(ledger_id)) is not None


def set_driver(c: PulsarCluster, ledger_id: int, *, name: str, bucket: str) -> None:
    """Rewrite one listed ledger's offload driver metadata (where Pulsar says it put it)."""
    path = f"/managed-ledgers/{TOPIC}"
    data, stat = c.client.get(path)
    info = decode_managed_ledger_info(data)
    for ledger in info.ledgerInfo:
        if ledger.ledgerId == ledger_id:
            ledger.offloadContext.driverMetadata.name = name
            del ledger.offloadContext.driverMetadata.properties[:]
            ledger.offloadContext.driverMetadata.properties.add(key="bucket", value=bucket)
    c.client.set(path, encode_managed_ledger_info(info), version=stat.version)


def plant(c: PulsarCluster, s3: Any) -> dict[str, int]:
    """Six ledgers offloaded with bookkeeperDeleted: one whose copy is whole, five whose
    copy is not there to read, then the topic's live ledgers."""
    c.namespace(NS)
    roles = ["whole", "data-gone", "index-gone", "truncated", "other-bucket", "gcs"]
    ids = {role: c.ledger(ml_tags(TOPIC)) for role in roles}
    live = [c.ledger(ml_tags(TOPIC)) for _ in range(2)]
    c.managed_ledger(TOPIC, [*ids.values(), *live], offloaded_deleted=ids.values())
    data_key, _ = c.offload_keys(ids["data-gone"])
    s3.delete_object(Bucket=c.offload_bucket, Key=data_key)  # a lifecycle rule
    _, index_key = c.offload_keys(ids["index-gone"])
    s3.delete_object(Bucket=c.offload_bucket, Key=index_key)  # the upload never finished
    data_key, _ = c.offload_keys(ids["truncated"])
    s3.put_object(Bucket=c.offload_bucket, Key=data_key, Body=b"d" * 100)
    set_driver(c, ids["other-bucket"], name="aws-s3", bucket="another-bucket")
    set_driver(c, ids["gcs"], name="google-cloud-storage", bucket=c.offload_bucket)
    return ids


def test_an_offloaded_copy_goes_only_when_both_objects_of_the_written_size_are_there(
    pulsar: Settings,
    cluster: PulsarCluster,
    s3_client: Any,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
) -> None:
    ids = plant(cluster, s3_client)
    first = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0)).to_dict()
    survey = first["bookkeeper"]
    held = {s["ledger_id"]: s for s in survey["samples"]["bk-held"]}
    unconfirmed = {lid for lid, s in held.items() if s["hold"] == bk.HOLD_OFFLOAD_UNCONFIRMED}
    assert unconfirmed == set(ids.values()) - {ids["whole"]}
    assert "does not exist" in held[ids["data-gone"]]["reason"]
    assert "never finished" in held[ids["index-gone"]]["reason"]
    assert "the offload wrote 4096" in held[ids["truncated"]]["reason"]
    assert "another-bucket" in held[ids["other-bucket"]]["reason"]
    assert "google-cloud-storage (gcs), not to the s3 store" in held[ids["gcs"]]["reason"]
    assert survey["classes"][bk.BK_OFFLOADED_COPY]["ledgers"] == 1
    registered = {e.ledger_id for e in OrphanRegistry(pulsar).entries().values()}
    assert registered == {ids["whole"]}

    second = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
    assert {d["ledger_id"] for d in second["deleted"]} == {ids["whole"]}
    assert not exists(cluster, ids["whole"])
    for role, lid in ids.items():
        assert exists(cluster, lid) == (role != "whole"), role


def test_the_live_recheck_holds_a_copy_whose_objects_went_after_the_scan(
    pulsar: Settings,
    cluster: PulsarCluster,
    s3_client: Any,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
) -> None:
    """The survey saw the copy whole; a lifecycle rule removes its data object before
    the delete: the re-check just before it reads the objects again and holds it."""
    ids = plant(cluster, s3_client)
    whole = ids["whole"]
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    world = later(DAY_H + 1)
    run_id = "bk-offload-recheck"
    cycle.step_survey(resolve(pulsar), run_id, spark, **world)
    cycle.step_phases(resolve(pulsar), run_id, clock=world["clock"])
    data_key, _ = cluster.offload_keys(whole)
    s3_client.delete_object(Bucket=pulsar.offload_bucket, Key=data_key)
    result = cycle.step_delete(resolve(pulsar), run_id, **world)
    [action] = [r for r in result.results if r.ledger_id == whole]
    assert action.action == "held" and "does not exist" in action.reason
    assert exists(cluster, whole)


def test_without_tiered_storage_an_offloaded_copy_is_held_and_says_why(
    pulsar: Settings,
    cluster: PulsarCluster,
    s3_client: Any,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
) -> None:
    ids = plant(cluster, s3_client)
    off = pulsar.with_overrides(offload_bucket="")
    first = run_orphan_cycle(resolve(off), spark=spark, **later(0)).to_dict()
    held = {s["ledger_id"]: s for s in first["bookkeeper"]["samples"]["bk-held"]}
    assert held[ids["whole"]]["hold"] == bk.HOLD_OFFLOAD_UNCONFIRMED
    assert "LEDGERGC_OFFLOAD_BUCKET is empty" in held[ids["whole"]]["reason"]
    second = run_orphan_cycle(resolve(off), spark=spark, **later(DAY_H + 1)).to_dict()
    assert second["deleted"] == []
    assert all(exists(cluster, lid) for lid in ids.values())
