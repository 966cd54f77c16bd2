#!/usr/bin/env python3
"""Figure 6: a full orphan cycle of the demo store through ``airflow dags test
orphan_removal``: its total time and each task's.

The demo store (``include/demo_store.py``: topics with consumers) and its planted leaks
(``include/demo_leaks.py``: orphan ledgers, a deleted topic's data, a foreign file) are
written into a chroot and bucket of this run's own; then ``airflow dags test
orphan_removal`` runs once with ``grace_seconds`` and ``retention_seconds`` 0, so that
one run scans, registers, re-checks and deletes (as tests/dags/test_orphan_removal_dag.py
does). Its Spark tasks go through ``spark-submit`` (``local[*]``). Each task's time is
its task instance's ``duration`` in the Airflow database of the run (``AIRFLOW_HOME``
under ``var/bench/orphan-cycle/``). The run is checked: every planted leak deleted.

There is no baseline: the figure is where a cycle's time goes (Spark start-up against
the work itself). ``--quick`` is the same run (the demo store is small already).

    .venv/bin/python include/local_stack run -- .venv/bin/python bench/orphan_cycle.py
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common
from _common import fmt_s, say

from ledger_gc.config.edge import block_store

sys.path.insert(0, str(_common.ROOT / "include"))
from local_stack.server_process import FAST_JVM

DAG_ID = "orphan_removal"


def task_times(db: Path) -> list[dict[str, Any]]:
    """Every task instance of the DAG's run, in the order they started."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT task_id, map_index, state, start_date, end_date, duration FROM task_instance"
            " WHERE dag_id = ? ORDER BY start_date, task_id, map_index",
            (DAG_ID,),
        ).fetchall()
    return [
        {
            "task": task + (f"[{index}]" if index is not None and index >= 0 else ""),
            "state": state,
            "seconds": round(float(duration or 0.0), 2),
            "start": start,
            "end": end,
        }
        for task, index, state, start, end, duration in rows
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the same run (small already)")
    args = parser.parse_args()
    _common.require_stack()

    from demo_leaks import plant_leaks
    from demo_store import write_demo_store
    from ledger_gc.run_log import read_runs
    from ledger_gc.storage.s3 import LedgerStorage

    tag = _common.run_tag()
    directory = _common.VAR / "orphan-cycle" / tag
    shutil.rmtree(directory, ignore_errors=True)
    settings = _common.bench_settings(
        chroot=f"/bench-cycle-{tag}",
        bucket=f"bench-cycle-{tag}",
        state_dir=directory / "state",
        delete_enabled=True,
    )
    _common.create_chroot(settings)
    storage = LedgerStorage(block_store(settings))
    storage.client.create_bucket(Bucket=settings.bucket)
    started = time.perf_counter()
    names = write_demo_store(settings)
    leaks = plant_leaks(settings)
    planted = {
        leak["prefix"] for kind in ("orphan_ledgers", "orphan_partitions") for leak in leaks[kind]
    }
    objects = sum(1 for _ in storage.iter_objects(settings.key_prefix))
    say(
        f"demo store: {len(names)} topics, {objects} objects, {len(planted)} planted leaks "
        f"({time.perf_counter() - started:.1f}s)"
    )

    home = directory / "airflow"
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update(settings.to_env())
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(_common.ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(_common.ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(
                str(_common.ROOT / p) for p in ("plugins", "include", "spark_apps")
            ),
            # As bin/demo and the DAG test: short Spark apps start faster on a quick JIT tier.
            "SPARK_SUBMIT_OPTS": FAST_JVM,
            "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
        }
    )
    airflow = [sys.executable, "-m", "airflow"]
    log = directory / "airflow.log"
    started = time.perf_counter()
    with open(log, "ab") as out:
        migrated = subprocess.run(
            [*airflow, "db", "migrate"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=600,
            check=False,
        )
    migrate_s = time.perf_counter() - started
    if migrated.returncode != 0:
        raise SystemExit(f"airflow db migrate failed; log {log}")
    say(f"airflow db migrate: {migrate_s:.1f}s (not part of the cycle)")
    conf = {"grace_seconds": 0, "retention_seconds": 0, "force": False, "dry_run": False}
    say(f"airflow dags test {DAG_ID} -c {json.dumps(conf)}")
    started = time.perf_counter()
    with open(log, "ab") as out:
        done = subprocess.run(
            [*airflow, "dags", "test", DAG_ID, "-c", json.dumps(conf)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=900,
            check=False,
        )
    total = time.perf_counter() - started
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise SystemExit(f"airflow dags test {DAG_ID} failed (log {log}):\n{tail}")
    tasks = task_times(home / "airflow.db")
    [summary] = read_runs(settings.state_dir, "orphans")
    deleted = {item["prefix"] for item in summary["deleted"]}
    if summary["status"] != "ok" or deleted != planted:
        raise SystemExit(f"the cycle did not delete exactly the planted leaks: {summary}")
    say(f"cycle: {total:.1f}s, {len(tasks)} task instances; deleted the {len(planted)} leaks")
    task_sum = sum(t["seconds"] for t in tasks)
    rows = [(f"airflow dags test {DAG_ID} (total)", fmt_s(total), "", "")]
    rows += [(f"  {t['task']} ({t['state']})", fmt_s(t["seconds"]), "", "") for t in tasks]
    rows.append(("  sum of the task times", fmt_s(task_sum), "", ""))
    rows.append(("  outside the tasks (DAG parsing, scheduling)", fmt_s(total - task_sum), "", ""))
    _common.report(
        "orphan_cycle",
        rows,
        [
            ("every planted leak deleted, nothing else", True),
            ("one cycle well under half of the first version's ~100 s (< 50 s)", total < 50),
        ],
        {
            "items": objects,
            "quick": args.quick,
            "cycle_s": round(total, 2),
            "tasks": [{k: t[k] for k in ("task", "state", "seconds")} for t in tasks],
            "task_sum_s": round(task_sum, 2),
            "db_migrate_s": round(migrate_s, 2),
            "leaks_deleted": len(deleted),
            "topics": len(names),
        },
    )
    with _common.kazoo_client(settings) as client:
        _common.delete_tree(client, "/")
    storage.delete_keys([o.key for o in storage.iter_objects("")])
    storage.client.delete_bucket(Bucket=settings.bucket)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
