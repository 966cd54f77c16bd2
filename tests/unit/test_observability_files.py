"""Reading the state dir's logs (tail, incremental audit tally), the live-status cache and
the SVG charts: the parts of the overview that must stay cheap on every page view."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from ledger_gc.audit import AuditLog, AuditRecord
from ledger_gc.errors import MetadataUnavailableError
from ledger_gc.observability.charts import Series, axis_maximum, line_chart
from ledger_gc.observability.live import LiveStatusCache
from ledger_gc.observability.state_files import (
    AuditTally,
    last_matching,
    recent_audit_records,
    tail_records,
)
from ledger_gc.settings import Settings


def write_lines(path: Path, records: list[dict], *, torn: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
        handle.write(torn)


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


# --- tail_records ---------------------------------------------------------------------------


def test_tail_returns_the_last_records_oldest_first_across_read_blocks(tmp_path):
    path = tmp_path / "runs.jsonl"
    # ~300 KiB: the tail reader must step back over several 64 KiB blocks.
    write_lines(path, [{"i": i, "pad": "x" * 300} for i in range(1000)])

    assert [r["i"] for r in tail_records(path, 3)] == [997, 998, 999]
    assert [r["i"] for r in tail_records(path, 400)] == list(range(600, 1000))
    assert len(tail_records(path, 5000)) == 1000


def test_tail_skips_a_torn_last_line_and_blank_or_non_object_lines(tmp_path):
    path = tmp_path / "runs.jsonl"
    write_lines(path, [{"i": 1}, {"i": 2}], torn='{"i": 3, "half')
    with open(path, "r+") as handle:
        content = handle.read()
        handle.seek(0)
        handle.write("[1, 2]\n\n" + content)

    assert [r["i"] for r in tail_records(path, 10)] == [1, 2]
    assert [r["i"] for r in tail_records(path, 1)] == [2]


def test_tail_of_a_missing_file_or_of_nothing_is_empty(tmp_path):
    assert tail_records(tmp_path / "nope.jsonl", 5) == []
    write_lines(tmp_path / "a.jsonl", [{"i": 1}])
    assert tail_records(tmp_path / "a.jsonl", 0) == []


def test_last_matching_finds_an_old_record_beyond_the_window(tmp_path):
    path = tmp_path / "runs.jsonl"
    write_lines(path, [{"i": 0, "ok": True}] + [{"i": i, "ok": False} for i in range(1, 200)])

    assert last_matching(path, lambda r: r["ok"], window=10) == {"i": 0, "ok": True}
    assert last_matching(path, lambda r: r["i"] == 150, window=10)["i"] == 150
    assert last_matching(path, lambda r: False, window=10) is None
    assert last_matching(tmp_path / "missing", lambda r: True) is None


# --- the audit tally ------------------------------------------------------------------------


def test_tally_counts_only_what_was_appended_since_last_time(tmp_path):
    log = AuditLog(tmp_path)
    tally = AuditTally(tmp_path)
    assert tally.refresh().bytes == {}

    log.append([record("trim", 100), record("orphan-removal", 7)])
    first = tally.refresh()
    log.append([record("trim", 50)])
    second = tally.refresh()

    assert first.bytes == {"trim": 100, "orphan-removal": 7}  # a copy: not changed later
    assert second.bytes == {"trim": 150, "orphan-removal": 7}
    assert second.units == {"trim": 2, "orphan-removal": 1}
    assert second.objects == {"trim": 4, "orphan-removal": 2}
    assert tally.refresh() == second  # nothing appended: same totals, nothing re-read


def test_tally_waits_for_a_line_being_written_and_restarts_on_a_new_file(tmp_path):
    log = AuditLog(tmp_path)
    log.append([record("trim", 100)])
    tally = AuditTally(tmp_path)
    whole = record("trim", 5).to_json()
    with open(log.path, "a") as handle:
        handle.write(whole[:20])
    assert tally.refresh().bytes == {"trim": 100}  # half a line is not counted yet
    with open(log.path, "a") as handle:
        handle.write(whole[20:] + "\n")
    assert tally.refresh().bytes == {"trim": 105}

    replacement = tmp_path / "new.jsonl"
    replacement.write_text(record("orphan-removal", 1).to_json() + "\n")
    os.replace(replacement, log.path)  # rotated: another inode, smaller
    assert tally.refresh().bytes == {"orphan-removal": 1}
    log.path.unlink()
    assert tally.refresh().bytes == {}


def test_recent_audit_records_are_newest_first(tmp_path):
    AuditLog(tmp_path).append([record("trim", i, run_id=f"r{i}") for i in range(5)])
    assert [r["run_id"] for r in recent_audit_records(tmp_path, 2)] == ["r4", "r3"]


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
