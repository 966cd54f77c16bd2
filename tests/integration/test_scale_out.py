"""The orphan cycle as a deployment runs it: a Spark standalone cluster, a ZooKeeper
ensemble, a PostgreSQL state store, and steps in processes that share nothing else.

The stack mirrors a deployment (README "Scaling out"): the Spark master and two workers
are separate JVMs started from PySpark's jars (``SparkStandaloneCluster``), the executors
JVMs of their own on those workers; ZooKeeper is three servers (``ZooKeeperEnsemble``) and
``LEDGERGC_ZK_HOSTS`` lists all three; the state URL is the session's PostgreSQL. Every
step of a cycle is its own process with its own empty ``LEDGERGC_STATE_DIR`` (scratch
only), as tasks on different Airflow workers would be: all they share is the state URL.

``cycle_steps`` says what those processes are: one ``ledgergc orphans`` process per
cycle, each on a fresh, empty scratch dir, which shows the registry, the audit log and
the run log live in PostgreSQL alone. The DAG's tasks as processes of their own that
share only the state URL are ``tests/dags/test_orphan_tasks_share_only_the_state_url.py``.

Then the fault: one ZooKeeper server, the one the snapshot's reads land on (the first new
session after the cycle read ZooKeeper's clock), is stopped at once. The cycle either
completes on the other two or fails closed; both are checked to be safe, and the next
cycle (still one server down) completes. The time of every step is printed (the README's
figures).

``test_a_cycle_whose_executors_do_not_share_the_drivers_disk`` gives the workers a disk
of their own, as on several hosts: the survey's snapshot and scan stay on the executors
(``spark_jobs.hold``), so no step needs a file another host wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from demo_leaks import plant_leaks
from ledger_gc.orphans.witness import TICKS_PATH
from ledger_gc.settings import Settings
from ledger_gc.state.url import STATE_FILE
from local_stack import (
    EnsembleMember,
    LocalStack,
    LocalStackError,
    SparkStandaloneCluster,
    ZooKeeperEnsemble,
)

pytestmark = pytest.mark.spark

LEDGERGC = str(Path(sys.executable).with_name("ledgergc"))
LIVE = "public/default/persistent/orders"
#: JVM options for the short-lived driver and executors (the test machine is small and
#: shared); a deployment keeps the JVM's defaults.
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
STEP_TIMEOUT = 300


def _die_with_parent() -> None:
    """In a step's process before exec: SIGKILL when the test's process is gone, even
    by SIGKILL (Linux's parent-death signal), like the servers' watchdogs."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


@dataclass(frozen=True)
class Step:
    """One process of a cycle, as one task of the DAG run would be on its own worker."""

    name: str
    argv: list[str]


def cycle_steps() -> list[Step]:
    """The processes of one orphan cycle: one ``ledgergc orphans --json`` (every step in
    one process, on the cluster)."""
    return [Step("cycle", [LEDGERGC, "orphans", "--json"])]


@dataclass
class StepRun:
    """What one step's process did, and how long it took."""

    name: str
    returncode: int
    started: float  # epoch seconds
    seconds: float
    stdout: str
    stderr: str
    state_dir: Path

    def report(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.stdout)
        return data

    def error(self) -> str:
        """Why a failed step failed: its report's error, else its last line on stderr."""
        try:
            report = self.report()
        except ValueError:
            report = {}
        refusals = "; ".join(r.get("reason", "") for r in report.get("refusals") or [])
        lines = [line for line in self.stderr.strip().splitlines() if "rror" in line]
        why = report.get("error") or refusals or report.get("delete_skipped")
        if why:
            return f"{report.get('status')}: {why}"
        return lines[-1] if lines else f"status {report.get('status')}"

    def phases(self) -> dict[str, float]:
        """The report's step times: start-up (Python, the Spark driver, the app's
        registration), snapshot, and scan-to-end (scan, diff, phases 1-3, report)."""
        try:
            data = self.report()
        except ValueError:
            return {}
        snapshot = (data.get("snapshot") or {}).get("started_ms")
        scan = (data.get("scan") or {}).get("started_ms")
        finished = data.get("finished_ms")
        if not (snapshot and scan and finished):
            return {}
        return {
            "start-up": round(snapshot / 1000 - self.started, 1),
            "snapshot": round((scan - snapshot) / 1000, 1),
            "scan..report": round((finished - scan) / 1000, 1),
            "shutdown": round(self.started + self.seconds - finished / 1000, 1),
        }


@dataclass
class Deployment:
    """The environment every process of every cycle gets; only the state dir differs."""

    env: dict[str, str]
    scratch: Path
    timings: list[tuple[str, StepRun]] = field(default_factory=list)

    def start(self, step: Step, overrides: Mapping[str, str]) -> tuple[subprocess.Popen[str], Path]:
        state_dir = self.scratch / f"{len(self.timings) + 1:02d}-{step.name}-{uuid.uuid4().hex[:6]}"
        state_dir.mkdir(parents=True)
        env = {**self.env, **overrides, "LEDGERGC_STATE_DIR": str(state_dir)}
        proc = subprocess.Popen(
            step.argv,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=_die_with_parent,
        )
        return proc, state_dir

    def run_cycle(
        self,
        label: str,
        overrides: Mapping[str, str] | None = None,
        *,
        during: Callable[[threading.Event], Any] | None = None,
    ) -> list[StepRun]:
        """Run the cycle's steps one after the other (stopping at a failed one, as the
        DAG would); ``during(done)`` runs in a thread beside the first step, ``done``
        set when that step's process has exited."""
        runs = []
        for index, step in enumerate(cycle_steps()):
            started = time.time()
            proc, state_dir = self.start(step, overrides or {})
            watcher, done = None, threading.Event()
            if during is not None and index == 0:
                watcher = threading.Thread(target=during, args=(done,), daemon=True)
                watcher.start()
            try:
                stdout, stderr = proc.communicate(timeout=STEP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, stderr = proc.communicate()
            finally:
                # A step must not outlive the test (pytest-timeout, Ctrl-C): a driver
                # whose cluster went away waits for executors for ever. Its Spark JVM
                # exits with it (PySpark's gateway stops when its stdin closes).
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                done.set()
            if watcher is not None:
                watcher.join(timeout=30)
            run = StepRun(
                step.name,
                proc.returncode,
                started,
                time.time() - started,
                stdout,
                stderr,
                state_dir,
            )
            self.timings.append((label, run))
            runs.append(run)
            if run.returncode not in (0, 1):
                break
        return runs

    def figures(self) -> str:
        lines = ["scale-out run: time per step (s)"]
        for label, run in self.timings:
            detail = ", ".join(f"{name} {secs}" for name, secs in run.phases().items())
            lines.append(
                f"  {label:<36} {run.name:<6} exit {run.returncode} {run.seconds:6.1f}"
                + (f"  ({detail})" if detail else "")
            )
            if run.returncode != 0:
                lines.append(f"    {run.error()[:300]}")
        return "\n".join(lines)


def _last(runs: list[StepRun]) -> StepRun:
    return runs[-1]


def _explain(runs: list[StepRun]) -> str:
    run = _last(runs)
    return f"step {run.name} exit {run.returncode}; stderr:\n{run.stderr[-3000:]}"


def _deployment(
    s3_endpoint: str,
    ensemble: ZooKeeperEnsemble,
    cluster: SparkStandaloneCluster,
    state_url: str | None,
    s3_client: Any,
    planting: Path,
    scratch: Path,
) -> tuple[Deployment, Settings]:
    """A fresh chroot on the ensemble, a bucket, a PostgreSQL database (``state_url``);
    the env of every step."""
    assert state_url is not None and state_url.startswith("postgresql"), state_url
    name = uuid.uuid4().hex[:12]
    root = KazooClient(hosts=ensemble.hosts, timeout=10)
    root.start(timeout=30)
    try:
        root.ensure_path(f"/t{name}")
    finally:
        root.stop()
        root.close()
    bucket = f"t-{name}"
    s3_client.create_bucket(Bucket=bucket)
    settings = Settings(
        zk_hosts=f"{ensemble.hosts}/t{name}",
        s3_endpoint=s3_endpoint,
        bucket=bucket,
        prefix="ledgers",
        state_dir=planting,
        state_url=state_url,
        grace_seconds=0,
        retention_seconds=0,
        delete_enabled=True,
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("LEDGERGC_", "PYSPARK_"))},
        **settings.to_env(),
        **cluster.driver_env({"spark.executor.extraJavaOptions": FAST_JVM}),
        "SPARK_SUBMIT_OPTS": FAST_JVM,
    }
    return Deployment(env, scratch), settings


@pytest.fixture
def deployment(
    local_stack: LocalStack,
    zookeeper_ensemble: ZooKeeperEnsemble,
    spark_cluster: SparkStandaloneCluster,
    state_url: str | None,
    s3_client: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[tuple[Deployment, Settings]]:
    """The session's cluster and ensemble, a fresh namespace; prints the figures."""
    deployment, settings = _deployment(
        local_stack.s3_endpoint,
        zookeeper_ensemble,
        spark_cluster,
        state_url,
        s3_client,
        tmp_path / "planting",
        tmp_path / "workers",
    )
    try:
        yield deployment, settings
    finally:
        with capsys.disabled():
            print("\n" + deployment.figures())


def _audit_rows(url: str) -> list[dict[str, Any]]:
    """The audit log as PostgreSQL holds it (read directly, not through the library)."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sqlalchemy.text(
                    "SELECT prefix, status, operation, run_id FROM ledgergc_audit ORDER BY id"
                )
            )
            return [dict(row._mapping) for row in rows]
    finally:
        engine.dispose()


def _deleted_units(url: str, leaks: set[str]) -> set[str]:
    """The leaks whose deletion PostgreSQL's audit log confirms (a partition's records are
    per ledger, under its prefix); fails on a confirmed deletion of anything else."""
    deleted = {r["prefix"] for r in _audit_rows(url) if r["status"] == "deleted"}
    strays = {p for p in deleted if not any(p.startswith(leak) for leak in leaks)}
    assert not strays, f"audited deletions of what was not planted: {strays}"
    return {leak for leak in leaks if any(p.startswith(leak) for p in deleted)}


def _leak_prefixes(planted: dict[str, Any]) -> set[str]:
    return {leak["prefix"] for leak in planted["orphan_ledgers"] + planted["orphan_partitions"]}


def _all_sessions(ensemble: ZooKeeperEnsemble) -> set[str]:
    return set().union(*(member.session_ids() for member in ensemble.members))


def _stop_the_server_a_snapshot_read_lands_on(
    ensemble: ZooKeeperEnsemble, hosts: str, stopped: dict[str, Any]
) -> Callable[[threading.Event], None]:
    """A watcher: once the cycle has read ZooKeeper's clock (its tick under
    ``/ledger-gc/ticks``, the snapshot step's first call), the server that the next new
    client session lands on (the snapshot's reads) is stopped at once."""
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=30)
    ticks = client.exists(TICKS_PATH)
    before = ticks.cversion if ticks else -1
    known = _all_sessions(ensemble) | {f"0x{client.client_id[0]:x}"}

    def watch(done: threading.Event) -> None:
        try:
            while not done.is_set():
                ticks = client.exists(TICKS_PATH)
                if ticks and ticks.cversion != before:
                    break
                time.sleep(0.02)
            # The tick's own session may still be closing: only a later one counts.
            seen = known | _all_sessions(ensemble)
            while not done.is_set():
                for member in ensemble.members:
                    if member.running and member.session_ids() - seen:
                        stopped["at"] = time.time()
                        stopped["member"] = member
                        member.stop()
                        return
                time.sleep(0.02)
        finally:
            client.stop()
            client.close()

    return watch


@pytest.mark.parametrize("state_backend", ["postgresql"], indirect=True)
@pytest.mark.timeout(900)  # about 2 min idle; several times that on a busy shared machine
def test_orphan_cycles_on_a_spark_cluster_a_zookeeper_ensemble_and_postgresql(
    state_backend: str,
    deployment: tuple[Deployment, Settings],
    zookeeper_ensemble: ZooKeeperEnsemble,
    store_kit_for: Callable[[Settings], Any],
) -> None:
    cluster, settings = deployment
    kit = store_kit_for(settings)
    ledgers = kit.managed_ledger(LIVE, entries=30, size=4000, per_ledger=10)
    kit.mark(LIVE, ledgers[:1])
    live = kit.keys()
    planted = plant_leaks(settings, ml_name=LIVE)
    leaks = _leak_prefixes(planted)
    foreign = set(planted["foreign_keys"])

    # 1. Deletion not yet enabled (a new deployment's default): register, report.
    first = cluster.run_cycle("1 register (dry)", {"LEDGERGC_DELETE_ENABLED": "false"})
    assert _last(first).returncode == 0, _explain(first)
    report = _last(first).report()
    assert report["status"] == "ok" and report["dry_run"] is True
    assert {item["prefix"] for item in report["would_delete"]} == leaks
    assert report["deleted"] == []
    assert kit.keys() >= live | foreign

    # 2. Deletion on: a new process, a new empty state dir; the registry is in PostgreSQL.
    second = cluster.run_cycle("2 delete")
    assert _last(second).returncode == 0, _explain(second)
    report = _last(second).report()
    assert report["status"] == "ok" and report["dry_run"] is False
    assert {item["prefix"] for item in report["deleted"]} == leaks
    assert kit.keys() == live | foreign
    assert _deleted_units(str(settings.state_url), leaks) == leaks
    audited = _audit_rows(str(settings.state_url))
    assert {r["run_id"] for r in audited} == {report["run_id"]}
    assert {r["operation"] for r in audited} == {"orphan-removal"}
    for step in first + second:
        assert not (step.state_dir / STATE_FILE).exists(), "state went to the scratch dir"

    # 3. New leaks; the ZooKeeper server a snapshot read lands on goes down at once.
    planted_again = plant_leaks(settings, ml_name=LIVE)
    more_leaks = _leak_prefixes(planted_again)
    stopped: dict[str, Any] = {}
    member: EnsembleMember | None = None
    try:
        fault = cluster.run_cycle(
            "3 ZooKeeper server down",
            during=_stop_the_server_a_snapshot_read_lands_on(
                zookeeper_ensemble, settings.zk_hosts, stopped
            ),
        )
        member = stopped.get("member")
        assert member is not None, "no ZooKeeper session of the cycle's snapshot was seen"
        run = _last(fault)
        keys = kit.keys()
        assert keys >= live | foreign, "a live or foreign object was deleted"
        deleted_now = _deleted_units(str(settings.state_url), leaks | more_leaks) - leaks
        audited = _audit_rows(str(settings.state_url))
        confirmed = {r["prefix"] for r in audited if r["status"] == "deleted"}
        assert not {k for k in keys if any(k.startswith(p) for p in confirmed)}
        if run.returncode == 0:
            # Completed on the other two servers.
            assert deleted_now == more_leaks
            assert keys == live | foreign
        else:
            # Failed closed: an error, reported; only audited orphans are gone.
            assert run.returncode in (1, 2), _explain(fault)
        outcome = "completed" if run.returncode == 0 else f"failed closed (exit {run.returncode})"
        at = stopped["at"] - run.started
        cluster.timings[-1] = (f"3 server.{member.myid} down at +{at:.1f}s, {outcome}", run)

        # 4. The next cycle, the server still down, completes and takes the rest.
        recovery = cluster.run_cycle("4 next cycle, 2 of 3 up")
        assert _last(recovery).returncode == 0, _explain(recovery)
        assert kit.keys() == live | foreign
        everything = leaks | more_leaks
        assert _deleted_units(str(settings.state_url), everything) == everything
    finally:
        if member is not None:
            member.restart()
    assert sorted(str(m.mode()) for m in zookeeper_ensemble.members).count("leader") == 1


@pytest.fixture(scope="module")
def cluster_on_other_disks(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[SparkStandaloneCluster, Path]]:
    """A Spark cluster whose workers do not see the driver's scratch folder (their own
    empty tmpfs over it), as workers on other hosts would not; and that folder."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("workers on a disk of their own need root and unshare")
    scratch = tmp_path_factory.mktemp("driver-disk")
    cluster = SparkStandaloneCluster(
        tmp_path_factory.mktemp("spark-other-disks"), private_dirs=[scratch]
    )
    try:
        cluster.start()
    except LocalStackError as exc:
        pytest.fail(f"Spark cluster did not start (logs in {cluster.log_dir}): {exc}")
    try:
        yield cluster, scratch
    finally:
        cluster.stop()


@pytest.mark.parametrize("state_backend", ["postgresql"], indirect=True)
@pytest.mark.timeout(600)
def test_a_cycle_whose_executors_do_not_share_the_drivers_disk(
    state_backend: str,
    local_stack: LocalStack,
    zookeeper_ensemble: ZooKeeperEnsemble,
    cluster_on_other_disks: tuple[SparkStandaloneCluster, Path],
    state_url: str | None,
    s3_client: Any,
    tmp_path: Path,
    store_kit_for: Callable[[Settings], Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster, driver_disk = cluster_on_other_disks
    deployment, settings = _deployment(
        local_stack.s3_endpoint,
        zookeeper_ensemble,
        cluster,
        state_url,
        s3_client,
        tmp_path / "planting",
        driver_disk / tmp_path.name,
    )
    kit = store_kit_for(settings)
    kit.managed_ledger(LIVE, entries=30, size=4000, per_ledger=10)
    live = kit.keys()
    leaks = _leak_prefixes(plant_leaks(settings, ml_name=LIVE))
    try:
        runs = deployment.run_cycle(
            "executors on other disks", {"LEDGERGC_DELETE_ENABLED": "false"}
        )
    finally:
        with capsys.disabled():
            print("\n" + deployment.figures())
    assert kit.keys() >= live
    assert _last(runs).returncode == 0, _explain(runs)
    report = _last(runs).report()
    assert {item["prefix"] for item in report["would_delete"]} == leaks
