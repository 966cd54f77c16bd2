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
        ("--conf spark.master=spark://127.0.0.1:7077 pyspark-shell", "spark://127.0.0.1:7077"),
        ("--conf=spark.master=yarn pyspark-shell", "yarn"),
        # --master wins over a conf, wherever each is (spark-submit's precedence).
        ("--master local[2] --conf spark.master=spark://h:7077 pyspark-shell", "local[2]"),
        ("--conf spark.master=spark://h:7077 --master local[2] pyspark-shell", "local[2]"),
        ("--conf spark.master.rest.enabled=true pyspark-shell", None),
    ],
)
def test_the_master_pyspark_submit_args_names(submit_args: str, master: str | None) -> None:
    assert submitted_master(submit_args) == master


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[*]", True),
        ("local[2]", True),
        ("local-cluster[2,1,1024]", True),
        ("spark://127.0.0.1:7077", False),
        ("yarn", False),
        ("k8s://https://kubernetes:443", False),
    ],
)
def test_which_masters_are_local(master: str, local: bool) -> None:
    """A local master's executors are this machine's own processes (what the Airflow
    path decides by, ``startswith("local")``); any other gets short-lived credentials."""
    from ledger_gc.config.spark_credentials import is_local_master

    assert is_local_master(master) is local


def test_the_session_master_is_the_given_one_then_the_submit_args_then_local(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ledger_gc.spark.session import DEFAULT_MASTER, session_master

    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    assert session_master() == DEFAULT_MASTER
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--master spark://h:7077 pyspark-shell")
    assert session_master() == "spark://h:7077"
    assert session_master("local[2]") == "local[2]"


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
