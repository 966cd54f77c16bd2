"""Fixtures for the integration tests: one local Spark session for the whole test session,
and a small toolkit to build ledger stores for the orphan tests.

A SparkSession costs seconds to start (a JVM), so every test that needs Spark shares
one: ``local[2]``, no UI, two shuffle partitions; its executors get ledger_gc as
spark-submit's ``py_files`` would give it (``spark.session.local_session``).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.config.edge import block_store, zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.marking import mark_deletable
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.proto.mldataformats_pb2 import ManagedLedgerInfo
from ledger_gc.storage.s3 import LedgerStorage
from local_stack.azurite import AzuriteBlobServer
from local_stack.fake_gcs import FakeGcsServer
from local_stack.server_process import FAST_JVM, LocalStackError
from local_stack.spark_cluster import SparkStandaloneCluster
from local_stack.zookeeper import ZooKeeperEnsemble
from pulsar_cluster import PulsarCluster


@pytest.fixture(scope="session")
def spark(local_stack: Any) -> Iterator[Any]:
    """The session's local SparkSession (stopped at the end of the test session).

    After the local stack: its JVM, and the Python workers it forks, keep the
    environment they start with, and an executor's S3 client finds the stack's test
    credentials there (settings without keys leave boto3 to its own chain)."""
    from ledger_gc.spark.session import local_session

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPARK_SUBMIT_OPTS", FAST_JVM)  # the local driver's JVM
        session = local_session("ledger-gc-tests", master="local[2]")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()
    # py4j logs "closing down" from __del__ at interpreter exit, after pytest closed the
    # stream it logs to; that prints a spurious "--- Logging error ---" traceback.
    logging.getLogger("py4j").setLevel(logging.ERROR)


@pytest.fixture(scope="session")
def zookeeper_ensemble(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperEnsemble]:
    """A three-server ZooKeeper ensemble for the session (started on first use).

    A test may stop a member; it must restart it before it ends (``members[i].restart()``).
    """
    ensemble = ZooKeeperEnsemble(tmp_path_factory.mktemp("zookeeper-ensemble"))
    try:
        ensemble.start()
    except LocalStackError as exc:
        pytest.fail(f"ZooKeeper ensemble did not start (logs in {ensemble.log_dir}): {exc}")
    try:
        yield ensemble
    finally:
        ensemble.stop()


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcsServer]:
    """The session's fake-gcs-server (the local Google Cloud Storage), started on first use:
    a session whose tests never ask for it never starts it."""
    server = FakeGcsServer(tmp_path_factory.mktemp("fake-gcs"))
    try:
        server.start()
    except LocalStackError as exc:
        pytest.fail(f"fake-gcs-server did not start (log {server.log_path}): {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzuriteBlobServer]:
    """The session's Azurite Blob service (the local Azure Blob Storage), started on first
    use: a session whose tests never ask for it never starts it."""
    server = AzuriteBlobServer(tmp_path_factory.mktemp("azurite"))
    try:
        server.start()
    except LocalStackError as exc:
        pytest.fail(f"Azurite did not start (log {server.log_path}): {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandaloneCluster]:
    """A Spark standalone cluster for the session: a master and two one-core workers from
    PySpark's jars, on loopback (started on first use). Where the machine allows it (root
    and unshare), the workers do not see the driver's scratch folder
    (``cluster.private_dirs[0]``: each has its own empty tmpfs over it), as workers on
    other hosts would not."""
    private = []
    if os.geteuid() == 0 and shutil.which("unshare") is not None:
        private = [tmp_path_factory.mktemp("driver-disk")]
    cluster = SparkStandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), private_dirs=private)
    try:
        cluster.start()
    except LocalStackError as exc:
        pytest.fail(f"Spark cluster did not start (logs in {cluster.log_dir}): {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


class StoreKit:
    """Builds the store a test needs through the library (real ZooKeeper and S3)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.storage = LedgerStorage(block_store(settings))

    def managed_ledger(
        self, name: str, entries: int = 20, size: int = 2000, per_ledger: int | None = None
    ) -> list[int]:
        """Create and write a managed ledger; return its listed ledger ids."""
        config = ManagedLedgerConfig(max_entries_per_ledger=per_ledger or 50_000)
        with MetadataStore.open(zk_endpoint(self.settings)) as store:
            ml = ManagedLedger.open(name, store, self.storage, config)
            try:
                for _ in range(entries):
                    ml.add_entry(b"x" * size)
            finally:
                ml.close()
            return [li.ledgerId for li in store.get_managed_ledger(name).value.ledgerInfo]

    def mark(self, name: str, ledger_ids: list[int]) -> None:
        """Do what the trim's phase one does: move ledgers to deletable markers."""

        def mutate(info: ManagedLedgerInfo) -> bool:
            mark_deletable(info, ledger_ids, int(time.time() * 1000))
            return True

        with MetadataStore.open(zk_endpoint(self.settings)) as store:
            store.update_managed_ledger(name, mutate)

    def keys(self, prefix: str | None = None) -> set[str]:
        base = self.settings.key_prefix if prefix is None else prefix
        return {obj.key for obj in self.storage.iter_objects(base)}

    def put(self, key: str, body: bytes = b"not ledger data") -> str:
        self.storage.client.put_object(Bucket=self.settings.bucket, Key=key, Body=body)
        return key


@pytest.fixture
def store_kit(settings: Settings) -> StoreKit:
    return StoreKit(settings)


@pytest.fixture
def store_kit_for() -> Callable[[Settings], StoreKit]:
    """A StoreKit for other settings (``private_settings``)."""
    return StoreKit


@pytest.fixture
def clock_at() -> Callable[[float], Callable[[], int]]:
    """``clock_at(hours)``: a clock (epoch ms) that many hours from now."""

    def make(hours: float) -> Callable[[], int]:
        return lambda: int(time.time() * 1000 + hours * 3_600_000)

    return make


@pytest.fixture
def later() -> Callable[[float], dict[str, Any]]:
    """``later(hours)``: cycle arguments for a world that many hours on, the host's clock
    *and* the servers' (ZooKeeper's, S3's) alike: how a test lets grace and retention
    pass without waiting. Moving the host's ``clock`` alone is a wrong clock, which the
    cycle does not trust (issue 11)."""
    from ledger_gc.orphans.witness import ServerClocks

    def make(hours: float) -> dict[str, Any]:
        offset = int(hours * 3_600_000)
        return {
            "clock": lambda: int(time.time() * 1000) + offset,
            "witness": ServerClocks(offset_ms=offset),
        }

    return make


# --- a Pulsar cluster on BookKeeper, for the BookKeeper source's tests ----------------------
# A test file whose cluster needs other settings (no tiered storage, a namespace made up
# front, other grace or retention) defines its own ``pulsar`` and ``cluster``, which pytest
# uses instead of these.


@pytest.fixture
def pulsar(settings: Settings, s3_client: Any) -> Settings:
    """A Pulsar cluster's settings: no block store, tiered storage on (its own bucket),
    deletion on, a day's grace, no retention and no byte-fraction limit."""
    offload = f"{settings.bucket}-offload"
    s3_client.create_bucket(Bucket=offload)
    return settings.with_overrides(
        bucket="",
        offload_bucket=offload,
        offload_prefix="offloaded",
        delete_enabled=True,
        grace_seconds=24 * 3600,
        retention_seconds=0,
        orphan_max_fraction=1.0,
    )


@pytest.fixture
def cluster(zk_client: KazooClient, s3_client: Any, pulsar: Settings) -> PulsarCluster:
    """The cluster; its offloader writes to the tiered-storage bucket of ``pulsar``."""
    return PulsarCluster(
        zk_client,
        s3=s3_client,
        offload_bucket=pulsar.offload_bucket,
        offload_prefix=pulsar.offload_prefix,
    ).init()
