"""The orphan_removal DAG's task wiring, without running Spark or touching a server:
which app each Spark task submits, with which arguments and environment."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from ledger_gc.airflow import orphan_tasks
from ledger_gc.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def submitted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[SparkSubmitOperator]:
    """Capture the operator instead of running spark-submit; settings from a stub."""
    calls: list[SparkSubmitOperator] = []
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: calls.append(self))
    monkeypatch.setattr(
        orphan_tasks,
        "settings_for",
        lambda params: Settings(bucket="b", state_dir=tmp_path, grace_seconds=5),
    )
    monkeypatch.setattr(orphan_tasks, "_spark_master", lambda conn_id: "local[*]")
    return calls


def _run(step: str, params: dict[str, Any]) -> None:
    operator = orphan_tasks.OrphanSparkSubmitOperator(task_id=step, step=step)
    operator.execute({"params": params, "run_id": "manual__2026-01-01T00:00:00+00:00"})


def test_each_spark_task_submits_its_app_with_the_run_id_and_settings(
    submitted: list[SparkSubmitOperator],
) -> None:
    _run("scan", {"inventory": "/data/inventory.parquet"})

    [operator] = submitted
    assert operator.application == str(REPO_ROOT / "spark_apps" / "orphan_scan.py")
    assert Path(operator.application).exists()
    assert (operator.pool, operator._conn_id) == ("ledgergc_spark", "spark_default")
    assert operator.application_args == [
        "--run-id",
        "manual__2026-01-01T00:00:00+00:00",
        "--inventory",
        "/data/inventory.parquet",
    ]
    env = operator.env_vars or {}
    assert env["LEDGERGC_GRACE_SECONDS"] == "5" and env["LEDGERGC_BUCKET"] == "b"
    assert env["PYSPARK_PYTHON"] == sys.executable
    assert str(REPO_ROOT / "plugins") in env["PYTHONPATH"]
    assert operator.conf == orphan_tasks.DEFAULT_SPARK_CONF


def test_the_delete_task_passes_dry_run_and_force(submitted: list[SparkSubmitOperator]) -> None:
    _run("delete", {"dry_run": True, "force": True})
    _run("delete", {"dry_run": None, "force": False})

    assert submitted[0].application_args[2:] == ["--dry-run", "--force"]
    assert submitted[1].application_args[2:] == []


def test_params_become_cycle_options() -> None:
    options = orphan_tasks.options_for({"dry_run": "false", "force": "true", "inventory": ""})
    assert (options.dry_run, options.force, options.inventory) == (False, True, None)
    assert orphan_tasks.options_for({}).dry_run is None
