"""The one delete path: bulk, idempotent, audited ahead. Trim, managed-ledger delete and
orphan removal all delete ledger data through ``Deleter``.

The caller decides *what* may go (a marked ledger, a confirmed orphan); this module makes
sure that, whatever the caller asked, only block objects of exactly that managed ledger
(and ledger) are deleted. A key under the target prefix that is not such a block is
*foreign*: it is reported and never touched.

Targets are deleted in batches of at most 1,000 keys (one DeleteObjects request), and
each batch is:

1. **announced** in the audit log (``deleting`` records, fsynced) before any key of it is
   sent; if that append fails, the batch and every later one is not deleted;
2. **deleted** with one DeleteObjects request (retried with backoff by the storage);
3. **confirmed**: a key S3 reported as an error failed; then every confirmation prefix
   of the batch (``DeleteTarget.confirm_prefix``: the trim uses the managed ledger's
   ``ledgers/`` directory, so one listing confirms all its ledgers) is listed once more,
   and a target is gone only when none of its blocks is left. A store that answers
   "deleted" and keeps the data therefore keeps the trim's marker;
4. **recorded** (``deleted`` records with what was really freed).

In a versioned bucket (``LedgerStorage.versioning``) a DeleteObjects only adds delete
markers: the blocks leave every listing, so the target is gone for the trim's marker and
the orphan registry, but its bytes stay billed as noncurrent versions. Such an outcome
and its audit records say ``recoverable`` (with the lifecycle rule that will expire the
versions, if any): reports count them as ``bytes_recoverable``, never as reclaimed, and
``ledgergc restore`` can bring them back.

A caller that already listed the targets (the trim lists a managed ledger's ``ledgers/``
once per run) passes the blocks in; otherwise each target is listed here. Between
batches ``should_stop`` is asked (a termination signal): the batch under way finishes and
is recorded, the rest are reported as not attempted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ledger_gc import termination
from ledger_gc.audit import DELETED, DELETING, AuditLog, AuditRecord
from ledger_gc.rules.storage.keys import parse_key
from ledger_gc.rules.storage.offload_keys import parse_segment_key
from ledger_gc.storage.bulk_delete import MAX_KEYS_PER_DELETE, DeleteResult
from ledger_gc.storage.offload_bucket import OffloadBucket
from ledger_gc.storage.s3 import LedgerStorage
from ledger_gc.storage.s3_bucket import ObjectInfo
from ledger_gc.storage.versioning import BucketVersioning

log = logging.getLogger(__name__)

STOPPED = "not attempted: the run was asked to stop"
# The target class of an offloaded ledger's tiered-storage copy (data and index objects).
OFFLOADED_LEDGER = "offloaded-ledger"
# An offloaded segment no ledger carries (orphan removal; orphans/segments.py).
ORPHAN_SEGMENT = "orphan-segment"
# Targets in the offload bucket: the prefix is the data key, and exactly it and its
# ``-index`` key may be deleted (Pulsar's deleteOffloaded removes the same two).
SEGMENT_TARGETS = (OFFLOADED_LEDGER, ORPHAN_SEGMENT)
# A GCS multipart leftover in the offload bucket: the prefix is its key, and exactly it.
ORPHAN_UPLOAD_PART = "orphan-upload-part"
OFFLOAD_TARGETS = (*SEGMENT_TARGETS, ORPHAN_UPLOAD_PART)
# Confirmation listings of one batch run this many at a time (one per group of prefixes).
LISTING_WORKERS = 8


@dataclass(frozen=True)
class DeleteTarget:
    """A ledger directory or a whole managed-ledger directory to delete.

    ``objects``: the target's objects as the caller listed them (None: list them here).
    """

    prefix: str
    operation: str  # "trim" | "managed-ledger-delete" | "orphan-removal"
    # "ledger" | "offloaded-ledger" | "orphan-ledger" | "orphan-partition" | "orphan-segment"
    target_class: str
    ml_name: str
    ledger_id: int | None
    reason: str
    objects: tuple[ObjectInfo, ...] | None = None
    # Listed once after the delete to confirm it (default: ``prefix``); targets of one
    # batch that share it share the listing.
    confirm_prefix: str | None = None


@dataclass
class TargetOutcome:
    """What happened to one target: ``objects``/``bytes`` count only what was deleted
    (planned, in a dry run); ``gone`` is true when no block of it is left;
    ``recoverable`` when the bucket kept the deleted bytes as noncurrent versions (they
    are not freed; ``noncurrent_expiration_days``: when a lifecycle rule frees them)."""

    target: DeleteTarget
    objects: int = 0
    bytes: int = 0
    gone: bool = False
    foreign_keys: list[str] = field(default_factory=list)
    error: str | None = None
    recoverable: bool = False
    versioning: str | None = None
    noncurrent_expiration_days: int | None = None


#: The store's bucket (blocks) or the offload bucket (segments, upload parts).
Bucket = TypeVar("Bucket", LedgerStorage, OffloadBucket)


class Deleter(Generic[Bucket]):
    """Deletes the block objects of targets in bulk, audited before and after."""

    def __init__(
        self,
        storage: Bucket,
        audit: AuditLog | None,
        run_id: str,
        *,
        dry_run: bool = False,
        should_stop: Callable[[], bool] = termination.requested,
    ) -> None:
        self.storage: Bucket = storage
        self.audit = audit
        self.run_id = run_id
        self.dry_run = dry_run
        self.should_stop = should_stop

    def _belongs(self, target: DeleteTarget, key: str) -> bool:
        """Whether ``key`` is an object of exactly this target (anything else under its
        prefix is foreign: reported, never deleted)."""
        if not key.startswith(target.prefix) or self.storage.owns(key) is not None:
            return False
        if target.target_class == ORPHAN_UPLOAD_PART:
            return key == target.prefix
        if target.target_class in SEGMENT_TARGETS:
            segment = parse_segment_key(self.storage.prefix, key)
            return (
                segment is not None
                and segment.ledger_id == target.ledger_id
                and key in (target.prefix, f"{target.prefix}-index")
            )
        parsed = parse_key(self.storage.prefix, key)
        return parsed.ml_name == target.ml_name and (
            target.ledger_id is None or parsed.ledger_id == target.ledger_id
        )

    def _owned_blocks(self, target: DeleteTarget, outcome: TargetOutcome) -> list[ObjectInfo]:
        """Every object under the target that belongs to it; the rest is foreign."""
        listed = (
            target.objects
            if target.objects is not None
            else tuple(self.storage.iter_objects(target.prefix))
        )
        blocks = []
        outcome.foreign_keys = []
        for obj in listed:
            if self._belongs(target, obj.key):
                blocks.append(obj)
            elif not (
                target.target_class in OFFLOAD_TARGETS and self.storage.owns(obj.key) is None
            ):
                outcome.foreign_keys.append(obj.key)  # (another ledger's segment is not)
        return blocks

    def delete(self, targets: Sequence[DeleteTarget]) -> list[TargetOutcome]:
        outcomes = [TargetOutcome(target) for target in targets]
        planned: list[tuple[TargetOutcome, list[ObjectInfo]]] = []
        for outcome in outcomes:
            try:
                blocks = self._owned_blocks(outcome.target, outcome)
            except Exception as exc:  # one unreadable prefix must not stop the others
                outcome.error = f"listing failed: {exc}"
                log.warning("cannot list %s: %s", outcome.target.prefix, exc)
                continue
            if outcome.foreign_keys:
                log.warning(
                    "%s: %d foreign keys left untouched, e.g. %s",
                    outcome.target.prefix,
                    len(outcome.foreign_keys),
                    outcome.foreign_keys[0],
                )
            if self.dry_run:
                outcome.objects = len(blocks)
                outcome.bytes = sum(block.size for block in blocks)
            elif not blocks:
                outcome.gone = True  # nothing of it is left: nothing to delete or audit
            else:
                planned.append((outcome, blocks))
        if self.dry_run:
            return outcomes
        stopped = False
        for batch in _batches(planned):
            if stopped or self.should_stop():
                stopped = True
                for outcome, _ in batch:
                    outcome.error = STOPPED
                continue
            self._delete_batch(batch)
        return outcomes

    def _delete_batch(self, batch: list[tuple[TargetOutcome, list[ObjectInfo]]]) -> None:
        """Announce, delete, confirm and record one DeleteObjects' worth of targets.

        Raises AuditUnavailableError (nothing of this batch deleted) when the write-ahead
        record cannot be written.
        """
        if self.audit is not None:
            self.audit.append(
                self._record(
                    outcome.target,
                    len(blocks),
                    sum(b.size for b in blocks),
                    DELETING,
                    versions=_versions(blocks),
                )
                for outcome, blocks in batch
            )
        result = self._send([block for _, blocks in batch for block in blocks])
        bucket = self.storage.versioning()
        left = self._still_listed(batch)
        records = []
        for outcome, blocks in batch:
            failed = [block.key for block in blocks if block.key in result.failed]
            # Unconfirmed (the listing failed): what S3 accepted counts as freed for the
            # audit, but the target is not "gone", so its marker stays for the next run.
            kept = [block.key for block in blocks if left is not None and block.key in left]
            deleted = [
                block
                for block in blocks
                if block.key not in result.failed and block.key not in kept
            ]
            outcome.objects = len(deleted)
            outcome.bytes = sum(block.size for block in deleted)
            outcome.gone = not failed and not kept and left is not None
            outcome.recoverable = bucket.keeps_deleted_data
            outcome.versioning = bucket.versioning
            outcome.noncurrent_expiration_days = bucket.noncurrent_expiration_days
            if failed:
                outcome.error = f"{len(failed)} objects not deleted: {result.failed[failed[0]]}"
            elif left is None:
                outcome.error = "the listing to confirm the delete failed; kept for the next run"
            elif kept:
                outcome.error = "data still present"
            if deleted:
                records.append(
                    self._record(outcome.target, outcome.objects, outcome.bytes, DELETED, bucket)
                )
        if self.audit is not None and records:
            try:
                self.audit.append(records)
            except Exception as exc:
                # The deletes happened and their intent is on record; say so loudly.
                log.error("deleted %d targets but could not record it: %s", len(records), exc)

    def _send(self, blocks: list[ObjectInfo]) -> DeleteResult:
        """The offload bucket deletes each object only if it is still the version listed
        (``delete_listed``: GCS generation, Azure ETag; a moved one is kept, in
        ``failed``); the store's bucket in DeleteObjects batches (``delete_keys``)."""
        if isinstance(self.storage, LedgerStorage) and not isinstance(self.storage, OffloadBucket):
            return self.storage.delete_keys([block.key for block in blocks])
        return self.storage.delete_listed(blocks)

    def _still_listed(self, batch: list[tuple[TargetOutcome, list[ObjectInfo]]]) -> set[str] | None:
        """Keys that a listing after the delete still shows (None: could not list)."""
        prefixes = sorted({o.target.confirm_prefix or o.target.prefix for o, _ in batch})
        try:
            # Complete listings of every prefix (``list_prefixes`` lists prefixes that
            # share a namespace together when that takes fewer requests).
            listed = self.storage.list_prefixes(prefixes, workers=LISTING_WORKERS)
            return {obj.key for objects in listed.values() for obj in objects}
        except Exception as exc:
            log.warning("cannot confirm the deletes of %d targets: %s", len(batch), exc)
            return None

    def _record(
        self,
        target: DeleteTarget,
        objects: int,
        size: int,
        status: str,
        bucket: BucketVersioning | None = None,
        versions: dict[str, str] | None = None,
    ) -> AuditRecord:
        """``versions``: each object's version as listed (a GCS generation, an Azure
        ETag), what the delete was conditioned on and what a restore looks for."""
        bucket = bucket or self.storage.versioning()
        return AuditRecord(
            operation=target.operation,
            target_class=target.target_class,
            ml_name=target.ml_name,
            ledger_id=target.ledger_id,
            prefix=target.prefix,
            bucket=self.storage.bucket,
            objects=objects,
            bytes=size,
            reason=target.reason,
            run_id=self.run_id,
            status=status,
            recoverable=bucket.keeps_deleted_data,
            versioning=bucket.versioning,
            noncurrent_expiration_days=bucket.noncurrent_expiration_days,
            extra={"versions": versions} if versions else None,
        )


def _versions(blocks: Sequence[ObjectInfo]) -> dict[str, str] | None:
    """key -> the version listed, for the objects whose store names one (None: S3)."""
    found = {block.key: block.version for block in blocks if block.version is not None}
    return found or None


def _batches(
    planned: list[tuple[TargetOutcome, list[ObjectInfo]]],
) -> list[list[tuple[TargetOutcome, list[ObjectInfo]]]]:
    """Whole targets grouped so that a batch holds at most MAX_KEYS_PER_DELETE keys (a
    target bigger than that is a batch of its own; the storage splits its request)."""
    batches: list[list[tuple[TargetOutcome, list[ObjectInfo]]]] = []
    current: list[tuple[TargetOutcome, list[ObjectInfo]]] = []
    size = 0
    for item in planned:
        count = len(item[1])
        if current and size + count > MAX_KEYS_PER_DELETE:
            batches.append(current)
            current, size = [], 0
        current.append(item)
        size += count
    if current:
        batches.append(current)
    return batches
