"""Phase 3 for Pulsar's own metadata: re-check each leftover live, then remove its znodes.

For each eligible registry entry (``pulsar-metadata:<store>:<name>``, a
``pm-deleted-namespace``, ``pm-deleted-tenant`` or ``pm-dead-broker``), just before
anything of it goes:

1. ``sync`` on both stores, then the name is judged again from what they say now
   (``leftovers.live_class``, the survey's own rules: its policies still absent from the
   configuration store,
   its tenant still there for a deleted namespace and still absent for a deleted
   tenant, a heartbeat namespace's broker still not under ``/loadbalance/brokers``);
   any other class, or live, corrects it away;
2. its znodes are read again, live, below its roots (``leftovers.unit_nodes``): an
   ephemeral one (a broker owns one of its bundles) holds all of it; a tenant-level
   leftover with a namespace below waits for that namespace's leftover to go first;
3. its newest znode must be older than retention on ZooKeeper's clock (its ``mtime``);
4. ``classes.to_delete`` says what this cycle removes: every record, leaves first, or,
   once no record is left (a later cycle), the parents that outlived a cycle and the
   grace window (a container parent is ZooKeeper's to remove, and is gone by then);
5. each of those znodes in that order: the absence checks are repeated (cheap reads:
   the policies, the tenant, the broker, the ownership node's and the znode's parent's
   children as the walk left them, which a topic auto-created meanwhile changes), a
   ``deleting`` audit record is committed with its bytes, ACL, its ancestors' ACLs and
   the BookKeeper ledgers it names, and only then it is deleted **at the version read in
   step 2** (never -1, never recursively, never an ephemeral), **fenced** by the delete
   lock of its store's ensemble (``metadata/fencing.py``). A delete ZooKeeper refuses
   (the version moved, a child was created, the lock was lost, no permission) stops that
   leftover, and a ``not-deleted`` record closes the one written ahead.

The BookKeeper ledgers a removed managed ledger, cursor or schema named are not deleted
here: they are handed to the BookKeeper source by id (``state.handoff``), which classes
them from its next survey on, under its own grace window. ``ledgergc restore --run ID``
re-creates what was removed (``pulsar_metadata/restore.py``).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Iterable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NoNodeError

from ledger_gc import termination
from ledger_gc.audit import DELETED as AUDIT_DELETED
from ledger_gc.audit import DELETING as AUDIT_DELETING
from ledger_gc.audit import NOT_DELETED as AUDIT_NOT_DELETED
from ledger_gc.audit import AuditLog, AuditRecord
from ledger_gc.bookkeeper.references import (
    bucket_ledgers,
    compacted_ledger,
    schema_index,
)
from ledger_gc.config.endpoints import Endpoints, ZkEndpoint
from ledger_gc.errors import (
    AuditUnavailableError,
    MetadataAccessError,
    MetadataUnavailableError,
)
from ledger_gc.formats.markers import deletable_markers
from ledger_gc.formats.records import decode_managed_cursor_info, decode_managed_ledger_info
from ledger_gc.metadata import zk_access
from ledger_gc.metadata.fencing import Fence, FencedOutcome
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.metadata.zk_client import guarded
from ledger_gc.rules.orphans.outcomes import (
    CORRECTED,
    DELETED,
    FAILED,
    GONE,
    HELD,
    OPERATION,
    SKIPPED,
    STOPPED,
    WAITING,
    WOULD_DELETE,
    RecheckResult,
)
from ledger_gc.rules.orphans.outcomes import skipped as _skipped
from ledger_gc.rules.orphans.phases import RegistryEntry, iso
from ledger_gc.rules.pulsar_metadata import judge, leftovers, roots
from ledger_gc.rules.pulsar_metadata.classes import (
    CONFIG,
    LOCAL,
    PM_ORPHAN_CLASSES,
    RECORD,
    Znode,
    parse_target,
    to_delete,
)
from ledger_gc.state import handoff

log = logging.getLogger(__name__)

RESTORE_HINT = "ledgergc restore --run <run> re-creates what this run removed"


@dataclass
class _Stores:
    """The sessions of one delete step: the local store's, the configuration store's
    (the same one when it is the local store), and the fence of each (None: a dry run)."""

    endpoints: Endpoints
    local: MetadataStore
    config: MetadataStore
    fences: dict[str, Fence] = field(default_factory=dict)

    def of(self, store: str) -> MetadataStore:
        return self.local if store == LOCAL else self.config

    def endpoint(self, store: str) -> ZkEndpoint:
        return self.endpoints.zk if store == LOCAL else self.endpoints.configuration

    def sync(self) -> None:
        self.local.sync("/")
        if self.config is not self.local:
            self.config.sync("/")


def recheck_and_delete(
    endpoints: Endpoints,
    entries: Iterable[RegistryEntry],
    *,
    run_id: str,
    now_ms: int,
    deleting: bool,
    should_stop: Callable[[], bool] = termination.requested,
    fence_for: Callable[[ZkEndpoint], Fence] | None = None,
) -> list[RecheckResult]:
    """Re-check and delete (or, when not ``deleting``, only report) leftovers.

    ``should_stop`` (a termination signal, a lost delete lock) is asked before each
    leftover and again before each znode's audit record and delete: once true, nothing
    more is sent. ``fence_for`` (the delete lock's) fences each delete, on the local
    store's ensemble or the configuration store's; deleting without one is refused."""
    items = list(entries)
    if not items:
        return []
    audit = AuditLog(endpoints.state)
    results: list[RecheckResult] = []
    with ExitStack() as stack:
        try:
            local = stack.enter_context(MetadataStore.open(endpoints.zk))
            config = (
                local
                if endpoints.configuration == endpoints.zk
                else stack.enter_context(MetadataStore.open(endpoints.configuration))
            )
        except MetadataUnavailableError as exc:
            return [_skipped(entry, str(exc)) for entry in items]
        stores = _Stores(endpoints, local, config)
        if deleting:
            if fence_for is None:
                raise ValueError("a Pulsar-metadata delete needs the delete lock's fence")
            stores.fences = {
                LOCAL: fence_for(endpoints.zk),
                CONFIG: fence_for(endpoints.configuration),
            }
        unavailable: str | None = None
        for entry in items:
            if unavailable is None and should_stop():
                unavailable = STOPPED
            if unavailable is not None:
                results.append(_skipped(entry, unavailable))
                continue
            try:
                result = _one(stores, audit, entry, run_id, now_ms, should_stop)
            except MetadataUnavailableError as exc:
                unavailable = str(exc)
                result = _skipped(entry, unavailable)
            except AuditUnavailableError:
                raise  # no delete without its record: the step stops here
            except Exception as exc:  # a record that does not decode: kept, retried
                log.warning("cannot re-check %s: %s", entry.prefix, exc)
                result = _failed(entry, f"re-check failed: {exc}")
            if result.unavailable and unavailable is None:
                unavailable = result.error or result.reason
            results.append(result)
    return results


def _failed(entry: RegistryEntry, why: str) -> RecheckResult:
    return RecheckResult.of(entry, FAILED, why, error=why)


@dataclass(frozen=True)
class _Walked:
    """One znode of a leftover as the live walk read it: its bytes and stat (one read),
    and its children's stat (``cversion``: changed by any child created or deleted)."""

    path: str
    data: bytes
    stat: Any
    cversion: int


@dataclass(frozen=True)
class _Leftover:
    """What one entry is: where, which name, which class, and the checks it needs."""

    entry: RegistryEntry
    store: str
    name: str

    @property
    def cls(self) -> str:
        return self.entry.target_class

    def describe(self) -> str:
        return f"{self.cls} {self.name} in the {self.store} store"


def _one(
    stores: _Stores,
    audit: AuditLog,
    entry: RegistryEntry,
    run_id: str,
    now_ms: int,
    should_stop: Callable[[], bool],
) -> RecheckResult:
    target = parse_target(entry.prefix)
    if target is None or entry.target_class not in PM_ORPHAN_CLASSES:
        return _failed(entry, f"{entry.prefix} is not a Pulsar-metadata leftover; kept")
    store_name, name = target
    why = leftovers.check_name(name)
    if why is not None:
        return _failed(entry, f"{entry.prefix}: {why}; kept")
    leftover = _Leftover(entry, store_name, name)
    stores.sync()
    verdict = _live(stores, name)
    if verdict.cls != leftover.cls:
        return RecheckResult.of(
            entry,
            CORRECTED,
            f"live re-check: {verdict.cls or 'live'} ({verdict.facts}), no longer "
            f"{leftover.cls}; nothing deleted",
        )
    store = stores.of(store_name)
    unit = leftovers.unit_nodes(store_name, name)
    walked, holders = _walk(store, store_name, name, unit)
    if not walked:
        return RecheckResult.of(
            entry, GONE, f"no znode of {name} is left in the {store_name} store"
        )
    ephemeral = [w.path for w in walked if w.stat.ephemeralOwner]
    if ephemeral:
        return RecheckResult.of(
            entry,
            HELD,
            f"{ephemeral[0]} is ephemeral (a broker owns a bundle of {name}, or a session "
            "holds it): nothing of it is deleted",
        )
    if store_name == LOCAL and roots.is_tenant_name(name):
        below = [w.path for w in walked if w.path not in unit]
        if below:
            return RecheckResult.of(
                entry,
                HELD,
                f"{below[0]} is below tenant {name}'s znodes: its namespace's leftover goes "
                "first, the tenant's path nodes on a later cycle",
            )
    znodes = [_znode(store_name, name, w) for w in walked]
    # A znode holding another unit's nodes stays: it is theirs too.
    chosen = to_delete([z for z in znodes if z.path not in holders])
    if not chosen:
        return RecheckResult.of(
            entry,
            HELD,
            f"what is left of {name} ({', '.join(sorted(holders))}) holds another "
            "namespace's znodes: kept",
        )
    newest = max(z.mtime_ms for z in znodes)
    until = newest + stores.endpoints.policy.retention_seconds * 1000
    if now_ms < until:
        return RecheckResult.of(
            entry,
            WAITING,
            f"its newest znode was written {iso(newest)} (ZooKeeper's clock), younger than "
            "retention",
            until_ms=until,
        )
    records = sum(1 for z in chosen if z.kind == RECORD)
    reason = (
        f"{leftover.describe()} ({stores.endpoint(store_name).hosts}): "
        f"{records} record(s) and {len(chosen) - records} parent(s) of {len(znodes)} "
        f"znode(s), registered {iso(entry.first_seen_ms)} over {entry.scans_seen} scan(s), "
        "confirmed by a live re-check"
    )
    if not stores.fences:
        return RecheckResult.of(
            entry,
            WOULD_DELETE,
            reason,
            objects=len(chosen),
            bytes=sum(z.data_length for z in chosen),
        )
    by_path = {w.path: w for w in walked}
    deletion = _Deletion(
        stores, audit, leftover, run_id, now_ms, should_stop, by_path, verdict.clusters
    )
    return deletion.run(chosen, reason)


@dataclass(frozen=True)
class _Verdict:
    """What a name is now (``cls`` None: live), the facts that say so (for reasons), and
    the clusters of its tenant a two-level name may be a v1 namespace of."""

    cls: str | None
    facts: str
    clusters: tuple[str, ...] = ()


def _live(stores: _Stores, name: str, clusters: tuple[str, ...] | None = None) -> _Verdict:
    """What ``name`` is now by the survey's rules: its tenant and policies in the
    configuration store (and those of the v1 namespaces a two-level name may stand for:
    ``clusters``, listed when not given), a heartbeat name's broker. A v1 name that is a
    live v2 namespace's own node (``leftovers.v2_own_node``: one of its bundles, its
    domain) is live."""
    config = stores.config
    level = leftovers.v2_level(name)
    paths = [leftovers.tenant_path(name), leftovers.policies_path(name)]
    tenant, own, *above = config.get_many(
        [*paths, leftovers.policies_path(level)] if level else paths
    )
    shared = leftovers.v2_own_node(name, bytes(above[0][0] or b"") if above and above[0] else None)
    if shared is not None:
        return _Verdict(None, shared, clusters or ())
    policies = {} if own is None else {name: bytes(own[0] or b"")}
    if clusters is None:
        listed = tenant is not None and len(name.split("/")) == 2
        clusters = (
            tuple(config.children_of_many([leftovers.tenant_path(name)])[0]) if listed else ()
        )
    candidates = leftovers.v1_candidates(name, list(clusters)) if tenant is not None else []
    if candidates:
        paths = [leftovers.policies_path(c) for c in candidates]
        for candidate, got in zip(candidates, config.get_many(paths), strict=True):
            if got is not None:
                policies[candidate] = bytes(got[0] or b"")
    broker = judge.heartbeat_broker(name)
    registered = False
    if broker is not None:
        registered = stores.local.get_many([leftovers.broker_path(broker)])[0] is not None
    verdict = leftovers.live_class(
        name, tenant=tenant is not None, policies=policies, broker_registered=registered
    )
    facts = [
        f"tenant {judge.tenant_of(name)} {'exists' if tenant is not None else 'absent'}",
        f"policies of {', '.join(sorted(policies))} exist" if policies else "no policies",
    ]
    if broker is not None:
        facts.append(f"broker {broker} {'registered' if registered else 'not registered'}")
    return _Verdict(verdict, ", ".join(facts), clusters)


def _walk(
    store: MetadataStore, store_name: str, name: str, nodes: Iterable[str]
) -> tuple[list[_Walked], set[str]]:
    """Every znode of the leftover below its ``nodes`` (included) as ZooKeeper has it
    now, level by level, pipelined: each one's children with its stat, then its bytes
    with theirs; and the znodes that hold another unit's nodes (``leftovers.belongs``),
    which the walk does not enter and the delete keeps."""
    stats: dict[str, int] = {}
    holders: set[str] = set()
    level = list(nodes)
    while level:
        below: list[str] = []
        for path, got in zip(level, store.children_with_stats(level), strict=True):
            if got is None:
                continue
            children, stat = got
            stats[path] = stat.cversion
            for child in sorted(children):
                if leftovers.belongs(store_name, name, path, child):
                    below.append(f"{path}/{child}")
                else:
                    holders.add(path)
        level = below
    paths = list(stats)
    walked = []
    for path, read in zip(paths, store.get_many(paths), strict=True):
        if read is not None:  # deleted since it was listed
            walked.append(_Walked(path, bytes(read[0] or b""), read[1], stats[path]))
    return walked, holders


def _znode(store: str, name: str, walked: _Walked) -> Znode:
    stat = walked.stat
    kind = roots.kind_of(walked.path, store, name, len(walked.data))
    return Znode(
        path=walked.path,
        kind=kind,
        version=stat.version,
        data_length=len(walked.data),
        children=stat.numChildren,
        ephemeral_owner=stat.ephemeralOwner,
        mtime_ms=int(stat.mtime),
        ledger_ids=tuple(sorted(_ledger_ids(store, name, walked.path, walked.data))),
    )


def _ledger_ids(store: str, name: str, path: str, data: bytes) -> set[int]:
    """The BookKeeper ledgers a record names. One that does not decode raises: what it
    names could not be handed to the BookKeeper source, so it is kept."""
    named = leftovers.named_ledgers_as(store, name, path)
    if named is None:
        return set()
    what, _ = named
    if what == leftovers.MANAGED_LEDGER:
        info = decode_managed_ledger_info(data, path=path, allow_empty=True)
        return {ledger.ledgerId for ledger in info.ledgerInfo} | set(
            deletable_markers(info, path=path)
        )
    if what == leftovers.CURSOR:
        cursor = decode_managed_cursor_info(data, path=path)
        ids = {cursor.cursorsLedgerId} if cursor.cursorsLedgerId >= 0 else set()
        compacted = compacted_ledger(path.rsplit("/", 1)[1], cursor)
        if compacted is not None:
            ids.add(compacted)
        return ids | bucket_ledgers(cursor, path)
    index = schema_index(data)
    if index.unreadable:
        raise ValueError(f"schema locator {path} {index.unreadable}")
    return set(index.ledger_ids)


class _Deletion:
    """The deletes of one leftover, one znode at a time, each re-checked, audited ahead
    and fenced; stopped by the first one that is not made."""

    def __init__(
        self,
        stores: _Stores,
        audit: AuditLog,
        leftover: _Leftover,
        run_id: str,
        now_ms: int,
        should_stop: Callable[[], bool],
        walked: Mapping[str, _Walked],
        clusters: tuple[str, ...],
    ) -> None:
        self.stores = stores
        self.audit = audit
        self.leftover = leftover
        self.run_id = run_id
        self.now_ms = now_ms
        self.should_stop = should_stop
        self.walked = walked
        self.store = stores.of(leftover.store)
        self.fence = stores.fences[leftover.store]
        self.hosts = stores.endpoint(leftover.store).hosts
        # The children each znode of the leftover has as the walk left them, moved on by
        # this delete's own removals: anything else moved them (a topic auto-created, a
        # bundle owned).
        self.cversions = {path: w.cversion for path, w in walked.items()}
        self.ownership = (
            leftovers.ownership_path(leftover.name) if leftover.store == LOCAL else None
        )
        self.acls: dict[str, list[Any]] = {}
        self.done: list[Znode] = []
        # The tenant's clusters as the re-check listed them: each delete's cheap check
        # reads those v1 namespaces' policies again, not the tenant's whole listing.
        self.clusters = clusters

    @property
    def entry(self) -> RegistryEntry:
        return self.leftover.entry

    def run(self, chosen: list[Znode], reason: str) -> RecheckResult:
        for znode in chosen:
            if self.should_stop():
                return self._stopped(STOPPED, SKIPPED, error=STOPPED)
            try:
                changed = self._changed(znode)
                if changed is not None:
                    return self._stopped(f"{changed}; the rest is kept", CORRECTED)
                stopped = self._delete(znode, reason)
            except MetadataUnavailableError as exc:  # what was applied still counts
                why = f"not re-checked: ZooKeeper unavailable ({exc})"
                return self._stopped(why, SKIPPED, error=str(exc), unavailable=True)
            except NoNodeError:  # its ACL read found it gone: someone else removed it
                return self._stopped(f"{znode.path} vanished before its delete", CORRECTED)
            except MetadataAccessError as exc:  # a read refused (NoAuth): kept, named
                return self._stopped(f"{exc}; kept", FAILED, error=str(exc))
            if stopped is not None:
                return stopped
        return RecheckResult.of(
            self.entry,
            DELETED,
            f"{reason}; {RESTORE_HINT}",
            objects=len(self.done),
            bytes=sum(z.data_length for z in self.done),
            deleted_ledgers=self._deleted(),
        )

    def _deleted(self) -> list[dict[str, Any]]:
        return [
            {
                "store": self.leftover.store,
                "znode": z.path,
                "version": z.version,
                "bytes": z.data_length,
                "ledger_ids": list(z.ledger_ids),
            }
            for z in self.done
        ]

    def _stopped(self, why: str, action: str, **extra: Any) -> RecheckResult:
        """What the leftover's result is once its deletes stop: deleted (what ZooKeeper
        applied: the next survey finds the rest), or ``action`` when nothing was."""
        if self.done:
            return RecheckResult.of(
                self.entry,
                DELETED,
                f"{self.leftover.describe()}: {len(self.done)} znode(s) removed, then stopped: "
                f"{why}; {RESTORE_HINT}",
                objects=len(self.done),
                bytes=sum(z.data_length for z in self.done),
                deleted_ledgers=self._deleted(),
                # ZooKeeper gone: the step fails closed, with what it did applied
                **(extra if extra.get("unavailable") else {}),
            )
        return RecheckResult.of(self.entry, action, why, **extra)

    def _changed(self, znode: Znode) -> str | None:
        """The absence checks again, cheaply, just before ``znode``'s delete: why it must
        not go (None: it may)."""
        name = self.leftover.name
        verdict = _live(self.stores, name, self.clusters)
        if verdict.cls != self.leftover.cls:
            return (
                f"before deleting {znode.path}: {name} is {verdict.cls or 'live'} now "
                f"({verdict.facts})"
            )
        parent = znode.path.rsplit("/", 1)[0]
        watched: list[tuple[MetadataStore, str]] = []
        if self.ownership is not None:
            watched.append((self.stores.local, self.ownership))
        if parent in self.cversions and parent != self.ownership:
            watched.append((self.store, parent))  # a znode of the leftover (not above it)
        for store, path in watched:
            got = store.get_many([path])[0]
            now = None if got is None else got[1].cversion
            if now != self.cversions.get(path):
                if path == self.ownership:
                    return f"{path} changed meanwhile (a broker took a bundle of {name}?)"
                return f"{path} gained or lost a child meanwhile (a topic created?)"
        return None

    def _acl(self, path: str) -> list[Any]:
        if path not in self.acls:
            self.store.reading(1)
            self.acls[path] = guarded(
                f"reading the ACL of {path}",
                self.store.hosts,
                lambda: self.store.client.get_acls(path)[0],
                refused=lambda: self.store.refusal(
                    f"reading the ACL of {path}", zk_access.READ, path
                ),
            )
        return self.acls[path]

    def _delete(self, znode: Znode, reason: str) -> RecheckResult | None:
        """Audit ahead, delete fenced, audit after; a result once the leftover stops."""
        walked = self.walked[znode.path]
        acl = zk_access.acl_rows(self._acl(znode.path))
        ancestors = [[a, zk_access.acl_rows(self._acl(a))] for a in leftovers.ancestors(znode.path)]
        why = f"{reason}: {znode.kind} {znode.path}"

        def record(status: str, text: str = why) -> AuditRecord:
            applied = status != AUDIT_NOT_DELETED
            return AuditRecord(
                operation=OPERATION,
                target_class=self.leftover.cls,
                ml_name=self.leftover.name,
                ledger_id=None,
                prefix=self.entry.prefix,
                objects=1 if applied else 0,
                bytes=znode.data_length if applied else 0,
                reason=text,
                run_id=self.run_id,
                status=status,
                extra={
                    "store": self.leftover.store,
                    "hosts": self.hosts,
                    "znode": znode.path,
                    "znode_kind": znode.kind,
                    "znode_version": znode.version,
                    "record_base64": base64.b64encode(walked.data).decode("ascii"),
                    "znode_acl": acl,
                    "ancestors": ancestors,
                    "ledger_ids": list(znode.ledger_ids),
                    "restore": RESTORE_HINT,
                },
            )

        # Handed to the BookKeeper source first: a hand-off of ids whose record then
        # stays (a refused delete) is harmless, as a record naming an id keeps it live;
        # one lost after the delete would leave its ledgers held as another cluster's.
        self._hand_off(znode)
        self.audit.append([record(AUDIT_DELETING)])  # AuditUnavailableError: not made
        if self.should_stop():
            text = (
                "a stop was asked (a signal, or the delete lock lost) after its write-ahead "
                "record: the delete was not sent"
            )
            self.audit.append([record(AUDIT_NOT_DELETED, f"not deleted: {text}")])
            return self._stopped(STOPPED, SKIPPED, error=STOPPED)
        try:
            outcome = self.fence.delete(znode.path, znode.version)
        except MetadataUnavailableError as exc:
            if _never_applied(self.store, self.fence, znode.path, walked.stat):
                text = (
                    f"the delete of {znode.path} was sent and its answer lost ({exc}), but "
                    f"it was never applied: the delete lock's node {self.fence.path} is "
                    "gone, so it never will be; nothing more deleted"
                )
                self.audit.append([record(AUDIT_NOT_DELETED, f"not deleted: {text}")])
                return self._stopped(text, SKIPPED, error=text)
            text = (
                f"the delete of {znode.path} was sent but its answer was lost ({exc}): it "
                "may have been applied (see the audit log's deleting record)"
            )
            return self._stopped(text, FAILED, error=str(exc), unavailable=True)
        if outcome is FencedOutcome.APPLIED:
            self.audit.append([record(AUDIT_DELETED)])
            self.done.append(znode)
            parent = znode.path.rsplit("/", 1)[0]
            if parent in self.cversions:
                self.cversions[parent] += 1
            self.cversions.pop(znode.path, None)
            log.info("deleted %s (%s)", znode.path, self.leftover.describe())
            return None
        text, action = self._refusal(znode, outcome)
        self.audit.append([record(AUDIT_NOT_DELETED, f"not deleted: {text}")])
        log.warning("%s not deleted: %s", znode.path, text)
        return self._stopped(text, action, error=text if action != CORRECTED else None)

    def _refusal(self, znode: Znode, outcome: FencedOutcome) -> tuple[str, str]:
        path = znode.path
        if outcome is FencedOutcome.FENCE_LOST:
            return (
                f"ZooKeeper refused the delete of {path}: the delete lock's node "
                f"{self.fence.path} is gone (its session ended: another cycle may hold the "
                "lock); nothing more deleted, the next run re-checks it",
                SKIPPED,
            )
        if outcome is FencedOutcome.CHANGED:
            return f"{path} changed after the re-check (version {znode.version} moved)", CORRECTED
        if outcome is FencedOutcome.MISSING:
            return f"{path} vanished just before its delete", CORRECTED
        if outcome is FencedOutcome.NOT_EMPTY:
            return f"{path} gained a child after the re-check (a topic created?)", CORRECTED
        refused = zk_access.refusal(
            self.fence.client,
            self.hosts,
            what=f"the delete of {path}",
            permission=zk_access.DELETE,
            znode=path,
            checked=path.rsplit("/", 1)[0] or "/",
            names=self.stores.endpoint(self.leftover.store).names,
        )
        return f"{refused}; kept", FAILED

    def _hand_off(self, znode: Znode) -> None:
        """The ledgers the record names go to the BookKeeper source by id, and the
        namespace it belongs to is recorded as this cluster's (``state.handoff``): once
        its last znodes are gone, its ledgers that no record named are still judged
        (not held as another cluster's). Written before the delete, like its audit
        record: a state store that cannot take them stops the delete
        (``AuditUnavailableError``)."""
        name = self.leftover.name
        try:
            if self.leftover.store == LOCAL and not roots.is_tenant_name(name):
                handoff.record_removed_namespaces(
                    self.stores.endpoints.state, self.run_id, [name], self.now_ms
                )
            if not znode.ledger_ids:
                return
            named = leftovers.named_ledgers_as(self.leftover.store, name, znode.path)
            owner = named[1] if named else name
            ledgers = {
                lid: handoff.HandOff(name, owner, znode.path, self.now_ms)
                for lid in znode.ledger_ids
            }
            handoff.hand_off(self.stores.endpoints.state, self.run_id, ledgers)
        except AuditUnavailableError:
            raise
        except Exception as exc:
            raise AuditUnavailableError(
                f"cannot hand the ledgers of {znode.path} to the BookKeeper source in the "
                f"state store ({type(exc).__name__}): nothing more deleted"
            ) from exc


def _never_applied(store: MetadataStore, fence: Fence, znode: str, stat: Any) -> bool:
    """After a fenced delete's answer was lost: True only when it provably was not
    applied and never will be (the lock node removed first, then the znode still the one
    the walk read: same ``mzxid``), as for a BookKeeper ledger."""
    fence.end()
    try:
        if not fence.over(store.client):
            return False
        store.sync(znode)
        got = store.get_many([znode])[0]
    except MetadataUnavailableError:
        return False
    return got is not None and got[1].mzxid == stat.mzxid
