"""What Pulsar's own metadata leaves behind, as orphan classes and targets (pure).

DESIGN.md "Pulsar's own metadata". The unit the engine registers, re-checks and deletes
is one *leftover*: the znodes of one namespace (``tenant/ns``, v1 ``property/cluster/ns``)
or one tenant in one store (``local``: Pulsar's ``metadataStoreUrl``; ``config``: its
configuration store), keyed ``pulsar-metadata:<store>:<name>``. Three classes are
deleted under the three phases:

* ``pm-deleted-namespace``: local-store znodes of a namespace whose policies are gone
  while its tenant exists;
* ``pm-deleted-tenant``: those of a tenant whose policies are gone, and its
  partitioned-topic metadata in the configuration store;
* ``pm-dead-broker``: a heartbeat or SLA-monitor namespace (no policies by design) whose
  broker is not registered under ``/loadbalance/brokers``.

Three are reported and never deleted: ``pm-stuck-delete`` (``Policies.deleted`` or a
partitioned topic's ``deleted`` set for longer than the grace window),
``pm-not-replicated-here`` (``replication_clusters`` excludes this cluster: Pulsar may
add it back), and ``bk-missing`` (a record names a BookKeeper ledger that does not exist
and is not offloaded with ``bookkeeperDeleted``: that topic cannot be read).

A leftover's znodes are either *records* (a managed ledger, a cursor, a schema locator,
local policies, bundle data, a resource quota, partitioned-topic metadata) or
*parents* (the path nodes above them). A cycle deletes a leftover's records, leaves
first, and never a parent it emptied: a client cannot tell a container parent (which
ZooKeeper removes once empty) from a persistent one, so a parent still there on a later
cycle, past the grace window, with no record below it, is removed then (``to_delete``).
Ephemeral znodes are never deleted: one below a leftover (an owned bundle) holds it all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PM_DELETED_NAMESPACE = "pm-deleted-namespace"
PM_DELETED_TENANT = "pm-deleted-tenant"
PM_DEAD_BROKER = "pm-dead-broker"
PM_STUCK_DELETE = "pm-stuck-delete"
PM_NOT_REPLICATED_HERE = "pm-not-replicated-here"
BK_MISSING = "bk-missing"

#: The classes deleted under the three phases (registry target classes).
PM_ORPHAN_CLASSES = (PM_DELETED_NAMESPACE, PM_DELETED_TENANT, PM_DEAD_BROKER)
#: Reported, never registered or deleted.
PM_REPORT_CLASSES = (PM_STUCK_DELETE, PM_NOT_REPLICATED_HERE, BK_MISSING)
PM_CLASSES = (*PM_ORPHAN_CLASSES, *PM_REPORT_CLASSES)

#: The two metadata stores (DESIGN.md): where a leftover's znodes are.
LOCAL = "local"
CONFIG = "config"
STORES = (LOCAL, CONFIG)

EXPLANATIONS = {
    PM_DELETED_NAMESPACE: (
        "znodes of a namespace whose policies are gone from the configuration store "
        "while its tenant exists (a namespace delete that stopped half way, Pulsar 11734)"
    ),
    PM_DELETED_TENANT: (
        "znodes of a tenant whose policies are gone, and its partitioned-topic metadata "
        "(Pulsar 12968)"
    ),
    PM_DEAD_BROKER: (
        "a heartbeat or SLA-monitor namespace whose broker is no longer registered under "
        "/loadbalance/brokers"
    ),
    PM_STUCK_DELETE: (
        "a namespace or partitioned topic marked deleted=true for longer than the grace "
        "window: its delete stopped; finish it with pulsar-admin (never deleted here)"
    ),
    PM_NOT_REPLICATED_HERE: (
        "a namespace whose replication_clusters excludes this cluster: Pulsar may add it "
        "back (never deleted here)"
    ),
    BK_MISSING: (
        "a managed ledger, cursor or schema names a BookKeeper ledger that does not exist "
        "and is not offloaded with bookkeeperDeleted=true: Pulsar's 'No such ledger'"
    ),
}

#: Names a manifest lists at most (its counts say how many there are).
MAX_LISTED = 50

#: A registry target of a leftover: ``pulsar-metadata:<store>:<name>``.
TARGET_SCHEME = "pulsar-metadata:"


def target_of(store: str, name: str) -> str:
    """The registry prefix of the leftover of ``name`` (a tenant or namespace) in ``store``."""
    if store not in STORES:
        raise ValueError(f"{store!r} is not a metadata store ({', '.join(STORES)})")
    return f"{TARGET_SCHEME}{store}:{name}"


def parse_target(prefix: str) -> tuple[str, str] | None:
    """(store, name) of a leftover's registry prefix; None for any other target."""
    if not prefix.startswith(TARGET_SCHEME):
        return None
    store, sep, name = prefix[len(TARGET_SCHEME) :].partition(":")
    return (store, name) if sep and store in STORES and name else None


# What a leftover's znode is.
RECORD = "record"
PARENT = "parent"


@dataclass(frozen=True)
class Znode:
    """One znode of a leftover as a read saw it."""

    path: str  # below the store's chroot
    kind: str  # RECORD | PARENT
    version: int  # its data version
    data_length: int
    children: int
    ephemeral_owner: int = 0  # non-zero: ephemeral (never deleted; holds the leftover)
    mtime_ms: int = 0  # ZooKeeper's clock
    # BookKeeper ledger ids the record names (a managed ledger's list and markers, a
    # cursor's ledger, a compacted or bucket ledger, a schema's index): handed to the
    # BookKeeper source by id when the record is removed.
    ledger_ids: tuple[int, ...] = ()

    @property
    def depth(self) -> int:
        return self.path.count("/")


def to_delete(znodes: list[Znode]) -> list[Znode]:
    """The znodes one cycle removes from a leftover, deepest first: every record, or,
    when no record is left, every parent (then persistent ones that outlived a cycle and
    the grace window). Nothing when any znode is ephemeral (a broker owns a bundle)."""
    if any(z.ephemeral_owner for z in znodes):
        return []
    records = [z for z in znodes if z.kind == RECORD]
    chosen = records or [z for z in znodes if z.kind == PARENT]
    return sorted(chosen, key=lambda z: (-z.depth, z.path))


@dataclass
class LeftoverTotals:
    """Leftovers, znodes and their data bytes of a class in a store, and the BookKeeper
    ledgers those znodes name (their bytes, where the BookKeeper survey saw them)."""

    leftovers: int = 0
    znodes: int = 0
    bytes: int = 0
    ledgers: int = 0
    ledger_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "leftovers": self.leftovers,
            "znodes": self.znodes,
            "bytes": self.bytes,
            "ledgers": self.ledgers,
            "ledger_bytes": self.ledger_bytes,
        }


@dataclass
class PulsarMetadataManifest:
    """The ``pulsar_metadata`` part of a cycle's ``DiffRecord`` (None: the source is off).

    ``classes``: class -> store -> totals (the registered classes: leftovers not held;
    the report classes: findings); ``samples``: class -> a few leftovers (name,
    store, why, znodes, ledgers, and for ``pm-stuck-delete`` the ``pulsar-admin`` command
    that finishes it; for ``bk-missing`` the topic and ledger); ``local_znodes``: the
    znodes of the local store's Pulsar roots the survey counted; ``held``: leftovers a
    broker's bundle ownership holds (a few, with why; ``held_count`` and
    ``held_targets`` all);
    ``leftovers``: every leftover's target -> class (held ones too), which the report
    joins with the BookKeeper survey's ``leftover_ledgers``;
    ``namespaces_with_topics``/``deleted_with_topics``: the guard's evidence (namespaces
    with managed ledgers, heartbeats aside, and those of them judged deleted);
    ``registered_reasons``: registered targets not found now -> why; ``cost``: znodes
    read and seconds."""

    local_hosts: str
    config_hosts: str
    namespaces: int = 0
    tenants: int = 0
    local_znodes: int = 0
    classes: dict[str, dict[str, LeftoverTotals]] = field(default_factory=dict)
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    held: list[dict[str, Any]] = field(default_factory=list)
    held_count: int = 0
    held_targets: list[str] = field(default_factory=list)
    leftovers: dict[str, str] = field(default_factory=dict)
    namespaces_with_topics: int = 0
    deleted_with_topics: list[str] = field(default_factory=list)
    registered_reasons: dict[str, str] = field(default_factory=dict)
    cost: dict[str, Any] = field(default_factory=dict)

    def to_manifest(self) -> dict[str, Any]:
        return {
            "local_hosts": self.local_hosts,
            "config_hosts": self.config_hosts,
            "namespaces": self.namespaces,
            "tenants": self.tenants,
            "local_znodes": self.local_znodes,
            "classes": {
                cls: {store: t.to_dict() for store, t in sorted(per.items())}
                for cls, per in self.classes.items()
            },
            "explanations": dict(EXPLANATIONS),
            "samples": self.samples,
            "held": self.held,
            "held_count": self.held_count,
            "held_targets": sorted(self.held_targets),
            "leftovers": dict(sorted(self.leftovers.items())),
            "namespaces_with_topics": self.namespaces_with_topics,
            "deleted_with_topics": self.deleted_with_topics[:MAX_LISTED],
            "deleted_with_topics_count": len(self.deleted_with_topics),
            "registered_reasons": self.registered_reasons,
            "cost": self.cost,
        }
