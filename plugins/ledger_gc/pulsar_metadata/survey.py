"""The Pulsar-metadata source's survey: both stores read, each leftover found and judged.

Order (DESIGN.md "Pulsar's own metadata", ``rules/pulsar_metadata``):

1. the configuration store's sanity, before anything is judged (``_config_facts``): a
   store without ``/admin/policies`` or without a tenant is a wrong address (refused when
   one is given or the source is on by ``LEDGERGC_PULSAR_METADATA=true``; under ``auto``
   with none given the source is off, with a warning: ledger-gc's own block-store setups
   have no policies), and one whose ``/admin/clusters`` names none of this cluster's
   names is another cluster's;
2. Pulsar's references to BookKeeper ledgers, read once (``bookkeeper.references``) and
   handed to the BookKeeper survey of the same cycle (``SurveyRequest.shared``), so
   ``/managed-ledgers`` is walked once per cycle (its tree not even once here when the
   S3 source's survey listed it: ``tree``);
3. the local store's roots level by level, pipelined: each namespace (v1 and v2) and
   each tenant with no namespace below it, in each root where it is one
   (``rules/pulsar_metadata/roots.py``); ``/managed-ledgers`` and ``/schemas`` as
   listed once for the references' read, not listed again;
4. the configuration store's facts for those names (policies, tenants, partitioned
   topics) and the registered brokers, each judged (``rules/pulsar_metadata/judge.py``);
5. each leftover's znodes read with their stats (only leftovers: a healthy cluster costs
   no more than the listing), held when one is ephemeral (a bundle owned), else one
   candidate per leftover.

Ages are ZooKeeper's: the znodes' mtimes against ZooKeeper's clock now (``witness``),
never this host's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger_gc.bookkeeper import references
from ledger_gc.bookkeeper.references import COMPACTION_CURSOR, SCHEMAS_ROOT
from ledger_gc.config.endpoints import Endpoints
from ledger_gc.errors import ConfigError
from ledger_gc.metadata.config_store import configuration_store
from ledger_gc.metadata.read_budget import METER
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.bookkeeper.classify import PulsarReferences
from ledger_gc.rules.metadata.namespaces import DOMAIN, ManagedLedgerTree, is_v2_name
from ledger_gc.rules.pulsar_metadata import judge, roots
from ledger_gc.rules.pulsar_metadata.classes import (
    CONFIG,
    LOCAL,
    PM_DELETED_NAMESPACE,
    PM_DELETED_TENANT,
    PM_ORPHAN_CLASSES,
    PM_STUCK_DELETE,
    RECORD,
    LeftoverTotals,
    PulsarMetadataManifest,
    Znode,
    parse_target,
    target_of,
)
from ledger_gc.rules.pulsar_metadata.judge import Facts, Judgement, Report
from ledger_gc.rules.pulsar_metadata.roots import Root

if TYPE_CHECKING:
    from ledger_gc.orphans.witness import ServerClocks

log = logging.getLogger(__name__)

MAX_SAMPLES = 50
#: The variable that names the configuration store (named by its refusals).
CONFIG_STORE_VARIABLE = "LEDGERGC_CONFIG_STORE_HOSTS"


@dataclass
class Leftover:
    """One unit judged a leftover: its znodes in one store."""

    store: str
    name: str
    judgement: Judgement
    znodes: list[Znode] = field(default_factory=list)
    held: str | None = None  # why it is held (an owned bundle)

    @property
    def target(self) -> str:
        return target_of(self.store, self.name)

    @property
    def ledger_ids(self) -> set[int]:
        return {lid for z in self.znodes for lid in z.ledger_ids}

    def candidate(self) -> dict[str, Any]:
        """Its ``Candidate`` fields (``rules/orphans/classify.py``)."""
        mtimes = [z.mtime_ms for z in self.znodes] or [0]
        return {
            "target_class": self.judgement.target_class,
            "ml_name": self.name,
            "ledger_id": None,
            "objects": len(self.znodes),
            "bytes": sum(z.data_length for z in self.znodes),
            "newest_ms": max(mtimes),
            "oldest_ms": min(mtimes),
            "segment": f"{self.store}:{self.name}",
        }

    def sample(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "name": self.name,
            "store": self.store,
            "class": self.judgement.target_class,
            "why": self.held or self.judgement.why,
            "znodes": len(self.znodes),
            "records": sum(1 for z in self.znodes if z.kind == RECORD),
            "bytes": sum(z.data_length for z in self.znodes),
            "ledgers": len(self.ledger_ids),
            "newest_ms": max((z.mtime_ms for z in self.znodes), default=None),
        }


@dataclass
class PulsarMetadataSurvey:
    """What one survey of Pulsar's metadata found."""

    manifest: PulsarMetadataManifest
    references: PulsarReferences
    leftovers: list[Leftover]

    @property
    def candidates(self) -> list[dict[str, Any]]:
        return [left.candidate() for left in self.leftovers if left.held is None]

    def leftover_ledgers(self) -> dict[int, str]:
        """Ledger id -> the target of the leftover whose records name it (held ones too:
        the report shows what every leftover holds back)."""
        return {lid: left.target for left in self.leftovers for lid in left.ledger_ids}


def survey(
    endpoints: Endpoints,
    *,
    witness: ServerClocks,
    registered: Iterable[str] | None = None,
    clock: Callable[[], int] = lambda: int(time.time() * 1000),
    tree: ManagedLedgerTree | None = None,
) -> PulsarMetadataSurvey | None:
    """Survey both stores; None when the source is off (``LEDGERGC_PULSAR_METADATA``
    false, or ``auto`` without ``/managed-ledgers``, or ``auto`` with no configuration
    store given and no ``/admin/policies`` in the local store). Raises ConfigError for a
    wrong configuration store. ``witness`` reads ZooKeeper's clock (the engine's, which
    tests shift): ages are ZooKeeper's. ``tree``: ``/managed-ledgers`` as this cycle's
    survey listed it a moment before (``SurveyRequest.shared``; None: listed here).
    ``registered``: the registry's prefixes of this source (``pulsar-metadata:``), read
    once at the end, for the reasons of those it does not find."""
    if not endpoints.pulsar_metadata_on:
        return None
    started = time.monotonic()
    mark = METER.mark()
    with stores(endpoints) as (local, config):
        if _sane_tenants(endpoints, local, config, tree=tree) is None:
            return None
        now_ms = witness.observe(endpoints.zk, clock).instant.zk_ms
        if now_ms is None:  # (never: ZooKeeper's clock is always read)
            raise RuntimeError("ZooKeeper's clock was not read")
        # /managed-ledgers (unless this cycle's S3 survey listed it) and /schemas listed
        # once: the references' read and the units' listing below both use them.
        if tree is None:
            tree = local.managed_ledger_tree(policies=config)
        schemas = references.list_schemas(local)
        # Pulsar's references, read once per cycle: the BookKeeper survey uses them.
        refs = references.read_references(local, policies=config, tree=tree, schemas=schemas)
        listing = _list_local(local, refs, tree, schemas)
        brokers = frozenset(local.children_of_many([roots.BROKERS])[0])
        # The configuration store's facts after everything they judge is listed: Pulsar
        # writes a tenant, then its namespaces' policies, then their local znodes and
        # partitioned topics, so a name listed above has its facts below (a tenant
        # created since the sanity check's read must not look deleted).
        config_tenants = config.children_of_many([roots.PARTITIONED_TOPICS])[0]
        tenants = frozenset(config.children_of_many([roots.POLICIES])[0])
        names = sorted(listing.namespaces)
        policies = _policies(config, names)
        policies.update(_v1_schema_owners(config, listing, policies))
        facts = Facts(
            tenants=tenants,
            policies=policies,
            brokers=brokers,
            now_ms=now_ms,
            grace_ms=endpoints.policy.grace_seconds * 1000,
            our_clusters=endpoints.policy.pulsar_clusters,
        )
        with_topics = _namespaces_with_topics(refs)
        by_name = {n: judge.judge_namespace(n, facts, has_topics=n in with_topics) for n in names}
        by_tenant = {t: judge.judge_tenant(t, facts) for t in sorted(listing.tenant_units)}
        judged = [*by_name.values(), *by_tenant.values()]
        reports = [r for j in judged for r in j.reports]
        live = [n for n, j in by_name.items() if j.target_class is None]
        reports += _stuck_topics(config, live, facts)
        every = {(LOCAL, j.name): j for j in judged}
        every.update({(CONFIG, j.name): j for j in _config_units(config_tenants, facts)})
        found = {key: j for key, j in every.items() if j.target_class is not None}
        nodes = {
            (store, name): (
                listing.nodes[name] if store == LOCAL else roots.unit_paths(CONFIG, name)
            )
            for store, name in found
        }
        every_node = frozenset(node for got in listing.nodes.values() for node in got)
        znodes = _read_units(local, config, nodes, refs, every_node)
        leftovers = [
            Leftover(store, name, found[(store, name)], got, judge.held_by(got))
            for (store, name), got in sorted(znodes.items())
        ]
        manifest = _manifest(endpoints, config, listing, tenants, leftovers, reports)
        manifest.namespaces_with_topics = len(with_topics - _system(with_topics))
        manifest.deleted_with_topics = sorted(
            n
            for n in with_topics
            if judge.heartbeat_broker(n) is None
            and n in by_name
            and by_name[n].target_class in (PM_DELETED_NAMESPACE, PM_DELETED_TENANT)
        )
        manifest.registered_reasons = _registered_reasons(registered or (), leftovers, every)
        reads = METER.since(mark)
        manifest.cost = {
            "zk_reads": sum(reads.values()),
            "zk_peak_reads_per_second": max(reads.values(), default=0),
            "seconds": round(time.monotonic() - started, 3),
        }
    return PulsarMetadataSurvey(manifest, refs, leftovers)


@contextmanager
def stores(endpoints: Endpoints) -> Iterator[tuple[MetadataStore, MetadataStore]]:
    """Sessions to the local store and the configuration store (one session when the
    configuration store is the local store's)."""
    with (
        MetadataStore.open(endpoints.zk) as local,
        configuration_store(local, endpoints.config_store) as config,
    ):
        yield local, config


def check_config_store(endpoints: Endpoints) -> bool:
    """Whether the source is on, after the configuration store's sanity checks, before a
    cycle starts anything: a wrong store raises ConfigError (one line, exit 2)."""
    if not endpoints.pulsar_metadata_on:
        return False
    with stores(endpoints) as (local, config):
        return _sane_tenants(endpoints, local, config, warn=False) is not None


def _sane_tenants(
    endpoints: Endpoints,
    local: MetadataStore,
    config: MetadataStore,
    *,
    warn: bool = True,
    tree: ManagedLedgerTree | None = None,
) -> frozenset[str] | None:
    """The configuration store's tenants, or None when the source is off (``auto`` and
    no ``/managed-ledgers`` in the local store, as ``tree`` saw it if this cycle listed
    it; see ``_tenants``)."""
    local.sync("/")
    if endpoints.pulsar_metadata_mode == "auto" and not (
        tree.exists if tree is not None else _exists(local, roots.MANAGED_LEDGERS)
    ):
        # Said by the survey, not by the checks before a cycle (whose stderr is the one
        # line of an error when a later check fails).
        if warn:
            log.info(
                "no %s in %s: the Pulsar-metadata source is off",
                roots.MANAGED_LEDGERS,
                local.hosts,
            )
        return None
    return _tenants(endpoints, config, warn=warn, local=local)


def _exists(store: MetadataStore, path: str) -> bool:
    return store.get_many([path])[0] is not None


# --- the configuration store's sanity ----------------------------------------------------


def config_store_given(endpoints: Endpoints) -> bool:
    """Whether a configuration store was named (``LEDGERGC_CONFIG_STORE_HOSTS`` or
    broker.conf's keys, even naming the local store's very endpoint), as opposed to
    defaulting to the local store."""
    return endpoints.config_store_given or endpoints.config_store is not None


def _tenants(
    endpoints: Endpoints,
    config: MetadataStore,
    *,
    warn: bool = True,
    local: MetadataStore | None = None,
) -> frozenset[str] | None:
    """The configuration store's tenants, after its sanity checks (module docstring);
    None: the source is off. ``local``: the local store, whose registered brokers'
    heartbeat namespaces name this cluster when ``LEDGERGC_PULSAR_CLUSTER`` does not."""
    config.sync("/")
    has_policies = _exists(config, roots.POLICIES)
    tenants = frozenset(config.children_of_many([roots.POLICIES])[0])
    given = config_store_given(endpoints)
    strict = given or endpoints.pulsar_metadata_mode == "true"
    where = f"the configuration store {config.hosts}"
    what = f"no {roots.POLICIES}" if not has_policies else f"no tenant under {roots.POLICIES}"
    if not tenants and not strict:
        # No tenant is no configuration store either (an empty /admin/policies left from
        # a single-store past): every namespace would look deleted.
        (log.warning if warn else log.debug)(
            "Pulsar-metadata source off: %s has %s (a ledger-gc block store, or "
            "Pulsar's configuration store is elsewhere: set %s to its "
            "configurationMetadataStoreUrl, or LEDGERGC_PULSAR_METADATA=false to silence this)",
            config.hosts,
            what,
            CONFIG_STORE_VARIABLE,
        )
        return None
    if strict and not tenants:
        raise ConfigError(
            f"{where} has {what}: it is not Pulsar's configuration store (set "
            f"{CONFIG_STORE_VARIABLE} to Pulsar's configurationMetadataStoreUrl); nothing "
            "was judged or deleted"
        )
    ours = [c for c in endpoints.policy.pulsar_clusters if not c.startswith("(")]
    source = "LEDGERGC_PULSAR_CLUSTER"
    if not ours and local is not None and tenants:
        # Unnamed: a store sharing this cluster's tenants and some namespace's name
        # would judge every other namespace deleted, and the guard of "every namespace
        # looks deleted" would stay quiet. A registered broker names this cluster.
        learned = learned_clusters(local)
        ours = sorted(learned)
        source = "; ".join(f"{name} names it" for name in sorted(learned.values()))
    if ours and _exists(config, roots.CLUSTERS):
        defined = set(config.children_of_many([roots.CLUSTERS])[0])
        if not defined & set(ours):
            raise ConfigError(
                f"{where} defines clusters {', '.join(sorted(defined)) or '(none)'} under "
                f"{roots.CLUSTERS}, not this cluster ({', '.join(ours)}, {source}): another "
                f"cluster's store? Set {CONFIG_STORE_VARIABLE} to this cluster's "
                "configurationMetadataStoreUrl; nothing was judged or deleted"
            )
    return tenants


def learned_clusters(local: MetadataStore) -> dict[str, str]:
    """This cluster's names as its local store proves them: cluster -> the heartbeat or
    SLA-monitor namespace (``pulsar/<cluster>/<broker>``, ``sla-monitor/<cluster>/<broker>``)
    of a broker registered under ``/loadbalance/brokers`` now (a broker runs with its
    cluster's ``clusterName``; a dead broker's heartbeat may be older than a rename)."""
    brokers = set(local.children_of_many([roots.BROKERS])[0])
    if not brokers:
        return {}
    bases = [
        f"{root.path}/{tenant}" for root in roots.LOCAL_ROOTS for tenant in judge.SYSTEM_TENANTS
    ]
    levels = [
        f"{base}/{level}"
        for base, got in zip(bases, local.children_of_many(bases), strict=True)
        for level in got
        if level not in brokers  # (a v2 heartbeat pulsar/<broker>)
    ]
    found: dict[str, str] = {}
    for level, children in zip(levels, local.children_of_many(levels), strict=True):
        for broker in sorted(brokers & set(children)):
            base, _, cluster = level.rpartition("/")
            tenant = base.rpartition("/")[2]
            found.setdefault(cluster, f"{tenant}/{cluster}/{broker}")
    return found


# --- the local store's units ---------------------------------------------------------------


@dataclass
class LocalListing:
    """The local store's namespaces and tenant units, each with the nodes it has there."""

    namespaces: set[str] = field(default_factory=set)
    tenant_units: set[str] = field(default_factory=set)
    nodes: dict[str, list[str]] = field(default_factory=dict)  # unit -> <root>/<name> nodes
    counted: int = 0  # znodes of the roots seen (the local store's count)

    def add(self, name: str, node: str, *, tenant: bool = False) -> None:
        (self.tenant_units if tenant else self.namespaces).add(name)
        self.nodes.setdefault(name, []).append(node)


def _list_local(
    local: MetadataStore,
    refs: PulsarReferences,
    tree: ManagedLedgerTree,
    schemas: references.SchemaTree,
) -> LocalListing:
    """Each root's tenants, then each tenant's namespaces (level by level, pipelined).
    ``/managed-ledgers`` and ``/schemas`` as listed for the references' read (``tree``:
    v1 beside v2, ``schemas``), never listed twice in one survey."""
    listing = LocalListing()
    unread = [
        root.path
        for root in roots.LOCAL_ROOTS
        if root.path not in (roots.MANAGED_LEDGERS, SCHEMAS_ROOT)
    ]
    tenants_of = dict(zip(unread, local.children_of_many(unread), strict=True))
    tenants_of[roots.MANAGED_LEDGERS] = list(tree.tenants)
    tenants_of[SCHEMAS_ROOT] = list(schemas)
    tenants_of = {root.path: tenants_of[root.path] for root in roots.LOCAL_ROOTS}
    listing.counted += sum(1 + len(t) for t in tenants_of.values())
    # /managed-ledgers: the namespaces the references' tree found (v1 and v2).
    ml_tenants = tenants_of[roots.MANAGED_LEDGERS]
    ml_namespaces = sorted(refs.namespaces)
    for name in ml_namespaces:
        listing.add(name, f"{roots.MANAGED_LEDGERS}/{name}")
    cursors = len(refs.cursors)
    listing.counted += 2 * len(ml_namespaces) + len(refs.listed) + cursors
    _tenant_units(listing, roots.MANAGED_LEDGERS, ml_tenants, ml_namespaces)
    # The others: tenant -> levels -> (bundle roots, local policies) one more level.
    others = [root for root in roots.LOCAL_ROOTS if root.path != roots.MANAGED_LEDGERS]
    tenant_nodes = [(root, t) for root in others for t in tenants_of[root.path]]
    level_lists = _levels(local, schemas, [f"{root.path}/{t}" for root, t in tenant_nodes])
    below = [
        (root, tenant, level)
        for (root, tenant), levels in zip(tenant_nodes, level_lists, strict=True)
        for level in levels
    ]
    listing.counted += len(below)
    deeper = _levels(local, schemas, [f"{root.path}/{t}/{lv}" for root, t, lv in below])
    listing.counted += sum(len(d) for d in deeper)
    per_tenant: dict[tuple[str, str], dict[str, list[str]]] = {}
    for (root, tenant), _ in zip(tenant_nodes, level_lists, strict=True):
        per_tenant[(root.path, tenant)] = {}
    for (root, tenant, level), children in zip(below, deeper, strict=True):
        per_tenant[(root.path, tenant)][level] = children
    for root in others:
        found_here: list[str] = []
        for tenant in tenants_of[root.path]:
            levels = per_tenant[(root.path, tenant)]
            names = _namespaces_below(root, tenant, levels)
            found_here += names
            for name in names:
                listing.add(name, f"{root.path}/{name}")
        _tenant_units(listing, root.path, tenants_of[root.path], found_here)
    if refs.schemas:
        listing.counted += len(refs.schemas)
    return listing


def _levels(
    local: MetadataStore, schemas: references.SchemaTree, nodes: list[str]
) -> list[list[str]]:
    """The children of each of ``nodes``: those under ``/schemas`` as ``schemas`` has
    them, the others listed now (pipelined, in one go)."""
    known: dict[str, list[str]] = {}
    for tenant, namespaces in schemas.items():
        known[f"{SCHEMAS_ROOT}/{tenant}"] = list(namespaces)
        for namespace, topics in namespaces.items():
            known[f"{SCHEMAS_ROOT}/{tenant}/{namespace}"] = list(topics)
    unread = [node for node in nodes if node not in known]
    known.update(zip(unread, local.children_of_many(unread), strict=True))
    return [known.get(node, []) for node in nodes]


def _namespaces_below(root: Root, tenant: str, levels: Mapping[str, list[str]]) -> list[str]:
    if root.bundle_keyed:
        return roots.bundle_keyed_namespaces(tenant, levels)
    if root.path == roots.LOCAL_POLICIES:
        return roots.local_policies_namespaces(tenant, levels)
    return [f"{tenant}/{level}" for level in sorted(levels)]  # /schemas/<t>/<ns>/<topic>


def _tenant_units(
    listing: LocalListing, root: str, tenants: Iterable[str], namespaces: Iterable[str]
) -> None:
    """A tenant of ``root`` with no namespace below it there is a unit of its own."""
    with_namespaces = {judge.tenant_of(name) for name in namespaces}
    for tenant in tenants:
        if tenant not in with_namespaces:
            listing.add(tenant, f"{root}/{tenant}", tenant=True)


def _namespaces_with_topics(refs: PulsarReferences) -> set[str]:
    """The namespaces holding a managed ledger (v2 ``t/ns/persistent/x``, v1
    ``p/c/ns/persistent/x``)."""
    return {
        name.rsplit("/", 2)[0] if is_v2_name(name) else "/".join(name.split("/")[:3])
        for name in refs.listed
    }


def _system(names: Iterable[str]) -> set[str]:
    return {name for name in names if judge.heartbeat_broker(name) is not None}


# --- the configuration store's facts -----------------------------------------------------


def _policies(config: MetadataStore, names: Sequence[str]) -> dict[str, judge.PolicyFacts]:
    """The policies of each namespace of ``names`` that has them."""
    got = config.get_many([f"{roots.POLICIES}/{name}" for name in names])
    return {
        name: judge.policy_facts(read[0], int(read[1].mtime))
        for name, read in zip(names, got, strict=True)
        if read is not None
    }


def _v1_schema_owners(
    config: MetadataStore, listing: LocalListing, policies: Mapping[str, judge.PolicyFacts]
) -> dict[str, judge.PolicyFacts]:
    """The policies of the v1 namespaces ``p/<cluster>/ns`` that own schemas listed as
    ``p/ns`` (Pulsar keys a v1 topic's schema without its cluster) where ``p/ns`` has no
    policies of its own: the judge's ``_v1_owner`` then keeps them. Read from the
    configuration store, since such a v1 namespace need have no other local znode to be
    listed by (its topics deleted or non-persistent, its bundles unowned)."""
    schemas = f"{roots.SCHEMAS}/"
    names = sorted(
        name
        for name, nodes in listing.nodes.items()
        if name.count("/") == 1
        and name not in policies
        and judge.heartbeat_broker(name) is None
        and any(node.startswith(schemas) for node in nodes)
    )
    if not names:
        return {}
    tenants = sorted({judge.tenant_of(name) for name in names})
    levels = [
        f"{tenant}/{level}"
        for tenant, got in zip(
            tenants,
            config.children_of_many([f"{roots.POLICIES}/{t}" for t in tenants]),
            strict=True,
        )
        for level in got
    ]
    # A v1 cluster's node holds its namespaces; a v2 namespace's none (one read per
    # level, not one per level and name).
    clusters: dict[str, list[str]] = {}
    below = config.children_of_many([f"{roots.POLICIES}/{level}" for level in levels])
    for level, children in zip(levels, below, strict=True):
        if children:
            clusters.setdefault(judge.tenant_of(level), []).append(level)
    candidates = [
        f"{level}/{name.split('/')[1]}"
        for name in names
        for level in clusters.get(judge.tenant_of(name), [])
    ]
    return _policies(config, candidates)


def _stuck_topics(config: MetadataStore, namespaces: Sequence[str], facts: Facts) -> list[Report]:
    """Partitioned topics of live namespaces marked deleted longer than the grace."""
    domains = [f"{roots.PARTITIONED_TOPICS}/{name}/persistent" for name in namespaces]
    topics = [
        f"{domain}/{topic}"
        for domain, children in zip(domains, config.children_of_many(domains), strict=True)
        for topic in children
    ]
    found = []
    for path, read in zip(topics, config.get_many(topics), strict=True):
        if read is None:
            continue
        relative = path[len(roots.PARTITIONED_TOPICS) + 1 :]
        report = judge.judge_partitioned_topic(relative, read[0], int(read[1].mtime), facts)
        if report is not None:
            found.append(report)
    return found


def _config_units(tenants: Iterable[str], facts: Facts) -> list[Judgement]:
    """Each tenant's partitioned-topic metadata in the configuration store (``tenants``:
    the children of its root, listed before ``facts`` were read), judged (a deleted
    tenant's is a leftover)."""
    return [judge.judge_tenant(tenant, facts) for tenant in sorted(tenants)]


# --- each leftover's znodes --------------------------------------------------------------


def _read_units(
    local: MetadataStore,
    config: MetadataStore,
    units: Mapping[tuple[str, str], Sequence[str]],
    refs: PulsarReferences | None,
    local_nodes: frozenset[str],
) -> dict[tuple[str, str], list[Znode]]:
    """Every znode below each unit's nodes, with its stat, read level by level
    (``local_nodes``: every local unit's nodes, leftover or not)."""
    found: dict[tuple[str, str], list[Znode]] = {}
    for store_name, store in ((LOCAL, local), (CONFIG, config)):
        mine = {key: nodes for key, nodes in units.items() if key[0] == store_name}
        read = read_units(
            store,
            store_name,
            {name: nodes for (_, name), nodes in mine.items()},
            refs,
            local_nodes if store_name == LOCAL else frozenset(),
        )
        found.update({(store_name, name): znodes for name, znodes in read.items() if znodes})
    return found


def live_unit_nodes(
    local: MetadataStore, config: MetadataStore, store_name: str, name: str
) -> tuple[list[str], frozenset[str]]:
    """The nodes unit ``name`` hangs from in ``store_name`` now, as the survey would list
    them, read for this one name (a delete's live re-check: ``read_units`` then reads
    its znodes); and the nodes below them that are other units' (never read as its own).

    A tenant's unit: each ``<root>/<tenant>`` with no child. A namespace's: each
    ``<root>/<name>`` that is a namespace's node there (``/managed-ledgers``: the level's
    shape, ``rules.metadata.namespaces``; bundle-keyed roots: a node of bundle ranges or
    an empty one; local policies: a leaf; a v1 name: its cluster level holds other
    names)."""
    if store_name == CONFIG:
        return roots.unit_paths(CONFIG, name), frozenset()
    candidates = roots.unit_paths(LOCAL, name)
    got = local.children_with_stats(candidates)
    if roots.is_tenant_name(name):
        return [n for n, read in zip(candidates, got, strict=True) if read and not read[0]], (
            frozenset()
        )
    parts = name.split("/")
    level = "/".join(parts[:2])
    shape = local.namespace_shapes([level], policies=config).get(level)
    parent = f"{parts[0]}/{parts[1]}" if len(parts) == 3 else None
    parents = (
        dict(
            zip(
                (r.path for r in roots.LOCAL_ROOTS),
                local.children_of_many([f"{r.path}/{parent}" for r in roots.LOCAL_ROOTS]),
                strict=True,
            )
        )
        if parent
        else {}
    )
    nodes: list[str] = []
    exclude: set[str] = set()
    for root, node, read in zip(roots.LOCAL_ROOTS, candidates, got, strict=True):
        if read is None:
            continue
        children = read[0]
        if root.path == roots.MANAGED_LEDGERS:
            ok = shape is not None and (shape.cluster if parent else shape.namespace)
            if ok and not parent:  # a v2 namespace's v1 neighbours (a level of both)
                exclude |= {f"{node}/{c}" for c in children if c != DOMAIN}
        elif root.bundle_keyed:
            siblings = parents.get(root.path, []) if parent else []
            ok = (
                not all(roots.BUNDLE_RANGE.fullmatch(c) for c in siblings)
                if parent
                else all(roots.BUNDLE_RANGE.fullmatch(c) for c in children)
            )
        elif root.path == roots.LOCAL_POLICIES:
            ok = bool(parent) or not children
        else:  # /schemas/<t>/<ns>
            ok = not parent
        if ok:
            nodes.append(node)
    return nodes, frozenset(exclude)


def read_units(
    store: MetadataStore,
    store_name: str,
    units: Mapping[str, Sequence[str]],
    refs: PulsarReferences | None = None,
    exclude: frozenset[str] = frozenset(),
) -> dict[str, list[Znode]]:
    """The znodes of each unit (name -> the nodes it hangs from), read with their stats
    (``getChildren2``: children and stat of one moment), level by level, pipelined; a node
    that is gone is skipped. ``refs``: the references that say which ledgers each record
    names (None: none are named). ``exclude``: other units' nodes, never read as part of
    one above them (a v2 namespace ``acme/us-east`` whose node also holds the v1
    namespace ``acme/us-east/legacy``)."""
    found: dict[str, list[Znode]] = {name: [] for name in units}
    frontier = [(name, node) for name, nodes in units.items() for node in nodes]
    while frontier:
        got = store.children_with_stats([node for _, node in frontier])
        following = []
        for (name, node), read in zip(frontier, got, strict=True):
            if read is None:
                continue
            children, stat = read
            found[name].append(
                Znode(
                    path=node,
                    kind=roots.kind_of(node, store_name, name, int(stat.dataLength)),
                    version=int(stat.version),
                    data_length=int(stat.dataLength),
                    children=int(stat.numChildren),
                    ephemeral_owner=int(stat.ephemeralOwner),
                    mtime_ms=int(stat.mtime),
                    ledger_ids=named_ledgers(node, refs) if store_name == LOCAL else (),
                )
            )
            below = (f"{node}/{child}" for child in sorted(children))
            following += [(name, path) for path in below if path not in exclude]
        frontier = following
    return found


def named_ledgers(path: str, refs: PulsarReferences | None) -> tuple[int, ...]:
    """The BookKeeper ledgers a local-store record names, as the references read them:
    a managed ledger's listed and marked ids, a cursor's ledger (and the compacted
    ledger of ``__compaction``), a schema locator's index."""
    if refs is None:
        return ()
    if path.startswith(roots.MANAGED_LEDGERS + "/"):
        name = path[len(roots.MANAGED_LEDGERS) + 1 :]
        if name in refs.listed:
            return tuple(sorted(refs.listed[name] | refs.marked.get(name, frozenset())))
        ml, _, cursor = name.rpartition("/")
        lid = refs.cursors.get((ml, cursor))
        if lid is None:
            return ()
        ids = {lid} if lid >= 0 else set()
        if cursor == COMPACTION_CURSOR and ml in refs.compacted:
            ids.add(refs.compacted[ml])
        return tuple(sorted(ids))
    if path.startswith(SCHEMAS_ROOT + "/"):
        index = refs.schemas.get(path[len(SCHEMAS_ROOT) + 1 :])
        return tuple(sorted(index.ledger_ids)) if index else ()
    return ()


# --- the manifest ---------------------------------------------------------------------


def _manifest(
    endpoints: Endpoints,
    config: MetadataStore,
    listing: LocalListing,
    tenants: frozenset[str],
    leftovers: list[Leftover],
    reports: list[Report],
) -> PulsarMetadataManifest:
    manifest = PulsarMetadataManifest(
        local_hosts=endpoints.zk.hosts,
        config_hosts=config.hosts,
        namespaces=len(listing.namespaces),
        tenants=len(tenants),
        local_znodes=listing.counted,
    )
    for left in leftovers:
        cls = left.judgement.target_class
        if cls not in PM_ORPHAN_CLASSES:
            raise ValueError(f"leftover {left.target} has no orphan class: {cls!r}")
        manifest.leftovers[left.target] = cls
        if left.held is not None:
            manifest.held_count += 1
            manifest.held_targets.append(left.target)
            if len(manifest.held) < MAX_SAMPLES:
                manifest.held.append(left.sample())
            continue
        totals = manifest.classes.setdefault(cls, {}).setdefault(left.store, LeftoverTotals())
        totals.leftovers += 1
        totals.znodes += len(left.znodes)
        totals.bytes += sum(z.data_length for z in left.znodes)
        totals.ledgers += len(left.ledger_ids)
        sample = manifest.samples.setdefault(cls, [])
        if len(sample) < MAX_SAMPLES:
            sample.append(left.sample())
    for report in reports:
        store = CONFIG if report.report_class == PM_STUCK_DELETE else LOCAL
        totals = manifest.classes.setdefault(report.report_class, {}).setdefault(
            store, LeftoverTotals()
        )
        totals.leftovers += 1
        sample = manifest.samples.setdefault(report.report_class, [])
        if len(sample) < MAX_SAMPLES:
            sample.append(
                {
                    "name": report.name,
                    "store": store,
                    "class": report.report_class,
                    "why": report.why,
                    "command": report.command,
                }
            )
    return manifest


def _registered_reasons(
    registered: Iterable[str],
    leftovers: list[Leftover],
    judged: Mapping[tuple[str, str], Judgement],
) -> dict[str, str]:
    """Why each registered leftover this survey does not find (as a candidate) is none.
    ``registered``: the registered prefixes of this source's scheme (streamed; another
    prefix is skipped)."""
    by_target = {left.target: left for left in leftovers}
    reasons = {}
    for prefix in registered:
        parsed = parse_target(prefix)
        if parsed is None:
            continue
        left = by_target.get(prefix)
        if left is not None and left.held is None:
            continue
        judgement = judged.get(parsed)
        if left is not None:
            reasons[prefix] = f"held: {left.held}"
        elif judgement is not None and judgement.target_class is None:
            reasons[prefix] = f"not a leftover any more: {judgement.why}"
        else:
            reasons[prefix] = f"its znodes in the {parsed[0]} store are gone (deleted)"
    return reasons
