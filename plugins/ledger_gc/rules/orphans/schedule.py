"""When each registered orphan can be deleted, and what it still waits for (pure).

An operator's first question about the registry is "what will be deleted, and when?".
The answer uses the same rules as the deletion phase (``phases.entry_phase``) and the
same clocks (``timekeeping``), read from what the registry already holds, so the page
and ``ledgergc orphans --list`` never contact a server:

* the grace time elapsed is what the servers' clocks measured from the entry's first
  scan to the latest scan, plus the host's time since that scan (an estimate: the cycle
  that deletes measures it again on the servers' clocks, and only ever waits longer);
* retention ends ``retention_seconds`` after the newest object's LastModified, on S3's
  clock, shifted to the host's by the offset seen at the latest scan;
* what else holds every entry: deletion switched off, or a safety guard that refused the
  latest cycle. Either stops deletion however old the entry is.

``deletable_at_ms`` is the time, on this host's clock, from which the next cycle's live
re-check may delete the entry (None: not before a scan sees it again, or records the
servers' time for it). It is an estimate for people: the delete step measures grace and
retention again on the servers' clocks with the settings of its own run (a run's
``grace_seconds``/``retention_seconds`` params can differ) and decides; a host whose
clock runs ahead of the survey host's shows times that much early. Deletion itself
happens only when a cycle runs, and only if that re-check still finds it orphaned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.rules.orphans.timekeeping import Instant, grace_elapsed, grace_start

# What an entry waits for (``ScheduledOrphan.waiting_for``), in the order they are shown.
UNSEEN = "a scan that sees it"
GRACE = "grace"
SECOND_SCAN = "a second scan"
RETENTION = "retention"
DELETION_DISABLED = "deletion disabled"
GUARD = "guard"
NEXT_CYCLE = "the next cycle"


@dataclass(frozen=True)
class ScheduledOrphan:
    """One registered orphan with its schedule."""

    entry: RegistryEntry
    deletable_at_ms: int | None
    waiting_for: tuple[str, ...]
    first_run_id: str | None
    last_run_id: str | None

    def to_dict(self) -> dict[str, Any]:
        e = self.entry
        return {
            "prefix": e.prefix,
            "class": e.target_class,
            "namespace": e.namespace,
            "ml_name": e.ml_name,
            "ledger_id": e.ledger_id,
            "objects": e.objects,
            "bytes": e.bytes,
            "first_seen_ms": e.first_seen_ms,
            "last_seen_ms": e.last_seen_ms,
            "newest_ms": e.newest_ms,
            "scans_seen": e.scans_seen,
            "first_scan": e.first_scan,
            "last_scan": e.last_scan,
            "first_run_id": self.first_run_id,
            "last_run_id": self.last_run_id,
            "deletable_at_ms": self.deletable_at_ms,
            "waiting_for": list(self.waiting_for),
            "delete_attempts": e.attempts,
            "last_error": e.last_error,
        }


def extrapolate(instant: Instant, host_now_ms: int) -> Instant:
    """``instant`` moved forward by the host's time since it: every server clock is
    assumed to advance as the host's does (an estimate for display, never a decision)."""
    delta = max(0, host_now_ms - instant.host_ms)
    return Instant(
        host_now_ms,
        None if instant.zk_ms is None else instant.zk_ms + delta,
        None if instant.s3_ms is None else instant.s3_ms + delta,
    )


def schedule(
    entries: Iterable[RegistryEntry],
    *,
    latest_scan: int | None,
    scan_instants: Mapping[int, Instant],
    run_ids: Mapping[int, str],
    host_now_ms: int,
    grace_seconds: int,
    retention_seconds: int,
    delete_enabled: bool,
    blocking_guards: Sequence[str] = (),
) -> list[ScheduledOrphan]:
    """Every entry with its deletable time and what it waits for, soonest first."""
    entries = list(entries)
    latest_instant = scan_instants.get(latest_scan) if latest_scan is not None else None
    now = extrapolate(latest_instant, host_now_ms) if latest_instant else Instant(host_now_ms)
    # S3's clock (retention's) as the host reads it: the offset seen at the latest scan.
    server_now = now.now_ms()
    elapsed = grace_elapsed(entries, scan_instants, now)
    latest_known = latest_instant is not None
    held = [DELETION_DISABLED] if not delete_enabled else []
    held += [f"{GUARD} {name}" for name in blocking_guards]
    result = []
    for entry in entries:
        waiting: list[str] = []
        at: int | None = host_now_ms
        if latest_scan is None or entry.last_scan != latest_scan:
            waiting.append(UNSEEN)
            at = None
        # No scan of it recorded the servers' time (an older ledger-gc): its grace
        # starts at the next scan that does, and retention has no server clock to go by.
        if (
            not latest_known
            or grace_start(entry.first_scan, entry.last_scan, scan_instants) is None
        ):
            at = None
        grace_left = max(0, grace_seconds * 1000 - elapsed.get(entry.prefix, 0))
        if grace_left:
            waiting.append(GRACE)
        # The scan that registered an entry never also condemns it (phases.entry_phase).
        if grace_seconds > 0 and entry.first_scan == latest_scan:
            waiting.append(SECOND_SCAN)
        retention_left = max(0, entry.retention_until(retention_seconds) - server_now)
        if retention_left:
            waiting.append(RETENTION)
        waiting += held
        if at is not None:
            at = host_now_ms + max(grace_left, retention_left)
        result.append(
            ScheduledOrphan(
                entry,
                at,
                tuple(waiting or [NEXT_CYCLE]),
                run_ids.get(entry.first_scan),
                run_ids.get(entry.last_scan),
            )
        )
    result.sort(key=lambda s: (s.deletable_at_ms is None, s.deletable_at_ms or 0, s.entry.prefix))
    return result
