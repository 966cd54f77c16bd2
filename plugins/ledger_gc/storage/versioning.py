"""Whether the bucket keeps what a delete removes: S3 versioning and its lifecycle rule.

In a bucket with versioning Enabled (or Suspended: the versions made while it was on
stay), a DeleteObjects without version ids frees nothing: each key gets a *delete
marker* and its data lives on as a noncurrent version, billed, until a lifecycle rule
with ``NoncurrentVersionExpiration`` expires it (or someone deletes the version). So a
delete there is *recoverable*, not *reclaimed* (README "How it stays safe"), and
``ledgergc restore`` can undo it by removing the delete markers.

Both facts are read once per ``LedgerStorage`` (``LedgerStorage.versioning``). A caller
without ``s3:GetBucketVersioning`` / ``s3:GetLifecycleConfiguration`` gets "unknown", never
an exception: deleted bytes are then not claimed as reclaimed either (we cannot tell).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

ENABLED = "Enabled"
SUSPENDED = "Suspended"
OFF = "Off"  # never enabled: GetBucketVersioning answers with no Status
UNKNOWN = "unknown"  # the call was refused (AccessDenied) or failed


@dataclass(frozen=True)
class BucketVersioning:
    """What a delete in the bucket really does.

    ``versioning``: "Enabled" | "Suspended" | "Off" | "unknown". ``lifecycle``: "none" (no
    rule expires noncurrent versions), "expires" (``noncurrent_expiration_days`` says
    when) or "unknown".
    """

    bucket: str
    versioning: str
    lifecycle: str = "none"
    noncurrent_expiration_days: int | None = None
    lifecycle_rule: str | None = None  # the rule's ID

    @property
    def keeps_deleted_data(self) -> bool:
        """True when a delete may leave the data behind as a noncurrent version (also when
        we cannot tell: only a bucket known to be unversioned frees on delete)."""
        return self.versioning != OFF

    @property
    def note(self) -> str:
        """One sentence for reports: what a delete here frees, and what to do."""
        if not self.keeps_deleted_data:
            return f"bucket {self.bucket!r} is not versioned: deleted bytes are freed"
        if self.versioning == UNKNOWN:
            head = (
                f"versioning of bucket {self.bucket!r} is unknown (GetBucketVersioning "
                "refused): deleted bytes may stay billed as noncurrent versions, so they are "
                "counted as recoverable, not reclaimed"
            )
        else:
            head = (
                f"bucket {self.bucket!r} has versioning {self.versioning}: a delete only adds "
                "delete markers, the bytes stay billed as noncurrent versions"
            )
        if self.noncurrent_expiration_days is not None:
            return (
                f"{head} until lifecycle rule {self.lifecycle_rule or '(no id)'} expires them "
                f"{self.noncurrent_expiration_days} days after the delete"
            )
        if self.lifecycle == UNKNOWN:
            return (
                f"{head}; whether a lifecycle rule expires them is unknown "
                "(GetBucketLifecycleConfiguration refused)"
            )
        return (
            f"{head} until they are deleted: no lifecycle rule with "
            "NoncurrentVersionExpiration covers the store's prefix; add one, or they stay "
            "billed forever (ledgergc restore can still bring them back)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "bucket": self.bucket,
            "versioning": self.versioning,
            "keeps_deleted_data": self.keeps_deleted_data,
            "lifecycle": self.lifecycle,
            "noncurrent_expiration_days": self.noncurrent_expiration_days,
            "lifecycle_rule": self.lifecycle_rule,
            "note": self.note,
        }


def read_bucket_versioning(client: Any, bucket: str, key_prefix: str) -> BucketVersioning:
    """Ask S3 (two calls). Never raises for a refused or failed call: "unknown"."""
    try:
        status = client.get_bucket_versioning(Bucket=bucket).get("Status")
        versioning = status if status in (ENABLED, SUSPENDED) else OFF
    except (ClientError, BotoCoreError):
        versioning = UNKNOWN
    if versioning == OFF:
        return BucketVersioning(bucket, OFF)
    try:
        rules = client.get_bucket_lifecycle_configuration(Bucket=bucket).get("Rules", [])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "NoSuchLifecycleConfiguration":
            return BucketVersioning(bucket, versioning)
        return BucketVersioning(bucket, versioning, lifecycle=UNKNOWN)
    except BotoCoreError:
        return BucketVersioning(bucket, versioning, lifecycle=UNKNOWN)
    found = noncurrent_expiration(rules, key_prefix)
    if found is None:
        return BucketVersioning(bucket, versioning)
    days, rule_id = found
    return BucketVersioning(bucket, versioning, "expires", days, rule_id)


def noncurrent_expiration(
    rules: list[dict[str, Any]], key_prefix: str
) -> tuple[int, str | None] | None:
    """The soonest ``NoncurrentDays`` of an enabled rule that covers every key under
    ``key_prefix`` (pure). A rule filtered by tags or object size covers only some
    objects, so it does not count: the rest would stay billed."""
    best: tuple[int, str | None] | None = None
    for rule in rules:
        expiration = rule.get("NoncurrentVersionExpiration") or {}
        days = expiration.get("NoncurrentDays")
        if rule.get("Status") != "Enabled" or days is None:
            continue
        rule_filter = rule.get("Filter")
        if rule_filter is None:
            prefix = rule.get("Prefix", "")  # the legacy, filterless form
        elif set(rule_filter) <= {"Prefix"}:
            prefix = rule_filter.get("Prefix", "")
        else:
            continue  # Tag, And, ObjectSize*: only part of the objects
        if key_prefix.startswith(prefix) and (best is None or int(days) < best[0]):
            best = (int(days), rule.get("ID"))
    return best
