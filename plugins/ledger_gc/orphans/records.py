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
