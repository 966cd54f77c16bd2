"""Where one leftover's znodes are, which of them are records, and what it is now (pure).

DESIGN.md "Pulsar's own metadata" and issue 34's shared design. A leftover (one registry
target, ``pulsar-metadata:<store>:<name>``) is the znodes of one namespace, or one
tenant, in one store. Its delete re-derives those znodes live from the roots named
here (``leftover_roots``), tells records from parents (``kind_of``: ``classes.to_delete``
removes records first, parents only on a later cycle) and judges the name again from
what the stores say now (``live_class``): a leftover whose class changed is not deleted.

* Local store, namespace N (``tenant/ns``, v1 ``property/cluster/ns``, a heartbeat or
  SLA-monitor namespace): ``/managed-ledgers/N``, ``/schemas/N``,
  ``/admin/local-policies/N``, ``/namespace/N``, ``/loadbalance/bundle-data/N``,
  ``/loadbalance/resource-quota/namespace/N``.
* Local store, tenant T (a name of one level): the same roots of T, and only them: a
  tenant-level leftover is the path nodes a deleted tenant left with no namespace below
  (an empty ``/managed-ledgers/T``); anything below is a namespace's leftover of its own,
  removed first (``tenant_level`` tells the delete to hold it until then).
* Configuration store, tenant or namespace X: ``/admin/partitioned-topics/X``.
"""

from __future__ import annotations

from ledger_gc.rules.pulsar_metadata.classes import (
    CONFIG,
    LOCAL,
    PARENT,
    PM_DEAD_BROKER,
    PM_DELETED_NAMESPACE,
    PM_DELETED_TENANT,
    RECORD,
    STORES,
)

MANAGED_LEDGERS = "/managed-ledgers"
SCHEMAS = "/schemas"
LOCAL_POLICIES = "/admin/local-policies"
OWNERSHIP = "/namespace"
BUNDLE_DATA = "/loadbalance/bundle-data"
RESOURCE_QUOTA = "/loadbalance/resource-quota/namespace"
PARTITIONED_TOPICS = "/admin/partitioned-topics"
POLICIES = "/admin/policies"
BROKERS = "/loadbalance/brokers"

#: The local store's trees that hold a namespace's znodes, in the order they are read.
LOCAL_TREES = (MANAGED_LEDGERS, SCHEMAS, LOCAL_POLICIES, OWNERSHIP, BUNDLE_DATA, RESOURCE_QUOTA)
CONFIG_TREES = (PARTITIONED_TOPICS,)

#: What a record names BookKeeper ledgers as (how its bytes decode).
MANAGED_LEDGER = "managed-ledger"
CURSOR = "cursor"
SCHEMA = "schema"

#: Tenants of heartbeat (``pulsar/<broker>``, ``pulsar/<cluster>/<broker>``) and
#: SLA-monitor (``sla-monitor/<cluster>/<broker>``) namespaces: no policies by design.
HEARTBEAT_TENANT = "pulsar"
SLA_MONITOR_TENANT = "sla-monitor"


def check_name(name: str) -> str | None:
    """Why ``name`` cannot be a leftover's (a tenant, a v2 or v1 namespace); None: it can.
    A name that could reach outside its roots (``..``, an empty level) is never walked."""
    parts = name.split("/")
    if not 1 <= len(parts) <= 3:
        return f"{name!r} is not a tenant or namespace name (1 to 3 levels)"
    if any(part in ("", ".", "..") for part in parts):
        return f"{name!r} has an empty or relative level"
    return None


def tenant_level(name: str) -> bool:
    """A leftover of a tenant itself (one level), not of one of its namespaces."""
    return "/" not in name


def tenant_of(name: str) -> str:
    return name.split("/", 1)[0]


def policies_path(name: str) -> str:
    """The configuration store's znode that says ``name`` exists: a namespace's Policies
    (v2 ``/admin/policies/t/ns``, v1 ``/admin/policies/p/c/ns``), a tenant's TenantInfo."""
    return f"{POLICIES}/{name}"


def tenant_path(name: str) -> str:
    return f"{POLICIES}/{tenant_of(name)}"


def heartbeat_broker(name: str) -> str | None:
    """The broker (``host:port``) of a heartbeat or SLA-monitor namespace; None for any
    other name."""
    parts = name.split("/")
    if parts[0] == HEARTBEAT_TENANT and len(parts) in (2, 3):
        return parts[-1]
    if parts[0] == SLA_MONITOR_TENANT and len(parts) == 3:
        return parts[-1]
    return None


def broker_path(broker: str) -> str:
    return f"{BROKERS}/{broker}"


def ownership_path(name: str) -> str:
    """Where a broker that owns one of the namespace's bundles has its ephemeral znode."""
    return f"{OWNERSHIP}/{name}"


def live_class(
    name: str, *, policies: bool, tenant: bool, broker_registered: bool | None
) -> str | None:
    """What ``name`` is now, from what the stores say (first match wins, as the survey
    judges): None is live. ``broker_registered``: whether a heartbeat name's broker is
    under ``/loadbalance/brokers`` (None for other names)."""
    if heartbeat_broker(name) is not None and not policies:
        return None if broker_registered else PM_DEAD_BROKER
    if policies:
        return None
    if tenant_level(name) or not tenant:
        return PM_DELETED_TENANT
    return PM_DELETED_NAMESPACE


def leftover_roots(store: str, name: str) -> tuple[str, ...]:
    """The znodes below which a leftover's znodes are, in ``store``."""
    if store not in STORES:
        raise ValueError(f"{store!r} is not a metadata store ({', '.join(STORES)})")
    why = check_name(name)
    if why is not None:
        raise ValueError(why)
    trees = LOCAL_TREES if store == LOCAL else CONFIG_TREES
    return tuple(f"{tree}/{name}" for tree in trees)


def _under(store: str, name: str, path: str) -> tuple[str, list[str]]:
    """The tree of ``path`` and its levels below the leftover's root there."""
    for root in leftover_roots(store, name):
        if path == root or path.startswith(f"{root}/"):
            rest = path[len(root) + 1 :]
            return root[: -len(name) - 1], rest.split("/") if rest else []
    raise ValueError(f"{path} is not below a root of {name} in the {store} store")


def kind_of(store: str, name: str, path: str, data_length: int) -> str:
    """RECORD or PARENT: what Pulsar wrote as a record, or a path node above records.

    Managed ledgers: the namespace and its domains (``persistent``) are parents, each
    topic's znode (even with no data: created, never loaded) and its cursors records.
    Local policies: the znode itself is the record. Schemas, bundle ownership, bundle
    data, resource quotas: the namespace's node is a parent, what is below records.
    Partitioned-topic metadata: a znode with data (its JSON) is a record, an empty one a
    path node. A tenant-level leftover has parents only."""
    tree, levels = _under(store, name, path)
    if store == CONFIG:
        return RECORD if data_length > 0 else PARENT
    if tenant_level(name):
        return PARENT
    if tree == MANAGED_LEDGERS:
        return RECORD if len(levels) >= 2 else PARENT
    if tree == LOCAL_POLICIES:
        return RECORD
    return RECORD if levels else PARENT


def named_ledgers_as(store: str, name: str, path: str) -> tuple[str, str] | None:
    """How a record's bytes name BookKeeper ledgers, and its owner: (MANAGED_LEDGER, the
    managed ledger's name), (CURSOR, its managed ledger's name), (SCHEMA, the schema
    id); None for a record that names none (policies, bundle data, quotas, metadata)."""
    if store != LOCAL or tenant_level(name):
        return None
    tree, levels = _under(store, name, path)
    if tree == MANAGED_LEDGERS and len(levels) == 2:
        return MANAGED_LEDGER, f"{name}/{levels[0]}/{levels[1]}"
    if tree == MANAGED_LEDGERS and len(levels) == 3:
        return CURSOR, f"{name}/{levels[0]}/{levels[1]}"
    if tree == SCHEMAS and len(levels) == 1:
        return SCHEMA, f"{name}/{levels[0]}"
    return None


def ancestors(path: str) -> list[str]:
    """Every znode above ``path`` below the chroot's root, shallowest first."""
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]
