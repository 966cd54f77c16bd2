"""Deleting a whole managed ledger without leaking data if it stops half way.

Three steps, each safe to crash after and to run again:

1. one CAS write moves every ledger of the list to a deletable marker (the same marker
   the trim writes), so from here on every ledger with data is *marked*;
2. the data of every marked ledger is deleted through the one delete path and the markers
   of the ledgers that are gone are removed (``marking.purge_marked``);
3. once no marker is left, the cursors' znodes and then the managed ledger's znode go.

A crash after step 1 or 2 leaves a managed ledger with markers: running the delete again
(or any trim) finishes it. Pulsar's own delete removes the znode first and then the
ledgers, which leaks every ledger whose delete fails: the leak this project exists for.
"""

from __future__ import annotations

import logging
import time

from ledger_gc.deletion import Deleter
from ledger_gc.errors import DeleteFailedError, ManagedLedgerNotFoundError, RecordTooLargeError
from ledger_gc.formats.markers import deletable_markers
from ledger_gc.formats.records import get_property, set_property
from ledger_gc.marking import PurgeResult, mark_deletable, purge_marked
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.proto.mldataformats_pb2 import ManagedLedgerInfo
from ledger_gc.rules.metadata import paths

log = logging.getLogger(__name__)

DELETING_PROPERTY = "ledger-gc.deleting"
OPERATION = "managed-ledger-delete"


def delete_managed_ledger(
    ml_name: str, store: MetadataStore, deleter: Deleter, *, now_ms: int | None = None
) -> int:
    """Delete a managed ledger's data and metadata; return the bytes reclaimed.

    The caller must own the managed ledger (``ManagedLedger.delete`` does), so that no
    writer adds a ledger while this runs. Safe to call again after any failure.
    """
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    try:
        store.get_managed_ledger(ml_name)
    except ManagedLedgerNotFoundError:
        return 0  # finished by an earlier attempt

    # Oldest ledgers first, as many per round as fit in one znode write: a managed ledger
    # with thousands of ledgers is marked and purged in several rounds.
    limit: list[int | None] = [None]

    def mark_all(info: ManagedLedgerInfo) -> bool:
        ids = sorted(ledger.ledgerId for ledger in info.ledgerInfo)[: limit[0]]
        already = get_property(info, DELETING_PROPERTY) is not None
        if not ids and already:
            return False
        mark_deletable(info, ids, now)
        set_property(info, DELETING_PROPERTY, str(now))
        return True

    result = PurgeResult(ml_name)
    while True:
        try:
            marked = store.update_managed_ledger(ml_name, mark_all)
        except RecordTooLargeError:
            current = limit[0] or len(store.get_managed_ledger(ml_name).value.ledgerInfo)
            if current <= 1:
                raise
            limit[0] = current // 2
            continue
        purged = purge_marked(
            ml_name,
            store,
            deleter,
            operation=OPERATION,
            now_ms=now,
            info=marked.value,
            reason="managed ledger deleted",
        )
        result.deleted += purged.deleted
        result.cleared += purged.cleared
        result.pending.update(purged.pending)
        if purged.pending or not marked.value.ledgerInfo:
            break
    if result.pending:
        raise DeleteFailedError(
            f"managed ledger {ml_name}: {len(result.pending)} ledgers could not be deleted "
            "and stay marked; run the delete (or a trim) again",
            {str(lid): err for lid, err in result.pending.items()},
        )
    for cursor in store.list_cursors(ml_name):
        store.delete_cursor(ml_name, cursor)
    final = store.get_managed_ledger(ml_name)
    leftover = deletable_markers(final.value, path=paths.managed_ledger_path(ml_name))
    if final.value.ledgerInfo or leftover:
        raise DeleteFailedError(
            f"managed ledger {ml_name} gained ledgers while being deleted; not removed",
            {},
        )
    store.delete_managed_ledger_node(ml_name, final.version)
    log.info("deleted managed ledger %s (%d bytes)", ml_name, result.bytes_reclaimed)
    return result.bytes_reclaimed
