"""Bad input gives a clear error that names the thing, and never reads as "empty"."""

from __future__ import annotations

import socket
import time

import pytest
from test_status_command import run_ledgergc

from ledger_gc import run_log
from ledger_gc.config.edge import block_store, zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.errors import (
    BucketNotFoundError,
    ConfigError,
    MetadataFormatError,
    MetadataUnavailableError,
)
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.metadata.paths import managed_ledger_path
from ledger_gc.state.stores import open_store
from ledger_gc.storage.s3 import LedgerStorage

ML = "acme/prod/persistent/broken"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_corrupt_znode_bytes_name_the_znode(settings, zk_client):
    zk_client.create(managed_ledger_path(ML), b"\xff\x00garbage", makepath=True)
    with (
        MetadataStore.open(zk_endpoint(settings)) as store,
        pytest.raises(MetadataFormatError) as err,
    ):
        store.get_managed_ledger(ML)
    assert managed_ledger_path(ML) in str(err.value)


def test_corrupt_cursor_bytes_name_the_cursor(settings, zk_client):
    zk_client.create(managed_ledger_path(ML), b"", makepath=True)
    zk_client.create(managed_ledger_path(ML) + "/sub", b"\x08")  # truncated varint
    with (
        MetadataStore.open(zk_endpoint(settings)) as store,
        pytest.raises(MetadataFormatError) as err,
    ):
        store.get_cursor(ML, "sub")
    assert "sub" in str(err.value)


def test_missing_bucket_is_named(settings):
    storage = LedgerStorage(block_store(settings.with_overrides(bucket="no-such-bucket-here")))
    with pytest.raises(BucketNotFoundError, match="no-such-bucket-here"):
        storage.check_bucket()


def test_unreachable_zookeeper_fails_fast_and_says_nothing_was_deleted(settings):
    dead = settings.with_overrides(zk_address=f"127.0.0.1:{free_port()}", zk_timeout_seconds=2.0)
    started = time.monotonic()
    with pytest.raises(MetadataUnavailableError) as err, MetadataStore.open(zk_endpoint(dead)):
        pass
    assert time.monotonic() - started < 20
    assert "unreachable" in str(err.value) and "nothing deleted" in str(err.value)


def test_zookeeper_lost_mid_read_is_an_error_not_an_empty_store(
    private_settings, private_zookeeper
):
    with MetadataStore.open(
        zk_endpoint(private_settings.with_overrides(zk_timeout_seconds=3.0))
    ) as store:
        store.create_managed_ledger(ML)
        assert store.list_managed_ledgers() == [ML]
        private_zookeeper.stop()
        with pytest.raises(MetadataUnavailableError):
            store.list_managed_ledgers()
    private_zookeeper.start()


def test_malformed_settings_are_config_errors():
    with pytest.raises(ConfigError, match="LEDGERGC_GRACE_SECONDS"):
        Settings.from_env({"LEDGERGC_GRACE_SECONDS": "soon"})
    with pytest.raises(ConfigError, match="LEDGERGC_DELETE_ENABLED"):
        Settings.from_env({"LEDGERGC_DELETE_ENABLED": "maybe"})
    with pytest.raises(ConfigError, match="OVERRIDES"):
        Settings.from_env({"LEDGERGC_TRIM_RETENTION_OVERRIDES": '{"only-tenant": {}}'})


def _dead_zookeeper(settings: Settings) -> Settings:
    return settings.with_overrides(zk_address=f"127.0.0.1:{free_port()}", zk_timeout_seconds=2.0)


@pytest.mark.parametrize(
    "command", [["status"], ["trim", "--dry-run"], ["orphans", "--dry-run"]], ids=" ".join
)
def test_an_unreachable_zookeeper_is_the_one_line_on_stderr(settings, command):
    # kazoo's retry warnings ("Connection dropped: socket connection error") used to come
    # first: the one-line error is all a user sees unless they ask for more.
    open_store(settings).ready()
    dead = _dead_zookeeper(settings)

    result = run_ledgergc(dead, *command)

    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("ledgergc: error: ZooKeeper at 127.0.0.1:") and "unreachable" in line

    asked = run_ledgergc(dead, "--verbose", *command)
    assert "kazoo" in asked.stderr and asked.stderr.strip().splitlines()[-1] == line


def test_a_dry_run_against_an_unreachable_zookeeper_starts_no_spark_and_is_no_cycle(settings):
    dead = _dead_zookeeper(settings)
    started = time.monotonic()

    result = run_ledgergc(dead, "orphans", "--dry-run")

    # Checked before the Spark session: a JVM start took 38 s before the error came.
    assert time.monotonic() - started < 15, result.stderr
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "unreachable" in line and "nothing deleted" in line
    assert result.stdout == ""  # no cycle report
    # Not a cycle: the page's "latest orphan cycle" stays what it was.
    assert run_log.read_runs(settings, run_log.ORPHANS) == []


def test_an_unreachable_s3_endpoint_is_one_line_before_any_cycle(settings):
    dead = settings.with_overrides(s3_endpoint=f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()

    result = run_ledgergc(dead, "orphans", "--dry-run")

    assert time.monotonic() - started < 30, result.stderr
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "S3 endpoint" in line and "unreachable" in line
    assert run_log.read_runs(settings, run_log.ORPHANS) == []
