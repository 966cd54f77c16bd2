"""Where a Pulsar-metadata leftover's znodes are, records against parents, and its class
now (rules/pulsar_metadata/leftovers.py, pure)."""

from __future__ import annotations

import pytest

from ledger_gc.rules.pulsar_metadata import leftovers, roots
from ledger_gc.rules.pulsar_metadata.classes import (
    CONFIG,
    LOCAL,
    PARENT,
    PM_DEAD_BROKER,
    PM_DELETED_NAMESPACE,
    PM_DELETED_TENANT,
    RECORD,
    Znode,
    to_delete,
)


def test_a_namespace_has_six_roots_in_the_local_store_and_one_in_the_config_store() -> None:
    assert roots.unit_paths(LOCAL, "acme/orders") == [
        "/managed-ledgers/acme/orders",
        "/schemas/acme/orders",
        "/admin/local-policies/acme/orders",
        "/namespace/acme/orders",
        "/loadbalance/bundle-data/acme/orders",
        "/loadbalance/resource-quota/namespace/acme/orders",
    ]
    assert roots.unit_paths(CONFIG, "acme") == ["/admin/partitioned-topics/acme"]


def test_a_v1_namespaces_delete_never_walks_schemas_of_its_path() -> None:
    """``/schemas/p/c/ns`` is topic ``ns`` of a v2 namespace ``p/c``: a v1 topic's schema
    is keyed without its cluster."""
    assert leftovers.unit_nodes(LOCAL, "acme/us-east/legacy") == [
        "/managed-ledgers/acme/us-east/legacy",
        "/admin/local-policies/acme/us-east/legacy",
        "/namespace/acme/us-east/legacy",
        "/loadbalance/bundle-data/acme/us-east/legacy",
        "/loadbalance/resource-quota/namespace/acme/us-east/legacy",
    ]
    assert leftovers.unit_nodes(LOCAL, "acme/orders") == roots.unit_paths(LOCAL, "acme/orders")
    assert leftovers.unit_nodes(CONFIG, "a/b/c") == roots.unit_paths(CONFIG, "a/b/c")


@pytest.mark.parametrize("name", ["", "a//b", "a/../b", "..", "a/b/c/d", "/a"])
def test_a_name_that_could_reach_outside_its_roots_is_refused(name: str) -> None:
    assert leftovers.check_name(name) is not None


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/managed-ledgers/t/ns", PARENT),
        ("/managed-ledgers/t/ns/persistent", PARENT),
        ("/managed-ledgers/t/ns/persistent/orders", RECORD),
        ("/managed-ledgers/t/ns/persistent/orders/sub", RECORD),
        ("/schemas/t/ns", PARENT),
        ("/schemas/t/ns/orders", RECORD),
        ("/admin/local-policies/t/ns", RECORD),
        ("/namespace/t/ns", PARENT),
        ("/namespace/t/ns/0x00000000_0xffffffff", RECORD),
        ("/loadbalance/bundle-data/t/ns", PARENT),
        ("/loadbalance/bundle-data/t/ns/0x00000000_0xffffffff", RECORD),
        ("/loadbalance/resource-quota/namespace/t/ns/0x00000000_0xffffffff", RECORD),
    ],
)
def test_records_and_parents_of_a_namespace(path: str, kind: str) -> None:
    assert roots.kind_of(path, LOCAL, "t/ns", 0) == kind


def test_a_namespace_named_persistent_is_read_by_its_name_not_as_a_domain() -> None:
    # v2 namespace "t/persistent": its topics are t/persistent/persistent/<topic>
    ns = "t/persistent"
    assert roots.kind_of("/managed-ledgers/t/persistent", LOCAL, ns, 0) == PARENT
    assert roots.kind_of("/managed-ledgers/t/persistent/persistent", LOCAL, ns, 0) == PARENT
    topic = "/managed-ledgers/t/persistent/persistent/x"
    assert roots.kind_of(topic, LOCAL, ns, 0) == RECORD
    assert leftovers.named_ledgers_as(LOCAL, ns, topic) == (
        leftovers.MANAGED_LEDGER,
        "t/persistent/persistent/x",
    )


def test_a_tenant_level_leftover_is_parents_only_and_partitioned_metadata_is_records() -> None:
    assert roots.kind_of("/managed-ledgers/gone", LOCAL, "gone", 0) == PARENT
    assert roots.kind_of("/admin/local-policies/gone", LOCAL, "gone", 0) == PARENT
    meta = "/admin/partitioned-topics/gone/ns/persistent/orders"
    assert roots.kind_of(meta, CONFIG, "gone", 16) == RECORD
    assert roots.kind_of("/admin/partitioned-topics/gone/ns", CONFIG, "gone", 0) == PARENT
    assert (
        leftovers.named_ledgers_as(LOCAL, "gone", "/managed-ledgers/gone/ns/persistent/x") is None
    )


def test_which_records_name_ledgers() -> None:
    ns = "t/ns"
    assert leftovers.named_ledgers_as(LOCAL, ns, "/managed-ledgers/t/ns/persistent/a/sub") == (
        leftovers.CURSOR,
        "t/ns/persistent/a",
    )
    assert leftovers.named_ledgers_as(LOCAL, ns, "/schemas/t/ns/a") == (leftovers.SCHEMA, "t/ns/a")
    assert leftovers.named_ledgers_as(LOCAL, ns, "/admin/local-policies/t/ns") is None
    assert leftovers.named_ledgers_as(LOCAL, ns, "/managed-ledgers/t/ns/persistent") is None


@pytest.mark.parametrize(
    ("name", "policies", "tenant", "registered", "expected"),
    [
        ("t/ns", {"t/ns": b"{}"}, True, False, None),
        ("t/ns", {}, True, False, PM_DELETED_NAMESPACE),
        ("t/ns", {}, False, False, PM_DELETED_TENANT),
        ("t", {}, False, False, PM_DELETED_TENANT),
        ("t", {"t": b"{}"}, True, False, None),
        ("pulsar", {}, False, False, None),  # the heartbeat tenant: no policies by design
        ("pulsar/broker-1:8080", {}, True, False, PM_DEAD_BROKER),
        ("pulsar/broker-1:8080", {}, False, True, None),
        ("pulsar/us-east/broker-1:8080", {}, True, False, PM_DEAD_BROKER),
        ("sla-monitor/us-east/broker-1:8080", {}, True, True, None),
        (
            "sla-monitor/us-east/broker-1:8080",
            {"sla-monitor/us-east/broker-1:8080": b""},
            True,
            False,
            None,
        ),  # its policies exist: live
        ("p/ns", {"p/us-east/ns": b"{}"}, True, False, None),  # a v1 topic's schema key
    ],
)
def test_the_live_class_of_a_name_is_the_surveys(
    name: str, policies: dict[str, bytes], tenant: bool, registered: bool, expected: str | None
) -> None:
    got = leftovers.live_class(name, tenant=tenant, policies=policies, broker_registered=registered)
    assert got == expected


def test_the_v1_namespaces_a_two_level_name_may_stand_for() -> None:
    assert leftovers.v1_candidates("p/ns", ["us-east", "eu"]) == ["p/eu/ns", "p/us-east/ns"]
    assert leftovers.v1_candidates("p/c/ns", ["c"]) == []


def test_records_go_leaves_first_and_parents_only_once_no_record_is_left() -> None:
    z = [
        Znode("/managed-ledgers/t/ns", PARENT, 0, 0, 1),
        Znode("/managed-ledgers/t/ns/persistent", PARENT, 0, 0, 1),
        Znode("/managed-ledgers/t/ns/persistent/a", RECORD, 3, 10, 1),
        Znode("/managed-ledgers/t/ns/persistent/a/sub", RECORD, 1, 5, 0),
        Znode("/admin/local-policies/t/ns", RECORD, 0, 2, 0),
    ]
    assert [x.path for x in to_delete(z)] == [
        "/managed-ledgers/t/ns/persistent/a/sub",
        "/managed-ledgers/t/ns/persistent/a",
        "/admin/local-policies/t/ns",
    ]
    parents = [x for x in z if x.kind == PARENT]
    assert [x.path for x in to_delete(parents)] == [
        "/managed-ledgers/t/ns/persistent",
        "/managed-ledgers/t/ns",
    ]


def test_ancestors_shallowest_first() -> None:
    assert leftovers.ancestors("/a/b/c") == ["/a", "/a/b"]
    assert leftovers.ancestors("/a") == []


@pytest.mark.parametrize(
    ("path", "child", "mine"),
    [
        ("/managed-ledgers/acme/us-east", "persistent", True),
        ("/managed-ledgers/acme/us-east", "non-persistent", True),
        ("/managed-ledgers/acme/us-east", "legacy", False),  # a v1 namespace of us-east
        ("/managed-ledgers/acme/us-east/persistent", "orders", True),
        ("/namespace/acme/us-east", "0x00000000_0xffffffff", True),
        ("/namespace/acme/us-east", "legacy", False),
        ("/loadbalance/bundle-data/acme/us-east", "legacy", False),
        ("/admin/local-policies/acme/us-east", "legacy", False),
        ("/schemas/acme/us-east", "orders", True),
    ],
)
def test_a_walk_never_enters_another_units_node(path: str, child: str, mine: bool) -> None:
    assert leftovers.belongs(LOCAL, "acme/us-east", path, child) is mine
    assert leftovers.belongs(CONFIG, "acme", "/admin/partitioned-topics/acme", "x")


@pytest.mark.parametrize(
    ("name", "above", "shared"),
    [
        ("acme/us-east/0x00000000_0x40000000", b'{"bundles":{}}', True),
        ("acme/us-east/persistent", b'{"bundles":{}}', True),
        ("acme/us-east/non-persistent", b"{}", True),
        ("acme/us-east/legacy", b'{"bundles":{}}', False),  # a v1 namespace of its own
        ("acme/us-east/persistent", b"", False),  # a v1 cluster's node: no v2 namespace
        ("acme/us-east/persistent", None, False),
        ("acme/persistent", b"{}", False),  # a v2 name
    ],
)
def test_a_v1_name_that_is_a_live_v2_namespaces_bundle_or_domain(
    name: str, above: bytes | None, shared: bool
) -> None:
    assert (leftovers.v2_own_node(name, above) is not None) is shared
