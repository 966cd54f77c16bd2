"""orphan_removal: three-phase orphan removal (Kafka KIP-370) for the ledger store.

Finds storage no metadata references (orphan ledgers, orphan partitions, and Pulsar's
offloaded segments no ledger carries), watches it through a grace window in a durable
registry, and deletes it only when the window has passed, a live ZooKeeper re-check
still finds it unreferenced and its newest object is older than retention (DESIGN.md
"Orphans"). Deletes only with ``LEDGERGC_DELETE_ENABLED`` (or the ``ledgergc_settings``
variable); otherwise every run reports what it would delete.

Tasks: survey (one Spark application: metadata snapshot, storage scan and diff, through
``spark_default``), initialize_correct (guards, then registration and correction),
delete (a branch: where the live re-check and bulk delete run), then one of
delete_on_spark (a Spark application, for more than ``LEDGERGC_ORPHAN_DELETE_SPARK_OVER``
registered orphans) or delete_in_task (the same step in the task, without a JVM), and
report (always runs; appends the cycle's summary to the run log and fails the run if the
cycle failed or a guard refused it).
The tasks share nothing but the state store (``LEDGERGC_STATE_URL``), so each may run on
another worker. The work is ``ledger_gc.orphans`` (see ``ledgergc orphans``); this file
only wires tasks together and does no I/O when parsed.

Manual trigger params: ``dry_run``, ``force`` (past every safety guard's refusal but
a partial metadata read's and a stale run's: ``orphans.options.FORCE_HELP``),
``grace_seconds``, ``retention_seconds``, ``inventory`` (an S3 Inventory report to read
instead of listing the bucket), ``offload_inventory`` (the same for the tiered-storage
bucket, ``LEDGERGC_OFFLOAD_BUCKET``: when it is set, every step also covers Pulsar's
offloaded segments). Schedule: ``LEDGERGC_ORPHAN_SCHEDULE`` (cron, or ``none`` for
manual runs only), default ``@hourly``.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag, task

from ledger_gc.airflow import orphan_tasks
from ledger_gc.airflow.settings_hook import dag_schedule
from ledger_gc.orphans.options import FORCE_HELP


@dag(
    dag_id="orphan_removal",
    description="Three-phase orphan removal (KIP-370): register, correct, delete",
    schedule=dag_schedule("LEDGERGC_ORPHAN_SCHEDULE", "@hourly"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=2)},
    params={
        "dry_run": Param(
            None,
            type=["null", "boolean"],
            description="Report only (default: dry unless deletion is enabled).",
        ),
        "force": Param(
            False,
            type="boolean",
            description=FORCE_HELP[0].upper() + FORCE_HELP[1:] + ".",
        ),
        "grace_seconds": Param(
            None, type=["null", "integer"], minimum=0, description="Override the grace window."
        ),
        "retention_seconds": Param(
            None, type=["null", "integer"], minimum=0, description="Override retention."
        ),
        "inventory": Param(
            None,
            type=["null", "string"],
            description="S3 Inventory report (Parquet/CSV path) to read instead of listing.",
        ),
        "offload_inventory": Param(
            None,
            type=["null", "string"],
            description="S3 Inventory report of the offload bucket (tiered storage).",
        ),
    },
    tags=["ledger-gc", "orphans"],
    doc_md=__doc__,
)
def orphan_removal() -> None:
    survey = orphan_tasks.OrphanSparkSubmitOperator(task_id="survey", step="survey")

    @task
    def initialize_correct(params: dict | None = None, run_id: str | None = None) -> dict:
        return orphan_tasks.initialize_and_correct(params or {}, run_id or "")

    @task.branch
    def delete(params: dict | None = None) -> str:
        return orphan_tasks.choose_delete(params or {})

    @task(task_id=orphan_tasks.DELETE_IN_TASK)
    def delete_in_task(params: dict | None = None, run_id: str | None = None) -> dict:
        return orphan_tasks.delete(params or {}, run_id or "")

    delete_on_spark = orphan_tasks.OrphanSparkSubmitOperator(
        task_id=orphan_tasks.DELETE_ON_SPARK, step="delete"
    )

    @task(trigger_rule="all_done", retries=0)
    def report(params: dict | None = None, run_id: str | None = None) -> dict:
        return orphan_tasks.report(params or {}, run_id or "")

    deleted = [delete_in_task(), delete_on_spark]
    survey >> initialize_correct() >> delete() >> deleted >> report()


orphan_removal()
