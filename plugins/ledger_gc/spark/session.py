"""What every Spark job of ledger-gc shares (the part Iceberg keeps in ``BaseSparkAction``):
the session and its settings, the job groups that name a step in the Spark UI, how many
tasks a job gets, how a failed job becomes a library error, and checkpoints.

The jobs (``snapshot``, ``scan``, ``diff``, ...) take a ``SparkSession`` (local in tests
and the CLI, any cluster under ``spark-submit``) and plain inputs or DataFrames and
return results; they never read or write the state store. Between the steps of one
survey, their DataFrames stay in this application (``hold``), never in a file.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ledger_gc.errors import LedgerGcError, MetadataUnavailableError, StorageError
from ledger_gc.spark import py4j_converters
from ledger_gc.spark.library_zip import library_zip

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ledger_gc.config.endpoints import ZkEndpoint


class SparkJobError(LedgerGcError):
    """A Spark job of ledger-gc failed; its output was not kept."""


# --- the session -------------------------------------------------------------------------

#: Where a cycle run outside ``spark-submit`` (the CLI, the demo) computes by default.
DEFAULT_MASTER = "local[*]"
#: The fewest shuffle partitions a cycle's session gets (unless its submitter chose).
MIN_SHUFFLE_PARTITIONS = 8


def submitted_master(submit_args: str) -> str | None:
    """The master among spark-submit arguments (``PYSPARK_SUBMIT_ARGS``), if any: its
    ``--master``, else a ``--conf spark.master=...`` (spark-submit's own precedence)."""
    words = shlex.split(submit_args)
    master = conf_master = None
    for i, word in enumerate(words):
        if word == "--master" and i + 1 < len(words):
            master = words[i + 1]
        elif word.startswith("--master="):
            master = word.split("=", 1)[1]
        elif word == "--conf" and i + 1 < len(words):
            conf_master = _conf_master(words[i + 1]) or conf_master
        elif word.startswith("--conf="):
            conf_master = _conf_master(word.split("=", 1)[1]) or conf_master
    return master or conf_master


def _conf_master(pair: str) -> str | None:
    key, _, value = pair.partition("=")
    return value if key.strip() == "spark.master" and value else None


def session_master(master: str | None = None) -> str:
    """The master a session of ``local_session`` runs on: ``master`` if given, else the
    one ``PYSPARK_SUBMIT_ARGS`` names, else ``DEFAULT_MASTER``. What the ``ledgergc``
    command decides its executors' credentials by (``config.spark_credentials``)."""
    return master or submitted_master(os.environ.get("PYSPARK_SUBMIT_ARGS", "")) or DEFAULT_MASTER


def local_session(app_name: str = "ledger-gc-orphans", master: str | None = None) -> SparkSession:
    """The SparkSession of a cycle run outside ``spark-submit`` (the CLI, tests): no UI,
    and what ``configure_session`` gives every cycle's session.

    On ``master`` if given, else on the master ``PYSPARK_SUBMIT_ARGS`` names (PySpark's
    own way to point a Python program at a cluster: ``--master spark://host:7077 ...
    pyspark-shell``, or ``--conf spark.master=...``), else ``local[*]``
    (``session_master``). The builder sets the master, so nothing else (a
    ``spark-defaults.conf``) moves the session off the master decided here. Executors
    run ``PYSPARK_PYTHON`` (default ``python3``); unless it is set, use this interpreter,
    the one that has kazoo and boto3.
    They get the library as spark-submit's ``py_files`` would give it
    (``spark.submit.pyFiles``): the same zip, the one way it reaches executors.
    """
    from pyspark.sql import SparkSession

    py4j_converters.lean()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(session_master(master))
        .appName(app_name)
        .config("spark.submit.pyFiles", str(library_zip()))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    configure_session(spark)
    return spark


class LazySession:
    """A session made when first needed (``local_session``), or started early in a
    thread of its own (``start``) by a step that knows it will need it: the seconds a
    JVM takes to start then pass while that step reads ZooKeeper. A cycle that never
    needs Spark (a Pulsar cluster's, its ledgers' records cached) starts none at all.
    Every attribute waits for the session; an error starting it is raised there, to
    the step that needed it. (Started off the main thread, Spark leaves the process's
    SIGINT handler alone: the cycle's own, ``termination``, stays in force.)"""

    def __init__(self, make: Callable[[], SparkSession]) -> None:
        self._make = make
        self._made: list[SparkSession] = []
        self._failed: list[BaseException] = []
        self._done = threading.Event()
        self._started = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Begin making the session in the background (once)."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._run, name="spark-start", daemon=True).start()

    def _run(self) -> None:
        try:
            self._made.append(self._make())
        except BaseException as exc:  # handed to whoever needs the session
            self._failed.append(exc)
        finally:
            self._done.set()

    def session(self) -> SparkSession:
        self.start()
        self._done.wait()
        if self._failed:
            raise self._failed[0]
        return self._made[0]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session(), name)


def start_early(spark: SparkSession | None) -> None:
    """Start a ``LazySession`` now, in the background (any other session: nothing)."""
    if isinstance(spark, LazySession):
        spark.start()


def configure_session(spark: SparkSession) -> None:
    """What every session of a cycle needs, however it was made (``local_session``, or
    ``spark-submit`` of the apps with the task's conf).

    * Times in UTC: an inventory's zone-less LastModified (a string, a TIMESTAMP_NTZ
      column) is UTC as S3 writes it; read in the JVM's default zone (a worker's local
      time) it would move every object's age by hours, and retention with it.
    * ``spark.sql.shuffle.partitions``, unless the submitter set it: twice the cores the
      application has, at least ``MIN_SHUFFLE_PARTITIONS``. Spark's default of 200 costs
      a small store seconds per shuffle (a survey has a dozen; AQE merges partitions
      after a shuffle, not before it), and a cluster's cores are what scales it.
    """
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    context = spark.sparkContext
    if not context.getConf().contains("spark.sql.shuffle.partitions"):
        partitions = max(MIN_SHUFFLE_PARTITIONS, 2 * context.defaultParallelism)
        spark.conf.set("spark.sql.shuffle.partitions", str(partitions))


# --- naming and sizing jobs ----------------------------------------------------------------


@contextmanager
def job_group(spark: SparkSession, run_id: str, step: str, description: str) -> Iterator[None]:
    """Name the Spark jobs of one step (``ledgergc-<step>``: the Spark UI's job group,
    with a description that says what runs for which cycle)."""
    context = spark.sparkContext
    context.setJobGroup(f"ledgergc-{step}", f"ledger-gc {step}: {description} (run {run_id})")
    try:
        yield
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
        context.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]


def task_slices(count: int, per_slice: int, spark: SparkSession, cap: int = 1024) -> int:
    """How many tasks share ``count`` items, about ``per_slice`` each: at least one per
    core the application has (up to one item each), at most ``cap``."""
    wanted = -(-count // per_slice) if count else 1
    return max(1, min(cap, max(wanted, min(count, spark.sparkContext.defaultParallelism))))


def at_once(tasks: int, spark: SparkSession) -> int:
    """How many of a job's ``tasks`` can run at the same time: no more than the cores
    the application has (``defaultParallelism``); the rest wait for a slot."""
    return max(1, min(tasks, spark.sparkContext.defaultParallelism))


def zk_share(zk: ZkEndpoint, tasks: int, spark: SparkSession) -> ZkEndpoint:
    """``zk`` for one of a job's ``tasks`` (pickled with it): the read budget
    (``LEDGERGC_ZK_MAX_READS_PER_SECOND``) split over the tasks that can run at once
    (``at_once``), so that together they read at the budget, never above it. The one
    rule of every Spark job that reads ZooKeeper: split over all the tasks, a job with
    ten times more tasks than slots would read at a tenth of the budget."""
    return zk.share(at_once(tasks, spark))


class ReadsParam:
    """An accumulator of znodes read per wall-clock second (``read_budget.Reads``):
    each task adds what its process read meanwhile, the driver adds them up by second."""

    def zero(self, value: dict[int, int]) -> dict[int, int]:
        return {}

    def addInPlace(self, into: dict[int, int], more: dict[int, int]) -> dict[int, int]:
        for second, count in more.items():
            into[second] = into.get(second, 0) + count
        return into


_ERROR_LINE = re.compile(r"ledger_gc\.errors\.(\w+): (.+)")


def job_error(what: str, exc: Exception) -> LedgerGcError:
    """Turn a failed Spark job into the library error an executor raised, if any: the
    caller's refusal (ZooKeeper or S3 unavailable) then reads the same as in one process."""
    text = str(exc)
    found = _ERROR_LINE.findall(text)
    if found:
        name, message = found[-1]
        cls: type[LedgerGcError] = SparkJobError
        if name == "MetadataUnavailableError":
            cls = MetadataUnavailableError
        elif name == "StorageError":
            cls = StorageError
        return cls(f"{what} failed on an executor: {message.strip()}; its output was discarded")
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return SparkJobError(f"{what} failed: {first[:500]}; its output was discarded")


# --- checkpoints ---------------------------------------------------------------------------


def checkpoint(frame: DataFrame) -> DataFrame:
    """Compute ``frame`` now and keep its rows in the executors' block managers (memory,
    spilling to their local disk) for the rest of this application.

    A local checkpoint cuts the lineage: rows lost with an executor are not silently
    recomputed (a second listing or metadata read at another time, mixed with the
    first); the job that needs them fails instead, and nothing is decided. Never a file
    on one host's disk, which the executors of a cluster on several hosts could not all
    reach."""
    return frame.localCheckpoint(eager=True)


# What the steps of a survey hand each other, by (run id, step): checkpoints only.
_held: dict[tuple[str, str], DataFrame] = {}
_held_lock = threading.Lock()


def hold(run_id: str, step: str, frame: DataFrame) -> DataFrame:
    """Keep ``frame`` (a ``checkpoint``) as ``run_id``'s ``step`` for the later steps of
    this application; what was held there before is freed."""
    with _held_lock:
        previous = _held.pop((run_id, step), None)
        _held[(run_id, step)] = frame
    if previous is not None and previous is not frame:
        previous.unpersist()
    return frame


def held(run_id: str, step: str) -> DataFrame:
    """What ``hold`` kept for ``run_id``'s ``step`` in this application. Never a file: a
    dataset left on disk by another run or version could be stale, and a stale snapshot
    makes live data look orphaned."""
    with _held_lock:
        kept = _held.get((run_id, step))
    if kept is None:
        raise SparkJobError(
            f"the {step} of run {run_id} is not in this Spark application: a survey's "
            "snapshot, scan and diff run in one application (cycle.step_survey); nothing "
            "was decided"
        )
    return kept


def release(run_id: str) -> None:
    """Forget what ``hold`` kept for ``run_id`` (the survey's end); Spark frees the blocks
    of a local checkpoint once nothing refers to them (its context cleaner)."""
    with _held_lock:
        mine = [key for key in _held if key[0] == run_id]
        frames = [_held.pop(key) for key in mine]
    for frame in frames:
        frame.unpersist()
