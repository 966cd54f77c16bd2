"""Shared fixtures: one local ZooKeeper + SeaweedFS S3 per session, a fresh namespace per test.

Every test gets its own ZooKeeper chroot and its own bucket (``settings``), so tests never
see each other's managed ledgers and need no cleanup; the servers themselves start once
per session because a JVM start costs seconds. Tests that stop ZooKeeper use
``private_zookeeper`` so that they cannot break the shared one for everybody else.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from ledger_gc.config.edge import block_store, zk_endpoint

REPO_ROOT = Path(__file__).resolve().parent.parent


def _isolate_airflow() -> Path:
    """Point Airflow at a throwaway home before anything imports it.

    Airflow reads its configuration once, at import, and then caches it (and creates
    ``$AIRFLOW_HOME/airflow.cfg`` plus a SQLite DB there). So the variables must be set
    before the first ``import airflow`` anywhere in the test process, whichever test
    directory that happens in; the root conftest is imported before any test module and
    before any other conftest, which is why this runs here at import time and not in a
    fixture. The user's own ``AIRFLOW__*`` settings are dropped so that a developer's real
    metadata DB can never be migrated or written by a test.

    ``core.unit_test_mode`` is deliberately left off: in Airflow 3.3 it swaps the whole
    config for Airflow's own ``unit_tests.cfg`` (example DAGs on, a fresh random Fernet key
    per process), which would make ``airflow`` subprocesses disagree with this process.
    """
    if "airflow" in sys.modules:
        raise RuntimeError("airflow was imported before tests/conftest.py could isolate it")
    for name in list(os.environ):
        if name.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_")):
            del os.environ[name]
    home = Path(tempfile.mkdtemp(prefix="ledgergc-airflow-home-"))
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO_ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            # Fixed for the session so that this process and `airflow ...` subprocesses can
            # read each other's encrypted connections and tokens.
            "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
            "AIRFLOW__API_AUTH__JWT_SECRET": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        }
    )
    return home


AIRFLOW_HOME = _isolate_airflow()
# Every Spark driver JVM a test starts (the CLI's, spark-submit's under Airflow, the
# benchmarks' quick runs) lives seconds: the client compiler alone and the serial
# collector cost the two shared cores far less than the JVM's defaults. A developer's
# own setting stands.
from local_stack.server_process import FAST_JVM  # noqa: E402  (no Airflow in it)

os.environ.setdefault("SPARK_SUBMIT_OPTS", FAST_JVM)
# Set by pytest_sessionfinish; checked at exit, after Airflow's own exit handlers (which may
# still touch AIRFLOW_HOME) have run, since atexit runs handlers in reverse order.
_remove_airflow_home = False


@atexit.register
def _cleanup_airflow_home() -> None:
    if _remove_airflow_home:
        shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


# Imported only now: nothing below may pull in Airflow before the isolation above.
import boto3  # noqa: E402
from botocore.config import Config  # noqa: E402
from kazoo.client import KazooClient  # noqa: E402

from ledger_gc.config.settings import Settings  # noqa: E402
from local_stack.postgres import PostgresServer  # noqa: E402
from local_stack.server_process import LocalStackError  # noqa: E402
from local_stack.stack import LocalStack  # noqa: E402
from local_stack.zookeeper import ZooKeeperServer  # noqa: E402

_STACK_LOG_DIR = pytest.StashKey[Path]()
_PG_LOG_DIR = pytest.StashKey[Path]()
_AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


# --- the shared stack ----------------------------------------------------------------------


@pytest.fixture(scope="session")
def local_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalStack]:
    """ZooKeeper and SeaweedFS S3 for the whole session, with test AWS credentials in
    os.environ.

    The credentials are fake on purpose (the local SeaweedFS knows exactly this pair): boto3
    then never signs a request with a developer's real key, and code that builds its own
    client finds credentials.
    """
    stack = LocalStack(tmp_path_factory.mktemp("local-stack"))
    request.config.stash[_STACK_LOG_DIR] = stack.log_dir
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            mp.delenv(name, raising=False)
        for name, value in _AWS_TEST_ENV.items():
            mp.setenv(name, value)
        try:
            stack.start()
        except LocalStackError as exc:
            pytest.fail(f"local stack did not start (logs in {stack.log_dir}): {exc}")
        try:
            yield stack
        finally:
            stack.stop()


@pytest.fixture(scope="session")
def s3_client(local_stack: LocalStack) -> Any:
    """A boto3 S3 client for the session's SeaweedFS endpoint."""
    return boto3.client(
        "s3",
        endpoint_url=local_stack.s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(s3={"addressing_style": "path"}),
    )


@contextlib.contextmanager
def _kazoo(hosts: str) -> Iterator[KazooClient]:
    """A started kazoo client, stopped and closed on exit."""
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=30)
    try:
        yield client
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="session")
def _zk_root_client(local_stack: LocalStack) -> Iterator[KazooClient]:
    """One session on the shared ZooKeeper's root, used only to create test chroots."""
    with _kazoo(local_stack.zk_hosts) as client:
        yield client


def _new_namespace(
    root: KazooClient, zk_hosts: str, s3_client: Any, s3_endpoint: str, state_dir: Path
) -> Settings:
    """Settings for a fresh chroot and bucket: what a brand-new, empty store looks like.

    ``root`` is a client on ``zk_hosts`` without chroot: kazoo needs a chroot's znode to
    exist before it can use it, so the test's chroot is created first.
    """
    name = uuid.uuid4().hex[:12]
    root.ensure_path(f"/t{name}")
    bucket = f"t-{name}"
    s3_client.create_bucket(Bucket=bucket)
    return Settings(
        zk_address=f"{zk_hosts}/t{name}",
        s3_endpoint=s3_endpoint,
        bucket=bucket,
        prefix="ledgers",
        state_dir=state_dir,
    )


@pytest.fixture
def settings(
    request: pytest.FixtureRequest,
    local_stack: LocalStack,
    _zk_root_client: KazooClient,
    s3_client: Any,
    tmp_path: Path,
) -> Settings:
    """Settings for this test alone: its own ZooKeeper chroot and bucket on the shared stack
    (and, in a ``state_backends`` test, its own state store of that run's backend)."""
    settings = _new_namespace(
        _zk_root_client,
        local_stack.zk_hosts,
        s3_client,
        local_stack.s3_endpoint,
        tmp_path / "state",
    )
    if "state_backend" in request.fixturenames:
        url = request.getfixturevalue("state_url")
        if url is not None:
            settings = settings.with_overrides(state_url=url)
    return settings


# --- the state store: SQLite or PostgreSQL -------------------------------------------------


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A ``state_backends`` test runs on the embedded SQLite store and on PostgreSQL."""
    if metafunc.definition.get_closest_marker("state_backends"):
        if "state_backend" not in metafunc.fixturenames:
            metafunc.fixturenames.append("state_backend")  # as usefixtures would
        metafunc.parametrize("state_backend", ["sqlite", "postgresql"], indirect=True)


@pytest.fixture
def state_backend(request: pytest.FixtureRequest) -> str:
    """ "sqlite" or "postgresql" (``state_backends`` tests only)."""
    return str(getattr(request, "param", "sqlite"))


@pytest.fixture(scope="session")
def postgres_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PostgresServer]:
    """A PostgreSQL for the session (started on first use: only state tests need it)."""
    log_dir = tmp_path_factory.mktemp("postgresql-logs")
    server = PostgresServer(log_dir=log_dir)
    request.config.stash[_PG_LOG_DIR] = log_dir
    try:
        server.start()
    except LocalStackError as exc:
        server.remove()
        pytest.fail(f"PostgreSQL did not start (log in {log_dir}): {exc}")
    try:
        yield server
    finally:
        server.remove()


def new_postgres_database(server: PostgresServer) -> str:
    """A fresh, empty database on ``server``; its SQLAlchemy URL."""
    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(
        host="127.0.0.1",
        port=server.port,
        user="postgres",
        password=server.password,
        dbname="postgres",
        autocommit=True,
    ) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return server.url(database=name)


@pytest.fixture
def state_url(request: pytest.FixtureRequest) -> str | None:
    """The state URL of this run of a ``state_backends`` test: None on SQLite (the default
    store in the state dir), a fresh database's URL on PostgreSQL."""
    if request.getfixturevalue("state_backend") == "sqlite":
        return None
    return new_postgres_database(request.getfixturevalue("postgres_server"))


@pytest.fixture
def state_location(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """Where a state-store test's store is: a state dir (SQLite) or a PostgreSQL URL."""
    url = request.getfixturevalue("state_url")
    return url if url is not None else tmp_path / "state"


@pytest.fixture
def zk_client(settings: Settings) -> Iterator[KazooClient]:
    """A started kazoo client inside the test's chroot (stopped after the test)."""
    with _kazoo(settings.zk_hosts) as client:
        yield client


# --- a ZooKeeper of the test's own --------------------------------------------------------


@pytest.fixture
def private_zookeeper(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper for this test alone, free to be stopped and restarted.

    Its log path is attached to the test's report, so a failure shows where to look.
    """
    server = ZooKeeperServer(tmp_path / "private-zookeeper", log_dir=tmp_path / "logs")
    request.node.add_report_section("setup", "private zookeeper", f"log: {server.log_path}")
    try:
        server.start()
    except LocalStackError as exc:
        pytest.fail(f"private ZooKeeper did not start: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def private_settings(
    private_zookeeper: ZooKeeperServer,
    local_stack: LocalStack,
    s3_client: Any,
    tmp_path: Path,
) -> Settings:
    """Like ``settings``, but on ``private_zookeeper`` (S3 is the shared SeaweedFS)."""
    with _kazoo(private_zookeeper.hosts) as root:
        return _new_namespace(
            root, private_zookeeper.hosts, s3_client, local_stack.s3_endpoint, tmp_path / "state"
        )


# --- the order of the files --------------------------------------------------------------

#: Files that take minutes, collected first (measured alone, issue 33: wall time with
#: ``--durations=0``). bin/test runs two test processes, each taking the next file when
#: it is free (pytest-xdist, --dist loadfile), so the longest start at once, and the
#: seconds-long unit files at the end fill whichever process ends first: both end
#: together rather than one running a long file alone at the end.
#:
#: xdist also hands a process a second file up front while its first has two tests or
#: fewer: the first two files go one to each process and the third to the first's. So
#: test_local_stack.py is third, on the process that runs test_scale_out.py, and reuses
#: its ZooKeeper ensemble and Spark cluster (six JVMs the other process need not start).
LONGEST_FIRST = (
    "tests/integration/test_scale_out.py",  # ~11 min alone on a busy machine, 264 s CPU
    "tests/browser/test_ledger_gc_page.py",  # ~3 min: Airflow standalone starts
    "tests/integration/test_local_stack.py",  # ~1.5 min
    "tests/bench/test_bench_smoke.py",  # ~3 min: each benchmark a process of its own
    "tests/integration/test_zookeeper_security.py",  # ~1.5 min
    "tests/integration/test_orphans_zookeeper_outage.py",  # ~1.5 min
    "tests/dags/test_orphan_removal_dag.py",  # ~1.2 min: airflow dags test
)
#: Then: files with a test that runs Airflow, Chromium or Spark (a JVM per run or a
#: session to start), then the other files that use servers, then the unit tests. A new
#: file lands in its tier without being listed.
_HEAVY_MARKERS = ("airflow", "browser", "spark")


# The machine is shared (two cores, tests in two processes beside servers): a property
# test's example may take any time, and time is no property of the code under test.
hypothesis_settings.register_profile("shared-machine", deadline=None)
hypothesis_settings.load_profile("shared-machine")


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist (3.6 on) reorders files by their number of tests, most first, unless
    # told not to; that put the one-test files above, the longest of all, last.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    missing = [name for name in LONGEST_FIRST if not (REPO_ROOT / name).is_file()]
    if missing:
        raise pytest.UsageError(
            f"tests/conftest.py LONGEST_FIRST names files that do not exist: {missing};"
            " update the list (renamed or removed files)"
        )


def _file_tier(path: str, items: list[pytest.Item]) -> tuple[int, int]:
    """Where a file's tests go in the run: ``(tier, position in LONGEST_FIRST)``."""
    if path in LONGEST_FIRST:
        return (0, LONGEST_FIRST.index(path))
    if any(item.get_closest_marker(name) for item in items for name in _HEAVY_MARKERS):
        return (1, 0)
    if path.startswith("tests/unit/"):
        return (3, 0)
    return (2, 0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        path = Path(str(item.path)).resolve().relative_to(REPO_ROOT).as_posix()
        by_file.setdefault(path, []).append(item)
    tier = {path: _file_tier(path, file_items) for path, file_items in by_file.items()}
    order = sorted(by_file, key=lambda path: tier[path])  # stable: collection order within
    items[:] = [item for path in order for item in by_file[path]]


# --- making failures easy to debug -------------------------------------------------------


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    """On failure, say where the servers' and Airflow's logs are."""
    if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        return
    lines = []
    log_dir = config.stash.get(_STACK_LOG_DIR, None)
    if log_dir is not None:
        lines.append(f"local stack logs (zookeeper.log, seaweedfs.log): {log_dir}")
    pg_log_dir = config.stash.get(_PG_LOG_DIR, None)
    if pg_log_dir is not None:
        lines.append(f"PostgreSQL log (postgresql.log): {pg_log_dir}")
    if (AIRFLOW_HOME / "airflow.cfg").exists():
        lines.append(f"Airflow home (logs/, airflow.db, db-migrate.log): {AIRFLOW_HOME}")
    controller = config.pluginmanager.has_plugin("dsession")
    if not lines and controller and not hasattr(config, "workerinput"):
        # The controller of several test processes (bin/test): each started its own.
        where = config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
        lines.append(f"each test process's servers and their logs: {where}/popen-gw*/")
        lines.append(f"their Airflow homes: {Path(tempfile.gettempdir())}/ledgergc-airflow-home-*")
    if lines:
        lines.append("a private ZooKeeper's log is named in its failed test's report")
        terminalreporter.section("ledger-gc test logs")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the throwaway Airflow home, unless the run failed and it may tell why."""
    global _remove_airflow_home
    _remove_airflow_home = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)


@pytest.fixture
def store(settings: Settings) -> Iterator[Any]:
    """A MetadataStore on the test's chroot (its own session, closed after the test)."""
    from ledger_gc.metadata.store import MetadataStore

    with MetadataStore.open(zk_endpoint(settings)) as opened:
        yield opened


@pytest.fixture
def storage(settings: Settings) -> Any:
    """A LedgerStorage on the test's bucket."""
    from ledger_gc.storage.s3 import LedgerStorage

    return LedgerStorage(block_store(settings))


@pytest.fixture(scope="session")
def airflow_home() -> Path:
    """A migrated Airflow home for the session (its SQLite DB is under this path).

    ``airflow db migrate`` runs in a subprocess of this venv's Python so that the test
    process does not keep the migration's engine and logging set-up; the DB it creates is
    the one this process's Airflow then opens (same ``AIRFLOW_HOME`` and SQL Alchemy URL).
    """
    home = Path(os.environ["AIRFLOW_HOME"])
    assert os.environ.get("AIRFLOW__CORE__DAGS_FOLDER") == str(REPO_ROOT / "dags"), (
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


@pytest.fixture(scope="session")
def airflow_task_states(airflow_home: Path) -> Any:
    """``states(dag_id, run_id)``: each task's state in a DAG run, from the session's
    Airflow database. ``airflow tasks test`` exits 0 whether its task succeeded or
    failed; the state it records is the verdict."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])

    def states(dag_id: str, run_id: str) -> dict[str, str | None]:
        with engine.connect() as conn:
            rows = conn.execute(
                sqlalchemy.text(
                    "SELECT task_id, state FROM task_instance"
                    " WHERE dag_id = :dag_id AND run_id = :run_id"
                ),
                {"dag_id": dag_id, "run_id": run_id},
            )
            return {task: state for task, state in rows}

    return states
