"""``ledger_trim`` end to end: a real Airflow 3.3 run (``dag.test()``) against the local stack."""

from __future__ import annotations

import pytest

from ledger_gc import run_log
from ledger_gc.config.edge import block_store, zk_endpoint
from ledger_gc.formats.markers import deletable_markers
from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.positions import Position
from ledger_gc.storage.s3 import LedgerStorage

pytestmark = pytest.mark.airflow

DEFAULTS = {
    "dry_run": False,
    "namespace": "",
    "trim_retention_seconds": None,
    "trim_retention_bytes": None,
    "max_shards": 8,
}
NAMES = [f"acme/ns{i % 2}/persistent/topic-{i}" for i in range(3)]


@pytest.fixture
def trim_dag(airflow_home, settings, monkeypatch):
    """The parsed ``ledger_trim`` DAG, with LEDGERGC_* pointing at this test's store."""
    from test_dag_integrity import DAGS_FOLDER, parse_dags

    for name, value in {
        "LEDGERGC_ZK_HOSTS": settings.zk_hosts,
        "LEDGERGC_S3_ENDPOINT": settings.s3_endpoint,
        "LEDGERGC_BUCKET": settings.bucket,
        "LEDGERGC_PREFIX": settings.prefix,
        "LEDGERGC_STATE_DIR": str(settings.state_dir),
    }.items():
        monkeypatch.setenv(name, value)
    bag = parse_dags(DAGS_FOLDER)
    assert "ledger_trim" in bag.dags, bag.import_errors
    return bag.dags["ledger_trim"]


def test_the_dag_is_wired_as_the_issue_asks(trim_dag):
    assert trim_dag.max_active_runs == 1 and not trim_dag.catchup
    assert set(trim_dag.params.keys()) >= {
        "dry_run",
        "namespace",
        "trim_retention_seconds",
        "trim_retention_bytes",
    }
    assert trim_dag.get_task("trim_shard").pool == "ledgergc_zookeeper"
    order = [t.task_id for t in trim_dag.topological_sort()]
    assert order == ["list_shards", "trim_shard", "summarize", "check_outcome"]


def test_a_dag_run_trims_every_managed_ledger_and_records_the_run(trim_dag, settings):
    storage = LedgerStorage(block_store(settings))
    with MetadataStore.open(zk_endpoint(settings)) as store:
        for name in NAMES:
            ml = ManagedLedger.open(
                name, store, storage, ManagedLedgerConfig(max_entries_per_ledger=2)
            )
            ml.add_entries([b"x" * 50] * 6)  # three full ledgers and an empty current one
            first = ml.ledgers()[0].ledger_id
            ml.open_cursor("sub", "earliest").mark_delete(Position(first, 1))
            ml.close()

        # Every param given each time: in-process runs of one DAG object share its params.
        dry = trim_dag.test(run_conf={**DEFAULTS, "dry_run": True, "namespace": "acme/ns0"})
        assert dry.state == "success"
        assert all(len(store.get_managed_ledger(n).value.ledgerInfo) == 4 for n in NAMES)

        run = trim_dag.test(run_conf={**DEFAULTS, "max_shards": 2})

        assert run.state == "success"
        for name in NAMES:
            info = store.get_managed_ledger(name).value
            assert len(info.ledgerInfo) == 3 and deletable_markers(info) == {}
    dry_summary, summary = run_log.read_runs(settings, run_log.TRIM)
    assert dry_summary["dry_run"] and dry_summary["scope"] == "namespace acme/ns0"
    assert dry_summary["totals"]["ledgers_planned"] == 2  # topic-0 and topic-2
    assert summary["source"] == "airflow" and summary["outcome"] == "ok"
    assert summary["run_id"] == run.run_id and summary["shards"] == 1
    assert summary["totals"]["managed_ledgers"] == 3
    assert summary["totals"]["ledgers_deleted"] == 3
    assert summary["totals"]["bytes_reclaimed"] > 0
