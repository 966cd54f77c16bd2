"""What the steps of an orphan cycle hand each other, as typed, versioned records.

The steps run as separate Airflow tasks, on different workers, so each step's result is
written to the state store (``run_steps``) and read back by the steps after it. Each
record is a frozen dataclass: its fields are the contract between two tasks, checked by
mypy rather than by a string key read somewhere else. A record carries its ``VERSION``;
one written by a newer ledger-gc (a worker upgraded before the others) is refused with
one line rather than half understood, and fields an older one lacks take their
defaults (an older record never invents a decision: every default is the cautious one).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import StrEnum
from functools import cached_property
from typing import Any, ClassVar, Self

from ledger_gc.errors import LedgerGcError
from ledger_gc.rules.orphans.outcomes import RecheckResult


class RecordVersionError(LedgerGcError):
    """A step record was written by a newer ledger-gc than this one."""


class CycleStatus(StrEnum):
    """How a cycle ended (the report's ``status``; a ``str``, so it is JSON as it is)."""

    OK = "ok"
    REFUSED = "refused"  # a guard stopped it: nothing registered or deleted
    FAILED = "failed"  # a step raised, or did not complete


@dataclass(frozen=True)
class StepRecord:
    """A step's record: ``to_dict`` is what the state store keeps, ``from_dict`` reads it."""

    VERSION: ClassVar[int] = 1
    #: Fields a stored record must have: no default stands in for them (a guard's input
    #: read as a harmless default would let the guard pass).
    REQUIRED: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: _plain(getattr(self, f.name)) for f in fields(self)}
        data["version"] = self.VERSION
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        version = int(data.get("version") or 1)
        if version > cls.VERSION:
            raise RecordVersionError(
                f"a {cls.__name__} of version {version} was written by a newer ledger-gc "
                f"(this one reads up to {cls.VERSION}); upgrade every worker"
            )
        missing = [name for name in cls.REQUIRED if data.get(name) is None]
        if missing:
            raise RecordVersionError(
                f"a {cls.__name__} without {', '.join(missing)} cannot be acted on "
                "(a damaged record, or one another program wrote); run the step again"
            )
        known = {f.name for f in fields(cls)}
        return cls(**cls._convert({k: v for k, v in data.items() if k in known}))

    @classmethod
    def _convert(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Turn stored plain values back into typed ones (nested records)."""
        return values


def _plain(value: Any) -> Any:
    if isinstance(value, RecheckResult):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class SnapshotRecord(StepRecord):
    """The S3 source's metadata snapshot (``survey_steps.step_snapshot``): its counts, and
    the ZooKeeper sequence and servers' time that order this run among the others."""

    started_ms: int | None = None
    finished_ms: int | None = None
    managed_ledgers: int | None = None
    listed_ledgers: int | None = None
    markers: int | None = None
    shards: int | None = None
    managed_ledgers_listed: int | None = None
    sequence: int | None = None  # numbers the run (``step_phases``' stale-run check)
    instant: dict[str, Any] | None = None
    clock_warnings: list[str] = field(default_factory=list)
    # What it cost ZooKeeper: {"reads", "peak_per_second"} (driver and executors)
    zk_reads: dict[str, int] | None = None


@dataclass(frozen=True)
class ScanRecord(StepRecord):
    """The S3 source's storage scan (``survey_steps.step_scan``): how the objects were
    found (a listing, or an inventory's pinned files, read again by the diff), their
    totals, and the servers' time after it, from which every grace window runs."""

    source: str = "listing"  # "listing" | "inventory"
    inventory: str | None = None
    inventory_format: str | None = None
    inventory_files: list[str] = field(default_factory=list)
    shards: int = 0
    offload: dict[str, Any] | None = None  # the offload bucket's scan (tiered storage on)
    started_ms: int | None = None
    finished_ms: int | None = None
    objects: int | None = None
    bytes: int | None = None
    id_counter: int | None = None  # read after the listing (horizon.py)
    instant: dict[str, Any] | None = None
    clock_warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class DiffRecord(StepRecord):
    """What the survey found, every source's part of it (``cycle.step_survey``): the S3
    source's classes and guard inputs (``classify.DiffResult.to_manifest``) and what the
    phases step needs of its snapshot, and the BookKeeper source's survey (None: off).

    Each source fills its own fields (``orphan_source.Findings``); the candidates are
    rows beside the record, written with it in one transaction (``run_steps``). The
    guards' inputs are required: a stored record without them is refused, never read as
    the defaults below (which would pass every guard)."""

    REQUIRED = (
        "managed_ledgers",
        "bytes",
        "block_objects",
        "orphan_bytes",
        "orphan_fraction",
    )

    # The S3 source's classification (the guards' inputs).
    managed_ledgers: int = 0
    objects: int = 0
    bytes: int = 0
    block_objects: int = 0
    segment_objects: int = 0
    offload_objects: int = 0
    offload_bytes: int = 0
    orphan_bytes: int = 0
    orphan_fraction: float = 0.0
    classes: dict[str, Any] = field(default_factory=dict)
    namespaces: dict[str, Any] = field(default_factory=dict)
    foreign_samples: list[Any] = field(default_factory=list)
    our_clusters: dict[str, Any] | None = None
    other_clusters: dict[str, Any] = field(default_factory=dict)
    other_cluster_samples: list[Any] = field(default_factory=list)
    other_bucket_samples: list[Any] = field(default_factory=list)
    # What the S3 source knew when it classified (order, time, horizon, snapshot facts).
    snapshot_started_ms: int | None = None
    scan_started_ms: int | None = None
    scan_source: str | None = None
    id_counter: int | None = None
    metadata_max_ledger_id: int | None = None
    offload: dict[str, Any] | None = None
    snapshot_sequence: int | None = None
    snapshot_instant: dict[str, Any] | None = None
    scan_instant: dict[str, Any] | None = None
    snapshot_facts: dict[str, Any] = field(default_factory=dict)
    # The BookKeeper source's survey (``BookKeeperSurvey.to_manifest``; None: it was off).
    bookkeeper: dict[str, Any] | None = None
    # The Pulsar-metadata source's survey (``PulsarMetadataManifest``; None: it was off).
    pulsar_metadata: dict[str, Any] | None = None
    candidates: int = 0  # every source's, in the rows beside the record
    # The registry's mark (``OrphanRegistry.mark``: its latest scan's number and run),
    # read by the engine before any source read the registry: which registered entries
    # the survey saw (``RegistryTransaction.surveyed``). None: a record an older
    # ledger-gc wrote, which listed them instead (``registered``).
    registry_mark: dict[str, Any] | None = None

    @cached_property  # asked once per registry entry by the phases step
    def registered(self) -> frozenset[str]:
        """The registry's prefixes as the survey read them, as an older ledger-gc
        listed them (a record without ``registry_mark``: an upgrade mid-run): an entry
        registered after that (by another cycle) has no facts in this run, and gets the
        generic reason when corrected."""
        return frozenset(self.snapshot_facts.get("registered") or ())


@dataclass(frozen=True)
class PhasesRecord(StepRecord):
    """Guards, then phases 1 and 2 (``cycle.step_phases``). Also the registry's result of
    the scan it applied, where the next cycle reads the run order and what was held."""

    applied: bool = False
    forced: bool = False
    scan_number: int | None = None
    refusals: list[dict[str, Any]] = field(default_factory=list)
    held: list[dict[str, Any]] = field(default_factory=list)
    added: int = 0
    seen: int = 0
    restarted: int = 0
    corrected: int = 0
    # Whose offloaded segments are this store's, as the diff learned it (segments.py).
    our_clusters: dict[str, Any] | None = None
    snapshot_started_ms: int | None = None
    snapshot_sequence: int | None = None
    snapshot_instant: dict[str, Any] | None = None
    instant: dict[str, Any] | None = None
    bookkeeper_live_elsewhere: dict[str, str] = field(default_factory=dict)
    bookkeeper_gone_topic_high: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class DeleteRecord(StepRecord):
    """Phase 3 (``cycle.step_delete``): whether it deleted for real, why it did not run,
    and each eligible entry's outcome."""

    deleting: bool = False
    skipped: str | None = None  # why nothing was deleted (None: it ran)
    results: list[RecheckResult] = field(default_factory=list)
    eligible: int = 0
    now_instant: dict[str, Any] | None = None
    clock_warnings: list[str] = field(default_factory=list)
    our_clusters: dict[str, Any] | None = None
    lock_busy: bool = False  # another cycle held the delete lock: the next run retries
    lock_lost: bool = False  # the lock was lost mid-way (its session expired)
    failed: str | None = None  # ZooKeeper went away mid-way: the step failed closed
    # What the live re-checks cost ZooKeeper: {"reads", "peak_per_second"}
    zk_reads: dict[str, int] | None = None

    @classmethod
    def _convert(cls, values: dict[str, Any]) -> dict[str, Any]:
        known = {f.name for f in fields(RecheckResult)}
        results = [
            r
            if isinstance(r, RecheckResult)
            else RecheckResult(**{k: v for k, v in r.items() if k in known})
            for r in values.get("results") or []
        ]
        return values | {"results": results}

    def summary(self) -> dict[str, Any]:
        """The record with a count in place of each entry's outcome (those are in the
        state store and the audit log): what a task or an app prints."""
        return self.to_dict() | {"results": len(self.results)}
