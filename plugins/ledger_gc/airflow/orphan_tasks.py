"""The tasks of the ``orphan_removal`` DAG (dags/orphan_removal.py), over ledger_gc.orphans.

Like a provider's operators, these are thin: settings come from
``settings_hook.settings_for`` at run time (never at parse time), and every step is a
``ledger_gc.orphans.cycle`` function. The tasks share nothing but the state store
(``LEDGERGC_STATE_URL``): each step reads the records of the steps before it there and
records its own (``orphans/run_steps.py``), so each task may run on another worker. A
failed task changes nothing in the registry (each registry step is one transaction), and
a retried one repeats nothing harmful (the registry applies a run's scan once).

* ``OrphanSparkSubmitOperator``: the Spark applications of a cycle (one or two), ``survey``
  (snapshot, scan and diff in one JVM) and ``delete``, through the Spark provider's
  ``SparkSubmitOperator`` (``spark_default``; pool ``ledgergc_spark``). When Airflow
  renders the task it fills in what is submitted, so the Rendered view shows it (secrets
  masked): the app's arguments (run id, options), ``py_files`` (the ledger_gc zip, the
  one way the library reaches the driver and the executors) and ``env_vars`` (the
  settings as ``LEDGERGC_*`` and boto3's variables, given to spark-submit's process only,
  never to this worker's environment). Without a ``spark_default`` connection it runs
  ``local[*]`` (the provider would pick YARN); with a local master the executors run this
  worker's Python.
  The delete task submits its application only when there is work for executors
  (``cycle.delete_needs_spark``: more registered orphans than
  ``LEDGERGC_ORPHAN_DELETE_SPARK_OVER``, default 500); otherwise it runs the same step
  in the task itself (``delete``), as the app's driver would, without a JVM's start-up.
* ``initialize_and_correct``, ``delete`` and ``report``: the Python steps.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from ledger_gc.airflow.settings_hook import settings_for
from ledger_gc.settings import Settings

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[3]
SPARK_APPS = REPO_ROOT / "spark_apps"
SPARK_CONN_ID = "spark_default"
SPARK_POOL = "ledgergc_spark"
DEFAULT_SPARK_MASTER = "local[*]"
#: Spark configuration of the apps unless the task sets its own ``conf``: no INFO flood
#: in the task log. A local master also gets no UI (``LOCAL_SPARK_CONF``: the app is
#: short-lived and unattended); on a cluster the UI shows each step's job group.
DEFAULT_SPARK_CONF = {"spark.log.level": "WARN"}
LOCAL_SPARK_CONF = {"spark.ui.enabled": "false"}
SURVEY = "survey"
DELETE = "delete"


def _flag(value: Any) -> bool | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


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


def app_args(step: str, run_id: str, params: dict[str, Any] | None) -> list[str]:
    """The arguments of ``spark_apps/orphan_<step>.py`` for one run."""
    options = options_for(params)
    args = ["--run-id", run_id]
    if step == SURVEY:
        if options.inventory:
            args += ["--inventory", options.inventory]
        if options.offload_inventory:
            args += ["--offload-inventory", options.offload_inventory]
    elif step == DELETE:
        args += ["--dry-run"] if options.dry_run else []
        args += ["--force"] if options.force else []
    return args


def submit_env(settings: Settings, *, local_master: bool) -> dict[str, str]:
    """The environment of the spark-submit process: the settings (``LEDGERGC_*`` and
    boto3's credential variables), and which Python runs the driver (and, with a local
    master, the executors). The secrets are registered with Airflow's masker, so the
    task log and the Rendered view show them as ``***``."""
    from airflow.sdk.log import mask_secret

    env = settings.to_env()
    for secret in settings.secrets():
        mask_secret(secret)
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if local_master:
        env["PYSPARK_PYTHON"] = sys.executable
    return env


def default_spark_submit() -> str:
    """``spark-submit`` beside this Python (the venv's PySpark), else the one on PATH."""
    candidate = Path(sys.executable).with_name("spark-submit")
    return str(candidate) if candidate.exists() else "spark-submit"


def spark_connection_master(conn_id: str) -> str | None:
    """The connection's master, or None when there is no such connection."""
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception:
        return None
    return str(conn.host or "")


class OrphanSparkSubmitOperator(SparkSubmitOperator):
    """``spark-submit spark_apps/orphan_<step>.py --run-id <run_id>`` with the settings."""

    def __init__(self, *, step: str, **kwargs: Any) -> None:
        if step not in (SURVEY, DELETE):
            raise ValueError(f"unknown orphan cycle Spark step {step!r}")
        kwargs.setdefault("application", str(SPARK_APPS / f"orphan_{step}.py"))
        kwargs.setdefault("conn_id", SPARK_CONN_ID)
        kwargs.setdefault("pool", SPARK_POOL)
        kwargs.setdefault("name", f"ledgergc-orphans-{step}")
        kwargs.setdefault("spark_binary", default_spark_submit())
        kwargs.setdefault("conf", dict(DEFAULT_SPARK_CONF))
        super().__init__(**kwargs)
        self.step = step

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Render the templates, then fill in what this run submits (after rendering, so
        that no value of the settings is ever read as a template)."""
        super().render_template_fields(context, jinja_env)
        from ledger_gc.library_zip import library_zip

        master = spark_connection_master(self._conn_id)
        local = master is None or master.startswith("local")
        if master is None:
            log.info("no Airflow connection %s: Spark runs %s", self._conn_id, DEFAULT_SPARK_MASTER)
        params = context["params"]
        self.application_args = self.application_args or app_args(
            self.step, context["run_id"], params
        )
        self.py_files = ",".join(p for p in (str(library_zip()), self.py_files) if p)
        self.env_vars = {
            **submit_env(settings_for(params), local_master=local),
            **(self.env_vars or {}),
        }
        if local:
            self.conf = {**LOCAL_SPARK_CONF, **(self.conf or {})}

    def execute(self, context: Any) -> Any:
        if self.step == DELETE:
            from ledger_gc.orphans.cycle import delete_needs_spark

            params = context["params"]
            settings = settings_for(params)
            if not delete_needs_spark(settings):
                log.info(
                    "at most %d registered orphans (LEDGERGC_ORPHAN_DELETE_SPARK_OVER): "
                    "re-checking and deleting them in this task, without a Spark application",
                    settings.orphan_delete_spark_over,
                )
                return delete(params, context["run_id"])
        return super().execute(context)

    def _get_hook(self) -> SparkSubmitHook:
        hook = super()._get_hook()
        if spark_connection_master(self._conn_id) is None:
            # The provider falls back to YARN; a worker without a Spark connection runs
            # its apps locally (the demo, the tests, a single-machine deployment). What
            # the hook derived from "yarn" goes too: it would put env_vars on the
            # command line as spark.yarn.appMasterEnv.* (credentials in `ps` and the log).
            hook._connection = {**hook._connection, "master": DEFAULT_SPARK_MASTER}
            hook._is_yarn = hook._is_yarn_cluster_mode = hook._is_kubernetes = False
        return hook


def initialize_and_correct(params: dict[str, Any], run_id: str) -> dict[str, Any]:
    """Guards, then phases 1 and 2 (one registry transaction; idempotent per run)."""
    from ledger_gc.orphans.cycle import step_phases

    result = step_phases(settings_for(params), run_id, force=options_for(params).force)
    # XCom: the counts only (the held targets and refusals are in the state store).
    return {
        key: result.get(key)
        for key in ("applied", "scan_number", "added", "seen", "restarted", "corrected")
    } | {"refusals": len(result.get("refusals", [])), "held": len(result.get("held", []))}


def delete(params: dict[str, Any], run_id: str) -> dict[str, Any]:
    """Phase 3 in this process (``orphan_delete.py``'s step, as its driver runs it).

    SIGTERM (a task timeout, a worker's shutdown): the delete batch under way finishes
    and is audited, nothing new starts (``termination.stop_on_signals``)."""
    from ledger_gc.orphans.cycle import delete_summary, step_delete
    from ledger_gc.termination import stop_on_signals

    with stop_on_signals():
        result = step_delete(settings_for(params), run_id, options=options_for(params))
    return delete_summary(result)


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
