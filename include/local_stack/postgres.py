"""A throwaway PostgreSQL on loopback (``PostgresServer``): the state store's server in tests."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from local_stack.server_process import (
    LOOPBACK,
    LocalStackError,
    ServerProcess,
    accepts,
    tail,
)

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


class PostgresServer(ServerProcess):
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
        if not accepts(self.port):
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
