"""A state store's password never shows, however SQLAlchemy reads its URL (issue 33).

A real PostgreSQL role whose password holds ``/``, ``+``, ``@``, ``:``, ``%`` and ``=``
(a base64 password has the first and last), its URL written as an operator writes it:
``@`` and ``%`` escaped as SQLAlchemy asks, the rest as they are (``minimal``), or every
reserved character escaped (``quoted``). ``urlsplit`` ends the URL's authority at the
first ``/``; SQLAlchemy takes the password up to the ``@``: a mask that read it the
first way left most of it in clear. The password must be absent from ``ledgergc status
--json``, its error for a wrong database, its DEBUG log, and what the orphan DAG's Spark
task puts on spark-submit's command line and in Spark's conf.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from typing import Any
from urllib.parse import quote

import pytest

from ledger_gc.airflow import orphan_tasks, settings_hook
from ledger_gc.config.settings import Settings
from ledger_gc.errors import ConfigError
from ledger_gc.state.stores import open_store
from local_stack.postgres import POSTGRES_USER, PostgresServer
from local_stack.seaweedfs import TEST_AWS_ENV

PASSWORD = "/Pg7x+Vq2m@Kd8s:Wz%Rt4n=Hy6c"
#: The URL's forms of it: only what SQLAlchemy needs escaped, or every reserved character.
ENCODINGS = {
    "minimal": PASSWORD.replace("%", "%25").replace("@", "%40"),
    "quoted": quote(PASSWORD, safe=""),
}
RUN_ID = "manual__2026-01-01T00:00:00+00:00"


def leaks(text: str) -> list[str]:
    """The password's forms and pieces (four characters or more) found in ``text``."""
    pieces = [p for p in re.split(r"[^A-Za-z0-9]+", PASSWORD) if len(p) >= 4]
    forms = {PASSWORD, *ENCODINGS.values(), *pieces}
    return sorted(form for form in forms if form in text)


def role_and_database(server: PostgresServer) -> tuple[str, str]:
    """A login role with ``PASSWORD`` and a database it owns."""
    import psycopg
    from psycopg import sql

    name = f"gc_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(
        host="127.0.0.1",
        port=server.port,
        user=POSTGRES_USER,
        password=server.password,
        dbname="postgres",
        autocommit=True,
    ) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(name), sql.Literal(PASSWORD)
            )
        )
        owned = sql.SQL("CREATE DATABASE {} OWNER {}")
        conn.execute(owned.format(sql.Identifier(name), sql.Identifier(name)))
    return name, name


def state_url(server: PostgresServer, encoding: str, role: str, database: str) -> str:
    return f"postgresql+psycopg://{role}:{ENCODINGS[encoding]}@127.0.0.1:{server.port}/{database}"


def ledgergc(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ledger_gc.cli", *args],
        env={**TEST_AWS_ENV, **settings.to_env(), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=settings.state_dir.parent,
    )


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_a_state_url_password_is_in_no_output_error_or_log(
    settings: Settings, postgres_server: PostgresServer, encoding: str
) -> None:
    role, database = role_and_database(postgres_server)
    url = state_url(postgres_server, encoding, role, database)
    mine = Settings.from_env({**settings.to_env(), "LEDGERGC_STATE_URL": url})
    open_store(mine).ready()  # SQLAlchemy reads the URL as written: the role logs in

    done = ledgergc(mine, "--log-level", "DEBUG", "status", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert leaks(done.stdout) == [] and leaks(done.stderr) == [], done.stdout
    shown = json.loads(done.stdout)["settings"]["LEDGERGC_STATE_URL"]
    assert f"{role}:***@127.0.0.1" in json.dumps(shown), shown

    wrong = Settings.from_env({**mine.to_env(), "LEDGERGC_STATE_URL": url + "_missing"})
    refused = ledgergc(wrong, "--log-level", "DEBUG", "status", "--json")
    assert refused.returncode == 2, refused.stderr[-3000:]
    error = json.loads(refused.stdout)["error"]
    assert f"{role}:***@127.0.0.1" in error and f"{database}_missing" in error, error
    assert leaks(refused.stdout) == [] and leaks(refused.stderr) == [], refused.stderr


@pytest.fixture
def airflow_env(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The task's settings from the environment, a Spark connection as each test sets it."""
    monkeypatch.setattr(settings_hook, "_variable", dict)  # no metadata database here

    def configure(settings: Settings, master: dict[str, Any]) -> None:
        for name, value in settings.to_env().items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(master))

    return configure


def rendered_survey() -> orphan_tasks.OrphanSparkSubmitOperator:
    operator = orphan_tasks.OrphanSparkSubmitOperator(task_id="survey", step="survey")
    operator.render_template_fields({"params": {}, "run_id": RUN_ID, "ti": None})
    return operator


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_a_state_url_password_reaches_no_spark_submit_command_line_or_conf(
    settings: Settings, postgres_server: PostgresServer, airflow_env: Any, encoding: str
) -> None:
    """A standalone master: the settings go in spark-submit's environment alone, never on
    its command line or in Spark's conf. YARN would put them on the command line as Spark
    conf: the task refuses, naming the setting that holds a secret, never the secret."""
    role, database = role_and_database(postgres_server)
    url = state_url(postgres_server, encoding, role, database)
    mine = Settings.from_env({**settings.to_env(), "LEDGERGC_STATE_URL": url})

    airflow_env(mine, {"conn_type": "spark", "host": "spark://spark-master.example:7077"})
    operator = rendered_survey()
    command = operator._get_hook()._build_spark_submit_command(operator.application)
    assert leaks(json.dumps(command)) == [] and leaks(json.dumps(operator.conf)) == []

    airflow_env(mine, {"conn_type": "spark", "host": "yarn"})
    with pytest.raises(ConfigError) as err:
        rendered_survey()
    assert "LEDGERGC_STATE_URL" in str(err.value), err.value
    assert leaks(str(err.value)) == []


def test_sqlalchemy_and_the_mask_read_the_same_password() -> None:
    """The mask finds the password where SQLAlchemy does, for each form."""
    from sqlalchemy.engine import make_url

    from ledger_gc.state.url import masked

    for encoding in ENCODINGS.values():
        url = f"postgresql+psycopg://gc:{encoding}@db.example.com:5432/ledgergc"
        assert make_url(url).password == PASSWORD
        assert masked(url) == "postgresql+psycopg://gc:***@db.example.com:5432/ledgergc"
