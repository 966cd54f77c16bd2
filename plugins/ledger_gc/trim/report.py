"""What a trim planned and did: per managed ledger, in total, and as a run summary.

One shape for every consumer: ``ledgergc trim --json`` prints ``TrimReport.to_dict()``,
each DAG shard returns it as its XCom, and the run summary (``run_summary``) that goes
to the state store's run log (``ledgergc status``, the Airflow view and the metrics
read it) is computed from those dicts the same way for one CLI run and for many shards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledger_gc.rules.trim.eligibility import TrimRetention

OUTCOME_OK = "ok"
OUTCOME_PENDING = "pending"  # ran, but some markers' data could not be deleted
OUTCOME_ERROR = "error"  # some managed ledger (or the run) failed

EXIT_CODES = {OUTCOME_OK: 0, OUTCOME_PENDING: 1, OUTCOME_ERROR: 2}

# A run summary keeps this many pending markers and errors; the totals count them all.
SUMMARY_LIST_LIMIT = 100


def _flat(value: Any) -> dict[str, Any]:
    """A flat dataclass's fields as a dict: ``asdict`` without its recursive deep copy,
    which was a tenth of a 10,000-managed-ledger trim's CPU (every field here is a str,
    int, bool or None)."""
    return dict(vars(value))


@dataclass(frozen=True)
class PlannedLedger:
    """A listed ledger the trim would mark (the plan), and why."""

    ledger_id: int
    entries: int
    size: int
    timestamp: int
    reason: str


@dataclass(frozen=True)
class MarkerState:
    """A deletable marker as the metadata records it (or as this run left it)."""

    ledger_id: int
    size: int
    entries: int
    marked_at: int
    attempts: int = 0
    last_error: str | None = None

    @classmethod
    def from_marker(cls, ledger_id: int, value: Mapping[str, Any]) -> MarkerState:
        """The state a decoded deletable marker's value records."""
        last_error = value.get("lastError")
        return cls(
            ledger_id=ledger_id,
            size=int(value["size"]),
            entries=int(value["entries"]),
            marked_at=int(value["markedAt"]),
            attempts=int(value.get("attempts", 0)),
            last_error=str(last_error) if last_error is not None else None,
        )

    def to_dict(self, now_ms: int) -> dict[str, Any]:
        data = _flat(self)
        data["age_seconds"] = round(max(now_ms - self.marked_at, 0) / 1000, 3)
        return data


@dataclass(frozen=True)
class DeletedLedger:
    """A ledger (or its tiered-storage copy) whose blocks this run deleted. In a
    versioned bucket the bytes are ``recoverable``: out of every listing, not freed."""

    ledger_id: int
    objects: int
    bytes: int
    recoverable: bool = False


@dataclass
class ManagedLedgerTrim:
    """One managed ledger's trim: the plan, then what was marked, moved and deleted."""

    name: str
    retention: TrimRetention
    cursors: int = 0
    slowest_reader: str | None = None
    slowest_reader_ledger_id: int | None = None
    stop_reason: str = ""
    to_mark: list[PlannedLedger] = field(default_factory=list)
    already_marked: list[MarkerState] = field(default_factory=list)
    marked: list[int] = field(default_factory=list)
    cursors_moved: list[str] = field(default_factory=list)
    deleted: list[DeletedLedger] = field(default_factory=list)
    # Tiered-storage copies of offloaded ledgers deleted (their data and index objects).
    offloaded_deleted: list[DeletedLedger] = field(default_factory=list)
    # Markers removed with nothing deleted: the ledger had no entries, or an earlier,
    # interrupted run deleted its data. Never counted as reclaimed.
    cleared: list[int] = field(default_factory=list)
    # Marked ledgers put back in the list because a cursor (moved there by another tool)
    # still needs them and their data is whole.
    restored: list[int] = field(default_factory=list)
    pending: list[MarkerState] = field(default_factory=list)
    zk_writes: int = 0
    error: str | None = None
    missing: bool = False

    @property
    def outcome(self) -> str:
        if self.error:
            return OUTCOME_ERROR
        if self.pending:
            return OUTCOME_PENDING
        return OUTCOME_OK

    @property
    def active(self) -> bool:
        """Whether there is anything to say about it beyond "nothing to trim"."""
        return bool(
            self.to_mark
            or self.already_marked
            or self.marked
            or self.cursors_moved
            or self.deleted
            or self.offloaded_deleted
            or self.cleared
            or self.restored
            or self.pending
            or self.error
            or self.missing
        )

    def to_dict(self, now_ms: int) -> dict[str, Any]:
        return {
            "name": self.name,
            "outcome": self.outcome,
            "retention": _flat(self.retention),
            "cursors": self.cursors,
            "slowest_reader": self.slowest_reader,
            "slowest_reader_ledger_id": self.slowest_reader_ledger_id,
            "stop_reason": self.stop_reason,
            "plan": {
                "to_mark": [_flat(ledger) for ledger in self.to_mark],
                "already_marked": [m.to_dict(now_ms) for m in self.already_marked],
            },
            "marked": list(self.marked),
            "cursors_moved": list(self.cursors_moved),
            "deleted": [_flat(ledger) for ledger in self.deleted],
            "offloaded_deleted": [_flat(ledger) for ledger in self.offloaded_deleted],
            "cleared": list(self.cleared),
            "restored": list(self.restored),
            "pending": [m.to_dict(now_ms) for m in self.pending],
            "zk_writes": self.zk_writes,
            "error": self.error,
            "missing": self.missing,
        }


@dataclass
class TrimReport:
    """The result of ``run_trim``: every managed ledger in scope, and the totals."""

    run_id: str
    dry_run: bool
    scope: str
    started_at: int
    finished_at: int = 0
    managed_ledgers: list[ManagedLedgerTrim] = field(default_factory=list)
    error: str | None = None  # the run itself failed (not one managed ledger)
    # What a delete in the bucket frees (``BucketVersioning.to_dict``; None: not asked,
    # as in a dry run): in a versioned bucket the bytes stay billed as old versions.
    bucket: dict[str, Any] | None = None

    @property
    def outcome(self) -> str:
        return outcome_of(self.totals(), self.error)

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    def totals(self) -> dict[str, Any]:
        return totals_of(self.to_dict()["managed_ledgers"], len(self.managed_ledgers))

    def to_dict(self, *, include_idle: bool = True) -> dict[str, Any]:
        """JSON-ready. ``include_idle=False`` leaves out managed ledgers with nothing to
        report (their count stays in the totals), which keeps XComs small."""
        now = self.finished_at or self.started_at
        every = [ml.to_dict(now) for ml in self.managed_ledgers]
        shown = [d for ml, d in zip(self.managed_ledgers, every, strict=True) if ml.active]
        totals = totals_of(every, len(every))
        return {
            "run_id": self.run_id,
            "dry_run": self.dry_run,
            "scope": self.scope,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "outcome": outcome_of(totals, self.error),
            "exit_code": EXIT_CODES[outcome_of(totals, self.error)],
            "error": self.error,
            "totals": totals,
            "bucket": self.bucket,
            "managed_ledgers": every if include_idle else shown,
        }


def totals_of(ml_dicts: Iterable[Mapping[str, Any]], managed_ledgers: int) -> dict[str, Any]:
    """Totals over per-managed-ledger dicts (``ManagedLedgerTrim.to_dict``)."""
    items = list(ml_dicts)
    pending = [m for ml in items for m in ml["pending"]]
    return {
        "managed_ledgers": managed_ledgers,
        "managed_ledgers_trimmed": sum(1 for ml in items if ml["marked"] or ml["deleted"]),
        "ledgers_planned": sum(len(ml["plan"]["to_mark"]) for ml in items),
        "bytes_planned": sum(x["size"] for ml in items for x in ml["plan"]["to_mark"]),
        "markers_found": sum(len(ml["plan"]["already_marked"]) for ml in items),
        "ledgers_marked": sum(len(ml["marked"]) for ml in items),
        "ledgers_deleted": sum(len(ml["deleted"]) for ml in items),
        "objects_deleted": sum(x["objects"] for ml in items for x in ml["deleted"]),
        # Only what was freed: in a versioned bucket the deleted bytes stay behind delete
        # markers as noncurrent versions, still billed (``recoverable``).
        "bytes_reclaimed": sum(
            x["bytes"]
            for ml in items
            for x in [*ml["deleted"], *ml.get("offloaded_deleted", ())]
            if not x.get("recoverable")
        ),
        "bytes_recoverable": sum(
            x["bytes"]
            for ml in items
            for x in [*ml["deleted"], *ml.get("offloaded_deleted", ())]
            if x.get("recoverable")
        ),
        "offloaded_copies_deleted": sum(len(ml.get("offloaded_deleted", ())) for ml in items),
        "markers_cleared": sum(len(ml.get("cleared", ())) for ml in items),
        "markers_pending": len(pending),
        "bytes_pending": sum(m["size"] for m in pending),
        "oldest_pending_marked_at": min((m["marked_at"] for m in pending), default=None),
        "cursors_moved": sum(len(ml["cursors_moved"]) for ml in items),
        "zk_writes": sum(ml["zk_writes"] for ml in items),
        "errors": sum(1 for ml in items if ml["error"]),
        "missing": sum(1 for ml in items if ml["missing"]),
    }


def merge_totals(many: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Add up totals of several reports (DAG shards)."""
    merged: dict[str, Any] = {}
    for totals in many:
        for key, value in totals.items():
            if key == "oldest_pending_marked_at":
                present = [v for v in (merged.get(key), value) if v is not None]
                merged[key] = min(present) if present else None
            else:
                merged[key] = merged.get(key, 0) + value
    return merged or totals_of([], 0)


def outcome_of(totals: Mapping[str, Any], run_error: str | None = None) -> str:
    if run_error or totals.get("errors"):
        return OUTCOME_ERROR
    if totals.get("markers_pending"):
        return OUTCOME_PENDING
    return OUTCOME_OK


def run_summary(
    reports: Iterable[Mapping[str, Any]],
    *,
    run_id: str,
    source: str,
    dry_run: bool,
    scope: str,
    started_at: int,
    finished_at: int,
    run_errors: Iterable[str] = (),
) -> dict[str, Any]:
    """The summary a trim run appends to the run log (``run_log``), from report dicts.

    ``reports`` are ``TrimReport.to_dict()`` results: one for a CLI run, one per shard
    for a DAG run. ``run_errors`` are failures outside any report (a shard that failed).
    """
    reports = list(reports)
    errors = [str(e) for e in run_errors] + [r["error"] for r in reports if r.get("error")]
    totals = merge_totals(r["totals"] for r in reports)
    pending = [
        {"ml": ml["name"], **marker}
        for r in reports
        for ml in r["managed_ledgers"]
        for marker in ml["pending"]
    ]
    ml_errors = [
        {"ml": ml["name"], "error": ml["error"]}
        for r in reports
        for ml in r["managed_ledgers"]
        if ml["error"]
    ]
    outcome = outcome_of(totals, "; ".join(errors) or None)
    return {
        "kind": "trim",
        "run_id": run_id,
        "source": source,
        "dry_run": dry_run,
        "scope": scope,
        "started_at": started_at,
        "finished_at": finished_at,
        "duration_seconds": round(max(finished_at - started_at, 0) / 1000, 3),
        "outcome": outcome,
        "exit_code": EXIT_CODES[outcome],
        "totals": totals,
        "bucket": next((r["bucket"] for r in reports if r.get("bucket")), None),
        "pending": sorted(pending, key=lambda m: m["marked_at"])[:SUMMARY_LIST_LIMIT],
        "errors": [{"ml": None, "error": e} for e in errors][:SUMMARY_LIST_LIMIT]
        + ml_errors[:SUMMARY_LIST_LIMIT],
    }
