"""The schedule of registered orphans (``orphans.schedule``): the page's and ``ledgergc
orphans --list``'s answer to "what will be deleted, and when?" must follow the deletion
phase's own rules (``phases.entry_phase``), never promise earlier."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ledger_gc.rules.orphans import phases, schedule
from ledger_gc.rules.orphans.classify import ORPHAN_LEDGER
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.rules.orphans.timekeeping import Instant, grace_elapsed

T0 = 1_800_000_000_000
HOUR = 3_600_000


def entry(prefix: str = "ledgers/t/ns/persistent/a/ledgers/00000000000000000007/", **kw):
    values = dict(
        prefix=prefix,
        target_class=ORPHAN_LEDGER,
        ml_name="t/ns/persistent/a",
        ledger_id=7,
        first_seen_ms=T0,
        last_seen_ms=T0,
        first_scan=1,
        last_scan=1,
        scans_seen=1,
        objects=2,
        bytes=300,
        newest_ms=T0 - HOUR,
    )
    values.update(kw)
    return RegistryEntry(**values)


def instants(*times: int, offset: int = 0) -> dict[int, Instant]:
    """Scan number -> instant; the servers' clocks ``offset`` from the host's."""
    return {n: Instant(t, t + offset, t + offset) for n, t in enumerate(times, start=1)}


def run(entries, **kw):
    args = dict(
        latest_scan=1,
        scan_instants=instants(T0),
        run_ids={1: "scheduled__1", 2: "manual__2"},
        host_now_ms=T0,
        grace_seconds=3600,
        retention_seconds=0,
        delete_enabled=True,
    )
    args.update(kw)
    return schedule.schedule(entries, **args)


def test_a_new_orphan_waits_for_grace_and_a_second_scan_until_an_hour_after_its_scan():
    [item] = run([entry()], host_now_ms=T0 + 60_000)

    assert item.waiting_for == (schedule.GRACE, schedule.SECOND_SCAN)
    assert item.deletable_at_ms == T0 + HOUR
    assert item.first_run_id == item.last_run_id == "scheduled__1"


def test_after_grace_on_the_registering_scan_it_waits_for_a_second_scan():
    [item] = run([entry()], host_now_ms=T0 + 2 * HOUR)

    assert item.waiting_for == (schedule.SECOND_SCAN,)


def test_seen_again_after_grace_it_is_due_at_the_next_cycle():
    [item] = run(
        [entry(last_scan=2, scans_seen=2)],
        latest_scan=2,
        scan_instants=instants(T0, T0 + 2 * HOUR),
        host_now_ms=T0 + 2 * HOUR + 1000,
    )

    assert item.waiting_for == (schedule.NEXT_CYCLE,)
    assert item.deletable_at_ms == T0 + 2 * HOUR + 1000
    assert item.last_run_id == "manual__2"


def test_retention_counts_on_s3s_clock_and_is_shown_in_host_time():
    # S3's clock is 10 minutes behind the host's: retention ends 10 minutes later in
    # host time than the host's own clock would say.
    offset = -10 * 60_000
    newest = T0 - HOUR
    [item] = run(
        [entry(last_scan=2, scans_seen=2, newest_ms=newest)],
        latest_scan=2,
        scan_instants=instants(T0, T0 + 2 * HOUR, offset=offset),
        host_now_ms=T0 + 2 * HOUR,
        retention_seconds=4 * 3600,
    )

    assert item.waiting_for == (schedule.RETENTION,)
    assert item.deletable_at_ms == newest + 4 * HOUR - offset


def test_an_entry_the_latest_scan_did_not_see_has_no_time_yet():
    [item] = run([entry()], latest_scan=2, scan_instants=instants(T0, T0 + HOUR))

    assert item.deletable_at_ms is None
    assert item.waiting_for[0] == schedule.UNSEEN


def test_deletion_disabled_and_a_refusing_guard_hold_every_entry():
    [item] = run(
        [entry(last_scan=2, scans_seen=2)],
        latest_scan=2,
        scan_instants=instants(T0, T0 + 2 * HOUR),
        host_now_ms=T0 + 3 * HOUR,
        delete_enabled=False,
        blocking_guards=["orphan-fraction"],
    )

    assert item.waiting_for == (schedule.DELETION_DISABLED, "guard orphan-fraction")


def test_no_server_clock_means_no_grace_has_passed():
    # An older ledger-gc recorded scans without the servers' time: deletion waits.
    [item] = run(
        [entry(last_scan=2, scans_seen=2)],
        latest_scan=2,
        scan_instants={},
        host_now_ms=T0 + 5 * HOUR,
    )

    assert schedule.GRACE in item.waiting_for
    assert item.deletable_at_ms is None  # grace starts at the next scan that records it


def test_soonest_first_and_unknown_last():
    soon = entry(prefix="a/", last_scan=2, scans_seen=2)
    later = entry(prefix="b/", last_scan=2, scans_seen=2, first_scan=2)
    unseen = entry(prefix="c/", last_scan=1)

    items = run(
        [unseen, later, soon],
        latest_scan=2,
        scan_instants=instants(T0, T0 + 2 * HOUR),
        host_now_ms=T0 + 2 * HOUR,
    )

    assert [i.entry.prefix for i in items] == ["a/", "b/", "c/"]


@given(
    first_scan=st.integers(1, 3),
    seen=st.integers(0, 2),
    scan_gap_s=st.integers(0, 7200),
    since_scan_s=st.integers(0, 7200),
    newest_age_s=st.integers(-600, 20000),
    grace_s=st.integers(0, 7200),
    retention_s=st.integers(0, 14400),
)
def test_due_exactly_when_the_deletion_phase_would_pass_it_on(
    first_scan, seen, scan_gap_s, since_scan_s, newest_age_s, grace_s, retention_s
):
    """With the servers' clocks on the host's, an entry shows "the next cycle" exactly
    when ``entry_phase`` (what the delete step runs) lets it through, and a time shown is
    never earlier than the one the delete step would accept."""
    last_scan = first_scan + seen
    times = [T0 + i * scan_gap_s * 1000 for i in range(last_scan)]
    scans = instants(*times)
    now = times[-1] + since_scan_s * 1000
    item = entry(
        first_scan=first_scan,
        last_scan=last_scan,
        first_seen_ms=times[first_scan - 1],
        scans_seen=seen + 1,
        newest_ms=now - newest_age_s * 1000,
    )

    [scheduled] = run(
        [item],
        latest_scan=last_scan,
        scan_instants=scans,
        host_now_ms=now,
        grace_seconds=grace_s,
        retention_seconds=retention_s,
    )

    def phase_at(at: int):
        elapsed = grace_elapsed([item], scans, Instant(at, at, at))[item.prefix]
        return phases.entry_phase(
            item, last_scan, at, grace_s, retention_s, grace_elapsed_ms=elapsed
        )

    assert (scheduled.waiting_for == (schedule.NEXT_CYCLE,)) == (phase_at(now) is None)
    at = scheduled.deletable_at_ms
    assert at is not None and at >= now
    if schedule.SECOND_SCAN not in scheduled.waiting_for and at > now:
        assert phase_at(at) is None
        assert phase_at(at - 1) is not None
