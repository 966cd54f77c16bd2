"""Phase 3 for BookKeeper ledgers: re-check each one live, then remove its znode.

For each eligible registry entry (``bookkeeper:<znode>``), just before its delete:

1. the target must be exactly the znode of its ledger id under the configured root and
   the layout its LAYOUT names now (a registry row of another root or layout is kept);
2. ``sync``, then the ledger's znode is read again: gone means deleted already; a record
   that no longer decodes is kept;
3. the Pulsar records that can reference it are read again, live (its managed ledger and
   cursors, or its schema locator, and its namespace: ``references.read_live_references``),
   and the same rules that classified it (``classify.Classifier``) must give the same
   class and owner; anything else corrects it away;
4. its age (the record's ctime, else the znode's) must be past retention on the servers'
   clock;
5. a ``deleting`` audit record with the record's bytes, znode and version is committed,
   and only then the leaf znode is deleted **at the version read in step 2** (never -1,
   never a parent: BookKeeper's own delete prunes empty parents, and a parent removed
   under a concurrent create has made bookies drop live ledgers). A version that moved
   (BookKeeper closed or recovered it meanwhile) deletes nothing.

The bookies drop the data at their next garbage collection (``gcWaitTime``, default 10
minutes); until then ``ledgergc restore --run ID`` can put the record back.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from typing import Any

from kazoo.exceptions import BadVersionError, NoNodeError, NotEmptyError

from ledger_gc import termination
from ledger_gc.audit import DELETED as AUDIT_DELETED
from ledger_gc.audit import DELETING as AUDIT_DELETING
from ledger_gc.audit import AuditLog, AuditRecord
from ledger_gc.bookkeeper import offloaded_copy, references, scan
from ledger_gc.errors import AuditUnavailableError, MetadataUnavailableError
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
    STOPPED,
    WAITING,
    WOULD_DELETE,
    RecheckResult,
)
from ledger_gc.rules.orphans.outcomes import skipped as _skipped
from ledger_gc.rules.orphans.phases import RegistryEntry, iso
from ledger_gc.settings import Settings

log = logging.getLogger(__name__)


def restore_hint(settings: Settings) -> str:
    return (
        "ledgergc restore --run <run> re-creates it until the bookies' next garbage "
        f"collection (gcWaitTime, 10 minutes by default) at {settings.bookkeeper_hosts}"
    )


def recheck_and_delete(
    settings: Settings,
    entries: Iterable[RegistryEntry],
    *,
    run_id: str,
    now_ms: int,
    deleting: bool,
    should_stop: Callable[[], bool] = termination.requested,
) -> list[RecheckResult]:
    """Re-check and delete (or, when not ``deleting``, only report) BookKeeper entries.

    ``should_stop`` (a termination signal, a lost delete lock) is asked before each
    entry and again just before each delete's audit record: once true, nothing more is
    sent and the entries left are ``skipped``."""
    items = list(entries)
    if not items:
        return []
    audit = AuditLog(settings)
    results: list[RecheckResult] = []
    with ExitStack() as stack:
        try:
            pulsar, bk = stack.enter_context(scan.sessions(settings))
            layout = scan.read_layout(bk, settings.bk_ledgers_root)
        except MetadataUnavailableError as exc:
            return [_skipped(entry, str(exc)) for entry in items]
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
                        settings,
                        pulsar,
                        bk,
                        layout,
                        audit,
                        entry,
                        run_id,
                        now_ms,
                        deleting,
                        should_stop,
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
    settings: Settings,
    pulsar: MetadataStore,
    bk: MetadataStore,
    layout: str | None,
    audit: AuditLog,
    entry: RegistryEntry,
    run_id: str,
    now_ms: int,
    deleting: bool,
    should_stop: Callable[[], bool],
) -> RecheckResult:
    root = settings.bk_ledgers_root
    znode = znode_of_target(entry.prefix)
    if layout is None:
        return _failed(entry, f"{settings.bookkeeper_hosts}{root}/LAYOUT is gone; kept")
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
    if ledger.error is not None:
        return _failed(entry, f"its record does not decode any more ({ledger.error}); kept")
    if settings.bk_shared and entry.target_class in BK_NAME_JUDGED:
        return RecheckResult.of(
            entry,
            HELD,
            "LEDGERGC_BK_SHARED=true: a ledger judged by its Pulsar name may be another "
            "cluster's; kept",
        )
    verdict = _live_verdict(settings, pulsar, ledger)
    if verdict.ledger_class != entry.target_class or verdict.owner != entry.ml_name:
        return RecheckResult.of(
            entry,
            CORRECTED,
            f"live re-check: {verdict.ledger_class} ({verdict.reason}), no longer "
            f"{entry.target_class} of {entry.ml_name}",
        )
    until = ledger.ctime_ms + settings.retention_seconds * 1000
    if now_ms < until:
        return RecheckResult.of(
            entry,
            WAITING,
            f"created {iso(ledger.ctime_ms)}, younger than retention",
            until_ms=until,
        )
    if verdict.ledger_class == classify.BK_OFFLOADED_COPY:  # the copy may be the last
        why = offloaded_copy.live_hold_reason(settings, pulsar, entry.ml_name, entry.ledger_id)
        if why is not None:
            return RecheckResult.of(entry, HELD, why)
    reason = (
        f"BookKeeper ledger {entry.ledger_id} ({entry.target_class}: {verdict.reason}), "
        f"unreferenced since {iso(entry.first_seen_ms)} over {entry.scans_seen} scan(s), "
        f"created {iso(ledger.ctime_ms)}, confirmed by a live re-check"
    )
    if not deleting:
        return RecheckResult.of(entry, WOULD_DELETE, reason, objects=1, bytes=ledger.bytes)
    if should_stop():  # the last moment: nothing is audited or sent after a stop
        return _skipped(entry, STOPPED)
    acls = guarded(f"reading the ACL of {znode}", bk.hosts, lambda: bk.client.get_acls(znode)[0])
    return _delete(
        settings,
        bk,
        audit,
        entry,
        ledger,
        znode,
        data,
        stat.version,
        reason,
        run_id,
        acls,
        should_stop,
    )


def _live_verdict(settings: Settings, pulsar: MetadataStore, ledger: BkLedger) -> classify.Verdict:
    tags = ledger.tags
    schema_id = tags.schema_id if tags.component == classify.SCHEMA_COMPONENT else None
    ml_name = classify.ml_of(tags)
    refs = references.read_live_references(pulsar, ml_name, schema_id)
    return classify.Classifier(refs, shared=settings.bk_shared, horizon=False).classify(ledger)


def _delete(
    settings: Settings,
    bk: MetadataStore,
    audit: AuditLog,
    entry: RegistryEntry,
    ledger: BkLedger,
    znode: str,
    data: bytes,
    version: int,
    reason: str,
    run_id: str,
    acls: list[Any],
    should_stop: Callable[[], bool],
) -> RecheckResult:
    def record(status: str) -> AuditRecord:
        return AuditRecord(
            operation=OPERATION,
            target_class=entry.target_class,
            ml_name=entry.ml_name,
            ledger_id=entry.ledger_id,
            prefix=entry.prefix,
            objects=1,
            bytes=ledger.bytes,
            reason=reason,
            run_id=run_id,
            status=status,
            extra={
                "bookkeeper_hosts": settings.bookkeeper_hosts,
                "znode": znode,
                "znode_version": version,
                "record_base64": base64.b64encode(data).decode("ascii"),
                # Restore re-creates it with these: ledger-gc's own (digest) ACL would
                # lock the bookies and brokers out of it.
                "znode_acl": [[a.perms, a.id.scheme, a.id.id] for a in acls],
                "restore": restore_hint(settings),
            },
        )

    # Written ahead: a delete whose record cannot be committed is not made
    # (AuditUnavailableError stops the step).
    audit.append([record(AUDIT_DELETING)])
    if should_stop():  # the lock was lost while the record was written
        return _skipped(entry, STOPPED)

    def remove() -> str | None:
        try:
            bk.client.delete(znode, version=version)
        except BadVersionError:
            return "changed"
        except NoNodeError:
            return "gone"
        except NotEmptyError:
            return "not-empty"
        return None

    try:
        outcome = guarded(f"deleting {znode}", bk.hosts, remove)
    except MetadataUnavailableError as exc:
        # The request may have been applied and its answer lost: the audit record written
        # ahead stands for it (``ledgergc restore`` reads it), and the next run finds the
        # znode gone or re-checks it.
        return RecheckResult.of(
            entry,
            FAILED,
            f"the delete of {znode} was sent but its answer was lost ({exc}): it may have "
            "been applied (see the audit log's deleting record); the next run re-checks it",
            error=str(exc),
            unavailable=True,
        )
    if outcome == "changed":
        return RecheckResult.of(
            entry,
            CORRECTED,
            f"its record changed after the re-check (version {version} moved: BookKeeper "
            "wrote it meanwhile); nothing deleted",
        )
    if outcome == "gone":
        return RecheckResult.of(entry, GONE, "its znode vanished just before the delete")
    if outcome == "not-empty":
        return _failed(entry, f"{znode} has children: not a ledger's leaf znode; kept")
    audit.append([record(AUDIT_DELETED)])
    log.info("deleted BookKeeper ledger %s (%s): %s", entry.ledger_id, znode, reason)
    return RecheckResult.of(
        entry,
        DELETED,
        f"{reason}; {restore_hint(settings)}",
        objects=1,
        bytes=ledger.bytes,
        deleted_ledgers=[{"znode": znode, "version": version, "bytes": ledger.bytes}],
    )
