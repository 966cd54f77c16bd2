"""Which registered entries the survey saw, told by a mark instead of a list (issue 36).

The phases step explains a registered entry its scan did not find orphaned with its
source's reason only if the survey saw the entry in the registry (an entry another cycle
registered after the survey read it has no facts in this run: it gets the generic
reason). The diff record used to list every registered prefix for that; it now keeps
the registry's latest scan when the survey started, and an entry first registered by a
scan up to it was there. These tests register entries from "another cycle" between the
survey and the phases, remove and register one again, reset the registry, re-run the
survey, and read a record written by the old code (its list).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ledger_gc.orphans import cycle
from ledger_gc.orphans.records import DiffRecord, PhasesRecord
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.orphans.run_steps import DIFF, RunSteps
from ledger_gc.rules.bookkeeper.classify import BK_ORPHAN_LEDGER
from ledger_gc.rules.orphans import guards, phases
from ledger_gc.rules.orphans.classify import Candidate

STORE_PREFIX = "ledgers"
NOW = 1_800_000_000_000
TOPIC = "t/ns/persistent/gone"
RUN = "run-under-test"


def _candidate(ledger: int) -> Candidate:
    return Candidate(
        BK_ORPHAN_LEDGER,
        TOPIC,
        ledger,
        objects=1,
        bytes=100,
        newest_ms=NOW - 5000,
        oldest_ms=NOW - 10_000,
        segment=f"/ledgers/00/0000/L{ledger:04d}",
    )


X, Y, Z = (_candidate(n) for n in (1, 2, 3))
PX, PY, PZ = (c.prefix(STORE_PREFIX) for c in (X, Y, Z))


def _endpoints(state: Path) -> Any:
    return SimpleNamespace(
        state=state,
        policy=SimpleNamespace(orphan_max_fraction=1.0),
        blocks=SimpleNamespace(prefix=STORE_PREFIX),
        zk=SimpleNamespace(hosts="zk"),
    )


@pytest.fixture(autouse=True)
def _block_store_guards_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """(the sources' guards are not under test)"""
    monkeypatch.setattr(
        cycle,
        "survey_refusals",
        lambda diff, limit, force: guards.evaluate_guards(diff.to_dict(), limit, force=force),
    )


def _found(reasons: dict[str, str]) -> DiffRecord:
    """A survey whose BookKeeper source explains ``reasons`` (it read those prefixes)."""
    return DiffRecord(managed_ledgers=1, bookkeeper={"registered_reasons": reasons})


def _survey(state: Path, run_id: str, monkeypatch: pytest.MonkeyPatch, found: DiffRecord) -> None:
    """The engine's survey step, its sources replaced by ``found`` (no candidates)."""
    monkeypatch.setattr(cycle, "survey_sources", lambda request: (found, []))
    cycle.step_survey(_endpoints(state), run_id, spark=None)  # type: ignore[arg-type]


def _apply(state: Path, run_id: str, candidates: list[Candidate]) -> PhasesRecord:
    """Another cycle's survey and phases: ``candidates`` found, nothing to explain."""
    diff = DiffRecord(managed_ledgers=1, bookkeeper={}, candidates=len(candidates))
    RunSteps(state, run_id).write_diff(diff, candidates, STORE_PREFIX)
    return cycle.step_phases(_endpoints(state), run_id, force=True, clock=lambda: NOW)


def _corrected(state: Path, run_id: str) -> dict[str, str]:
    return {
        row["prefix"]: row["reason"]
        for row in OrphanRegistry(state).history(run_id=run_id)
        if row["event"] == phases.CORRECTED
    }


def test_an_entry_registered_by_another_cycle_after_the_survey_gets_the_generic_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "state"
    _apply(state, "run-1", [X, Z])  # scan 1: X and Z registered
    reasons = {p: f"bk reason {p}" for p in (PX, PY, PZ)}
    _survey(state, RUN, monkeypatch, _found(reasons))
    # Between this run's survey and its phases, other cycles: scan 2 registers Y and
    # corrects Z (not found), scan 3 registers Z again (a new entry of the same prefix).
    _apply(state, "run-2", [X, Y])
    _apply(state, "run-3", [X, Y, Z])
    entries = OrphanRegistry(state).entries()
    assert [entries[p].first_scan for p in (PX, PY, PZ)] == [1, 2, 3]

    applied = cycle.step_phases(_endpoints(state), RUN, force=True, clock=lambda: NOW)

    assert applied.scan_number == 4
    assert _corrected(state, RUN) == {
        PX: f"bk reason {PX}",  # in the registry when the survey read it
        PY: "not orphaned in scan 4",  # registered after it
        PZ: "not orphaned in scan 4",  # removed, then registered again after it
    }
    stored = RunSteps(state, RUN).read_record(DIFF, DiffRecord)
    assert stored is not None and "registered" not in stored.snapshot_facts


def test_a_survey_run_again_reads_the_registry_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same run's survey re-run after another cycle registered Y: it saw Y."""
    state = tmp_path / "state"
    _apply(state, "run-1", [X])
    reasons = {p: f"bk reason {p}" for p in (PX, PY)}
    _survey(state, RUN, monkeypatch, _found(reasons))
    _apply(state, "run-2", [X, Y])
    _survey(state, RUN, monkeypatch, _found(reasons))

    cycle.step_phases(_endpoints(state), RUN, force=True, clock=lambda: NOW)

    assert _corrected(state, RUN) == {PX: f"bk reason {PX}", PY: f"bk reason {PY}"}


def test_after_a_reset_nothing_registered_since_counts_as_seen_by_the_survey(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry reset between the survey and the phases numbers scans from 1 again:
    an entry the new scan 1 registered is not one the survey saw (its scan 1 was
    another run's)."""
    state = tmp_path / "state"
    _apply(state, "run-1", [X])
    _survey(state, RUN, monkeypatch, _found({PX: f"bk reason {PX}"}))
    OrphanRegistry(state).reset(NOW)
    _apply(state, "run-2", [X])
    assert OrphanRegistry(state).entries()[PX].first_scan == 1

    cycle.step_phases(_endpoints(state), RUN, force=True, clock=lambda: NOW)

    assert _corrected(state, RUN) == {PX: "not orphaned in scan 2"}


def test_a_diff_record_written_by_the_old_code_is_read_by_its_list(tmp_path: Path) -> None:
    """An upgrade mid-run: the survey (old code) listed the registered prefixes."""
    state = tmp_path / "state"
    _apply(state, "run-1", [X])
    _apply(state, "run-2", [X, Y])
    old = {
        **_found({PX: f"bk reason {PX}", PY: f"bk reason {PY}"}).to_dict(),
        "snapshot_facts": {"ml_high": {}, "ml_rows": [], "ledger_rows": [], "registered": [PX]},
    }
    RunSteps(state, RUN).write_diff(DiffRecord.from_dict(old), [], STORE_PREFIX)

    cycle.step_phases(_endpoints(state), RUN, force=True, clock=lambda: NOW)

    assert _corrected(state, RUN) == {PX: f"bk reason {PX}", PY: "not orphaned in scan 3"}
