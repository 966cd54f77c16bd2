"""What every ``bench/`` command shares: settings, progress lines, the result table and
its closing JSON line, machine facts, peak memory of a process tree, bulk ZooKeeper
population.

Each command prints human-readable progress, then its figure beside its baseline and
whether the target is met, and ends with exactly one line of JSON (the last line of
stdout), so scripts and ``tests/bench`` can read the result without parsing prose.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ledger_gc.config.edge import zk_endpoint

ROOT = Path(__file__).resolve().parent.parent
# The commands run with the project's venv python; the library lives under plugins/.
if str(ROOT / "plugins") not in sys.path:
    sys.path.insert(0, str(ROOT / "plugins"))

from ledger_gc.config.settings import Settings  # noqa: E402

# Generated data and state; BENCH_DATA_DIR moves it (the smoke test uses a temp dir).
VAR = Path(os.environ.get("BENCH_DATA_DIR") or ROOT / "var" / "bench")
_STARTED = time.monotonic()


def say(message: str) -> None:
    """One progress line, with the seconds since the command started."""
    print(f"[{time.monotonic() - _STARTED:7.1f}s] {message}", flush=True)


def require_stack(*, zookeeper: bool = True, s3: bool = True) -> None:
    """Exit 2 with the fix when the local stack's variables are not set."""
    missing = [
        name
        for name, needed in (("LEDGERGC_ZK_HOSTS", zookeeper), ("LEDGERGC_S3_ENDPOINT", s3))
        if needed and not os.environ.get(name)
    ]
    if missing:
        script = Path(sys.argv[0]).name
        print(
            f"{script}: {', '.join(missing)} not set; run it against the local stack: "
            f"bench/run_all {script.removesuffix('.py')}, or .venv/bin/python "
            f"include/local_stack run -- .venv/bin/python bench/{script}",
            file=sys.stderr,
        )
        raise SystemExit(2)


def run_tag() -> str:
    """A short unique suffix for a run's chroot and bucket (runs never see each other)."""
    return f"{time.strftime('%Y%m%d%H%M%S')}-{os.getpid()}"


def bench_settings(
    *, chroot: str | None = None, bucket: str | None = None, **changes: Any
) -> Settings:
    """Settings from ``LEDGERGC_*``, moved into a chroot and bucket of the benchmark's own."""
    base = Settings.from_env()
    servers = base.zk_hosts.partition("/")[0]
    hosts = f"{servers}{base.zk_chroot}{chroot}" if chroot else base.zk_hosts
    return base.with_overrides(zk_address=hosts, bucket=bucket, **changes)


def create_chroot(settings: Settings) -> None:
    """Create the chroot znode of ``settings`` (kazoo does not create its own chroot)."""
    from kazoo.client import KazooClient

    hosts, _, chroot = settings.zk_hosts.partition("/")
    client = KazooClient(hosts=hosts, timeout=settings.zk_timeout_seconds)
    client.start(timeout=30)
    try:
        client.ensure_path("/" + chroot)
    finally:
        client.stop()
        client.close()


@contextlib.contextmanager
def kazoo_client(settings: Settings) -> Iterator[Any]:
    """A started kazoo client on the settings' hosts (chroot included)."""
    from ledger_gc.metadata.zk_client import session

    with session(zk_endpoint(settings)) as client:
        yield client


def multi_ops(client: Any, ops: Sequence[tuple[str, str, bytes]], *, per_txn: int = 400) -> None:
    """Create or delete many znodes fast: ``(op, path, data)`` in ZooKeeper multi
    transactions (one request per ``per_txn`` operations), several in flight.

    Only for setting up and tearing down benchmark data; the library's own writes are
    compare-and-set, one record at a time.
    """
    in_flight = []
    for start in range(0, len(ops), per_txn):
        txn = client.transaction()
        for op, path, data in ops[start : start + per_txn]:
            if op == "create":
                txn.create(path, data)
            else:
                txn.delete(path)
        in_flight.append(txn.commit_async())
        if len(in_flight) >= 8:
            _check_txn(in_flight.pop(0).get(timeout=60))
    for pending in in_flight:
        _check_txn(pending.get(timeout=60))


def _check_txn(results: list[Any]) -> None:
    for result in results:
        if isinstance(result, Exception):
            raise RuntimeError(f"setting up benchmark znodes failed: {result!r}")


def ensure_parents(client: Any, paths: Sequence[str]) -> None:
    """Create the parent znodes of ``paths`` (each distinct parent once)."""
    parents = sorted({path.rsplit("/", 1)[0] for path in paths})
    for parent in parents:
        client.ensure_path(parent)


def delete_tree(client: Any, root: str) -> int:
    """Delete everything below ``root`` and ``root`` itself, deepest first, in batches."""
    levels: list[list[str]] = [[root]]
    while levels[-1]:
        children = [client.get_children_async(path) for path in levels[-1]]
        below = []
        for path, pending in zip(levels[-1], children, strict=True):
            with contextlib.suppress(Exception):
                below.extend(f"{path.rstrip('/')}/{child}" for child in pending.get(timeout=60))
        levels.append(below)
    if root == "/":
        levels = levels[1:]  # the chroot itself is removed by whoever made it
    total = 0
    for level in reversed(levels):
        if level:
            multi_ops(client, [("delete", path, b"") for path in level])
            total += len(level)
    return total


# --- profiling --------------------------------------------------------------------------


def profile_all_threads(call: Any, path: str) -> Any:
    """Run ``call`` under cProfile in this thread and in every thread it starts (the
    trim's worker pools), and write the merged statistics to ``path``.

    cProfile alone sees only the calling thread, which then spends its time waiting on
    futures; the work is in the pools' threads. Each new thread enables its own profiler
    on its first event (``threading.setprofile``); the pools are shut down before
    ``call`` returns, so every thread's profile is complete when they are merged.
    """
    import cProfile
    import pstats

    profiles: list[cProfile.Profile] = []
    lock = threading.Lock()

    def start_in_thread(*_: Any) -> None:
        profile = cProfile.Profile()
        with lock:
            profiles.append(profile)
        profile.enable()  # replaces this hook for the rest of the thread

    main = cProfile.Profile()
    threading.setprofile(start_in_thread)
    try:
        result = main.runcall(call)
    finally:
        threading.setprofile(None)  # type: ignore[arg-type]
    stats = pstats.Stats(main)
    with lock:
        for profile in profiles:
            profile.disable()
            stats.add(profile)
    stats.dump_stats(path)
    return result


# --- memory -----------------------------------------------------------------------------


class TreeMemorySampler:
    """Samples the resident memory of a process and all its descendants (psutil).

    ``peak_total`` is the largest sum over the tree seen at one instant; ``peak_by_kind``
    the largest RSS of each kind of process ("jvm", "python", "other") at one instant,
    and of the sampled process itself ("root": a command's driver, also counted in its
    kind) and of its largest other Python process ("python_worker": one executor's).
    """

    def __init__(self, pid: int, interval: float = 0.1) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_total = 0
        self.peak_by_kind: dict[str, int] = {}
        # -Xmx/-Xms of every JVM seen (spark-submit's launcher runs one with -Xmx128m).
        self.jvm_args: list[str] = []
        self._seen_jvms: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> TreeMemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._stop.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            total = 0
            kinds: dict[str, int] = {}
            for proc in procs:
                try:
                    rss = proc.memory_info().rss
                    name = proc.name()
                    if name == "java" and proc.pid not in self._seen_jvms:
                        self._seen_jvms.add(proc.pid)
                        self.jvm_args += [a for a in proc.cmdline() if a.startswith("-Xm")]
                except psutil.Error:
                    continue
                kind = "jvm" if name == "java" else "python" if "python" in name else "other"
                kinds[kind] = kinds.get(kind, 0) + rss
                if proc.pid == self.pid:
                    kinds["root"] = rss
                elif kind == "python":
                    kinds["python_worker"] = max(kinds.get("python_worker", 0), rss)
                total += rss
            self.peak_total = max(self.peak_total, total)
            for kind, rss in kinds.items():
                self.peak_by_kind[kind] = max(self.peak_by_kind.get(kind, 0), rss)
            self._stop.wait(self.interval)


def tree_cpu_seconds() -> float:
    """CPU seconds (user + system) this process and all its descendants used so far, the
    ended ones included: the Spark driver's JVM and Python workers are descendants.

    Unlike wall time, this barely moves when other work shares the cores: a benchmark
    on a busy machine shows it beside the wall time to say which change saved work."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def mib(value: float) -> float:
    return round(value / 2**20, 1)


# --- machine and result ------------------------------------------------------------------


def machine() -> dict[str, Any]:
    """The facts docs/BENCHMARKS.md records with every figure."""
    cpu_model = "unknown"
    with contextlib.suppress(OSError):
        match = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        if match:
            cpu_model = match.group(1).strip()
    mem_gib = 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        line = Path("/proc/meminfo").read_text().splitlines()[0]
        mem_gib = round(int(line.split()[1]) / 2**20, 1)
    java = "none"
    if shutil.which("java"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                ["java", "-version"], capture_output=True, text=True, timeout=30
            ).stderr
            java = out.splitlines()[0] if out else "unknown"
    return {
        "cpus": os.cpu_count(),
        "memory_gib": mem_gib,
        "cpu_model": cpu_model,
        "python": platform.python_version(),
        "java": java,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def report(
    benchmark: str,
    rows: Sequence[tuple[str, str, str, str]],
    targets: Sequence[tuple[str, bool]],
    result: dict[str, Any],
) -> None:
    """Print the figure table and the targets, then the JSON line (always last)."""
    print()
    width = max(len(r[0]) for r in rows) if rows else 10
    print(f"{'figure'.ljust(width)}  {'measured':>16}  {'baseline':>16}  {'ratio':>8}")
    for name, value, baseline, ratio in rows:
        print(f"{name.ljust(width)}  {value:>16}  {baseline:>16}  {ratio:>8}")
    print()
    for text, met in targets:
        print(f"target {text}: {'MET' if met else 'MISSED'}")
    body = {
        "benchmark": benchmark,
        **result,
        "target_met": all(met for _, met in targets),
        "machine": machine(),
    }
    print(json.dumps(body, sort_keys=False, default=str), flush=True)


def fmt_rate(value: float) -> str:
    return f"{value:,.0f}/s"


def fmt_s(value: float) -> str:
    return f"{value:,.2f} s"


def ratio(a: float, b: float) -> float:
    return round(a / b, 2) if b else float("inf")
