"""The tasks of the ``orphan_removal`` DAG (dags/orphan_removal.py), over ledger_gc.orphans.

Like a provider's operators, these are thin: settings come from ``LedgerGcHook``
(``settings_hook.settings_for``) at run time (never at parse time), and every step is a
``ledger_gc.orphans.cycle`` function. The tasks share nothing but the state store
(``LEDGERGC_STATE_URL``): each step reads the records of the steps before it there and
records its own (``orphans/run_steps.py``), so each task may run on another worker. A
failed task changes nothing in the registry (each registry step is one transaction), and
a retried one repeats nothing harmful (the registry applies a run's scan once).

* ``OrphanSparkSubmitOperator``: the Spark applications of a cycle, ``survey`` (snapshot,
  scan and diff in one JVM) and ``delete`` (the ``delete_on_spark`` task), through the
  Spark provider's ``SparkSubmitOperator`` (``spark_default``; pool ``ledgergc_spark``).
  When Airflow renders the task it fills in what is submitted, so the Rendered view shows
  it (secrets masked): the app's arguments (run id, options), ``py_files`` (the ledger_gc
  zip, the one way the library reaches the driver and the executors) and ``env_vars``
  (the settings as ``LEDGERGC_*`` and boto3's variables, given to spark-submit's process
  only, never to this worker's environment). Without a ``spark_default`` connection it
  runs ``local[*]`` (``LedgerGcSparkSubmitHook``; the provider would pick YARN); with a
  local master the executors run this worker's Python.
* ``choose_delete``: the DAG's ``delete`` branch. Phase 3 runs on Spark executors
  (``delete_on_spark``) only when there is work for them (``cycle.delete_needs_spark``:
  more registered orphans than ``LEDGERGC_ORPHAN_DELETE_SPARK_OVER``, default 500);
  otherwise in a task (``delete_in_task``: ``delete``), as the app's driver would, without
  a JVM's start-up. A branch, so the Grid view shows which ran; both are idempotent.
* ``initialize_and_correct``, ``delete`` and ``report``: the Python steps.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook, Connection
from airflow.sdk.exceptions import AirflowNotFoundException

from ledger_gc.airflow.settings_hook import settings_for, spark_settings
from ledger_gc.config.settings import Settings
from ledger_gc.errors import ConfigError

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
#: The two ways of the DAG's ``delete`` branch (``choose_delete``): their task ids.
DELETE_IN_TASK = "delete_in_task"
DELETE_ON_SPARK = "delete_on_spark"


def _flag(value: Any) -> bool | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def options_for(params: dict[str, Any] | None) -> Any:
    """The run's CycleOptions from its params (dry_run, force, inventory)."""
    from ledger_gc.orphans.options import CycleOptions

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
    boto3's credential variables: temporary ones, or none, on a cluster:
    ``settings_hook.spark_settings``), every secret or never-handed variable of the
    settings that this worker's environment sets and they leave out blanked (the
    provider copies that environment under ``env_vars``), and which Python runs the
    driver (and, with a local master, the executors). Their secrets are masked
    (``spark_settings``: this process's log filter and Airflow's masker), so the task
    log and the Rendered view show them as ``***``."""
    settings = spark_settings(settings, local_master=local_master)
    env = settings.to_env()
    # The provider starts spark-submit with this worker's environment and ``env_vars``
    # over it: a variable these settings leave out (an account key a SAS replaced, a key
    # file exchanged for a token, AWS keys no store uses, broker.conf's path) is blanked
    # there (empty: unset), or the Spark driver's settings would read it back and pickle
    # it to every executor.
    for name in Settings.withheld_variables():
        if name not in env and os.environ.get(name):
            env[name] = ""
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if local_master:
        env["PYSPARK_PYTHON"] = sys.executable
    return env


def default_spark_submit() -> str:
    """``spark-submit`` beside this Python (the venv's PySpark), else the one on PATH."""
    candidate = Path(sys.executable).with_name("spark-submit")
    return str(candidate) if candidate.exists() else "spark-submit"


def spark_connection(conn_id: str) -> Connection | None:
    """The Spark connection ``conn_id``, or None when it is not defined."""
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None


def spark_master(conn: Connection) -> str:
    """The master the Spark provider submits to for ``conn``, derived as its hook derives
    it (``SparkSubmitHook._resolve_connection``): the host of a ``spark`` connection that
    is a URL or has no port (``yarn``, ``local[*]``, ``k8s://https://…``), else
    ``<conn_type>://<host>[:port]`` (``spark://master:7077``)."""
    host = str(conn.host or "")
    if conn.conn_type == "spark" and host and ("://" in host or not conn.port):
        master = host
    else:
        master = f"{conn.conn_type}://{host}"
    return f"{master}:{conn.port}" if conn.port else master


#: Masters to which the Spark provider hands ``env_vars`` as Spark conf on spark-submit's
#: command line (``SparkSubmitHook._build_spark_common_args``: ``yarn`` or ``k8s`` in
#: the master), and the conf they become. Any other master gets them as spark-submit's
#: process environment only.
ENV_AS_SPARK_CONF = {"yarn": "spark.yarn.appMasterEnv.", "k8s": "spark.kubernetes.driverEnv."}


def check_spark_master(settings: Settings, conn: Connection | None, conn_id: str) -> None:
    """Refuse, in one line, a master that the settings cannot safely reach.

    For YARN and Kubernetes the Spark provider puts every ``env_vars`` entry on
    spark-submit's command line as Spark conf (``ENV_AS_SPARK_CONF``): ``ps`` on the
    worker, the Spark UI's environment page and the event log show it, and Spark's own
    redaction does not know ``LEDGERGC_ZK_DIGEST`` or ``LEDGERGC_STATE_URL``. So no
    setting that holds a secret (``Settings.secret_settings``) goes there: the task
    refuses rather than leak. And a Kubernetes master in client mode gets the settings
    nowhere (``spark.kubernetes.driverEnv`` is a driver pod's; a client-mode driver is
    spark-submit's own process, which the provider gives this worker's environment):
    its app would run on other settings than the task's.
    """
    if conn is None:
        return
    master = spark_master(conn)
    conf = next((prefix for word, prefix in ENV_AS_SPARK_CONF.items() if word in master), None)
    if conf is None:
        return
    deploy_mode = (conn.extra_dejson or {}).get("deploy-mode")
    if conf == ENV_AS_SPARK_CONF["k8s"] and deploy_mode != "cluster":
        raise ConfigError(
            f"the {conn_id} connection's master {master} runs the driver in client mode, "
            f"where the Spark provider's {conf}* settings reach no process (the app would "
            f"run on this worker's environment, not the task's settings); set the "
            f"connection's extra deploy-mode to cluster"
        )
    secret = settings.secret_settings()
    if secret:
        raise ConfigError(
            f"the {conn_id} connection's master {master} would get the settings as Spark "
            f"conf ({conf}*) on spark-submit's command line, where ps, the Spark UI and "
            f"its event log show them, and {', '.join(secret)} hold secrets; submit to a "
            "spark:// or local master, or leave those unset here and let the cluster's "
            "nodes bring their own (an instance profile or IRSA for S3, a JAAS file for "
            "ZooKeeper SASL, PGPASSFILE for the state store)"
        )


def local_spark_connection(conn_id: str) -> Connection:
    """The connection a worker without ``conn_id`` submits with: ``local[*]``, made with
    Airflow's public ``Connection`` (the form of ``airflow_settings.yaml``'s)."""
    return Connection(conn_id=conn_id, conn_type="spark", host=DEFAULT_SPARK_MASTER)


class LedgerGcSparkSubmitHook(SparkSubmitHook):
    """The Spark provider's hook, but a Spark connection that is not defined means a local
    master, not YARN.

    The provider falls back to ``yarn`` when ``conn_id`` is not defined; a worker without
    a Spark connection (the demo, the tests, a single-machine deployment) runs its apps
    locally instead. The fallback is a connection (``local_spark_connection``) returned
    where the provider looks its connection up, so the provider derives the master, the
    deploy mode and what goes on the command line itself: with YARN it would put
    ``env_vars`` on the command line as ``spark.yarn.appMasterEnv.*`` (credentials in
    ``ps`` and the log). No private field of the provider is written.
    """

    @classmethod
    def get_connection(cls, conn_id: str) -> Connection:
        conn = spark_connection(conn_id)
        if conn is None:
            log.info("no Airflow connection %s: Spark runs %s", conn_id, DEFAULT_SPARK_MASTER)
            return local_spark_connection(conn_id)
        return conn


#: What ``OrphanSparkSubmitOperator`` builds its hook from: its rendered (public)
#: arguments, its connection and its spark-submit.
_HOOK_ARGUMENTS = (
    "conf",
    "files",
    "py_files",
    "driver_class_path",
    "jars",
    "packages",
    "exclude_packages",
    "keytab",
    "principal",
    "proxy_user",
    "name",
    "application_args",
    "env_vars",
    "properties_file",
    "post_submit_commands",
)
#: SparkSubmitOperator's arguments that this operator takes itself or that do not go to
#: the hook; any other (executor_memory, deploy_mode, ...) is refused, not ignored.
_OPERATOR_ARGUMENTS = {
    "self",
    "kwargs",
    "application",
    "conn_id",
    "spark_binary",
    "openlineage_inject_parent_job_info",
    "openlineage_inject_transport_info",
    "durable",
    "reconnect_on_retry",
}
_NOT_PASSED_ON = (
    set(inspect.signature(SparkSubmitOperator.__init__).parameters)
    - set(_HOOK_ARGUMENTS)
    - _OPERATOR_ARGUMENTS
)


class OrphanSparkSubmitOperator(SparkSubmitOperator):
    """``spark-submit spark_apps/orphan_<step>.py --run-id <run_id>`` with the settings.

    :param step: ``survey`` or ``delete``: which app (``spark_apps/orphan_<step>.py``).
    :param conn_id: the Spark connection (default ``spark_default``; not defined:
        ``local[*]``). Spark's resources (executor memory, cores, ...) go in its extra or
        in ``conf``.
    :param spark_binary: spark-submit (default: the one beside this Python).

    Other arguments as ``SparkSubmitOperator``'s; ``application_args``, ``py_files``,
    ``env_vars`` and ``conf`` are filled in when the task is rendered (templated).
    """

    def __init__(
        self,
        *,
        step: str,
        conn_id: str = SPARK_CONN_ID,
        spark_binary: str | None = None,
        **kwargs: Any,
    ) -> None:
        if step not in (SURVEY, DELETE):
            raise ValueError(f"unknown orphan cycle Spark step {step!r}")
        refused = sorted(_NOT_PASSED_ON & set(kwargs))
        if refused:
            raise TypeError(
                f"OrphanSparkSubmitOperator does not pass {', '.join(refused)} to "
                "spark-submit; set Spark's resources in conf (spark.executor.memory, ...) or "
                f"in the {conn_id} connection"
            )
        kwargs.setdefault("application", str(SPARK_APPS / f"orphan_{step}.py"))
        kwargs.setdefault("pool", SPARK_POOL)
        kwargs.setdefault("name", f"ledgergc-orphans-{step}")
        kwargs.setdefault("conf", dict(DEFAULT_SPARK_CONF))
        self.step = step
        self.spark_conn_id = conn_id
        self.spark_submit = spark_binary or default_spark_submit()
        super().__init__(conn_id=conn_id, spark_binary=self.spark_submit, **kwargs)

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Render the templates, then fill in what this run submits (after rendering, so
        that no value of the settings is ever read as a template)."""
        super().render_template_fields(context, jinja_env)
        from ledger_gc.spark.library_zip import library_zip

        conn = spark_connection(self.spark_conn_id)
        local = conn is None or spark_master(conn).startswith("local")
        params = context["params"]
        settings = settings_for(params)
        check_spark_master(settings, conn, self.spark_conn_id)
        self.application_args = self.application_args or app_args(
            self.step, context["run_id"], params
        )
        self.py_files = ",".join(p for p in (str(library_zip()), self.py_files) if p)
        self.env_vars = {
            **submit_env(settings, local_master=local),
            **(self.env_vars or {}),
        }
        if local:
            self.conf = {**LOCAL_SPARK_CONF, **(self.conf or {})}

    def _get_hook(self) -> SparkSubmitHook:
        """The provider's operator builds its hook here: ours, from this operator's public
        arguments (``_HOOK_ARGUMENTS``), so that its connection lookup is ours."""
        return LedgerGcSparkSubmitHook(
            conn_id=self.spark_conn_id,
            spark_binary=self.spark_submit,
            **{argument: getattr(self, argument) for argument in _HOOK_ARGUMENTS},
        )


def choose_delete(params: dict[str, Any]) -> str:
    """The ``delete`` branch: the task id of where phase 3 runs this time.

    On Spark executors (``delete_on_spark``) when more orphans are registered than
    ``LEDGERGC_ORPHAN_DELETE_SPARK_OVER`` (an upper bound of what can be due, read without
    the delete lock; the step decides again under it), else in a task
    (``delete_in_task``): a JVM's start-up costs seconds where the work costs
    milliseconds. Either task is the same idempotent step (``cycle.step_delete``).
    """
    from ledger_gc.config.edge import resolve
    from ledger_gc.orphans.cycle import delete_needs_spark

    settings = settings_for(params)
    if delete_needs_spark(resolve(settings)):
        log.info(
            "more than %d registered orphans (LEDGERGC_ORPHAN_DELETE_SPARK_OVER): re-checking "
            "and deleting them on Spark executors (%s)",
            settings.orphan_delete_spark_over,
            DELETE_ON_SPARK,
        )
        return DELETE_ON_SPARK
    log.info(
        "at most %d registered orphans (LEDGERGC_ORPHAN_DELETE_SPARK_OVER): re-checking and "
        "deleting them in a task, without a Spark application (%s)",
        settings.orphan_delete_spark_over,
        DELETE_IN_TASK,
    )
    return DELETE_IN_TASK


def initialize_and_correct(params: dict[str, Any], run_id: str) -> dict[str, Any]:
    """Guards, then phases 1 and 2 (one registry transaction; idempotent per run)."""
    from ledger_gc.config.edge import resolve
    from ledger_gc.orphans.cycle import step_phases

    endpoints = resolve(settings_for(params))  # the edge: resolved once, for the step
    result = step_phases(endpoints, run_id, force=options_for(params).force).to_dict()
    # XCom: the counts only (the held targets and refusals are in the state store).
    return {
        key: result.get(key)
        for key in ("applied", "scan_number", "added", "seen", "restarted", "corrected")
    } | {"refusals": len(result.get("refusals", [])), "held": len(result.get("held", []))}


def delete(params: dict[str, Any], run_id: str) -> dict[str, Any]:
    """Phase 3 in this process (``orphan_delete.py``'s step, as its driver runs it).

    SIGTERM (a task timeout, a worker's shutdown): the delete batch under way finishes
    and is audited, nothing new starts (``termination.stop_on_signals``)."""
    from ledger_gc.config.edge import resolve
    from ledger_gc.orphans.cycle import step_delete
    from ledger_gc.termination import stop_on_signals

    endpoints = resolve(settings_for(params))  # the edge: resolved once, for the step
    with stop_on_signals():
        result = step_delete(endpoints, run_id, options=options_for(params))
    return result.summary()


def report(params: dict[str, Any], run_id: str) -> dict[str, Any]:
    """Publish the cycle's report (runs even when a step failed: ``all_done``).

    Fails the task when the cycle failed or a guard refused it, so that the run shows
    red in the UI with the reason in the log; the report is in the run log either way.
    """
    from ledger_gc.config.edge import resolve
    from ledger_gc.errors import LedgerGcError, SafetyRefusalError
    from ledger_gc.orphans.cycle import step_report
    from ledger_gc.orphans.records import CycleStatus

    endpoints = resolve(settings_for(params))  # the edge: resolved once, for the step
    cycle_report = step_report(endpoints, run_id, options=options_for(params))
    data = cycle_report.to_dict()
    log.info("orphan cycle %s: %s", run_id, json.dumps(data, sort_keys=True, default=str))
    if cycle_report.status == CycleStatus.REFUSED:
        reasons = "; ".join(r["reason"] for r in data["refusals"] if not r.get("forced"))
        raise SafetyRefusalError(f"orphan cycle {run_id} refused: {reasons}")
    if cycle_report.status == CycleStatus.FAILED:
        raise LedgerGcError(f"orphan cycle {run_id} failed: {data['error']}")
    return {
        "status": data["status"],
        "dry_run": data["dry_run"],
        "deleted": data["phases"]["deleted"],
        "would_delete": data["phases"]["would_delete"],
        "registered": data["phases"]["registered"],
    }
