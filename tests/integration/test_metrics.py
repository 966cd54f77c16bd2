"""``ledgergc status --metrics`` and ``--json``'s overview, from real runs against the local
stack: a trim that reclaimed ledgers, a marker whose delete failed, an orphan cycle.

The orphan test reads a real cycle's report through ``observability.runs``, so a change
of the report's shape that the page and the metrics would no longer follow fails here.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from test_status_command import run_ledgergc

from demo_leaks import plant_leaks
from ledger_gc import marking
from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import resolve, zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.observability.runs import CLASSES, PHASES
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.run_log import TRIM, read_runs
from ledger_gc.trim.run import run_trim

SAMPLE = re.compile(r"^([A-Za-z_:][\w:]*)(\{[^}]*\})? (\S+)$")


def samples(text: str) -> dict[str, float]:
    """``{"name{labels}": value}`` of every sample line."""
    found = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        found[match[1] + (match[2] or "")] = float(match[3])
    return found


def fail_a_marker(settings: Settings, name: str) -> int:
    """Mark the first ledger of ``name`` and record a failed delete (the trim's phase one,
    then S3 refusing); return its size."""
    with MetadataStore.open(zk_endpoint(settings)) as store:
        first = store.get_managed_ledger(name).value.ledgerInfo[0]

        def mutate(info: Any) -> bool:
            now = int(time.time() * 1000)
            marking.mark_deletable(info, [first.ledgerId], now)
            marking.record_failures(info, {first.ledgerId: "SlowDown: try again"}, now)
            return True

        store.update_managed_ledger(name, mutate)
    return int(first.size)


def test_metrics_and_overview_after_a_trim_and_a_failed_delete(settings, store_kit):
    store_kit.managed_ledger("acme/prod/persistent/a", entries=30, size=100, per_ledger=10)
    report = run_trim(resolve(settings), source="test")
    store_kit.managed_ledger("acme/prod/persistent/b", entries=20, size=50, per_ledger=10)
    pending_bytes = fail_a_marker(settings, "acme/prod/persistent/b")

    metrics = run_ledgergc(settings, "status", "--metrics")
    as_json = run_ledgergc(settings, "status", "--json")
    plain = run_ledgergc(settings, "status")

    assert metrics.returncode == 0, metrics.stderr
    values = samples(metrics.stdout)
    reclaimed = sum(r["bytes"] for r in AuditLog(settings).deletions())
    [summary] = read_runs(settings, TRIM)
    assert reclaimed == report.totals()["bytes_reclaimed"] > 0
    assert values['ledgergc_reclaimed_bytes_total{operation="trim"}'] == reclaimed
    assert values['ledgergc_reclaimed_bytes_total{operation="orphan-removal"}'] == 0
    assert values["ledgergc_trim_markers_pending"] == 1
    assert values["ledgergc_trim_marker_pending_bytes"] == pending_bytes
    assert 0 <= values["ledgergc_trim_marker_oldest_age_seconds"] < 120
    assert values['ledgergc_last_success_timestamp_seconds{job="trim"}'] == (
        summary["finished_at"] / 1000
    )
    # No orphan cycle yet: the families are declared, with no sample to mistake for 0.
    assert "# TYPE OrphanLogPartitionCount gauge" in metrics.stdout
    assert not [name for name in values if name.startswith("OrphanLog")]

    overview = json.loads(as_json.stdout)["overview"]
    assert overview["trim"]["backlog"]["source"] == "live"
    assert overview["trim"]["backlog"]["pending_markers"] == 1
    [error] = overview["trim"]["last_errors"]
    assert (error["ml"], error["error"], error["attempts"]) == (
        "acme/prod/persistent/b",
        "SlowDown: try again",
        1,
    )
    assert overview["deletions"]["deleted_units"]["trim"] == report.totals()["ledgers_deleted"]
    assert plain.returncode == 0, plain.stderr
    assert "reclaimed (audit log): orphan-removal 0 B, trim " in plain.stdout
    assert "last successful runs: trim " in plain.stdout


@pytest.mark.spark
def test_a_real_orphan_cycle_is_read_phase_by_phase(settings, store_kit, spark):
    # Enough live data that the leaks stay under the orphan-fraction guard's 10 %.
    store_kit.managed_ledger("public/default/persistent/orders", entries=50, size=2000)
    plant_leaks(settings, ml_name="public/default/persistent/orders")
    cycle = run_orphan_cycle(resolve(settings), spark=spark).to_dict()

    metrics = run_ledgergc(settings, "status", "--metrics")
    overview = json.loads(run_ledgergc(settings, "status", "--json").stdout)["overview"]

    orphans = overview["orphans"]
    assert orphans["latest"]["run_id"] == cycle["run_id"]
    assert cycle["status"] == "ok", cycle["refusals"]
    assert orphans["latest"]["dry_run"] is True  # deletion is off by default
    for phase in PHASES:
        assert orphans["phase_totals"][phase] == {
            "count": cycle["phases"][phase]["count"],
            "bytes": cycle["phases"][phase]["bytes"],
        }, phase
        for cls in CLASSES:
            assert orphans["phases"][phase][cls] == cycle["phases"][phase]["by_class"][cls]
    for namespace, figures in cycle["namespaces"].items():
        for cls in CLASSES:
            registered = figures["phases"]["registered"]["by_class"][cls]
            assert orphans["namespaces"][namespace]["registered"][cls] == registered
    assert orphans["phase_totals"]["waiting_grace"]["count"] == 3  # 2 ledgers, 1 partition

    values = samples(metrics.stdout)
    assert values['OrphanLogLedgerCount{namespace="public/default",phase="waiting_grace"}'] == 2
    assert values['OrphanLogPartitionCount{namespace="public/default",phase="registered"}'] == 1
    assert (
        values['OrphanLogPartitionSize{namespace="public/default",phase="registered"}']
        == (cycle["phases"]["registered"]["by_class"]["orphan-partition"]["bytes"])
    )
    assert values['ledgergc_last_success_timestamp_seconds{job="orphans"}'] == (
        cycle["finished_ms"] / 1000
    )


@pytest.mark.spark
def test_a_pulsar_clusters_own_metadata_is_read_into_the_overview_and_metrics(
    pulsar, zk_client, s3_client, spark
):
    """The demo's Pulsar cluster (include/demo_pulsar.py) after one real cycle: what the
    overview, the page and the metrics show of its metadata is the cycle's own record."""
    import demo_pulsar
    from ledger_gc.observability.overview import build_overview
    from ledger_gc.observability.page import render_page
    from ledger_gc.observability.pm_runs import pulsar_metadata_figures

    settings = pulsar.with_overrides(pulsar_clusters=(demo_pulsar.CLUSTER,))
    planted = demo_pulsar.plant(zk_client, s3_client, settings.offload_bucket)
    cycle = run_orphan_cycle(resolve(settings), spark=spark).to_dict()
    demo_pulsar.check(zk_client, planted)  # nothing live or kept touched
    assert cycle.get("pulsar_metadata") is not None, "the Pulsar-metadata source was off"

    metrics = run_ledgergc(settings, "status", "--metrics")
    overview = json.loads(run_ledgergc(settings, "status", "--json").stdout)["overview"]
    pm = overview["orphans"]["pulsar_metadata"]
    assert pm == json.loads(json.dumps(pulsar_metadata_figures(cycle)))
    classes = pm["classes"]
    assert classes["pm-deleted-namespace"]["local"]["leftovers"] >= 1  # acme/gone
    assert classes["pm-deleted-tenant"]["local"]["leftovers"] >= 1  # oldco/ns1
    assert classes["pm-deleted-tenant"]["config"]["leftovers"] >= 1  # its partitioned topic
    assert classes["pm-dead-broker"]["local"]["leftovers"] == 1
    assert [i["name"] for i in pm["not_replicated"]] == ["acme/elsewhere"]
    assert [i["name"] for i in pm["held"]] == ["acme/owned"]
    assert pm["local_znodes"]["before"] > 0
    assert pm["local_znodes"]["after"] == pm["local_znodes"]["before"]  # nothing removed yet
    topics = [m["topic"] for m in overview["orphans"]["bookkeeper"]["bk_missing"]["samples"]]
    # (As the BookKeeper survey names it: persistent://public/default/broken.)
    assert len(topics) == 1 and "public/default" in topics[0] and topics[0].endswith("/broken")

    values = samples(metrics.stdout)
    for cls, per_store in classes.items():
        for store, leaf in per_store.items():
            labels = f'{{class="{cls}",store="{store}"}}'
            assert values[f"ledgergc_pulsar_metadata_znodes{labels}"] == leaf["znodes"]
    assert (
        values['ledgergc_pulsar_metadata_local_znodes{when="before"}']
        == (pm["local_znodes"]["before"])
    )
    assert values["ledgergc_bk_missing_ledgers"] == 1
    html = render_page(build_overview(settings))
    assert 'id="pulsar-metadata"' in html and "acme/elsewhere" in html
