#!/usr/bin/env python3
"""Figure 7: the BookKeeper survey: 1,000,000 ledgers' metadata listed, read and
classified against the Pulsar metadata that references them, its time split, its peak
memory, the curve over 100k / 300k / 1M ledgers, and a sequential kazoo loop over the
same tree as the baseline, measured in the same run.

The data, in a chroot of a ZooKeeper of the command's own (the local stack's runs with
``-Xmx256m``, too small for a million znodes of ~215 bytes: the server here runs with
``--zk-heap``, default 3g, through ``include/local_stack/zookeeper.py``; its other
settings are the stack's, jute.maxbuffer and snapCount ZooKeeper's defaults):

* BookKeeper's root as ``bookkeeper shell metaformat`` leaves it (``PulsarCluster.init``:
  the hierarchical LAYOUT, no id generator) and one v3 record per ledger
  (``pulsar_cluster.ledger_record``, ~215 bytes) at its hierarchical path
  (``00/0012/L3456``), ids 0 .. N-1;
* one managed ledger per 100 ledgers (``bench/ns/persistent/t-<i>``, 10,000 at 1M), each
  with one cursor (its position in its znode), in namespace ``bench/ns``
  (``/admin/policies/bench/ns`` too). Each lists 95 of its 100 ledgers; positions 10, 30,
  50, 70 and 90 are left out: **orphan ledgers** (5 %), except that in every 100th
  block (``i % 100 == 7``) position 90 carries no tags (**foreign**); every 1000th
  managed ledger (``i % 1000 == 503``) has no znode (a deleted topic), so its 100
  ledgers are **orphan partitions**. The survey's class totals are checked against these.

Sizes are built in increasing order in the same chroot (100k, then 200k more, then 700k
more), each with kazoo multi transactions of 1,000 creates, several in flight. At each
size:

* **the survey** (the figure): ``ledger_gc.bookkeeper.survey.survey(settings)`` with
  ``bucket=""`` (no S3) in a child process of its own, so that its peak RSS (VmHWM) is
  the survey's driver alone: Pulsar's references (``references.read_references``), the
  listing (``scan.top_directories`` + ``scan.list_tree``), then every record read
  (``scan.read_ledgers``: batched multiRead) and classified. The phases are timed by
  wrapping those module functions (the library is not changed); "read" is the time
  inside ``read_ledgers`` (ZooKeeper and record decoding), "classify" the rest of that
  loop (the classifier and the survey's bookkeeping);
* **the baseline**: a plain sequential kazoo loop over the same tree: ``get_children``
  level by level, then ``client.get(path)`` one znode at a time, each decoded with
  ``records.decode_record``. Its listing is complete; its reads are measured on
  ``--baseline-sample`` ledgers spread evenly over the tree (all of them when there are
  fewer) and extrapolated to the size at that per-ledger rate, labelled as such.

``--profile FILE`` surveys the largest size once more under cProfile (every thread;
``_common.profile_all_threads``) and prints where the time goes.

    .venv/bin/python bench/bk_scan.py [--sizes 100000,300000,1000000] [--quick]
        [--baseline-sample 20000] [--zk-heap 3g] [--profile FILE] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common
from _common import fmt_rate, fmt_s, mib, ratio, say

sys.path.insert(0, str(_common.ROOT / "include"))

TARGET_SECONDS = 60.0
TARGET_SIZE = 1_000_000
TARGET_RSS_BYTES = 2 * 2**30
DEFAULT_SIZES = (100_000, 300_000, 1_000_000)
QUICK_SIZE = 20_000

ROOT = "/ledgers"
NAMESPACE = "bench/ns"
CURSOR = "sub"
PER_ML = 100  # ledgers per managed ledger (a "block" of ids)
UNLISTED = (10, 30, 50, 70, 90)  # positions in a block no managed ledger lists
FOREIGN_POSITION = 90
LEDGER_LENGTH = 52_428_800


def ml_name(block: int) -> str:
    return f"{NAMESPACE}/persistent/t-{block:05d}"


def is_gone(block: int) -> bool:
    """This block's managed ledger has no znode (a deleted topic)."""
    return block % 1000 == 503


def has_foreign(block: int) -> bool:
    """This block's position 90 is an untagged ledger."""
    return block % 100 == 7 and not is_gone(block)


def expected(size: int) -> dict[str, int]:
    """The survey's class totals for ``size`` ledgers (ids 0 .. size-1)."""
    counts = {"bk-live": 0, "bk-orphan-ledger": 0, "bk-orphan-partition": 0, "bk-foreign": 0}
    mls = 0
    for block in range(size // PER_ML):
        if is_gone(block):
            counts["bk-orphan-partition"] += PER_ML
            continue
        mls += 1
        counts["bk-live"] += PER_ML - len(UNLISTED)
        counts["bk-orphan-ledger"] += len(UNLISTED)
        if has_foreign(block):
            counts["bk-orphan-ledger"] -= 1
            counts["bk-foreign"] += 1
    return {**counts, "managed_ledgers": mls, "ledgers": size}


# --- building the data ------------------------------------------------------------------


def build(client: Any, first_block: int, end_block: int) -> float:
    """Write the ledgers of blocks ``first_block`` .. ``end_block - 1``, then their managed
    ledgers and cursors (a ledger exists before a record references it); seconds taken."""
    import pulsar_cluster
    from ledger_gc.formats.records import encode_managed_cursor_info, encode_managed_ledger_info
    from ledger_gc.proto.mldataformats_pb2 import ManagedCursorInfo, ManagedLedgerInfo
    from ledger_gc.rules.bookkeeper import ledger_paths

    hier = ledger_paths.HIERARCHICAL
    started = time.perf_counter()
    now_ms = int(time.time() * 1000)
    # A 100-id block lies in one leaf directory (10,000 ids each): its parents first.
    parents = sorted(
        {
            ledger_paths.ledger_path(ROOT, block * PER_ML, hier).rsplit("/", 1)[0]
            for block in range(first_block, end_block)
        }
    )
    for parent in parents:
        client.ensure_path(parent)
    untagged = pulsar_cluster.ledger_record({}, length=LEDGER_LENGTH, ctime_ms=now_ms)
    chunk = 100  # blocks per round: 10,000 ledgers
    done = 0
    for start in range(first_block, end_block, chunk):
        blocks = range(start, min(start + chunk, end_block))
        ledger_ops = []
        ml_ops = []
        for block in blocks:
            name = ml_name(block)
            record = pulsar_cluster.ledger_record(
                pulsar_cluster.ml_tags(name),
                length=LEDGER_LENGTH,
                ctime_ms=now_ms - 3_600_000,
            )
            base = block * PER_ML
            for position in range(PER_ML):
                data = untagged if position == FOREIGN_POSITION and has_foreign(block) else record
                ledger_ops.append(
                    ("create", ledger_paths.ledger_path(ROOT, base + position, hier), data)
                )
            if is_gone(block):
                continue
            info = ManagedLedgerInfo()
            for position in range(PER_ML):
                if position not in UNLISTED:
                    info.ledgerInfo.add(
                        ledgerId=base + position,
                        entries=50_000,
                        size=LEDGER_LENGTH,
                        timestamp=now_ms - (PER_ML - position) * 60_000,
                    )
            path = f"/managed-ledgers/{name}"
            cursor = ManagedCursorInfo(
                cursorsLedgerId=-1, markDeleteLedgerId=base + 98, markDeleteEntryId=49_999
            )
            ml_ops.append(("create", path, encode_managed_ledger_info(info)))
            ml_ops.append(("create", f"{path}/{CURSOR}", encode_managed_cursor_info(cursor)))
        _common.multi_ops(client, ledger_ops, per_txn=1000)
        _common.multi_ops(client, ml_ops, per_txn=200)  # ~2 KB records
        done += len(ledger_ops)
        if done % 100_000 == 0 or blocks[-1] == end_block - 1:
            rate = done / (time.perf_counter() - started)
            total = (end_block - first_block) * PER_ML
            say(f"  wrote {done:,} of {total:,} ledgers ({rate:,.0f}/s)")
    return time.perf_counter() - started


# --- the survey, in a child process -------------------------------------------------------


def _vm_hwm_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _vm_rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


#: Whether surveys run with a local Spark session (set by main from --driver-only).
SPARK_MODE = [True]


def child_survey(hosts: str, profile: str | None, spark_mode: bool = False) -> dict[str, Any]:
    """Runs in the child: one survey, its phases timed by wrapping the module functions
    survey() calls (looked up on their modules at each call, so the wrappers are used).

    Within each phase, the time spent in ``MetadataStore.get_many``/``children_of_many``
    (sending the multiReads, waiting for ZooKeeper, kazoo's and multi_read's parsing of
    the answers) is counted apart from the Python work around it; so is the time of the
    cyclic garbage collector (``gc.callbacks``) and the process's CPU time."""
    import gc
    import resource

    from ledger_gc.bookkeeper import references, scan
    from ledger_gc.bookkeeper import survey as survey_mod
    from ledger_gc.metadata.store import MetadataStore
    from ledger_gc.rules.bookkeeper import classify
    from ledger_gc.settings import Settings

    spans = {"references": 0.0, "listing": 0.0, "index": 0.0, "read": 0.0, "after": 0.0}
    zk = {"references": 0.0, "listing": 0.0, "read": 0.0, "other": 0.0}
    marks: dict[str, float] = {}
    phase = ["other"]

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            outer, phase[0] = phase[0], name if name in zk else "other"
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spans[name] += time.perf_counter() - started
                phase[0] = outer

        return wrapper

    def zk_timed(fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                zk[phase[0]] += time.perf_counter() - started

        return wrapper

    original_read = scan.read_ledgers

    def read_ledgers(*args: Any, **kwargs: Any) -> Any:
        marks["read_start"] = time.perf_counter()
        inside = 0.0
        ledgers = original_read(*args, **kwargs)
        while True:
            phase[0] = "read"
            started = time.perf_counter()
            try:
                ledger = next(ledgers)
            except StopIteration:
                inside += time.perf_counter() - started
                break
            finally:
                phase[0] = "other"
            inside += time.perf_counter() - started
            yield ledger
        spans["read"] = inside
        marks["read_end"] = time.perf_counter()

    references.read_references = timed("references", references.read_references)
    scan.top_directories = timed("listing", scan.top_directories)
    scan.list_tree = timed("listing", scan.list_tree)
    scan.read_ledgers = read_ledgers
    classify.Classifier = timed("index", classify.Classifier)
    survey_mod._missing_listed = timed("after", survey_mod._missing_listed)
    survey_mod._id_counter = timed("after", survey_mod._id_counter)
    MetadataStore.get_many = zk_timed(MetadataStore.get_many)  # type: ignore[method-assign]
    MetadataStore.children_of_many = zk_timed(MetadataStore.children_of_many)  # type: ignore[method-assign]

    gc_state = {"seconds": 0.0, "full": 0, "full_seconds": 0.0, "started": 0.0}

    def on_gc(event: str, info: dict[str, int]) -> None:
        if event == "start":
            gc_state["started"] = time.perf_counter()
            return
        took = time.perf_counter() - gc_state["started"]
        gc_state["seconds"] += took
        if info.get("generation") == 2:
            gc_state["full"] += 1
            gc_state["full_seconds"] += took

    settings = Settings(zk_address=hosts, bucket="", bookkeeper="true")
    spark = None
    if spark_mode:
        # As the cycle runs it: the survey app's session (local[*]: both cores), started
        # before the clock (a fixed cost of every cycle, shared with the S3 scan).
        from ledger_gc.spark.session import local_session

        spark = local_session("bench-bk-scan")
        scan.list_subtrees = timed("listing", scan.list_subtrees)
    rss_before = _vm_rss_bytes()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    gc.callbacks.append(on_gc)
    started = time.perf_counter()
    if profile:
        result = _common.profile_all_threads(
            lambda: survey_mod.survey(settings, spark=spark), profile
        )
    else:
        result = survey_mod.survey(settings, spark=spark)
    total = time.perf_counter() - started
    gc.callbacks.remove(on_gc)
    after = resource.getrusage(resource.RUSAGE_SELF)
    assert result is not None, "the survey found no BookKeeper"
    if "read_start" in marks:
        read_classify = marks["read_end"] - marks["read_start"]
    else:  # read and classified on the executors: what the driver did not do itself
        read_classify = total - spans["references"] - spans["listing"] - spans["after"]
        spans["read"] = read_classify
    return {
        "seconds": total,
        "references_s": spans["references"],
        "references_zk_s": zk["references"],
        "listing_s": spans["listing"],
        "listing_zk_s": zk["listing"],
        "read_classify_s": read_classify,
        "read_s": spans["read"],
        "read_zk_s": zk["read"],
        "classify_s": read_classify - spans["read"],
        "index_s": spans["index"],
        "after_s": spans["after"],
        "other_s": total - spans["references"] - spans["listing"] - read_classify,
        "cpu_user_s": after.ru_utime - usage.ru_utime,
        "cpu_sys_s": after.ru_stime - usage.ru_stime,
        "gc_s": gc_state["seconds"],
        "gc_full": gc_state["full"],
        "gc_full_s": gc_state["full_seconds"],
        "ledgers": result.ledgers,
        "managed_ledgers": result.managed_ledgers,
        "classes": {name: totals.ledgers for name, totals in result.classes.items()},
        "candidates": len(result.candidates),
        "not_ledgers": result.not_ledgers,
        "missing_listed": len(result.missing_listed),
        "rss_before_bytes": rss_before,
        "peak_rss_bytes": _vm_hwm_bytes(),
        "ru_maxrss_bytes": after.ru_maxrss * 1024,
    }


def run_survey(hosts: str, server: Any, profile: str | None = None) -> dict[str, Any]:
    """One survey in a child process, with the ZooKeeper JVM's CPU and GC time meanwhile."""
    command = [sys.executable, __file__, "--child-survey", hosts]
    if SPARK_MODE[0]:
        command += ["--child-spark"]
    if profile:
        command += ["--child-profile", profile]
    load = os.getloadavg()[0]
    jvm_before = jvm_times(server)
    child = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=False)
    jvm_after = jvm_times(server)
    lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        raise SystemExit(
            f"the survey child failed (exit {child.returncode}):\n{child.stdout[-3000:]}"
        )
    result = dict(json.loads(lines[-1]))
    result["load_before"] = load
    result["zk_cpu_s"] = jvm_after["cpu_s"] - jvm_before["cpu_s"]
    gc_before, gc_after = jvm_before.get("gc_s"), jvm_after.get("gc_s")
    result["zk_gc_s"] = gc_after - gc_before if gc_before is not None and gc_after else None
    return result


def check(got: dict[str, Any], want: dict[str, int]) -> None:
    wrong = {
        name: (got["classes"].get(name, 0), count)
        for name, count in want.items()
        if name.startswith("bk-") and got["classes"].get(name, 0) != count
    }
    others = {name: n for name, n in got["classes"].items() if n and name not in want}
    for name in ("ledgers", "managed_ledgers"):
        if got[name] != want[name]:
            wrong[name] = (got[name], want[name])
    if got["not_ledgers"] or got["missing_listed"]:
        wrong["not_ledgers/missing_listed"] = (got["not_ledgers"], got["missing_listed"])
    if wrong or others:
        raise SystemExit(
            f"the survey classified wrongly (got, planted): {wrong}; unexpected: {others}"
        )


# --- the baseline -------------------------------------------------------------------------


def baseline(hosts: str, size: int, sample: int) -> dict[str, Any]:
    """The sequential kazoo loop: the whole listing, then ``sample`` gets (spread evenly)."""
    from kazoo.client import KazooClient

    from ledger_gc.rules.bookkeeper import ledger_paths
    from ledger_gc.rules.bookkeeper.records import decode_record

    client = KazooClient(hosts=hosts, timeout=15)
    client.start(timeout=30)
    try:
        started = time.perf_counter()
        leaves: list[str] = []
        level = [
            f"{ROOT}/{name}"
            for name in client.get_children(ROOT)
            if not ledger_paths.is_special(name)
        ]
        calls = 1
        while level:
            below = []
            for path in level:
                calls += 1
                for name in client.get_children(path):
                    (leaves if name.startswith("L") else below).append(f"{path}/{name}")
            level = below
        list_s = time.perf_counter() - started
        assert len(leaves) == size, f"the baseline listed {len(leaves)} of {size} ledgers"
        leaves.sort()
        step = max(1, len(leaves) // sample)
        picked = leaves[::step][:sample]
        started = time.perf_counter()
        closed = 0
        for path in picked:
            data, _stat = client.get(path)
            closed += decode_record(data).closed
        read_s = time.perf_counter() - started
    finally:
        client.stop()
        client.close()
    per_ledger = read_s / len(picked)
    total = list_s + per_ledger * size
    return {
        "list_s": list_s,
        "list_calls": calls,
        "sampled": len(picked),
        "sample_read_s": read_s,
        "per_ledger_ms": per_ledger * 1000,
        "extrapolated": len(picked) < size,
        "seconds": total,
        "ledgers_per_s": size / total,
        "closed": closed,
    }


# --- the server ---------------------------------------------------------------------------


def _jvm(server: Any) -> Any:
    """The ZooKeeper JVM (psutil), below its watchdog shell; None if not found."""
    import psutil

    proc = getattr(server, "_proc", None)
    if proc is None:
        return None
    try:
        for child in psutil.Process(proc.pid).children(recursive=True):
            if child.name() == "java":
                return child
    except psutil.Error:
        return None
    return None


def server_rss(server: Any) -> int:
    """The resident memory of the ZooKeeper JVM."""
    jvm = _jvm(server)
    try:
        return int(jvm.memory_info().rss) if jvm is not None else 0
    except Exception:
        return 0


def jvm_times(server: Any) -> dict[str, float]:
    """The ZooKeeper JVM's CPU seconds so far and, with ``jstat``, its GC seconds (GCT)."""
    jvm = _jvm(server)
    if jvm is None:
        return {"cpu_s": 0.0}
    times = jvm.cpu_times()
    found = {"cpu_s": times.user + times.system}
    if shutil.which("jstat"):
        try:
            out = subprocess.run(
                ["jstat", "-gcutil", str(jvm.pid)],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout.split("\n")
            header, values = out[0].split(), out[1].split()
            found["gc_s"] = float(values[header.index("GCT")])
        except (subprocess.SubprocessError, OSError, ValueError, IndexError):
            pass
    return found


def describe(got: dict[str, Any]) -> str:
    """One survey's phases, CPU and memory, for its progress line."""
    zk_gc = f", GC {got['zk_gc_s']:.1f}" if got.get("zk_gc_s") is not None else ""
    return (
        f"{got['seconds']:.2f}s: references {got['references_s']:.2f} (ZooKeeper "
        f"{got['references_zk_s']:.2f}), listing {got['listing_s']:.2f} (ZooKeeper "
        f"{got['listing_zk_s']:.2f}), read {got['read_s']:.2f} (ZooKeeper "
        f"{got['read_zk_s']:.2f}, decoding {got['read_s'] - got['read_zk_s']:.2f}), classify "
        f"{got['classify_s']:.2f}, other {got['other_s']:.2f}; CPU: survey process "
        f"{got['cpu_user_s'] + got['cpu_sys_s']:.1f}s, ZooKeeper {got['zk_cpu_s']:.1f}s"
        f"{zk_gc}; Python GC {got['gc_s']:.2f}s ({got['gc_full']} full, "
        f"{got['gc_full_s']:.2f}s); peak RSS {mib(got['peak_rss_bytes']):,.0f} MiB "
        f"({mib(got['rss_before_bytes']):,.0f} before); load {got['load_before']:.1f}; "
        "classes as planted"
    )


def label(size: int) -> str:
    if size % 1_000_000 == 0:
        return f"{size // 1_000_000}M"
    if size % 1000 == 0:
        return f"{size // 1000}k"
    return f"{size:,}"


def print_profile(path: str) -> None:
    import pstats

    print(f"\n--- profile of the survey (all threads, cProfile; {path}) ---")
    stats = pstats.Stats(path)
    # Every thread is in it: the kazoo connection thread's waits (epoll) and the main
    # thread's waits for answers (lock acquire) are idle time, not work.
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(r"ledger_gc|kazoo/protocol", 30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        default=",".join(str(s) for s in DEFAULT_SIZES),
        help="ledger counts, comma-separated (multiples of 100)",
    )
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SIZE:,} ledgers only")
    parser.add_argument(
        "--baseline-sample",
        type=int,
        default=20_000,
        help="ledgers the sequential baseline reads per size (then extrapolated)",
    )
    parser.add_argument("--zk-heap", default="3g", help="-Xmx of the command's ZooKeeper")
    parser.add_argument("--profile", help="profile the largest size's survey into this file")
    parser.add_argument(
        "--repeat", type=int, default=1, help="surveys per size; the fastest is the figure"
    )
    parser.add_argument("--keep", action="store_true", help="keep ZooKeeper's data dir")
    parser.add_argument("--child-survey", help=argparse.SUPPRESS)
    parser.add_argument("--child-profile", help=argparse.SUPPRESS)
    parser.add_argument("--child-spark", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--driver-only",
        action="store_true",
        help="survey without Spark (one Python process); default: the cycle's way, the "
        "shards read and classified on a local Spark session's executors",
    )
    args = parser.parse_args()
    if args.child_survey:
        result = child_survey(args.child_survey, args.child_profile, args.child_spark)
        print(json.dumps(result), flush=True)
        return 0
    SPARK_MODE[0] = not args.driver_only
    if args.quick:
        sizes = [QUICK_SIZE]
        args.baseline_sample = min(args.baseline_sample, 5000)
    else:
        sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    if (
        not sizes
        or any(s < PER_ML or s % PER_ML for s in sizes)
        or args.baseline_sample < 1
        or args.repeat < 1
    ):
        print("bk_scan.py: --sizes must be multiples of 100 (e.g. 100000,300000)", file=sys.stderr)
        return 2

    from local_stack.zookeeper import ZooKeeperServer

    directory = _common.VAR / "bk-scan"
    shutil.rmtree(directory / "zookeeper", ignore_errors=True)
    server = ZooKeeperServer(directory / "zookeeper", log_dir=directory / "logs", heap=args.zk_heap)
    say(f"starting ZooKeeper (-Xmx{args.zk_heap}) in {directory / 'zookeeper'}")
    server.start()
    runs: list[dict[str, Any]] = []
    profile_path = None
    try:
        chroot = f"/bench-bk-scan-{_common.run_tag()}"
        settings = _common.Settings(
            zk_address=f"{server.hosts}{chroot}", bucket="", state_dir=directory / "state"
        )
        _common.create_chroot(settings)
        with _common.kazoo_client(settings) as client:
            import pulsar_cluster

            cluster = pulsar_cluster.PulsarCluster(client).init(idgen=False)
            cluster.namespace(NAMESPACE)
            client.ensure_path(f"/managed-ledgers/{NAMESPACE}/persistent")
            built = 0
            for size in sizes:
                want = expected(size)
                say(
                    f"size {label(size)}: writing ledgers {built:,} .. {size - 1:,} "
                    f"({want['managed_ledgers']:,} managed ledgers in all)"
                )
                build_s = build(client, built // PER_ML, size // PER_ML)
                built = size
                zk_rss = server_rss(server)
                say(
                    f"  built in {build_s:.1f}s; ZooKeeper JVM RSS {mib(zk_rss):,.0f} MiB; "
                    "surveying (child process)"
                )
                surveys = []
                for attempt in range(args.repeat):
                    got = run_survey(settings.zk_hosts, server)
                    check(got, want)
                    surveys.append(got)
                    say(f"  survey{'' if args.repeat == 1 else f' {attempt + 1}'}: {describe(got)}")
                survey = min(surveys, key=lambda r: r["seconds"])
                survey["all_seconds"] = [round(r["seconds"], 2) for r in surveys]
                survey["peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in surveys)
                base = baseline(settings.zk_hosts, size, args.baseline_sample)
                say(
                    f"  sequential kazoo: listing {base['list_s']:.2f}s "
                    f"({base['list_calls']} get_children), {base['sampled']:,} gets in "
                    f"{base['sample_read_s']:.2f}s ({base['per_ledger_ms']:.3f} ms each)"
                    + (
                        f" -> {base['seconds']:.1f}s for {size:,} (extrapolated)"
                        if base["extrapolated"]
                        else ""
                    )
                )
                runs.append(
                    {
                        "size": size,
                        "build_s": build_s,
                        "zk_rss_bytes": zk_rss,
                        "survey": survey,
                        "baseline": base,
                        "expected": want,
                    }
                )
            if args.profile:
                profile_path = str(Path(args.profile).resolve())
                say(f"profiling the survey of {label(sizes[-1])} (a second survey)")
                profiled = run_survey(settings.zk_hosts, server, profile_path)
                say(f"  profiled survey: {profiled['seconds']:.2f}s (cProfile overhead included)")
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(directory / "zookeeper", ignore_errors=True)

    # --- the curve ---
    print()
    print(
        f"{'ledgers':>9}  {'survey':>8}  {'refs':>6}  {'listing':>7}  {'read':>7}  "
        f"{'(ZK wait)':>9}  {'classify':>8}  {'other':>6}  {'ledgers/s':>9}  {'us/ledger':>9}  "
        f"{'peak RSS':>9}  {'CPU py/ZK':>11}  {'seq. kazoo':>10}  {'ratio':>6}"
    )
    for run in runs:
        s, b = run["survey"], run["baseline"]
        cpu = f"{s['cpu_user_s'] + s['cpu_sys_s']:.0f}/{s['zk_cpu_s']:.0f} s"
        print(
            f"{label(run['size']):>9}  {s['seconds']:>7.2f}s  {s['references_s']:>5.2f}s  "
            f"{s['listing_s']:>6.2f}s  {s['read_s']:>6.2f}s  {s['read_zk_s']:>8.2f}s  "
            f"{s['classify_s']:>7.2f}s  {s['other_s']:>5.2f}s  "
            f"{run['size'] / s['seconds']:>9,.0f}  {s['seconds'] / run['size'] * 1e6:>9.1f}  "
            f"{mib(s['peak_rss_bytes']):>5,.0f} MiB  {cpu:>11}  {b['ledgers_per_s']:>8,.0f}/s  "
            f"{ratio(b['seconds'], s['seconds']):>5.1f}x"
        )
    sampled = runs[-1]["baseline"]["sampled"]
    print(
        "(read: inside scan.read_ledgers; ZK wait: of that, in MetadataStore.get_many "
        "(multiReads sent, ZooKeeper's answers awaited and parsed), the rest is record "
        "decoding; classify: the rest of that loop; other: sessions, layout, sync, the "
        "classifier's indexes, the missing-listed re-read, the id counter. CPU py/ZK: the "
        "survey process's CPU seconds / the ZooKeeper JVM's meanwhile. seq. kazoo: "
        "get_children level by level, then get + decode_record of "
        + (
            f"{sampled:,} ledgers spread over the tree, extrapolated to the size at that "
            "per-ledger rate)"
            if runs[-1]["baseline"]["extrapolated"]
            else "every ledger)"
        )
    )

    full = runs[-1]
    size = full["size"]
    survey = full["survey"]
    base = full["baseline"]
    survey_s = survey["seconds"]
    peak = max(run["survey"]["peak_rss_bytes"] for run in runs)
    speedup = ratio(base["seconds"], survey_s)
    time_met = survey_s <= TARGET_SECONDS
    rss_met = peak < TARGET_RSS_BYTES
    print()
    print(
        f"scan+classify {label(size)}: {survey_s:.1f} s "
        f"(target <= {TARGET_SECONDS:.0f} s: {'MET' if time_met else 'MISSED'})"
    )
    print(
        f"driver peak RSS: {mib(peak):,.0f} MiB "
        f"(target < {TARGET_RSS_BYTES // 2**20}: {'MET' if rss_met else 'MISSED'})"
    )
    extrapolated = f" (baseline extrapolated from {base['sampled']:,} gets)"
    print(f"vs sequential kazoo: {speedup:.1f} x{extrapolated if base['extrapolated'] else ''}")
    if size != TARGET_SIZE:
        print(
            f"(the targets are for {label(TARGET_SIZE)} ledgers; this run's largest: {label(size)})"
        )
    if profile_path:
        print_profile(profile_path)

    rows = [
        (
            f"survey of {size:,} ledgers",
            fmt_s(survey_s),
            fmt_s(base["seconds"]) + ("*" if base["extrapolated"] else ""),
            f"{speedup:.1f}x",
        ),
        ("  ledgers per second", fmt_rate(size / survey_s), fmt_rate(base["ledgers_per_s"]), ""),
        ("  Pulsar references", fmt_s(survey["references_s"]), "", ""),
        ("  listing", fmt_s(survey["listing_s"]), fmt_s(base["list_s"]), ""),
        ("  reading (multiRead + decode)", fmt_s(survey["read_s"]), "", ""),
        ("    of which in get_many (ZooKeeper)", fmt_s(survey["read_zk_s"]), "", ""),
        ("  classifying", fmt_s(survey["classify_s"]), "", ""),
        ("  other", fmt_s(survey["other_s"]), "", ""),
        ("driver peak RSS (largest size)", f"{mib(survey['peak_rss_bytes']):,.0f} MiB", "", ""),
        (
            "CPU: survey process / ZooKeeper",
            f"{survey['cpu_user_s'] + survey['cpu_sys_s']:.1f} s / {survey['zk_cpu_s']:.1f} s",
            "",
            "",
        ),
        ("ZooKeeper JVM RSS", f"{mib(full['zk_rss_bytes']):,.0f} MiB", "", ""),
    ]
    targets = [
        (f"scan+classify of {size:,} ledgers <= {TARGET_SECONDS:.0f} s", time_met),
        ("driver peak RSS < 2 GiB", rss_met),
    ]
    _common.report(
        "bk_scan",
        rows,
        targets,
        {
            "items": size,
            "quick": args.quick,
            "survey_s": round(survey_s, 2),
            "ledgers_per_s": round(size / survey_s),
            "driver_peak_rss_mib": mib(peak),
            "baseline_per_s": round(base["ledgers_per_s"]),
            "baseline_s": round(base["seconds"], 1),
            "baseline_extrapolated": base["extrapolated"],
            "baseline_sample": base["sampled"],
            "ratio": speedup,
            "zk_heap": args.zk_heap,
            "repeat": args.repeat,
            "curve": [
                {
                    "ledgers": run["size"],
                    "build_s": round(run["build_s"], 1),
                    "zk_rss_mib": mib(run["zk_rss_bytes"]),
                    **{
                        k: (round(v, 3) if isinstance(v, float) else v)
                        for k, v in run["survey"].items()
                        if k not in ("rss_before_bytes", "peak_rss_bytes", "ru_maxrss_bytes")
                    },
                    "rss_before_mib": mib(run["survey"]["rss_before_bytes"]),
                    "peak_rss_mib": mib(run["survey"]["peak_rss_bytes"]),
                    "baseline": {
                        k: (round(v, 4) if isinstance(v, float) else v)
                        for k, v in run["baseline"].items()
                    },
                }
                for run in runs
            ],
            "profile": profile_path,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
