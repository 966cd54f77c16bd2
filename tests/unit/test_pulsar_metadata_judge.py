"""Judging what Pulsar's metadata leaves behind (pure): each namespace and tenant of the
local store against the configuration store's facts, and which znodes of a leftover are
records (DESIGN.md "Pulsar's own metadata")."""

from __future__ import annotations

import json

import pytest

from ledger_gc.rules.pulsar_metadata import judge, roots
from ledger_gc.rules.pulsar_metadata.classes import (
    CONFIG,
    LOCAL,
    PARENT,
    PM_DEAD_BROKER,
    PM_DELETED_NAMESPACE,
    PM_DELETED_TENANT,
    PM_NOT_REPLICATED_HERE,
    PM_STUCK_DELETE,
    RECORD,
    Znode,
)
from ledger_gc.rules.pulsar_metadata.judge import Facts, PolicyFacts

HOUR = 3_600_000
NOW = 1_000 * HOUR


def facts(
    tenants: tuple[str, ...] = ("acme",),
    policies: dict[str, PolicyFacts] | None = None,
    brokers: tuple[str, ...] = (),
    clusters: tuple[str, ...] = (),
) -> Facts:
    return Facts(
        tenants=frozenset(tenants),
        policies=policies or {},
        brokers=frozenset(brokers),
        now_ms=NOW,
        grace_ms=24 * HOUR,
        our_clusters=clusters,
    )


def policies(**fields: object) -> bytes:
    return json.dumps({"bundles": {"numBundles": 4}, **fields}).encode()


def test_a_namespace_whose_policies_exist_is_live() -> None:
    found = judge.judge_namespace("acme/orders", facts(policies={"acme/orders": PolicyFacts()}))
    assert found.target_class is None
    assert found.reports == ()


def test_a_namespace_without_policies_of_a_live_tenant_is_a_deleted_namespace() -> None:
    found = judge.judge_namespace("acme/orders", facts())
    assert found.target_class == PM_DELETED_NAMESPACE
    assert "tenant acme exists" in found.why


def test_a_namespace_of_a_deleted_tenant_is_a_deleted_tenant() -> None:
    assert judge.judge_namespace("gone/orders", facts()).target_class == PM_DELETED_TENANT
    v1 = judge.judge_namespace("gone/us-east/orders", facts())
    assert v1.target_class == PM_DELETED_TENANT


def test_v1_names_are_judged_by_their_own_policies() -> None:
    known = facts(policies={"acme/us-east/orders": PolicyFacts()})
    assert judge.judge_namespace("acme/us-east/orders", known).target_class is None
    assert judge.judge_namespace("acme/us-east/billing", known).target_class == (
        PM_DELETED_NAMESPACE
    )
    # A v1 topic's schema is keyed without its cluster: /schemas/acme/orders.
    assert judge.judge_namespace("acme/orders", known).target_class is None


def test_a_namespace_named_persistent() -> None:
    known = facts(policies={"acme/persistent": PolicyFacts()})
    assert judge.judge_namespace("acme/persistent", known).target_class is None
    assert judge.judge_namespace("acme/us-west/persistent", known).target_class == (
        PM_DELETED_NAMESPACE
    )


@pytest.mark.parametrize(
    ("name", "broker"),
    [
        ("pulsar/standalone/broker-1:8080", "broker-1:8080"),
        ("pulsar/broker-1:8080", "broker-1:8080"),
        ("sla-monitor/standalone/10.0.0.7:8080", "10.0.0.7:8080"),
        ("pulsar/system", None),
        ("pulsar/standalone/system", None),
        ("acme/broker-1:8080", None),
        ("sla-monitor/broker-1:8080", None),
    ],
)
def test_heartbeat_names(name: str, broker: str | None) -> None:
    assert judge.heartbeat_broker(name) == broker


def test_a_dead_brokers_heartbeat_and_a_live_ones() -> None:
    live = facts(tenants=(), brokers=("broker-1:8080",))
    for name in ("pulsar/standalone/broker-1:8080", "pulsar/broker-1:8080"):
        assert judge.judge_namespace(name, live).target_class is None
    dead = judge.judge_namespace("pulsar/standalone/broker-2:8080", live)
    assert dead.target_class == PM_DEAD_BROKER
    assert "broker-2:8080" in dead.why
    sla = judge.judge_namespace("sla-monitor/standalone/broker-2:8080", live)
    assert sla.target_class == PM_DEAD_BROKER
    assert judge.judge_namespace("sla-monitor/standalone/broker-1:8080", live).target_class is None


def test_a_heartbeat_name_with_policies_is_judged_by_them() -> None:
    known = facts(policies={"pulsar/broker-9:8080": PolicyFacts()})
    assert judge.judge_namespace("pulsar/broker-9:8080", known).target_class is None


def test_the_heartbeat_tenants_units_are_live_without_policies() -> None:
    assert judge.judge_tenant("pulsar", facts(tenants=())).target_class is None
    assert judge.judge_tenant("sla-monitor", facts(tenants=())).target_class is None
    assert judge.judge_tenant("acme", facts()).target_class is None
    assert judge.judge_tenant("gone", facts()).target_class == PM_DELETED_TENANT


def test_a_delete_stuck_longer_than_the_grace_is_reported_with_its_command() -> None:
    stuck = PolicyFacts(mtime_ms=NOW - 25 * HOUR, deleted=True)
    found = judge.judge_namespace("acme/orders", facts(policies={"acme/orders": stuck}))
    assert found.target_class is None
    (report,) = found.reports
    assert report.report_class == PM_STUCK_DELETE
    assert report.command == "pulsar-admin namespaces delete acme/orders"
    with_topics = judge.judge_namespace(
        "acme/orders", facts(policies={"acme/orders": stuck}), has_topics=True
    )
    assert with_topics.reports[0].command == "pulsar-admin namespaces delete --force acme/orders"


def test_a_delete_under_way_within_the_grace_is_no_report() -> None:
    recent = PolicyFacts(mtime_ms=NOW - 23 * HOUR, deleted=True)
    assert judge.judge_namespace("acme/o", facts(policies={"acme/o": recent})).reports == ()


def test_not_replicated_here() -> None:
    elsewhere = PolicyFacts(replication_clusters=("eu", "ap"))
    both = PolicyFacts(replication_clusters=("eu", "us"))
    known = facts(policies={"acme/a": elsewhere, "acme/b": both}, clusters=("us",))
    (report,) = judge.judge_namespace("acme/a", known).reports
    assert report.report_class == PM_NOT_REPLICATED_HERE
    assert judge.judge_namespace("acme/a", known).target_class is None
    assert judge.judge_namespace("acme/b", known).reports == ()
    # This cluster's name unknown: not judged.
    unknown = facts(policies={"acme/a": elsewhere})
    assert judge.judge_namespace("acme/a", unknown).reports == ()


def test_policy_facts_from_pulsars_json_and_from_an_empty_node() -> None:
    found = judge.policy_facts(policies(deleted=True, replication_clusters=["us"]), 5)
    assert found == PolicyFacts(5, deleted=True, replication_clusters=("us",))
    assert judge.policy_facts(b"", 5) == PolicyFacts(5, readable=False)
    assert judge.policy_facts(b"\xff{", 5).readable is False


def test_a_stuck_partitioned_topic_delete_names_the_decoded_topic() -> None:
    old = NOW - 48 * HOUR
    body = json.dumps({"partitions": 2, "deleted": True}).encode()
    report = judge.judge_partitioned_topic(
        "acme/orders/persistent/click+stream%21", body, old, facts()
    )
    assert report is not None
    assert report.name == "persistent://acme/orders/click stream!"
    assert report.command == (
        "pulsar-admin topics delete-partitioned-topic 'persistent://acme/orders/click stream!'"
    )
    v1 = judge.judge_partitioned_topic("p/c/ns/persistent/t", body, old, facts())
    assert v1 is not None and v1.name == "persistent://p/c/ns/t"
    fresh = judge.judge_partitioned_topic("acme/o/persistent/t", body, NOW - HOUR, facts())
    assert fresh is None
    live = json.dumps({"partitions": 2}).encode()
    assert judge.judge_partitioned_topic("acme/o/persistent/t", live, old, facts()) is None


def test_an_owned_bundle_holds_the_whole_leftover() -> None:
    znodes = [
        Znode("/managed-ledgers/acme/o/persistent/t", RECORD, 0, 10, 0),
        Znode("/namespace/acme/o/0x00000000_0x40000000", RECORD, 0, 10, 0, ephemeral_owner=0xAB),
    ]
    why = judge.held_by(znodes)
    assert why is not None and "0x00000000_0x40000000" in why and "0xab" in why
    assert judge.held_by(znodes[:1]) is None


@pytest.mark.parametrize(
    ("path", "name", "data", "kind"),
    [
        ("/managed-ledgers/acme/o", "acme/o", 0, PARENT),
        ("/managed-ledgers/acme/o/persistent", "acme/o", 0, PARENT),
        ("/managed-ledgers/acme/o/persistent/t", "acme/o", 0, RECORD),  # never loaded
        ("/managed-ledgers/acme/o/persistent/t/sub", "acme/o", 7, RECORD),
        ("/managed-ledgers/acme/persistent/persistent/t", "acme/persistent", 0, RECORD),
        ("/managed-ledgers/p/c/ns/persistent/t", "p/c/ns", 0, RECORD),
        ("/schemas/acme/o", "acme/o", 0, PARENT),
        ("/schemas/acme/o/t", "acme/o", 9, RECORD),
        ("/admin/local-policies/acme/o", "acme/o", 40, RECORD),
        ("/admin/local-policies/acme/o", "acme/o", 0, RECORD),
        ("/namespace/acme/o", "acme/o", 0, PARENT),
        ("/loadbalance/bundle-data/acme/o/0x00000000_0x40000000", "acme/o", 80, RECORD),
        ("/loadbalance/resource-quota/namespace/acme/o", "acme/o", 0, PARENT),
        ("/managed-ledgers/gone", "gone", 0, PARENT),
        ("/admin/local-policies/gone", "gone", 0, PARENT),
    ],
)
def test_records_and_parents_of_the_local_store(path: str, name: str, data: int, kind: str) -> None:
    assert roots.kind_of(path, LOCAL, name, data) == kind


def test_records_and_parents_of_the_configuration_store() -> None:
    assert roots.kind_of("/admin/partitioned-topics/gone", CONFIG, "gone", 0) == PARENT
    topic = "/admin/partitioned-topics/gone/ns/persistent/t"
    assert roots.kind_of(topic, CONFIG, "gone", 20) == RECORD
    assert roots.kind_of("/admin/partitioned-topics/gone/ns/persistent", CONFIG, "gone", 0) == (
        PARENT
    )


def test_the_roots_of_a_unit() -> None:
    assert roots.unit_paths(LOCAL, "acme/o") == [
        "/managed-ledgers/acme/o",
        "/schemas/acme/o",
        "/admin/local-policies/acme/o",
        "/namespace/acme/o",
        "/loadbalance/bundle-data/acme/o",
        "/loadbalance/resource-quota/namespace/acme/o",
    ]
    assert roots.unit_paths(CONFIG, "gone") == ["/admin/partitioned-topics/gone"]


def test_namespaces_below_bundle_keyed_roots_and_local_policies() -> None:
    levels = {
        "orders": ["0x00000000_0x40000000", "0x40000000_0x80000000"],
        "empty": [],
        "us-east": ["legacy", "billing"],
        # a v2 namespace named like a v1 cluster: its bundle, and the v1 namespace below
        "us-west": ["0x00000000_0x40000000", "legacy"],
    }
    assert roots.bundle_keyed_namespaces("acme", levels) == [
        "acme/empty",
        "acme/orders",
        "acme/us-east/billing",
        "acme/us-east/legacy",
        "acme/us-west",
        "acme/us-west/legacy",
    ]
    assert roots.local_policies_namespaces("acme", {"orders": [], "us-east": ["legacy"]}) == [
        "acme/orders",
        "acme/us-east/legacy",
    ]


def test_the_guard_refuses_when_every_namespace_with_topics_looks_deleted() -> None:
    from ledger_gc.rules.pulsar_metadata import guards

    base = {"local_hosts": "zk/local", "config_hosts": "zk/config"}
    assert guards.refusals(None, force=False) == []
    assert guards.refusals({**base, "namespaces_with_topics": 0}, force=False) == []
    some = {**base, "namespaces_with_topics": 3, "deleted_with_topics_count": 2}
    assert guards.refusals(some, force=False) == []
    every = {
        **base,
        "namespaces_with_topics": 2,
        "deleted_with_topics_count": 2,
        "deleted_with_topics": ["acme/a", "acme/b"],
    }
    (refusal,) = guards.refusals(every, force=False)
    assert "does not know any namespace of this cluster" in refusal.reason
    assert "acme/a" in refusal.reason and "zk/config" in refusal.reason
    assert guards.refusals(every, force=True)[0].forced
