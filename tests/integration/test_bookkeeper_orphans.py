"""BookKeeper orphan ledgers in the orphan cycle, against a real ZooKeeper.

A small Pulsar cluster is written as its brokers and bookies write it
(``include/pulsar_cluster.py``), with every leak DESIGN.md's BookKeeper classes name, and
beside each leak the live ledger it could be mistaken for. The cycle runs with the S3
block store off (``LEDGERGC_BUCKET=""``), as against a real Pulsar cluster. Every test
tries to make it remove a znode it must not, and shows that it does not.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans import cycle
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.rules.bookkeeper import classify as bk
from pulsar_cluster import (
    PulsarCluster,
    bucket_tags,
    compacted_tags,
    cursor_tags,
    ledger_record,
    ml_tags,
    schema_tags,
)

pytestmark = pytest.mark.spark

NS = "public/default"
ORDERS = f"{NS}/persistent/orders"
GONE = f"{NS}/persistent/deleted-topic"
COMPACTED = f"{NS}/persistent/compacted"
GONE_COMPACTED = f"{NS}/persistent/deleted-compacted"
OTHER_CLUSTER = "other-tenant/ns/persistent/topic"
DAY_H = 24.0


@dataclass
class Planted:
    """What the cluster fixture wrote: ledger ids by role."""

    live: dict[str, int] = field(default_factory=dict)
    orphans: dict[str, int] = field(default_factory=dict)  # role -> id (class in EXPECTED)
    kept: dict[str, int] = field(default_factory=dict)  # never deleted


EXPECTED = {
    "leaked-ledger": bk.BK_ORPHAN_LEDGER,
    "deleted-topic-ledger": bk.BK_ORPHAN_PARTITION,
    "deleted-topic-cursor-ledger": bk.BK_ORPHAN_CURSOR_LEDGER,
    "old-cursor-ledger": bk.BK_ORPHAN_CURSOR_LEDGER,
    "old-schema-ledger": bk.BK_ORPHAN_SCHEMA_LEDGER,
    "deleted-topic-compacted": bk.BK_ORPHAN_COMPACTED_LEDGER,
    "offloaded-copy": bk.BK_OFFLOADED_COPY,
}


def plant(c: PulsarCluster) -> Planted:
    """Every leak class beside the live ledgers it could be mistaken for."""
    p = Planted()
    c.namespace(NS)
    offloaded = c.ledger(ml_tags(ORDERS))
    first = c.ledger(ml_tags(ORDERS), fmt=2)  # a v2 record, as BookKeeper < 4.9 wrote it
    leaked = c.ledger(ml_tags(ORDERS))  # a ledger the list dropped (trim delete failed)
    old_cursor = c.ledger(cursor_tags(ORDERS, "sub"))
    cursor_now = c.ledger(cursor_tags(ORDERS, "sub"), closed=False)
    old_schema = c.ledger(schema_tags(f"{NS}/orders"))
    schema_now = c.ledger(schema_tags(f"{NS}/orders"))
    bucket = c.ledger(bucket_tags(ORDERS, "sub"))
    gone_ledger = c.ledger(ml_tags(GONE))
    gone_cursor = c.ledger(cursor_tags(GONE, "sub"))
    gone_compacted = c.ledger(compacted_tags(GONE_COMPACTED))
    compacted_old = c.ledger(compacted_tags(COMPACTED))
    compacted_now = c.ledger(compacted_tags(COMPACTED))
    compacted_topic = c.ledger(ml_tags(COMPACTED))
    untagged = c.ledger({})
    other_app = c.ledger({"application": b"kafka-tiering"})
    other_cluster = c.ledger(ml_tags(OTHER_CLUSTER))
    current = c.ledger(ml_tags(ORDERS), closed=False)
    c.managed_ledger(ORDERS, [offloaded, first, current], offloaded_deleted=[offloaded])
    c.cursor(
        ORDERS,
        "sub",
        cursor_now,
        cursor_properties={f"#pulsar.internal.delayed.bucket_{first}_{current}": str(bucket)},
    )
    c.schema(f"{NS}/orders", [(0, schema_now)])
    c.managed_ledger(COMPACTED, [compacted_topic])
    c.cursor(COMPACTED, "__compaction", -1, properties={"CompactedTopicLedger": compacted_now})
    in_flight = c.ledger(ml_tags(ORDERS), closed=False)  # a rollover under way
    p.live = {
        "first": first,
        "current": current,
        "cursor": cursor_now,
        "schema": schema_now,
        "compacted": compacted_now,
        "compacted-topic": compacted_topic,
        "bucket": bucket,
    }
    p.orphans = {
        "leaked-ledger": leaked,
        "deleted-topic-ledger": gone_ledger,
        "deleted-topic-cursor-ledger": gone_cursor,
        "old-cursor-ledger": old_cursor,
        "old-schema-ledger": old_schema,
        "deleted-topic-compacted": gone_compacted,
        "offloaded-copy": offloaded,
    }
    p.kept = {
        "untagged": untagged,
        "other-application": other_app,
        "other-cluster": other_cluster,
        "live-topic-old-compacted": compacted_old,
        "rollover-in-flight": in_flight,
    }
    return p


def exists(c: PulsarCluster, ledger_id: int) -> bool:
    return c.client.exists(c.path(ledger_id)) is not None


def test_every_class_is_found_registered_and_deleted_after_grace_and_nothing_else(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    planted = plant(cluster)
    first = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    survey = first.to_dict()["bookkeeper"]
    assert survey["layout"] == "hierarchical"
    registered = OrphanRegistry(pulsar).entries()
    by_id = {e.ledger_id: e for e in registered.values()}
    assert {lid: by_id[lid].target_class for lid in planted.orphans.values()} == {
        planted.orphans[role]: cls for role, cls in EXPECTED.items()
    }
    assert set(by_id) == set(planted.orphans.values())
    held = {s["ledger_id"]: s["hold"] for s in survey["samples"]["bk-held"]}
    assert held[planted.kept["other-cluster"]] == bk.HOLD_OTHER_CLUSTER
    assert held[planted.kept["live-topic-old-compacted"]] == bk.HOLD_LIVE_COMPACTED
    assert held[planted.kept["rollover-in-flight"]] == bk.HOLD_NEWER
    foreign = {s["ledger_id"] for s in survey["samples"]["bk-foreign"]}
    assert {planted.kept["untagged"], planted.kept["other-application"]} <= foreign
    assert first.to_dict()["deleted"] == []  # the scan that registers never deletes

    second = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1))
    deleted = {d["ledger_id"] for d in second.to_dict()["deleted"]}
    assert deleted == set(planted.orphans.values())
    for lid in planted.orphans.values():
        assert not exists(cluster, lid)
    for lid in (*planted.live.values(), *planted.kept.values()):
        assert exists(cluster, lid), lid
    # Never a parent: the leaves' directories are all still there.
    for lid in planted.orphans.values():
        assert cluster.client.exists(cluster.path(lid).rsplit("/", 1)[0])
    # Audited ahead with the record's bytes: restorable until the bookies' GC.
    records = AuditLog(pulsar).read(run_id=second.run_id)
    ahead = [r for r in records if r["status"] == "deleting"]
    assert {r["ledger_id"] for r in ahead} == deleted
    offloaded = planted.orphans["offloaded-copy"]
    raw = base64.b64decode(next(r for r in ahead if r["ledger_id"] == offloaded)["record_base64"])
    assert raw == ledger_record(ml_tags(ORDERS))
    assert second.to_dict()["bytes_reclaimed"] == 1024 * len(planted.orphans)


def test_a_ledger_referenced_again_during_the_grace_window_is_not_deleted(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    planted = plant(cluster)
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    leaked = planted.orphans["leaked-ledger"]
    old_cursor = planted.orphans["old-cursor-ledger"]
    old_schema = planted.orphans["old-schema-ledger"]
    # The broker lists the ledger again, the cursor switches back, the schema index names it.
    cluster.managed_ledger(
        ORDERS,
        [planted.orphans["offloaded-copy"], planted.live["first"], leaked, planted.live["current"]],
        offloaded_deleted=[planted.orphans["offloaded-copy"]],
    )
    cluster.cursor(ORDERS, "sub", old_cursor)
    cluster.schema(f"{NS}/orders", [(0, old_schema), (1, planted.live["schema"])])
    report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
    for lid in (leaked, old_cursor, old_schema):
        assert exists(cluster, lid)
    deleted = {d["ledger_id"] for d in report["deleted"]}
    assert not deleted & {leaked, old_cursor, old_schema}
    corrected = {c["ledger_id"] for c in report["corrected"]}
    assert {leaked, old_cursor, old_schema} <= corrected


def test_the_live_recheck_keeps_a_ledger_referenced_after_the_last_scan(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    planted = plant(cluster)
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    world = later(DAY_H + 1)
    run_id = "bk-recheck"
    cycle.step_survey(resolve(pulsar), run_id, spark, **world)
    cycle.step_phases(resolve(pulsar), run_id, clock=world["clock"])
    # Between the scan and the delete: the deleted topic is re-created with its ledger,
    # and the leaked ledger is listed again.
    leaked = planted.orphans["leaked-ledger"]
    gone = planted.orphans["deleted-topic-ledger"]
    cluster.managed_ledger(GONE, [gone])
    cluster.managed_ledger(
        ORDERS,
        [planted.orphans["offloaded-copy"], planted.live["first"], leaked, planted.live["current"]],
        offloaded_deleted=[planted.orphans["offloaded-copy"]],
    )
    result = cycle.step_delete(resolve(pulsar), run_id, **world)
    actions = {r.ledger_id: r.action for r in result.results}
    assert actions[leaked] == "corrected"
    assert actions[gone] == "corrected"
    assert exists(cluster, leaked) and exists(cluster, gone)


def test_a_record_written_between_the_recheck_and_the_delete_is_not_deleted(
    pulsar: Settings,
    cluster: PulsarCluster,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The delete goes at the version the re-check read: BookKeeper rewriting the record
    meanwhile (a recovery, a close) makes it delete nothing."""
    from ledger_gc.bookkeeper import references

    planted = plant(cluster)
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    leaked = planted.orphans["leaked-ledger"]
    real = references.read_live_references

    def and_rewrite(
        store: Any, ml_name: str | None, schema_id: str | None, policies: Any = None
    ) -> Any:
        refs = real(store, ml_name, schema_id, policies=policies)
        if ml_name == ORDERS:
            cluster.close(leaked, length=2048)
        return refs

    monkeypatch.setattr(references, "read_live_references", and_rewrite)
    report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
    assert exists(cluster, leaked)
    assert leaked not in {d["ledger_id"] for d in report["deleted"]}


def test_dry_run_and_deletion_off_remove_nothing(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    planted = plant(cluster)
    off = pulsar.with_overrides(delete_enabled=False)
    run_orphan_cycle(resolve(off), spark=spark, **later(0))
    report = run_orphan_cycle(resolve(off), spark=spark, **later(DAY_H + 1)).to_dict()
    assert {w["ledger_id"] for w in report["would_delete"]} == set(planted.orphans.values())
    assert all(exists(cluster, lid) for lid in planted.orphans.values())


def test_a_declared_shared_bookkeeper_deletes_only_what_this_metadata_names_by_id(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    planted = plant(cluster)
    shared = pulsar.with_overrides(bk_shared=True)
    run_orphan_cycle(resolve(shared), spark=spark, **later(0))
    report = run_orphan_cycle(resolve(shared), spark=spark, **later(DAY_H + 1)).to_dict()
    assert {d["ledger_id"] for d in report["deleted"]} == {planted.orphans["offloaded-copy"]}
    for role, lid in planted.orphans.items():
        assert exists(cluster, lid) == (role != "offloaded-copy")


def test_restore_puts_back_exactly_the_records_a_run_deleted(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    from ledger_gc.restore.restoring import restore_run

    planted = plant(cluster)
    before = {lid: cluster.client.get(cluster.path(lid))[0] for lid in planted.orphans.values()}
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    run = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).run_id
    assert not any(exists(cluster, lid) for lid in before)

    dry = restore_run(resolve(pulsar), run, dry_run=True).to_dict()
    assert dry["errors"] == 0 and not any(exists(cluster, lid) for lid in before)
    done = restore_run(resolve(pulsar), run).to_dict()
    assert done["objects_restored"] == len(before) and done["errors"] == 0
    assert "gcWaitTime" in done["note"]
    after = {lid: cluster.client.get(cluster.path(lid))[0] for lid in before}
    assert after == before
    statuses = [r["status"] for r in AuditLog(pulsar).read(run_id=done["run_id"])]
    assert statuses.count("restoring") == statuses.count("restored") == len(before)
    # Run again: each znode already holds its audited record, so it is restored already
    # (never replaced, nothing audited again, not an error).
    again = restore_run(resolve(pulsar), run).to_dict()
    assert again["objects_restored"] == 0 and again["errors"] == 0
    assert again["already_restored"] == len(before)
