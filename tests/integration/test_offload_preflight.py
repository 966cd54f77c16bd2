"""Tiered storage that cannot be reached as configured (wrong credentials, no such bucket
or container) is one line and exit 2 before a cycle starts Spark or records a run, on
each store: S3 (SeaweedFS), GCS (fake-gcs-server), Azure (Azurite). The check is
``orphans.preflight`` through ``storage.offload_buckets.offload_bucket``; the GCS and
Azure classes are other parts of issue 35 (skipped until they are there)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from test_status_command import LEDGERGC

from ledger_gc import run_log
from ledger_gc.config.settings import Settings
from local_stack.azurite import AZURITE_ACCOUNT, AzuriteBlobServer
from local_stack.fake_gcs import FakeGcsServer

#: Checked before the Spark session (a JVM start takes tens of seconds on CI).
BEFORE_SPARK_SECONDS = 30


def _refused_before_any_cycle(settings: Settings, broken: Settings) -> str:
    """Run ``ledgergc orphans --dry-run`` on ``broken`` (every setting in its environment,
    as a child process gets them): exit 2, the one line it says."""
    started = time.monotonic()
    result = subprocess.run(
        [str(LEDGERGC), "orphans", "--dry-run"],
        env={**os.environ, **broken.to_env()},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert time.monotonic() - started < BEFORE_SPARK_SECONDS, result.stderr
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("ledgergc: error: ")
    assert result.stdout == ""  # no cycle report
    assert run_log.read_runs(settings, run_log.ORPHANS) == []
    return line


def test_a_missing_s3_offload_bucket_is_one_line(settings: Settings) -> None:
    broken = settings.with_overrides(offload_driver="aws-s3", offload_bucket="no-such-offload")
    line = _refused_before_any_cycle(settings, broken)
    assert "no-such-offload" in line


def test_a_missing_gcs_bucket_is_one_line(settings: Settings, fake_gcs: FakeGcsServer) -> None:
    pytest.importorskip("ledger_gc.storage.gcs_bucket")
    broken = settings.with_overrides(
        offload_driver="google-cloud-storage",
        offload_bucket="no-such-gcs-bucket",
        offload_endpoint=fake_gcs.endpoint,
    )
    line = _refused_before_any_cycle(settings, broken)
    assert "no-such-gcs-bucket" in line


def test_a_missing_azure_container_is_one_line(
    settings: Settings, azurite: AzuriteBlobServer
) -> None:
    pytest.importorskip("ledger_gc.storage.azure_container")
    broken = settings.with_overrides(
        offload_driver="azureblob",
        offload_bucket="no-such-container",
        azure_storage_connection_string=azurite.connection_string,
    )
    line = _refused_before_any_cycle(settings, broken)
    assert "no-such-container" in line


def test_a_wrong_azure_key_is_one_line_that_shows_no_key(
    settings: Settings, azurite: AzuriteBlobServer
) -> None:
    pytest.importorskip("ledger_gc.storage.azure_container")
    container = "preflight-wrong-key"
    try:
        azurite.client().create_container(container)
    except Exception as exc:
        if "ContainerAlreadyExists" not in str(exc):
            raise
    wrong = "d3Jvbmcta2V5LW5vdC1henVyaXRlcy13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleQ=="
    broken = settings.with_overrides(
        offload_driver="azureblob",
        offload_bucket=container,
        offload_endpoint=azurite.account_url,
        azure_storage_account=AZURITE_ACCOUNT,
        azure_storage_key=wrong,
    )
    line = _refused_before_any_cycle(settings, broken)
    assert wrong not in line and container in line


def _azure_container(azurite: AzuriteBlobServer, container: str) -> str:
    try:
        azurite.client().create_container(container)
    except Exception as exc:
        if "ContainerAlreadyExists" not in str(exc):
            raise
    return container


def _expired_sas(container: str) -> str:
    from datetime import UTC, datetime, timedelta

    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    from local_stack.azurite import AZURITE_KEY

    now = datetime.now(UTC)
    return generate_container_sas(
        AZURITE_ACCOUNT,
        container,
        account_key=AZURITE_KEY,
        permission=ContainerSasPermissions(read=True, list=True),
        start=now - timedelta(hours=3),
        expiry=now - timedelta(hours=1),
    )


@pytest.mark.parametrize(
    ("case", "secret", "names"),
    [
        ("key not base64", "not-a-base64-key!!", "AZURE_STORAGE_ACCESS_KEY"),
        ("expired sas", None, "LEDGERGC_OFFLOAD_AZURE_SAS"),
        ("connection string without key", None, "AZURE_STORAGE_CONNECTION_STRING"),
        ("no credentials over http", None, "AZURE_STORAGE_ACCESS_KEY"),
        ("malformed connection string", "AccountKey=MALFORMEDSECRET;x", "CONNECTION_STRING"),
    ],
)
def test_wrong_azure_credentials_are_one_line_naming_the_setting(
    settings: Settings, azurite: AzuriteBlobServer, case: str, secret: str | None, names: str
) -> None:
    """Each wrong credential an operator can give is exit 2 and one line before Spark
    that names the setting to fix and shows no secret."""
    pytest.importorskip("ledger_gc.storage.azure_container")
    container = _azure_container(azurite, "preflight-credentials")
    common = {
        "offload_driver": "azureblob",
        "offload_bucket": container,
        "offload_endpoint": azurite.account_url,
        "azure_storage_account": AZURITE_ACCOUNT,
    }
    if case == "key not base64":
        broken = settings.with_overrides(**common, azure_storage_key=secret)
    elif case == "expired sas":
        secret = _expired_sas(container)
        broken = settings.with_overrides(**common, azure_storage_sas=secret)
    elif case == "connection string without key":
        secret = "ZmFrZQ=="
        connection = (
            f"AccountName={AZURITE_ACCOUNT};BlobEndpoint={azurite.account_url};Foo={secret}"
        )
        broken = settings.with_overrides(
            offload_driver="azureblob",
            offload_bucket=container,
            azure_storage_connection_string=connection,
        )
    elif case == "malformed connection string":
        broken = settings.with_overrides(
            offload_driver="azureblob",
            offload_bucket=container,
            azure_storage_connection_string=secret,
        )
    else:
        broken = settings.with_overrides(**common)
    line = _refused_before_any_cycle(settings, broken)
    assert names in line, line
    assert container in line or "container" in line
    if secret:
        assert secret not in line and secret.split("sig=")[-1][:20] not in line


class _Refusing(BaseHTTPRequestHandler):
    """A GCS JSON API that refuses every caller as Google does an expired or missing
    token (fake-gcs-server checks no token, so this refusal cannot come from it)."""

    def do_GET(self) -> None:
        body = json.dumps(
            {"error": {"code": 401, "message": "Invalid Credentials", "errors": []}}
        ).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def refusing_gcs() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("token", "names"),
    [
        ("ya29.an-expired-token-TOKENSECRET", "LEDGERGC_OFFLOAD_GCS_TOKEN"),
        # No token and an endpoint: the store is reached anonymously, which is what the
        # line must say (an operator's private endpoint with ADC would get this).
        (None, "anonymous"),
    ],
)
def test_a_gcs_refusal_names_the_credential_in_use(
    settings: Settings, refusing_gcs: str, token: str | None, names: str
) -> None:
    pytest.importorskip("ledger_gc.storage.gcs_bucket")
    broken = settings.with_overrides(
        offload_driver="google-cloud-storage",
        offload_bucket="pulsar-offload",
        offload_endpoint=refusing_gcs,
        offload_gcs_token=token,
    )
    line = _refused_before_any_cycle(settings, broken)
    assert names in line and "pulsar-offload" in line, line
    assert "TOKENSECRET" not in line


@pytest.mark.parametrize("name", ["Pulsar_Offload", "ab", "double--hyphen"])
def test_a_bucket_name_azure_cannot_have_is_one_line_naming_the_setting(
    settings: Settings, azurite: AzuriteBlobServer, name: str
) -> None:
    """A bucket name S3 takes that is no Azure container name (capitals, '_', too short,
    '--'): one line naming LEDGERGC_OFFLOAD_BUCKET and Azure's rule, not the service's
    error code."""
    pytest.importorskip("ledger_gc.storage.azure_container")
    broken = settings.with_overrides(
        offload_driver="azureblob",
        offload_bucket=name,
        azure_storage_connection_string=azurite.connection_string,
    )
    line = _refused_before_any_cycle(settings, broken)
    assert "LEDGERGC_OFFLOAD_BUCKET" in line and name in line, line


@pytest.mark.parametrize("name", ["Pulsar-Offload", "ab", "-offload"])
def test_a_bucket_name_gcs_cannot_have_is_one_line_naming_the_setting(
    settings: Settings, fake_gcs: FakeGcsServer, name: str
) -> None:
    pytest.importorskip("ledger_gc.storage.gcs_bucket")
    broken = settings.with_overrides(
        offload_driver="google-cloud-storage",
        offload_bucket=name,
        offload_endpoint=fake_gcs.endpoint,
    )
    line = _refused_before_any_cycle(settings, broken)
    assert "LEDGERGC_OFFLOAD_BUCKET" in line and name in line, line
