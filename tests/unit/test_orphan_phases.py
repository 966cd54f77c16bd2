"""The three phases as pure decisions: transitions, waiting, the live re-check's verdict,
and the property that nothing live, marked or foreign is ever chosen for deletion."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_gc.rules.orphans import phases
from ledger_gc.rules.orphans.classify import (
    LIVE,
    MARKED,
    ORPHAN_LEDGER,
    ORPHAN_PARTITION,
    Candidate,
    ManagedLedgerRefs,
    MetadataSnapshot,
    StoredObject,
    classify_key,
    diff_objects,
)
from ledger_gc.rules.orphans.phases import (
    ALREADY_GONE,
    CORRECT,
    DELETE,
    UNSEEN,
    WAIT,
    WAITING_GRACE,
    WAITING_RETENTION,
    ListingState,
    LiveState,
    RegistryEntry,
    decide,
    initialize_and_correct,
    plan_deletion,
    why_not_orphan,
)
from ledger_gc.rules.storage import keys
from ledger_gc.rules.storage.keys import block_key, ledger_dir, ml_dir

PREFIX = "ledgers"
ML = "public/default/persistent/orders"
HOUR_MS = 3_600_000
GRACE = 3600  # seconds
RETENTION = 7200


def _candidate(ledger_id: int | None = 5, newest: int = 1_000, ml: str = ML) -> Candidate:
    kind = ORPHAN_LEDGER if ledger_id is not None else ORPHAN_PARTITION
    return Candidate(kind, ml, ledger_id, 2, 200, newest, newest - 10)


def _entry(**changes: object) -> RegistryEntry:
    base = RegistryEntry(
        prefix=ledger_dir(PREFIX, ML, 5),
        target_class=ORPHAN_LEDGER,
        ml_name=ML,
        ledger_id=5,
        first_seen_ms=10 * HOUR_MS,
        last_seen_ms=10 * HOUR_MS,
        first_scan=1,
        last_scan=1,
        scans_seen=1,
        objects=2,
        bytes=200,
        newest_ms=1_000,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


# --- phases 1 and 2 --------------------------------------------------------------------


def test_a_new_candidate_is_registered_with_first_seen_now() -> None:
    candidate = _candidate()
    prefix = candidate.prefix(PREFIX)

    changes = initialize_and_correct({}, {prefix: candidate}, 1, 42, {})

    [added] = changes.added
    assert (added.prefix, added.first_seen_ms, added.first_scan, added.scans_seen) == (
        prefix,
        42,
        1,
        1,
    )
    assert not (changes.seen or changes.corrected or changes.restarted)


def test_seen_again_on_the_next_scan_keeps_the_clock_running() -> None:
    entry = _entry()
    changes = initialize_and_correct({entry.prefix: entry}, {entry.prefix: _candidate()}, 2, 99, {})

    [seen] = changes.seen
    assert seen.first_seen_ms == entry.first_seen_ms
    assert (seen.last_scan, seen.scans_seen, seen.last_seen_ms) == (2, 2, 99)


def test_an_entry_that_missed_a_scan_restarts_its_grace_window() -> None:
    entry = _entry(last_scan=1)
    changes = initialize_and_correct({entry.prefix: entry}, {entry.prefix: _candidate()}, 3, 77, {})

    [(restarted, reason)] = changes.restarted
    assert (restarted.first_seen_ms, restarted.first_scan, restarted.scans_seen) == (77, 3, 1)
    assert "scan(s) 2..2" in reason


def test_new_data_corrects_the_entry_away() -> None:
    entry = _entry(newest_ms=1_000)
    changes = initialize_and_correct(
        {entry.prefix: entry}, {entry.prefix: _candidate(newest=2_000)}, 2, 5, {}
    )

    [(corrected, reason)] = changes.corrected
    assert corrected == entry
    assert "new data arrived" in reason
    assert not changes.seen


@pytest.mark.parametrize("grown", [{"objects": 3}, {"bytes": 300}])
def test_a_block_written_in_the_same_second_still_corrects_the_entry_away(
    grown: dict[str, int],
) -> None:
    # S3's LastModified (and SeaweedFS's) has whole seconds: a block written in the
    # second of the registered newest one leaves the time as it was, so growth is the sign.
    entry = _entry(newest_ms=1_000)
    candidate = replace(_candidate(newest=1_000), **grown)

    changes = initialize_and_correct({entry.prefix: entry}, {entry.prefix: candidate}, 2, 5, {})

    [(corrected, reason)] = changes.corrected
    assert corrected == entry
    assert "new data arrived" in reason
    assert not changes.seen


def test_blocks_that_went_away_are_no_new_data() -> None:
    entry = _entry(newest_ms=1_000)
    candidate = replace(_candidate(newest=1_000), objects=1, bytes=100)

    changes = initialize_and_correct({entry.prefix: entry}, {entry.prefix: candidate}, 2, 5, {})

    assert not changes.corrected
    assert len(changes.seen) == 1


def test_an_entry_no_scan_reports_is_corrected_with_the_reason_given() -> None:
    entry = _entry()
    changes = initialize_and_correct({entry.prefix: entry}, {}, 2, 5, {entry.prefix: "listed"})
    assert changes.corrected == [(entry, "listed")]


def test_applying_the_same_scan_twice_changes_nothing() -> None:
    entry = _entry(last_scan=2)
    changes = initialize_and_correct({entry.prefix: entry}, {entry.prefix: _candidate()}, 2, 5, {})
    assert changes == phases.PhaseChanges()


def test_why_an_entry_is_no_orphan_names_the_reference() -> None:
    entry = _entry()
    partition = _entry(prefix=ml_dir(PREFIX, ML), target_class=ORPHAN_PARTITION, ledger_id=None)
    listed = ManagedLedgerRefs(listed=frozenset({5}))
    marked = ManagedLedgerRefs(marked=frozenset({5}))
    assert "listed again" in why_not_orphan(entry, listed, 2)
    assert "marked deletable" in why_not_orphan(entry, marked, 2)
    assert "no longer exists" in why_not_orphan(entry, None, 2)
    assert "data gone" in why_not_orphan(entry, ManagedLedgerRefs(), 2)
    assert "exists again" in why_not_orphan(partition, ManagedLedgerRefs(), 2)
    assert "data gone" in why_not_orphan(partition, None, 2)


# --- phase 3 ---------------------------------------------------------------------------


def test_the_plan_waits_for_grace_then_retention() -> None:
    first_seen = 10 * HOUR_MS
    young = _entry(prefix="a/", newest_ms=first_seen + HOUR_MS)
    old = _entry(prefix="b/", newest_ms=0)
    unseen = _entry(prefix="c/", last_scan=0, newest_ms=0)

    in_grace = plan_deletion([young, old, unseen], 1, first_seen + 1, GRACE, RETENTION)
    assert in_grace.eligible == []
    phases_by_prefix = {w.entry.prefix: (w.phase, w.until_ms) for w in in_grace.waiting}
    assert phases_by_prefix == {
        "a/": (WAITING_GRACE, first_seen + HOUR_MS + RETENTION * 1000),
        "b/": (WAITING_GRACE, first_seen + GRACE * 1000),
        "c/": (UNSEEN, None),
    }

    # Past grace, but the scan that registered them is the latest: they wait for another.
    same_scan = plan_deletion([young, old], 1, first_seen + GRACE * 1000, GRACE, RETENTION)
    assert same_scan.eligible == []
    assert {w.phase for w in same_scan.waiting} == {WAITING_GRACE}

    seen_again = [replace(e, last_scan=2, scans_seen=2) for e in (young, old)]
    after_grace = plan_deletion(seen_again, 2, first_seen + GRACE * 1000, GRACE, RETENTION)
    assert [e.prefix for e in after_grace.eligible] == ["b/"]
    [waiting] = after_grace.waiting
    assert (waiting.entry.prefix, waiting.phase) == ("a/", WAITING_RETENTION)


def test_no_grace_lets_the_registering_scan_delete() -> None:
    entry = _entry(newest_ms=0)
    plan = plan_deletion([entry], 1, entry.first_seen_ms, grace_seconds=0, retention_seconds=0)
    assert plan.eligible == [entry]


LATE = 100 * HOUR_MS


def test_the_live_recheck_corrects_a_ledger_that_is_referenced_again() -> None:
    entry = _entry()
    listing = ListingState(frozenset({5}), 1_000)
    for live in (
        LiveState(True, listed=frozenset({5})),
        LiveState(True, marked=frozenset({5})),
        LiveState(False),
    ):
        assert decide(entry, live, listing, LATE, RETENTION).action == CORRECT


def test_the_live_recheck_corrects_a_partition_whose_managed_ledger_is_back() -> None:
    entry = _entry(prefix=ml_dir(PREFIX, ML), target_class=ORPHAN_PARTITION, ledger_id=None)
    listing = ListingState(frozenset({1, 2}), 1_000)
    assert decide(entry, LiveState(True), listing, LATE, RETENTION).action == CORRECT
    decision = decide(entry, LiveState(False), listing, LATE, RETENTION)
    assert (decision.action, decision.ledger_ids) == (DELETE, (1, 2))


def test_the_fresh_listing_decides_gone_new_data_young_or_delete() -> None:
    entry = _entry(newest_ms=1_000)
    live = LiveState(True, listed=frozenset({1}))
    gone = decide(entry, live, ListingState(frozenset(), None), LATE, RETENTION)
    assert gone.action == ALREADY_GONE
    newer = decide(entry, live, ListingState(frozenset({5}), 1_001), LATE, RETENTION)
    assert (newer.action, "new data" in newer.reason) == (CORRECT, True)
    young = decide(entry, live, ListingState(frozenset({5}), 1_000), 1_000, RETENTION)
    assert (young.action, young.until_ms) == (WAIT, 1_000 + RETENTION * 1000)
    due = decide(entry, live, ListingState(frozenset({5}), 1_000), LATE, RETENTION)
    assert (due.action, due.ledger_ids) == (DELETE, (5,))


# --- property: the pipeline never chooses anything live, marked or foreign ----------------

_ML_NAMES = [f"t/ns/persistent/topic-{i}" for i in range(4)]


@st.composite
def stores(draw: st.DrawFn) -> tuple[MetadataSnapshot, MetadataSnapshot, list[StoredObject]]:
    """A snapshot, the live metadata a moment later, and the bucket's objects."""
    existing = draw(st.sets(st.sampled_from(_ML_NAMES)))
    refs = {}
    for name in existing:
        listed = draw(st.frozensets(st.integers(0, 30), max_size=6))
        marked = draw(st.frozensets(st.integers(0, 30), max_size=4)) - listed
        refs[name] = ManagedLedgerRefs(listed, marked)
    snapshot = MetadataSnapshot(refs)
    # Writers and the trim keep working after the snapshot: ids get listed or marked,
    # managed ledgers get created or deleted.
    live_refs = dict(refs)
    for name in draw(st.sets(st.sampled_from(_ML_NAMES))):
        current = live_refs.get(name, ManagedLedgerRefs())
        extra = draw(st.frozensets(st.integers(0, 30), max_size=5))
        if draw(st.booleans()):
            live_refs[name] = ManagedLedgerRefs(current.listed | extra, current.marked)
        else:
            live_refs[name] = ManagedLedgerRefs(current.listed, current.marked | extra)
    if live_refs:
        for name in draw(st.sets(st.sampled_from(sorted(live_refs)))):
            del live_refs[name]
    objects = []
    for _ in range(draw(st.integers(0, 40))):
        name = draw(st.sampled_from(_ML_NAMES))
        ledger_id = draw(st.integers(0, 30))
        if draw(st.integers(0, 5)):
            key = block_key(PREFIX, name, ledger_id, draw(st.integers(0, 3)))
        else:
            key = ledger_dir(PREFIX, name, ledger_id) + draw(
                st.sampled_from(["x.tmp", "00000000000000000000.blk.1", ""])
            )
        objects.append(StoredObject(key, draw(st.integers(0, 1000)), draw(st.integers(0, 50))))
    return snapshot, MetadataSnapshot(live_refs), objects


def _listing(entry: RegistryEntry, objects: list[StoredObject]) -> ListingState:
    ledgers, newest = set(), None
    for obj in objects:
        parsed = keys.parse_key(PREFIX, obj.key)
        if not obj.key.startswith(entry.prefix) or not parsed.is_block:
            continue
        if parsed.ml_name != entry.ml_name:
            continue
        if entry.ledger_id is not None and parsed.ledger_id != entry.ledger_id:
            continue
        assert parsed.ledger_id is not None
        ledgers.add(parsed.ledger_id)
        newest = obj.last_modified if newest is None else max(newest, obj.last_modified)
    return ListingState(frozenset(ledgers), newest)


@settings(max_examples=300, deadline=None)
@given(stores(), st.integers(0, 3))
def test_nothing_live_marked_or_foreign_is_ever_chosen_for_deletion(
    store: tuple[MetadataSnapshot, MetadataSnapshot, list[StoredObject]], scans: int
) -> None:
    snapshot, live, objects = store
    diff = diff_objects(PREFIX, objects, snapshot)
    candidates = {c.prefix(PREFIX): c for c in diff.candidates}
    entries: dict[str, RegistryEntry] = {}
    for number in range(1, scans + 2):
        changes = initialize_and_correct(entries, candidates, number, number, {})
        for entry in [*changes.added, *changes.seen]:
            entries[entry.prefix] = entry
    plan = plan_deletion(entries.values(), scans + 1, 10**9, 0, 0)
    deleted_keys = set()
    for entry in plan.eligible:
        refs = live.managed_ledgers.get(entry.ml_name)
        live_state = LiveState(
            refs is not None,
            refs.listed if refs else frozenset(),
            refs.marked if refs else frozenset(),
        )
        decision = decide(entry, live_state, _listing(entry, objects), 10**9, 0)
        if decision.action != DELETE:
            continue
        for ledger_id in decision.ledger_ids:
            directory = ledger_dir(PREFIX, entry.ml_name, ledger_id)
            # What the one delete path takes: only that ledger's block keys.
            deleted_keys |= {
                obj.key
                for obj in objects
                if obj.key.startswith(directory) and keys.parse_key(PREFIX, obj.key).is_block
            }
    for key in deleted_keys:
        # Nothing referenced at scan time, nothing referenced at delete time, no foreign key.
        assert classify_key(PREFIX, key, snapshot)[0] not in (LIVE, MARKED)
        name, parsed = classify_key(PREFIX, key, live)
        assert name not in (LIVE, MARKED), key
        assert parsed.is_block
