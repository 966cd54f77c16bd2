"""S3 credentials through the Amazon provider, against a real local STS (moto's server).

The ``ledgergc_s3`` connection is a real Airflow connection (``AIRFLOW_CONN_*``, read by
Airflow itself), its role is assumed by the provider's ``AwsBaseHook`` at the STS
endpoint the connection names, and the ``survey`` task's rendered spark-submit (on a
cluster master) is searched for what reached it: the temporary credentials, never the
long-lived keys.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger_gc.airflow import orphan_tasks, settings_hook
from ledger_gc.errors import ConfigError
from local_stack.moto_sts import MotoStsServer
from local_stack.server_process import free_port

ROLE = "arn:aws:iam::123456789012:role/ledger-gc"
LONG_LIVED = ("AKIALONGLIVEDKEY0001", "long-lived-secret-never-on-a-cluster")
RUN_ID = "manual__2026-01-01T00:00:00+00:00"


@pytest.fixture(scope="module")
def moto_sts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoStsServer]:
    server = MotoStsServer(log_dir=tmp_path_factory.mktemp("moto"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def airflow_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """Real Airflow connections from the environment: ``ledgergc_s3`` as each test sets
    it, ``spark_default`` a cluster (so long-lived keys would leave this machine)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LEDGERGC_STATE_DIR", str(tmp_path))
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT",
        json.dumps({"conn_type": "spark", "host": "spark://spark-master.example:7077"}),
    )
    monkeypatch.setattr(settings_hook, "_variable", dict)  # no metadata database here

    def set_s3(login: str | None = None, password: str | None = None, **extra: Any) -> None:
        connection = {"conn_type": "aws", "login": login, "password": password}
        extra = {"region_name": "us-east-1", "bucket": "ledger-gc", **extra}
        monkeypatch.setenv("AIRFLOW_CONN_LEDGERGC_S3", json.dumps({**connection, "extra": extra}))

    return set_s3


def rendered_survey() -> orphan_tasks.OrphanSparkSubmitOperator:
    operator = orphan_tasks.OrphanSparkSubmitOperator(task_id="survey", step="survey")
    operator.render_template_fields({"params": {}, "run_id": RUN_ID, "ti": None})
    return operator


def everything_spark_gets(operator: orphan_tasks.OrphanSparkSubmitOperator) -> str:
    """The spark-submit command line, its environment and its conf, as one text."""
    hook = operator._get_hook()
    command = hook._build_spark_submit_command(operator.application)
    return json.dumps([command, operator.env_vars, operator.conf])


@pytest.mark.parametrize("method", ["assume_role", "assume_role_with_web_identity"])
def test_the_hook_assumes_the_role_and_spark_gets_only_temporary_credentials(
    moto_sts: MotoStsServer, airflow_env: Any, tmp_path: Path, method: str
) -> None:
    sts = {"service_config": {"sts": {"endpoint_url": moto_sts.endpoint}}}
    if method == "assume_role":  # from long-lived keys, as on a worker outside AWS
        airflow_env(*LONG_LIVED, role_arn=ROLE, **sts)
    else:  # IRSA: the pod's projected service-account token, no keys at all
        token = tmp_path / "token"
        token.write_text("eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJsZWRnZXItZ2MifQ.sig")
        airflow_env(
            role_arn=ROLE,
            assume_role_method=method,
            assume_role_with_web_identity_federation="file",
            assume_role_with_web_identity_token_file=str(token),
            **sts,
        )

    settings = settings_hook.LedgerGcHook().get_settings()
    assert settings.s3_access_key_id and settings.s3_access_key_id.startswith("ASIA")
    assert settings.s3_session_token and settings.s3_secret_access_key not in LONG_LIVED
    assert settings.provenance()["AWS_ACCESS_KEY_ID"]["source"] == "connection"
    assert settings.provenance()["AWS_SESSION_TOKEN"]["value"] == "***"

    operator = rendered_survey()
    env = operator.env_vars or {}
    assert env["AWS_ACCESS_KEY_ID"].startswith("ASIA") and env["AWS_SESSION_TOKEN"]
    shipped = everything_spark_gets(operator)
    assert not any(secret in shipped for secret in LONG_LIVED)


def test_long_lived_keys_are_exchanged_before_they_reach_a_cluster(
    moto_sts: MotoStsServer, airflow_env: Any
) -> None:
    airflow_env(*LONG_LIVED, service_config={"sts": {"endpoint_url": moto_sts.endpoint}})
    # The worker's own tasks use the keys as they are ...
    settings = settings_hook.LedgerGcHook().get_settings()
    assert (settings.s3_access_key_id, settings.s3_secret_access_key) == LONG_LIVED
    assert settings.s3_session_token is None
    # ... a Spark application on a cluster gets a session token's credentials instead.
    operator = rendered_survey()
    env = operator.env_vars or {}
    assert env["AWS_SESSION_TOKEN"]
    shipped = everything_spark_gets(operator)
    assert not any(secret in shipped for secret in LONG_LIVED)
    # With a local master the executors are this worker's processes: nothing leaves it.
    local = orphan_tasks.submit_env(settings, local_master=True)
    assert (local["AWS_ACCESS_KEY_ID"], local["AWS_SECRET_ACCESS_KEY"]) == LONG_LIVED


def test_keys_that_cannot_be_exchanged_stop_the_task_in_one_line(airflow_env: Any) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    airflow_env(*LONG_LIVED, service_config={"sts": {"endpoint_url": dead}})
    with pytest.raises(ConfigError) as err:
        rendered_survey()
    message = str(err.value)
    assert "long-lived AWS keys are never handed to Spark executors" in message
    assert dead in message and "role_arn" in message and "\n" not in message
    assert LONG_LIVED[1] not in message


def test_a_role_sts_refuses_is_one_line_naming_the_connection(airflow_env: Any) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    airflow_env(*LONG_LIVED, role_arn=ROLE, service_config={"sts": {"endpoint_url": dead}})
    with pytest.raises(ConfigError) as err:
        settings_hook.LedgerGcHook().get_settings()
    message = str(err.value)
    assert message.startswith(f"Airflow connection ledgergc_s3: assuming role {ROLE} failed")
    assert "\n" not in message and LONG_LIVED[1] not in message


def test_without_an_identity_spark_gets_none_and_each_executor_uses_its_own(
    airflow_env: Any,
) -> None:
    """No keys, no role: boto3's default chain (an instance profile, IRSA's variables) in
    every process, the executors' included; nothing is handed over."""
    airflow_env()
    settings = settings_hook.LedgerGcHook().get_settings()
    assert settings.s3_access_key_id is None
    env = rendered_survey().env_vars or {}
    assert not any(name.startswith("AWS_") for name in env)


def test_a_stores_static_keys_go_as_they_are_where_there_is_no_sts(airflow_env: Any) -> None:
    """An S3-compatible store at a custom endpoint (SeaweedFS, MinIO, Ceph) has only its
    static keys: handed to spark-submit's environment, never to Spark conf."""
    airflow_env(*LONG_LIVED, endpoint_url="http://127.0.0.1:8333")
    operator = rendered_survey()
    env = operator.env_vars or {}
    assert (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]) == LONG_LIVED
    assert not any(secret in json.dumps(operator.conf) for secret in LONG_LIVED)


#: S3 endpoints of AWS itself, as an operator may give them: regional, FIPS, dual-stack,
#: an interface VPC endpoint, the China partition, GovCloud.
AWS_ENDPOINTS = [
    "https://s3.eu-west-1.amazonaws.com",
    "https://s3-fips.us-east-1.amazonaws.com",
    "https://s3.dualstack.eu-west-1.amazonaws.com",
    "https://bucket.vpce-0a1b2c3d4e5f6a7b8-abcdefgh.s3.us-east-1.vpce.amazonaws.com",
    "https://s3.cn-north-1.amazonaws.com.cn",
    "https://s3.us-gov-west-1.amazonaws.com",
    "https://s3.dualstack.us-east-1.api.aws",
]


@pytest.mark.parametrize("endpoint", AWS_ENDPOINTS)
def test_long_lived_keys_for_an_aws_endpoint_are_exchanged_as_for_no_endpoint(
    moto_sts: MotoStsServer,
    airflow_env: Any,
    monkeypatch: pytest.MonkeyPatch,
    endpoint: str,
) -> None:
    """An S3 endpoint of AWS itself has AWS's STS: long-lived keys are exchanged for it
    as for no endpoint, never shipped to a cluster as "a store with no STS" (review 28,
    finding 5). AWS's own STS is moto here (``AWS_ENDPOINT_URL_STS``, boto3's variable)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto_sts.endpoint)
    airflow_env(*LONG_LIVED, endpoint_url=endpoint)
    operator = rendered_survey()
    env = operator.env_vars or {}
    assert env["AWS_SESSION_TOKEN"] and env["AWS_ACCESS_KEY_ID"] != LONG_LIVED[0]
    assert env["LEDGERGC_S3_ENDPOINT"] == endpoint
    shipped = everything_spark_gets(operator)
    assert not any(secret in shipped for secret in LONG_LIVED)


def test_an_aws_offload_bucket_beside_a_local_store_gets_the_exchange_too(
    moto_sts: MotoStsServer, airflow_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keys go to every store the app reads: one of them on AWS (Pulsar's offload
    bucket) and they are AWS keys to exchange."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto_sts.endpoint)
    monkeypatch.setenv("LEDGERGC_OFFLOAD_BUCKET", "pulsar-offload")
    monkeypatch.setenv("LEDGERGC_OFFLOAD_S3_ENDPOINT", "https://s3.eu-west-1.amazonaws.com")
    airflow_env(*LONG_LIVED, endpoint_url="http://127.0.0.1:8333")
    env = rendered_survey().env_vars or {}
    assert env["AWS_SESSION_TOKEN"] and env["AWS_ACCESS_KEY_ID"] != LONG_LIVED[0]


def test_only_aws_own_domains_are_aws() -> None:
    from ledger_gc.airflow.aws_credentials import is_aws_endpoint

    assert is_aws_endpoint(None) and is_aws_endpoint("https://S3.EU-WEST-1.AMAZONAWS.COM.")
    for endpoint in (
        "http://127.0.0.1:8333",
        "https://minio.example.com",
        "https://s3.amazonaws.com.example.com",
        "https://notamazonaws.com",
    ):
        assert not is_aws_endpoint(endpoint), endpoint
