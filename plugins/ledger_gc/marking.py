"""Mark-then-delete: the two metadata steps around a ledger's data delete.

The design of Pulsar PIP-129 (issue 13526): a ledger leaves the ledger list in the same
compare-and-set write that adds its ``ledger-gc.deletable.<id>`` marker; its data is
deleted afterwards; its marker is removed only once no block of it is left. So at every
instant a ledger with data is listed or marked, and a crash anywhere in between leaves a
marker that the next run retries. The trim and the managed-ledger delete both use this.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from dataclasses import dataclass, field

from ledger_gc import formats
from ledger_gc.deletion import Deleter, DeleteTarget, TargetOutcome
from ledger_gc.metadata import paths
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.proto.mldataformats_pb2 import ManagedLedgerInfo
from ledger_gc.storage.keys import ledger_dir

log = logging.getLogger(__name__)


def mark_deletable(
    info: ManagedLedgerInfo, ledger_ids: Collection[int], marked_at: int, reason: str
) -> list[int]:
    """Move ledgers from the ledger list to deletable markers, in place (pure).

    Returns the ids actually moved: an id not in the list (already marked by an earlier
    attempt of the same CAS, or never there) is left alone.
    """
    wanted = set(ledger_ids)
    moved = [ledger.ledgerId for ledger in info.ledgerInfo if ledger.ledgerId in wanted]
    for ledger in info.ledgerInfo:
        if ledger.ledgerId in wanted:
            formats.set_property(
                info,
                formats.marker_key(ledger.ledgerId),
                formats.encode_marker_value(
                    size=ledger.size,
                    entries=ledger.entries,
                    timestamp=ledger.timestamp,
                    marked_at=marked_at,
                    reason=reason,
                ),
            )
    for index in reversed(range(len(info.ledgerInfo))):
        if info.ledgerInfo[index].ledgerId in wanted:
            del info.ledgerInfo[index]
    return moved


def record_failures(info: ManagedLedgerInfo, failures: dict[int, str], attempted_at: int) -> bool:
    """Note the last error and attempt count on each still-pending marker (pure)."""
    changed = False
    for ledger_id, error in failures.items():
        key = formats.marker_key(ledger_id)
        raw = formats.get_property(info, key)
        if raw is None:
            continue
        value = formats.decode_marker_value(raw, key=key)
        value["attempts"] = int(value.get("attempts", 0)) + 1
        value["lastError"] = error[:300]
        value["lastAttemptAt"] = attempted_at
        formats.set_property(info, key, json.dumps(value, separators=(",", ":")))
        changed = True
    return changed


@dataclass
class PurgeResult:
    """What one pass over a managed ledger's markers achieved."""

    ml_name: str
    deleted: list[TargetOutcome] = field(default_factory=list)
    pending: dict[int, str] = field(default_factory=dict)  # ledger id -> error

    @property
    def bytes_reclaimed(self) -> int:
        return sum(outcome.bytes for outcome in self.deleted)


def purge_marked(
    ml_name: str,
    store: MetadataStore,
    deleter: Deleter,
    *,
    operation: str,
    now_ms: int,
    info: ManagedLedgerInfo | None = None,
) -> PurgeResult:
    """Delete the data of every marked ledger, then drop the markers of those gone.

    Every marker is retried, this run's and every earlier run's. A marker whose data is
    not confirmed gone stays (with its last error noted), so the next run tries again.
    At most one metadata write: the removal of the gone markers (plus the notes).
    """
    path = paths.managed_ledger_path(ml_name)
    if info is None:
        info = store.get_managed_ledger(ml_name).value
    markers = formats.deletable_markers(info, path=path)
    result = PurgeResult(ml_name)
    if not markers:
        return result
    reasons = {lid: str(m.get("reason", "marked deletable")) for lid, m in markers.items()}
    targets = [
        DeleteTarget(
            prefix=ledger_dir(deleter.storage.prefix, ml_name, ledger_id),
            operation=operation,
            target_class="ledger",
            ml_name=ml_name,
            ledger_id=ledger_id,
            reason=reasons[ledger_id],
        )
        for ledger_id in sorted(markers)
    ]
    outcomes = deleter.delete(targets)
    if deleter.dry_run:
        result.deleted = outcomes
        return result
    gone = {o.target.ledger_id for o in outcomes if o.gone}
    result.deleted = [o for o in outcomes if o.gone]
    result.pending = {
        o.target.ledger_id: o.error or "data still present"
        for o in outcomes
        if not o.gone and o.target.ledger_id is not None
    }

    def mutate(current: ManagedLedgerInfo) -> bool:
        keys = [formats.marker_key(ledger_id) for ledger_id in gone]
        removed = formats.remove_properties(current, keys)
        noted = record_failures(current, result.pending, now_ms)
        return bool(removed) or noted

    if gone or result.pending:
        store.update_managed_ledger(ml_name, mutate)
    for ledger_id, error in result.pending.items():
        log.warning("%s: ledger %d still marked, delete failed: %s", ml_name, ledger_id, error)
    return result
