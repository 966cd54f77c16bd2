"""BookKeeper ledgers judged by the right Pulsar record (real ZooKeeper).

Each test plants a Pulsar cluster's metadata as its brokers write it (``pulsar_cluster``)
where a name is easy to misread: a partitioned or non-persistent topic's schema (kept
under a name that has no managed ledger), a v1 namespace called ``persistent``, a cursor
switching from its znode (``cursorsLedgerId`` -1) to its first cursor ledger. Beside each,
a real leak that must still go.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.config.edge import resolve, zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.rules.bookkeeper import classify as bk
from pulsar_cluster import PulsarCluster, cursor_tags, ml_tags, schema_tags

pytestmark = pytest.mark.spark

NS = "public/default"
DAY_H = 24.0


@pytest.fixture
def pulsar(settings: Settings) -> Settings:
    return settings.with_overrides(
        bucket="",
        delete_enabled=True,
        grace_seconds=int(DAY_H * 3600),
        retention_seconds=0,
        orphan_max_fraction=1.0,
    )


@pytest.fixture
def cluster(zk_client: KazooClient) -> PulsarCluster:
    return PulsarCluster(zk_client).init()


def exists(c: PulsarCluster, ledger_id: int) -> bool:
    return c.client.exists(c.path(ledger_id)) is not None


def registered(settings: Settings) -> dict[int, str]:
    return {
        e.ledger_id: e.target_class
        for e in OrphanRegistry(settings).entries().values()
        if e.ledger_id is not None
    }


def test_a_schema_without_a_managed_ledger_that_gains_a_version_is_not_another_clusters(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """A partitioned topic's schema is kept under its base name (``TopicName.
    getSchemaName``), which has no managed ledger; a non-persistent topic's has none
    either. Their schema locators exist, so a new version is this cluster's own write,
    not "a gone topic that still grows": the leaked schema ledgers beside them go."""
    c = cluster
    c.namespace(NS)
    partitions = c.partitioned_topic(NS, "orders", 2)
    orders_schema, events_schema = f"{NS}/orders", f"{NS}/np-events"
    # A schema write whose locator update lost a race leaves its ledger behind
    # (BookkeeperSchemaStorage retries with a new ledger).
    leaked = c.ledger(schema_tags(orders_schema))
    v0 = c.ledger(schema_tags(orders_schema))
    np_leaked = c.ledger(schema_tags(events_schema))
    np_v0 = c.ledger(schema_tags(events_schema))
    c.schema(orders_schema, [(0, v0)])
    c.schema(events_schema, [(0, np_v0)])
    data = {name: [c.ledger(ml_tags(name))] for name in partitions}
    for name, ids in data.items():
        c.managed_ledger(name, ids)
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    assert registered(pulsar) == {
        leaked: bk.BK_ORPHAN_SCHEMA_LEDGER,
        np_leaked: bk.BK_ORPHAN_SCHEMA_LEDGER,
    }

    # Both schemas gain a version; the partitions roll over after it.
    v1 = c.ledger(schema_tags(orders_schema))
    c.schema(orders_schema, [(0, v0), (1, v1)])
    np_v1 = c.ledger(schema_tags(events_schema))
    c.schema(events_schema, [(0, np_v0), (1, np_v1)])
    for name, ids in data.items():
        ids.append(c.ledger(ml_tags(name)))
        c.managed_ledger(name, ids)

    report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
    assert report["bookkeeper"]["live_elsewhere"] == {}, report["bookkeeper"]["live_elsewhere"]
    assert {d["ledger_id"] for d in report["deleted"]} == {leaked, np_leaked}
    assert not exists(c, leaked) and not exists(c, np_leaked)
    for lid in (v0, v1, np_v0, np_v1):
        assert exists(c, lid)


def test_a_gone_topics_schema_that_gains_a_version_is_still_held(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """The rule stays for what it is for: a schema this metadata has no locator for, of a
    topic it has no managed ledger for, that gains a ledger is someone's live schema."""
    c = cluster
    c.namespace(NS)
    theirs = f"{NS}/theirs"
    first = c.ledger(schema_tags(theirs))
    ours = [c.ledger(ml_tags(f"{NS}/persistent/ours"))]
    c.managed_ledger(f"{NS}/persistent/ours", ours)
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    assert registered(pulsar) == {first: bk.BK_ORPHAN_SCHEMA_LEDGER}
    second = c.ledger(schema_tags(theirs))
    ours.append(c.ledger(ml_tags(f"{NS}/persistent/ours")))
    c.managed_ledger(f"{NS}/persistent/ours", ours)
    report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
    assert report["deleted"] == []
    assert f"{NS}/persistent/theirs" in report["bookkeeper"]["live_elsewhere"]
    assert exists(c, first) and exists(c, second)


V1_NS = "acme/us-west/persistent"  # property acme, cluster us-west, namespace "persistent"
V1_TOPIC = f"{V1_NS}/persistent/clicks"


def test_a_v1_namespace_named_persistent_is_read_by_its_levels(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """``acme/us-west/persistent/persistent/clicks`` is property/cluster/namespace, then
    the domain, then the topic. Read as tenant/namespace/domain/topic it made a managed
    ledger of the namespace's node and cursors of its topics, and every cycle exited 2.
    v1 topics' ledgers are never judged gone; v2 ledgers beside them still are."""
    c = cluster
    c.namespace(NS)
    c.namespace(V1_NS)
    v1_ledgers = [c.ledger(ml_tags(V1_TOPIC)) for _ in range(2)]
    v1_cursor = c.ledger(cursor_tags(V1_TOPIC, "sub"))
    v1_unlisted = c.ledger(ml_tags(V1_TOPIC))  # v1 names are not judged: never deleted
    # A v2-named ledger under acme/us-west, which is a v1 cluster here, not a namespace.
    not_ours = c.ledger(ml_tags("acme/us-west/persistent/x"))
    leaked = c.ledger(ml_tags(f"{NS}/persistent/orders"))
    orders = [c.ledger(ml_tags(f"{NS}/persistent/orders")) for _ in range(2)]
    c.managed_ledger(V1_TOPIC, v1_ledgers)
    c.cursor(V1_TOPIC, "sub", v1_cursor)
    c.managed_ledger(f"{NS}/persistent/orders", orders)

    with MetadataStore.open(zk_endpoint(pulsar)) as store:
        assert store.list_managed_ledgers() == [f"{NS}/persistent/orders"]
        assert store.list_managed_ledgers(include_v1=True) == [V1_TOPIC, f"{NS}/persistent/orders"]
    first = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0)).to_dict()
    assert registered(pulsar) == {leaked: bk.BK_ORPHAN_LEDGER}
    survey = first["bookkeeper"]
    assert survey["managed_ledgers"] == 2
    held = {s["ledger_id"]: s["hold"] for s in survey["samples"]["bk-held"]}
    assert held == {not_ours: bk.HOLD_OTHER_CLUSTER}
    foreign = {s["ledger_id"] for s in survey["samples"]["bk-foreign"]}
    assert foreign == {v1_unlisted}
    report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
    assert {d["ledger_id"] for d in report["deleted"]} == {leaked}
    for lid in (*v1_ledgers, v1_cursor, v1_unlisted, not_ours, *orders):
        assert exists(c, lid)


def test_a_cursors_first_ledger_while_it_still_says_minus_one_is_held(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """A cursor whose position is in its znode (-1, as a close leaves it) creates its
    first cursor ledger and only then writes its id: in between, the new ledger is a
    switch in flight. A cursor ledger the close left behind (its delete failed) is older
    than the managed ledger's current ledger, which the reopened topic created: it goes."""
    c = cluster
    c.namespace(NS)
    topic, other = f"{NS}/persistent/orders", f"{NS}/persistent/other"
    ids = [c.ledger(ml_tags(topic))]
    left_by_close = c.ledger(cursor_tags(topic, "sub"))
    ids.append(c.ledger(ml_tags(topic)))  # the reopened topic's current ledger
    c.managed_ledger(topic, ids)
    c.cursor(topic, "sub", -1)
    first_ledger = c.ledger(cursor_tags(topic, "sub"))  # the cursor's switch, in flight
    newer = c.ledger(ml_tags(other))  # another topic's ledger: ids moved on
    c.managed_ledger(other, [newer])

    first = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0)).to_dict()
    assert registered(pulsar) == {left_by_close: bk.BK_ORPHAN_CURSOR_LEDGER}
    held = {s["ledger_id"]: s["hold"] for s in first["bookkeeper"]["samples"]["bk-held"]}
    assert held == {first_ledger: bk.HOLD_CURSOR_SWITCH}
    report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
    assert {d["ledger_id"] for d in report["deleted"]} == {left_by_close}
    assert exists(c, first_ledger)


POLICIES = json.dumps({"bundles": {"numBundles": 4}, "replication_clusters": ["us-east"]})


def plant_policies(client: KazooClient, name: str, data: str = POLICIES) -> None:
    """A namespace's (or tenant's) JSON under ``/admin/policies``, as Pulsar writes it;
    the parents Pulsar creates on the way hold nothing."""
    client.create(f"/admin/policies/{name}", data.encode(), makepath=True)


def test_a_v2_namespace_named_like_a_v1_cluster_is_a_namespace_too(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """``/admin/policies/acme/us-east`` holds Policies JSON and has the v1 namespace
    ``legacy`` below it: ``/managed-ledgers/acme/us-east`` holds the v2 namespace's
    topics under ``persistent`` and the v1 namespace ``legacy`` beside it. Read as a v1
    cluster alone, the v2 topics were never listed, and every ledger of them, live or
    leaked, was held as another cluster's namespace. Now its leaked ledger is an orphan
    and goes; its live ledgers, and the v1 namespace's, stay."""
    c = cluster
    plant_policies(c.client, "acme", json.dumps({"allowedClusters": ["us-east"]}))
    plant_policies(c.client, "acme/us-east")
    plant_policies(c.client, "acme/us-east/legacy")
    v2_topic, v1_topic = "acme/us-east/persistent/orders", "acme/us-east/legacy/persistent/clicks"
    leaked = c.ledger(ml_tags(v2_topic))
    orders = [c.ledger(ml_tags(v2_topic)) for _ in range(2)]
    cursor = c.ledger(cursor_tags(v2_topic, "sub"))
    v1_ledgers = [c.ledger(ml_tags(v1_topic)) for _ in range(2)]
    c.managed_ledger(v2_topic, orders)
    c.cursor(v2_topic, "sub", cursor)
    c.managed_ledger(v1_topic, v1_ledgers)

    with MetadataStore.open(zk_endpoint(pulsar)) as store:
        tree = store.managed_ledger_tree()
    assert tree.names == (v1_topic, v2_topic)
    assert tree.namespaces == {"acme/us-east", "acme/us-east/legacy"}
    first = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0)).to_dict()
    assert first["bookkeeper"]["samples"].get("bk-held", []) == []
    assert registered(pulsar) == {leaked: bk.BK_ORPHAN_LEDGER}
    report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
    assert {d["ledger_id"] for d in report["deleted"]} == {leaked}
    assert not exists(c, leaked)
    for lid in (*orders, cursor, *v1_ledgers):
        assert exists(c, lid)
