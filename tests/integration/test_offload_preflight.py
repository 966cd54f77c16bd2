"""Tiered storage that cannot be reached as configured (wrong credentials, no such bucket
or container) is one line and exit 2 before a cycle starts Spark or records a run, on
each store: S3 (SeaweedFS), GCS (fake-gcs-server), Azure (Azurite). The check is
``orphans.preflight`` through ``storage.offload_buckets.offload_bucket``; the GCS and
Azure classes are other parts of issue 35 (skipped until they are there)."""

from __future__ import annotations

import os
import subprocess
import time

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
