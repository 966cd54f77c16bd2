"""orphan_removal: three-phase orphan removal (Kafka KIP-370) for the ledger store.

Finds storage no metadata references (orphan ledgers, orphan partitions, and Pulsar's
offloaded segments no ledger carries), watches it
through a grace window in a durable registry, and deletes it only when the window has
passed, a live ZooKeeper re-check still finds it unreferenced and its newest object is
older than retention (DESIGN.md "Orphans"). Deletes only with ``LEDGERGC_DELETE_ENABLED``
(or the ``ledgergc_settings`` variable); otherwise every run reports what it would delete.

Tasks: snapshot, scan and diff (Spark, through ``spark_default``), initialize/correct
(guards, then registration and correction), delete (Spark: live re-check and bulk
delete), report (always runs; appends the cycle's summary to the run log and fails the
run if the cycle failed or a guard refused it).

Manual trigger params: ``dry_run``, ``force`` (past the zero-managed-ledgers and
orphan-fraction guards), ``grace_seconds``, ``retention_seconds``, ``inventory`` (an S3
Inventory report to read instead of listing the bucket), ``offload_inventory`` (the same
for the tiered-storage bucket, ``LEDGERGC_OFFLOAD_BUCKET``: when it is set, every step
also covers Pulsar's offloaded segments). Schedule:
``LEDGERGC_ORPHAN_SCHEDULE`` (default ``@hourly``).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, Param, TriggerRule

from ledger_gc.airflow import orphan_tasks

with DAG(
    dag_id="orphan_removal",
    description="Three-phase orphan removal (KIP-370): register, correct, delete",
    schedule=os.environ.get("LEDGERGC_ORPHAN_SCHEDULE", "@hourly"),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
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
            description="Go past the zero-managed-ledgers and orphan-fraction guards.",
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
) as dag:
    snapshot = orphan_tasks.OrphanSparkSubmitOperator(task_id="snapshot", step="snapshot")
    scan = orphan_tasks.OrphanSparkSubmitOperator(task_id="scan", step="scan")
    diff = orphan_tasks.OrphanSparkSubmitOperator(task_id="diff", step="diff")
    initialize_correct = PythonOperator(
        task_id="initialize_correct", python_callable=orphan_tasks.initialize_and_correct
    )
    delete = orphan_tasks.OrphanSparkSubmitOperator(task_id="delete", step="delete")
    report = PythonOperator(
        task_id="report",
        python_callable=orphan_tasks.report,
        trigger_rule=TriggerRule.ALL_DONE,
        retries=0,
    )
    snapshot >> scan >> diff >> initialize_correct >> delete >> report
