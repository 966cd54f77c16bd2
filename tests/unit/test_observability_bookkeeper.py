"""The BookKeeper source in the overview, its metrics (``OrphanBookKeeperLedgerCount`` and
``Size``), the page's BookKeeper section, ``ledgergc status`` and the registered-orphan
table; and, with the source off, none of them.

Cycle summaries follow ``orphans/report.py`` (its ``bookkeeper`` is the survey's
``to_manifest()`` plus what the cycle deleted); no server is involved.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_observability import FigureParser, lookup, orphan_cycle, parse_metrics, phase

from ledger_gc import run_log
from ledger_gc.config.settings import Settings
from ledger_gc.observability.metrics import render_metrics
from ledger_gc.observability.overview import build_overview
from ledger_gc.observability.page import render_page
from ledger_gc.observability.registered_table import registered_section
from ledger_gc.observability.status_section import add_overview, describe_overview
from ledger_gc.rules.bookkeeper.classify import BK_CLASSES, BK_ORPHAN_CLASSES, EXPLANATIONS

T0 = 1_700_000_000_000
HOUR = 3_600_000
SHARED_WHY = (
    "topic acme/prod/persistent/gone is not in this metadata, yet it gained ledger 99 after "
    "its ledgers were registered as orphaned (scan 3): another Pulsar cluster sharing this "
    "BookKeeper writes it. Held; set LEDGERGC_BK_SHARED=true if BookKeeper is shared"
)


def leaf(ledgers: int, size: int) -> dict[str, int]:
    return {"ledgers": ledgers, "bytes": size}


def bookkeeper_report(**overrides: Any) -> dict[str, Any]:
    """A cycle's ``bookkeeper``: 10 live ledgers, 2 orphan ledgers, 1 offloaded copy, a
    held one, a foreign one; one orphan ledger deleted."""
    classes = {name: leaf(0, 0) for name in BK_CLASSES}
    classes |= {
        "bk-live": leaf(10, 10_000),
        "bk-orphan-ledger": leaf(2, 300),
        "bk-offloaded-copy": leaf(1, 4_000),
        "bk-held": leaf(1, 50),
        "bk-foreign": leaf(1, 7),
    }
    report = {
        "hosts": "zk1:2181,zk2:2181",
        "root": "/ledgers",
        "layout": "hierarchical",
        "managed_ledgers": 4,
        "ledgers": 15,
        "bytes": 14_357,
        "orphan_bytes": 4_300,
        "pulsar_ledgers": 14,
        "classes": classes,
        "explanations": dict(EXPLANATIONS),
        "namespaces": {
            "(none)": {"bk-foreign": leaf(1, 7)},
            "acme/prod": {
                "bk-live": leaf(6, 6_000),
                "bk-orphan-ledger": leaf(2, 300),
                "bk-offloaded-copy": leaf(1, 4_000),
            },
            "other/ns": {"bk-held": leaf(1, 50)},
            "public/default": {"bk-live": leaf(4, 4_000)},
        },
        "held_reasons": {"unknown-namespace": 1},
        "samples": {"bk-held": [{"ledger_id": 77, "class": "bk-held"}]},
        "missing_listed": [],
        "deleted": 1,
        "bytes_reclaimed": 100,
        "live_elsewhere": {},
        "restore": (
            "ledgergc restore --run <run id> re-creates deleted ledgers' metadata until the "
            "bookies' next garbage collection (gcWaitTime, 10 minutes by default)"
        ),
        "cost": COST,
    }
    return report | overrides


#: The survey's cost (``bookkeeper/cost.py``): a cycle that reused 12 records.
COST = {
    "zk_reads": 31,
    "zk_peak_reads_per_second": 29,
    "zk_max_reads_per_second": 5000,
    "zk_reads_by_step": {"references": 20, "listing": 4, "cache": 3, "ledgers": 3},
    "records_read": 3,
    "records_cached": 12,
    "directories": 2,
    "directories_reused": {"unchanged": 1, "accounted": 1},
    "seconds": {
        "references": 0.5,
        "listing": 0.25,
        "cache": 0.125,
        "ledgers": 1.5,
        "cache_save": 0.25,
        "checks": 0.125,
        "total": 3.0,
    },
    "cache": {
        "enabled": True,
        "full_read": False,
        "why": "records of CLOSED ledgers read by earlier cycles are reused where they stand",
        "instance_id": "6e9e0a2c",
        "cycles_since_full_read": 2,
        "cversion_proven": True,
    },
}
ZOOKEEPER = {
    "reads": 80,
    "peak_per_second": 40,
    "max_reads_per_second": 5000,
    "by_step": {
        "snapshot": {"reads": 40, "peak_per_second": 40},
        "bookkeeper": {"reads": 31, "peak_per_second": 29},
        "delete": {"reads": 9, "peak_per_second": 9},
    },
}


def bk_phase(**by_class: tuple[int, int]) -> dict[str, Any]:
    """One phase of a report with BookKeeper classes in ``by_class`` (S3 ones at 0)."""
    table = phase()
    for name, (count, size) in by_class.items():
        table["by_class"][name.replace("_", "-")] = {"count": count, "bytes": size}
        table["count"] += count
        table["bytes"] += size
    return table


def bk_cycle(run_id: str, finished_ms: int, bookkeeper: Any, **kw: Any) -> dict[str, Any]:
    cycle = orphan_cycle(run_id, finished_ms, **kw)
    cycle["bookkeeper"] = bookkeeper
    cycle["zookeeper"] = ZOOKEEPER
    return cycle


@pytest.fixture
def bk_state(tmp_path: Path) -> Path:
    """An older cycle without the key, then one with BookKeeper figures and registered
    BookKeeper orphans."""
    run_log.append_run(tmp_path, run_log.ORPHANS, orphan_cycle("orphans-old", T0))
    run_log.append_run(
        tmp_path,
        run_log.ORPHANS,
        bk_cycle(
            "orphans-bk",
            T0 + HOUR,
            bookkeeper_report(),
            phases={
                "registered": bk_phase(bk_orphan_ledger=(1, 200), bk_offloaded_copy=(1, 4_000)),
                "waiting_grace": bk_phase(bk_orphan_ledger=(1, 200)),
                "deleted": bk_phase(bk_orphan_ledger=(1, 100)),
            },
            namespaces={
                "acme/prod": {
                    "registered": bk_phase(bk_orphan_ledger=(1, 200), bk_offloaded_copy=(1, 4_000))
                }
            },
        ),
    )
    return tmp_path


# --- the overview ---------------------------------------------------------------------------


def test_the_overview_carries_the_latest_cycles_bookkeeper_figures(bk_state):
    orphans = build_overview(bk_state, now_ms=T0 + 2 * HOUR)["orphans"]
    bk = orphans["bookkeeper"]

    assert (bk["hosts"], bk["root"], bk["layout"]) == (
        "zk1:2181,zk2:2181",
        "/ledgers",
        "hierarchical",
    )
    assert (bk["ledgers"], bk["bytes"], bk["orphan_bytes"]) == (15, 14_357, 4_300)
    assert list(bk["classes"]) == list(BK_CLASSES)  # every class, in classify's order
    assert bk["classes"]["bk-orphan-ledger"] == {"ledgers": 2, "bytes": 300}
    assert bk["classes"]["bk-unreadable"] == {"ledgers": 0, "bytes": 0}
    assert bk["explanations"]["bk-offloaded-copy"] == EXPLANATIONS["bk-offloaded-copy"]
    assert bk["namespaces"]["acme/prod"]["bk-offloaded-copy"] == {"ledgers": 1, "bytes": 4_000}
    assert bk["held_reasons"] == {"unknown-namespace": 1}
    assert (bk["deleted"], bk["bytes_reclaimed"]) == (1, 100)
    assert bk["missing_listed"] == 0 and bk["live_elsewhere"] == {}
    assert "gcWaitTime" in bk["restore"]
    json.dumps(bk)


def test_registered_bookkeeper_orphans_go_through_the_phases_like_segments(bk_state):
    orphans = build_overview(bk_state)["orphans"]

    assert orphans["phases"]["registered"]["bk-orphan-ledger"] == {"count": 1, "bytes": 200}
    assert orphans["phases"]["registered"]["bk-offloaded-copy"] == {"count": 1, "bytes": 4_000}
    assert orphans["phases"]["deleted"]["bk-orphan-ledger"] == {"count": 1, "bytes": 100}
    # The tiles and trends count every source.
    assert orphans["phase_totals"]["registered"] == {"count": 2, "bytes": 4_200}
    assert [p["phases"]["registered"]["count"] for p in orphans["trend"]] == [0, 2]
    ns = orphans["namespaces"]["acme/prod"]["registered"]
    assert ns["bk-offloaded-copy"] == {"count": 1, "bytes": 4_000}
    assert set(BK_ORPHAN_CLASSES) <= set(ns)


@pytest.mark.parametrize("off", [None, "missing"])
def test_a_cycle_without_bookkeeper_has_none_even_after_one_with_it(bk_state, off):
    cycle = orphan_cycle("orphans-off", T0 + 2 * HOUR)
    if off is None:
        cycle["bookkeeper"] = None
    run_log.append_run(bk_state, run_log.ORPHANS, cycle)

    # An older cycle's survey would show ledgers this one may have deleted: none shown.
    assert build_overview(bk_state)["orphans"]["bookkeeper"] is None


@pytest.mark.parametrize(
    "odd",
    [
        {},
        {"classes": "garbage", "namespaces": [1], "held_reasons": None, "missing_listed": 3},
        {"classes": {"bk-live": {"ledgers": "4", "bytes": None}, "bk-new-class": {"ledgers": 1}}},
        {"namespaces": {"a/b": {"bk-live": "x"}}, "live_elsewhere": None, "deleted": "many"},
    ],
)
def test_odd_bookkeeper_values_read_as_zero(tmp_path, odd):
    run_log.append_run(tmp_path, run_log.ORPHANS, bk_cycle("o", T0, odd))

    overview = build_overview(tmp_path)
    bk = overview["orphans"]["bookkeeper"]
    render_metrics(overview)
    render_page(overview)
    describe_overview(overview)

    assert set(BK_CLASSES) <= set(bk["classes"])
    assert bk["explanations"]["bk-live"] == EXPLANATIONS["bk-live"]  # the summary had none
    assert bk["classes"]["bk-live"]["ledgers"] == (4 if "bk-new-class" in json.dumps(odd) else 0)
    if "bk-new-class" in json.dumps(odd):  # a class a newer summary names is kept, last
        assert list(bk["classes"])[-1] == "bk-new-class"
    assert bk["deleted"] == 0


# --- metrics --------------------------------------------------------------------------------


def test_metrics_count_bookkeeper_ledgers_by_class_and_namespace(bk_state):
    text = render_metrics(build_overview(bk_state))
    parsed = parse_metrics(text)
    samples = parsed["samples"]

    for name in ("OrphanBookKeeperLedgerCount", "OrphanBookKeeperLedgerSize"):
        assert parsed["types"][name] == "gauge"
        assert f"# HELP {name} " in text

    def value(name: str, cls: str, namespace: str) -> float:
        return samples[(name, (("class", cls), ("namespace", namespace)))]

    assert value("OrphanBookKeeperLedgerCount", "bk-orphan-ledger", "acme/prod") == 2
    assert value("OrphanBookKeeperLedgerSize", "bk-orphan-ledger", "acme/prod") == 300
    assert value("OrphanBookKeeperLedgerCount", "bk-offloaded-copy", "acme/prod") == 1
    assert value("OrphanBookKeeperLedgerCount", "bk-held", "other/ns") == 1
    assert value("OrphanBookKeeperLedgerCount", "bk-foreign", "(none)") == 1
    # Live ledgers: one series over all namespaces (their number is not a leak's).
    assert value("OrphanBookKeeperLedgerCount", "bk-live", "") == 10
    assert value("OrphanBookKeeperLedgerSize", "bk-live", "") == 10_000
    # A class with no ledger anywhere: present, at 0, once.
    assert value("OrphanBookKeeperLedgerCount", "bk-orphan-schema-ledger", "") == 0
    series = [labels for (name, labels) in samples if name == "OrphanBookKeeperLedgerCount"]
    assert {dict(labels)["class"] for labels in series} == set(BK_CLASSES)
    # Summed over namespaces, each class gives the survey's total.
    for cls, total in bookkeeper_report()["classes"].items():
        for name, measure in (
            ("OrphanBookKeeperLedgerCount", "ledgers"),
            ("OrphanBookKeeperLedgerSize", "bytes"),
        ):
            got = sum(
                v for (n, labels), v in samples.items() if n == name and ("class", cls) in labels
            )
            assert got == total[measure], (name, cls)
    # The KIP-370 families of the S3 classes are unchanged beside them.
    assert ("OrphanLogLedgerCount", (("namespace", "acme/prod"), ("phase", "registered"))) in (
        samples
    )


def test_bookkeeper_metrics_without_namespaces_give_class_totals(tmp_path):
    run_log.append_run(
        tmp_path, run_log.ORPHANS, bk_cycle("o", T0, bookkeeper_report(namespaces={}))
    )
    samples = parse_metrics(render_metrics(build_overview(tmp_path)))["samples"]

    key = ("OrphanBookKeeperLedgerCount", (("class", "bk-orphan-ledger"), ("namespace", "")))
    assert samples[key] == 2


def test_bookkeeper_metric_labels_are_escaped(tmp_path):
    weird = 'ten"ant\\x/ns\nline'
    report = bookkeeper_report(namespaces={weird: {"bk-orphan-ledger": leaf(2, 300)}})
    run_log.append_run(tmp_path, run_log.ORPHANS, bk_cycle("o", T0, report))
    text = render_metrics(build_overview(tmp_path))

    assert 'namespace="ten\\"ant\\\\x/ns\\nline"' in text
    parse_metrics(text)


@pytest.mark.parametrize("off", [None, "missing"])
def test_no_bookkeeper_metric_lines_with_the_source_off(tmp_path, off):
    cycle = orphan_cycle("o", T0, phases={"registered": phase((1, 10))})
    if off is None:
        cycle["bookkeeper"] = None
    run_log.append_run(tmp_path, run_log.ORPHANS, cycle)

    text = render_metrics(build_overview(tmp_path))
    empty = render_metrics(build_overview(tmp_path / "never-written"))

    assert "BookKeeper" not in text and "BookKeeper" not in empty
    assert (
        parse_metrics(text)["samples"][
            ("OrphanLogPartitionCount", (("namespace", ""), ("phase", "registered")))
        ]
        == 1
    )


# --- the page -------------------------------------------------------------------------------


def test_the_page_shows_the_bookkeeper_section_with_the_overviews_figures(bk_state):
    overview = build_overview(bk_state)
    html = render_page(overview)
    parser = FigureParser()
    parser.feed(html)

    for path, value in parser.figures.items():
        assert lookup(overview, path) == value, path
    shown = set(parser.figures)
    bk = ("orphans", "bookkeeper")
    for cls in BK_CLASSES:
        assert (*bk, "classes", cls, "ledgers") in shown
        assert (*bk, "classes", cls, "bytes") in shown
    assert {
        (*bk, "held_reasons", "unknown-namespace"),
        (*bk, "deleted"),
        (*bk, "bytes_reclaimed"),
        (*bk, "namespaces", "acme/prod", "bk-orphan-ledger", "ledgers"),
        (*bk, "namespaces", "other/ns", "bk-held", "bytes"),
        ("orphans", "phases", "registered", "bk-offloaded-copy", "count"),
        ("orphans", "phases", "deleted", "bk-orphan-ledger", "bytes"),
        ("orphans", "namespaces", "acme/prod", "registered", "bk-offloaded-copy", "count"),
    } <= shown
    # Live ledgers are in the class table, not in the per-namespace one.
    assert (*bk, "namespaces", "public/default", "bk-live", "ledgers") not in shown
    assert html.index('id="orphans"') < html.index('id="bookkeeper"') < html.index('id="trim"')
    assert "<code>zk1:2181,zk2:2181/ledgers</code> (hierarchical)" in html
    assert EXPLANATIONS["bk-orphan-ledger"] in html
    assert "ledgergc restore --run orphans-bk</code>" in html and "gcWaitTime" in html
    assert "BookKeeper looks shared" not in html
    assert sorted(parser.links) == ["#bookkeeper", "api/overview", "metrics"]
    # What the cycle cost ZooKeeper, beside the bound.
    cost = (*bk, "cost")
    assert {
        (*cost, "zk_reads"),
        (*cost, "zk_peak_reads_per_second"),
        (*cost, "records_read"),
        (*cost, "records_cached"),
        (*cost, "seconds", "ledgers"),
        (*cost, "seconds", "total"),
        (*cost, "cache", "cycles_since_full_read"),
        ("orphans", "zookeeper", "reads"),
        ("orphans", "zookeeper", "peak_per_second"),
        ("orphans", "zookeeper", "max_reads_per_second"),
    } <= shown
    assert "Cost to ZooKeeper" in html and COST["cache"]["why"] in html


def test_the_cost_to_zookeeper_is_in_the_metrics(bk_state):
    samples = parse_metrics(render_metrics(build_overview(bk_state)))["samples"]
    assert samples[("ledgergc_bookkeeper_survey_zk_reads", ())] == 31
    assert samples[("ledgergc_bookkeeper_survey_records", (("source", "read"),))] == 3
    assert samples[("ledgergc_bookkeeper_survey_records", (("source", "cache"),))] == 12
    assert samples[("ledgergc_bookkeeper_survey_seconds", (("step", "total"),))] == 3.0
    reads = {
        labels: value
        for (name, labels), value in samples.items()
        if name == "ledgergc_orphan_cycle_zk_reads"
    }
    assert reads == {
        (("step", "bookkeeper"),): 31,
        (("step", "delete"),): 9,
        (("step", "snapshot"),): 40,
    }
    assert samples[("ledgergc_orphan_cycle_zk_peak_reads_per_second", ())] == 40
    assert samples[("ledgergc_zk_max_reads_per_second", ())] == 5000


def test_a_summary_older_than_the_cost_figures_shows_none(tmp_path):
    run_log.append_run(
        tmp_path,
        run_log.ORPHANS,
        bk_cycle("old", T0, {k: v for k, v in bookkeeper_report().items() if k != "cost"}),
    )
    overview = build_overview(tmp_path)
    assert overview["orphans"]["bookkeeper"]["cost"] is None
    assert "Cost to ZooKeeper" not in render_page(overview)
    assert "ledgergc_bookkeeper_survey_zk_reads" not in render_metrics(overview)


def test_the_page_warns_when_bookkeeper_looks_shared_or_lacks_listed_ledgers(tmp_path):
    report = bookkeeper_report(
        deleted=0,
        live_elsewhere={"acme/prod/persistent/gone": SHARED_WHY},
        missing_listed=[{"ml_name": "acme/prod/persistent/a", "ledger_id": 5}],
    )
    run_log.append_run(tmp_path, run_log.ORPHANS, bk_cycle("o", T0, report))
    html = render_page(build_overview(tmp_path))

    assert "BookKeeper looks shared: every ledger of <code>acme/prod/persistent/gone</code>" in (
        html
    )
    assert "LEDGERGC_BK_SHARED=true" in html
    assert "missing from this BookKeeper root (e.g. acme/prod/persistent/a ledger 5)" in html
    # Nothing deleted: the general restore note, no command for this run.
    assert "ledgergc restore --run &lt;run id&gt;" in html


@pytest.mark.parametrize("off", [None, "missing"])
def test_no_bookkeeper_section_with_the_source_off(tmp_path, off):
    cycle = orphan_cycle("o", T0, phases={"registered": phase((1, 10))})
    if off is None:
        cycle["bookkeeper"] = None
    run_log.append_run(tmp_path, run_log.ORPHANS, cycle)

    for overview in (build_overview(tmp_path), build_overview(tmp_path / "never-written")):
        html = render_page(overview)
        assert "BookKeeper" not in html and 'id="bookkeeper"' not in html


def test_bookkeeper_orphans_still_registered_with_the_source_off_keep_a_section(tmp_path):
    cycle = orphan_cycle("o", T0, phases={"registered": bk_phase(bk_orphan_ledger=(3, 30))})
    cycle["bookkeeper"] = None
    run_log.append_run(tmp_path, run_log.ORPHANS, cycle)
    overview = build_overview(tmp_path)
    html = render_page(overview)
    parser = FigureParser()
    parser.feed(html)

    assert 'id="bookkeeper"' in html and "did not survey BookKeeper" in html
    assert parser.figures[("orphans", "phases", "registered", "bk-orphan-ledger", "count")] == 3
    assert not [key for key in parser.figures if key[:2] == ("orphans", "bookkeeper")]


# --- ledgergc status ------------------------------------------------------------------------


def test_status_json_and_plain_lines_carry_the_bookkeeper_figures(bk_state):
    data: dict[str, Any] = {"managed_ledgers": []}
    add_overview(data, Settings(state_dir=bk_state))
    lines = describe_overview(data["overview"])

    assert data["overview"]["orphans"]["bookkeeper"]["classes"]["bk-held"] == {
        "ledgers": 1,
        "bytes": 50,
    }
    assert (
        "  bookkeeper zk1:2181,zk2:2181/ledgers (hierarchical): 15 ledgers (14.0 KiB); "
        "bk-offloaded-copy 1 (3.9 KiB), bk-orphan-ledger 2 (300 B), bk-held 1 (50 B), "
        "bk-foreign 1 (7 B); deleted 1 (100 B reclaimed: the ledgers' logical length: on "
        "the bookies that times the write quorum, freed at their next garbage collection "
        "and compaction)"
    ) in lines
    assert "  bookkeeper held: unknown-namespace 1" in lines


def test_plain_status_has_no_bookkeeper_line_with_the_source_off(tmp_path):
    run_log.append_run(tmp_path, run_log.ORPHANS, orphan_cycle("o", T0))

    assert not [
        line for line in describe_overview(build_overview(tmp_path)) if "bookkeeper" in line
    ]


# --- the registered-orphan table ------------------------------------------------------------


def scheduled(prefix: str, target_class: str, **kw: Any) -> dict[str, Any]:
    """A ``ScheduledOrphan.to_dict()``."""
    return {
        "prefix": prefix,
        "class": target_class,
        "namespace": "acme/prod",
        "ml_name": "acme/prod/persistent/orders",
        "ledger_id": 42,
        "objects": 1,
        "bytes": 300,
        "first_seen_ms": T0,
        "last_seen_ms": T0,
        "newest_ms": T0,
        "scans_seen": 2,
        "first_scan": 1,
        "last_scan": 2,
        "first_run_id": "cli-1",
        "last_run_id": "cli-2",
        "deletable_at_ms": T0 + HOUR,
        "waiting_for": ["the next cycle"],
        "delete_attempts": 0,
        "last_error": None,
    } | kw


def listing(*orphans: dict[str, Any]) -> dict[str, Any]:
    return {
        "generated_at_ms": T0,
        "state_url": "sqlite:///x",
        "grace_seconds": 86400,
        "retention_seconds": 604800,
        "delete_enabled": True,
        "latest_scan": 2,
        "blocking_guards": [],
        "orphans": list(orphans),
    }


def test_registered_bookkeeper_ledgers_show_their_znode_and_ledger():
    znode = "/ledgers/00/0000/L0042"
    html = registered_section(
        listing(
            scheduled(f"bookkeeper:{znode}", "bk-orphan-ledger"),
            scheduled("ledgers/acme/prod/persistent/orders/ledgers/7/", "orphan-ledger", objects=4),
        )
    )

    assert f'data-prefix="bookkeeper:{znode}"' in html  # the registry's key, for scripts
    assert f"BookKeeper <code>{znode}</code>" in html
    assert "ledger 42 of acme/prod/persistent/orders" in html
    assert '<td class="n" data-sort="1">1 ledger</td>' in html
    assert "gcWaitTime" in html and "ledgergc restore --run &lt;run id&gt;" in html
    # An S3 orphan is shown as before: its prefix and its object count.
    assert "<code>ledgers/acme/prod/persistent/orders/ledgers/7/</code>" in html
    assert '<td class="n" data-sort="4">4</td>' in html


def test_a_registered_table_without_bookkeeper_rows_has_no_bookkeeper_note():
    html = registered_section(listing(scheduled("ledgers/a/b/persistent/c/", "orphan-partition")))

    assert "BookKeeper" not in html and "gcWaitTime" not in html


# --- what "reclaimed" means for BookKeeper ----------------------------------------------------


def _says_what_bookkeeper_bytes_are(text: str) -> bool:
    text = " ".join(text.split())
    return (
        "logical length" in text
        and "times the write quorum" in text
        and "next garbage collection and compaction" in text
    )


def test_bookkeeper_bytes_reclaimed_say_they_are_logical_and_freed_later(bk_state):
    # "31.0 MiB reclaimed" read as disk freed now; it is the records' length, stored on a
    # write quorum of bookies, freed by their garbage collection and compaction. The
    # figure stays what it counts.
    from ledger_gc.orphans.report import _bookkeeper_lines

    overview = build_overview(bk_state)
    assert overview["orphans"]["bookkeeper"]["bytes_reclaimed"] == 100
    report_line = next(_bookkeeper_lines(bookkeeper_report()))
    assert "100 B reclaimed" in report_line and _says_what_bookkeeper_bytes_are(report_line)
    data: dict[str, Any] = {"managed_ledgers": []}
    add_overview(data, Settings(state_dir=bk_state))
    [status_line] = [
        line for line in describe_overview(data["overview"]) if "100 B reclaimed" in line
    ]
    assert _says_what_bookkeeper_bytes_are(status_line)
    html = render_page(overview)
    section = html[html.index('id="bookkeeper"') :]
    assert _says_what_bookkeeper_bytes_are(section)


def test_a_pulsar_only_store_shows_no_trim_and_no_empty_block_store_figures(tmp_path):
    # LEDGERGC_BUCKET empty: no ledger blocks, no trim. The page showed a trim backlog of
    # zeros, "Trend over the last 0 runs" with empty charts, and a table of S3 classes.
    cycle = bk_cycle(
        "p", T0, bookkeeper_report(), phases={"registered": bk_phase(bk_orphan_ledger=(2, 200))}
    )
    cycle["settings"] = {"bucket": "", "zk_hosts": "zk1:2181"}
    run_log.append_run(tmp_path, run_log.ORPHANS, cycle)
    overview = build_overview(tmp_path)
    html = render_page(overview)

    assert overview["orphans"]["sources"] == {
        "blocks": False,
        "tiered": False,
        "bookkeeper": True,
        "pulsar_metadata": False,
    }
    assert "last 0 runs" not in html and "Pending markers" not in html
    assert "LEDGERGC_BUCKET empty" in html and 'id="bookkeeper"' in html
    assert "Orphan partitions count" not in html and "Orphan offloaded segments" not in html
    assert html.count("<svg") == 2  # the orphans' trend (count, bytes), BookKeeper's included


def test_a_store_with_a_bucket_keeps_its_trim_section_before_its_first_trim(tmp_path):
    cycle = orphan_cycle("o", T0)
    cycle["settings"] = {"bucket": "store"}
    run_log.append_run(tmp_path, run_log.ORPHANS, cycle)
    html = render_page(build_overview(tmp_path))

    assert "Pending markers" in html and "No trim run yet." in html
    assert "Orphan partitions count" in html and "Orphan offloaded segments" not in html
