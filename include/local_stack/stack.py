"""The local stack: ZooKeeper and SeaweedFS S3 (and PostgreSQL if asked) together, with the
variables that point the project at them.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Self

from local_stack.postgres import PostgresServer
from local_stack.seaweedfs import TEST_AWS_ENV, SeaweedS3Server
from local_stack.server_process import Startable
from local_stack.zookeeper import ZooKeeperServer

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BASE_DIR = PROJECT_ROOT / "var" / "local-stack"


class LocalStack(Startable):
    """ZooKeeper and SeaweedFS S3 together, with the environment that points the project at
    them.

    The stack is throwaway: ``start()`` wipes both data dirs (and the old logs) unless
    ``fresh=False``, since metadata and data only make sense together.
    """

    def __init__(
        self, base_dir: Path | str = DEFAULT_BASE_DIR, *, fresh: bool = True, postgres: bool = False
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

    @property
    def zk_hosts(self) -> str:
        """ZooKeeper's connect string (no chroot)."""
        return self.zookeeper.hosts

    @property
    def s3_endpoint(self) -> str:
        """The S3 endpoint URL."""
        return self.s3.endpoint

    def start(self) -> Self:
        """Start both servers in parallel (their start-ups overlap) and wait for both."""
        if self.fresh:
            shutil.rmtree(self.zookeeper.data_dir, ignore_errors=True)
            shutil.rmtree(self.s3.data_dir, ignore_errors=True)
            shutil.rmtree(self.log_dir, ignore_errors=True)
        try:
            self.zookeeper.launch()
            self.s3.launch()
            if self.postgres is not None:
                self.postgres.launch()
            self.zookeeper.finish_start()
            self.s3.finish_start()
            if self.postgres is not None:
                self.postgres.finish_start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every server (idempotent)."""
        if self.postgres is not None:
            self.postgres.remove()
        self.s3.stop()
        self.zookeeper.stop()

    def env(self) -> dict[str, str]:
        """The variables that point ``ledgergc``, the DAGs and boto3 at this stack."""
        env = {
            "LEDGERGC_ZK_HOSTS": self.zk_hosts,
            "LEDGERGC_S3_ENDPOINT": self.s3_endpoint,
            **TEST_AWS_ENV,
        }
        if self.postgres is not None:
            env["LEDGERGC_STATE_URL"] = self.postgres.url()
        return env
