"""Judging each namespace and tenant of the local store against the configuration
store's facts (pure). DESIGN.md "Pulsar's own metadata".

A namespace ``N`` (``tenant/ns``, v1 ``property/cluster/ns``) is judged by the first
rule that applies:

1. a heartbeat or SLA-monitor name (``pulsar/<broker>``, ``pulsar/<cluster>/<broker>``,
   ``sla-monitor/<cluster>/<broker>``, ``<broker>`` = ``host:port``, Pulsar's
   ``NamespaceService`` patterns) whose policies do not exist: live while ``<broker>`` is
   registered under ``/loadbalance/brokers``, else ``pm-dead-broker``;
2. its policies exist: live. Reported beside: ``pm-stuck-delete`` when the policies say
   ``deleted: true`` and were last written longer ago than the grace window (ZooKeeper's
   clock: the znode's mtime against ZooKeeper's now), with the ``pulsar-admin`` command
   that finishes the delete; ``pm-not-replicated-here`` when ``replication_clusters`` is
   not empty and names none of this cluster's names (no names given: not judged);
3. its tenant exists: ``pm-deleted-namespace``; else ``pm-deleted-tenant``.

A v2-looking name ``p/ns`` with no policies of its own whose v1 namespace ``p/<c>/ns``
has them is that v1 namespace's (Pulsar keys a v1 topic's schema without its cluster):
live. A tenant's own unit (no namespace below it) is live while the tenant exists, and so
are the heartbeat tenants' (``pulsar``, ``sla-monitor``: no policies by design).
Whatever the class, a unit with an ephemeral znode (a broker owns one of its bundles) is
*held* (``held_by``): reported, never registered or deleted.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote_plus

from ledger_gc.rules.pulsar_metadata.classes import (
    PM_DEAD_BROKER,
    PM_DELETED_NAMESPACE,
    PM_DELETED_TENANT,
    PM_NOT_REPLICATED_HERE,
    PM_STUCK_DELETE,
    Znode,
)

HEARTBEAT_TENANT = "pulsar"
SLA_TENANT = "sla-monitor"
SYSTEM_TENANTS = (HEARTBEAT_TENANT, SLA_TENANT)
#: ``NamespaceService``'s heartbeat (v1, v2) and SLA-monitor namespace patterns.
_BROKER = r"([^/:]+:\d+)"
_HEARTBEAT_V1 = re.compile(rf"{HEARTBEAT_TENANT}/[^/]+/{_BROKER}")
_HEARTBEAT_V2 = re.compile(rf"{HEARTBEAT_TENANT}/{_BROKER}")
_SLA = re.compile(rf"{SLA_TENANT}/[^/]+/{_BROKER}")


@dataclass(frozen=True)
class PolicyFacts:
    """What a namespace's policies znode says (it exists)."""

    mtime_ms: int = 0  # ZooKeeper's clock: when it was last written
    deleted: bool = False
    replication_clusters: tuple[str, ...] = ()
    readable: bool = True  # its data is Policies JSON (an empty node is not)


def policy_facts(data: bytes, mtime_ms: int) -> PolicyFacts:
    """A policies znode's facts; data that is not Policies JSON (an empty node, as older
    tools and ledger-gc's own tests write) still means the namespace exists."""
    body = _json_object(data)
    if body is None:
        return PolicyFacts(mtime_ms, readable=False)
    clusters = body.get("replication_clusters")
    return PolicyFacts(
        mtime_ms,
        deleted=body.get("deleted") is True,
        replication_clusters=tuple(str(c) for c in clusters) if isinstance(clusters, list) else (),
    )


def _json_object(data: bytes) -> dict | None:
    try:
        body = json.loads(data.decode("utf-8")) if data else None
    except (UnicodeDecodeError, ValueError):
        return None
    return body if isinstance(body, dict) else None


@dataclass(frozen=True)
class Facts:
    """What the stores say, as one survey read them."""

    tenants: frozenset[str]  # /admin/policies/<t> (configuration store)
    policies: Mapping[str, PolicyFacts]  # namespace -> its policies (those that exist)
    brokers: frozenset[str]  # /loadbalance/brokers/<host:port> (local store)
    now_ms: int  # ZooKeeper's clock now
    grace_ms: int
    our_clusters: tuple[str, ...] = ()  # LEDGERGC_PULSAR_CLUSTER (empty: not judged)


@dataclass(frozen=True)
class Report:
    """A report-only finding (never registered or deleted)."""

    report_class: str  # PM_STUCK_DELETE | PM_NOT_REPLICATED_HERE
    name: str  # a namespace, or a partitioned topic's persistent:// name
    why: str
    command: str | None = None  # what finishes a stuck delete


@dataclass(frozen=True)
class Judgement:
    """A unit's verdict: ``target_class`` None is live."""

    name: str
    target_class: str | None
    why: str
    reports: tuple[Report, ...] = field(default_factory=tuple)


def heartbeat_broker(name: str) -> str | None:
    """The ``host:port`` of a heartbeat or SLA-monitor namespace (None: not one)."""
    for pattern in (_HEARTBEAT_V1, _HEARTBEAT_V2, _SLA):
        found = pattern.fullmatch(name)
        if found:
            return found.group(1)
    return None


def tenant_of(name: str) -> str:
    return name.split("/", 1)[0]


def judge_namespace(name: str, facts: Facts, *, has_topics: bool = False) -> Judgement:
    """Namespace ``name`` (module docstring). ``has_topics``: its local store holds
    managed ledgers (a stuck delete's command then needs ``--force``)."""
    policies = facts.policies.get(name)
    broker = heartbeat_broker(name)
    if policies is None and broker is not None:
        if broker in facts.brokers:
            return Judgement(name, None, f"heartbeat namespace of registered broker {broker}")
        return Judgement(
            name,
            PM_DEAD_BROKER,
            f"heartbeat namespace of broker {broker}, which is not registered under "
            "/loadbalance/brokers",
        )
    if policies is not None:
        return Judgement(
            name,
            None,
            "its policies exist",
            tuple(_policy_reports(name, policies, facts, has_topics)),
        )
    v1 = _v1_owner(name, facts.policies)
    if v1 is not None:
        return Judgement(name, None, f"the schemas of v1 namespace {v1}, whose policies exist")
    tenant = tenant_of(name)
    if tenant in facts.tenants:
        return Judgement(
            name,
            PM_DELETED_NAMESPACE,
            f"no policies for namespace {name} in the configuration store, while its tenant "
            f"{tenant} exists",
        )
    return Judgement(
        name,
        PM_DELETED_TENANT,
        f"neither namespace {name} nor its tenant {tenant} has policies in the configuration store",
    )


def judge_tenant(tenant: str, facts: Facts) -> Judgement:
    """A tenant's own unit (no namespace below it in that root)."""
    if tenant in SYSTEM_TENANTS:
        return Judgement(tenant, None, "the tenant of brokers' heartbeat namespaces")
    if tenant in facts.tenants:
        return Judgement(tenant, None, "its tenant exists")
    return Judgement(
        tenant,
        PM_DELETED_TENANT,
        f"tenant {tenant} has no policies in the configuration store",
    )


def _v1_owner(name: str, policies: Mapping[str, PolicyFacts]) -> str | None:
    parts = name.split("/")
    if len(parts) != 2:
        return None
    for other in policies:
        bits = other.split("/")
        if len(bits) == 3 and bits[0] == parts[0] and bits[2] == parts[1]:
            return other
    return None


def _policy_reports(
    name: str, policies: PolicyFacts, facts: Facts, has_topics: bool
) -> Iterable[Report]:
    age = facts.now_ms - policies.mtime_ms
    if policies.deleted and age > facts.grace_ms:
        force = " --force" if has_topics else ""
        yield Report(
            PM_STUCK_DELETE,
            name,
            f"policies of {name} say deleted=true since {age // 3_600_000} h (longer than "
            "the grace window): its delete stopped half way"
            + (
                " with topics left (--force needs forceDeleteNamespaceAllowed=true)"
                if force
                else ""
            ),
            f"pulsar-admin namespaces delete{force} {shlex.quote(name)}",
        )
    ours = [c for c in facts.our_clusters if not c.startswith("(")]
    clusters = policies.replication_clusters
    if ours and clusters and not set(clusters) & set(ours):
        yield Report(
            PM_NOT_REPLICATED_HERE,
            name,
            f"replication_clusters of {name} ({', '.join(clusters)}) names none of this "
            f"cluster's ({', '.join(ours)}): Pulsar may add it back; kept",
        )


def judge_partitioned_topic(path: str, data: bytes, mtime_ms: int, facts: Facts) -> Report | None:
    """A partitioned topic's metadata (``<ns>/persistent/<encoded topic>`` below
    ``/admin/partitioned-topics``) marked ``deleted: true`` longer than the grace window:
    a stuck delete, with its command (the topic's name decoded as Pulsar's ``Codec``
    does)."""
    body = _json_object(data)
    if body is None or body.get("deleted") is not True:
        return None
    age = facts.now_ms - mtime_ms
    if age <= facts.grace_ms:
        return None
    topic = topic_url(path)
    return Report(
        PM_STUCK_DELETE,
        topic,
        f"partitioned topic {topic} says deleted=true since {age // 3_600_000} h (longer "
        "than the grace window): its delete stopped half way",
        f"pulsar-admin topics delete-partitioned-topic {shlex.quote(topic)}",
    )


def topic_url(path: str) -> str:
    """``t/ns/persistent/<encoded>`` (v1 ``p/c/ns/persistent/<encoded>``) ->
    ``persistent://t/ns/<name>``, the local name decoded (``Codec.decode``)."""
    namespace, _, encoded = path.rpartition("/")
    base, _, domain = namespace.rpartition("/")
    return f"{domain}://{base}/{unquote_plus(encoded)}"


def held_by(znodes: Iterable[Znode]) -> str | None:
    """Why a unit is held (None: it is not): an ephemeral znode below it, a broker's
    ownership of one of its bundles, which no delete may touch."""
    owned = sorted((z.path, z.ephemeral_owner) for z in znodes if z.ephemeral_owner)
    if not owned:
        return None
    (path, owner), more = owned[0], len(owned) - 1
    also = f" and {more} more" if more else ""
    return (
        f"a broker owns it: {path}{also} is ephemeral (session 0x{owner:x}); nothing of it "
        "is deleted while a bundle is owned"
    )
