"""Full orphan cycles against real ZooKeeper, SeaweedFS S3 and local Spark.

The store holds live data, a ledger the trim has marked (its data still there), and the
leaks ``include/demo_leaks.py`` plants (legacy-delete orphan ledgers, a deleted topic's
data, a foreign file). Only the leaks may ever go, and only after grace and retention.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from demo_leaks import plant_leaks
from ledger_gc import cli
from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans import cycle, survey_steps
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.run_log import read_runs

pytestmark = pytest.mark.spark

LIVE = "public/default/persistent/orders"
HOUR = 3600


def _store(settings: Settings, store_kit: Any) -> tuple[dict[str, Any], set[str], set[str]]:
    """Live data (one ledger marked by the trim) plus planted leaks."""
    ledgers = store_kit.managed_ledger(LIVE, entries=30, size=4000, per_ledger=10)
    store_kit.mark(LIVE, ledgers[:1])
    keep = store_kit.keys()
    planted = plant_leaks(settings, ml_name=LIVE)
    leaks = {leak["prefix"] for leak in planted["orphan_ledgers"] + planted["orphan_partitions"]}
    return planted, keep, leaks


def test_orphans_are_registered_wait_out_grace_and_only_they_are_deleted(
    settings: Settings, store_kit: Any, spark: Any, later: Callable[[float], Any]
) -> None:
    enabled = settings.with_overrides(
        delete_enabled=True, grace_seconds=HOUR, retention_seconds=HOUR
    )
    planted, keep, leaks = _store(settings, store_kit)

    first = run_orphan_cycle(resolve(enabled), spark=spark).to_dict()

    assert first["status"] == "ok" and first["dry_run"] is False
    assert first["classes"]["marked"]["units"] == 1
    assert first["classes"]["orphan-ledger"]["units"] == 2
    assert first["classes"]["orphan-partition"]["units"] == 1
    assert first["classes"]["foreign"]["objects"] == 1
    assert first["phases"]["new"]["count"] == 3
    assert first["phases"]["waiting_grace"]["count"] == 3
    assert first["phases"]["deleted"]["count"] == 0
    assert {w["prefix"] for w in first["waiting"]} == leaks
    assert all(w["until_ms"] >= w["first_seen_ms"] + HOUR * 1000 for w in first["waiting"])
    assert first["namespaces"]["public/default"]["phases"]["registered"]["count"] == 3
    assert store_kit.keys() >= keep | set(planted["foreign_keys"])

    second = run_orphan_cycle(resolve(enabled), spark=spark, **later(2)).to_dict()

    assert second["status"] == "ok"
    assert {d["prefix"] for d in second["deleted"]} == leaks
    assert second["phases"]["deleted"]["bytes"] == sum(
        leak["bytes"] for leak in planted["orphan_ledgers"] + planted["orphan_partitions"]
    )
    assert store_kit.keys() == keep | set(planted["foreign_keys"])
    assert OrphanRegistry(settings).entries() == {}
    audited = AuditLog(settings).read()
    assert {leak for leak in leaks for r in audited if r["prefix"].startswith(leak)} == leaks
    assert {r["operation"] for r in audited} == {"orphan-removal"}
    assert [run["status"] for run in read_runs(settings, "orphans")] == ["ok", "ok"]

    third = run_orphan_cycle(resolve(enabled), spark=spark, **later(3)).to_dict()
    assert third["phases"]["new"]["count"] == 0 and third["deleted"] == []


def test_a_dry_run_rechecks_and_reports_but_deletes_nothing(
    settings: Settings, store_kit: Any, spark: Any
) -> None:
    settings = settings.with_overrides(grace_seconds=0, retention_seconds=0)
    _, _, leaks = _store(settings, store_kit)
    before = store_kit.keys()

    report = run_orphan_cycle(resolve(settings), spark=spark).to_dict()  # deletion not enabled

    assert report["dry_run"] is True
    assert {item["prefix"] for item in report["would_delete"]} == leaks
    assert report["phases"]["would_delete"]["count"] == 3
    assert report["phases"]["registered"]["count"] == 3
    assert store_kit.keys() == before
    assert AuditLog(settings).read() == []


def test_many_entries_are_rechecked_and_deleted_on_the_executors(
    settings: Settings, store_kit: Any, spark: Any
) -> None:
    settings = settings.with_overrides(delete_enabled=True, grace_seconds=0, retention_seconds=0)
    _, keep, leaks = _store(settings, store_kit)
    run_id = "distributed"
    survey_steps.step_snapshot(resolve(settings), run_id, spark)
    survey_steps.step_scan(resolve(settings), run_id, spark)
    survey_steps.step_diff(resolve(settings), run_id, spark)
    cycle.step_phases(resolve(settings), run_id)

    result = cycle.step_delete(resolve(settings), run_id, spark=spark, distribute_over=0)

    assert {r.prefix for r in result.results if r.action == "deleted"} == leaks
    assert store_kit.keys() == keep | {settings.key_prefix + "_operator-notes/README.txt"}
    assert OrphanRegistry(settings).entries() == {}


def test_ledgergc_orphans_json(
    settings: Settings,
    store_kit: Any,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _store(settings, store_kit)
    for name, value in settings.to_env().items():
        monkeypatch.setenv(name, value)

    status = cli.main(["orphans", "--json", "--dry-run"])

    out = capsys.readouterr().out
    report = json.loads(out)
    assert status == 0, out
    assert report["kind"] == "orphans" and report["status"] == "ok"
    assert report["phases"]["new"]["count"] == 3
    print(out)  # the example in the report

    assert cli.main(["orphans"]) == 0
    text = capsys.readouterr().out
    assert "waiting (waiting-grace)" in text and "foreign keys under the prefix" in text

    # What will be deleted, and when: the registry, read back without a cycle.
    assert cli.main(["orphans", "--list", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert {o["prefix"] for o in listing["orphans"]} == {w["prefix"] for w in report["waiting"]}
    for item in listing["orphans"]:
        assert item["scans_seen"] == 2  # the dry run and the run after it
        assert item["waiting_for"][0] == "grace"
        assert "deletion disabled" in item["waiting_for"]
        assert "retention" in item["waiting_for"]
        # Grace and retention on the servers' clocks, shown in the host's (seconds apart).
        grace_end = item["first_seen_ms"] + settings.grace_seconds * 1000
        retention_end = item["newest_ms"] + settings.retention_seconds * 1000
        assert abs(item["deletable_at_ms"] - max(grace_end, retention_end)) < 30_000
    assert cli.main(["orphans", "--list"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("3 registered orphan(s)") and "waits for grace" in text
