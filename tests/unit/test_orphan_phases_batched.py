"""The phases step a batch at a time decides exactly as it did over every candidate and
every registry entry at once (issue 36): the whole-dict algorithm it replaced is kept
here as the reference, and both run over randomized registries and scans of every
source's classes (held ones, gone topics growing elsewhere, restarted clocks, new data,
entries registered after the survey) with tiny batches. The registry after, the
history rows and the phases record must be the same."""

from __future__ import annotations

import random
import shutil
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ledger_gc.orphans import cycle
from ledger_gc.orphans.records import DiffRecord, PhasesRecord
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.orphans.run_steps import DIFF, PHASES, RunSteps
from ledger_gc.orphans.sources import hold_by_source, reasons_by_source
from ledger_gc.rules.bookkeeper.classify import (
    BK_ORPHAN_LEDGER,
    BK_ORPHAN_PARTITION,
    BK_ORPHAN_SCHEMA_LEDGER,
    BK_TARGET_CLASSES,
    topic_of,
)
from ledger_gc.rules.orphans import guards, horizon, phases
from ledger_gc.rules.orphans.classify import (
    ORPHAN_LEDGER,
    ORPHAN_PARTITION,
    ORPHAN_SEGMENT,
    Candidate,
)
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.rules.orphans.timekeeping import Instant
from ledger_gc.rules.pulsar_metadata.classes import PM_DELETED_NAMESPACE
from ledger_gc.state import schema
from ledger_gc.state.stores import open_store

STORE_PREFIX = "ledgers"
NOW = 1_800_000_000_000
TOPICS = ["t/ns/persistent/a", "t/ns/persistent/b", "t/ns/persistent/c", "t/ns/persistent/d"]
RUN = "run-under-test"


# --- the reference: the whole-dict algorithm the batched step replaced ---------------


def _reference_live_elsewhere(
    candidates: dict[str, Candidate],
    latest: PhasesRecord,
    gone_topic_high: dict[str, int],
    number: int,
) -> dict[str, str]:
    carried = dict(latest.bookkeeper_live_elsewhere)
    before = dict(latest.bookkeeper_gone_topic_high)
    found: dict[str, str] = {}
    for topic, high in gone_topic_high.items():
        if topic in before and high > before[topic]:
            found[topic] = (
                f"topic {topic} is not in this metadata, yet it gained ledger {high} since "
                f"the previous scan (whose newest was {before[topic]}; scan {number}): "
                "another Pulsar cluster sharing this BookKeeper writes it. Held; set "
                "LEDGERGC_BK_SHARED=true if BookKeeper is shared"
            )
    names = {topic_of(c.target_class, c.ml_name) for c in candidates.values() if c.bookkeeper}
    found.update({name: why for name, why in carried.items() if name in names})
    return found


def _reference_compare(
    candidates: dict[str, Candidate],
    entries: dict[str, RegistryEntry],
    diff: DiffRecord,
    before: PhasesRecord,
    number: int,
) -> tuple[dict[str, str], dict[str, Any]]:
    """The BookKeeper source's compare (the only source that held anything), as was."""
    bk_candidates = {p: c for p, c in candidates.items() if c.target_class in BK_TARGET_CLASSES}
    bk_entries = {p: e for p, e in entries.items() if e.target_class in BK_TARGET_CLASSES}
    gone_high = (diff.bookkeeper or {}).get("gone_topic_high") or {}
    elsewhere = _reference_live_elsewhere(bk_candidates, before, gone_high, number)
    owners = [(p, e.target_class, e.ml_name) for p, e in bk_entries.items()]
    owners += [(p, c.target_class, c.ml_name) for p, c in bk_candidates.items()]
    held = {
        prefix: elsewhere[topic]
        for prefix, target_class, owner in owners
        if target_class in BK_TARGET_CLASSES
        and (topic := topic_of(target_class, owner)) in elsewhere
    }
    record = {"bookkeeper_live_elsewhere": elsewhere, "bookkeeper_gone_topic_high": gone_high}
    return held, record


def _reference_step_phases(state: Path, run_id: str, now: int) -> PhasesRecord:
    """``cycle.step_phases`` and ``_apply_scan`` before issue 36's batches (force=True)."""
    steps = RunSteps(state, run_id)
    diff = steps.read_record(DIFF, DiffRecord) or DiffRecord()
    steps.start_step(PHASES)
    refusals = guards.evaluate_guards(diff.to_dict(), 1.0, force=True)
    candidates, held = hold_by_source(
        {c.prefix(STORE_PREFIX): c for c in steps.iter_candidates()}, diff
    )
    stale = guards.stale_metadata(horizon.proof_of_staleness(held), "zk", force=True)
    if stale is not None:
        refusals.insert(0, stale)
    result = PhasesRecord(
        forced=True,
        refusals=[r.to_dict() for r in refusals],
        held=[item.to_dict() for item in held],
        our_clusters=diff.our_clusters,
    )
    instant = Instant.from_dict(diff.scan_instant) or Instant(now)
    registry = OrphanRegistry(state)
    with registry.transaction() as txn:
        done = txn.scan_of_run(run_id)
        if done is not None:
            return PhasesRecord.from_dict(done.result)
        latest = txn.latest_scan()
        before = PhasesRecord.from_dict(latest.result) if latest is not None else PhasesRecord()
        number = txn.record_scan(run_id, now, {})
        entries = txn.entries()
        compared_held, compared_record = _reference_compare(
            candidates, entries, diff, before, number
        )
        held_now = []
        for prefix, why in compared_held.items():
            candidate = candidates.pop(prefix, None)
            if candidate is not None:
                held_now.append(horizon.Held(candidate, prefix, why, False).to_dict())
        missing = [
            entry
            for prefix, entry in entries.items()
            if prefix not in candidates and prefix in diff.registered
        ]
        reasons = reasons_by_source(missing, diff, number)
        reasons.update({item.prefix: item.reason for item in held if item.prefix in entries})
        reasons.update(compared_held)
        changes = phases.initialize_and_correct(entries, candidates, number, now, reasons)
        txn.upsert_many([*changes.added, *changes.seen, *(entry for entry, _ in changes.restarted)])
        for entry, _ in changes.corrected:
            txn.remove(entry.prefix)
        txn.add_history_many(
            [
                *((entry, phases.REGISTERED, "first seen orphaned") for entry in changes.added),
                *((entry, phases.CLOCK_RESTARTED, why) for entry, why in changes.restarted),
                *((entry, phases.CORRECTED, why) for entry, why in changes.corrected),
            ],
            run_id=run_id,
            scan=number,
            time_ms=now,
        )
        applied = replace(
            result,
            applied=True,
            held=[*result.held, *held_now],
            scan_number=number,
            snapshot_started_ms=diff.snapshot_started_ms,
            snapshot_sequence=diff.snapshot_sequence,
            snapshot_instant=diff.snapshot_instant,
            instant=instant.to_dict() if diff.scan_instant else None,
            added=len(changes.added),
            seen=len(changes.seen),
            restarted=len(changes.restarted),
            corrected=len(changes.corrected),
            **compared_record,
        )
        txn.set_scan_result(number, applied.to_dict())
    steps.write_record(PHASES, applied)
    return applied


# --- randomized registries and scans -------------------------------------------------


def _target(rng: random.Random, index: int) -> Candidate:
    """A candidate of one of every source's classes, on a few shared topic names."""
    topic = rng.choice(TOPICS)
    ledger = 10 + index
    size = dict(objects=rng.randint(1, 3), bytes=rng.randint(1, 3) * 100)
    times = dict(newest_ms=NOW - rng.randint(1, 3) * 1000, oldest_ms=NOW - 10_000)
    kind = rng.randrange(7)
    if kind == 0:
        return Candidate(ORPHAN_LEDGER, topic, ledger, **size, **times)
    if kind == 1:
        return Candidate(
            ORPHAN_PARTITION, f"{topic}-p{index}", None, **size, **times, max_ledger_id=ledger
        )
    if kind == 2:
        owner = rng.choice(["", topic])
        return Candidate(ORPHAN_SEGMENT, owner, ledger, **size, **times, segment=f"off/seg-{index}")
    if kind == 6:
        return Candidate(
            PM_DELETED_NAMESPACE, "t/ns", None, **size, **times, segment=f"local:t/ns{index}"
        )
    bk = [BK_ORPHAN_LEDGER, BK_ORPHAN_PARTITION, BK_ORPHAN_SCHEMA_LEDGER][kind - 3]
    return Candidate(bk, topic, ledger, **size, **times, segment=f"/ledgers/L{ledger}")


def _entry_of(rng: random.Random, candidate: Candidate, latest: int) -> RegistryEntry:
    prefix = candidate.prefix(STORE_PREFIX)
    last = rng.choice([latest, latest, latest - 1, max(0, latest - 2)])
    first = rng.randint(0, last)
    owner = candidate.ml_name
    if candidate.bookkeeper and rng.random() < 0.2:
        owner = rng.choice(TOPICS)  # its tags named another topic when registered
    drift = rng.choice([0, 0, 0, -1000, 1000])  # newer data arrived since (or not)
    return RegistryEntry(
        prefix=prefix,
        target_class=candidate.target_class,
        ml_name=owner,
        ledger_id=candidate.ledger_id,
        first_seen_ms=NOW - 100_000,
        last_seen_ms=NOW - 50_000,
        first_scan=first,
        last_scan=last,
        scans_seen=last - first + 1,
        objects=candidate.objects - rng.choice([0, 0, 1]),
        bytes=candidate.bytes,
        newest_ms=candidate.newest_ms + drift,
        attempts=rng.randint(0, 2),
    )


def _scenario(
    rng: random.Random,
) -> tuple[list[Candidate], list[RegistryEntry], DiffRecord, PhasesRecord, int]:
    targets = [_target(rng, i) for i in range(rng.randint(0, 40))]
    latest = rng.randint(1, 4)
    registered = [t for t in targets if rng.random() < 0.5]
    entries = [_entry_of(rng, t, latest) for t in registered]
    candidates = [t for t in targets if rng.random() < 0.6]
    surveyed = sorted(e.prefix for e in entries if rng.random() < 0.8)  # others: after it
    gone = {t: rng.randint(5, 60) for t in TOPICS if rng.random() < 0.6}
    before = PhasesRecord(
        applied=True,
        bookkeeper_gone_topic_high={t: rng.randint(5, 60) for t in TOPICS if rng.random() < 0.6},
        bookkeeper_live_elsewhere={t: f"carried {t}" for t in TOPICS if rng.random() < 0.3},
    )
    bookkeeper = (
        None
        if rng.random() < 0.15
        else {
            "gone_topic_high": gone,
            "registered_reasons": {p: f"bk reason {p}" for p in surveyed if rng.random() < 0.5},
        }
    )
    pulsar_metadata = (
        None
        if rng.random() < 0.15
        else {"registered_reasons": {p: f"pm reason {p}" for p in surveyed if rng.random() < 0.5}}
    )
    ml_high = {t: rng.randint(0, 50) for t in TOPICS if rng.random() < 0.7}
    diff = DiffRecord(
        managed_ledgers=5,
        id_counter=rng.choice([None, 30, 60]),
        metadata_max_ledger_id=rng.choice([None, 25, 45]),
        offload={"bucket": "off", "prefix": ""},
        snapshot_facts={
            "ml_high": ml_high,
            "ml_rows": [],
            "ledger_rows": [],
            "registered": surveyed,
        },
        bookkeeper=bookkeeper,
        pulsar_metadata=pulsar_metadata,
        candidates=len(candidates),
    )
    return candidates, entries, diff, before, latest


def _seed(state: Any, scenario: tuple[Any, ...]) -> None:
    candidates, entries, diff, before, latest = scenario
    registry = OrphanRegistry(state)
    with registry.transaction() as txn:
        for n in range(1, latest + 1):
            result = before if n == latest else PhasesRecord(applied=True)
            txn.record_scan(f"run-{n}", NOW - (latest - n + 1) * 60_000, result.to_dict())
        txn.upsert_many(entries)
    RunSteps(state, RUN).write_diff(diff, candidates, STORE_PREFIX)


def _endpoints(state: Any) -> Any:
    return SimpleNamespace(
        state=state,
        policy=SimpleNamespace(orphan_max_fraction=1.0),
        blocks=SimpleNamespace(prefix=STORE_PREFIX),
        zk=SimpleNamespace(hosts="zk"),
    )


def _held_sorted(record: dict[str, Any]) -> dict[str, Any]:
    """The record with its held list by prefix: the candidates the comparison holds are
    listed in the batches' order (the reference listed them in the registry's)."""
    return {**record, "held": sorted(record["held"], key=lambda h: h["prefix"])}


def _state_of(state: Any) -> dict[str, Any]:
    from sqlalchemy import select

    store = open_store(state)
    with store.read() as conn:
        orphans = sorted(tuple(r) for r in conn.execute(select(schema.orphans)).all())
        history = sorted(
            tuple(v for k, v in r.items() if k != "id")
            for r in conn.execute(select(schema.history)).mappings()
        )
        scans = [
            (r.number, r.run_id, r.recorded_ms) for r in conn.execute(select(schema.scans)).all()
        ]
    results = {n: _held_sorted(s.result) for n in range(1, 10) if (s := _scan(state, n))}
    return {"orphans": orphans, "history": history, "scans": scans, "results": results}


def _scan(state: Any, number: int) -> Any:
    import json

    from sqlalchemy import select

    with open_store(state).read() as conn:
        row = conn.execute(
            select(schema.scans.c.result).where(schema.scans.c.number == number)
        ).scalar()
    return None if row is None else SimpleNamespace(result=json.loads(row))


@pytest.mark.parametrize("seed", range(60))
def test_the_batched_phases_step_decides_as_the_whole_dict_one(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (the sources' guards are not under test: the block store's, as the reference's)
    monkeypatch.setattr(
        cycle,
        "survey_refusals",
        lambda diff, limit, force: guards.evaluate_guards(diff.to_dict(), limit, force=force),
    )
    rng = random.Random(seed)
    scenario = _scenario(rng)
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    _seed(old, scenario)
    shutil.copytree(old, new)

    expected = _reference_step_phases(old, RUN, NOW)
    got = cycle.step_phases(_endpoints(new), RUN, force=True, clock=lambda: NOW, batch=3)

    assert _held_sorted(got.to_dict()) == _held_sorted(expected.to_dict())
    assert _state_of(new) == _state_of(old)
    # A re-run of the same run id returns the recorded result and changes nothing.
    again = cycle.step_phases(_endpoints(new), RUN, force=True, clock=lambda: NOW, batch=2)
    assert again == got
    assert _state_of(new) == _state_of(old)


def test_the_scenarios_reach_every_kind_of_decision() -> None:
    """The randomized scenarios above cover what they claim (else the property is
    vacuous): every class, held and compared-held targets, restarts, new data, entries
    registered after the survey."""
    seen: set[str] = set()
    for seed in range(60):
        candidates, entries, diff, before, latest = _scenario(random.Random(seed))
        seen |= {c.target_class for c in candidates}
        by_prefix = {c.prefix(STORE_PREFIX): c for c in candidates}
        _, held = hold_by_source(by_prefix, diff)
        if held:
            seen.add("held")
        compared, _ = _reference_compare(
            by_prefix, {e.prefix: e for e in entries}, diff, before, latest + 1
        )
        if compared:
            seen.add("compared-held")
        if any(e.last_scan < latest for e in entries if e.prefix in by_prefix):
            seen.add("restarted")
        if any(
            e.newest_ms < by_prefix[e.prefix].newest_ms for e in entries if e.prefix in by_prefix
        ):
            seen.add("new-data")
        if any(e.prefix not in diff.registered for e in entries):
            seen.add("after-survey")
        if any(
            e.last_scan == latest
            and (e.objects, e.bytes, e.newest_ms) == (c.objects, c.bytes, c.newest_ms)
            for e in entries
            if (c := by_prefix.get(e.prefix)) is not None
        ):
            seen.add("seen-again")
    wanted = {
        ORPHAN_LEDGER,
        ORPHAN_PARTITION,
        ORPHAN_SEGMENT,
        BK_ORPHAN_LEDGER,
        BK_ORPHAN_PARTITION,
        BK_ORPHAN_SCHEMA_LEDGER,
        PM_DELETED_NAMESPACE,
        "held",
        "compared-held",
        "restarted",
        "new-data",
        "after-survey",
        "seen-again",
    }
    assert wanted <= seen, wanted - seen


@pytest.mark.state_backends
@pytest.mark.parametrize("seed", range(60, 68))
def test_the_batches_page_the_same_on_every_state_store(
    tmp_path: Path, state_location: Any, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pages are read by prefix in the store's own order (PostgreSQL's collation is
    not Python's): the result must not depend on it."""
    monkeypatch.setattr(
        cycle,
        "survey_refusals",
        lambda diff, limit, force: guards.evaluate_guards(diff.to_dict(), limit, force=force),
    )
    scenario = _scenario(random.Random(seed))
    old = tmp_path / "old"
    old.mkdir()
    _seed(old, scenario)
    _seed(state_location, scenario)

    expected = _reference_step_phases(old, RUN, NOW)
    got = cycle.step_phases(_endpoints(state_location), RUN, force=True, clock=lambda: NOW, batch=2)

    assert _held_sorted(got.to_dict()) == _held_sorted(expected.to_dict())
    assert _state_of(state_location) == _state_of(old)


@pytest.mark.state_backends
def test_entries_seen_again_as_registered_move_their_clock_without_a_rewrite(
    state_location: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The steady state sees every registered target again each cycle: only its clock
    may move (last seen, last scan, scans seen), by an update of those columns; a row
    rewritten whole (a delete and an insert each) cost a cycle of a 10M-ledger cluster
    seconds a hundred thousand targets. A target whose data changed is written whole."""
    monkeypatch.setattr(
        cycle,
        "survey_refusals",
        lambda diff, limit, force: guards.evaluate_guards(diff.to_dict(), limit, force=force),
    )
    candidates = [
        Candidate(BK_ORPHAN_LEDGER, TOPICS[0], n, 1, 100, NOW - 5000, NOW - 9000, segment=f"/L{n}")
        for n in range(10, 30)
    ]
    resized = Candidate(
        BK_ORPHAN_LEDGER, TOPICS[1], 99, 1, 300, NOW - 5000, NOW - 9000, segment="/L99"
    )
    registered = [
        phases.new_entry(c.prefix(STORE_PREFIX), c, 1, NOW - 60_000) for c in [*candidates, resized]
    ]
    with OrphanRegistry(state_location).transaction() as txn:
        txn.record_scan("run-1", NOW - 60_000, PhasesRecord(applied=True).to_dict())
        txn.upsert_many(registered)
    resized_now = replace(resized, bytes=200)  # (its size as read now)
    seen = [*candidates, resized_now]
    RunSteps(state_location, RUN).write_diff(
        DiffRecord(managed_ledgers=5, candidates=len(seen)), seen, STORE_PREFIX
    )
    rewritten: list[str] = []
    upsert_many = cycle.RegistryTransaction.upsert_many

    def counted(txn: Any, entries: Any) -> None:
        entries = list(entries)
        rewritten.extend(e.prefix for e in entries)
        upsert_many(txn, entries)

    monkeypatch.setattr(cycle.RegistryTransaction, "upsert_many", counted)

    got = cycle.step_phases(_endpoints(state_location), RUN, force=True, clock=lambda: NOW, batch=7)

    assert (got.seen, got.added, got.corrected, got.restarted) == (21, 0, 0, 0)
    assert rewritten == [resized.prefix(STORE_PREFIX)]
    after = OrphanRegistry(state_location).entries()
    expected = {
        e.prefix: replace(e, last_seen_ms=NOW, last_scan=2, scans_seen=2) for e in registered
    }
    expected[resized.prefix(STORE_PREFIX)] = replace(
        expected[resized.prefix(STORE_PREFIX)], bytes=200
    )
    assert after == expected
