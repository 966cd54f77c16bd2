"""Which levels of ``/managed-ledgers`` are namespaces: v1 beside v2 (pure).

Pulsar names a managed ledger ``tenant/namespace/persistent/<topic>`` (a v2 namespace)
or ``property/cluster/namespace/persistent/<topic>`` (a v1 one,
``TopicName.getPersistenceNamingEncoding``), and both may live in one metadata store.
Read by depth alone, a v1 namespace called ``persistent``
(``acme/us-west/persistent/persistent/clicks``) looks like the v2 namespace
``acme/us-west`` holding a topic ``persistent`` whose cursors are v1 topics: its
``ManagedLedgerInfo`` records then fail to decode as cursors, and ``acme/us-west`` looks
like a namespace of this cluster.

So each ``/managed-ledgers/<a>/<b>`` is first judged a v1 property/cluster or a v2
namespace (``namespace_shape``), from what the tree itself proves, else from Pulsar's
namespace policies (``/admin/policies``, read the way Pulsar lists a tenant's
namespaces: a child with children is a v1 cluster, whose children are namespaces; a
child without is a v2 namespace), and only then are its topics listed:

* ``<a>/<b>`` holds something other than ``persistent``: v1 (a v2 namespace's node holds
  only its domain);
* ``<a>/<b>/persistent`` holds something other than ``persistent``: v2 (a v1 namespace's
  node holds only its domain);
* ``<a>/<b>/persistent/persistent`` has data, or a child with children: v1 when a child
  has children (a v1 topic with cursors; a cursor has none), v2 when it has data (a
  topic's ``ManagedLedgerInfo``; the v1 domain node Pulsar creates is empty);
* where the tree proves nothing and would list the same topics either way, the
  policies decide (a node with a JSON object is a namespace whatever lies below it;
  children below one without are v1 namespaces), else v2 (today's reading);
* otherwise, the policies decide, and without them the tree is ``Ambiguous``: the
  caller refuses to read it rather than guess (a wrong guess hides topics).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

DOMAIN = "persistent"
V1 = "v1"
V2 = "v2"
#: A v2 namespace named like a v1 cluster of its tenant: both at once.
BOTH = "v1+v2"


@dataclass(frozen=True)
class Shape:
    """What ``/managed-ledgers/<a>/<b>`` is: a v1 property/cluster, a v2 namespace, or
    both (a v2 namespace named like one of its tenant's v1 clusters)."""

    version: str  # V1 | V2 | BOTH
    why: str

    @property
    def namespace(self) -> bool:
        """Whether ``<a>/<b>`` is a v2 namespace (its topics under ``persistent``)."""
        return self.version in (V2, BOTH)

    @property
    def cluster(self) -> bool:
        """Whether ``<a>/<b>`` is a v1 property/cluster (its children v1 namespaces, but
        ``persistent`` where it is a v2 namespace too)."""
        return self.version in (V1, BOTH)

    def v1_namespaces(self, children: Sequence[str]) -> list[str]:
        """Which of the level's ``children`` are v1 namespaces."""
        if not self.cluster:
            return []
        return [child for child in children if self.version == V1 or child != DOMAIN]


@dataclass(frozen=True)
class Need:
    """What must be read before ``<a>/<b>`` can be judged: the children of ``tree``
    paths (below ``/managed-ledgers``), whether ``data`` paths hold data, and the
    children of ``policies`` paths (below ``/admin/policies``; None: no such znode)."""

    tree: tuple[str, ...] = ()
    data: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()


@dataclass(frozen=True)
class Ambiguous:
    """Neither the tree nor the policies say what ``<a>/<b>`` is."""

    why: str


@dataclass(frozen=True)
class Facts:
    """What has been read: children of ``/managed-ledgers/<path>``, whether a znode holds
    data, children of ``/admin/policies/<path>`` (None: the znode does not exist), and
    whether that policies znode holds a JSON object (a namespace's Policies)."""

    tree: Mapping[str, Sequence[str]]
    data: Mapping[str, bool]
    policies: Mapping[str, Sequence[str] | None]
    policy_json: Mapping[str, bool] = field(default_factory=dict)


def namespace_shape(level: str, facts: Facts) -> Shape | Need | Ambiguous:
    """Judge ``/managed-ledgers/<level>`` (``level`` = ``a/b``) from ``facts``, or say
    what to read next (the policies only where the tree proves nothing)."""
    if level not in facts.tree:
        return Need(tree=(level,))
    kids = facts.tree[level]
    others = sorted(k for k in kids if k != DOMAIN)
    if others:
        return _cluster(level, others[0], DOMAIN in kids, facts)
    if not kids:
        return _by_policy(level, facts, "no topics either way")
    domain = f"{level}/{DOMAIN}"
    if domain not in facts.tree:
        return Need(tree=(domain,))
    topics = facts.tree[domain]
    others = sorted(k for k in topics if k != DOMAIN)
    if others:
        return Shape(V2, f"{domain} holds {others[0]!r}: a v1 namespace holds only its domain")
    if not topics:
        return _by_policy(level, facts, "no topics either way")
    # <level>/persistent/persistent: the v2 topic "persistent", or a v1 namespace's domain.
    node = f"{domain}/{DOMAIN}"
    if node not in facts.tree or node not in facts.data:
        return Need(tree=(node,) if node not in facts.tree else (), data=(node,))
    children = [f"{node}/{k}" for k in facts.tree[node]]
    missing = tuple(path for path in children if path not in facts.tree)
    if missing:
        return Need(tree=missing)
    if any(facts.tree[path] for path in children):
        return Shape(V1, f"{node}'s children have children: topics with cursors")
    if facts.data[node]:
        return Shape(V2, f"{node} holds a record: a v1 domain node is empty")
    if not children:
        return _by_policy(level, facts, "no topics either way")
    return _by_policy(level, facts, None)


def _cluster(level: str, other: str, domain: bool, facts: Facts) -> Shape | Need | Ambiguous:
    """``<level>`` holds the v1 namespace ``other``: a v1 cluster, and a v2 namespace too
    when its ``persistent`` holds a topic or its policies are a namespace's."""
    why = f"it holds {other!r}: a v2 namespace holds only its domain"
    node = f"{level}/{DOMAIN}"
    if domain:
        if node not in facts.tree:
            return Need(tree=(node,))
        topics = sorted(k for k in facts.tree[node] if k != DOMAIN)
        if topics:
            return Shape(
                BOTH, f"{why}, and {node} holds {topics[0]!r}: a v1 namespace holds only its domain"
            )
    if level not in facts.policies:
        return Need(policies=(level,))
    if not facts.policy_json.get(level, False):
        return Shape(V1, why)
    children = facts.policies[level] or ()
    if domain and DOMAIN in children and facts.tree[node]:
        return _both_persistent(level)
    return Shape(BOTH, f"{why}, and /admin/policies/{level} holds a namespace's policies")


def _both_persistent(level: str) -> Ambiguous:
    """A v1 namespace called ``persistent`` below a v2 namespace named like a v1 cluster,
    with something under ``persistent/persistent`` that either reading would list."""
    return Ambiguous(
        f"/admin/policies/{level} holds a namespace's policies and the v1 namespace "
        f"{level}/persistent below it: /managed-ledgers/{level}/persistent is then both "
        "that v2 namespace's domain and the v1 namespace's node; nothing is decided from it"
    )


def _by_policy(level: str, facts: Facts, otherwise: str | None) -> Shape | Need | Ambiguous:
    """What ``/admin/policies/<level>`` says: a node with a JSON object is a namespace's
    policies (and, with children, a v1 cluster's too: ``BOTH``); one without is a v1
    cluster when it has children (Pulsar's ``getListOfNamespaces``), else a v2
    namespace. Where it does not exist, v2 when both readings list the same topics
    (``otherwise``), else Ambiguous."""
    if level not in facts.policies:
        return Need(policies=(level,))
    children = facts.policies[level]
    if children is not None:
        where = f"/admin/policies/{level}"
        if not facts.policy_json.get(level, False):
            return Shape(V1 if children else V2, f"{where} says so")
        if not children:
            return Shape(V2, f"{where} holds a namespace's policies")
        if DOMAIN in children and otherwise is None:
            return _both_persistent(level)
        return Shape(BOTH, f"{where} holds a namespace's policies and v1 namespaces below it")
    if otherwise is not None:
        return Shape(V2, otherwise)
    return Ambiguous(
        f"cannot tell whether /managed-ledgers/{level} is a v1 property/cluster with a "
        f"namespace called persistent or a v2 namespace with a topic called persistent: "
        f"/admin/policies/{level} does not exist and no topic under it has a cursor; "
        "nothing is decided from it"
    )


@dataclass(frozen=True)
class ManagedLedgerTree:
    """The managed ledgers and namespaces of one metadata store, v1 and v2."""

    names: tuple[str, ...]  # every managed-ledger name, sorted
    namespaces: frozenset[str]  # tenant/ns (v2) and property/cluster/ns (v1)
    # The root's children as listed (a tenant with no namespace is one too), and whether
    # the root exists: what a later reader of the same cycle needs without listing again.
    tenants: tuple[str, ...] = ()
    exists: bool = True

    @property
    def v2_names(self) -> list[str]:
        return [name for name in self.names if is_v2_name(name)]


def is_policies(data: bytes | None) -> bool:
    """Whether a ``/admin/policies`` znode's data is a namespace's (or tenant's) JSON
    object; a v1 cluster's node, which Pulsar creates as a parent, holds none."""
    if not data:
        return False
    try:
        return isinstance(json.loads(data), dict)
    except (ValueError, UnicodeDecodeError):
        return False


def is_v2_name(name: str) -> bool:
    """``tenant/ns/persistent/<topic>``; a v1 name has five parts."""
    parts = name.split("/")
    return len(parts) == 4 and parts[2] == DOMAIN
