"""The tasks of one ``orphan_removal`` run share nothing but the state store's URL.

``airflow dags test`` runs every task in one process with one state dir, so it cannot
show that a task never reads what another wrote to local disk. Here each task of one
DAG run is its own ``airflow tasks test`` process (as a Celery or Kubernetes worker would
run it), with its own empty ``LEDGERGC_STATE_DIR`` and temporary directory, and one
``LEDGERGC_STATE_URL`` naming a database that lies in none of them. The run (its id and
conf) is created first with ``airflow dags trigger`` so that every task sees the same run
id. The cycle must still register and delete exactly the planted leaks, leave no scratch
behind, and a retried ``initialize_correct`` must change nothing.
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
from ledger_gc.ledger.managed_ledger import ManagedLedger
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.run_log import read_runs
from ledger_gc.settings import Settings
from ledger_gc.storage.s3 import LedgerStorage

# Eight Airflow processes and two Spark applications: minutes on a loaded machine.
pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(1200)]

REPO_ROOT = Path(__file__).resolve().parents[2]
LIVE_ML = "public/default/persistent/payments"
RUN_ID = "share-nothing-1"
# ``delete`` is the branch; with LEDGERGC_ORPHAN_DELETE_SPARK_OVER=0 it picks
# ``delete_on_spark`` (``delete_in_task`` is skipped).
TASKS = ("survey", "initialize_correct", "delete", "delete_on_spark", "report")


def _airflow(args: list[str], env: dict[str, str], log: Path) -> float:
    started = time.monotonic()
    with open(log, "ab") as out:
        out.write(f"\n$ airflow {' '.join(args)}\n".encode())
        out.flush()
        result = subprocess.run(
            [sys.executable, "-m", "airflow", *args],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=600,
            check=False,
        )
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
    assert result.returncode == 0, f"airflow {' '.join(args)} failed (log {log}):\n{tail}"
    return time.monotonic() - started


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_each_task_in_its_own_process_and_scratch_shares_only_the_state_url(
    airflow_task_states: Any, settings: Settings, tmp_path: Path
) -> None:
    storage = LedgerStorage(settings)
    with MetadataStore.open(settings) as store:
        ml = ManagedLedger.open(LIVE_ML, store, storage)
        ml.add_entries([b"live" * 4000] * 10)
        ml.close()
    planted = plant_leaks(settings, ml_name=LIVE_ML)
    expected = {leak["prefix"] for leak in planted["orphan_ledgers"]} | {
        leak["prefix"] for leak in planted["orphan_partitions"]
    }
    shared = tmp_path / "shared-db"
    shared.mkdir()
    state_url = f"sqlite:///{shared / 'state.sqlite'}"
    enabled = settings.with_overrides(delete_enabled=True, state_url=state_url)
    base: dict[str, Any] = {**os.environ, **enabled.to_env()}
    base["SPARK_SUBMIT_OPTS"] = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    # The delete task submits its app and re-checks on executors even for three orphans
    # (the DAG test covers the task that deletes them itself).
    base["LEDGERGC_ORPHAN_DELETE_SPARK_OVER"] = "0"
    base["PYTHONPATH"] = os.pathsep.join(str(REPO_ROOT / p) for p in ("plugins", "include"))
    log = tmp_path / "airflow-tasks.log"
    conf = {"grace_seconds": 0, "retention_seconds": 0}

    _airflow(["dags", "reserialize"], base, log)
    _airflow(["dags", "trigger", "orphan_removal", "-r", RUN_ID, "-c", json.dumps(conf)], base, log)

    scratch: dict[str, Path] = {}
    took: dict[str, float] = {}

    def run_task(task_id: str, attempt: int = 1) -> None:
        own = tmp_path / f"worker-{task_id}-{attempt}"
        (own / "state").mkdir(parents=True)
        (own / "tmp").mkdir()
        env = {
            **base,
            "LEDGERGC_STATE_DIR": str(own / "state"),
            "TMPDIR": str(own / "tmp"),
        }
        took[f"{task_id}#{attempt}"] = _airflow(
            ["tasks", "test", "orphan_removal", task_id, RUN_ID], env, log
        )
        scratch[f"{task_id}#{attempt}"] = own / "state"

    for task_id in TASKS:
        run_task(task_id)
        if task_id == "initialize_correct":
            registry_before = OrphanRegistry(enabled).entries()
            run_task(task_id, attempt=2)  # a retry: the registry applied this run's scan once
            assert OrphanRegistry(enabled).entries() == registry_before
    print("per-task seconds (own process each):", json.dumps(took))
    # `airflow tasks test` exits 0 whatever its task did; Airflow's record says.
    assert airflow_task_states("orphan_removal", RUN_ID) == {
        **dict.fromkeys(TASKS, "success"),
        "delete_in_task": "skipped",  # the branch's other way
    }

    # No task left a file in its own state dir: the survey's Parquet was scratch it
    # removed itself, and the embedded SQLite default was never used.
    for name, folder in scratch.items():
        assert _files(folder) == [], (name, _files(folder))
    [summary] = read_runs(enabled, "orphans")
    assert summary["run_id"] == RUN_ID and summary["status"] == "ok", summary
    assert summary["registry"]["scan_number"] == 1  # the retry applied nothing again
    assert {item["prefix"] for item in summary["deleted"]} == expected
    for prefix in expected:
        assert not list(storage.iter_objects(prefix)), prefix
    assert OrphanRegistry(enabled).entries() == {}
    assert log.read_text(errors="replace").count("Spark-Submit cmd") == 2  # survey, delete
