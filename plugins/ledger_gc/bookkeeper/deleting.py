"""Phase 3 for BookKeeper ledgers: re-check each one live, then remove its znode.

For each eligible registry entry (``bookkeeper:<znode>``), just before its delete:

1. the target must be exactly the znode of its ledger id under the configured root and
   the layout its LAYOUT names now (a registry row of another root or layout is kept);
2. ``sync``, then the ledger's znode is read again: gone means deleted already; a record
   that no longer decodes is kept;
3. the Pulsar records that can reference it are read again, live (its managed ledger and
   cursors, or its schema locator, and its namespace: ``references.read_live_references``),
   and the same rules that classified it (``classify.Classifier``, with the ids the
   Pulsar-metadata source handed off and the namespaces it removed, read once per step)
   must give the same class and owner; anything else corrects it away;
4. its age (from the later of the znode's ctime, ZooKeeper's clock, and the record's,
   a broker's) must be past retention on the servers' clock;
5. a ``deleting`` audit record with the record's bytes, znode and version is committed,
   and only then the leaf znode is deleted **at the version read in step 2** (never -1,
   never a parent: BookKeeper's own delete prunes empty parents, and a parent removed
   under a concurrent create has made bookies drop live ledgers), **fenced** by the
   delete lock (``metadata/fencing.py``: one ``multi`` with a check of the lock's node,
   on the lock's session), so that a cycle frozen past its session cannot have it
   applied after another cycle took the lock. A delete ZooKeeper refuses (the version
   moved: BookKeeper closed or recovered it meanwhile; the lock was lost; no
   permission) deletes nothing, and a ``not-deleted`` audit record closes the one
   written ahead, saying why.

The bookies drop the data at their next garbage collection (``gcWaitTime``, default 10
minutes); until then ``ledgergc restore --run ID`` can put the record back.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Iterable, Mapping
from contextlib import ExitStack
from typing import Any

from ledger_gc import termination
from ledger_gc.audit import DELETED as AUDIT_DELETED
from ledger_gc.audit import DELETING as AUDIT_DELETING
from ledger_gc.audit import NOT_DELETED as AUDIT_NOT_DELETED
from ledger_gc.audit import AuditLog, AuditRecord
from ledger_gc.bookkeeper import offloaded_copy, references, scan
from ledger_gc.config.endpoints import BookKeeperEndpoint, Endpoints, ZkEndpoint
from ledger_gc.config.policy import Policy
from ledger_gc.errors import AuditUnavailableError, MetadataUnavailableError
from ledger_gc.metadata import zk_access
from ledger_gc.metadata.config_store import configuration_store
from ledger_gc.metadata.fencing import Fence, FencedOutcome
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.metadata.zk_client import guarded
from ledger_gc.rules.bookkeeper import classify, ledger_paths
from ledger_gc.rules.bookkeeper.classify import BK_NAME_JUDGED, BkLedger, znode_of_target
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
from ledger_gc.state import handoff

log = logging.getLogger(__name__)


def restore_hint(bookkeeper: BookKeeperEndpoint) -> str:
    return (
        "ledgergc restore --run <run> re-creates it until the bookies' next garbage "
        f"collection (gcWaitTime, 10 minutes by default) at {bookkeeper.hosts}"
    )


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
    """Re-check and delete (or, when not ``deleting``, only report) BookKeeper entries.

    ``should_stop`` (a termination signal, a lost delete lock) is asked before each
    entry and again just before each delete's audit record: once true, nothing more is
    sent and the entries left are ``skipped``. ``fence_for`` (the delete lock's) fences
    each delete; deleting without one is refused."""
    items = list(entries)
    if not items:
        return []
    audit = AuditLog(endpoints.state)
    bookkeeper = endpoints.bookkeeper
    results: list[RecheckResult] = []
    fence: Fence | None = None
    with ExitStack() as stack:
        try:
            pulsar, bk = stack.enter_context(scan.sessions(endpoints.zk, bookkeeper))
            # Namespaces' policies are the configuration store's (its own session when
            # it is another ensemble or chroot).
            config = stack.enter_context(configuration_store(pulsar, endpoints.config_store))
            layout = scan.layout_of(bk, bookkeeper)
        except MetadataUnavailableError as exc:
            return [_skipped(entry, str(exc)) for entry in items]
        if deleting:
            if fence_for is None:
                raise ValueError("a BookKeeper delete needs the delete lock's fence")
            fence = fence_for(bookkeeper.zk)
        handed = {
            lid: classify.HandedOff(given.owner, given.named_by)
            for lid, given in handoff.handed_off(endpoints.state).items()
        }
        removed = handoff.removed_namespaces(endpoints.state)
        unavailable: str | None = None
        for entry in items:
            if unavailable is None and should_stop():
                unavailable = STOPPED
            if unavailable is not None:
                results.append(_skipped(entry, unavailable))
                continue
            try:
                results.append(
                    _one(
                        endpoints,
                        pulsar,
                        bk,
                        layout,
                        audit,
                        entry,
                        run_id,
                        now_ms,
                        fence,
                        should_stop,
                        handed,
                        config=config,
                        removed=removed,
                    )
                )
            except MetadataUnavailableError as exc:
                unavailable = str(exc)
                results.append(_skipped(entry, unavailable))
            except AuditUnavailableError:
                raise  # no delete without its record: the step stops here
            except Exception as exc:  # a bad record of its owner: keep it, retry next run
                log.warning("cannot re-check %s: %s", entry.prefix, exc)
                results.append(_failed(entry, f"re-check failed: {exc}"))
    return results


def _failed(entry: RegistryEntry, why: str) -> RecheckResult:
    return RecheckResult.of(entry, FAILED, why, error=why)


def _one(
    endpoints: Endpoints,
    pulsar: MetadataStore,
    bk: MetadataStore,
    layout: str | None,
    audit: AuditLog,
    entry: RegistryEntry,
    run_id: str,
    now_ms: int,
    fence: Fence | None,
    should_stop: Callable[[], bool],
    handed: Mapping[int, classify.HandedOff],
    *,
    config: MetadataStore | None = None,
    removed: frozenset[str] = frozenset(),
) -> RecheckResult:
    """One entry; ``fence`` None: a dry run (re-check and report only). ``config``: the
    configuration store (None: ``pulsar``). ``removed``: the namespaces the
    Pulsar-metadata source removed."""
    bookkeeper, policy = endpoints.bookkeeper, endpoints.policy
    root = bookkeeper.root
    znode = znode_of_target(entry.prefix)
    if layout is None:
        return _failed(entry, f"{bookkeeper.where}/LAYOUT is gone; kept")
    if (
        znode is None
        or entry.ledger_id is None
        or ledger_paths.ledger_path(root, entry.ledger_id, layout) != znode
    ):
        return _failed(
            entry,
            f"{entry.prefix} is not ledger {entry.ledger_id}'s znode under "
            f"LEDGERGC_BK_LEDGERS_ROOT={root} ({layout}); kept",
        )
    bk.sync(znode)
    got = bk.get_many([znode])[0]
    if got is None:
        return RecheckResult.of(entry, GONE, "its metadata znode is gone (deleted earlier)")
    data, stat = got
    ledger = scan.ledger_of(entry.ledger_id, data, stat.version, int(stat.ctime))
    unreadable = entry.target_class == classify.BK_UNREADABLE
    if ledger.error is not None and not unreadable:
        return _failed(entry, f"its record does not decode any more ({ledger.error}); kept")
    if unreadable and ledger.error is None:
        return RecheckResult.of(
            entry, CORRECTED, "live re-check: its record decodes now (repaired); kept"
        )
    if policy.bk_shared and entry.target_class in BK_NAME_JUDGED:
        return RecheckResult.of(
            entry,
            HELD,
            "LEDGERGC_BK_SHARED=true: a ledger judged by its Pulsar name may be another "
            "cluster's; kept",
        )
    if unreadable:
        verdict = _live_unreadable_verdict(policy, pulsar, ledger, config)
    else:
        verdict = _live_verdict(policy.bk_shared, pulsar, ledger, handed, config, removed)
    if (
        verdict.ledger_class != entry.target_class
        or verdict.owner != entry.ml_name
        or not verdict.candidate
    ):
        return RecheckResult.of(
            entry,
            CORRECTED,
            f"live re-check: {verdict.ledger_class} ({verdict.reason}), no longer "
            f"{entry.target_class} of {entry.ml_name}",
        )
    until = ledger.ctime_ms + policy.retention_seconds * 1000
    if now_ms < until:
        return RecheckResult.of(
            entry,
            WAITING,
            f"created {iso(ledger.ctime_ms)}, younger than retention",
            until_ms=until,
        )
    if verdict.ledger_class == classify.BK_OFFLOADED_COPY:  # the copy may be the last
        why = offloaded_copy.live_hold_reason(
            endpoints.offload, pulsar, entry.ml_name, entry.ledger_id
        )
        if why is not None:
            return RecheckResult.of(entry, HELD, why)
    reason = (
        f"BookKeeper ledger {entry.ledger_id} ({entry.target_class}: {verdict.reason}), "
        f"unreferenced since {iso(entry.first_seen_ms)} over {entry.scans_seen} scan(s), "
        f"created {iso(ledger.ctime_ms)}, confirmed by a live re-check"
    )
    if fence is None:
        return RecheckResult.of(entry, WOULD_DELETE, reason, objects=1, bytes=ledger.bytes)
    if should_stop():  # the last moment: nothing is audited or sent after a stop
        return _skipped(entry, STOPPED)
    bk.reading(1)
    acls = guarded(
        f"reading the ACL of {znode}",
        bk.hosts,
        lambda: bk.client.get_acls(znode)[0],
        refused=lambda: bk.refusal(f"reading the ACL of {znode}", zk_access.READ, znode),
    )
    return _delete(
        bookkeeper,
        bk,
        fence,
        audit,
        entry,
        ledger,
        znode,
        data,
        stat,
        reason,
        run_id,
        acls,
        should_stop,
    )


def _live_verdict(
    shared: bool,
    pulsar: MetadataStore,
    ledger: BkLedger,
    handed: Mapping[int, classify.HandedOff],
    config: MetadataStore | None = None,
    removed: frozenset[str] = frozenset(),
) -> classify.Verdict:
    tags = ledger.tags
    schema_id = tags.schema_id if tags.component == classify.SCHEMA_COMPONENT else None
    ml_name = classify.ml_of(tags)
    refs = references.read_live_references(pulsar, ml_name, schema_id, policies=config)
    mine = {ledger.ledger_id: handed[ledger.ledger_id]} if ledger.ledger_id in handed else {}
    return classify.Classifier(
        refs, shared=shared, horizon=False, handed_off=mine, removed_namespaces=removed
    ).classify(ledger)


def _live_unreadable_verdict(
    policy: Policy, pulsar: MetadataStore, ledger: BkLedger, config: MetadataStore | None = None
) -> classify.Verdict:
    """An unreadable record names no owner, so any Pulsar record could name its id: every
    reference is read again, live (rare: only with LEDGERGC_BK_REMOVE_UNREADABLE=true,
    for the few unreadable records registered). The horizon is the survey's: ids only
    grow, so a ledger older than the records read then stays older."""
    refs = references.read_references(pulsar, policies=config)
    return classify.Classifier(
        refs,
        shared=policy.bk_shared,
        horizon=False,
        remove_unreadable=policy.bk_remove_unreadable,
    ).classify(ledger)


def _delete(
    bookkeeper: BookKeeperEndpoint,
    bk: MetadataStore,
    fence: Fence,
    audit: AuditLog,
    entry: RegistryEntry,
    ledger: BkLedger,
    znode: str,
    data: bytes,
    stat: Any,
    reason: str,
    run_id: str,
    acls: list[Any],
    should_stop: Callable[[], bool],
) -> RecheckResult:
    version = stat.version

    def record(status: str, why: str = reason) -> AuditRecord:
        return AuditRecord(
            operation=OPERATION,
            target_class=entry.target_class,
            ml_name=entry.ml_name,
            ledger_id=entry.ledger_id,
            prefix=entry.prefix,
            objects=1 if status != AUDIT_NOT_DELETED else 0,
            bytes=ledger.bytes if status != AUDIT_NOT_DELETED else 0,
            reason=why,
            run_id=run_id,
            status=status,
            extra={
                "bookkeeper_hosts": bookkeeper.hosts,
                "znode": znode,
                "znode_version": version,
                "record_base64": base64.b64encode(data).decode("ascii"),
                # Restore re-creates it with these: ledger-gc's own (digest) ACL would
                # lock the bookies and brokers out of it.
                "znode_acl": zk_access.acl_rows(acls),
                "restore": restore_hint(bookkeeper),
            },
        )

    # Written ahead: a delete whose record cannot be committed is not made
    # (AuditUnavailableError stops the step).
    audit.append([record(AUDIT_DELETING)])
    if should_stop():  # the lock was lost while the record was written
        why = (
            "a stop was asked (a signal, or the delete lock lost) after its write-ahead "
            "record: the delete was not sent"
        )
        return _refused(audit, record, entry, _skipped(entry, STOPPED), why)
    try:
        outcome = fence.delete(znode, version)
    except MetadataUnavailableError as exc:
        if _never_applied(bk, fence, znode, stat):
            why = (
                f"the delete of {znode} was sent and its answer lost ({exc}), but it was "
                f"never applied: the delete lock's node {fence.path} is gone, so it never "
                "will be, and the ledger's record is unchanged; nothing deleted, the next "
                "run re-checks it"
            )
            refused = RecheckResult.of(entry, SKIPPED, why, error=why)
            return _refused(audit, record, entry, refused, why)
        # The request may have been applied and its answer lost: the audit record written
        # ahead stands for it (``ledgergc restore`` reads it), and the next run finds the
        # znode gone or re-checks it. Fenced: if it was applied, the lock was held then.
        return RecheckResult.of(
            entry,
            FAILED,
            f"the delete of {znode} was sent but its answer was lost ({exc}): it may have "
            "been applied (see the audit log's deleting record); the next run re-checks it",
            error=str(exc),
            unavailable=True,
        )
    if outcome is FencedOutcome.APPLIED:
        audit.append([record(AUDIT_DELETED)])
        log.info("deleted BookKeeper ledger %s (%s): %s", entry.ledger_id, znode, reason)
        return RecheckResult.of(
            entry,
            DELETED,
            f"{reason}; {restore_hint(bookkeeper)}",
            objects=1,
            bytes=ledger.bytes,
            deleted_ledgers=[{"znode": znode, "version": version, "bytes": ledger.bytes}],
        )
    refused = _refusal(bookkeeper, fence, entry, znode, version, outcome)
    return _refused(audit, record, entry, refused, refused.reason)


def _never_applied(bk: MetadataStore, fence: Fence, znode: str, stat: Any) -> bool:
    """After a fenced delete's answer was lost: True only when it provably was not
    applied and never will be. The lock node is removed first (on the lock's session,
    after the lost request: ZooKeeper keeps a session's order), so that no write fenced
    by it can succeed any more and one that did came before; then the znode must still
    be the one the re-check read (same ``mzxid``: not deleted and re-created since, not
    rewritten). Anything else (ZooKeeper still unreachable) is unknown: False."""
    fence.end()
    try:
        if not fence.over(bk.client):
            return False
        bk.sync(znode)
        got = bk.get_many([znode])[0]
    except MetadataUnavailableError:
        return False
    return got is not None and got[1].mzxid == stat.mzxid


def _refusal(
    bookkeeper: BookKeeperEndpoint,
    fence: Fence,
    entry: RegistryEntry,
    znode: str,
    version: int,
    outcome: FencedOutcome,
) -> RecheckResult:
    """What a delete ZooKeeper refused becomes: nothing was deleted."""
    if outcome is FencedOutcome.FENCE_LOST:
        why = (
            f"ZooKeeper refused the delete of {znode}: the delete lock's node "
            f"{fence.path} is gone (its session ended: another cycle may hold the lock); "
            "nothing deleted, the next run re-checks it"
        )
        return RecheckResult.of(entry, SKIPPED, why, error=why)
    if outcome is FencedOutcome.CHANGED:
        return RecheckResult.of(
            entry,
            CORRECTED,
            f"its record changed after the re-check (version {version} moved: BookKeeper "
            "wrote it meanwhile); nothing deleted",
        )
    if outcome is FencedOutcome.MISSING:
        return RecheckResult.of(entry, GONE, "its znode vanished just before the delete")
    if outcome is FencedOutcome.NOT_EMPTY:
        return _failed(entry, f"{znode} has children: not a ledger's leaf znode; kept")
    # NoAuth: ZooKeeper checks DELETE on the parent. Said with the identity the lock's
    # session has (whoAmI) and who has DELETE there (a sasl: ACL is BookKeeper's
    # zkEnableSecurity: its bookies' identity, never a digest).
    refused = zk_access.refusal(
        fence.client,
        bookkeeper.hosts,
        what=f"the delete of {znode}",
        permission=zk_access.DELETE,
        znode=znode,
        checked=znode.rsplit("/", 1)[0] or "/",
        names=bookkeeper.zk.names,
    )
    return _failed(entry, f"{refused}; kept")


def _refused(
    audit: AuditLog,
    record: Callable[..., AuditRecord],
    entry: RegistryEntry,
    result: RecheckResult,
    why: str,
) -> RecheckResult:
    """Close the write-ahead record of a delete that was not made, with why."""
    audit.append([record(AUDIT_NOT_DELETED, f"not deleted: {why}")])
    log.warning("BookKeeper ledger %s not deleted: %s", entry.ledger_id, why)
    return result
