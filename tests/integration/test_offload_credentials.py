"""GCS and Azure credentials through the Google and Microsoft Azure providers, against
real servers: Azurite for Azure, and for Google a local OAuth2 token endpoint (the key's
``token_uri``: Google's own cannot be reached here; fake-gcs-server checks no token).

Each test renders the ``survey`` task for a cluster master, as
``test_aws_credentials`` does, and searches what reached spark-submit (its command line,
its environment, its Spark conf) and this process's log for the long-lived secret:
a GCS private key, an Azure account key. Only a short-lived credential may be there.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip("airflow.providers.google.cloud.hooks.gcs")
pytest.importorskip("airflow.providers.microsoft.azure.hooks.wasb")

from ledger_gc.airflow import azure_credentials, orphan_tasks, settings_hook
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.errors import ConfigError
from local_stack.azurite import AZURITE_ACCOUNT, AZURITE_KEY, AzuriteBlobServer

RUN_ID = "manual__2026-01-01T00:00:00+00:00"
TOKEN = "ya29.local-token-endpoint-token"


class _TokenEndpoint(BaseHTTPRequestHandler):
    """Google's OAuth2 token endpoint as a service account's JWT grant meets it."""

    refuse = False
    grants: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        type(self).grants.append(body)
        if type(self).refuse:
            payload, status = {"error": "invalid_grant", "error_description": "bad key"}, 400
        else:
            payload, status = {"access_token": TOKEN, "expires_in": 3600}, 200
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def token_endpoint() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _TokenEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/token"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def service_account_key(token_endpoint: str) -> dict[str, str]:
    """A service account's JSON key (a fresh RSA key) whose token_uri is the local one."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    _TokenEndpoint.refuse = False
    return {
        "type": "service_account",
        "project_id": "ledger-gc-test",
        "private_key_id": "0123456789abcdef",
        "private_key": pem,
        "client_email": "ledger-gc@ledger-gc-test.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": token_endpoint,
    }


def _private_key_body(key: dict[str, str]) -> str:
    """A line of the PEM's base64: found in any text that carries the key."""
    return key["private_key"].splitlines()[3]


@pytest.fixture
def airflow_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """Real Airflow connections from the environment; ``spark_default`` a cluster."""
    for name in (
        "AZURE_STORAGE_ACCOUNT",
        "AZURE_STORAGE_ACCESS_KEY",
        "AZURE_STORAGE_CONNECTION_STRING",
        "GOOGLE_APPLICATION_CREDENTIALS",
        # The session's stack puts test AWS keys in os.environ; with them the block
        # store's keys would be exchanged at AWS STS before the offload's are looked at.
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LEDGERGC_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("LEDGERGC_BUCKET", "")
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DEFAULT",
        json.dumps({"conn_type": "spark", "host": "spark://spark-master.example:7077"}),
    )
    monkeypatch.setattr(settings_hook, "_variable", dict)  # no metadata database here

    def connect(conn_id: str, conn_type: str, **fields: Any) -> None:
        monkeypatch.setenv(
            f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": conn_type, **fields})
        )

    return connect


def rendered_survey() -> orphan_tasks.OrphanSparkSubmitOperator:
    operator = orphan_tasks.OrphanSparkSubmitOperator(task_id="survey", step="survey")
    operator.render_template_fields({"params": {}, "run_id": RUN_ID, "ti": None})
    return operator


def everything_spark_gets(operator: orphan_tasks.OrphanSparkSubmitOperator) -> str:
    """The spark-submit command line, its environment and its conf, as one text."""
    hook = operator._get_hook()
    command = hook._build_spark_submit_command(operator.application)
    return json.dumps([command, operator.env_vars, operator.conf])


# --- Google Cloud Storage -------------------------------------------------------------


def test_a_gcs_connections_key_becomes_a_token_and_only_the_token_reaches_spark(
    airflow_env: Any,
    monkeypatch: pytest.MonkeyPatch,
    service_account_key: dict[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("LEDGERGC_OFFLOAD_DRIVER", "google-cloud-storage")
    monkeypatch.setenv("LEDGERGC_OFFLOAD_BUCKET", "pulsar-offload")
    airflow_env(
        "google_cloud_default",
        "google_cloud_platform",
        extra={"keyfile_dict": json.dumps(service_account_key)},
    )
    caplog.set_level(logging.DEBUG)
    settings = settings_hook.LedgerGcHook().get_settings()
    assert settings.offload_gcs_token == TOKEN
    assert settings.offload_gcs_project == "ledger-gc-test"
    assert settings.provenance()["LEDGERGC_OFFLOAD_GCS_TOKEN"]["value"] == "***"
    assert resolve(settings).offload.gcs_token == TOKEN

    operator = rendered_survey()
    assert (operator.env_vars or {})["LEDGERGC_OFFLOAD_GCS_TOKEN"] == TOKEN
    shipped = everything_spark_gets(operator)
    assert _private_key_body(service_account_key) not in shipped
    assert "private_key" not in shipped and "keyfile" not in shipped
    # Nothing logged the key, nor the token (masked).
    assert _private_key_body(service_account_key) not in caplog.text
    assert TOKEN not in caplog.text


def test_aws_keys_no_store_uses_never_reach_spark_nor_sts(
    airflow_env: Any,
    monkeypatch: pytest.MonkeyPatch,
    service_account_key: dict[str, str],
) -> None:
    """The block store off and tiered storage on GCS: no store is S3, so AWS keys in the
    worker's environment are neither exchanged at AWS STS (unreachable from a GCP-only
    worker: the task would fail) nor handed to the executors."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIALONGLIVEDUNUSED1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "long-lived-unused-aws-secret")
    monkeypatch.setenv("LEDGERGC_OFFLOAD_DRIVER", "google-cloud-storage")
    monkeypatch.setenv("LEDGERGC_OFFLOAD_BUCKET", "pulsar-offload")
    airflow_env(
        "google_cloud_default",
        "google_cloud_platform",
        extra={"keyfile_dict": json.dumps(service_account_key)},
    )
    shipped = everything_spark_gets(rendered_survey())
    assert "long-lived-unused-aws-secret" not in shipped
    assert "AKIALONGLIVEDUNUSED1" not in shipped


def test_the_brokers_key_file_is_exchanged_and_never_handed_on(
    airflow_env: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    service_account_key: dict[str, str],
) -> None:
    key_file = tmp_path / "gcs-key.json"
    key_file.write_text(json.dumps(service_account_key))
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "managedLedgerOffloadDriver=google-cloud-storage\n"
        "gcsManagedLedgerOffloadBucket=pulsar-offload\n"
        f"gcsManagedLedgerOffloadServiceAccountKeyFile={key_file}\n"
    )
    monkeypatch.setenv("LEDGERGC_PULSAR_CONF", str(conf))
    # The CLI's edge exchanges it too.
    assert resolve(Settings.from_env()).offload.gcs_token == TOKEN
    # An Airflow task (no google_cloud_default connection) exchanges it once.
    settings = settings_hook.LedgerGcHook().get_settings()
    assert settings.offload_gcs_token == TOKEN
    shipped = everything_spark_gets(rendered_survey())
    assert str(key_file) not in shipped and "GCS_KEY_FILE" not in shipped
    assert _private_key_body(service_account_key) not in shipped


def test_a_token_the_edge_mints_is_masked_in_its_process_log(
    tmp_path: Path, service_account_key: dict[str, str]
) -> None:
    """The ``ledgergc`` command's edge (a process of its own, as the command is) mints the
    token from the key file: a log record that carries it shows ``***``."""
    key_file = tmp_path / "gcs-key.json"
    key_file.write_text(json.dumps(service_account_key))
    code = textwrap.dedent(
        f"""
        import logging
        from ledger_gc.config.edge import resolve
        from ledger_gc.config.settings import Settings
        logging.basicConfig(level=logging.INFO)
        store = resolve(Settings.from_env()).offload
        logging.getLogger("probe").info("store token %s", store.gcs_token)
        print("minted", store.gcs_token == {TOKEN!r})
        """
    )
    env = {
        **os.environ,
        "LEDGERGC_OFFLOAD_DRIVER": "google-cloud-storage",
        "LEDGERGC_OFFLOAD_BUCKET": "pulsar-offload",
        "LEDGERGC_OFFLOAD_GCS_KEY_FILE": str(key_file),
    }
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "minted True" in done.stdout
    assert "store token ***" in done.stderr and TOKEN not in done.stderr


def test_a_key_google_refuses_is_one_line_naming_the_setting(
    tmp_path: Path, service_account_key: dict[str, str]
) -> None:
    key_file = tmp_path / "gcs-key.json"
    key_file.write_text(json.dumps(service_account_key))
    settings = Settings(
        offload_driver="google-cloud-storage",
        offload_bucket="pulsar-offload",
        offload_gcs_key_file=key_file,
    )
    _TokenEndpoint.refuse = True
    try:
        with pytest.raises(ConfigError) as raised:
            resolve(settings)
    finally:
        _TokenEndpoint.refuse = False
    message = str(raised.value)
    assert "LEDGERGC_OFFLOAD_GCS_KEY_FILE" in message and "refused" in message
    assert "\n" not in message and _private_key_body(service_account_key) not in message
    with pytest.raises(ConfigError, match="cannot be read"):
        resolve(
            Settings(
                offload_driver="google-cloud-storage",
                offload_bucket="offload",
                offload_gcs_key_file=tmp_path / "missing.json",
            )
        )


# --- Azure Blob Storage ---------------------------------------------------------------


@pytest.fixture
def container(azurite: AzuriteBlobServer) -> str:
    name = "offload-credentials"
    client = azurite.client()
    try:
        client.create_container(name)
    except Exception as exc:  # already there from an earlier test
        if "ContainerAlreadyExists" not in str(exc):
            raise
    client.get_container_client(name).upload_blob("probe", b"x", overwrite=True)
    return name


def test_an_azure_account_key_reaches_spark_only_as_a_sas_that_works(
    airflow_env: Any,
    monkeypatch: pytest.MonkeyPatch,
    azurite: AzuriteBlobServer,
    container: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from azure.storage.blob import ContainerClient

    monkeypatch.setenv("LEDGERGC_OFFLOAD_DRIVER", "azureblob")
    monkeypatch.setenv("LEDGERGC_OFFLOAD_BUCKET", container)
    airflow_env("wasb_default", "wasb", extra={"connection_string": azurite.connection_string})
    caplog.set_level(logging.DEBUG)
    settings = settings_hook.LedgerGcHook().get_settings()
    # The worker's own tasks use the key as the connection gives it.
    assert (settings.azure_storage_account, settings.azure_storage_key) == (
        AZURITE_ACCOUNT,
        AZURITE_KEY,
    )
    assert settings.offload_endpoint == azurite.account_url
    offload = resolve(settings).offload
    assert (offload.azure_account, offload.endpoint) == (AZURITE_ACCOUNT, azurite.account_url)

    operator = rendered_survey()
    env = operator.env_vars or {}
    sas = env["LEDGERGC_OFFLOAD_AZURE_SAS"]
    shipped = everything_spark_gets(operator)
    assert AZURITE_KEY not in shipped
    assert "AZURE_STORAGE_ACCESS_KEY" not in env and "AZURE_STORAGE_CONNECTION_STRING" not in env
    assert env["LEDGERGC_OFFLOAD_ENDPOINT"] == azurite.account_url
    assert AZURITE_KEY not in caplog.text and sas not in caplog.text
    # The SAS is a working credential for the container (Azurite checks its signature).
    listed = ContainerClient(azurite.account_url, container, credential=sas).list_blobs()
    assert "probe" in {blob.name for blob in listed}
    # With a local master the executors are this worker's processes: nothing leaves it.
    local = orphan_tasks.submit_env(settings, local_master=True)
    assert local["AZURE_STORAGE_ACCESS_KEY"] == AZURITE_KEY


def test_the_brokers_azure_variables_reach_spark_only_as_a_sas(
    airflow_env: Any, monkeypatch: pytest.MonkeyPatch, azurite: AzuriteBlobServer, container: str
) -> None:
    for name, value in (
        ("LEDGERGC_OFFLOAD_DRIVER", "azureblob"),
        ("LEDGERGC_OFFLOAD_BUCKET", container),
        ("LEDGERGC_OFFLOAD_ENDPOINT", azurite.account_url),
        ("AZURE_STORAGE_ACCOUNT", AZURITE_ACCOUNT),
        ("AZURE_STORAGE_ACCESS_KEY", AZURITE_KEY),
    ):
        monkeypatch.setenv(name, value)
    operator = rendered_survey()
    shipped = everything_spark_gets(operator)
    assert AZURITE_KEY not in shipped
    assert (operator.env_vars or {})["LEDGERGC_OFFLOAD_AZURE_SAS"]


def test_an_azure_ad_login_gets_a_user_delegation_sas(
    airflow_env: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Azurite grants user delegation keys only over HTTPS with its OAuth mode on, which
    the suite's Azurite does not run: the login's client is a fake that answers
    ``get_user_delegation_key`` as the service does; the SAS is the SDK's own."""
    from azure.storage.blob import UserDelegationKey

    key = UserDelegationKey()
    key.signed_oid, key.signed_tid = "11111111-oid", "22222222-tid"
    key.signed_start, key.signed_expiry = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"
    key.signed_service, key.signed_version = "b", "2025-01-05"
    key.value = "ZGVsZWdhdGlvbi1rZXk="

    class Login:
        def get_token(self, *scopes: str, **kwargs: Any) -> Any:
            raise AssertionError("the login's token is never asked for here")

    class Client:
        account_name = "prodaccount"
        primary_endpoint = "https://prodaccount.blob.core.windows.net/"
        credential = Login()
        asked: ClassVar[list[Any]] = []

        def get_user_delegation_key(self, start: Any, expiry: Any) -> UserDelegationKey:
            self.asked.append((start, expiry))
            return key

    class Hook:
        def get_conn(self) -> Client:
            return Client()

    monkeypatch.setattr(azure_credentials, "connection_hook", lambda connection: Hook())
    monkeypatch.setenv("LEDGERGC_OFFLOAD_DRIVER", "azureblob")
    monkeypatch.setenv("LEDGERGC_OFFLOAD_BUCKET", "offload")
    airflow_env(
        "wasb_default",
        "wasb",
        login="client-id",
        password="client-secret-value",
        extra={"tenant_id": "tenant"},
    )
    settings = settings_hook.LedgerGcHook().get_settings()
    sas = settings.azure_storage_sas or ""
    assert "skoid=11111111-oid" in sas and "sr=c" in sas and "sig=" in sas
    assert settings.azure_storage_key is None and Client.asked
    shipped = everything_spark_gets(rendered_survey())
    assert "client-secret-value" not in shipped


# --- What the spark-submit process itself is given --------------------------------------


def environment_of_spark_submit(
    operator: orphan_tasks.OrphanSparkSubmitOperator, tmp_path: Path
) -> dict[str, str]:
    """The environment the Spark provider really starts spark-submit with: the
    operator's hook submits to a ``spark-submit`` that writes its environment down (the
    provider adds ``env_vars`` to a copy of this worker's environment)."""
    dump = tmp_path / "spark-submit-env.json"
    binary = tmp_path / "spark-submit"
    binary.write_text(
        f"#!{sys.executable}\n"
        "import json, os\n"
        f"open({str(dump)!r}, 'w').write(json.dumps(dict(os.environ)))\n"
    )
    binary.chmod(0o755)
    operator.spark_submit = str(binary)
    operator._get_hook().submit(operator.application)
    environment: dict[str, str] = json.loads(dump.read_text())
    return environment


def test_the_workers_long_lived_variables_do_not_reach_spark_submit(
    airflow_env: Any,
    monkeypatch: pytest.MonkeyPatch,
    azurite: AzuriteBlobServer,
    container: str,
    tmp_path: Path,
    service_account_key: dict[str, str],
) -> None:
    """The worker's environment holds the brokers' Azure account key and connection
    string, a GCS key file's path and AWS keys no store uses. The task hands Spark a SAS
    in their place, but the provider starts spark-submit with this worker's environment
    plus ``env_vars``: whatever the settings leave out must be blanked there, or the
    driver's settings read the long-lived key back and pickle it to every executor."""
    key_file = tmp_path / "gcs-key.json"
    key_file.write_text(json.dumps(service_account_key))
    for name, value in (
        ("LEDGERGC_OFFLOAD_DRIVER", "azureblob"),
        ("LEDGERGC_OFFLOAD_BUCKET", container),
        ("LEDGERGC_OFFLOAD_ENDPOINT", azurite.account_url),
        ("AZURE_STORAGE_ACCOUNT", AZURITE_ACCOUNT),
        ("AZURE_STORAGE_ACCESS_KEY", AZURITE_KEY),
        ("AZURE_STORAGE_CONNECTION_STRING", azurite.connection_string),
        ("LEDGERGC_OFFLOAD_GCS_KEY_FILE", str(key_file)),
        ("AWS_ACCESS_KEY_ID", "AKIALONGLIVEDUNUSED1"),
        ("AWS_SECRET_ACCESS_KEY", "long-lived-unused-aws-secret"),
    ):
        monkeypatch.setenv(name, value)
    environment = environment_of_spark_submit(rendered_survey(), tmp_path)
    text = json.dumps(environment)
    assert AZURITE_KEY not in text
    assert "long-lived-unused-aws-secret" not in text and str(key_file) not in text
    # What the Spark driver's settings are, read from that environment as it reads them.
    driver = resolve(Settings.from_env(environment)).offload
    assert (driver.azure_key, driver.azure_connection_string) == (None, None)
    assert driver.azure_sas and driver.azure_account == AZURITE_ACCOUNT


def test_a_sas_signature_is_masked_in_the_http_clients_debug_log(
    monkeypatch: pytest.MonkeyPatch,
    azurite: AzuriteBlobServer,
    container: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``--log-level DEBUG`` shows urllib3's request lines, whose URL carries the SAS: the
    SDK sends its signature re-encoded (``/`` as ``%2F``, ``+`` as ``%2B``), a form the
    SAS as configured does not contain, so masking the setting's value alone let the
    signature through. Any ``sig=`` of a URL is masked, as is an AccountKey."""
    from datetime import UTC, datetime, timedelta
    from urllib.parse import parse_qs, quote

    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    from ledger_gc.config.secret_masking import mask
    from ledger_gc.config.secret_values import install_for
    from ledger_gc.storage.offload_buckets import offload_bucket

    now = datetime.now(UTC)
    sas = ""
    # A signature with a "/": the SAS keeps it, the SDK's request URL sends "%2F".
    while "/" not in parse_qs(sas).get("sig", [""])[0]:
        now += timedelta(seconds=1)
        sas = generate_container_sas(
            AZURITE_ACCOUNT,
            container,
            account_key=AZURITE_KEY,
            permission=ContainerSasPermissions(read=True, list=True),
            expiry=now + timedelta(hours=1),
        )
    signature = parse_qs(sas)["sig"][0]
    settings = Settings(
        offload_driver="azureblob",
        offload_bucket=container,
        offload_endpoint=azurite.account_url,
        azure_storage_account=AZURITE_ACCOUNT,
        azure_storage_sas=sas,
    )
    install_for(settings)
    caplog.set_level(logging.DEBUG)
    for name in ("urllib3", "azure"):
        monkeypatch.setattr(logging.getLogger(name), "level", logging.DEBUG)
    bucket = offload_bucket(resolve(settings).offload)
    bucket.check_bucket()
    assert "restype=container" in caplog.text  # the request lines are there
    for form in (signature, quote(signature, safe=""), sas):
        assert form not in caplog.text
    connection = f"AccountName=a;AccountKey={AZURITE_KEY[:20]}Zz==;BlobEndpoint=http://h/a"
    assert AZURITE_KEY[:20] not in mask(f"bad connection string {connection}")


def test_a_sovereign_clouds_connection_string_sends_spark_to_that_cloud() -> None:
    """A connection string without BlobEndpoint names its cloud by EndpointSuffix (Azure
    China, US Government): the container SAS that replaces its key must go with that
    cloud's endpoint, not https://<account>.blob.core.windows.net."""
    connection = (
        "DefaultEndpointsProtocol=https;AccountName=prodaccount;"
        f"AccountKey={AZURITE_KEY};EndpointSuffix=core.chinacloudapi.cn"
    )
    settings = Settings(
        offload_driver="azureblob",
        offload_bucket="offload",
        azure_storage_connection_string=connection,
    )
    handed = azure_credentials.for_spark(settings, local_master=False)
    assert handed.azure_storage_connection_string is None and handed.azure_storage_sas
    assert handed.offload_endpoint == "https://prodaccount.blob.core.chinacloudapi.cn"
    store = resolve(handed).offload
    from ledger_gc.storage.azure_container import service_client

    assert service_client(store).url.startswith("https://prodaccount.blob.core.chinacloudapi.cn")
