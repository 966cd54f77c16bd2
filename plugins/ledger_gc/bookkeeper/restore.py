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
after), never overwrites a znode that exists (an id is never reused: an existing znode is
not ours to replace), and refuses records of another BookKeeper than the settings name.
A restored ledger is an orphan again, under the same three phases.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable
from typing import Any

from kazoo.exceptions import NodeExistsError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id

from ledger_gc.audit import RESTORE, RESTORED, RESTORING, AuditLog, AuditRecord
from ledger_gc.errors import AuditUnavailableError
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.metadata.zk_client import guarded
from ledger_gc.settings import Settings

log = logging.getLogger(__name__)

WARNING = (
    "a BookKeeper ledger can be restored only until the bookies' next garbage collection "
    "(gcWaitTime, 10 minutes by default) after its delete: after that its data is gone "
    "and the re-created metadata names a ledger no bookie holds"
)


def restore_ledgers(
    settings: Settings,
    audit: AuditLog,
    restore_id: str,
    records: Iterable[dict[str, Any]],
    *,
    dry_run: bool,
) -> list[dict[str, Any]]:
    """Re-create the znodes of the ``deleted`` BookKeeper records of one run; one result
    per record (``error`` set where it could not be restored)."""
    results: list[dict[str, Any]] = []
    items = list(records)
    if not items:
        return results
    with MetadataStore.open(settings.bookkeeper_settings()) as bk:
        for record in items:
            results.append(_restore_one(settings, bk, audit, restore_id, record, dry_run))
    return results


def _restore_one(
    settings: Settings,
    bk: MetadataStore,
    audit: AuditLog,
    restore_id: str,
    record: dict[str, Any],
    dry_run: bool,
) -> dict[str, Any]:
    znode = record.get("znode")
    result: dict[str, Any] = {
        "prefix": record["prefix"],
        "target_class": record["target_class"],
        "ml_name": record["ml_name"],
        "ledger_id": record.get("ledger_id"),
        "znode": znode,
        "bytes": int(record.get("bytes") or 0),
        "restored": False,
        "error": None,
    }
    raw = record.get("record_base64")
    if not znode or raw is None:
        result["error"] = "the audit record has no znode or record bytes (an older ledger-gc)"
        return result
    if record.get("bookkeeper_hosts") != settings.bookkeeper_hosts:
        result["error"] = (
            f"deleted from BookKeeper at {record.get('bookkeeper_hosts')}, but the settings "
            f"point at {settings.bookkeeper_hosts} (LEDGERGC_BK_ZK_HOSTS); not restored"
        )
        return result
    data = base64.b64decode(raw)
    if guarded(f"checking {znode}", bk.hosts, lambda: bk.client.exists(znode)) is not None:
        result["error"] = f"{znode} exists: not replaced"
        return result
    if dry_run:
        return result
    audit.append([_audit(record, restore_id, RESTORING)])

    acl = _acl_of(record)

    def create() -> bool:
        try:
            bk.client.create(znode, data, acl=acl, makepath=True)
        except NodeExistsError:
            return False
        return True

    if not guarded(f"re-creating {znode}", bk.hosts, create):
        result["error"] = f"{znode} was created by someone else meanwhile: not replaced"
        return result
    try:
        audit.append([_audit(record, restore_id, RESTORED)])
    except AuditUnavailableError:
        log.warning("restored %s but could not record it in the audit log", znode)
        raise
    result["restored"] = True
    log.info("restored BookKeeper ledger %s (%s)", record.get("ledger_id"), znode)
    return result


def _acl_of(record: dict[str, Any]) -> list[ACL] | None:
    """The znode's ACL as the delete read it (None: a record without one, then
    ZooKeeper's open ACL, as BookKeeper creates ledger znodes without auth)."""
    saved = record.get("znode_acl")
    if not saved:
        return list(OPEN_ACL_UNSAFE)
    return [ACL(int(perms), Id(str(scheme), str(ident))) for perms, scheme, ident in saved]


def _audit(record: dict[str, Any], restore_id: str, status: str) -> AuditRecord:
    return AuditRecord(
        operation=RESTORE,
        target_class=str(record["target_class"]),
        ml_name=str(record["ml_name"]),
        ledger_id=record.get("ledger_id"),
        prefix=str(record["prefix"]),
        objects=1,
        bytes=int(record.get("bytes") or 0),
        reason=f"restore of run {record['run_id']}: {WARNING}",
        run_id=restore_id,
        status=status,
        extra={"znode": record.get("znode"), "restores_run": record["run_id"]},
    )
