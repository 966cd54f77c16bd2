"""Where phase 3 runs is a branch of the ``orphan_removal`` DAG, seen in the Grid view.

The ``delete`` task chooses ``delete_in_task`` or ``delete_on_spark``
(``orphan_tasks.choose_delete``); the one not chosen is skipped, and ``report`` runs
after either (``all_done``). The DAG file only wires these; parsed as Airflow does.
"""

from __future__ import annotations

from pathlib import Path

DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"


def test_the_delete_branch_leads_to_both_ways_and_both_to_the_report() -> None:
    from airflow.dag_processing.dagbag import DagBag

    from ledger_gc.airflow import orphan_tasks

    bag = DagBag(dag_folder=str(DAGS_FOLDER), safe_mode=False)
    assert bag.import_errors == {}
    dag = bag.dags["orphan_removal"]

    order = [t.task_id for t in dag.topological_sort()]
    assert order[:3] == ["survey", "initialize_correct", "delete"]
    assert order[-1] == "report"
    branch = dag.get_task("delete")
    assert branch.downstream_task_ids == {"delete_in_task", "delete_on_spark"}
    assert dag.get_task("report").upstream_task_ids == {"delete_in_task", "delete_on_spark"}
    assert dag.get_task("report").trigger_rule == "all_done"
    on_spark = dag.get_task("delete_on_spark")
    assert isinstance(on_spark, orphan_tasks.OrphanSparkSubmitOperator)
    assert on_spark.step == "delete"
    assert not isinstance(dag.get_task("delete_in_task"), orphan_tasks.OrphanSparkSubmitOperator)
