"""What a delete in a GCS bucket keeps: its soft delete policy and object versioning.

GCS keeps a deleted object two ways, either or both:

* **Soft delete** (a bucket's ``softDeletePolicy``; new buckets get 7 days): the deleted
  generation stays, billed, for the retention, and ``restore`` brings it back; then it is
  gone for good.
* **Object versioning**: a delete makes the live generation *noncurrent*; it stays, billed,
  until a lifecycle rule deletes it (``daysSinceNoncurrentTime``), and can be copied back.
  A lifecycle delete is itself soft-deleted when the bucket has a policy.

A bucket with neither frees the bytes at once, and nothing can undo the delete: the
report must say so before it is made. ``GcsVersioning`` is a ``BucketVersioning`` (what
``versioning()`` returns for every store) whose ``note`` speaks of these, not of S3's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ledger_gc.storage.versioning import ENABLED, OFF, UNKNOWN, BucketVersioning

#: ``how`` a store keeps deleted objects, for reports (``DeletedVersion.how`` alike).
SOFT_DELETE, VERSIONS, NONE = "soft-delete", "versions", "none"

# Lifecycle conditions that do not narrow a rule to some objects of the prefix.
_WHOLE_PREFIX_CONDITIONS = frozenset({"daysSinceNoncurrentTime", "isLive", "matchesPrefix"})


@dataclass(frozen=True)
class GcsVersioning(BucketVersioning):
    """``versioning``: object versioning, "Enabled" | "Off" | "unknown".
    ``retention_days``: the soft delete policy's retention (None: no policy, or unknown
    when ``versioning`` is). ``noncurrent_expiration_days``: days after a delete until the
    bytes are gone for good (None: never, or unknown)."""

    retention_days: int | None = None

    @property
    def how(self) -> str:
        if self.versioning == ENABLED:
            return VERSIONS
        if self.retention_days:
            return SOFT_DELETE
        return UNKNOWN if self.versioning == UNKNOWN else NONE

    @property
    def keeps_deleted_data(self) -> bool:
        """True unless the bucket is known to keep nothing."""
        return self.how != NONE

    @property
    def note(self) -> str:
        where = f"bucket {self.bucket!r}"
        if self.how == NONE:
            return (
                f"{where} has no soft delete policy and object versioning off: deleted bytes "
                "are freed at once and deletes there cannot be undone"
            )
        if self.how == UNKNOWN:
            return (
                f"whether {where} keeps deleted objects is unknown (reading the bucket "
                "(storage.buckets.get) was refused): deleted bytes are counted as "
                "recoverable, not reclaimed"
            )
        soft = (
            f"then soft delete keeps them {self.retention_days} days more"
            if self.retention_days
            else "then they are gone for good"
        )
        if self.how == SOFT_DELETE:
            return (
                f"{where} has a soft delete policy of {self.retention_days} days: deleted "
                "objects stay billed and can be restored (ledgergc restore) for "
                f"{self.retention_days} days, then are gone for good"
            )
        head = (
            f"{where} has object versioning on: a delete makes each object a noncurrent "
            "version, billed and restorable (ledgergc restore)"
        )
        if self.lifecycle == "expires":
            return (
                f"{head} until lifecycle rule {self.lifecycle_rule} deletes it, {soft} "
                f"({self.noncurrent_expiration_days} days after the delete in all)"
            )
        return (
            f"{head} until it is deleted: no lifecycle rule with daysSinceNoncurrentTime "
            "covers the store's prefix; add one, or they stay billed forever"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "how": self.how, "retention_days": self.retention_days}


def gcs_versioning(
    bucket: str,
    versioning_enabled: bool,
    soft_delete_seconds: int | None,
    lifecycle_rules: Iterable[Mapping[str, Any]],
    key_prefix: str,
) -> GcsVersioning:
    """What a bucket resource says (pure): its ``versioning.enabled``,
    ``softDeletePolicy.retentionDurationSeconds`` and lifecycle rules."""
    soft_days = -(-int(soft_delete_seconds) // 86400) if soft_delete_seconds else None
    if not versioning_enabled:
        return GcsVersioning(
            bucket, OFF, noncurrent_expiration_days=soft_days, retention_days=soft_days
        )
    found = noncurrent_delete_days(lifecycle_rules, key_prefix)
    if found is None:
        return GcsVersioning(bucket, ENABLED, retention_days=soft_days)
    days, rule = found
    return GcsVersioning(bucket, ENABLED, "expires", days + (soft_days or 0), rule, soft_days)


def noncurrent_delete_days(
    rules: Iterable[Mapping[str, Any]], key_prefix: str
) -> tuple[int, str] | None:
    """The soonest ``daysSinceNoncurrentTime`` of a Delete rule that covers every
    noncurrent object under ``key_prefix`` (pure), and how to name that rule (GCS rules
    have no id). A rule narrowed by suffix, storage class, age or dates covers only some."""
    best: tuple[int, str] | None = None
    for rule in rules:
        condition = rule.get("condition") or {}
        days = condition.get("daysSinceNoncurrentTime")
        if (rule.get("action") or {}).get("type") != "Delete" or days is None:
            continue
        if not set(condition) <= _WHOLE_PREFIX_CONDITIONS or condition.get("isLive") is True:
            continue
        prefixes = condition.get("matchesPrefix") or [""]
        if not any(key_prefix.startswith(p) for p in prefixes):
            continue
        if best is None or int(days) < best[0]:
            best = (int(days), f"Delete daysSinceNoncurrentTime={int(days)}")
    return best
