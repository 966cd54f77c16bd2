"""The demo's two stores (its managed-ledger store and its Pulsar cluster) keep their runs
in one state store: ``bin/airflow --state-dir var/demo/state`` shows everything the demo
did, its BookKeeper section included (the cluster's runs went to ``var/demo/pulsar-state``,
which no command showed beside the rest)."""

from __future__ import annotations

from pathlib import Path

import pytest

import demo_pulsar
from ledger_gc import run_log
from ledger_gc.config.settings import Settings
from run_demo import STATE_DIR, pulsar_settings, runs_of


def demo_store(state_dir: Path) -> Settings:
    return Settings(
        zk_address="127.0.0.1:2181/ledger-gc-demo", bucket="ledger-gc-demo", state_dir=state_dir
    )


def test_the_pulsar_cluster_of_the_demo_shares_the_demos_state_store():
    store = demo_store(STATE_DIR)
    pulsar = pulsar_settings(store)

    assert pulsar.zk_hosts == f"127.0.0.1:2181{demo_pulsar.CHROOT}"
    assert (pulsar.bucket, pulsar.bookkeeper) == ("", "true")
    assert (pulsar.state_dir, pulsar.state_url) == (store.state_dir, store.state_url)
    assert STATE_DIR.name == "state" and STATE_DIR.parent.name == "demo"  # the README's


def test_each_part_of_the_demo_reports_its_own_cycles(tmp_path: Path):
    store = demo_store(tmp_path)
    pulsar = pulsar_settings(store)
    for settings, run_id in ((store, "s3-1"), (store, "s3-2"), (pulsar, "bk-1")):
        summary = {"run_id": run_id, "settings": {"zk_hosts": settings.zk_hosts}}
        run_log.append_run(settings, run_log.ORPHANS, summary)

    assert [r["run_id"] for r in runs_of(store, run_log.ORPHANS)] == ["s3-1", "s3-2"]
    assert [r["run_id"] for r in runs_of(pulsar, run_log.ORPHANS)] == ["bk-1"]


def test_the_demo_expects_a_leftovers_records_then_its_parents_then_its_ledgers():
    from run_demo import _leftover_order

    there = {"leaks": {"acme/gone: listed ledger 1": False, "old cursor ledger": False}}
    in_order = {"acme/gone: records": 2, "acme/gone: parents": 4, "acme/gone: listed ledger 1": 4}
    assert _leftover_order("acme/gone", there, in_order) == (
        "records removed in cycle 2, emptied parents in cycle 4, its 1 BookKeeper ledgers "
        "in cycle 4"
    )
    # A parent removed by the cycle that emptied it, or a ledger the records still named.
    for wrong in ({"acme/gone: parents": 2}, {"acme/gone: listed ledger 1": 2}):
        with pytest.raises(SystemExit, match="acme/gone went out of order"):
            _leftover_order("acme/gone", there, in_order | wrong)
    assert all(name.split(": ")[0] in demo_pulsar.LEFTOVERS for name in in_order)
