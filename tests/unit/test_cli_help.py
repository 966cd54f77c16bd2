"""What ``ledgergc --help`` and its subcommands' help say: every store, every refusal."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ledger_gc.cli import main
from ledger_gc.rules.orphans import guards
from ledger_gc.rules.pulsar_metadata import guards as pm_guards


@pytest.fixture(autouse=True)
def _wide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # argparse breaks lines at hyphens otherwise


def help_of(capsys: pytest.CaptureFixture[str], *command: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())


def test_the_command_names_every_storage_it_cleans(capsys):
    text = help_of(capsys)
    assert "(ZooKeeper + S3)" not in text
    for storage in ("S3", "tiered storage", "BookKeeper"):
        assert storage in text


def test_restore_names_bookkeeper_ledgers_and_versioned_buckets(capsys):
    text = help_of(capsys, "restore")
    assert "BookKeeper ledgers" in text and "garbage collection" in text
    assert "versioned bucket" in text and "trim" in text and "offloaded segments" in text


def _every_refusal_forced() -> set[str]:
    """Trip every guard of every source in a forced run: the refusals it goes past."""
    diff = {
        "managed_ledgers": 0,
        "block_objects": 10,
        "segment_objects": 2,
        "classes": {"orphan-segment": {"units": 1}},
        "offload": {"bucket": "tiered", "prefix": ""},
        "orphan_fraction": 1.0,
        "orphan_bytes": 100,
        "bytes": 100,
    }
    survey = {
        "hosts": "zk:2181",
        "root": "/ledgers",
        "managed_ledgers": 0,
        "pulsar_ledgers": 3,
        "missing_listed": [{"ledger_id": 7, "ml_name": "t/ns/persistent/x"}],
        "listed_in_bookkeeper": 0,
        "above_counter": [9],
        "id_counter": 5,
        "bytes": 100,
        "orphan_bytes": 100,
    }
    stale = guards.stale_metadata([SimpleNamespace(reason="ledger 9 above")], "zk", force=True)
    refusals = [
        *guards.evaluate_guards(diff, 0.1, force=True),
        *guards.bookkeeper_refusals(survey, 0.1, force=True),
        *pm_guards.refusals(
            {"namespaces_with_topics": 1, "deleted_with_topics_count": 1}, force=True
        ),
        *([stale] if stale else []),
    ]
    assert all(refusal.forced for refusal in refusals)
    return {refusal.guard for refusal in refusals}


def test_force_names_every_refusal_it_goes_past(capsys):
    forced = _every_refusal_forced()
    assert forced == set(guards.FORCEABLE)
    text = help_of(capsys, "orphans")
    for guard in forced:
        assert guard in text, guard


def test_orphans_names_every_source_and_restore_names_pulsar_metadata(capsys):
    """Review 3 of issue 34: the Pulsar-metadata source is one of the cycle's sources."""
    text = help_of(capsys, "orphans")
    for setting in ("LEDGERGC_OFFLOAD_BUCKET", "LEDGERGC_BOOKKEEPER", "LEDGERGC_PULSAR_METADATA"):
        assert setting in text, setting
    assert "Pulsar's own metadata" in text
    assert "Pulsar-metadata znodes" in help_of(capsys, "restore")
