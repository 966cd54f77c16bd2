"""The orphan registry in the state store (SQLite and PostgreSQL): transactions, scan
numbering, history, damaged stores; and the run layout, the guards and the settings
hand-over to spark-submit."""

from __future__ import annotations

import sqlite3
import tracemalloc
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from ledger_gc.config.settings import Settings
from ledger_gc.orphans.layout import run_dir_name
from ledger_gc.orphans.records import DiffRecord
from ledger_gc.orphans.registry import OrphanRegistry, RegistryError, registry_path
from ledger_gc.orphans.run_steps import MissingStepOutputError, RunSteps, prune_runs
from ledger_gc.rules.orphans import guards
from ledger_gc.rules.orphans.classify import ORPHAN_LEDGER, ORPHAN_PARTITION, Candidate
from ledger_gc.rules.orphans.phases import REGISTERED, RegistryEntry
from ledger_gc.rules.trim.eligibility import TrimRetention


def _entry(prefix: str = "ledgers/a/b/persistent/c/ledgers/00000000000000000005/") -> RegistryEntry:
    return RegistryEntry(
        prefix=prefix,
        target_class=ORPHAN_LEDGER,
        ml_name="a/b/persistent/c",
        ledger_id=5,
        first_seen_ms=1,
        last_seen_ms=1,
        first_scan=1,
        last_scan=1,
        scans_seen=1,
        objects=3,
        bytes=300,
        newest_ms=1,
    )


@pytest.mark.state_backends
def test_a_failed_transaction_leaves_the_registry_as_it_was(state_location: Any) -> None:
    registry = OrphanRegistry(state_location)
    with registry.transaction() as txn:
        txn.record_scan("run-1", 1, {})
        txn.upsert(_entry())
    before = registry.entries()

    with pytest.raises(RuntimeError), registry.transaction() as txn:
        txn.record_scan("run-2", 2, {})
        txn.remove(_entry().prefix)
        txn.upsert(_entry("other/"))
        raise RuntimeError("the task died here")

    assert registry.entries() == before
    latest = registry.latest_scan()
    assert latest is not None and latest.run_id == "run-1"


@pytest.mark.state_backends
def test_seeing_again_what_another_scan_last_saw_changes_nothing(state_location: Any) -> None:
    """``see_again`` moves the clock of entries the previous scan saw last; one that it
    did not (registered by this scan, or not seen for scans: the phases restart those)
    or that is not registered undoes the whole step, never a clock that did not run."""
    registry = OrphanRegistry(state_location)
    older = _entry("older/")
    with registry.transaction() as txn:
        txn.upsert_many([_entry(), replace(_entry("new/"), first_scan=2, last_scan=2), older])
    before = registry.entries()

    for prefixes in (["new/"], [_entry().prefix, "absent/"]):
        refused = pytest.raises(RegistryError, match="not registered with scan 1 as their last")
        with refused, registry.transaction() as txn:
            txn.see_again(prefixes, 2, 99)
        assert registry.entries() == before

    with registry.transaction() as txn:
        txn.see_again([_entry().prefix, older.prefix], 2, 99)
    moved = replace(_entry(), last_seen_ms=99, last_scan=2, scans_seen=2)
    assert registry.entries()[_entry().prefix] == moved


@pytest.mark.state_backends
def test_scans_are_numbered_once_per_run_with_no_gap(state_location: Any) -> None:
    registry = OrphanRegistry(state_location)
    with registry.transaction() as txn:
        assert txn.record_scan("run-1", 1, {"added": 1}) == 1
        assert txn.record_scan("run-2", 2, {}) == 2
    with pytest.raises(IntegrityError), registry.transaction() as txn:
        txn.record_scan("run-1", 3, {})
    with pytest.raises(RuntimeError), registry.transaction() as txn:
        txn.record_scan("run-3", 3, {})
        raise RuntimeError("rolled back")
    record = registry.scan_of_run("run-1")
    assert record is not None and (record.number, record.result) == (1, {"added": 1})
    # A rolled-back scan leaves no gap: a gap would read as "not seen by that scan".
    with registry.transaction() as txn:
        assert txn.record_scan("run-4", 4, {}) == 3


@pytest.mark.state_backends
def test_history_keeps_every_event_with_its_reason(state_location: Any) -> None:
    registry = OrphanRegistry(state_location)
    entry = _entry()
    with registry.transaction() as txn:
        txn.upsert(entry)
        txn.add_history(entry, REGISTERED, "first seen", run_id="r1", scan=1, time_ms=5)
        txn.note_failure(entry.prefix, "SlowDown")
    [row] = registry.history(run_id="r1")
    assert (row["event"], row["reason"], row["bytes"], row["ledger_id"]) == (
        REGISTERED,
        "first seen",
        300,
        5,
    )
    assert registry.entries()[entry.prefix].attempts == 1
    assert registry.history(run_id="other") == []


@pytest.mark.state_backends
def test_the_registry_streamed_and_in_part_reads_what_the_whole_read_does(
    state_location: Any,
) -> None:
    """``iter_entries`` (by prefix), ``entries_of`` (a few prefixes, batched) and
    ``count`` agree with ``entries``; an upsert of more rows than a batch, with a prefix
    given twice, keeps the last (issue 36: the steps stream instead of holding all)."""
    registry = OrphanRegistry(state_location)
    many = [_entry(f"p/{n:05d}/") for n in range(1234)]
    again = RegistryEntry(**{**asdict(many[7]), "bytes": 999})
    with registry.transaction() as txn:
        txn.upsert_many(iter([*many, again]))
    whole = registry.entries()
    assert list(registry.iter_entries()) == list(whole.values())
    assert registry.count() == len(whole) == 1234
    assert whole[again.prefix].bytes == 999
    asked = [f"p/{n:05d}/" for n in range(0, 2000, 3)]
    with registry.transaction() as txn:
        found = txn.entries_of(asked)
        assert txn.entries_of([]) == {}
    assert found == {p: whole[p] for p in asked if p in whole}
    assert len(found) == 412


def test_a_registry_file_from_a_newer_ledger_gc_is_refused(tmp_path: Path) -> None:
    path = registry_path(tmp_path)
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version=99")
    with pytest.raises(RegistryError, match="upgrade ledger-gc"):
        OrphanRegistry(tmp_path).entries()


@pytest.mark.state_backends
def test_a_store_migrated_by_a_newer_ledger_gc_is_refused(state_location: Any) -> None:
    from sqlalchemy import text

    from ledger_gc.state.store import StateStore
    from ledger_gc.state.stores import open_store

    store = open_store(state_location)
    store.check()
    with store.write() as conn:
        conn.execute(text("UPDATE ledgergc_alembic_version SET version_num = '9999'"))
    with pytest.raises(RegistryError, match=r"version 9999, newer.*upgrade ledger-gc"):
        OrphanRegistry(StateStore(store.url)).entries()


# --- layout -------------------------------------------------------------------------------


def test_run_folders_are_safe_and_distinct() -> None:
    airflow_id = "manual__2026-01-01T00:00:00+00:00"
    name = run_dir_name(airflow_id)
    assert ":" not in name and "+" not in name
    assert run_dir_name("manual__2026-01-01T00_00_00_00_00") != name
    assert run_dir_name("cli-20260101T000000Z-ab12") == "cli-20260101T000000Z-ab12"


def test_a_step_without_a_complete_record_is_missing(tmp_path: Path) -> None:
    steps = RunSteps(tmp_path, "r1")
    with pytest.raises(MissingStepOutputError, match="snapshot step of run r1"):
        steps.read_manifest("snapshot")
    steps.write_manifest("snapshot", {"managed_ledgers": 3})
    assert steps.read_manifest("snapshot")["managed_ledgers"] == 3  # type: ignore[index]
    assert RunSteps(tmp_path, "r2").read_manifest("snapshot", required=False) is None
    steps.start_step("snapshot")  # a re-run forgets the old output first
    assert steps.read_manifest("snapshot", required=False) is None


@pytest.mark.state_backends
def test_the_diff_and_its_candidates_are_recorded_together(state_location: Any) -> None:
    candidates = [
        Candidate(ORPHAN_PARTITION, "t/ns/persistent/gone", None, 2, 20, 5, 1, 9),
        Candidate(ORPHAN_LEDGER, "t/ns/persistent/a", 7, 1, 10, 4, 4),
    ]
    steps = RunSteps(state_location, "r1")
    with pytest.raises(MissingStepOutputError, match="diff step of run r1"):
        steps.read_candidates()
    steps.write_diff(DiffRecord(candidates=2), candidates, "ledgers")
    steps.write_diff(DiffRecord(candidates=2), candidates, "ledgers")  # a re-run replaces it
    assert steps.read_candidates() == candidates  # in the diff's order
    assert RunSteps(state_location, "r2").read_manifest("diff", required=False) is None
    steps.start_step("diff")
    assert steps.read_manifest("diff", required=False) is None
    steps.write_diff(DiffRecord(), [], "ledgers")
    assert steps.read_candidates() == []


def test_the_diff_writes_candidates_as_they_are_made_not_all_at_once(tmp_path: Path) -> None:
    """A source's candidates may be made as they are read (the BookKeeper survey's
    table, issue 36): the diff takes them a batch at a time, in order, and holds no
    list of every one."""
    made = 0

    def candidates() -> Iterator[Candidate]:
        nonlocal made
        for number in range(2500):
            made += 1
            yield Candidate(ORPHAN_LEDGER, f"t/ns/persistent/t{number}", number, 1, 10, 4, 4)

    steps = RunSteps(tmp_path, "r1")
    steps.write_diff(DiffRecord(candidates=2500), candidates(), "ledgers")
    assert made == 2500
    assert [c.ledger_id for c in steps.iter_candidates()] == list(range(2500))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        steps.write_diff(DiffRecord(candidates=30_000), _many(30_000), "ledgers")
        written = tracemalloc.get_traced_memory()[1] - before
        every = list(_many(30_000))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(every) == 30_000 == sum(1 for _ in steps.iter_candidates())
    assert written < held / 2, (written, held)


def _many(count: int) -> Iterator[Candidate]:
    for number in range(count):
        yield Candidate(ORPHAN_LEDGER, f"t/ns/persistent/t{number}", number, 1, 10, 4, 4)


def test_old_runs_records_are_pruned(tmp_path: Path) -> None:
    for number in range(5):
        RunSteps(tmp_path, f"r{number}").write_manifest("snapshot", {"n": number})
    assert prune_runs(tmp_path, 2, current="r0") == 2
    left = [
        f"r{n}"
        for n in range(5)
        if RunSteps(tmp_path, f"r{n}").read_manifest("snapshot", required=False)
    ]
    assert left == ["r0", "r3", "r4"]


# --- guards -------------------------------------------------------------------------------


def _diff(**changes: object) -> dict[str, object]:
    base = {
        "managed_ledgers": 3,
        "block_objects": 10,
        "orphan_fraction": 0.01,
        "orphan_bytes": 1,
        "bytes": 100,
    }
    return {**base, **changes}


def test_no_managed_ledgers_beside_ledger_data_is_refused() -> None:
    [refusal] = guards.evaluate_guards(_diff(managed_ledgers=0), 0.1, force=False)
    assert refusal.guard == guards.ZERO_MANAGED_LEDGERS
    assert "LEDGERGC_ZK_HOSTS" in refusal.reason
    assert guards.blocking([refusal]) == [refusal]
    assert guards.evaluate_guards(_diff(managed_ledgers=0, block_objects=0), 0.1, force=False) == []


def test_too_many_orphan_bytes_is_refused_unless_forced() -> None:
    [refusal] = guards.evaluate_guards(_diff(orphan_fraction=0.5), 0.1, force=False)
    assert refusal.guard == guards.ORPHAN_FRACTION
    [forced] = guards.evaluate_guards(_diff(orphan_fraction=0.5), 0.1, force=True)
    assert forced.forced and guards.blocking([forced]) == []


# --- settings to spark-submit --------------------------------------------------------------


def test_settings_survive_the_trip_through_the_environment(tmp_path: Path) -> None:
    settings = Settings(
        zk_address="zk1:2181,zk2:2181/chroot",
        zk_digest="gc:secret",
        s3_endpoint="http://127.0.0.1:9000",
        bucket="b",
        prefix="",
        delete_enabled=True,
        grace_seconds=60,
        retention_seconds=0,
        orphan_max_fraction=0.25,
        state_dir=tmp_path,
        trim_retention=TrimRetention(seconds=-1, bytes=5),
        trim_retention_overrides={"t/ns": TrimRetention(seconds=3, bytes=4)},
    )
    assert Settings.from_env(settings.to_env()) == settings


@pytest.mark.parametrize("damaged", ["old registry file", "state store file"])
def test_a_damaged_registry_is_one_error_naming_the_file_and_the_reset(
    tmp_path: Path, damaged: str
) -> None:
    from ledger_gc.orphans.registry import RegistryCorruptError
    from ledger_gc.state.stores import forget_stores
    from ledger_gc.state.url import STATE_FILE

    forget_stores()
    path = registry_path(tmp_path) if damaged == "old registry file" else tmp_path / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x8f" * 4096)
    registry = OrphanRegistry(tmp_path)

    with pytest.raises(RegistryCorruptError, match="--reset-registry") as failure:
        registry.check()
    assert str(path) in str(failure.value) and "\n" not in str(failure.value)
    assert failure.value.__cause__ is None and failure.value.__suppress_context__

    moved = registry.reset(now_ms=0)
    aside = Path(f"{path}.corrupt-19700101T000000Z")
    assert moved == str(aside) and aside.read_bytes() == b"\x8f" * 4096
    registry = OrphanRegistry(tmp_path)
    registry.check()  # a fresh, empty registry
    assert registry.entries() == {} and registry.latest_scan() is None


@pytest.mark.state_backends
def test_a_reset_of_a_sound_registry_removes_its_rows_and_keeps_the_history(
    state_location: Any,
) -> None:
    registry = OrphanRegistry(state_location)
    entry = _entry()
    with registry.transaction() as txn:
        txn.record_scan("run-1", 1, {})
        txn.upsert(entry)
        txn.add_history(entry, REGISTERED, "first seen", run_id="run-1", scan=1)
    assert registry.reset(now_ms=0) == (
        f"1 registered orphans and 1 scans removed from {registry.path}"
    )
    assert registry.entries() == {} and registry.latest_scan() is None
    assert len(registry.history()) == 1
    assert registry.reset(now_ms=0) is None
