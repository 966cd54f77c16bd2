"""Time a cycle can trust (issue 11, item 2): a clock error can only delay a deletion."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from ledger_gc.rules.orphans.classify import ORPHAN_LEDGER
from ledger_gc.rules.orphans.phases import WAITING_GRACE, RegistryEntry, entry_phase
from ledger_gc.rules.orphans.timekeeping import (
    GraceClock,
    Instant,
    clock_warnings,
    elapsed_ms,
    entry_grace_elapsed,
    grace_elapsed,
    grace_start,
)


def _entry() -> RegistryEntry:
    return RegistryEntry(
        "ledgers/a/b/persistent/c/ledgers/00000000000000000005/",
        ORPHAN_LEDGER,
        "a/b/persistent/c",
        5,
        first_seen_ms=1,
        last_seen_ms=1,
        first_scan=1,
        last_scan=1,
        scans_seen=1,
        objects=3,
        bytes=300,
        newest_ms=1,
    )


HOUR = 3_600_000
DAY = 24 * HOUR
T0 = 1_800_000_000_000


def test_the_host_clock_never_counts() -> None:
    start = Instant(T0 - 2 * DAY, zk_ms=T0, s3_ms=T0)  # two days slow at registration
    end = Instant(T0 + 60_000, zk_ms=T0 + 60_000, s3_ms=T0 + 60_000)
    assert elapsed_ms(start, end) == 60_000
    fast_now = Instant(T0 + 10 * DAY, zk_ms=T0 + HOUR, s3_ms=T0 + HOUR)
    assert elapsed_ms(Instant(T0, T0, T0), fast_now) == HOUR


def test_the_least_server_span_counts_and_an_unpaired_clock_does_not() -> None:
    start = Instant(T0, zk_ms=T0, s3_ms=T0 + 5 * 60_000)  # S3 five minutes ahead: cancels
    assert elapsed_ms(start, Instant(T0, zk_ms=T0 + HOUR, s3_ms=T0 + HOUR + 5 * 60_000)) == HOUR
    jumped = Instant(T0, zk_ms=T0 + 30 * DAY, s3_ms=T0 + HOUR)  # ZooKeeper's clock jumped
    assert elapsed_ms(start, jumped) == HOUR - 5 * 60_000
    assert elapsed_ms(Instant(T0, zk_ms=T0), Instant(T0 + DAY, s3_ms=T0 + DAY)) == 0
    assert elapsed_ms(Instant(T0), Instant(T0 + DAY)) == 0  # no evidence: no time passed


@given(
    true_elapsed=st.integers(0, 30 * DAY),
    zk_errors=st.tuples(st.integers(-30 * DAY, 30 * DAY), st.integers(-30 * DAY, 30 * DAY)),
    host_errors=st.tuples(st.integers(-30 * DAY, 30 * DAY), st.integers(-30 * DAY, 30 * DAY)),
)
def test_one_wrong_clock_can_only_delay(
    true_elapsed: int, zk_errors: tuple[int, int], host_errors: tuple[int, int]
) -> None:
    """With S3's clock right, no error of the host's or ZooKeeper's clock, at either
    end, makes the grace window look longer than it really was."""
    start = Instant(T0 + host_errors[0], T0 + zk_errors[0], T0)
    end_true = T0 + true_elapsed
    end = Instant(end_true + host_errors[1], end_true + zk_errors[1], end_true)
    assert elapsed_ms(start, end) <= true_elapsed


def test_grace_runs_from_the_first_scan_with_an_instant() -> None:
    instants = {3: Instant(T0, T0, T0), 5: Instant(T0 + HOUR, T0 + HOUR, T0 + HOUR)}
    assert grace_start(2, 5, instants) == instants[3]
    assert grace_start(4, 5, instants) == instants[5]
    assert grace_start(6, 7, instants) is None
    entry = _entry()  # first and last scan 1: no instant, so no grace time at all
    assert grace_elapsed([entry], instants, Instant(T0 + DAY, T0 + DAY, T0 + DAY)) == {
        entry.prefix: 0
    }


def test_an_entry_waits_for_grace_the_servers_measured() -> None:
    entry = _entry()
    later = entry_phase(entry, 1, T0, 3600, 0, grace_elapsed_ms=59 * 60_000)
    assert later is not None and later.phase == WAITING_GRACE
    assert later.until_ms == T0 + 60_000


def test_warnings_name_the_direction_and_the_size() -> None:
    [ahead] = clock_warnings(Instant(T0 + 10 * DAY, zk_ms=T0))
    assert "10.0 days ahead of ZooKeeper's" in ahead
    behind = clock_warnings(Instant(T0 - 2 * DAY, zk_ms=T0, s3_ms=T0))
    assert len(behind) == 2 and all("behind" in w for w in behind)
    assert clock_warnings(Instant(T0 + 1000, zk_ms=T0, s3_ms=T0 - 1000)) == []
    host_s3, servers = clock_warnings(Instant(T0, zk_ms=T0, s3_ms=T0 - 3 * HOUR))
    assert "3.0 hours ahead of S3's" in host_s3
    assert "ZooKeeper's and S3's clocks differ by 3.0 hours" in servers


@given(
    st.dictionaries(
        st.integers(1, 6),
        st.builds(
            Instant,
            st.integers(T0, T0 + DAY),
            st.none() | st.integers(T0, T0 + DAY),
            st.none() | st.integers(T0, T0 + DAY),
        ),
    ),
    st.lists(st.tuples(st.integers(1, 6), st.integers(0, 3)), max_size=20),
)
def test_the_grace_clock_of_a_registry_walk_is_each_entrys_own(
    instants: dict[int, Instant], scans: list[tuple[int, int]]
) -> None:
    """The report and the delete step walk 500,000 entries with ``GraceClock``, which
    works out each (first scan, last scan) pair once: every entry's grace time is still
    exactly its own, whatever the scans' instants."""
    now = Instant(T0 + 2 * DAY, T0 + 2 * DAY, T0 + 2 * DAY - HOUR)
    clock = GraceClock(instants, now)
    entries = [replace(_entry(), first_scan=first, last_scan=first + more) for first, more in scans]
    for entry in entries:
        assert clock(entry) == entry_grace_elapsed(entry, instants, now)
