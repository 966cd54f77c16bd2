"""Bad input gives a clear error that names the thing, and never reads as "empty"."""

from __future__ import annotations

import socket
import time

import pytest

from ledger_gc.errors import (
    BucketNotFoundError,
    ConfigError,
    MetadataFormatError,
    MetadataUnavailableError,
)
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.metadata.paths import managed_ledger_path
from ledger_gc.settings import Settings
from ledger_gc.storage.s3 import LedgerStorage

ML = "acme/prod/persistent/broken"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_corrupt_znode_bytes_name_the_znode(settings, zk_client):
    zk_client.create(managed_ledger_path(ML), b"\xff\x00garbage", makepath=True)
    with MetadataStore.open(settings) as store, pytest.raises(MetadataFormatError) as err:
        store.get_managed_ledger(ML)
    assert managed_ledger_path(ML) in str(err.value)


def test_corrupt_cursor_bytes_name_the_cursor(settings, zk_client):
    zk_client.create(managed_ledger_path(ML), b"", makepath=True)
    zk_client.create(managed_ledger_path(ML) + "/sub", b"\x08")  # truncated varint
    with MetadataStore.open(settings) as store, pytest.raises(MetadataFormatError) as err:
        store.get_cursor(ML, "sub")
    assert "sub" in str(err.value)


def test_missing_bucket_is_named(settings):
    storage = LedgerStorage(settings.with_overrides(bucket="no-such-bucket-here"))
    with pytest.raises(BucketNotFoundError, match="no-such-bucket-here"):
        storage.check_bucket()


def test_unreachable_zookeeper_fails_fast_and_says_nothing_was_deleted(settings):
    dead = settings.with_overrides(zk_hosts=f"127.0.0.1:{free_port()}", zk_timeout_seconds=2.0)
    started = time.monotonic()
    with pytest.raises(MetadataUnavailableError) as err, MetadataStore.open(dead):
        pass
    assert time.monotonic() - started < 20
    assert "unreachable" in str(err.value) and "nothing deleted" in str(err.value)


def test_zookeeper_lost_mid_read_is_an_error_not_an_empty_store(
    private_settings, private_zookeeper
):
    with MetadataStore.open(private_settings.with_overrides(zk_timeout_seconds=3.0)) as store:
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
