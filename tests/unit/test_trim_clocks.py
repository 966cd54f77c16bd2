"""The trim's clocks (pure): a host clock wrong either way only keeps data longer."""

from __future__ import annotations

from ledger_gc.trim.clocks import TrimClocks

HOST = 1_700_000_000_000
DAY = 86_400_000


def test_a_fast_host_clock_decides_by_s3s_earlier_clock_and_stamps_by_its_own() -> None:
    clocks = TrimClocks(lambda: HOST, server_offset_ms=-10 * DAY)  # S3 is 10 days behind
    assert clocks.decide() == HOST - 10 * DAY
    assert clocks.stamp() == HOST


def test_a_slow_host_clock_decides_by_its_own_and_stamps_by_s3s_later_clock() -> None:
    clocks = TrimClocks(lambda: HOST, server_offset_ms=10 * DAY)  # S3 is 10 days ahead
    assert clocks.decide() == HOST
    assert clocks.stamp() == HOST + 10 * DAY


def test_without_s3s_clock_the_host_decides_alone() -> None:
    clocks = TrimClocks(lambda: HOST)
    assert clocks.decide() == clocks.stamp() == HOST
