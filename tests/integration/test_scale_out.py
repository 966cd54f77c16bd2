"""The orphan cycle as a deployment runs it: the ``orphan_removal`` DAG's tasks on a Spark
standalone cluster, a ZooKeeper ensemble and a PostgreSQL state store, each task a
process that shares nothing else with the others.

The stack mirrors a deployment (README "Scaling out"): the Spark master and two workers
are separate JVMs started from PySpark's own jars (``SparkStandaloneCluster``), the
executors JVMs of their own on those workers, reached through the ``spark_default``
connection as a deployment's would be; ZooKeeper is three servers
(``ZooKeeperEnsemble``) and ``LEDGERGC_ZK_HOSTS`` lists all three; the state URL is the
session's PostgreSQL. A cycle is one DAG run (``airflow dags trigger``), and each of its
tasks is its own ``airflow tasks test`` process with its own empty ``LEDGERGC_STATE_DIR``
and temporary directory, as on a Celery or Kubernetes worker of its own: all they share
is the state URL (and Airflow's own metadata DB, which holds the run). ``report`` runs
after a failed task too (its trigger rule is ``all_done``).

The workers have a disk of their own, as on several hosts (where the machine allows it:
``spark_cluster``): the tasks' scratch folders are on the driver's disk, which the workers
and executors do not see, so no step may need a file another host wrote (the survey's
snapshot and scan stay on the executors: ``spark.session.hold``).

The first cycle deletes on the cluster's executors (``delete_on_spark``: the branch
taken with ``LEDGERGC_ORPHAN_DELETE_SPARK_OVER=0``); its ``initialize_correct`` is
retried, as Airflow retries a task (the registry applies the run's scan once), and its
delete runs first with deletion not yet enabled (a new deployment's default: it reports
exactly the leaks and deletes nothing), then enabled. Then the
fault: one ZooKeeper server, the one the snapshot's reads land on (the first new session
after the survey read ZooKeeper's clock), is stopped at once. The cycle either completes
on the other two or fails closed; both are checked to be safe, and the next cycle (still
one server down) completes. The time of every task is printed (the README's figures).
"""

from __future__ import annotations

import json
import os
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
from ledger_gc.config.settings import Settings
from ledger_gc.orphans.records import DeleteRecord
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.orphans.run_steps import DELETE, RunSteps
from ledger_gc.orphans.witness import TICKS_PATH
from ledger_gc.rules.orphans.outcomes import WOULD_DELETE
from ledger_gc.run_log import read_runs
from local_stack.server_process import FAST_JVM
from local_stack.spark_cluster import SparkStandaloneCluster
from local_stack.stack import LocalStack
from local_stack.zookeeper import EnsembleMember, ZooKeeperEnsemble

pytestmark = pytest.mark.spark

AIRFLOW = [sys.executable, "-m", "airflow"]
DAG_ID = "orphan_removal"
REPO_ROOT = Path(__file__).resolve().parents[2]
LIVE = "public/default/persistent/orders"
STEP_TIMEOUT = 300
# ``delete`` is the branch; with a few orphans (LEDGERGC_ORPHAN_DELETE_SPARK_OVER, 500) it
# picks ``delete_in_task`` (``delete_on_spark`` is skipped), with the setting 0 the other.
IN_TASK = ("survey", "initialize_correct", "delete", "delete_in_task", "report")
ON_SPARK = ("survey", "initialize_correct", "delete", "delete_on_spark", "report")
SPARK_DELETE = {"LEDGERGC_ORPHAN_DELETE_SPARK_OVER": "0"}
SUCCESS = "success"


def _die_with_parent() -> None:
    """In a step's process before exec: SIGKILL when the test's process is gone, even
    by SIGKILL (Linux's parent-death signal), like the servers' watchdogs."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


@dataclass(frozen=True)
class Step:
    """One process of a cycle: one task of the DAG run, as on a worker of its own."""

    name: str
    argv: list[str]
    always: bool = False  # runs after a failed step too (the report: ``all_done``)
    env: Mapping[str, str] = field(default_factory=dict)  # this process's own settings


def cycle_steps(
    run_id: str, tasks: tuple[str, ...], twice: Mapping[str, Mapping[str, str]]
) -> list[Step]:
    """The processes of one orphan cycle: the DAG's ``tasks``, in order, of run ``run_id``;
    each task of ``twice`` first with its settings there, then again as the others, as
    Airflow retries a task (or an operator clears one and runs it again)."""
    steps = []
    for task in tasks:
        argv = [*AIRFLOW, "tasks", "test", DAG_ID, task, run_id]
        if task in twice:
            steps.append(Step(task, argv, env=twice[task]))
        steps.append(Step(task, argv, always=task == "report"))
    return steps


@dataclass
class StepRun:
    """What one step's process did, and how long it took. ``state``: the task
    instance's state that Airflow recorded (``airflow tasks test`` exits 0 either way)."""

    name: str
    returncode: int
    state: str | None
    started: float  # epoch seconds
    seconds: float
    output: str
    state_dir: Path


@dataclass
class CycleRun:
    """One DAG run: its tasks' processes and the report it appended to the run log."""

    run_id: str
    planned: int  # processes a cycle that goes well runs
    steps: list[StepRun]
    report: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        """Every task ran and succeeded (the report's task fails a failed cycle)."""
        return len(self.steps) == self.planned and all(s.state == SUCCESS for s in self.steps)

    @property
    def crashed(self) -> list[StepRun]:
        """Processes that did not end as a task ends, failed or not (killed, timed out)."""
        return [s for s in self.steps if s.returncode != 0]

    @property
    def started(self) -> float:
        return self.steps[0].started

    @property
    def seconds(self) -> float:
        return sum(step.seconds for step in self.steps)

    def explain(self) -> str:
        """What the run did: the report (what it deleted, would delete, held, skipped,
        refused, and why), and the log of the failed task, else of the delete task."""
        report = self.report or {}
        failed = [s for s in self.steps if s.state != SUCCESS] or [
            s for s in self.steps if s.name.startswith("delete_")
        ]
        tail = failed[0].output[-4000:] if failed else ""
        return f"report {json.dumps(report, default=str)[:6000]}\n{tail}"


@dataclass
class Deployment:
    """The environment every process of every cycle gets; only the scratch differs."""

    env: dict[str, str]
    settings: Settings
    scratch: Path
    task_states: Callable[[str, str], dict[str, str | None]]
    cycles: list[tuple[str, CycleRun]] = field(default_factory=list)

    def airflow(self, *args: str) -> None:
        """An Airflow command of the deployment (not a task): must succeed."""
        result = subprocess.run(
            [*AIRFLOW, *args],
            env=self.env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT,
            check=False,
        )
        assert result.returncode == 0, f"airflow {' '.join(args)}:\n{result.stderr[-3000:]}"

    def start(self, step: Step, overrides: Mapping[str, str]) -> tuple[subprocess.Popen[str], Path]:
        own = self.scratch / f"{len(self.cycles) + 1:02d}-{step.name}-{uuid.uuid4().hex[:6]}"
        (own / "state").mkdir(parents=True)
        (own / "tmp").mkdir()
        env = {
            **self.env,
            **overrides,
            "LEDGERGC_STATE_DIR": str(own / "state"),
            "TMPDIR": str(own / "tmp"),
        }
        proc = subprocess.Popen(
            step.argv,
            env=env,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=_die_with_parent,
        )
        return proc, own / "state"

    def run_cycle(
        self,
        label: str,
        overrides: Mapping[str, str] | None = None,
        *,
        during: Callable[[threading.Event], Any] | None = None,
        twice: Mapping[str, Mapping[str, str]] | None = None,
        after: Callable[[str, StepRun], None] | None = None,
    ) -> CycleRun:
        """Trigger a DAG run, then run its tasks one after the other: after a failed one
        only the report (as the DAG's trigger rules would). ``during(done)`` runs in a
        thread beside the first task, ``done`` set when that task's process has exited;
        ``twice``: tasks run a first time with settings of their own (``cycle_steps``);
        ``after(run_id, step)`` runs after each task's process."""
        run_id = f"scale-out-{len(self.cycles) + 1}-{uuid.uuid4().hex[:6]}"
        self.airflow("dags", "trigger", DAG_ID, "-r", run_id)
        on_spark = (overrides or {}).get("LEDGERGC_ORPHAN_DELETE_SPARK_OVER") == "0"
        steps = cycle_steps(run_id, ON_SPARK if on_spark else IN_TASK, twice or {})
        runs: list[StepRun] = []
        for index, step in enumerate(steps):
            if runs and runs[-1].state != SUCCESS and not step.always:
                continue
            started = time.time()
            proc, state_dir = self.start(step, {**(overrides or {}), **step.env})
            watcher, done = None, threading.Event()
            if during is not None and index == 0:
                watcher = threading.Thread(target=during, args=(done,), daemon=True)
                watcher.start()
            try:
                output, _ = proc.communicate(timeout=STEP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                output, _ = proc.communicate()
            finally:
                # A step must not outlive the test (pytest-timeout, Ctrl-C): a driver
                # whose cluster went away waits for executors for ever.
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                done.set()
            if watcher is not None:
                watcher.join(timeout=30)
            took = time.time() - started
            state = self.task_states(DAG_ID, run_id).get(step.name)
            runs.append(
                StepRun(step.name, proc.returncode, state, started, took, output, state_dir)
            )
            if after is not None:
                after(run_id, runs[-1])
        reports = [r for r in read_runs(self.settings, "orphans") if r.get("run_id") == run_id]
        cycle = CycleRun(run_id, len(steps), runs, reports[-1] if reports else None)
        self.cycles.append((label, cycle))
        return cycle

    def figures(self) -> str:
        lines = ["scale-out run: time per task, each its own process (s)"]
        for label, cycle in self.cycles:
            tasks = ", ".join(f"{s.name} {s.seconds:.1f} {s.state}" for s in cycle.steps)
            outcome = "ok" if cycle.ok else "failed"
            lines.append(f"  {label:<36} {outcome:<6} {cycle.seconds:6.1f}  ({tasks})")
            if not cycle.ok:
                lines.append(f"    {cycle.explain()[:300]}")
        return "\n".join(lines)


def _deployment(
    s3_endpoint: str,
    ensemble: ZooKeeperEnsemble,
    cluster: SparkStandaloneCluster,
    state_url: str | None,
    s3_client: Any,
    planting: Path,
    scratch: Path,
    task_states: Callable[[str, str], dict[str, str | None]],
) -> tuple[Deployment, Settings]:
    """A fresh chroot on the ensemble, a bucket, a PostgreSQL database (``state_url``);
    the env of every task: the settings, the ``spark_default`` connection to ``cluster``,
    the session's Airflow (its DAGs serialized, as a scheduler would have them)."""
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
        zk_address=f"{ensemble.hosts}/t{name}",
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
        **cluster.airflow_env(
            planting.parent / "spark-conf", {"spark.executor.extraJavaOptions": FAST_JVM}
        ),
        "SPARK_SUBMIT_OPTS": FAST_JVM,
        "PYTHONPATH": os.pathsep.join(str(REPO_ROOT / p) for p in ("plugins", "include")),
    }
    deployment = Deployment(env, settings, scratch, task_states)
    deployment.airflow("dags", "reserialize")
    return deployment, settings


@pytest.fixture
def deployment(
    airflow_task_states: Callable[[str, str], dict[str, str | None]],
    local_stack: LocalStack,
    zookeeper_ensemble: ZooKeeperEnsemble,
    spark_cluster: SparkStandaloneCluster,
    state_url: str | None,
    s3_client: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[tuple[Deployment, Settings]]:
    """The session's cluster and ensemble, a fresh namespace; prints the figures."""
    # The workers' scratch: on the driver's disk, which the workers do not see (if the
    # machine allows: ``spark_cluster``).
    disk = spark_cluster.private_dirs[0] if spark_cluster.private_dirs else tmp_path
    deployment, settings = _deployment(
        local_stack.s3_endpoint,
        zookeeper_ensemble,
        spark_cluster,
        state_url,
        s3_client,
        tmp_path / "planting",
        disk / tmp_path.name / "workers",
        airflow_task_states,
    )
    blind = (
        "the workers do not see the driver's disk (a tmpfs of their own over it)"
        if spark_cluster.private_dirs
        else "the workers SEE the driver's disk: not root or no unshare, so that a step "
        "needs no file another host wrote is NOT shown by this run"
    )
    try:
        yield deployment, settings
    finally:
        with capsys.disabled():
            print(f"\n{deployment.figures()}\n  ({blind})")


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


#: How long after the cycle's clock read the watcher looks for the snapshot's first new
#: session before it stops a server anyway (a session that opens and closes between two
#: looks is not seen: a shard's reads take a few hundred milliseconds).
LOOK_FOR_SESSION_S = 1.0


def _stop_the_server_a_snapshot_read_lands_on(
    ensemble: ZooKeeperEnsemble, hosts: str, stopped: dict[str, Any]
) -> Callable[[threading.Event], None]:
    """A watcher: once the cycle has read ZooKeeper's clock (its tick under
    ``/ledger-gc/ticks``, the snapshot step's first call), the server that the next new
    client session lands on (the snapshot's reads) is stopped at once; if none is seen
    within ``LOOK_FOR_SESSION_S``, the server with the most sessions then (the snapshot
    under way) is. Either way a server goes down in the middle of the survey."""
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=30)
    ticks = client.exists(TICKS_PATH)
    before = ticks.cversion if ticks else -1
    mine = f"0x{client.client_id[0]:x}"
    known = _all_sessions(ensemble) | {mine}

    def stop(member: EnsembleMember, how: str) -> None:
        stopped.update(at=time.time(), member=member, how=how)
        member.stop()

    def watch(done: threading.Event) -> None:
        try:
            while not done.is_set():
                ticks = client.exists(TICKS_PATH)
                if ticks and ticks.cversion != before:
                    break
                time.sleep(0.02)
            # The tick's own session may still be closing: only a later one counts.
            seen = known | _all_sessions(ensemble)
            deadline = time.monotonic() + LOOK_FOR_SESSION_S
            while not done.is_set():
                running = [member for member in ensemble.members if member.running]
                for member in running:
                    if member.session_ids() - seen:
                        stop(member, "the snapshot's new session")
                        return
                if time.monotonic() > deadline:
                    busiest = max(running, key=lambda m: len(m.session_ids() - {mine}))
                    stop(busiest, f"no new session seen in {LOOK_FOR_SESSION_S:g} s")
                    return
                time.sleep(0.01)
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

    # 1. On the cluster's executors; a new process and an empty state dir for each task,
    # the registry in PostgreSQL. initialize_correct retried changes nothing; the delete
    # runs first with deletion not yet enabled (a new deployment's default: it reports
    # what it would delete and deletes nothing), then enabled.
    registry_after: list[dict[str, Any]] = []
    dry: list[tuple[DeleteRecord | None, set[str]]] = []

    def after(run_id: str, step: StepRun) -> None:
        if step.name == "initialize_correct":
            registry_after.append(OrphanRegistry(settings).entries())
        if step.name == "delete_on_spark" and not dry:
            dry.append((RunSteps(settings, run_id).read_record(DELETE, DeleteRecord), kit.keys()))

    first = cluster.run_cycle(
        "1 on Spark: a retry, dry then deleting",
        SPARK_DELETE,
        twice={"initialize_correct": {}, "delete_on_spark": {"LEDGERGC_DELETE_ENABLED": "false"}},
        after=after,
    )
    assert first.ok and first.report is not None, first.explain()
    report = first.report
    assert [s.name for s in first.steps] == [
        "survey",
        "initialize_correct",
        "initialize_correct",
        "delete",
        "delete_on_spark",
        "delete_on_spark",
        "report",
    ]
    assert cluster.task_states(DAG_ID, first.run_id)["delete_in_task"] == "skipped"
    assert len(registry_after) == 2 and registry_after[0] == registry_after[1]
    assert {entry.prefix for entry in registry_after[0].values()} == leaks
    assert report["registry"]["scan_number"] == 1  # the retry applied nothing again
    [(dry_record, keys_after_dry)] = dry
    assert dry_record is not None and dry_record.deleting is False
    would = {r.prefix for r in dry_record.results if r.action == WOULD_DELETE}
    assert would == leaks and {r.action for r in dry_record.results} == {WOULD_DELETE}
    assert keys_after_dry >= live | foreign and any(
        key.startswith(leak) for key in keys_after_dry for leak in leaks
    ), "the dry run deleted"
    assert report["status"] == "ok" and report["dry_run"] is False
    assert {item["prefix"] for item in report["deleted"]} == leaks
    assert kit.keys() == live | foreign
    assert _deleted_units(str(settings.state_url), leaks) == leaks
    audited = _audit_rows(str(settings.state_url))
    assert {r["run_id"] for r in audited} == {report["run_id"]}
    assert {r["operation"] for r in audited} == {"orphan-removal"}
    for step in first.steps:
        assert not any(step.state_dir.iterdir()), f"{step.name} left files in its scratch"
    assert OrphanRegistry(settings).entries() == {}

    # 2. New leaks; the ZooKeeper server a snapshot read lands on goes down at once.
    planted_again = plant_leaks(settings, ml_name=LIVE)
    more_leaks = _leak_prefixes(planted_again)
    stopped: dict[str, Any] = {}
    member: EnsembleMember | None = None
    try:
        fault = cluster.run_cycle(
            "2 ZooKeeper server down",
            during=_stop_the_server_a_snapshot_read_lands_on(
                zookeeper_ensemble, settings.zk_hosts, stopped
            ),
        )
        member = stopped.get("member")
        assert member is not None, "no ZooKeeper session of the cycle's snapshot was seen"
        run = fault
        keys = kit.keys()
        assert keys >= live | foreign, "a live or foreign object was deleted"
        deleted_now = _deleted_units(str(settings.state_url), leaks | more_leaks) - leaks
        audited = _audit_rows(str(settings.state_url))
        confirmed = {r["prefix"] for r in audited if r["status"] == "deleted"}
        assert not {k for k in keys if any(k.startswith(p) for p in confirmed)}
        assert not run.crashed, fault.explain()
        if run.ok:
            # Completed on the other two servers.
            assert deleted_now == more_leaks, fault.explain()
            assert keys == live | foreign
        else:
            # Failed closed: a failed task, a failed run in the run log; only audited
            # orphans are gone.
            assert run.report is not None and run.report["status"] == "failed", run.explain()
        failed = ", ".join(f"{s.name} {s.state}" for s in run.steps if s.state != SUCCESS)
        outcome = "completed" if run.ok else f"failed closed ({failed})"
        at = stopped["at"] - run.started
        label = f"2 server.{member.myid} down at +{at:.1f}s ({stopped['how']}), {outcome}"
        cluster.cycles[-1] = (label, run)

        # 3. The next cycle, the server still down, completes and takes the rest.
        recovery = cluster.run_cycle("3 next cycle, 2 of 3 up")
        assert recovery.ok, recovery.explain()
        assert kit.keys() == live | foreign
        everything = leaks | more_leaks
        assert _deleted_units(str(settings.state_url), everything) == everything
    finally:
        if member is not None:
            member.restart()
    assert sorted(str(m.mode()) for m in zookeeper_ensemble.members).count("leader") == 1
