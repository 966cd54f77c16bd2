#!/usr/bin/env python3
"""Where the BookKeeper survey's driver memory goes (issue 36): one ZooKeeper of its own
with ``bench/bk_scan.py``'s tree of ``--size`` ledgers, then the survey run in this
process (the driver alone, no Spark: every structure the driver builds is here), with
``tracemalloc`` and the resident set read at the end of each of its steps
(``SurveyCost.step``): the Python heap per step, its peak, and the lines that hold the
most at the end of the ledgers' step (``--spark``: with a local session, the executors
reading and classifying, as a cycle's driver). Then, with ``--command``, the whole
``ledgergc orphans --dry-run --json`` (Spark's path) with the process tree sampled: the
command's own process (the driver), its JVM and its Python workers apart; and the
driver's peak split at the BookKeeper source's end (its log line): what the survey
holds, and what the steps after it (the candidates' phases, the report) add.

    .venv/bin/python bench/bk_memory.py [--size 1000000] [--command] [--spark] [--top 12]

A measurement, not a figure with a target: it prints, and ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import _common
import bk_scan
import psutil
from _common import mib, say

sys.path.insert(0, str(_common.ROOT / "include"))


def _rss() -> int:
    return int(psutil.Process().memory_info().rss)


#: The BookKeeper source's log line once its survey has returned (``source.py``).
_SURVEY_DONE = "ledger_gc.bookkeeper.source"


def driver_by_phase(hosts: str, state_dir: Path) -> dict[str, float]:
    """The whole command once more, its driver's resident memory sampled: the peak
    until the BookKeeper source logged its survey's end, and after it."""
    env = bk_scan.command_env(hosts, state_dir)
    process = subprocess.Popen(
        bk_scan.COMMAND, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    surveyed = threading.Event()

    def watch_log() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            if _SURVEY_DONE.encode() in line:
                surveyed.set()

    assert process.stdout is not None
    drain = threading.Thread(target=process.stdout.read, daemon=True)  # (a full pipe waits)
    log_reader = threading.Thread(target=watch_log, daemon=True)
    drain.start()
    log_reader.start()
    driver = psutil.Process(process.pid)
    peaks = {"survey": 0, "after": 0}
    while process.poll() is None:
        try:
            rss = int(driver.memory_info().rss)
        except psutil.Error:
            break
        phase = "after" if surveyed.is_set() else "survey"
        peaks[phase] = max(peaks[phase], rss)
        time.sleep(0.05)
    process.wait()
    drain.join()
    log_reader.join()
    if not surveyed.is_set():
        raise SystemExit(
            f"ledgergc orphans logged no {_SURVEY_DONE} line (exit {process.returncode})"
        )
    return {f"driver_peak_{phase}_mib": mib(rss) for phase, rss in peaks.items()}


def profile_survey(hosts: str, state_dir: Path, top: int, spark: bool) -> dict[str, Any]:
    """The survey in this process, its heap and RSS at the end of each step (``spark``:
    with a local session, as a cycle's driver: the executors read and classify)."""
    from ledger_gc.bookkeeper import cost as cost_module
    from ledger_gc.bookkeeper import survey as bk_survey
    from ledger_gc.config.edge import resolve
    from ledger_gc.config.settings import Settings

    os.environ.update(
        {
            "LEDGERGC_ZK_HOSTS": hosts,
            "LEDGERGC_BUCKET": "",
            "LEDGERGC_BOOKKEEPER": "true",
            "LEDGERGC_STATE_DIR": str(state_dir),
        }
    )
    endpoints = resolve(Settings.from_env())
    steps: list[dict[str, Any]] = []
    tops: dict[str, list[str]] = {}
    original = cost_module.SurveyCost.step

    @contextmanager
    def step(self: Any, name: str) -> Iterator[None]:
        with original(self, name):
            yield
        current, peak = tracemalloc.get_traced_memory()
        steps.append(
            {"step": name, "heap_mib": mib(current), "peak_mib": mib(peak), "rss_mib": mib(_rss())}
        )
        if name in ("listing", "ledgers"):
            snapshot = tracemalloc.take_snapshot()
            tops[name] = [
                f"{stat.size / 2**20:8.1f} MiB {stat.count:>10,} blocks  {stat.traceback[0]}"
                for stat in snapshot.statistics("lineno")[:top]
            ]

    cost_module.SurveyCost.step = step  # type: ignore[method-assign]
    session = None
    if spark:
        from ledger_gc.spark.session import local_session

        session = local_session("bk-memory", master="local[2]")
        session.sparkContext.parallelize([0], 1).count()  # (started before the figures)
    rss_before = _rss()
    tracemalloc.start(1)
    started = time.perf_counter()
    try:
        result = bk_survey.survey(endpoints, spark=session)
    finally:
        cost_module.SurveyCost.step = original  # type: ignore[method-assign]
        if session is not None:
            session.stop()
    seconds = time.perf_counter() - started
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert result is not None
    return {
        "seconds": seconds,
        "ledgers": result.ledgers,
        "classes": {k: v.ledgers for k, v in result.classes.items() if v.ledgers},
        "rss_before_mib": mib(rss_before),
        "rss_peak_mib": mib(bk_scan._vm_hwm_bytes()),
        "heap_end_mib": mib(current),
        "heap_peak_mib": mib(peak),
        "steps": steps,
        "top": tops,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--zk-heap", default="3g")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--command", action="store_true", help="also the whole command")
    parser.add_argument("--spark", action="store_true", help="the survey with a local session")
    args = parser.parse_args()
    from local_stack.zookeeper import ZooKeeperServer

    directory = _common.VAR / "bk-memory"
    shutil.rmtree(directory, ignore_errors=True)
    server = ZooKeeperServer(directory / "zookeeper", log_dir=directory / "logs", heap=args.zk_heap)
    server.start()
    out: dict[str, Any] = {"size": args.size}
    try:
        chroot = f"/bench-bk-memory-{_common.run_tag()}"
        settings = _common.Settings(zk_address=f"{server.hosts}{chroot}", bucket="")
        _common.create_chroot(settings)
        with _common.kazoo_client(settings) as client:
            import pulsar_cluster

            cluster = pulsar_cluster.PulsarCluster(client).init(idgen=False)
            cluster.namespace(bk_scan.NAMESPACE)
            client.ensure_path(f"/managed-ledgers/{bk_scan.NAMESPACE}/persistent")
            built = bk_scan.build(client, args.size // bk_scan.PER_ML)
            say(f"built {args.size:,} ledgers in {built:.1f} s")
        if args.command:
            run = bk_scan.run_command(settings.zk_hosts, directory / "state-cmd", "first")
            bk_scan.check(run, bk_scan.expected(args.size))
            out["command"] = {
                "seconds": round(run["seconds"], 2),
                "survey_seconds": run["cost"]["seconds"],
                "peak_tree_mib": mib(run["peak_tree_rss_bytes"]),
                "peak_by_kind_mib": {k: mib(v) for k, v in run["peak_by_kind"].items()},
            }
            say(f"the command: {json.dumps(out['command'])}")
            out["command"] |= driver_by_phase(settings.zk_hosts, directory / "state-phases")
            say(f"the command again, its driver until the survey's end and after: {out['command']}")
        say("the survey in this process, tracemalloc on")
        out["survey"] = profile_survey(settings.zk_hosts, directory / "state", args.top, args.spark)
        for row in out["survey"]["steps"]:
            say(f"  {row}")
        for step_name, lines in out["survey"]["top"].items():
            say(f"  top at the end of {step_name}:")
            for line in lines:
                say(f"  {line}")
    finally:
        server.stop()
        shutil.rmtree(directory / "zookeeper", ignore_errors=True)
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
