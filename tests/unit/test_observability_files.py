"""Reading the state store (newest summaries, incremental audit tally), the live-status
cache and the SVG charts: the parts of the overview that must stay cheap on every page view."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from ledger_gc import run_log
from ledger_gc.audit import DELETING, AuditLog, AuditRecord
from ledger_gc.config.settings import Settings
from ledger_gc.errors import MetadataUnavailableError
from ledger_gc.observability.charts import Series, axis_maximum, line_chart
from ledger_gc.observability.live import LiveStatusCache
from ledger_gc.observability.state_reads import AuditTally, recent_audit_records


def record(operation: str, size: int, run_id: str = "r") -> AuditRecord:
    return AuditRecord(
        operation=operation,
        target_class="ledger",
        ml_name="acme/prod/persistent/t",
        ledger_id=1,
        prefix="ledgers/acme/prod/persistent/t/ledgers/00000000000000000001/",
        objects=2,
        bytes=size,
        reason="test",
        run_id=run_id,
        time_ms=1_700_000_000_000,
    )


# --- run summaries --------------------------------------------------------------------------


@pytest.mark.state_backends
def test_the_newest_summaries_come_oldest_first_across_pages(state_location):
    for i in range(130):  # more than one page of the newest-first reader
        run_log.append_run(state_location, run_log.TRIM, {"i": i})
    run_log.append_run(state_location, run_log.ORPHANS, {"i": "other kind"})

    assert [r["i"] for r in run_log.read_runs(state_location, run_log.TRIM, 3)] == [127, 128, 129]
    assert [r["i"] for r in run_log.read_runs(state_location, run_log.TRIM, 60)] == list(
        range(70, 130)
    )
    assert len(run_log.read_runs(state_location, run_log.TRIM)) == 130
    assert run_log.read_runs(state_location, run_log.TRIM, 0) == []


@pytest.mark.state_backends
def test_last_matching_finds_an_old_summary_beyond_the_first_page(state_location):
    run_log.append_run(state_location, run_log.TRIM, {"i": 0, "ok": True})
    for i in range(1, 120):
        run_log.append_run(state_location, run_log.TRIM, {"i": i, "ok": False})

    def match(predicate):
        return run_log.last_matching(state_location, run_log.TRIM, predicate)

    assert match(lambda r: r["ok"]) == {"i": 0, "ok": True}
    assert match(lambda r: r["i"] == 100)["i"] == 100
    assert match(lambda r: False) is None
    assert run_log.last_matching(state_location, run_log.ORPHANS, lambda r: True) is None


# --- the audit tally ------------------------------------------------------------------------


@pytest.mark.state_backends
def test_tally_counts_only_what_was_appended_since_last_time(state_location):
    log = AuditLog(state_location)
    tally = AuditTally(state_location)
    assert tally.refresh().bytes == {}

    log.append([record("trim", 100), record("orphan-removal", 7)])
    log.append([replace(record("trim", 999), status=DELETING)])  # write-ahead: not freed
    first = tally.refresh()
    log.append([record("trim", 50), replace(record("trim", 30), recoverable=True)])
    second = tally.refresh()

    assert first.bytes == {"trim": 100, "orphan-removal": 7}  # a copy: not changed later
    assert second.bytes == {"trim": 150, "orphan-removal": 7}
    assert second.recoverable_bytes == {"trim": 30}
    assert second.units == {"trim": 3, "orphan-removal": 1}
    assert second.objects == {"trim": 6, "orphan-removal": 2}
    assert tally.refresh() == second  # nothing appended: same totals


def test_tally_starts_over_on_a_store_that_went_back(tmp_path):
    from ledger_gc.state.stores import forget_stores

    AuditLog(tmp_path).append([record("trim", 100), record("trim", 1)])
    tally = AuditTally(tmp_path)
    assert tally.refresh().bytes == {"trim": 101}
    forget_stores()
    (tmp_path / "state.sqlite").unlink()  # a fresh store: ids start again
    AuditLog(tmp_path).append([record("orphan-removal", 1)])
    assert tally.refresh().bytes == {"orphan-removal": 1}


@pytest.mark.state_backends
def test_recent_audit_records_are_newest_first(state_location):
    AuditLog(state_location).append([record("trim", i, run_id=f"r{i}") for i in range(5)])
    assert [r["run_id"] for r in recent_audit_records(state_location, 2)] == ["r4", "r3"]


# --- the live-status cache ------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_live_status_is_read_at_most_once_per_ttl():
    clock, calls = FakeClock(), []

    def reader(settings: Settings) -> dict:
        calls.append(settings)
        return {"totals": {"pending_markers": len(calls)}}

    cache = LiveStatusCache(Settings, ttl=30, reader=reader, clock=clock)
    assert cache.get().status == {"totals": {"pending_markers": 1}}
    clock.now += 29
    assert cache.get().status == {"totals": {"pending_markers": 1}}
    clock.now += 2
    assert cache.get().status == {"totals": {"pending_markers": 2}}
    assert len(calls) == 2


def test_a_failed_read_is_shown_as_an_error_and_cached_too():
    clock, calls = FakeClock(), []

    def reader(settings: Settings) -> dict:
        calls.append(1)
        raise MetadataUnavailableError("ZooKeeper at 127.0.0.1:1 unreachable")

    cache = LiveStatusCache(Settings, ttl=30, reader=reader, clock=clock)
    first = cache.get()
    assert first.status is None and "127.0.0.1:1 unreachable" in first.error
    assert cache.get() is first and len(calls) == 1  # no second timeout within the ttl

    def broken(settings: Settings) -> dict:
        raise ValueError("bad answer")

    other = LiveStatusCache(Settings, reader=broken, clock=clock).get()
    assert other.error == "ValueError: bad answer"


def test_while_one_request_reads_the_others_get_the_previous_answer():
    clock = FakeClock()
    release, started = threading.Event(), threading.Event()
    answers = iter([{"n": 1}, {"n": 2}])

    def reader(settings: Settings) -> dict:
        answer = next(answers)
        if answer["n"] == 2:
            started.set()
            release.wait(5)
        return answer

    cache = LiveStatusCache(Settings, ttl=30, reader=reader, clock=clock)
    assert cache.get().status == {"n": 1}
    clock.now += 31
    slow = threading.Thread(target=cache.get)
    slow.start()
    assert started.wait(5)
    assert cache.get().status == {"n": 1}  # stale but immediate, not queued behind ZooKeeper
    release.set()
    slow.join(5)
    assert cache.get().status == {"n": 2}


# --- charts ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("top", "expected"), [(0, 4), (3, 4), (4, 4), (7, 8), (41, 80), (2500, 4000), (0.5, 4)]
)
def test_axis_maximum_is_four_whole_steps(top, expected):
    assert axis_maximum(top) == expected


def test_chart_draws_a_line_per_series_and_a_tooltip_per_point():
    svg = line_chart(
        "Orphans <count>",
        ["a", "b", "c"],
        [Series("Registered", "#111", [1, 2, 3]), Series("Deleted", "#222", [0, 0, 1])],
    )
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count("<polyline") == 2
    assert svg.count("<circle") == 6
    assert "Orphans &lt;count&gt;" in svg  # titles are escaped
    assert "Registered · c: 3" in svg


def test_chart_with_one_run_draws_points_and_with_none_says_so():
    one = line_chart("t", ["a"], [Series("s", "#111", [5])])
    assert "<polyline" not in one and one.count("<circle") == 1
    assert "no runs yet" in line_chart("t", [], [Series("s", "#111", [])])
