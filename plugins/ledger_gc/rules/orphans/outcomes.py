"""What the delete step did with one registry entry, for every source of orphans.

Plain values, so that a source's delete (on the driver or on Spark executors) returns
them and the engine applies them to the registry without knowing the source: each
source re-checks and deletes in its own way, and reports in this one shape.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ledger_gc.rules.orphans.phases import RegistryEntry

OPERATION = "orphan-removal"

# Result actions.
DELETED = "deleted"
WOULD_DELETE = "would-delete"
CORRECTED = "corrected"
GONE = "gone"
WAITING = "waiting"
FAILED = "failed"
HELD = "held"  # another Pulsar cluster's segment (segments.why_not_ours): kept, registered
SKIPPED = "skipped"  # not re-checked: ZooKeeper became unavailable earlier in the batch
#: Why entries were skipped after a stop (a signal, a lost delete lock).
STOPPED = "stopped before its re-check (a termination signal or a lost delete lock)"


@dataclass
class RecheckResult:
    """What the delete step did with one registry entry (``action``: DELETED, FAILED...).

    ``unavailable``: not re-checked because ZooKeeper became unreachable (the step then
    fails closed). ``deleted_ledgers``: the audit's view of each ledger or segment deleted
    (``DeleteTarget`` fields with objects, bytes and the bucket's versioning)."""

    prefix: str
    target_class: str
    ml_name: str
    ledger_id: int | None
    namespace: str
    action: str
    reason: str
    objects: int = 0
    bytes: int = 0
    until_ms: int | None = None
    error: str | None = None
    unavailable: bool = False
    foreign_keys: int = 0
    recoverable: bool = False
    deleted_ledgers: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, entry: RegistryEntry, action: str, reason: str, **extra: Any) -> RecheckResult:
        return cls(
            prefix=entry.prefix,
            target_class=entry.target_class,
            ml_name=entry.ml_name,
            ledger_id=entry.ledger_id,
            namespace=entry.namespace,
            action=action,
            reason=reason,
            **extra,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def skipped(entry: RegistryEntry, error: str) -> RecheckResult:
    """An entry not re-checked: after a stop (``STOPPED``), or ZooKeeper gone (the step
    then fails closed: ``unavailable``)."""
    if error == STOPPED:
        return RecheckResult.of(entry, SKIPPED, STOPPED, error=STOPPED)
    return RecheckResult.of(
        entry, SKIPPED, "not re-checked: ZooKeeper unavailable", error=error, unavailable=True
    )
