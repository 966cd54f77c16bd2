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


def test_a_lazy_session_is_made_once_when_needed_and_its_error_raised_there() -> None:
    import threading

    from ledger_gc.spark.session import LazySession, start_early

    made = []
    ready = threading.Event()

    def make() -> object:
        ready.wait(5)
        made.append(1)
        return type("Session", (), {"sparkContext": "context"})()

    lazy = LazySession(make)  # type: ignore[arg-type]
    assert made == []
    start_early(lazy)  # type: ignore[arg-type]
    start_early(lazy)  # type: ignore[arg-type]
    ready.set()
    assert lazy.sparkContext == "context" and lazy.sparkContext == "context"
    assert made == [1]

    def fail() -> object:
        raise RuntimeError("no java")

    with pytest.raises(RuntimeError, match="no java"):
        _ = LazySession(fail).sparkContext  # type: ignore[arg-type]
    start_early(None)  # any other session: nothing
