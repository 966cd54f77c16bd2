"""``airflow dags test orphan_removal`` end to end against the local stack.

The DAG runs for real: its survey goes through the Spark provider's
SparkSubmitOperator (``spark-submit`` of this venv with ledger_gc as ``py_files``,
``local[*]`` because the test's Airflow has no ``spark_default`` connection); the delete
task, with three orphans, runs its step itself (``delete_needs_spark``), like the Python
tasks in the ``airflow`` process, all against the session's
ZooKeeper and SeaweedFS S3. Settings reach the tasks as
``LEDGERGC_*`` variables, the run's options as ``-c`` params.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from demo_leaks import plant_leaks
from ledger_gc.config.edge import block_store, zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.ledger.managed_ledger import ManagedLedger
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.run_log import read_runs
from ledger_gc.storage.s3 import LedgerStorage
from local_stack.server_process import FAST_JVM

# Airflow, two spark-submits and the local stack: more than the default 300 s when the
# machine is shared (the subprocess has its own 600 s limit).
pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(900)]

REPO_ROOT = Path(__file__).resolve().parents[2]
LIVE_ML = "public/default/persistent/orders"


def _airflow(args: list[str], env: dict[str, str], log: Path) -> subprocess.CompletedProcess:
    with open(log, "ab") as out:
        return subprocess.run(
            [sys.executable, "-m", "airflow", *args],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=600,
            check=False,
        )


def _tail(path: Path, lines: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def test_dags_test_runs_a_full_cycle_and_deletes_the_planted_leaks(
    airflow_home: Path, settings: Settings, tmp_path: Path
) -> None:
    storage = LedgerStorage(block_store(settings))
    with MetadataStore.open(zk_endpoint(settings)) as store:
        ml = ManagedLedger.open(LIVE_ML, store, storage)
        ml.add_entries([b"live" * 4000] * 20)
        ml.close()
    planted = plant_leaks(settings, ml_name=LIVE_ML)
    live_keys = {o.key for o in storage.iter_objects(f"{settings.key_prefix}{LIVE_ML}/")} - {
        o.key for leak in planted["orphan_ledgers"] for o in storage.iter_objects(leak["prefix"])
    }
    enabled = settings.with_overrides(delete_enabled=True)
    env: dict[str, Any] = {**os.environ, **enabled.to_env()}
    # Quick JIT tier for the short spark-submit apps (their driver is spark-submit's JVM).
    env["SPARK_SUBMIT_OPTS"] = FAST_JVM
    env["PYTHONPATH"] = os.pathsep.join(str(REPO_ROOT / p) for p in ("plugins", "include"))
    conf = {"grace_seconds": 0, "retention_seconds": 0, "force": False}
    log = tmp_path / "airflow-dags-test.log"

    started = time.monotonic()
    result = _airflow(["dags", "test", "orphan_removal", "-c", json.dumps(conf)], env, log)
    elapsed = time.monotonic() - started
    print(f"airflow dags test orphan_removal: {elapsed:.1f}s (log {log})")

    assert result.returncode == 0, f"dags test failed (log {log}):\n{_tail(log)}"
    [summary] = read_runs(settings, "orphans")
    assert summary["status"] == "ok", summary
    assert summary["dry_run"] is False
    deleted = {item["prefix"] for item in summary["deleted"]}
    expected = {leak["prefix"] for leak in planted["orphan_ledgers"]} | {
        leak["prefix"] for leak in planted["orphan_partitions"]
    }
    assert deleted == expected
    assert summary["phases"]["deleted"]["count"] == len(expected)
    for prefix in expected:
        assert not list(storage.iter_objects(prefix)), prefix
    # Live data and the foreign file are untouched; the registry is empty again.
    remaining = {o.key for o in storage.iter_objects(settings.key_prefix)}
    assert live_keys <= remaining
    assert set(planted["foreign_keys"]) <= remaining
    assert summary["foreign"]["objects"] == 1
    assert OrphanRegistry(settings).entries() == {}
    # Three orphans are no work for executors: the delete task ran the step itself, and
    # the survey was the run's one Spark application.
    text = log.read_text(errors="replace")
    assert text.count("Spark-Submit cmd") == 1, _tail(log)
    assert "without a Spark application" in text
