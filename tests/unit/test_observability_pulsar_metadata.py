"""The Pulsar-metadata source in the overview, its metrics (``ledgergc_pulsar_metadata_*``,
``ledgergc_bk_missing_ledgers``), the page's "Pulsar metadata" section and ``ledgergc
status``; and, with the source off, none of them.

Cycle summaries follow ``orphans/report.py``: their ``pulsar_metadata`` is the survey's
``PulsarMetadataManifest.to_manifest()`` (built here with that class, so a change of its
shape shows), the pm items of ``deleted`` carry the znodes removed as ``objects``, and
the BookKeeper part carries ``leftover_ledgers`` and ``bk_missing``. No server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_observability import FigureParser, lookup, orphan_cycle, parse_metrics, phase
from test_observability_bookkeeper import bk_cycle, bk_phase, bookkeeper_report

from ledger_gc import run_log
from ledger_gc.config.settings import Settings
from ledger_gc.observability.metrics import render_metrics
from ledger_gc.observability.overview import build_overview
from ledger_gc.observability.page import render_page
from ledger_gc.observability.status_section import add_overview, describe_overview
from ledger_gc.rules.pulsar_metadata.classes import (
    CONFIG,
    EXPLANATIONS,
    LOCAL,
    PM_CLASSES,
    LeftoverTotals,
    PulsarMetadataManifest,
    target_of,
)

T0 = 1_700_000_000_000
HOUR = 3_600_000
STUCK_COMMAND = "pulsar-admin namespaces delete --force acme/stuck"


def manifest(**overrides: Any) -> dict[str, Any]:
    """A survey that found a namespace deleted half way (9 znodes, 3 ledgers named), a
    deleted tenant's partitioned-topic metadata, a dead broker's heartbeat, a stuck
    delete, a namespace not replicated here, and a held leftover (a bundle owned)."""
    m = PulsarMetadataManifest(
        local_hosts="zk1:2181/pulsar",
        config_hosts="cfg1:2184",
        namespaces=7,
        tenants=3,
        local_znodes=120,
        classes={
            "pm-deleted-namespace": {LOCAL: LeftoverTotals(1, 9, 900, 3, 0)},
            "pm-deleted-tenant": {
                LOCAL: LeftoverTotals(1, 4, 40, 1, 0),
                CONFIG: LeftoverTotals(1, 3, 60, 0, 0),
            },
            "pm-dead-broker": {LOCAL: LeftoverTotals(1, 2, 20, 1, 0)},
            "pm-stuck-delete": {CONFIG: LeftoverTotals(1, 1, 300, 0, 0)},
            "pm-not-replicated-here": {CONFIG: LeftoverTotals(1, 1, 200, 0, 0)},
        },
        samples={
            "pm-deleted-namespace": [
                {
                    "name": "acme/gone",
                    "store": LOCAL,
                    "why": "policies gone, tenant acme exists",
                    "znodes": 9,
                    "ledgers": [11, 12, 13],
                }
            ],
            "pm-stuck-delete": [
                {
                    "name": "acme/stuck",
                    "store": CONFIG,
                    "why": "deleted=true for 3 h",
                    "znodes": 1,
                    "command": STUCK_COMMAND,
                }
            ],
            "pm-not-replicated-here": [
                {
                    "name": "acme/elsewhere",
                    "store": CONFIG,
                    "why": "replication_clusters [us-west] excludes us-east",
                }
            ],
        },
        held=[
            {
                "name": "acme/owned",
                "store": LOCAL,
                "class": "pm-deleted-namespace",
                "why": "a broker owns bundle 0x00000000_0xffffffff (ephemeral)",
            }
        ],
    ).to_manifest()
    return m | overrides


def bk_with_leftovers() -> dict[str, Any]:
    return bookkeeper_report(
        leftover_ledgers={
            target_of(LOCAL, "acme/gone"): {"ledgers": 3, "bytes": 3_000_000},
            target_of(LOCAL, "pulsar/broker-9:8080"): {"ledgers": 1, "bytes": 1_000},
        },
        bk_missing={
            "count": 1,
            "samples": [
                {
                    "topic": "acme/prod/persistent/broken",
                    "ledger_id": 404,
                    "named_by": "/managed-ledgers/acme/prod/persistent/broken",
                }
            ],
        },
    )


def pm_cycle(run_id: str, finished_ms: int, pm: Any, **kw: Any) -> dict[str, Any]:
    cycle = bk_cycle(run_id, finished_ms, bk_with_leftovers(), **kw)
    cycle["pulsar_metadata"] = pm
    return cycle


def removed(name: str, cls: str, znodes: int, store: str = LOCAL) -> dict[str, Any]:
    """A ``deleted`` item of a cycle's report for one leftover."""
    return {
        "prefix": target_of(store, name),
        "target_class": cls,
        "ml_name": name,
        "ledger_id": None,
        "objects": znodes,
        "bytes": znodes * 10,
        "reason": "a leftover",
        "recoverable": False,
    }


@pytest.fixture
def pm_state(tmp_path: Path) -> Path:
    """An older cycle without the key, then one that removed 7 local znodes of a deleted
    namespace and 3 of a tenant's in the configuration store."""
    run_log.append_run(tmp_path, run_log.ORPHANS, orphan_cycle("orphans-old", T0))
    cycle = pm_cycle(
        "orphans-pm",
        T0 + HOUR,
        manifest(),
        phases={
            "registered": bk_phase(pm_deleted_namespace=(1, 900), pm_dead_broker=(1, 20)),
            "deleted": bk_phase(pm_deleted_namespace=(1, 70), pm_deleted_tenant=(1, 30)),
        },
    )
    cycle["deleted"] = [
        removed("acme/gone", "pm-deleted-namespace", 7),
        removed("gone-tenant", "pm-deleted-tenant", 3, CONFIG),
        # Not a pm class: not counted as znodes.
        {"prefix": "ledgers/x/", "target_class": "orphan-partition", "objects": 40},
    ]
    run_log.append_run(tmp_path, run_log.ORPHANS, cycle)
    return tmp_path


# --- the overview ---------------------------------------------------------------------------


def test_the_overview_carries_the_latest_cycles_pulsar_metadata(pm_state):
    orphans = build_overview(pm_state)["orphans"]
    pm = orphans["pulsar_metadata"]

    assert (pm["local_hosts"], pm["config_hosts"], pm["tenants"], pm["namespaces"]) == (
        "zk1:2181/pulsar",
        "cfg1:2184",
        3,
        7,
    )
    # Before: the survey's count; after: less the local znodes this cycle removed.
    assert pm["local_znodes"] == {"before": 120, "deleted": 7, "after": 113}
    assert pm["znodes_deleted"] == {LOCAL: 7, CONFIG: 3}
    assert list(pm["classes"]) == [c for c in PM_CLASSES if c != "bk-missing"]
    assert pm["classes"]["pm-deleted-namespace"][LOCAL] == {
        "leftovers": 1,
        "znodes": 9,
        "bytes": 900,
        "ledgers": 3,
        "ledger_bytes": 0,
    }
    assert pm["classes"]["pm-dead-broker"][CONFIG]["znodes"] == 0  # every store, at 0
    assert pm["explanations"]["bk-missing"] == EXPLANATIONS["bk-missing"]
    [stuck] = pm["stuck_deletes"]
    assert (stuck["name"], stuck["command"]) == ("acme/stuck", STUCK_COMMAND)
    [elsewhere] = pm["not_replicated"]
    assert "excludes us-east" in elsewhere["why"]
    [held] = pm["held"]
    assert (held["name"], held["class"]) == ("acme/owned", "pm-deleted-namespace")
    assert pm["held_count"] == 1
    assert "bundle" in held["why"]
    [gone] = pm["leftovers"]
    assert (gone["name"], gone["znodes"], gone["ledgers"]) == ("acme/gone", 9, 3)
    assert pm["held_back"]["bytes"] == 3_001_000 and pm["held_back"]["ledgers"] == 4
    assert list(pm["held_back"]["targets"]) == [
        "pulsar-metadata:local:acme/gone",  # the largest first
        "pulsar-metadata:local:pulsar/broker-9:8080",
    ]
    assert orphans["bookkeeper"]["bk_missing"]["samples"][0]["ledger_id"] == 404
    assert orphans["sources"]["pulsar_metadata"] is True
    # Leftovers go through the phases like every other target.
    assert orphans["phases"]["deleted"]["pm-deleted-tenant"] == {"count": 1, "bytes": 30}
    json.dumps(pm)


def test_znodes_deleted_per_store_as_the_report_gives_them_win(tmp_path):
    # The report's deleted list is cut at 200 leftovers; its own figures are not.
    cycle = pm_cycle("o", T0, manifest(znodes_deleted={"local": 1000, "config": 2}))
    cycle["deleted"] = [removed("acme/gone", "pm-deleted-namespace", 7)]
    run_log.append_run(tmp_path, run_log.ORPHANS, cycle)
    pm = build_overview(tmp_path)["orphans"]["pulsar_metadata"]
    assert pm["znodes_deleted"] == {LOCAL: 1000, CONFIG: 2}
    assert pm["local_znodes"] == {"before": 120, "deleted": 1000, "after": 0}


def test_a_dry_run_leaves_the_znode_count_as_it_was(tmp_path):
    run_log.append_run(tmp_path, run_log.ORPHANS, pm_cycle("o", T0, manifest()))
    pm = build_overview(tmp_path)["orphans"]["pulsar_metadata"]
    assert pm["local_znodes"] == {"before": 120, "deleted": 0, "after": 120}


@pytest.mark.parametrize("off", [None, "missing"])
def test_a_cycle_with_the_source_off_has_no_figures(pm_state, off):
    cycle = orphan_cycle("orphans-off", T0 + 2 * HOUR)
    if off is None:
        cycle["pulsar_metadata"] = None
    run_log.append_run(pm_state, run_log.ORPHANS, cycle)

    overview = build_overview(pm_state)
    assert overview["orphans"]["pulsar_metadata"] is None
    html = render_page(overview)
    assert 'id="pulsar-metadata"' not in html
    assert "ledgergc_pulsar_metadata" not in render_metrics(overview)
    assert not [line for line in describe_overview(overview) if "pulsar metadata" in line]


@pytest.mark.parametrize(
    "odd",
    [
        {},
        {"classes": "garbage", "samples": [1], "held": None, "local_znodes": "many"},
        {"classes": {"pm-deleted-namespace": {"local": {"znodes": "4"}, "elsewhere": 1}}},
        {"samples": {"pm-stuck-delete": [{"name": 1}, "x"]}, "held": [{"reason": "why"}]},
    ],
)
def test_odd_pulsar_metadata_values_read_as_zero(tmp_path, odd):
    cycle = pm_cycle("o", T0, odd)
    cycle["bookkeeper"] = {"bk_missing": {"count": "x", "samples": [None, {"ledger_id": "7"}]}}
    cycle["deleted"] = [{"target_class": "pm-dead-broker", "prefix": None, "objects": "2"}]
    run_log.append_run(tmp_path, run_log.ORPHANS, cycle)

    overview = build_overview(tmp_path)
    pm = overview["orphans"]["pulsar_metadata"]
    render_metrics(overview)
    render_page(overview)
    describe_overview(overview)

    assert set(pm["classes"]) >= {"pm-deleted-namespace", "pm-stuck-delete"}
    assert pm["local_znodes"]["after"] == 0  # never below zero
    assert pm["explanations"]["pm-dead-broker"] == EXPLANATIONS["pm-dead-broker"]
    assert overview["orphans"]["bookkeeper"]["bk_missing"]["samples"] == [
        {"topic": "", "ledger_id": 7, "named_by": ""}
    ]


# --- metrics --------------------------------------------------------------------------------


def test_metrics_count_znodes_per_class_and_store_and_the_local_store(pm_state):
    text = render_metrics(build_overview(pm_state))
    parsed = parse_metrics(text)
    samples = parsed["samples"]

    def value(name: str, cls: str, store: str) -> float:
        return samples[(name, (("class", cls), ("store", store)))]

    for name in (
        "ledgergc_pulsar_metadata_leftovers",
        "ledgergc_pulsar_metadata_znodes",
        "ledgergc_pulsar_metadata_znode_bytes",
        "ledgergc_pulsar_metadata_ledgers",
        "ledgergc_pulsar_metadata_local_znodes",
        "ledgergc_pulsar_metadata_held_back_bytes",
        "ledgergc_bk_missing_ledgers",
    ):
        assert parsed["types"][name] == "gauge", name
    assert value("ledgergc_pulsar_metadata_znodes", "pm-deleted-namespace", "local") == 9
    assert value("ledgergc_pulsar_metadata_znodes", "pm-deleted-tenant", "config") == 3
    assert value("ledgergc_pulsar_metadata_znode_bytes", "pm-stuck-delete", "config") == 300
    assert value("ledgergc_pulsar_metadata_leftovers", "pm-not-replicated-here", "config") == 1
    assert value("ledgergc_pulsar_metadata_ledgers", "pm-deleted-namespace", "local") == 3
    assert value("ledgergc_pulsar_metadata_znodes", "pm-dead-broker", "config") == 0
    assert samples[("ledgergc_pulsar_metadata_local_znodes", (("when", "before"),))] == 120
    assert samples[("ledgergc_pulsar_metadata_local_znodes", (("when", "after"),))] == 113
    assert samples[("ledgergc_pulsar_metadata_held_back_bytes", ())] == 3_001_000
    assert samples[("ledgergc_bk_missing_ledgers", ())] == 1


def test_bk_missing_is_counted_with_the_bookkeeper_source_alone(tmp_path):
    run_log.append_run(tmp_path, run_log.ORPHANS, bk_cycle("o", T0, bk_with_leftovers()))
    overview = build_overview(tmp_path)
    samples = parse_metrics(render_metrics(overview))["samples"]
    html = render_page(overview)

    assert samples[("ledgergc_bk_missing_ledgers", ())] == 1
    assert "ledgergc_pulsar_metadata" not in render_metrics(overview)
    # No Pulsar-metadata section: the BookKeeper section names the topic.
    assert 'id="pulsar-metadata"' not in html
    assert "acme/prod/persistent/broken ledger 404" in html


# --- the page -------------------------------------------------------------------------------


def test_the_page_shows_the_pulsar_metadata_section_with_the_overviews_figures(pm_state):
    overview = build_overview(pm_state)
    html = render_page(overview)
    parser = FigureParser()
    parser.feed(html)

    for path, value in parser.figures.items():
        assert lookup(overview, path) == value, path
    pm = ("orphans", "pulsar_metadata")
    assert {
        (*pm, "local_znodes", "before"),
        (*pm, "local_znodes", "after"),
        (*pm, "znodes_deleted", "local"),
        (*pm, "znodes_deleted", "config"),
        (*pm, "held_back", "bytes"),
        (*pm, "held_back", "ledgers"),
        (*pm, "classes", "pm-deleted-namespace", "local", "znodes"),
        (*pm, "classes", "pm-deleted-namespace", "local", "ledger_bytes"),
        (*pm, "held_count"),
        (*pm, "classes", "pm-deleted-tenant", "config", "znodes"),
        (*pm, "classes", "pm-stuck-delete", "config", "leftovers"),
        (*pm, "held_back", "targets", "pulsar-metadata:local:acme/gone", "bytes"),
        ("orphans", "bookkeeper", "bk_missing", "count"),
        ("orphans", "bookkeeper", "bk_missing", "samples", 0, "ledger_id"),
        ("orphans", "phases", "registered", "pm-dead-broker", "count"),
        ("orphans", "phases", "deleted", "pm-deleted-tenant", "bytes"),
    } <= set(parser.figures)
    # Classes with nothing in a store are not rows.
    assert (*pm, "classes", "pm-dead-broker", "config", "znodes") not in parser.figures
    assert html.index('id="bookkeeper"') < html.index('id="pulsar-metadata"')
    assert html.index('id="pulsar-metadata"') < html.index('id="trim"')
    assert f"<code>{STUCK_COMMAND}</code>" in html
    assert "acme/elsewhere" in html and "replication_clusters [us-west] excludes us-east" in html
    assert "acme/owned" in html and "a broker owns bundle" in html
    assert "<code>acme/prod/persistent/broken</code>" in html
    assert "/managed-ledgers/acme/prod/persistent/broken" in html
    assert "ledgergc restore --run orphans-pm</code>" in html
    assert EXPLANATIONS["pm-deleted-namespace"] in html
    assert "<code>cfg1:2184</code>" in html
    # Listed once: in this section, not in BookKeeper's too.
    assert html.count("<code>acme/prod/persistent/broken</code>") == 1


def test_leftovers_registered_with_the_source_off_keep_a_section(tmp_path):
    cycle = orphan_cycle("o", T0, phases={"registered": bk_phase(pm_deleted_tenant=(2, 20))})
    run_log.append_run(tmp_path, run_log.ORPHANS, cycle)
    overview = build_overview(tmp_path)
    html = render_page(overview)
    parser = FigureParser()
    parser.feed(html)

    assert 'id="pulsar-metadata"' in html and "did not survey Pulsar" in html
    assert parser.figures[("orphans", "phases", "registered", "pm-deleted-tenant", "count")] == 2
    assert not [key for key in parser.figures if key[:2] == ("orphans", "pulsar_metadata")]


def test_no_section_and_no_pm_figures_before_any_cycle(tmp_path):
    overview = build_overview(tmp_path)
    assert overview["orphans"]["pulsar_metadata"] is None
    assert 'id="pulsar-metadata"' not in render_page(overview)
    run_log.append_run(tmp_path, run_log.ORPHANS, orphan_cycle("o", T0, phases={"new": phase()}))
    assert 'id="pulsar-metadata"' not in render_page(build_overview(tmp_path))


# --- ledgergc status ------------------------------------------------------------------------


def test_status_plain_lines_carry_the_pulsar_metadata_figures(pm_state):
    data: dict[str, Any] = {"managed_ledgers": []}
    add_overview(data, Settings(state_dir=pm_state))
    lines = describe_overview(data["overview"])

    assert (
        "  pulsar metadata zk1:2181/pulsar (config store cfg1:2184): local store znodes "
        "120 -> 113; pm-deleted-namespace 1 (local 9 znodes), pm-deleted-tenant 2 (local 4 "
        "znodes, config 3 znodes), pm-dead-broker 1 (local 2 znodes), pm-stuck-delete 1 "
        "(config 1 znodes), pm-not-replicated-here 1 (config 1 znodes); holding back 4 "
        "BookKeeper ledgers (2.9 MiB)"
    ) in lines
    assert f"  pulsar metadata stuck delete acme/stuck: {STUCK_COMMAND}" in lines
    assert (
        "  bk-missing: 1 ledgers named but not in BookKeeper, e.g. "
        "acme/prod/persistent/broken ledger 404"
    ) in lines


# --- the registered-orphan table ------------------------------------------------------------


def test_registered_leftovers_show_their_name_store_and_znodes():
    from test_observability_bookkeeper import listing, scheduled

    from ledger_gc.observability.registered_table import registered_section

    target = target_of(CONFIG, "oldco")
    html = registered_section(
        listing(scheduled(target, "pm-deleted-tenant", ledger_id=None, ml_name="oldco", objects=4))
    )

    assert f'data-prefix="{target}"' in html  # the registry's key, for scripts
    assert "Pulsar metadata <code>oldco</code>" in html and "configuration store" in html
    assert '<td class="n" data-sort="4">4 znodes</td>' in html
