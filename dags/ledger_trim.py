"""ledger_trim: the mark-then-delete trim of consumed ledgers, every few minutes.

Marks the ledgers that every cursor has consumed and retention no longer keeps, in the
same ZooKeeper write that drops them from the ledger list; then deletes the data of every
marked ledger and removes its marker once nothing of it is left. A marker whose data
could not be deleted stays, and the next run retries it (the run then fails, to be
seen). Managed ledgers are trimmed in parallel shards, bounded by the
``ledgergc_zookeeper`` pool. The work is ``ledger_gc.trim`` (see ``ledgergc trim``);
this file only wires tasks together and does no I/O when parsed.

Schedule: ``LEDGERGC_TRIM_SCHEDULE`` (cron, or ``none`` for manual runs only),
default every 10 minutes. Manual runs take the params below.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import Param, dag, task

from ledger_gc.airflow import trim_tasks
from ledger_gc.airflow.settings_hook import dag_schedule


@dag(
    dag_id="ledger_trim",
    schedule=dag_schedule("LEDGERGC_TRIM_SCHEDULE", trim_tasks.DEFAULT_SCHEDULE),
    start_date=pendulum.datetime(2024, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=timedelta(hours=1),
    default_args={
        "retries": 2,
        "retry_delay": timedelta(seconds=30),
        "execution_timeout": timedelta(minutes=30),
    },
    params={
        "dry_run": Param(False, type="boolean", description="plan only: mark and delete nothing"),
        "namespace": Param(
            "",
            type="string",
            description="only this tenant/namespace (or one managed ledger); empty: all",
        ),
        "trim_retention_seconds": Param(
            None,
            type=["null", "integer"],
            minimum=-1,
            description="retention time for this run (-1 unlimited, 0 none); empty: settings",
        ),
        "trim_retention_bytes": Param(
            None,
            type=["null", "integer"],
            minimum=-1,
            description="retention size for this run (-1 unlimited, 0 none); empty: settings",
        ),
        "max_shards": Param(
            trim_tasks.DEFAULT_MAX_SHARDS,
            type="integer",
            minimum=1,
            maximum=64,
            description="at most this many parallel trim tasks",
        ),
    },
    tags=["ledger-gc", "trim"],
    doc_md=__doc__,
)
def ledger_trim() -> None:
    @task
    def list_shards(params: dict | None = None) -> list[list[str]]:
        return trim_tasks.list_shards(params)

    @task(pool="ledgergc_zookeeper")
    def trim_shard(names: list[str], params: dict | None = None, run_id: str | None = None) -> dict:
        return trim_tasks.trim_shard(names, params, run_id or "")

    @task(trigger_rule="all_done", retries=0)
    def summarize(
        results: list, shards: list, params: dict | None = None, run_id: str | None = None
    ) -> dict:
        return trim_tasks.summarize(results, shards, params, run_id or "")

    @task(retries=0)
    def check_outcome(summary: dict) -> None:
        trim_tasks.check_outcome(summary)

    # TaskFlow passes XComArgs here, resolved to the annotated types when tasks run.
    shards = list_shards()
    results = trim_shard.expand(names=shards)
    summary = summarize(results, shards)  # type: ignore[arg-type]
    check_outcome(summary)  # type: ignore[arg-type]


ledger_trim()
