"""Put back the Pulsar-metadata znodes one run removed (``ledgergc restore --run ID``).

The write-ahead audit record of each removed znode keeps its store and that store's
address, its path, bytes and ACL, and the ACL of each of its ancestors. A restore
re-creates the run's znodes shallowest first (a parent before its children), each one's
missing ancestors first with the ACLs they had, then the znode with its bytes and ACL.
Like the BookKeeper restore (``bookkeeper/restore.py``) it is audited ahead
(``restoring``, then ``restored``, or ``not-restored`` with why), fenced by the delete
lock of the store's ensemble (``metadata/fencing.py``), never writes over a znode that
exists, and counts a znode that already holds the audited bytes as restored (a second
run of the same restore exits 0 and changes nothing). Nor does it put a znode below one
the run removed that is not restored (re-created since with other bytes: a topic made
again, whose cursor the removed one is not), nor re-create that one empty. A record of
another store's address than the settings name now is not restored.

A restored leftover is a leftover again: the next survey finds it, and the three phases
decide again. The ledgers its records named were handed to the BookKeeper source when
they were removed; restoring the records makes them referenced again, which that
source's live re-check sees before any of them goes.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Iterable
from contextlib import ExitStack
from typing import Any

from ledger_gc.audit import (
    DELETED,
    NOT_DELETED,
    NOT_RESTORED,
    RESTORE,
    RESTORED,
    RESTORING,
    AuditLog,
    AuditRecord,
)
from ledger_gc.config.endpoints import Endpoints, ZkEndpoint
from ledger_gc.errors import MetadataUnavailableError
from ledger_gc.metadata import zk_access
from ledger_gc.metadata.fencing import Fence, FencedOutcome, create_refusal
from ledger_gc.metadata.recreate import AHEAD, DONE, REFUSED, recreate
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.pulsar_metadata import leftovers
from ledger_gc.rules.pulsar_metadata.classes import CONFIG, LOCAL, PM_ORPHAN_CLASSES

log = logging.getLogger(__name__)

NOTE = (
    "restored Pulsar metadata is a leftover again: the next survey registers it and the "
    "three phases decide again; create its namespace's policies to keep it"
)


def records_to_restore(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The record to restore each Pulsar-metadata znode of a run from: the last one of
    its deletes decides (an Airflow retry of the delete task runs them again, same run).
    A ``deleted`` record, or a ``deleting`` one left open (its answer was lost: it may
    have been applied), names it; a ``not-deleted`` one (ZooKeeper refused it) does not.
    None: the run has no Pulsar-metadata records at all."""
    mine = [
        r
        for r in records
        if r.get("target_class") in PM_ORPHAN_CLASSES and r.get("operation") != RESTORE
    ]
    if not mine:
        return None
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for record in mine:  # oldest first: the log's order
        last[(str(record.get("store")), str(record.get("znode")))] = record
    return [r for r in last.values() if r.get("status", DELETED) != NOT_DELETED]


def restore_znodes(
    endpoints: Endpoints,
    audit: AuditLog,
    restore_id: str,
    records: Iterable[dict[str, Any]],
    *,
    dry_run: bool,
    fence_for: Callable[[ZkEndpoint], Fence] | None,
) -> list[dict[str, Any]]:
    """Re-create the run's removed znodes, shallowest first; one result per record
    (``error`` where it could not be restored, ``already`` where the znode holds the
    record's bytes). ``fence_for``: the delete lock's (required unless ``dry_run``).
    Once a store's lock is lost nothing more is created there."""
    if not dry_run and fence_for is None:
        raise ValueError("a Pulsar-metadata restore needs the delete lock's fence")
    items = sorted(records, key=lambda r: (str(r.get("znode")).count("/"), str(r.get("znode"))))
    results: list[dict[str, Any]] = []
    if not items:
        return results
    endpoint = {LOCAL: endpoints.zk, CONFIG: endpoints.configuration}
    kept_out: dict[tuple[str, str], str] = {}
    with ExitStack() as stack:
        sessions: dict[str, MetadataStore] = {}
        for record in items:
            store = str(record.get("store"))
            if store not in endpoint:
                results.append(_result(record, error=f"unknown store {store!r}; not restored"))
                continue
            where = endpoint[store]
            if record.get("hosts") != where.hosts:
                results.append(
                    _result(
                        record,
                        error=f"removed from the {store} store at {record.get('hosts')}, but the "
                        f"settings point at {where.hosts}; not restored",
                    )
                )
                continue
            if store not in sessions:
                sessions[store] = stack.enter_context(MetadataStore.open(where))
            fence = None if fence_for is None else fence_for(where)
            if fence is not None and fence.gone is not None:
                results.append(_result(record, error=f"not restored: the delete lock {fence.gone}"))
                continue
            above = _kept_out_above(store, str(record.get("znode")), kept_out)
            if above is not None:
                results.append(_result(record, error=above))
            else:
                results.append(
                    _restore_one(where, sessions[store], audit, restore_id, record, fence)
                )
            if results[-1]["error"] is not None:
                kept_out[(store, str(record.get("znode")))] = results[-1]["error"]
    return results


def _kept_out_above(store: str, znode: str, kept_out: dict[tuple[str, str], str]) -> str | None:
    """Why ``znode`` stays out (None: it may be restored): an ancestor the run removed
    too that was not restored (re-created since with other bytes: another incarnation,
    a live topic whose cursor this is not; or refused). Its missing ancestors would
    otherwise be re-created empty, or it would join that other incarnation."""
    for path in leftovers.ancestors(znode):
        if (store, path) in kept_out:
            return (
                f"{znode} not restored: the run removed {path} too, which is not restored "
                f"({kept_out[(store, path)]})"
            )
    return None


def _result(record: dict[str, Any], *, error: str | None = None) -> dict[str, Any]:
    return {
        "prefix": record["prefix"],
        "target_class": record["target_class"],
        "ml_name": record["ml_name"],
        "ledger_id": None,
        "store": record.get("store"),
        "hosts": record.get("hosts"),
        "znode": record.get("znode"),
        "bytes": int(record.get("bytes") or 0),
        "restored": False,
        "already": False,
        "error": error,
    }


def _restore_one(
    where: ZkEndpoint,
    store: MetadataStore,
    audit: AuditLog,
    restore_id: str,
    record: dict[str, Any],
    fence: Fence | None,
) -> dict[str, Any]:
    znode = record.get("znode")
    result = _result(record)
    raw = record.get("record_base64")
    if not znode or raw is None:
        result["error"] = "the audit record has no znode or bytes"
        return result
    done = recreate(
        where,
        store,
        fence,
        znode,
        base64.b64decode(raw),
        zk_access.acl_of_rows(record.get("znode_acl")),
        note=lambda step, why: audit.append([_audit(record, restore_id, _STATUS[step], why=why)]),
        prepare=lambda: _ancestors(where, store, fence, record) if fence is not None else None,
    )
    result.update(restored=done.restored, already=done.already, error=done.error)
    if done.restored:
        log.info("restored %s in the %s store", znode, record.get("store"))
    return result


#: The audit status of each step of a restore (``recreate``'s ``note``).
_STATUS = {AHEAD: RESTORING, DONE: RESTORED, REFUSED: NOT_RESTORED}


def _ancestors(
    where: ZkEndpoint, store: MetadataStore, fence: Fence, record: dict[str, Any]
) -> str | None:
    """Create the znode's missing ancestors, shallowest first, with the ACLs they had
    (empty: a path node); why not (None: all there)."""
    for path, acl in record.get("ancestors") or []:
        if store.data_now(path) is not None:
            continue
        try:
            outcome = fence.create(path, b"", zk_access.acl_of_rows(acl))
        except MetadataUnavailableError as exc:
            return f"the create of {path} was sent but its answer was lost ({exc})"
        if outcome not in (FencedOutcome.APPLIED, FencedOutcome.EXISTS):
            return create_refusal(where, fence, path, outcome)
    return None


def _audit(
    record: dict[str, Any], restore_id: str, status: str, *, why: str | None = None
) -> AuditRecord:
    done = status != NOT_RESTORED
    return AuditRecord(
        operation=RESTORE,
        target_class=str(record["target_class"]),
        ml_name=str(record["ml_name"]),
        ledger_id=None,
        prefix=str(record["prefix"]),
        objects=1 if done else 0,
        bytes=int(record.get("bytes") or 0) if done else 0,
        reason=f"restore of run {record['run_id']}: {why or NOTE}",
        run_id=restore_id,
        status=status,
        extra={
            "store": record.get("store"),
            "hosts": record.get("hosts"),
            "znode": record.get("znode"),
            "restores_run": record["run_id"],
        },
    )
