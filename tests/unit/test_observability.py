"""The overview (orphans per phase and trend, trim backlog, deletions, last runs), its
Prometheus text and its HTML page, from run summaries shaped like the real ones.

Trim summaries come from the trim's own ``run_summary``; orphan summaries follow the
contract documented in ``ledger_gc/orphans/report.py``.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from ledger_gc import run_log
from ledger_gc.audit import AuditLog, AuditRecord
from ledger_gc.config.settings import Settings
from ledger_gc.observability.metrics import render_metrics
from ledger_gc.observability.overview import build_overview
from ledger_gc.observability.page import render_page
from ledger_gc.observability.runs import CLASSES, MAIN_PHASES, PHASE_CLASSES, PHASES
from ledger_gc.observability.status_section import add_overview, describe_overview
from ledger_gc.trim.report import run_summary

T0 = 1_700_000_000_000
HOUR = 3_600_000


def phase(
    partitions: tuple[int, int] = (0, 0),
    ledgers: tuple[int, int] = (0, 0),
    segments: tuple[int, int] = (0, 0),
) -> dict:
    """One phase of an orphan report: (count, bytes) of each class."""
    return {
        "count": partitions[0] + ledgers[0] + segments[0],
        "bytes": partitions[1] + ledgers[1] + segments[1],
        "by_class": {
            "orphan-partition": {"count": partitions[0], "bytes": partitions[1]},
            "orphan-ledger": {"count": ledgers[0], "bytes": ledgers[1]},
            "orphan-segment": {"count": segments[0], "bytes": segments[1]},
        },
    }


def orphan_cycle(
    run_id: str,
    finished_ms: int,
    *,
    status: str = "ok",
    phases: dict[str, dict] | None = None,
    namespaces: dict[str, dict] | None = None,
    refusals: list[dict] | None = None,
) -> dict[str, Any]:
    return {
        "kind": "orphans",
        "run_id": run_id,
        "status": status,
        "started_ms": finished_ms - 5000,
        "finished_ms": finished_ms,
        "time_ms": finished_ms,
        "dry_run": False,
        "forced": False,
        "phases": phases or {},
        "namespaces": {ns: {"classes": {}, "phases": p} for ns, p in (namespaces or {}).items()},
        "refusals": refusals or [],
    }


def trim_run(run_id: str, finished_ms: int, *, report: dict | None = None, **kw: Any) -> dict:
    return run_summary(
        [report] if report else [],
        run_id=run_id,
        source="cli",
        dry_run=False,
        scope="all",
        started_at=finished_ms - 1000,
        finished_at=finished_ms,
        **kw,
    )


def trim_report(deleted: list[tuple[int, int]], pending: list[dict]) -> dict:
    """A ``TrimReport.to_dict()`` of one managed ledger."""
    ml = {
        "name": "acme/prod/persistent/orders",
        "plan": {"to_mark": [], "already_marked": []},
        "marked": [],
        "deleted": [{"ledger_id": i, "objects": 1, "bytes": b} for i, b in deleted],
        "pending": pending,
        "cursors_moved": [],
        "zk_writes": 1,
        "error": None,
        "missing": False,
    }
    from ledger_gc.trim.report import totals_of

    return {"error": None, "totals": totals_of([ml], 1), "managed_ledgers": [ml]}


def audit(state_dir: Path, operation: str, size: int, run_id: str, **kw: Any) -> None:
    target_class = "ledger" if operation == "trim" else "orphan-ledger"
    AuditLog(state_dir).append(
        [
            AuditRecord(
                operation=operation,
                target_class=kw.get("target_class", target_class),
                ml_name="acme/prod/persistent/orders",
                ledger_id=kw.get("ledger_id", 7),
                prefix="ledgers/acme/prod/persistent/orders/ledgers/00000000000000000007/",
                objects=1,
                bytes=size,
                reason=kw.get("reason", "consumed by every cursor"),
                run_id=run_id,
                time_ms=kw.get("time_ms", T0),
            )
        ]
    )


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    """Three orphan cycles, two trim runs and three deletions."""
    cycles = [
        orphan_cycle(
            "orphans-1",
            T0,
            phases={"registered": phase((1, 1000), (2, 200)), "new": phase((1, 1000), (2, 200))},
        ),
        orphan_cycle(
            "orphans-2",
            T0 + HOUR,
            status="refused",
            phases={"registered": phase((1, 1000), (2, 200))},
            refusals=[
                {"guard": "orphan-fraction", "reason": "orphans are 40% > 10%", "forced": False}
            ],
        ),
        orphan_cycle(
            "orphans-3",
            T0 + 2 * HOUR,
            phases={
                "registered": phase((1, 1000), (1, 100)),
                "waiting_grace": phase((1, 1000)),
                "waiting_retention": phase(ledgers=(1, 100)),
                "deleted": phase(ledgers=(1, 100)),
            },
            namespaces={
                "acme/prod": {"registered": phase(ledgers=(1, 100))},
                "public/default": {"registered": phase((1, 1000)), "deleted": phase((0, 0))},
            },
        ),
    ]
    for cycle in cycles:
        run_log.append_run(tmp_path, run_log.ORPHANS, cycle)
    run_log.append_run(tmp_path, run_log.TRIM, trim_run("trim-1", T0 + HOUR))
    report = trim_report(
        deleted=[(7, 4096)],
        pending=[
            {
                "ledger_id": 9,
                "size": 512,
                "entries": 3,
                "marked_at": T0,
                "attempts": 2,
                "last_error": "AccessDenied on delete",
            }
        ],
    )
    run_log.append_run(tmp_path, run_log.TRIM, trim_run("trim-2", T0 + 3 * HOUR, report=report))
    audit(tmp_path, "trim", 4096, "trim-2", time_ms=T0 + 3 * HOUR)
    audit(tmp_path, "orphan-removal", 100, "orphans-3", time_ms=T0 + 2 * HOUR)
    audit(tmp_path, "trim", 10, "trim-1", time_ms=T0 + HOUR)
    return tmp_path


def live_status(markers: dict[str, list[dict]]) -> dict[str, Any]:
    """A ``StoreStatus.to_dict()`` with the given markers per managed ledger."""
    return {
        "managed_ledgers": [{"name": name, "markers": ms} for name, ms in markers.items()],
        "totals": {"pending_markers": sum(len(ms) for ms in markers.values())},
    }


# --- the overview ---------------------------------------------------------------------------


def test_orphans_per_phase_come_from_the_latest_cycle(state_dir):
    orphans = build_overview(state_dir, now_ms=T0 + 4 * HOUR)["orphans"]

    assert orphans["latest"]["run_id"] == "orphans-3"
    assert orphans["latest"]["time_ms"] == T0 + 2 * HOUR
    registered = orphans["phases"]["registered"]
    assert {c: registered[c] for c in CLASSES} == {
        "orphan-partition": {"count": 1, "bytes": 1000},
        "orphan-ledger": {"count": 1, "bytes": 100},
        "orphan-segment": {"count": 0, "bytes": 0},
    }
    # BookKeeper's orphan classes are in every phase table, at 0 in a cycle without them.
    assert set(registered) == set(PHASE_CLASSES)
    assert orphans["bookkeeper"] is None
    assert orphans["phase_totals"]["waiting_grace"] == {"count": 1, "bytes": 1000}
    assert orphans["phase_totals"]["waiting_retention"] == {"count": 1, "bytes": 100}
    assert orphans["phase_totals"]["deleted"] == {"count": 1, "bytes": 100}
    assert orphans["phase_totals"]["would_delete"] == {"count": 0, "bytes": 0}
    assert list(orphans["namespaces"]) == ["acme/prod", "public/default"]
    assert orphans["namespaces"]["public/default"]["registered"]["orphan-partition"] == {
        "count": 1,
        "bytes": 1000,
    }


def test_the_trend_has_one_point_per_cycle_oldest_first(state_dir):
    trend = build_overview(state_dir)["orphans"]["trend"]

    assert [p["run_id"] for p in trend] == ["orphans-1", "orphans-2", "orphans-3"]
    assert [p["phases"]["registered"]["count"] for p in trend] == [3, 3, 2]
    assert [p["phases"]["registered"]["bytes"] for p in trend] == [1200, 1200, 1100]
    assert [p["phases"]["deleted"]["count"] for p in trend] == [0, 0, 1]
    assert len(build_overview(state_dir, trend_runs=2)["orphans"]["trend"]) == 2


def test_refusals_of_recent_cycles_are_listed_newest_first(state_dir):
    run_log.append_run(
        state_dir,
        run_log.ORPHANS,
        orphan_cycle(
            "orphans-4",
            T0 + 5 * HOUR,
            refusals=[{"guard": "zero-managed-ledgers", "reason": "no ML", "forced": True}],
        ),
    )
    refusals = build_overview(state_dir)["orphans"]["refusals"]

    assert [(r["run_id"], r["guard"], r["forced"]) for r in refusals] == [
        ("orphans-4", "zero-managed-ledgers", True),
        ("orphans-2", "orphan-fraction", False),
    ]
    assert refusals[1]["reason"] == "orphans are 40% > 10%"


def test_trim_backlog_is_live_when_a_status_is_given(state_dir):
    live = live_status(
        {
            "acme/prod/persistent/a": [
                {"ledger_id": 3, "size": 100, "marked_at": T0 + HOUR, "attempts": 0},
                {
                    "ledger_id": 4,
                    "size": 50,
                    "marked_at": T0,
                    "attempts": 3,
                    "last_error": "SlowDown",
                },
            ],
            "acme/prod/persistent/b": [
                {"ledger_id": 8, "size": 1, "marked_at": T0 + 2 * HOUR, "attempts": 1},
            ],
        }
    )
    trim = build_overview(state_dir, live_status=live, now_ms=T0 + 10_000)["trim"]

    assert trim["backlog"] == {
        "source": "live",
        "pending_markers": 3,
        "pending_bytes": 151,
        "oldest_marked_at_ms": T0,
        "oldest_age_seconds": 10.0,
        "live_error": None,
    }
    # The live markers' own errors; a run's word on its markers is older than the live one.
    assert [(e["ml"], e["ledger_id"], e["error"]) for e in trim["last_errors"]] == [
        ("acme/prod/persistent/a", 4, "SlowDown"),
    ]


def test_trim_errors_of_failed_runs_follow_the_live_markers_errors(state_dir):
    run_log.append_run(
        state_dir, run_log.TRIM, trim_run("trim-3", T0 + 4 * HOUR, run_errors=["shard 2 lost"])
    )
    live = live_status({"a/b/persistent/c": [{"ledger_id": 1, "marked_at": T0, "last_error": "x"}]})

    errors = build_overview(state_dir, live_status=live)["trim"]["last_errors"]
    without_live = build_overview(state_dir)["trim"]["last_errors"]

    assert [(e["ml"], e["error"], e["run_id"]) for e in errors] == [
        ("a/b/persistent/c", "x", None),
        (None, "shard 2 lost", "trim-3"),
    ]
    assert [(e["ledger_id"], e["error"]) for e in without_live] == [
        (None, "shard 2 lost"),
        (9, "AccessDenied on delete"),
    ]


def test_trim_backlog_falls_back_to_the_latest_run_and_says_why(state_dir):
    trim = build_overview(state_dir, live_error="ZooKeeper down", now_ms=T0 + 60_000)["trim"]

    assert trim["backlog"] == {
        "source": "last_run",
        "pending_markers": 1,
        "pending_bytes": 512,
        "oldest_marked_at_ms": T0,
        "oldest_age_seconds": 60.0,
        "live_error": "ZooKeeper down",
    }
    assert trim["latest"]["run_id"] == "trim-2"
    assert trim["latest"]["outcome"] == "pending"
    assert trim["latest"]["bytes_reclaimed"] == 4096
    assert [p["bytes_reclaimed"] for p in trim["trend"]] == [0, 4096]
    assert [p["markers_pending"] for p in trim["trend"]] == [0, 1]


def test_deletions_are_the_audit_log_newest_first_with_totals(state_dir):
    deletions = build_overview(state_dir, recent=2)["deletions"]

    assert [r["run_id"] for r in deletions["recent"]] == ["trim-1", "orphans-3"]
    assert deletions["reclaimed_bytes"] == {"orphan-removal": 100, "trim": 4106}
    assert deletions["deleted_units"] == {"orphan-removal": 1, "trim": 2}


def test_last_success_skips_failed_runs(state_dir):
    run_log.append_run(
        state_dir, run_log.ORPHANS, orphan_cycle("o-5", T0 + 9 * HOUR, status="failed")
    )
    run_log.append_run(
        state_dir, run_log.TRIM, trim_run("t-9", T0 + 9 * HOUR, run_errors=["shard 2 failed"])
    )
    last = build_overview(state_dir)["last_success"]

    # A refused cycle (orphans-2) ran and did its job; a failed one did not.
    assert last == {
        "trim": {"run_id": "trim-2", "time_ms": T0 + 3 * HOUR},
        "orphans": {"run_id": "orphans-3", "time_ms": T0 + 2 * HOUR},
    }


def test_an_empty_state_dir_gives_zeros_not_errors(tmp_path):
    overview = build_overview(tmp_path / "never-written", now_ms=T0)

    assert overview["orphans"]["latest"] is None
    assert overview["orphans"]["trend"] == [] and overview["orphans"]["refusals"] == []
    assert all(
        leaf == {"count": 0, "bytes": 0}
        for by_class in overview["orphans"]["phases"].values()
        for leaf in by_class.values()
    )
    assert overview["trim"]["backlog"]["source"] == "none"
    assert overview["trim"]["backlog"]["pending_markers"] == 0
    assert overview["deletions"] == {
        "recent": [],
        "reclaimed_bytes": {"orphan-removal": 0, "trim": 0},
        "recoverable_bytes": {"orphan-removal": 0, "trim": 0},
        "deleted_units": {"orphan-removal": 0, "trim": 0},
    }
    assert overview["last_success"] == {"trim": None, "orphans": None}
    json.dumps(overview)  # JSON-ready as is


@pytest.mark.parametrize(
    "odd",
    [
        {},
        {"run_id": None, "phases": "garbage", "namespaces": [1, 2], "refusals": [1, "x"]},
        {"phases": {"registered": {"by_class": {"orphan-ledger": {"count": "7", "bytes": None}}}}},
        {"totals": None, "pending": [None, {"last_error": "boom"}], "errors": "oops"},
    ],
)
def test_missing_or_odd_summary_keys_read_as_zero(tmp_path, odd):
    run_log.append_run(tmp_path, run_log.ORPHANS, odd)
    run_log.append_run(tmp_path, run_log.TRIM, odd)

    overview = build_overview(tmp_path)
    render_metrics(overview)
    render_page(overview)
    registered = overview["orphans"]["phases"]["registered"]["orphan-ledger"]
    assert registered == {"count": 7 if "7" in json.dumps(odd) else 0, "bytes": 0}


def test_status_extension_adds_the_overview_with_the_live_backlog(state_dir):
    data = live_status({"t/n/persistent/x": [{"ledger_id": 1, "size": 5, "marked_at": T0}]})
    add_overview(data, Settings(state_dir=state_dir))

    assert data["overview"]["trim"]["backlog"]["source"] == "live"
    assert data["overview"]["trim"]["backlog"]["pending_markers"] == 1
    assert data["overview"]["orphans"]["latest"]["run_id"] == "orphans-3"


def test_plain_status_lines_summarise_orphans_refusals_deletions_and_runs(state_dir):
    run_log.append_run(
        state_dir,
        run_log.ORPHANS,
        orphan_cycle(
            "orphans-4",
            T0 + 5 * HOUR,
            status="refused",
            refusals=[{"guard": "orphan-fraction", "reason": "too many", "forced": False}],
        ),
    )
    lines = describe_overview(build_overview(state_dir))

    assert lines[0] == (
        "orphans, cycle orphans-4 (refused): registered 0 (0 B), waiting in grace 0 (0 B), "
        "waiting for retention 0 (0 B), deleted 0 (0 B)"
    )
    assert lines[1] == "  refused by orphan-fraction in orphans-4: too many"
    assert "reclaimed (audit log): orphan-removal 100 B, trim 4.0 KiB" in lines
    assert any("trim acme/prod/persistent/orders ledger 7 4.0 KiB" in line for line in lines)
    assert lines[-1].startswith("last successful runs: trim 2023-11-15 ")


# --- metrics --------------------------------------------------------------------------------

_SAMPLE = re.compile(
    r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?P<labels>[a-z_]+="(?:[^"\\]|\\.)*"'
    r'(?:,[a-z_]+="(?:[^"\\]|\\.)*")*)\})? (?P<value>\S+)$'
)


def parse_metrics(text: str) -> dict[str, Any]:
    """A strict reader of the text format: families declared before their samples."""
    assert text.endswith("\n")
    types: dict[str, str] = {}
    samples: dict[tuple[str, tuple], float] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert kind in ("gauge", "counter") and name not in types
            types[name] = kind
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        assert match["name"] in types, f"sample before its TYPE: {line!r}"
        labels = tuple(re.findall(r'([a-z_]+)="((?:[^"\\]|\\.)*)"', match["labels"] or ""))
        key = (match["name"], labels)
        assert key not in samples, f"duplicate series {key}"
        samples[key] = float(match["value"])
    return {"types": types, "samples": samples}


def test_metrics_carry_kip370_names_with_phase_and_namespace_labels(state_dir):
    live = live_status({"a/b/persistent/c": [{"ledger_id": 1, "size": 64, "marked_at": T0}]})
    text = render_metrics(build_overview(state_dir, live_status=live, now_ms=T0 + 90_000))
    parsed = parse_metrics(text)
    samples = parsed["samples"]

    for name in (
        "OrphanLogPartitionCount",
        "OrphanLogPartitionSize",
        "OrphanLogLedgerCount",
        "OrphanLogLedgerSize",
    ):
        assert parsed["types"][name] == "gauge"
        series = [labels for (n, labels) in samples if n == name]
        assert len(series) == 2 * len(PHASES)  # two namespaces, every phase
    assert (
        samples[
            ("OrphanLogPartitionCount", (("namespace", "public/default"), ("phase", "registered")))
        ]
        == 1
    )
    assert (
        samples[
            ("OrphanLogPartitionSize", (("namespace", "public/default"), ("phase", "registered")))
        ]
        == 1000
    )
    assert (
        samples[("OrphanLogLedgerCount", (("namespace", "acme/prod"), ("phase", "registered")))]
        == 1
    )
    assert (
        samples[("OrphanLogLedgerSize", (("namespace", "acme/prod"), ("phase", "registered")))]
        == 100
    )
    assert samples[("ledgergc_trim_markers_pending", ())] == 1
    assert samples[("ledgergc_trim_marker_pending_bytes", ())] == 64
    assert samples[("ledgergc_trim_marker_oldest_age_seconds", ())] == 90.0
    assert parsed["types"]["ledgergc_reclaimed_bytes_total"] == "counter"
    assert samples[("ledgergc_reclaimed_bytes_total", (("operation", "trim"),))] == 4106
    assert samples[("ledgergc_reclaimed_bytes_total", (("operation", "orphan-removal"),))] == 100
    assert samples[("ledgergc_last_success_timestamp_seconds", (("job", "trim"),))] == (
        (T0 + 3 * HOUR) / 1000
    )
    assert samples[("ledgergc_last_success_timestamp_seconds", (("job", "orphans"),))] == (
        (T0 + 2 * HOUR) / 1000
    )
    # The latest cycle was not refused: no refusal series.
    assert not [n for (n, _) in samples if n == "ledgergc_orphan_guard_refusals"]


def test_metrics_without_per_namespace_figures_use_an_empty_namespace(tmp_path):
    run_log.append_run(
        tmp_path,
        run_log.ORPHANS,
        orphan_cycle(
            "o-1",
            T0,
            status="refused",
            phases={"registered": phase((2, 20))},
            refusals=[{"guard": "orphan-fraction", "reason": 'he said "no"\\\n', "forced": False}],
        ),
    )
    samples = parse_metrics(render_metrics(build_overview(tmp_path)))["samples"]

    assert samples[("OrphanLogPartitionCount", (("namespace", ""), ("phase", "registered")))] == 2
    assert samples[("ledgergc_orphan_guard_refusals", (("guard", "orphan-fraction"),))] == 1


def test_metrics_leave_out_namespaces_without_orphans(tmp_path):
    quiet = {"registered": phase(), "deleted": phase()}
    run_log.append_run(
        tmp_path,
        run_log.ORPHANS,
        orphan_cycle(
            "o-1", T0, namespaces={"a/quiet": quiet, "b/leaky": {"new": phase((0, 0), (1, 9))}}
        ),
    )
    run_log.append_run(
        tmp_path, run_log.ORPHANS, orphan_cycle("o-2", T0 + 1, namespaces={"a/quiet": quiet})
    )
    samples = parse_metrics(render_metrics(build_overview(tmp_path)))["samples"]

    # Only the latest cycle counts, and it found nothing anywhere: zeros for all namespaces.
    assert {labels for (name, labels) in samples if name == "OrphanLogLedgerCount"} == {
        (("namespace", ""), ("phase", p)) for p in PHASES
    }
    assert all(v == 0 for (name, _), v in samples.items() if name.startswith("OrphanLog"))


def test_metrics_before_any_run_have_no_orphan_samples_and_zero_backlog(tmp_path):
    parsed = parse_metrics(render_metrics(build_overview(tmp_path)))

    assert "OrphanLogPartitionCount" in parsed["types"]  # declared, so dashboards find it
    assert not [n for (n, _) in parsed["samples"] if n.startswith("OrphanLog")]
    assert parsed["samples"][("ledgergc_trim_markers_pending", ())] == 0
    assert parsed["samples"][("ledgergc_reclaimed_bytes_total", (("operation", "trim"),))] == 0
    assert not [n for (n, _) in parsed["samples"] if n.startswith("ledgergc_last_success")]


def test_label_values_are_escaped(tmp_path):
    weird = 'ten"ant\\x/ns\nline'
    run_log.append_run(
        tmp_path,
        run_log.ORPHANS,
        orphan_cycle("o", T0, namespaces={weird: {"registered": phase((1, 1))}}),
    )
    text = render_metrics(build_overview(tmp_path))

    assert 'namespace="ten\\"ant\\\\x/ns\\nline"' in text
    parse_metrics(text)


# --- the page -------------------------------------------------------------------------------


class FigureParser(HTMLParser):
    """Collects ``data-key``/``data-value`` pairs and every src/href of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[tuple, Any] = {}
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if "data-key" in attributes:
            key = tuple(json.loads(attributes["data-key"] or ""))
            self.figures[key] = json.loads(attributes["data-value"] or "")
        self.links += [v or "" for k, v in attrs if k in ("src", "href")]


def lookup(data: Any, path: tuple) -> Any:
    for part in path:
        data = data[part]
    return data


def test_every_figure_on_the_page_is_the_overviews(state_dir):
    live = live_status({"a/b/persistent/c": [{"ledger_id": 1, "size": 64, "marked_at": T0}]})
    overview = build_overview(state_dir, live_status=live)
    parser = FigureParser()
    parser.feed(render_page(overview))

    for path, value in parser.figures.items():
        assert lookup(overview, path) == value, path
    shown = set(parser.figures)
    for p in MAIN_PHASES:
        assert ("orphans", "phase_totals", p, "count") in shown
        assert ("orphans", "phase_totals", p, "bytes") in shown
    for p in PHASES:
        for c in CLASSES:
            # Without tiered storage in the latest cycle, no column of offloaded segments.
            assert (("orphans", "phases", p, c, "count") in shown) == (c != "orphan-segment")
    assert (
        "orphans",
        "namespaces",
        "public/default",
        "registered",
        "orphan-partition",
        "bytes",
    ) in shown
    assert {
        ("trim", "backlog", "pending_markers"),
        ("trim", "backlog", "oldest_marked_at_ms"),
    } <= shown
    assert ("deletions", "recent", 2, "bytes") in shown
    assert ("last_success", "orphans", "time_ms") in shown


def test_the_page_loads_nothing_from_elsewhere_and_escapes_what_it_shows(tmp_path):
    run_log.append_run(
        tmp_path,
        run_log.ORPHANS,
        orphan_cycle(
            "<b>run</b>",
            T0,
            refusals=[{"guard": "g", "reason": "<script>alert(1)</script>", "forced": False}],
        ),
    )
    audit(tmp_path, "trim", 1, "r", reason="<img src=x onerror=alert(1)>")
    html = render_page(build_overview(tmp_path))
    parser = FigureParser()
    parser.feed(html)

    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert sorted(parser.links) == ["api/overview", "metrics"]  # relative, same app
    # The orphans' count and bytes; no trim has run: no empty trim charts.
    assert html.count("<svg") == 2 and "No trim run yet." in html


def test_orphan_offloaded_segments_have_their_own_metrics_beside_ledgers(tmp_path):
    """Tiered storage: OrphanOffloadedSegmentCount/Size per phase and namespace, with the
    labels of the OrphanLogLedger* gauges; a deleted topic's segments count under
    "(none)", a stale uuid's under its managed ledger's namespace."""
    run_log.append_run(
        tmp_path,
        run_log.ORPHANS,
        orphan_cycle(
            "orphans-tiered",
            T0,
            phases={
                "registered": phase(ledgers=(1, 100), segments=(3, 12_000)),
                "deleted": phase(segments=(2, 8_000)),
            },
            namespaces={
                "(none)": {
                    "registered": phase(segments=(2, 8_000)),
                    "deleted": phase(segments=(2, 8_000)),
                },
                "acme/prod": {"registered": phase(ledgers=(1, 100), segments=(1, 4_000))},
            },
        ),
    )
    overview = build_overview(tmp_path, now_ms=T0 + HOUR)
    assert overview["orphans"]["phases"]["registered"]["orphan-segment"] == {
        "count": 3,
        "bytes": 12_000,
    }
    parsed = parse_metrics(render_metrics(overview))
    samples = parsed["samples"]
    for name in ("OrphanOffloadedSegmentCount", "OrphanOffloadedSegmentSize"):
        assert parsed["types"][name] == "gauge"
        assert {labels for (n, labels) in samples if n == name} == {
            labels for (n, labels) in samples if n == "OrphanLogLedgerCount"
        }
    none = (("namespace", "(none)"),)
    assert samples[("OrphanOffloadedSegmentCount", (*none, ("phase", "deleted")))] == 2
    assert samples[("OrphanOffloadedSegmentSize", (*none, ("phase", "deleted")))] == 8_000
    acme = (("namespace", "acme/prod"), ("phase", "registered"))
    assert samples[("OrphanOffloadedSegmentCount", acme)] == 1
    assert samples[("OrphanLogLedgerCount", acme)] == 1


# --- the charts: what a reader can tell apart ------------------------------------------------


def test_run_labels_tell_every_run_apart():
    from ledger_gc.observability.charts import run_labels

    minute = 1_795_700_040_000  # 2026-11-26 ...:00 UTC
    assert run_labels([minute, minute + HOUR]) == ["11-26 13:34", "11-26 14:34"]
    # The demo's cycles are seconds apart: "11-26 13:34" twice told the reader nothing.
    assert run_labels([minute, minute + 12_000]) == ["11-26 13:34:00", "11-26 13:34:12"]
    assert run_labels([minute, minute + 300, None]) == [
        "2026-11-26 13:34:00 #1",
        "2026-11-26 13:34:00 #2",
        "?",
    ]


def test_series_with_the_same_values_all_show():
    from ledger_gc.observability.charts import Series, line_chart

    same = [2, 2, 1]
    svg = line_chart(
        "t",
        ["a", "b", "c"],
        [Series("Registered", "#111", same), Series("Waiting in grace", "#222", same)],
    )
    widths = [float(w) for w in re.findall(r'<polyline[^>]*stroke-width="([\d.]+)"', svg)]
    radii = [float(r) for r in re.findall(r'<circle[^>]*r="([\d.]+)"', svg)]
    # Drawn first, Registered is wider than Waiting in grace on top of it: a band of its
    # colour shows on each side (and a ring around each dot).
    assert len(widths) == 2 and widths[0] >= widths[1] + 2
    assert radii[0] >= radii[-1] + 1


def test_the_page_fits_a_narrow_window():
    html = render_page(build_overview_of_nothing())
    assert "svg.chart{max-width:100%;height:auto}" in html
    assert ".wide{max-width:100%;overflow-x:auto}" in html


def build_overview_of_nothing(tmp: Path | None = None) -> dict[str, Any]:
    import tempfile

    return build_overview(Path(tmp or tempfile.mkdtemp()))
