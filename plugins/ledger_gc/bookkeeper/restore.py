"""Put back the metadata znodes of the BookKeeper ledgers one run deleted.

Deleting a BookKeeper ledger is removing its metadata znode; its data stays on the
bookies until their next garbage collection (``gcWaitTime``, 10 minutes by default),
which drops every ledger whose znode it does not find. The write-ahead audit record of
each delete keeps the record's bytes, its znode and the BookKeeper it was in, so until
then the ledger can be brought back by creating the znode again with those bytes.
**After that garbage collection the data is gone for good**: a re-created znode would
name a ledger no bookie has, so a restore warns, and an operator should run it within
minutes of the delete.

A restore is audited ahead like a delete (``restoring`` before the create, ``restored``
after; ``not-restored`` when ZooKeeper refused it), never overwrites a znode that exists
(an id is never reused: an existing znode is not ours to replace), and refuses records
of another BookKeeper than the settings name. A znode that already holds exactly the
audited bytes is restored already (a second run of the same restore, or the delete's
answer lost and the delete never applied): counted so, not an error. The create is
fenced by the delete lock like the delete (``metadata/fencing.py``): a restore frozen
past its lock's session cannot re-create a znode after a cycle took the lock. A
restored ledger is an orphan again, under the same three phases.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable
from typing import Any

from ledger_gc.audit import NOT_RESTORED, RESTORE, RESTORED, RESTORING, AuditLog, AuditRecord
from ledger_gc.config.endpoints import BookKeeperEndpoint
from ledger_gc.metadata import zk_access
from ledger_gc.metadata.fencing import Fence
from ledger_gc.metadata.recreate import AHEAD, DONE, REFUSED, recreate
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.metadata.zk_client import guarded

log = logging.getLogger(__name__)

WARNING = (
    "a BookKeeper ledger can be restored only until the bookies' next garbage collection "
    "(gcWaitTime, 10 minutes by default) after its delete: after that its data is gone "
    "and the re-created metadata names a ledger no bookie holds"
)


def restore_ledgers(
    bookkeeper: BookKeeperEndpoint,
    audit: AuditLog,
    restore_id: str,
    records: Iterable[dict[str, Any]],
    *,
    dry_run: bool,
    fence: Fence | None,
) -> list[dict[str, Any]]:
    """Re-create the znodes of the ``deleted`` BookKeeper records of one run; one result
    per record (``error`` set where it could not be restored, ``already`` where the
    znode holds the record's bytes). ``fence``: the delete lock's, for BookKeeper's
    sessions (required unless ``dry_run``). Once the lock is lost nothing more is
    created: the records left get that error."""
    if not dry_run and fence is None:
        raise ValueError("a BookKeeper restore needs the delete lock's fence")
    results: list[dict[str, Any]] = []
    items = list(records)
    if not items:
        return results
    with MetadataStore.open(bookkeeper.zk) as bk:
        for record in items:
            if fence is not None and fence.gone is not None:
                results.append(_result(record, error=f"not restored: the delete lock {fence.gone}"))
                continue
            results.append(_restore_one(bookkeeper, bk, audit, restore_id, record, fence))
    return results


def _result(record: dict[str, Any], *, error: str | None = None) -> dict[str, Any]:
    return {
        "prefix": record["prefix"],
        "target_class": record["target_class"],
        "ml_name": record["ml_name"],
        "ledger_id": record.get("ledger_id"),
        "znode": record.get("znode"),
        "bytes": int(record.get("bytes") or 0),
        "restored": False,
        "already": False,
        "error": error,
    }


def _restore_one(
    bookkeeper: BookKeeperEndpoint,
    bk: MetadataStore,
    audit: AuditLog,
    restore_id: str,
    record: dict[str, Any],
    fence: Fence | None,
) -> dict[str, Any]:
    znode = record.get("znode")
    result = _result(record)
    raw = record.get("record_base64")
    if not znode or raw is None:
        result["error"] = "the audit record has no znode or record bytes (an older ledger-gc)"
        return result
    if record.get("bookkeeper_hosts") != bookkeeper.hosts:
        result["error"] = (
            f"deleted from BookKeeper at {record.get('bookkeeper_hosts')}, but the settings "
            f"point at {bookkeeper.hosts} (LEDGERGC_BK_ZK_HOSTS); not restored"
        )
        return result
    data = base64.b64decode(raw)
    acl = zk_access.acl_of_rows(record.get("znode_acl"))
    parent = znode.rsplit("/", 1)[0]

    def parents() -> None:
        # With the ledger's own ACL (BookKeeper gives a ledger's parents its ACL): an
        # empty parent is harmless, unlike a ledger znode, so it is not fenced.
        guarded(f"creating {parent}", bk.hosts, lambda: bk.client.ensure_path(parent, acl=acl))

    done = recreate(
        bookkeeper.zk,
        bk,
        fence,
        znode,
        data,
        acl,
        note=lambda step, why: audit.append([_audit(record, restore_id, _STATUS[step], why=why)]),
        prepare=parents,
    )
    result.update(restored=done.restored, already=done.already, error=done.error)
    if done.restored:
        log.info("restored BookKeeper ledger %s (%s)", record.get("ledger_id"), znode)
    return result


#: The audit status of each step of a restore (``recreate``'s ``note``).
_STATUS = {AHEAD: RESTORING, DONE: RESTORED, REFUSED: NOT_RESTORED}


def _audit(
    record: dict[str, Any], restore_id: str, status: str, *, why: str | None = None
) -> AuditRecord:
    done = status != NOT_RESTORED
    return AuditRecord(
        operation=RESTORE,
        target_class=str(record["target_class"]),
        ml_name=str(record["ml_name"]),
        ledger_id=record.get("ledger_id"),
        prefix=str(record["prefix"]),
        objects=1 if done else 0,
        bytes=int(record.get("bytes") or 0) if done else 0,
        reason=f"restore of run {record['run_id']}: {why or WARNING}",
        run_id=restore_id,
        status=status,
        extra={"znode": record.get("znode"), "restores_run": record["run_id"]},
    )
