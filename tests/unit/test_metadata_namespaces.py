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
