"""Which ``/managed-ledgers`` levels are v1 clusters and which v2 namespaces (pure).

A fake metadata store (znode -> children, data) is read the way ``MetadataStore`` reads
it: ``namespace_shape`` says what it needs, the loop reads it, until it decides.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from ledger_gc.rules.metadata import namespaces as ns
from ledger_gc.rules.metadata.namespaces import Ambiguous, Facts, Need, Shape


def judge(
    level: str,
    znodes: Mapping[str, bytes],
    policies: Mapping[str, bytes] | None = None,
) -> Shape | Ambiguous:
    """``znodes``: paths below /managed-ledgers -> data; ``policies``: paths below
    /admin/policies (their parents exist implicitly)."""
    tree_nodes = _with_parents(znodes)
    policy_nodes = _with_parents(policies or {})
    facts = Facts({}, {}, {})
    for _ in range(10):
        got = ns.namespace_shape(level, facts)
        if not isinstance(got, Need):
            return got
        assert got.tree or got.data or got.policies
        for path in got.tree:
            facts.tree[path] = _children(tree_nodes, path)  # type: ignore[index]
        for path in got.data:
            facts.data[path] = bool(tree_nodes.get(path))  # type: ignore[index]
        for path in got.policies:
            there = path in policy_nodes
            facts.policies[path] = _children(policy_nodes, path) if there else None  # type: ignore[index]
            facts.policy_json[path] = ns.is_policies(policy_nodes.get(path))  # type: ignore[index]
    raise AssertionError("namespace_shape never decided")


def _with_parents(nodes: Mapping[str, bytes]) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for path, data in nodes.items():
        parts = path.split("/")
        for i in range(1, len(parts)):
            found.setdefault("/".join(parts[:i]), b"")
        found[path] = data
    return found


def _children(nodes: Mapping[str, bytes], path: str) -> list[str]:
    depth = path.count("/") + 1
    return sorted(
        p.rsplit("/", 1)[1] for p in nodes if p.startswith(path + "/") and p.count("/") == depth
    )


ML = b"\x0a\x02\x08\x01"  # a ManagedLedgerInfo with one ledger
CURSOR = b"\x08\x05"


def test_a_v2_namespace_is_proven_by_its_topics() -> None:
    shape = judge("public/default", {"public/default/persistent/orders": ML})
    assert isinstance(shape, Shape) and shape.version == ns.V2


def test_a_v1_cluster_is_proven_by_a_namespace_that_is_not_a_domain() -> None:
    shape = judge("acme/us-west", {"acme/us-west/ns1/persistent/clicks": ML})
    assert isinstance(shape, Shape) and shape.version == ns.V1


def test_a_v1_namespace_called_persistent_is_proven_by_a_topics_cursor() -> None:
    znodes = {
        "acme/us-west/persistent/persistent/clicks": ML,
        "acme/us-west/persistent/persistent/clicks/sub": CURSOR,
    }
    shape = judge("acme/us-west", znodes)
    assert isinstance(shape, Shape) and shape.version == ns.V1


def test_a_v2_topic_called_persistent_is_proven_by_its_record() -> None:
    znodes = {
        "public/default/persistent/persistent": ML,
        "public/default/persistent/persistent/sub": CURSOR,
    }
    shape = judge("public/default", znodes)
    assert isinstance(shape, Shape) and shape.version == ns.V2


def test_cursorless_v1_topics_under_persistent_need_the_policies() -> None:
    """The empty domain node with cursor-less topics under it is either reading: only
    /admin/policies can tell, and without it the level is refused, not guessed."""
    znodes = {"acme/us-west/persistent/persistent/clicks": ML}
    ambiguous = judge("acme/us-west", znodes)
    assert isinstance(ambiguous, Ambiguous) and "/admin/policies/acme/us-west" in ambiguous.why
    v1 = judge("acme/us-west", znodes, {"acme/us-west/persistent": b"{}"})
    assert isinstance(v1, Shape) and v1.version == ns.V1
    v2 = judge("acme/us-west", znodes, {"acme/us-west": b"{}"})
    assert isinstance(v2, Shape) and v2.version == ns.V2


@pytest.mark.parametrize(
    ("level", "znodes", "policies", "expected"),
    [
        # every topic deleted: the namespace's nodes stay; v2 unless the policies say v1
        ("public/default", {"public/default/persistent": b""}, {}, ns.V2),
        ("acme/us-west", {"acme/us-west/persistent/persistent": b""}, {}, ns.V2),
        (
            "acme/us-west",
            {"acme/us-west/persistent/persistent": b""},
            {"acme/us-west/persistent": b"{}"},
            ns.V1,
        ),
        ("public/default", {"public/default": b""}, {}, ns.V2),
        ("acme/us-west", {"acme/us-west": b""}, {"acme/us-west/ns1": b"{}"}, ns.V1),
    ],
)
def test_no_topics_either_way(
    level: str, znodes: dict[str, bytes], policies: dict[str, bytes], expected: str
) -> None:
    shape = judge(level, znodes, policies)
    assert isinstance(shape, Shape) and shape.version == expected


def test_the_tree_wins_over_policies_that_contradict_it() -> None:
    shape = judge(
        "public/default",
        {"public/default/persistent/orders": ML},
        {"public/default/persistent": b"{}"},
    )
    assert isinstance(shape, Shape) and shape.version == ns.V2


def test_v2_names() -> None:
    tree = ns.ManagedLedgerTree(
        ("acme/us-west/persistent/persistent/clicks", "public/default/persistent/a"),
        frozenset({"public/default", "acme/us-west/persistent"}),
    )
    assert tree.v2_names == ["public/default/persistent/a"]


POLICIES = b'{"bundles": {"numBundles": 4}, "replication_clusters": ["us-east"]}'


@pytest.mark.parametrize(
    ("znodes", "policies"),
    [
        # v2 topics and a v1 namespace under one level: the tree shows both
        (
            {"acme/us-east/persistent/orders": ML, "acme/us-east/legacy/persistent/clicks": ML},
            {},
        ),
        # the v2 namespace has only a topic called persistent: its policies say so
        (
            {
                "acme/us-east/persistent/persistent": ML,
                "acme/us-east/legacy/persistent/clicks": ML,
            },
            {"acme/us-east": POLICIES, "acme/us-east/legacy": POLICIES},
        ),
        # no v2 topic yet: the policies say the level is a namespace too
        (
            {"acme/us-east/legacy/persistent/clicks": ML},
            {"acme/us-east": POLICIES, "acme/us-east/legacy": POLICIES},
        ),
        # the policies say it whatever lies below (an empty domain node, no topics)
        (
            {"acme/us-east/persistent": b""},
            {"acme/us-east": POLICIES, "acme/us-east/legacy": b"{}"},
        ),
    ],
)
def test_a_v2_namespace_named_like_a_v1_cluster_is_both(
    znodes: dict[str, bytes], policies: dict[str, bytes]
) -> None:
    """``/admin/policies/acme/us-east`` holds Policies JSON and has the v1 namespace
    ``legacy`` below it: the level is a namespace whatever lies below it, and a v1
    cluster too. Read as a v1 cluster alone, its v2 topics were never listed."""
    shape = judge("acme/us-east", znodes, policies)
    assert isinstance(shape, Shape) and shape.version == ns.BOTH, shape
    assert shape.namespace and shape.cluster
    assert shape.v1_namespaces(["legacy", "persistent"]) == ["legacy"]


@pytest.mark.parametrize(
    "policies",
    [
        {},  # no policies: the tree's v1 reading stands
        {"acme/us-west/ns1": POLICIES},  # a v1 cluster's node holds no JSON
        {"acme/us-west": b"not json", "acme/us-west/ns1": POLICIES},
        {"acme/us-west": b"[1, 2]", "acme/us-west/ns1": POLICIES},  # JSON, not an object
    ],
)
def test_a_v1_cluster_without_a_namespaces_policies_stays_v1(policies: dict[str, bytes]) -> None:
    shape = judge("acme/us-west", {"acme/us-west/ns1/persistent/clicks": ML}, policies)
    assert isinstance(shape, Shape) and shape.version == ns.V1
    assert shape.v1_namespaces(["ns1", "persistent"]) == ["ns1", "persistent"]


def test_a_v1_namespace_called_persistent_below_a_v2_namespace_is_refused() -> None:
    """``persistent`` below such a level would be both the v2 domain and the v1
    namespace's node: not guessed."""
    shape = judge(
        "acme/us-east",
        {"acme/us-east/persistent/persistent": b"", "acme/us-east/legacy/persistent/c": ML},
        {"acme/us-east": POLICIES, "acme/us-east/persistent": POLICIES},
    )
    assert isinstance(shape, Ambiguous) and "acme/us-east/persistent" in shape.why


@pytest.mark.parametrize(
    "znodes",
    [
        {"acme/us-east": b""},
        {"acme/us-east/persistent": b""},
        {"acme/us-east/persistent": b"", "acme/us-east/legacy/persistent/c": ML},
    ],
)
def test_a_v1_namespace_called_persistent_below_a_v2_namespace_without_topics_is_both(
    znodes: dict[str, bytes],
) -> None:
    """No topic either reading would list: nothing to refuse."""
    shape = judge(
        "acme/us-east",
        znodes,
        {"acme/us-east": POLICIES, "acme/us-east/persistent": POLICIES},
    )
    assert isinstance(shape, Shape) and shape.version == ns.BOTH, shape


def test_policies_json_alone_is_a_v2_namespace() -> None:
    shape = judge("public/default", {"public/default": b""}, {"public/default": POLICIES})
    assert isinstance(shape, Shape) and shape.version == ns.V2 and not shape.cluster


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"{}", True),
        (POLICIES, True),
        (b"", False),
        (None, False),
        (b"[]", False),
        (b"\xff", False),
        (b"nope", False),
    ],
)
def test_is_policies(data: bytes | None, expected: bool) -> None:
    assert ns.is_policies(data) is expected
