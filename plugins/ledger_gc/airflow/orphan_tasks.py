"""The tasks of the ``orphan_removal`` DAG (dags/orphan_removal.py), over ledger_gc.orphans.

Like a provider's operators, these are thin: settings come from
``settings_hook.settings_from_airflow`` at run time (never at parse time), every step is
a ``ledger_gc.orphans.cycle`` function, and each writes its result to the run's folder in
the state dir, which is what the next task reads. A failed task changes nothing in the
registry (each registry step is one transaction).

* ``OrphanSparkSubmitOperator``: the Spark steps (snapshot, scan, diff, delete) through
  the Spark provider's ``SparkSubmitOperator`` (``spark_default``; pool
  ``ledgergc_spark``). It passes the settings as ``LEDGERGC_*`` variables and the run id
  and options as arguments of ``spark_apps/orphan_<step>.py``. Without a
  ``spark_default`` connection it runs ``local[*]`` (the provider would pick YARN);
  with a local master the executors run this worker's Python (``PYSPARK_PYTHON``).
* ``initialize_and_correct`` and ``report``: PythonOperator callables.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[3]
SPARK_APPS = REPO_ROOT / "spark_apps"
PLUGINS = REPO_ROOT / "plugins"
SPARK_CONN_ID = "spark_default"
SPARK_POOL = "ledgergc_spark"
DEFAULT_SPARK_MASTER = "local[*]"
#: Spark configuration of the apps unless the task sets its own ``conf``: no UI (a task
#: is short-lived and unattended) and no INFO flood in the task log.
DEFAULT_SPARK_CONF = {"spark.ui.enabled": "false", "spark.log.level": "WARN"}
#: DAG params that are settings (the others are cycle options).
SETTINGS_PARAMS = ("grace_seconds", "retention_seconds")


def _flag(value: Any) -> bool | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def settings_for(params: dict[str, Any] | None) -> Any:
    """The task's Settings: env < connections < variable < the run's grace/retention."""
    from ledger_gc.airflow.settings_hook import settings_from_airflow

    params = dict(params or {})
    return settings_from_airflow({key: params.get(key) for key in SETTINGS_PARAMS})


def options_for(params: dict[str, Any] | None) -> Any:
    """The run's CycleOptions from its params (dry_run, force, inventory)."""
    from ledger_gc.orphans.cycle import CycleOptions

    params = dict(params or {})
    return CycleOptions(
        dry_run=_flag(params.get("dry_run")),
        force=bool(_flag(params.get("force"))),
        inventory=params.get("inventory") or None,
        offload_inventory=params.get("offload_inventory") or None,
    )


def default_spark_submit() -> str:
    """``spark-submit`` beside this Python (the venv's PySpark), else the one on PATH."""
    candidate = Path(sys.executable).with_name("spark-submit")
    return str(candidate) if candidate.exists() else "spark-submit"


def _spark_master(conn_id: str) -> str:
    """The connection's master; registers ``local[*]`` for this process if it is missing."""
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception:
        log.info("no Airflow connection %s: running Spark %s", conn_id, DEFAULT_SPARK_MASTER)
        os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(
            {"conn_type": "spark", "host": DEFAULT_SPARK_MASTER}
        )
        return DEFAULT_SPARK_MASTER
    return str(conn.host or "")


class OrphanSparkSubmitOperator(SparkSubmitOperator):
    """``spark-submit spark_apps/orphan_<step>.py --run-id <run_id>`` with the settings."""

    def __init__(self, *, step: str, **kwargs: Any) -> None:
        kwargs.setdefault("application", str(SPARK_APPS / f"orphan_{step}.py"))
        kwargs.setdefault("conn_id", SPARK_CONN_ID)
        kwargs.setdefault("pool", SPARK_POOL)
        kwargs.setdefault("name", f"ledgergc-orphans-{step}")
        kwargs.setdefault("spark_binary", default_spark_submit())
        kwargs.setdefault("conf", dict(DEFAULT_SPARK_CONF))
        super().__init__(**kwargs)
        self.step = step

    def execute(self, context: Any) -> None:
        params = context["params"]
        settings = settings_for(params)
        options = options_for(params)
        args = ["--run-id", context["run_id"]]
        if self.step == "scan" and options.inventory:
            args += ["--inventory", options.inventory]
        if self.step == "scan" and options.offload_inventory:
            args += ["--offload-inventory", options.offload_inventory]
        if self.step == "delete":
            args += ["--dry-run"] if options.dry_run else []
            args += ["--force"] if options.force else []
        self.application_args = args
        env = settings.to_env()
        # The apps import ledger_gc from this checkout when it is not installed.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(PLUGINS), os.environ.get("PYTHONPATH", "")) if p
        )
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        if _spark_master(self._conn_id).startswith("local"):
            env["PYSPARK_PYTHON"] = sys.executable
        self.env_vars = {**env, **(self.env_vars or {})}
        super().execute(context)


def initialize_and_correct(params: dict[str, Any], run_id: str) -> dict[str, Any]:
    """Guards, then phases 1 and 2 (one registry transaction; idempotent per run)."""
    from ledger_gc.orphans.cycle import step_phases

    settings = settings_for(params)
    return step_phases(settings, run_id, force=options_for(params).force)


def report(params: dict[str, Any], run_id: str) -> dict[str, Any]:
    """Publish the cycle's report (runs even when a step failed: ``all_done``).

    Fails the task when the cycle failed or a guard refused it, so that the run shows
    red in the UI with the reason in the log; the report is in the run log either way.
    """
    from ledger_gc.errors import LedgerGcError, SafetyRefusalError
    from ledger_gc.orphans.cycle import step_report
    from ledger_gc.orphans.report import FAILED, REFUSED

    settings = settings_for(params)
    cycle_report = step_report(settings, run_id, options=options_for(params))
    data = cycle_report.to_dict()
    log.info("orphan cycle %s: %s", run_id, json.dumps(data, sort_keys=True, default=str))
    if cycle_report.status == REFUSED:
        reasons = "; ".join(r["reason"] for r in data["refusals"] if not r.get("forced"))
        raise SafetyRefusalError(f"orphan cycle {run_id} refused: {reasons}")
    if cycle_report.status == FAILED:
        raise LedgerGcError(f"orphan cycle {run_id} failed: {data['error']}")
    return {
        "status": data["status"],
        "dry_run": data["dry_run"],
        "deleted": data["phases"]["deleted"],
        "would_delete": data["phases"]["would_delete"],
        "registered": data["phases"]["registered"],
    }
