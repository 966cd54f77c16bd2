"""The orphan_removal DAG's task wiring, without running Spark or touching a server:
which app each Spark task submits, with which arguments, files and environment, as the
task's Rendered view shows them, and that nothing is written to the worker's env."""

from __future__ import annotations

import json
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from ledger_gc.airflow import orphan_tasks, settings_hook
from ledger_gc.config.settings import Settings
from ledger_gc.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "manual__2026-01-01T00:00:00+00:00"


class _Conn:
    """An Airflow connection as the hooks read it (the Amazon provider's wrapper too)."""

    def __init__(
        self,
        host: str = "",
        login: str = "",
        password: str = "",
        conn_id: str = "test",
        conn_type: str = "aws",
        **extra: Any,
    ):
        self.host, self.port, self.login, self.password = host, None, login, password
        self.conn_id, self.conn_type, self.schema = conn_id, conn_type, None
        self.extra_dejson = extra


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    """Settings from a stub; no Spark connection (local[*])."""
    stub = Settings(bucket="b", state_dir=tmp_path, grace_seconds=5)
    monkeypatch.setattr(orphan_tasks, "settings_for", lambda params: stub)
    monkeypatch.setattr(orphan_tasks, "spark_connection", lambda conn_id: None)
    return stub


def _rendered(step: str, params: dict[str, Any]) -> SparkSubmitOperator:
    operator = orphan_tasks.OrphanSparkSubmitOperator(task_id=step, step=step)
    operator.render_template_fields({"params": params, "run_id": RUN_ID, "ti": None})
    return operator


def test_the_survey_task_renders_its_app_arguments_files_and_settings(
    settings: Settings,
) -> None:
    operator = _rendered("survey", {"inventory": "/data/inventory.parquet"})

    assert operator.application == str(REPO_ROOT / "spark_apps" / "orphan_survey.py")
    assert Path(operator.application).exists()
    assert (operator.pool, operator._conn_id) == ("ledgergc_spark", "spark_default")
    assert operator.application_args == [
        "--run-id",
        RUN_ID,
        "--inventory",
        "/data/inventory.parquet",
    ]
    env = operator.env_vars or {}
    assert env["LEDGERGC_GRACE_SECONDS"] == "5" and env["LEDGERGC_BUCKET"] == "b"
    assert env["PYSPARK_PYTHON"] == sys.executable
    # One way for the library to reach the driver and the executors: py_files.
    assert "PYTHONPATH" not in env
    [library] = (operator.py_files or "").split(",")
    with zipfile.ZipFile(library) as bundle:
        names = set(bundle.namelist())
    assert "ledger_gc/orphans/cycle.py" in names
    assert "ledger_gc/state/migrations/versions/0002_run_steps.py" in names
    assert operator.conf == {**orphan_tasks.LOCAL_SPARK_CONF, **orphan_tasks.DEFAULT_SPARK_CONF}
    # What the Rendered view shows is exactly what is submitted.
    assert set(orphan_tasks.OrphanSparkSubmitOperator.template_fields) >= {
        "application_args",
        "env_vars",
        "py_files",
        "conf",
    }


def test_the_delete_task_passes_dry_run_and_force(settings: Settings) -> None:
    assert _rendered("delete", {"dry_run": True, "force": True}).application_args[2:] == [
        "--dry-run",
        "--force",
    ]
    assert _rendered("delete", {"dry_run": None, "force": False}).application_args == [
        "--run-id",
        RUN_ID,
    ]


def test_without_a_spark_connection_the_hook_runs_locally(settings: Settings) -> None:
    operator = _rendered("survey", {})
    hook = operator._get_hook()
    command = hook._build_spark_submit_command(operator.application)
    assert command[command.index("--master") + 1] == "local[*]"
    assert command[command.index("--py-files") + 1] == operator.py_files
    # The settings go to spark-submit's environment, not its command line.
    assert not any("appMasterEnv" in arg or "LEDGERGC_" in arg for arg in command)
    assert hook._env == operator.env_vars


def test_credentials_reach_spark_submit_and_never_the_workers_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LEDGERGC_STATE_DIR", str(tmp_path))
    connections = {
        "ledgergc_s3": _Conn(login="AKIA-TEST", password="s3cret-key", bucket="from-conn"),
        "ledgergc_zookeeper": _Conn(host="zk1:2181,zk2:2181", login="gc", password="zk-pass"),
    }
    monkeypatch.setattr(settings_hook, "_connection", lambda conn_id: connections.get(conn_id))
    monkeypatch.setattr(settings_hook, "_variable", dict)
    monkeypatch.setattr(orphan_tasks, "spark_connection", lambda conn_id: None)
    before = dict(os.environ)

    operator = _rendered("survey", {"grace_seconds": 7})

    assert dict(os.environ) == before
    env = operator.env_vars or {}
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == ("AKIA-TEST", "s3cret-key")
    assert env["LEDGERGC_BUCKET"] == "from-conn" and env["LEDGERGC_GRACE_SECONDS"] == "7"
    assert env["LEDGERGC_ZK_DIGEST"] == "gc:zk-pass"
    settings = Settings.from_env(env)
    assert (settings.s3_access_key_id, settings.s3_secret_access_key) == ("AKIA-TEST", "s3cret-key")
    assert "s3cret-key" not in repr(settings) and "zk-pass" not in repr(settings)


def test_both_dags_take_their_settings_from_one_function(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ledger_gc.airflow import trim_tasks

    assert trim_tasks.settings_for is settings_hook.settings_for
    assert orphan_tasks.settings_for is settings_hook.settings_for
    monkeypatch.setattr(settings_hook, "_connection", lambda conn_id: None)
    monkeypatch.setattr(settings_hook, "_variable", dict)
    monkeypatch.setenv("LEDGERGC_STATE_DIR", str(tmp_path))
    settings = settings_hook.settings_for(
        {"grace_seconds": 9, "trim_retention_seconds": 60, "dry_run": True, "namespace": "a/b"}
    )
    assert settings.grace_seconds == 9 and settings.trim_retention.seconds == 60


def test_params_become_cycle_options() -> None:
    options = orphan_tasks.options_for({"dry_run": "false", "force": "true", "inventory": ""})
    assert (options.dry_run, options.force, options.inventory) == (False, True, None)
    assert orphan_tasks.options_for({}).dry_run is None


def test_the_delete_branch_picks_spark_only_for_more_orphans_than_the_setting(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ledger_gc.orphans import cycle

    monkeypatch.setattr(cycle, "delete_needs_spark", lambda settings: True)
    assert orphan_tasks.choose_delete({}) == orphan_tasks.DELETE_ON_SPARK == "delete_on_spark"
    monkeypatch.setattr(cycle, "delete_needs_spark", lambda settings: False)
    assert orphan_tasks.choose_delete({}) == orphan_tasks.DELETE_IN_TASK == "delete_in_task"


def test_a_defined_spark_connection_is_the_hooks_master(settings: Settings) -> None:
    from airflow.sdk import Connection

    connection = Connection(conn_id="spark_default", conn_type="spark", host="spark://m:7077")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(orphan_tasks, "spark_connection", lambda conn_id: connection)
        operator = _rendered("delete", {})
        hook = operator._get_hook()
    command = hook._build_spark_submit_command(operator.application)
    assert command[command.index("--master") + 1] == "spark://m:7077"
    assert command[0] == orphan_tasks.default_spark_submit()


def test_spark_arguments_the_hook_would_not_get_are_refused() -> None:
    with pytest.raises(TypeError, match="executor_memory"):
        orphan_tasks.OrphanSparkSubmitOperator(
            task_id="survey", step="survey", executor_memory="2g"
        )


def test_the_hook_turns_connections_variable_and_params_into_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LEDGERGC_STATE_DIR", str(tmp_path))
    connections = {"ledgergc_zookeeper": _Conn(host="zk1:2181", chroot="pulsar")}
    monkeypatch.setattr(settings_hook, "_connection", lambda conn_id: connections.get(conn_id))
    monkeypatch.setattr(settings_hook, "_variable", lambda: {"grace_seconds": "60"})
    hook = settings_hook.LedgerGcHook()
    assert hook.get_conn().zk_hosts == "zk1:2181/pulsar"
    assert hook.get_conn().grace_seconds == 60
    assert hook.get_settings({"grace_seconds": 5}).grace_seconds == 5


def test_the_zookeeper_connection_takes_pulsars_and_bookkeepers_forms(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LEDGERGC_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(settings_hook, "_variable", dict)
    connections: dict[str, Any] = {}
    monkeypatch.setattr(settings_hook, "_connection", lambda conn_id: connections.get(conn_id))
    connections["ledgergc_zookeeper"] = _Conn(
        host="zk:zk1:2181,zk2:2181/pulsar",
        conn_id="ledgergc_zookeeper",
        conn_type="generic",
        bk_zk_address="zk+hierarchical://bk1:2181;bk2:2181/bk/ledgers",
    )
    settings = settings_hook.LedgerGcHook().get_conn()
    assert settings.zk_hosts == "zk1:2181,zk2:2181/pulsar"
    assert (settings.bk_zk_hosts, settings.bookkeeper_root) == ("bk1:2181,bk2:2181", "/bk/ledgers")
    shown = settings.provenance()["LEDGERGC_ZK_HOSTS"]
    assert (shown["value"], shown["source"], shown["from"]) == (
        "zk:zk1:2181,zk2:2181/pulsar",
        "connection",
        "ledgergc_zookeeper",
    )
    # A host list and extra.chroot still make one address.
    connections["ledgergc_zookeeper"] = _Conn(host="zk1:2181", chroot="/pulsar/")
    assert settings_hook.LedgerGcHook().get_conn().zk_hosts == "zk1:2181/pulsar"
    # A chroot given twice, or an address that is not ZooKeeper: one line naming it.
    for host, says in (
        ("zk:zk1:2181/a", "has a path and extra.chroot is 'b'"),
        ("oxia://oxia:6648", "is Oxia, not ZooKeeper"),
    ):
        connections["ledgergc_zookeeper"] = _Conn(host=host, chroot="b" if "/a" in host else "")
        with pytest.raises(ConfigError) as err:
            settings_hook.LedgerGcHook().get_conn()
        assert says in str(err.value) and "ledgergc_zookeeper" in str(err.value)
        assert "\n" not in str(err.value)


def test_the_zookeeper_connection_carries_tls_and_a_sasl_login(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A secured ensemble through the connection alone: TLS and SASL settings in its
    extra (by the settings' own keys, ``zk_tls_ca``, ``bk_zk_sasl_mechanism``...), and
    with a SASL mechanism its login and password are the SASL login, not digest auth."""
    monkeypatch.setenv("LEDGERGC_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(settings_hook, "_variable", dict)
    from pki import CA

    ca = tmp_path / "ca.pem"
    ca.write_text(CA.cert_pem)
    connections = {
        "ledgergc_zookeeper": _Conn(
            host="zk:zk1:2281/pulsar",
            login="gc",
            password="gc-secret",
            conn_type="generic",
            zk_tls="true",
            zk_tls_ca=str(ca),
            zk_sasl_mechanism="DIGEST-MD5",
        )
    }
    monkeypatch.setattr(settings_hook, "_connection", lambda conn_id: connections.get(conn_id))
    settings = settings_hook.LedgerGcHook().get_conn()
    security = settings.zk_security
    assert (security.tls, security.tls_ca) == (True, str(ca))
    assert (security.sasl_username, security.sasl_password) == ("gc", "gc-secret")
    assert settings.zk_digest is None
    assert "gc-secret" in settings.secrets()
    assert settings.provenance()["LEDGERGC_ZK_TLS_CA"]["source"] == "connection"
    # Without a mechanism, login and password stay digest auth, as before.
    connections["ledgergc_zookeeper"] = _Conn(host="zk1:2181", login="gc", password="pw")
    assert settings_hook.LedgerGcHook().get_conn().zk_digest == "gc:pw"
    # A key that is no setting is one line naming the connection.
    connections["ledgergc_zookeeper"] = _Conn(host="zk1:2181", zk_tls_cacert="x")
    with pytest.raises(ConfigError) as err:
        settings_hook.LedgerGcHook().get_conn()
    assert "ledgergc_zookeeper" in str(err.value) and "zk_tls_cacert" in str(err.value)


def test_a_chroot_beside_a_bookkeeper_url_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A ``zk+…://`` URL's path is BookKeeper's ledgers root, not a chroot: appended to
    one, ``extra.chroot`` would become the ledgers root and leave Pulsar with none."""
    monkeypatch.setenv("LEDGERGC_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(settings_hook, "_variable", dict)
    for host in ("zk+null://zk1:2181;zk2:2181", "zk://zk1:2181", "ZK+hierarchical://zk1:2181"):
        connections = {"ledgergc_zookeeper": _Conn(host=host, chroot="pulsar")}
        monkeypatch.setattr(settings_hook, "_connection", connections.get)
        with pytest.raises(ConfigError) as err:
            settings_hook.LedgerGcHook().get_conn()
        message = str(err.value)
        assert message.startswith("Airflow connection ledgergc_zookeeper: host")
        assert "extra.chroot" in message and "ledgers root" in message, message
        assert "\n" not in message


# --- secrets and the Spark provider's masters (review 28, finding 4) ---------------------

SECRETS = ("digest-secret", "sasl-secret", "db-secret", "s3-secret-key")


@pytest.fixture
def secret_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    """Settings with a secret in every kind of place: digest auth, a SASL login, the state
    store's URL, an S3-compatible store's static keys."""
    from ledger_gc.config.zk_security import ZkSecurity

    stub = Settings(
        zk_digest="gc:digest-secret",
        zk_security=ZkSecurity(
            sasl_mechanism="DIGEST-MD5", sasl_username="bk", sasl_password="sasl-secret"
        ),
        state_url="postgresql+psycopg://gc:db-secret@db.internal:5432/ledgergc",
        s3_endpoint="http://seaweedfs.internal:8333",
        s3_access_key_id="store-key-id",
        s3_secret_access_key="s3-secret-key",
        state_dir=tmp_path,
    )
    monkeypatch.setattr(orphan_tasks, "settings_for", lambda params: stub)
    return stub


def _spark_default(monkeypatch: pytest.MonkeyPatch, master: str, **extra: str) -> None:
    from airflow.sdk import Connection

    connection = Connection(
        conn_id="spark_default", conn_type="spark", host=master, extra=json.dumps(extra)
    )
    monkeypatch.setattr(orphan_tasks, "spark_connection", lambda conn_id: connection)


@pytest.mark.parametrize(
    ("master", "extra"),
    [
        ("yarn", {}),
        ("yarn", {"deploy-mode": "cluster"}),
        ("k8s://https://kube.example:6443", {"deploy-mode": "cluster"}),
    ],
)
def test_no_secret_reaches_spark_submits_command_line_or_spark_conf(
    secret_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    master: str,
    extra: dict[str, str],
) -> None:
    """The Spark provider hands ``env_vars`` to a YARN or Kubernetes master as
    ``--conf spark.yarn.appMasterEnv.*`` / ``spark.kubernetes.driverEnv.*``: on the command
    line (``ps``) and in Spark conf (its UI, the event log). A task that would send a
    secret that way is refused in one line naming the settings and the fix."""
    _spark_default(monkeypatch, master, **extra)
    with pytest.raises(ConfigError) as err:
        _rendered("survey", {})
    message = str(err.value)
    print(message)
    for name in (
        "LEDGERGC_ZK_DIGEST",
        "LEDGERGC_ZK_SASL_PASSWORD",
        "LEDGERGC_STATE_URL",
        "AWS_SECRET_ACCESS_KEY",
    ):
        assert name in message
    assert master in message and "spark://" in message and "\n" not in message
    assert not any(secret in message for secret in SECRETS)


def test_settings_without_secrets_go_to_a_yarn_master_as_the_provider_sends_them(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    _spark_default(monkeypatch, "yarn")
    operator = _rendered("survey", {})
    command = operator._get_hook()._build_spark_submit_command(operator.application)
    assert "spark.yarn.appMasterEnv.LEDGERGC_BUCKET=b" in command


def test_a_kubernetes_master_in_client_mode_is_refused_in_one_line(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In client mode spark-submit's own process is the driver, but the provider gives a
    Kubernetes master the settings only as ``spark.kubernetes.driverEnv.*``, which a
    client-mode driver never reads: the app would run on the worker's environment."""
    _spark_default(monkeypatch, "k8s://https://kube.example:6443")
    with pytest.raises(ConfigError) as err:
        _rendered("survey", {})
    message = str(err.value)
    assert "client mode" in message and "deploy-mode" in message and "\n" not in message


def test_a_standalone_master_gets_the_secrets_in_spark_submits_environment_only(
    secret_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    _spark_default(monkeypatch, "spark://spark-master.internal:7077")
    operator = _rendered("survey", {})
    hook = operator._get_hook()
    command = hook._build_spark_submit_command(operator.application)
    assert not any(secret in " ".join(command) for secret in SECRETS)
    assert not any(secret in str(operator.conf) for secret in SECRETS)
    assert hook._env == operator.env_vars
    assert (operator.env_vars or {})["LEDGERGC_ZK_DIGEST"] == "gc:digest-secret"
