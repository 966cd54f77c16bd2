"""A state URL's password in the places the mask does not look (issue 33's review).

libpq and psycopg take a password as a query parameter too, and SQLAlchemy hands a
URL's query to the driver: ``postgresql+psycopg://gc@db/x?password=...`` logs in as
``gc:...@`` does. And a URL mistyped (``postgresql:/``, a missing scheme) is not in
the form the mask reads, yet its error quoted it whole.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest
from test_state_url_secrets import (
    PASSWORD,
    airflow_env,  # noqa: F401  # a fixture
    leaks,
    ledgergc,
    rendered_survey,
    role_and_database,
)

from ledger_gc.config.settings import Settings
from ledger_gc.errors import ConfigError
from ledger_gc.state.stores import open_store
from local_stack.postgres import PostgresServer


def test_a_password_in_the_urls_query_is_in_no_output_or_command_line(
    settings: Settings,
    postgres_server: PostgresServer,
    airflow_env: object,  # noqa: F811
) -> None:
    role, database = role_and_database(postgres_server)
    url = (
        f"postgresql+psycopg://{role}@127.0.0.1:{postgres_server.port}/{database}"
        f"?password={quote(PASSWORD, safe='')}"
    )
    mine = Settings.from_env({**settings.to_env(), "LEDGERGC_STATE_URL": url})
    open_store(mine).ready()  # the driver takes the query's password: the role logs in

    done = ledgergc(mine, "--log-level", "DEBUG", "status", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert leaks(done.stdout) == [] and leaks(done.stderr) == [], json.loads(done.stdout)[
        "settings"
    ]["LEDGERGC_STATE_URL"]

    airflow_env(mine, {"conn_type": "spark", "host": "yarn"})  # type: ignore[operator]
    with pytest.raises(ConfigError) as err:
        rendered_survey()  # YARN would carry the settings on spark-submit's command line
    assert "LEDGERGC_STATE_URL" in str(err.value), err.value


@pytest.mark.parametrize(
    "url",
    [
        "postgresql:/gc:{pw}@db.example.com/ledgergc",
        "gc:{pw}@db.example.com/ledgergc",
        "sqlite://gc:{pw}@/",
    ],
)
def test_a_mistyped_state_url_is_refused_without_its_password(settings: Settings, url: str) -> None:
    mine = {**settings.to_env(), "LEDGERGC_STATE_URL": url.format(pw=quote(PASSWORD, safe=""))}
    with pytest.raises(ConfigError) as err:
        Settings.from_env(mine)
    assert "LEDGERGC_STATE_URL" in str(err.value)
    assert leaks(str(err.value)) == [], err.value
