"""Every file under dags/ parses in Airflow 3.3 without errors and without I/O at import.

The scheduler's DAG processor re-imports every DAG file every few minutes, so a DAG file
must only wire tasks together: no ZooKeeper session, no S3 call, no slow import. Here the
files are parsed the way Airflow does (``DagBag``, which in Airflow 3.3 lives in
``airflow.dag_processing.dagbag`` and no longer takes ``include_examples``) with outbound
network connections forbidden, so a DAG file that talks to a server at import fails.
"""

from __future__ import annotations

import socket
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"

# Airflow's own limit is 30 s (core.dagbag_import_timeout); a DAG file that needs more
# than a few seconds is doing work at import that belongs in a task.
MAX_PARSE_SECONDS = 10.0


class ImportTimeIOError(RuntimeError):
    """A DAG file tried to open a network connection while being imported."""


@contextmanager
def no_network() -> Iterator[None]:
    """Forbid TCP/UDP connections (Unix sockets, e.g. to SQLite's files, stay allowed)."""
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def check(sock: socket.socket, address: Any) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            raise ImportTimeIOError(f"DAG file opened a connection to {address} at import")

    def connect(sock: socket.socket, address: Any) -> None:
        check(sock, address)
        real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> int:
        check(sock, address)
        return real_connect_ex(sock, address)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(socket.socket, "connect", connect)
        mp.setattr(socket.socket, "connect_ex", connect_ex)
        yield


def parse_dags(folder: Path) -> Any:
    """Parse ``folder`` as Airflow's DAG processor would, with the network forbidden."""
    from airflow.dag_processing.dagbag import DagBag

    with no_network():
        # safe_mode=False: import every .py file, not only those mentioning "dag", so that
        # helper modules beside the DAGs are checked too.
        return DagBag(dag_folder=str(folder), safe_mode=False)


def test_dag_files_import_without_errors_or_io() -> None:
    dag_files = sorted(DAGS_FOLDER.rglob("*.py")) if DAGS_FOLDER.is_dir() else []

    bag = parse_dags(DAGS_FOLDER)

    assert bag.import_errors == {}, "DAG files failed to import:\n" + "\n".join(
        f"{path}:\n{error}" for path, error in bag.import_errors.items()
    )
    parsed = {stat.file for stat in bag.dagbag_stats}
    expected = {path.relative_to(DAGS_FOLDER).as_posix() for path in dag_files}
    assert expected <= parsed, f"files Airflow did not parse: {sorted(expected - parsed)}"
    slow = {
        stat.file: round(stat.duration.total_seconds(), 1)
        for stat in bag.dagbag_stats
        if stat.duration.total_seconds() > MAX_PARSE_SECONDS
    }
    assert not slow, f"DAG files slower than {MAX_PARSE_SECONDS}s to import: {slow}"
    for dag_id, dag in bag.dags.items():
        assert dag.tasks, f"DAG {dag_id} has no tasks"


def test_the_check_catches_a_dag_file_that_connects_at_import(tmp_path: Path) -> None:
    # Guards the guard: with dags/ still empty, this is what keeps the test above honest.
    (tmp_path / "chatty_dag.py").write_text(
        textwrap.dedent(
            """
            import socket

            from airflow.sdk import DAG

            socket.create_connection(("127.0.0.1", 9), timeout=1)
            with DAG(dag_id="chatty", schedule=None):
                pass
            """
        )
    )

    bag = parse_dags(tmp_path)

    assert bag.dags == {}
    [error] = bag.import_errors.values()
    assert "at import" in error
