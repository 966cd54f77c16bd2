"""Where a namespace's or tenant's znodes are in each store, and which of them are
records (pure). DESIGN.md "Pulsar's own metadata".

A leftover is one name's znodes in one store. In the local store (Pulsar's
``metadataStoreUrl``) a namespace ``N`` (``tenant/ns``, v1 ``property/cluster/ns``) has
up to six roots: its managed ledgers and cursors (``/managed-ledgers/N``), its schema
locators (``/schemas/N``), its local policies (``/admin/local-policies/N``), its bundles'
ownership (``/namespace/N/<range>``, ephemeral), and the load manager's data and quotas
of its bundles (``/loadbalance/bundle-data/N/<range>``,
``/loadbalance/resource-quota/namespace/N/<range>``). A tenant ``T`` has a unit of its
own where one of those roots holds ``<root>/T`` and no namespace below it (what is left
once its namespaces are gone). In the configuration store a deleted tenant's unit is its
partitioned-topic metadata, ``/admin/partitioned-topics/T``.

Which levels are namespaces: ``/managed-ledgers`` is read by ``rules.metadata.namespaces``
(a v1 namespace may be called ``persistent``). Below the bundle-keyed roots a v2
namespace's node holds bundle ranges (``0x00000000_0x40000000``), a v1 property/cluster's
holds namespaces (``bundle_keyed_namespaces``); below ``/admin/local-policies`` a v2
namespace's node is a leaf, a v1 cluster's has children (``local_policies_namespaces``).
Schemas are keyed ``tenant/ns/topic`` (Pulsar keys a v1 topic's schema without its
cluster).

A znode of a unit is a *record* at or below the depth its root keeps records (a managed
ledger and its cursors two levels below the namespace's node, a schema locator or a
bundle's data one level below, the local policies the node itself), or where it holds
data; the path nodes above are *parents*. In a tenant's unit, and in the configuration
store's partitioned-topic tree, a znode holding data is a record, the rest parents.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ledger_gc.rules.pulsar_metadata.classes import CONFIG, LOCAL, PARENT, RECORD, STORES

MANAGED_LEDGERS = "/managed-ledgers"
SCHEMAS = "/schemas"
LOCAL_POLICIES = "/admin/local-policies"
OWNERSHIP = "/namespace"
BUNDLE_DATA = "/loadbalance/bundle-data"
RESOURCE_QUOTA = "/loadbalance/resource-quota/namespace"
#: Registered brokers (local store, ephemeral children ``<host:port>``).
BROKERS = "/loadbalance/brokers"
#: The configuration store's.
POLICIES = "/admin/policies"
PARTITIONED_TOPICS = "/admin/partitioned-topics"
CLUSTERS = "/admin/clusters"

#: A bundle's name below ``/namespace/<ns>`` and the load manager's roots.
BUNDLE_RANGE = re.compile(r"0x[0-9a-fA-F]{8}_0x[0-9a-fA-F]{8}")


@dataclass(frozen=True)
class Root:
    """One root of a store's leftovers."""

    path: str
    # How far below a namespace's node its records start (None: where data is).
    record_depth: int | None
    # Its namespaces' nodes hold bundle ranges.
    bundle_keyed: bool = False


LOCAL_ROOTS = (
    Root(MANAGED_LEDGERS, 2),
    Root(SCHEMAS, 1),
    Root(LOCAL_POLICIES, 0),
    Root(OWNERSHIP, 1, bundle_keyed=True),
    Root(BUNDLE_DATA, 1, bundle_keyed=True),
    Root(RESOURCE_QUOTA, 1, bundle_keyed=True),
)
CONFIG_ROOTS = (Root(PARTITIONED_TOPICS, None),)
ROOTS = {LOCAL: LOCAL_ROOTS, CONFIG: CONFIG_ROOTS}


def roots_of(store: str) -> tuple[Root, ...]:
    if store not in STORES:
        raise ValueError(f"{store!r} is not a metadata store ({', '.join(STORES)})")
    return ROOTS[store]


def unit_paths(store: str, name: str) -> list[str]:
    """The nodes a unit's znodes hang from (each may be absent): ``<root>/<name>`` for
    each root of ``store``."""
    return [f"{root.path}/{name}" for root in roots_of(store)]


def root_of(path: str, store: str) -> Root | None:
    """The root a znode path is under (None: under none of ``store``'s)."""
    for root in roots_of(store):
        if path.startswith(root.path + "/"):
            return root
    return None


def is_tenant_name(name: str) -> bool:
    """A unit named by a tenant alone (no ``/``)."""
    return "/" not in name


def kind_of(path: str, store: str, name: str, data_length: int) -> str:
    """RECORD or PARENT: a znode of unit ``name`` in ``store`` (module docstring)."""
    if data_length > 0:
        return RECORD
    root = root_of(path, store)
    if root is None or root.record_depth is None or is_tenant_name(name):
        return PARENT
    node = f"{root.path}/{name}"
    if path != node and not path.startswith(node + "/"):
        return PARENT
    depth = 0 if path == node else path[len(node) + 1 :].count("/") + 1
    return RECORD if depth >= root.record_depth else PARENT


def bundle_keyed_namespaces(tenant: str, levels: Mapping[str, Sequence[str]]) -> list[str]:
    """The namespaces below ``<root>/<tenant>`` of a bundle-keyed root, from the children
    of each ``<tenant>/<x>`` (``levels``: ``x`` -> its children): a node holding bundle
    ranges, or nothing, is a v2 namespace ``tenant/x``; one holding other names is a v1
    property/cluster, whose children are its namespaces ``tenant/x/<ns>``; one holding
    both is both (a v2 namespace named like a v1 cluster of its tenant: a bundle range
    is that namespace's bundle, never a v1 namespace's name)."""
    found = []
    for level, children in sorted(levels.items()):
        bundles = [child for child in children if BUNDLE_RANGE.fullmatch(child)]
        if bundles or not children:
            found.append(f"{tenant}/{level}")
        found += [f"{tenant}/{level}/{child}" for child in sorted(children) if child not in bundles]
    return found


def local_policies_namespaces(tenant: str, levels: Mapping[str, Sequence[str]]) -> list[str]:
    """The namespaces below ``/admin/local-policies/<tenant>``: a leaf ``x`` is the v2
    namespace ``tenant/x``; a node with children is a v1 cluster holding namespaces."""
    found = []
    for level, children in sorted(levels.items()):
        if children:
            found += [f"{tenant}/{level}/{child}" for child in sorted(children)]
        else:
            found.append(f"{tenant}/{level}")
    return found
