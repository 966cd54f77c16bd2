"""The one delete path: bulk, idempotent, audited. Trim, managed-ledger delete and orphan
removal all delete ledger data through ``Deleter``.

The caller decides *what* may go (a marked ledger, a confirmed orphan); this module makes
sure that, whatever the caller asked, only block objects of exactly that managed ledger
(and ledger) are deleted. A key under the target prefix that is not such a block is
*foreign*: it is reported and never touched. After the bulk deletes every target is
listed again, and only a target with no block left counts as gone, because the trim
removes its marker on that answer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from ledger_gc.audit import AuditLog, AuditRecord
from ledger_gc.storage.keys import parse_key
from ledger_gc.storage.s3 import LedgerStorage

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeleteTarget:
    """A ledger directory or a whole managed-ledger directory to delete."""

    prefix: str
    operation: str  # "trim" | "managed-ledger-delete" | "orphan-removal"
    target_class: str  # "ledger" | "orphan-ledger" | "orphan-partition"
    ml_name: str
    ledger_id: int | None
    reason: str


@dataclass
class TargetOutcome:
    target: DeleteTarget
    objects: int = 0
    bytes: int = 0
    gone: bool = False
    foreign_keys: list[str] = field(default_factory=list)
    error: str | None = None


class Deleter:
    """Deletes the block objects of targets in bulk and records what it did."""

    def __init__(
        self,
        storage: LedgerStorage,
        audit: AuditLog | None,
        run_id: str,
        *,
        dry_run: bool = False,
    ) -> None:
        self.storage = storage
        self.audit = audit
        self.run_id = run_id
        self.dry_run = dry_run

    def _owned_blocks(self, target: DeleteTarget, outcome: TargetOutcome) -> list[tuple[str, int]]:
        """(key, size) of every block under the target that belongs to it."""
        blocks = []
        outcome.foreign_keys = []
        for obj in self.storage.iter_objects(target.prefix):
            parsed = parse_key(self.storage.prefix, obj.key)
            belongs = (
                parsed.is_block
                and parsed.ml_name == target.ml_name
                and (target.ledger_id is None or parsed.ledger_id == target.ledger_id)
            )
            if belongs:
                blocks.append((obj.key, obj.size))
            else:
                outcome.foreign_keys.append(obj.key)
        return blocks

    def delete(self, targets: Sequence[DeleteTarget]) -> list[TargetOutcome]:
        outcomes = [TargetOutcome(target) for target in targets]
        planned: list[tuple[TargetOutcome, list[tuple[str, int]]]] = []
        for outcome in outcomes:
            try:
                planned.append((outcome, self._owned_blocks(outcome.target, outcome)))
            except Exception as exc:  # one unreadable prefix must not stop the others
                outcome.error = f"listing failed: {exc}"
                log.warning("cannot list %s: %s", outcome.target.prefix, exc)
        if self.dry_run:
            for outcome, blocks in planned:
                outcome.objects = len(blocks)
                outcome.bytes = sum(size for _, size in blocks)
            return outcomes

        keys = [key for _, blocks in planned for key, _ in blocks]
        result = self.storage.delete_keys(keys)
        records = []
        for outcome, blocks in planned:
            failed = [key for key, _ in blocks if key in result.failed]
            deleted = [(key, size) for key, size in blocks if key not in result.failed]
            outcome.objects = len(deleted)
            outcome.bytes = sum(size for _, size in deleted)
            if failed:
                outcome.error = f"{len(failed)} objects not deleted: {result.failed[failed[0]]}"
            try:
                # Confirm by listing again: only "no block left" lets the trim drop a marker.
                outcome.gone = not failed and not self._owned_blocks(outcome.target, outcome)
            except Exception as exc:
                outcome.error = outcome.error or f"confirming listing failed: {exc}"
            if outcome.foreign_keys:
                log.warning(
                    "%s: %d foreign keys left untouched, e.g. %s",
                    outcome.target.prefix,
                    len(outcome.foreign_keys),
                    outcome.foreign_keys[0],
                )
            if outcome.objects:
                target = outcome.target
                records.append(
                    AuditRecord(
                        operation=target.operation,
                        target_class=target.target_class,
                        ml_name=target.ml_name,
                        ledger_id=target.ledger_id,
                        prefix=target.prefix,
                        objects=outcome.objects,
                        bytes=outcome.bytes,
                        reason=target.reason,
                        run_id=self.run_id,
                    )
                )
        if self.audit is not None:
            self.audit.append(records)
        return outcomes
