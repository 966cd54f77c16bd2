"""Fixtures for tests that load or run the DAGs with a real Airflow 3.3.

The Airflow environment itself (``AIRFLOW_HOME`` in a throwaway dir, ``dags/`` and
``plugins/`` of this repo, no example DAGs) is set by ``tests/conftest.py`` when it is
imported, because Airflow freezes its configuration at the first ``import airflow`` and
that may happen in any test directory. Here we only migrate the metadata DB, which
``dag.test()`` needs and which takes a few seconds, so only tests that ask for it pay.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
DAGS_FOLDER = REPO_ROOT / "dags"


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    """A migrated Airflow home for the session (its SQLite DB is under this path).

    ``airflow db migrate`` runs in a subprocess of this venv's Python so that the test
    process does not keep the migration's engine and logging set-up; the DB it creates is
    the one this process's Airflow then opens (same ``AIRFLOW_HOME`` and SQL Alchemy URL).
    """
    home = Path(os.environ["AIRFLOW_HOME"])
    assert os.environ.get("AIRFLOW__CORE__DAGS_FOLDER") == str(DAGS_FOLDER), (
        "tests/conftest.py did not set up the Airflow environment"
    )
    log = home / "db-migrate.log"
    with open(log, "wb") as out:
        result = subprocess.run(
            [sys.executable, "-m", "airflow", "db", "migrate"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            timeout=300,
            check=False,
        )
    if result.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        pytest.fail(f"airflow db migrate failed (exit {result.returncode}; log {log}):\n{tail}")
    return home
