"""The three phases of orphan removal as pure decisions (Kafka KIP-370's design).

KIP-370 finds "orphan partitions" (log directories no metadata references) and deletes
them only after watching them for a while, because a directory can look orphaned for a
moment while a writer is creating it. The three phases, each idempotent:

1. **initialize** (``initialize_and_correct``): a candidate the registry does not know is
   registered with ``first_seen`` = now and the number of the scan that saw it.
2. **grace-window correction** (same function): an entry that this scan no longer sees as
   orphaned (its ledger or managed ledger is referenced again, its data is gone) or that
   received *new* data since it was registered (someone is writing: not an orphan) is
   removed, with the reason kept in the registry's history. An entry that skipped a scan
   (its ``last_scan`` is not the previous scan) restarts its clock: DESIGN.md requires it
   to have been "seen orphaned on every scan since" it was first seen.
3. **deletion** (``plan_deletion`` then ``decide``): an entry whose grace window has passed,
   that the latest scan saw, whose newest object is older than retention, and that a live
   ZooKeeper read (after ``sync``) and a fresh listing confirm, is deleted. Everything else
   stays registered and is retried on later runs.

Nothing here does I/O: the registry (``registry.py``) stores the entries, the cycle
(``cycle.py``) and ``deleting.py`` feed in what ZooKeeper and S3 said.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from ledger_gc.rules.bookkeeper.classify import BK_TARGET_CLASSES
from ledger_gc.rules.orphans.classify import (
    ORPHAN_CLASSES,
    ORPHAN_LEDGER,
    ORPHAN_PARTITION,
    ORPHAN_SEGMENT,
    ORPHAN_UPLOAD_PART,
    Candidate,
    ManagedLedgerRefs,
    namespace_of_ml,
    parse_segment_target,
)
from ledger_gc.rules.pulsar_metadata.classes import PM_ORPHAN_CLASSES


def iso(ms: int) -> str:
    """An epoch-ms time as operators read it in reasons: ``2026-01-01T12:00:00Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


# History events of the registry (one per change to an entry).
REGISTERED = "registered"
CLOCK_RESTARTED = "clock-restarted"
CORRECTED = "corrected"
DELETED = "deleted"
GONE = "gone"
DELETE_FAILED = "delete-failed"
HELD = "held"  # the live re-check found another Pulsar cluster's segment: kept

# Where a registered entry is in the deletion phase.
WAITING_GRACE = "waiting-grace"
WAITING_RETENTION = "waiting-retention"
UNSEEN = "unseen"  # not seen by the latest scan (only after an interrupted cycle)
ELIGIBLE = "eligible"


@dataclass(frozen=True, slots=True)  # (hundreds of thousands at once: no __dict__ each)
class RegistryEntry:
    """One registered orphan target (a row of the registry's ``orphans`` table)."""

    prefix: str
    target_class: str
    ml_name: str
    ledger_id: int | None
    first_seen_ms: int
    last_seen_ms: int
    first_scan: int
    last_scan: int
    scans_seen: int
    objects: int
    bytes: int
    newest_ms: int
    attempts: int = 0
    last_error: str | None = None

    @property
    def namespace(self) -> str:
        return namespace_of_ml(self.ml_name)

    def grace_until(self, grace_seconds: int) -> int:
        return self.first_seen_ms + grace_seconds * 1000

    def retention_until(self, retention_seconds: int) -> int:
        return self.newest_ms + retention_seconds * 1000

    def describe(self) -> str:
        if self.target_class in BK_TARGET_CLASSES:
            return f"{self.target_class} {self.ledger_id} of {self.ml_name or '?'}"
        if self.target_class in PM_ORPHAN_CLASSES:
            return f"{self.target_class} {self.ml_name or '?'} ({self.prefix})"
        if self.target_class == ORPHAN_SEGMENT:
            where = parse_segment_target(self.prefix)
            key = f"{where[0]}/{where[1]}" if where else self.prefix
            return f"orphan segment {key}[-index] (ledger {self.ledger_id})"
        if self.target_class == ORPHAN_UPLOAD_PART:
            where = parse_segment_target(self.prefix)
            key = f"{where[0]}/{where[1]}" if where else self.prefix
            return f"orphan upload part {key}"
        if self.ledger_id is None:
            return f"orphan partition {self.ml_name}"
        return f"orphan ledger {self.ledger_id} of {self.ml_name}"


def new_entry(prefix: str, candidate: Candidate, scan_number: int, now_ms: int) -> RegistryEntry:
    return RegistryEntry(
        prefix=prefix,
        target_class=candidate.target_class,
        ml_name=candidate.ml_name,
        ledger_id=candidate.ledger_id,
        first_seen_ms=now_ms,
        last_seen_ms=now_ms,
        first_scan=scan_number,
        last_scan=scan_number,
        scans_seen=1,
        objects=candidate.objects,
        bytes=candidate.bytes,
        newest_ms=candidate.newest_ms,
    )


# --- phases 1 and 2 --------------------------------------------------------------------


@dataclass
class PhaseChanges:
    """What one scan does to the registry."""

    added: list[RegistryEntry] = field(default_factory=list)
    seen: list[RegistryEntry] = field(default_factory=list)  # still orphaned: clock runs on
    restarted: list[tuple[RegistryEntry, str]] = field(default_factory=list)
    corrected: list[tuple[RegistryEntry, str]] = field(default_factory=list)


def why_not_orphan(entry: RegistryEntry, refs: ManagedLedgerRefs | None, scan_number: int) -> str:
    """Why a registered entry that a scan did not report as a candidate is no orphan.

    ``refs`` is what the scan's snapshot says of the entry's managed ledger (None: no
    such managed ledger).
    """
    if entry.target_class == ORPHAN_SEGMENT:
        return f"no object of it was seen by scan {scan_number} (gone), or it is live again"
    if entry.target_class == ORPHAN_UPLOAD_PART:
        return f"scan {scan_number} did not see it (gone: composed or deleted)"
    if entry.target_class == ORPHAN_PARTITION:
        if refs is not None:
            return f"managed ledger {entry.ml_name} exists again"
        return f"no block of it was seen by scan {scan_number} (data gone)"
    assert entry.ledger_id is not None
    if refs is None:
        return (
            f"managed ledger {entry.ml_name} no longer exists; its data is tracked as an "
            "orphan partition from now on"
        )
    if entry.ledger_id in refs.listed:
        return f"ledger {entry.ledger_id} is listed again by {entry.ml_name}"
    if entry.ledger_id in refs.marked:
        return f"ledger {entry.ledger_id} is marked deletable; the trim deletes it"
    return f"no block of it was seen by scan {scan_number} (data gone)"


def _new_data_arrived(entry: RegistryEntry, candidate: Candidate) -> bool:
    """Whether the target changed since it was registered in a way only a writer explains.

    Object stores list whole seconds (S3's LastModified, SeaweedFS's too), so a block
    written in the second of the newest one registered leaves the time as it was: more
    objects or more bytes under the prefix say it instead. Fewer say nothing (a delete).
    """
    if candidate.newest_ms != entry.newest_ms:
        return candidate.newest_ms > entry.newest_ms
    listed = entry.target_class in ORPHAN_CLASSES
    return listed and (candidate.objects > entry.objects or candidate.bytes > entry.bytes)


def initialize_and_correct(
    entries: Mapping[str, RegistryEntry],
    candidates: Mapping[str, Candidate],
    scan_number: int,
    now_ms: int,
    reasons: Mapping[str, str],
) -> PhaseChanges:
    """Phases 1 and 2 for one scan.

    ``entries`` and ``candidates`` are keyed by target prefix; ``reasons`` says, for
    registered prefixes this scan did not report, why (see ``why_not_orphan``).
    """
    changes = PhaseChanges()
    for prefix, candidate in candidates.items():
        entry = entries.get(prefix)
        if entry is None:
            changes.added.append(new_entry(prefix, candidate, scan_number, now_ms))
        elif entry.last_scan >= scan_number:
            continue  # this scan was applied already (idempotent re-run)
        elif _new_data_arrived(entry, candidate):
            # KIP-370's correction: data that keeps arriving is being written by someone.
            changes.corrected.append(
                (
                    entry,
                    f"new data arrived: newest block written {iso(candidate.newest_ms)}, after "
                    f"the {iso(entry.newest_ms)} seen when registered",
                )
            )
        elif entry.last_scan != scan_number - 1:
            reason = (
                f"not seen by scan(s) {entry.last_scan + 1}..{scan_number - 1}; "
                "grace window restarted"
            )
            restarted = replace(
                new_entry(prefix, candidate, scan_number, now_ms), attempts=entry.attempts
            )
            changes.restarted.append((restarted, reason))
        else:
            changes.seen.append(
                replace(
                    entry,
                    last_seen_ms=now_ms,
                    last_scan=scan_number,
                    scans_seen=entry.scans_seen + 1,
                    objects=candidate.objects,
                    bytes=candidate.bytes,
                    newest_ms=candidate.newest_ms,
                )
            )
    for prefix, entry in entries.items():
        if prefix not in candidates and entry.last_scan < scan_number:
            reason = reasons.get(prefix) or f"not orphaned in scan {scan_number}"
            changes.corrected.append((entry, reason))
    return changes


# --- phase 3 ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Waiting:
    """A registered entry that may not be deleted yet, and until when (at the earliest)."""

    entry: RegistryEntry
    phase: str  # WAITING_GRACE | WAITING_RETENTION | UNSEEN
    until_ms: int | None


@dataclass
class DeletionPlan:
    eligible: list[RegistryEntry] = field(default_factory=list)
    waiting: list[Waiting] = field(default_factory=list)


def entry_phase(
    entry: RegistryEntry,
    latest_scan: int,
    now_ms: int,
    grace_seconds: int,
    retention_seconds: int,
    *,
    grace_elapsed_ms: int | None = None,
) -> Waiting | None:
    """Where ``entry`` waits, or None when the registry alone would let it be deleted.

    ``now_ms`` is compared with the newest block's S3 LastModified (retention), so it
    must be a server's time (``timekeeping.Instant.now_ms``). ``grace_elapsed_ms`` is
    the grace time the servers' clocks measured since the entry's first scan
    (``timekeeping.grace_elapsed``); the cycle always passes it. Without it (pure tests)
    the time since ``first_seen_ms`` is used.
    """
    grace_ms = grace_seconds * 1000
    elapsed = now_ms - entry.first_seen_ms if grace_elapsed_ms is None else grace_elapsed_ms
    grace_until = now_ms + max(0, grace_ms - elapsed)
    retention_until = entry.retention_until(retention_seconds)
    if entry.last_scan != latest_scan:
        return Waiting(entry, UNSEEN, None)
    # The grace window spans scans (KIP-370): the scan that registered an entry cannot
    # also condemn it, however long that run took, or a ledger claimed again right after
    # the scan would never get a second look. grace_seconds=0 opts out explicitly.
    if elapsed < grace_ms or (grace_seconds > 0 and entry.first_scan == latest_scan):
        return Waiting(entry, WAITING_GRACE, max(grace_until, retention_until))
    if now_ms < retention_until:
        return Waiting(entry, WAITING_RETENTION, retention_until)
    return None


def plan_deletion(
    entries: Iterable[RegistryEntry],
    latest_scan: int,
    now_ms: int,
    grace_seconds: int,
    retention_seconds: int,
    grace_elapsed: Mapping[str, int] | None = None,
) -> DeletionPlan:
    """Which entries go on to the live re-check, and which wait (DESIGN.md "Orphans").

    ``grace_elapsed`` (by prefix) is the evidence-backed time since each entry's first
    scan (``timekeeping.grace_elapsed``); an entry missing from it has had none."""
    plan = DeletionPlan()
    for entry in sorted(entries, key=lambda e: e.prefix):
        elapsed = None if grace_elapsed is None else grace_elapsed.get(entry.prefix, 0)
        waiting = entry_phase(
            entry,
            latest_scan,
            now_ms,
            grace_seconds,
            retention_seconds,
            grace_elapsed_ms=elapsed,
        )
        if waiting is None:
            plan.eligible.append(entry)
        else:
            plan.waiting.append(waiting)
    return plan


def eligible_entries(
    entries: Iterable[RegistryEntry],
    latest_scan: int,
    now_ms: int,
    grace_seconds: int,
    retention_seconds: int,
    grace_elapsed: Callable[[RegistryEntry], int],
) -> list[RegistryEntry]:
    """``plan_deletion``'s ``eligible`` (by prefix) without its ``waiting``: for the
    delete step, which walks a registry of up to 500,000 entries (streamed) and goes on
    with the few that are due; ``grace_elapsed`` gives an entry's evidence-backed grace
    time (``timekeeping.entry_grace_elapsed``)."""
    due = [
        entry
        for entry in entries
        if entry_phase(
            entry,
            latest_scan,
            now_ms,
            grace_seconds,
            retention_seconds,
            grace_elapsed_ms=grace_elapsed(entry),
        )
        is None
    ]
    return sorted(due, key=lambda e: e.prefix)


@dataclass(frozen=True)
class LiveState:
    """The entry's managed ledger as a live ZooKeeper read (after ``sync``) sees it."""

    ml_exists: bool
    listed: frozenset[int] = frozenset()
    marked: frozenset[int] = frozenset()
    # An orphan segment's ledger id as the records read live reference it: the managed
    # ledgers whose listed or marked ledger of that id carries the segment's uuid.
    segment_carriers: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ListingState:
    """The entry's prefix listed again just before the delete (blocks only)."""

    block_ledgers: frozenset[int]  # ledger ids with at least one block under the prefix
    newest_ms: int | None  # the newest block; None when no block is left
    # An upload part: the newest part of the same upload (``<upload id>_<8 digits>``).
    # jclouds composes an upload's parts only when the last is written, so a part is
    # left over only once its whole upload has been still for retention (None: unread).
    upload_newest_ms: int | None = None


DELETE = "delete"
CORRECT = "correct"
WAIT = "wait"
ALREADY_GONE = "gone"


@dataclass(frozen=True)
class Decision:
    action: str  # DELETE | CORRECT | WAIT | ALREADY_GONE
    reason: str
    until_ms: int | None = None
    ledger_ids: tuple[int, ...] = ()  # the ledger directories to delete (DELETE only)


def live_verdict(entry: RegistryEntry, live: LiveState) -> str | None:
    """None if the live read confirms the orphan, else why it is not one (any more).

    An orphan ledger is still one iff its managed ledger exists and neither lists nor
    marks it; an orphan partition iff its managed ledger's znode still does not exist;
    an orphan segment iff no listed or marked ledger of its id carries its uuid.
    """
    if entry.target_class == ORPHAN_SEGMENT:
        if live.segment_carriers:
            return (
                f"ledger {entry.ledger_id} of {', '.join(sorted(live.segment_carriers))} "
                "carries this segment's offload uuid (live re-check)"
            )
        return None
    if entry.target_class == ORPHAN_UPLOAD_PART:
        # No record names an upload's parts: its age (retention) is what keeps the parts
        # of an upload still running; the re-check lists it again (``decide``).
        return None
    if entry.target_class == ORPHAN_PARTITION:
        return f"managed ledger {entry.ml_name} exists again" if live.ml_exists else None
    if entry.target_class != ORPHAN_LEDGER or entry.ledger_id is None:
        # Not an assert: `python -O` drops those, and this check guards a delete.
        return f"{entry.prefix} is of a target class this re-check does not know; kept"
    if not live.ml_exists:
        return (
            f"managed ledger {entry.ml_name} was deleted since the scan; its data is "
            "re-registered as an orphan partition by the next scan"
        )
    if entry.ledger_id in live.listed:
        return f"ledger {entry.ledger_id} is listed by {entry.ml_name} (live re-check)"
    if entry.ledger_id in live.marked:
        return f"ledger {entry.ledger_id} is marked deletable (live re-check); the trim owns it"
    return None


def decide(
    entry: RegistryEntry,
    live: LiveState,
    listing: ListingState,
    now_ms: int,
    retention_seconds: int,
) -> Decision:
    """The last word on one eligible entry, from a live read and a fresh listing."""
    reason = live_verdict(entry, live)
    if reason is not None:
        return Decision(CORRECT, reason)
    # (An upload part is one object of no ledger: its newest time alone says it is there.)
    unnumbered = entry.target_class == ORPHAN_UPLOAD_PART
    if listing.newest_ms is None or not (listing.block_ledgers or unnumbered):
        return Decision(ALREADY_GONE, "no block left under the prefix (deleted earlier)")
    if listing.newest_ms > entry.newest_ms:
        return Decision(
            CORRECT,
            f"new data arrived: newest block written {iso(listing.newest_ms)}, after the "
            f"{iso(entry.newest_ms)} the scans saw",
        )
    until = listing.newest_ms + retention_seconds * 1000
    if now_ms < until:
        return Decision(WAIT, "newest block younger than retention", until)
    if unnumbered and (listing.upload_newest_ms or 0) + retention_seconds * 1000 > now_ms:
        until = (listing.upload_newest_ms or 0) + retention_seconds * 1000
        return Decision(
            WAIT,
            f"its upload wrote a part {iso(listing.upload_newest_ms or 0)}, younger than "
            "retention: the upload may still be running",
            until,
        )
    if entry.target_class == ORPHAN_UPLOAD_PART:
        ids: tuple[int, ...] = ()  # one object, no ledger: the target is its key
    elif entry.target_class in (ORPHAN_LEDGER, ORPHAN_SEGMENT):
        if entry.ledger_id is None:
            raise ValueError(f"{entry.describe()} has no ledger id; nothing deleted")
        # The prefix is the ledger's own directory (or its two segment objects): only
        # that ledger's data can be in it.
        ids = (entry.ledger_id,)
    else:
        # One target per ledger directory found, never the whole managed-ledger prefix:
        # ledger ids are never reused, so a topic re-created after this check gets new
        # ids and none of its ledgers can be among these.
        ids = tuple(sorted(listing.block_ledgers))
    return Decision(
        DELETE,
        f"{entry.describe()}: unreferenced since {iso(entry.first_seen_ms)} over "
        f"{entry.scans_seen} scan(s), newest block {iso(listing.newest_ms)}, confirmed by "
        "a live re-check",
        ledger_ids=ids,
    )
