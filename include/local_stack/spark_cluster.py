"""A Spark standalone cluster on loopback (``SparkStandaloneCluster``: a master and its
workers), run from the installed PySpark's own jars.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Self

from local_stack.server_process import (
    FAST_JVM_OPTIONS,
    LOOPBACK,
    LocalStackError,
    ServerProcess,
    Startable,
    free_port,
    java_executable,
)


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


class _SparkDaemon(ServerProcess):
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
            java_executable(),
            f"-Xmx{self.heap}",
            *FAST_JVM_OPTIONS,
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


class SparkStandaloneCluster(Startable):
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
        self.private_dirs = [Path(d) for d in private_dirs]
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
