"""Re-creating one znode a run removed, fenced, never over another: both restores'.

BookKeeper's ledger znodes (``bookkeeper/restore.py``) and Pulsar's own metadata
(``pulsar_metadata/restore.py``) come back the same way: a znode that is there already
counts as restored when it holds the audited bytes and is never replaced otherwise; a
restore's write-ahead record is written before anything is created; its parents are
prepared (each restore knows how its own were created); the create is fenced by the
delete lock (``fencing``), and one that ZooKeeper refuses closes the write-ahead record
as not restored, with why. The audit records are the caller's (``note``, called with
``AHEAD``, ``DONE`` or ``REFUSED``): this module is below the audit log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ledger_gc.config.endpoints import ZkEndpoint
from ledger_gc.errors import AuditUnavailableError, MetadataUnavailableError
from ledger_gc.metadata.fencing import Fence, FencedOutcome, create_refusal
from ledger_gc.metadata.store import MetadataStore

log = logging.getLogger(__name__)


#: What ``note`` is told: the write-ahead record, the znode re-created, or not (with why).
AHEAD = "ahead"
DONE = "done"
REFUSED = "refused"


@dataclass(frozen=True)
class Recreated:
    """What became of one znode: re-created, there already with its bytes, or why not."""

    restored: bool = False
    already: bool = False
    error: str | None = None


def recreate(
    endpoint: ZkEndpoint,
    store: MetadataStore,
    fence: Fence | None,
    znode: str,
    data: bytes,
    acl: list[Any],
    *,
    note: Callable[[str, str | None], object],
    prepare: Callable[[], str | None],
) -> Recreated:
    """Re-create ``znode`` with ``data`` and ``acl``. ``fence`` None: a dry run (nothing
    written, nothing noted). ``note(step, why)`` writes the caller's audit record:
    ``AHEAD`` before anything is created, ``DONE`` or ``REFUSED`` after (an
    ``AuditUnavailableError`` stops the restore there). ``prepare()`` creates the
    parents the restore's own way, returning why it could not (None: done)."""
    present = store.data_now(znode)
    if present is not None:
        if present == data:
            return Recreated(already=True)
        return Recreated(error=f"{znode} exists with other bytes: not replaced")
    if fence is None:
        return Recreated()
    note(AHEAD, None)
    failed = prepare()
    if failed is None:
        try:
            outcome = fence.create(znode, data, acl)
        except MetadataUnavailableError as exc:
            return Recreated(
                error=f"the create of {znode} was sent but its answer was lost ({exc})"
            )
        if outcome is FencedOutcome.EXISTS and store.data_now(znode) == data:
            note(REFUSED, f"{znode} was re-created meanwhile with the audited bytes")
            return Recreated(already=True)
        if outcome is not FencedOutcome.APPLIED:
            failed = create_refusal(endpoint, fence, znode, outcome)
    if failed is not None:
        note(REFUSED, failed)
        return Recreated(error=failed)
    try:
        note(DONE, None)
    except AuditUnavailableError:
        log.warning("restored %s but could not record it in the audit log", znode)
        raise
    return Recreated(restored=True)
