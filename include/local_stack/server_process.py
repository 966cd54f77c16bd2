"""One local server as a child process: watchdog, own process group, log, readiness, stop.

Every server of the local stack (ZooKeeper, SeaweedFS, PostgreSQL, Spark's daemons) is a
``ServerProcess`` subclass that says what to run and how to tell it serves; how it is
started, watched and stopped, so that none is ever left behind, is here once.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, ClassVar, Self

LOOPBACK = "127.0.0.1"


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


class Startable:
    """Something started and stopped as a whole (a server, an ensemble, a cluster, the
    stack), and so usable in a ``with``: started on entry, stopped on exit."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ServerProcess(Startable):
    """One server child: watchdog, own process group, log file, readiness wait, stop.

    Subclasses say what to run (``_command``) and how to tell it is serving
    (``_is_ready``).
    """

    name: ClassVar[str] = "server"
    log_name: ClassVar[str] = "server.log"
    # How long stop() lets the server shut down on its own before it kills it.
    stop_timeout: ClassVar[float] = 15.0
    # Every started server, so that atexit can stop what a crashing caller forgot.
    _running: ClassVar[set[ServerProcess]] = set()
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
        return any(port_in_use(port) for port in self._ports())

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
                while any(map(accepts, self._ports())) and time.monotonic() < deadline:
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

    @classmethod
    def stop_all(cls) -> None:
        """Stop every server this process started and has not stopped (used by atexit)."""
        with cls._lock:
            servers = list(cls._running)
        for server in servers:
            server.stop()


atexit.register(ServerProcess.stop_all)


def accepts(port: int) -> bool:
    """Whether something accepts connections on the loopback ``port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1)
        return sock.connect_ex((LOOPBACK, port)) == 0


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return True
    return False


#: JVM options for a short-lived local JVM (the local servers, a test's, a benchmark's or
#: the demo's Spark driver and executors): the quick JIT tier and the serial collector
#: start and warm up seconds sooner on a small shared machine. A deployment keeps the
#: JVM's defaults.
FAST_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
#: ``FAST_JVM_OPTIONS`` as ``SPARK_SUBMIT_OPTS`` takes them.
FAST_JVM = " ".join(FAST_JVM_OPTIONS)


def java_executable() -> str:
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
