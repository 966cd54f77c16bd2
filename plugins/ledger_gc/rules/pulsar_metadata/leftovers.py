"""What the delete of one leftover re-derives and re-checks (pure).

DESIGN.md "Pulsar's own metadata" and issue 34's shared design. A leftover (one registry
target, ``pulsar-metadata:<store>:<name>``) is the znodes of one namespace, or one
tenant, in one store. Its delete re-derives those znodes live below the roots the survey
reads (``roots.unit_paths``), tells records from parents as the survey does
(``roots.kind_of``: ``classes.to_delete`` removes records first, parents only on a
later cycle), and judges the name again with the survey's own rules
(``judge.judge_namespace``, ``judge.judge_tenant``) over what the stores say now
(``live_class``). A leftover
whose class changed is not deleted. What a removed record names (``named_ledgers_as``)
is handed to the BookKeeper source; its ancestors' ACLs (``ancestors``) let a restore
re-create missing parents as they were.

A tenant-level leftover (a name of one level) is the path nodes a deleted tenant left
with no namespace below; anything below them is a namespace's leftover of its own,
removed first (the delete holds the tenant's until then).
"""

from __future__ import annotations

from collections.abc import Mapping

from ledger_gc.rules.metadata.namespaces import is_policies
from ledger_gc.rules.pulsar_metadata import judge, roots
from ledger_gc.rules.pulsar_metadata.classes import LOCAL

#: A namespace's managed-ledger domains: the only children of its node that are its own.
DOMAINS = ("persistent", "non-persistent")

#: What a record names BookKeeper ledgers as (how its bytes decode).
MANAGED_LEDGER = "managed-ledger"
CURSOR = "cursor"
SCHEMA = "schema"


def check_name(name: str) -> str | None:
    """Why ``name`` cannot be a leftover's (a tenant, a v2 or v1 namespace); None: it can.
    A name that could reach outside its roots (``..``, an empty level) is never walked."""
    parts = name.split("/")
    if not 1 <= len(parts) <= 3:
        return f"{name!r} is not a tenant or namespace name (1 to 3 levels)"
    if any(part in ("", ".", "..") for part in parts):
        return f"{name!r} has an empty or relative level"
    return None


def policies_path(name: str) -> str:
    """The configuration store's znode that says ``name`` exists: a namespace's Policies
    (v2 ``/admin/policies/t/ns``, v1 ``/admin/policies/p/c/ns``), a tenant's TenantInfo."""
    return f"{roots.POLICIES}/{name}"


def tenant_path(name: str) -> str:
    return f"{roots.POLICIES}/{judge.tenant_of(name)}"


def broker_path(broker: str) -> str:
    return f"{roots.BROKERS}/{broker}"


def ownership_path(name: str) -> str:
    """Where a broker that owns one of the namespace's bundles has its ephemeral znode."""
    return f"{roots.OWNERSHIP}/{name}"


def unit_nodes(store: str, name: str) -> list[str]:
    """The nodes the delete walks a leftover of ``name`` from (``roots.unit_paths``),
    but ``/schemas/<p/c/ns>`` for a v1 name: Pulsar keys a v1 topic's schema without its
    cluster (``p/ns/<topic>``), so that node is never the v1 namespace's; it is the
    schema of topic ``ns`` of a v2 namespace ``p/c`` named like the v1 cluster."""
    paths = roots.unit_paths(store, name)
    if store != LOCAL or len(name.split("/")) != 3:
        return paths
    return [p for p in paths if not p.startswith(f"{roots.SCHEMAS}/")]


def belongs(store: str, name: str, path: str, child: str) -> bool:
    """Whether ``child`` of ``path`` (a znode of the leftover of ``name``) is the
    leftover's too, or another unit's node that a walk must never enter: below a v2
    namespace named like a v1 cluster of its tenant (``acme/us-east``) live the v1
    namespaces of that cluster (``acme/us-east/legacy``). So in the local store a
    namespace's managed-ledger node holds only its domains, its bundle-keyed nodes
    only bundle ranges, and its local policies (a record) nothing of its own."""
    if store != LOCAL or roots.is_tenant_name(name):
        return True
    for root in roots.LOCAL_ROOTS:
        if path != f"{root.path}/{name}":
            continue
        if root.path == roots.MANAGED_LEDGERS:
            return child in DOMAINS
        if root.bundle_keyed:
            return roots.BUNDLE_RANGE.fullmatch(child) is not None
        return root.path != roots.LOCAL_POLICIES
    return True


def v2_level(name: str) -> str | None:
    """The v2 namespace ``p/c`` a v1 name ``p/c/ns`` may share nodes with (a v2
    namespace named like the v1 cluster); None for other names."""
    parts = name.split("/")
    return "/".join(parts[:2]) if len(parts) == 3 else None


def v2_own_node(name: str, level_policies: bytes | None) -> str | None:
    """Why the v1 name ``p/c/x`` is the live v2 namespace ``p/c``'s own node (None: it
    is not), given ``/admin/policies/p/c``'s data (None: absent). Where that holds a
    namespace's Policies, ``<root>/p/c/<bundle range>`` is one of its bundles (below the
    bundle-keyed roots a v1 cluster's namespaces and a v2 namespace's bundles are
    siblings) and ``/managed-ledgers/p/c/persistent`` its domain, which holds its topics:
    a leftover of such a name cannot be told from that namespace's znodes and is kept."""
    level = v2_level(name)
    if level is None or not is_policies(level_policies):
        return None
    last = name.rsplit("/", 1)[1]
    if last in DOMAINS or roots.BUNDLE_RANGE.fullmatch(last):
        return (
            f"{name} is a node of the live v2 namespace {level} (whose policies exist): "
            f"{'its domain' if last in DOMAINS else 'one of its bundles'}, not a v1 namespace"
        )
    return None


def v1_candidates(name: str, clusters: list[str]) -> list[str]:
    """The v1 namespaces ``p/<cluster>/ns`` that a two-level name ``p/ns`` may stand for
    (Pulsar keys a v1 topic's schema without its cluster), given the children of
    ``/admin/policies/p``; none for other names."""
    parts = name.split("/")
    if len(parts) != 2:
        return []
    return [f"{parts[0]}/{cluster}/{parts[1]}" for cluster in sorted(clusters)]


def live_class(
    name: str,
    *,
    tenant: bool,
    policies: Mapping[str, bytes],
    broker_registered: bool,
) -> str | None:
    """What ``name`` is now (None: live), by the survey's rules over what the stores say
    now: whether its tenant exists, the policies znodes of it (and of the v1 namespaces
    it may stand for) that exist with their bytes, and whether a heartbeat name's broker
    is registered."""
    broker = judge.heartbeat_broker(name)
    facts = judge.Facts(
        tenants=frozenset([judge.tenant_of(name)] if tenant else []),
        policies={ns: judge.policy_facts(data, 0) for ns, data in policies.items()},
        brokers=frozenset([broker] if broker is not None and broker_registered else []),
        now_ms=0,
        grace_ms=0,
    )
    if roots.is_tenant_name(name):
        return judge.judge_tenant(name, facts).target_class
    return judge.judge_namespace(name, facts).target_class


def named_ledgers_as(store: str, name: str, path: str) -> tuple[str, str] | None:
    """How a record's bytes name BookKeeper ledgers, and its owner: (MANAGED_LEDGER, the
    managed ledger's name), (CURSOR, its managed ledger's name), (SCHEMA, the schema
    id); None for a record that names none (policies, bundle data, quotas, metadata)."""
    if store != LOCAL or roots.is_tenant_name(name):
        return None
    for tree in (roots.MANAGED_LEDGERS, roots.SCHEMAS):
        node = f"{tree}/{name}"
        if not path.startswith(f"{node}/"):
            continue
        levels = path[len(node) + 1 :].split("/")
        if tree == roots.MANAGED_LEDGERS and len(levels) == 2:
            return MANAGED_LEDGER, f"{name}/{levels[0]}/{levels[1]}"
        if tree == roots.MANAGED_LEDGERS and len(levels) == 3:
            return CURSOR, f"{name}/{levels[0]}/{levels[1]}"
        if tree == roots.SCHEMAS and len(levels) == 1:
            return SCHEMA, f"{name}/{levels[0]}"
    return None


def ancestors(path: str) -> list[str]:
    """Every znode above ``path`` below the chroot's root, shallowest first."""
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]
