"""Which Spark master a cycle run outside spark-submit (``ledgergc orphans``) uses."""

from __future__ import annotations

import pytest

from ledger_gc.spark.session import submitted_master


@pytest.mark.parametrize(
    ("submit_args", "master"),
    [
        ("", None),
        ("pyspark-shell", None),
        (
            "--master spark://127.0.0.1:7077 --conf spark.cores.max=2 pyspark-shell",
            "spark://127.0.0.1:7077",
        ),
        ("--conf spark.executor.memory=1g --master=yarn pyspark-shell", "yarn"),
        (
            "--conf 'spark.executor.extraJavaOptions=-Da=1 -Db=2' --master local[2] pyspark-shell",
            "local[2]",
        ),
        ("--master", None),
    ],
)
def test_the_master_pyspark_submit_args_names(submit_args: str, master: str | None) -> None:
    assert submitted_master(submit_args) == master
