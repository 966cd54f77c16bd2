"""The local stack: ZooKeeper and SeaweedFS S3 (and PostgreSQL, fake-gcs-server and
Azurite if asked) together, with the variables that point the project at them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Self

from local_stack.azurite import AZURITE_ACCOUNT, AZURITE_KEY, AzuriteBlobServer
from local_stack.fake_gcs import FakeGcsServer
from local_stack.postgres import PostgresServer
from local_stack.seaweedfs import TEST_AWS_ENV, SeaweedS3Server
from local_stack.server_process import ServerProcess, Startable
from local_stack.zookeeper import ZooKeeperServer

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BASE_DIR = PROJECT_ROOT / "var" / "local-stack"


class LocalStack(Startable):
    """ZooKeeper and SeaweedFS S3 together, with the environment that points the project at
    them.

    The stack is throwaway: ``start()`` wipes both data dirs (and the old logs) unless
    ``fresh=False``, since metadata and data only make sense together.

    ``object_stores=True`` adds the emulators of the two other offload stores Pulsar
    writes to: fake-gcs-server (Google Cloud Storage) and Azurite (Azure Blob Storage),
    each on a free loopback port. fake-gcs-server runs on its **memory** backend, the only
    one that takes object versioning: a bucket created with versioning on keeps a
    deleted object's generation readable by number, so a restore from the audited
    generation can be shown (its listing with ``versions=true`` still returns only live
    objects, and it has no soft delete). Azurite keeps no deleted blob: a delete there
    is final. The test suite starts its own (``fake_gcs`` and ``azurite`` fixtures).
    """

    def __init__(
        self,
        base_dir: Path | str = DEFAULT_BASE_DIR,
        *,
        fresh: bool = True,
        postgres: bool = False,
        object_stores: bool = False,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.fresh = fresh
        self.log_dir = self.base_dir / "logs"
        self.zookeeper = ZooKeeperServer(self.base_dir / "zookeeper", log_dir=self.log_dir)
        self.s3 = SeaweedS3Server(self.base_dir / "seaweedfs", log_dir=self.log_dir)
        # The state store of a deployment (LEDGERGC_STATE_URL); off unless asked for.
        self.postgres = (
            PostgresServer(self.base_dir / "postgresql", log_dir=self.log_dir) if postgres else None
        )
        self.gcs = (
            FakeGcsServer(self.base_dir / "fake-gcs", log_dir=self.log_dir, backend="memory")
            if object_stores
            else None
        )
        self.azure = (
            AzuriteBlobServer(self.base_dir / "azurite", log_dir=self.log_dir)
            if object_stores
            else None
        )

    def servers(self) -> list[ServerProcess]:
        """Every server of this stack, in start order."""
        optional = (self.postgres, self.gcs, self.azure)
        return [self.zookeeper, self.s3, *(s for s in optional if s is not None)]

    @property
    def zk_hosts(self) -> str:
        """ZooKeeper's connect string (no chroot)."""
        return self.zookeeper.hosts

    @property
    def s3_endpoint(self) -> str:
        """The S3 endpoint URL."""
        return self.s3.endpoint

    def start(self) -> Self:
        """Start every server in parallel (their start-ups overlap) and wait for all."""
        if self.fresh:
            shutil.rmtree(self.zookeeper.data_dir, ignore_errors=True)
            shutil.rmtree(self.s3.data_dir, ignore_errors=True)
            for emulator in (self.gcs, self.azure):
                if emulator is not None:
                    shutil.rmtree(emulator.data_dir, ignore_errors=True)
            shutil.rmtree(self.log_dir, ignore_errors=True)
        try:
            for server in self.servers():
                server.launch()
            for server in self.servers():
                server.finish_start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every server (idempotent)."""
        for emulator in (self.azure, self.gcs):
            if emulator is not None:
                emulator.stop()
        if self.postgres is not None:
            self.postgres.remove()
        self.s3.stop()
        self.zookeeper.stop()

    @property
    def running(self) -> bool:
        """Whether every server of the stack is still up."""
        return all(server.running for server in self.servers())

    def env(self) -> dict[str, str]:
        """The variables that point ``ledgergc``, the DAGs and boto3 at this stack."""
        env = {
            "LEDGERGC_ZK_HOSTS": self.zk_hosts,
            "LEDGERGC_S3_ENDPOINT": self.s3_endpoint,
            **TEST_AWS_ENV,
        }
        if self.postgres is not None:
            env["LEDGERGC_STATE_URL"] = self.postgres.url()
        if self.gcs is not None:
            # Where the emulators are, not a choice of offload store: a run picks its
            # store with LEDGERGC_OFFLOAD_DRIVER and LEDGERGC_OFFLOAD_ENDPOINT from these.
            env["LOCAL_STACK_GCS_ENDPOINT"] = self.gcs.endpoint
        if self.azure is not None:
            env["LOCAL_STACK_AZURE_BLOB_ENDPOINT"] = self.azure.account_url
            # Azurite's built-in account, as a broker's environment names its account
            # (Azure's published emulator key: accepted by nothing but an emulator).
            env["AZURE_STORAGE_ACCOUNT"] = AZURITE_ACCOUNT
            env["AZURE_STORAGE_ACCESS_KEY"] = AZURITE_KEY
        return env
