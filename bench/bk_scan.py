#!/usr/bin/env python3
"""Figure 9: what a cycle over 1,000,000 BookKeeper ledgers costs ZooKeeper and the
clock: the whole ``ledgergc orphans --dry-run --json`` command (Spark's start
included), first and in the steady state, beside the pipelined reader a user would
write, all measured in one run against one ZooKeeper.

The data, in a chroot of a ZooKeeper of the command's own (``--zk-heap``, default 3g: the
local stack's 256 MiB cannot hold a million znodes; its other settings are the stack's):

* BookKeeper's root as ``bookkeeper shell metaformat`` leaves it (``PulsarCluster.init``:
  the hierarchical LAYOUT, an INSTANCEID, no id generator) and one v3 record per ledger
  (``pulsar_cluster.ledger_record``, ~215 bytes) at its hierarchical path, ids 0 .. N-1;
* one managed ledger per 100 ledgers (``bench/ns/persistent/t-<i>``, 10,000 at 1M), each
  with one cursor, in namespace ``bench/ns``. Each lists 95 of its 100 ledgers; positions
  10, 30, 50, 70 and 90 are **orphan ledgers**, except that in every 100th block position
  90 is untagged (**foreign**); every 1000th managed ledger has no znode (a deleted
  topic): its 100 ledgers are **orphan partitions**. Every command's classes are checked.
  ``--ids blocks`` (the default, the figures' so far) gives each managed ledger 100 ids
  together; ``--ids counter`` hands them out from one counter, every topic rolling over
  in turn, as Pulsar's brokers do (topic ``b``'s ``k``-th ledger is ``k * topics + b``):
  each leaf directory then holds ledgers of every topic, and each Spark task's part of
  the references names them all;

One run, side by side:

1. **the pipelined reader** (the baseline, ``pipelined_reader``): what a user writes with
   kazoo: the tree listed level by level and every record read with ``get_async``, a few
   thousand in flight, each decoded (header, varint, protobuf); nothing else. Measured
   over every ledger, in a child process (its peak memory is its own);
2. **the full read**: the command with ``LEDGERGC_BK_RECORD_CACHE=false`` (every znode
   read), on a state store of its own;
3. **the first survey**: the command with the record cache on, on an empty state store;
4. **1 % new ledgers and 1 % deleted** (``churn``): each live topic rolls over (a new
   ledger created, then listed) and is trimmed (its oldest listed ledger dropped from its
   list, then its znode deleted), as Pulsar does: new ledgers in new directories,
   deleted ones in every directory;
5. **the second survey**: the command again on the first's state store;
6. **1 % more, then the command under a budget** of ``--budget`` reads/s
   (``LEDGERGC_ZK_MAX_READS_PER_SECOND``), whose peak rate is the report's (the driver's
   and every executor's reads added up per second of the wall clock).

Each command's time is the whole process's (Python start, Spark's JVM, the cycle, the
report), with its survey step's (``bookkeeper.cost.seconds``) and the process tree's peak
resident memory (the command, its JVM and Python workers, sampled every 0.1 s) beside it.

The curve (issue 36, ``--curve 1000000,3000000,10000000``): each size on a ZooKeeper of
its own (``sized_server``: its heap by the size, ``snapCount`` and autopurge set, its data
dir removed after), the tree built, the reader, the first survey and, after 1 % churn,
the second; the full read and the budget's run are left out (figure 9 has them). Beside
each command: ZooKeeper's reads (the report's meter) and the response bytes ZooKeeper
served for the chroot (``mntr``'s ``read_per_namespace``), the peak memory of the
command's own process (the driver), of its largest Python worker (an executor's), of
its JVM and of the whole tree; each size against the first (time per ledger, the
driver's peak).

    .venv/bin/python bench/bk_scan.py [--size 1000000] [--quick] [--budget 5000]
        [--zk-heap 3g] [--keep] [--curve SIZES] [--ids blocks|counter]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _common
from _common import fmt_rate, fmt_s, mib, ratio, say

sys.path.insert(0, str(_common.ROOT / "include"))

TARGET_SIZE = 1_000_000
TARGET_FIRST_S = 45.0
TARGET_RATIO = 2.0
TARGET_SECOND_S = 15.0
TARGET_SECOND_READS = 0.05
TARGET_BUDGET_OVER = 0.10
DEFAULT_BUDGET = 5000
QUICK_SIZE = 5_000

ROOT = "/ledgers"
NAMESPACE = "bench/ns"
CURSOR = "sub"
PER_ML = 100  # ledgers per managed ledger (a "block" of ids)
UNLISTED = (10, 30, 50, 70, 90)  # positions in a block no managed ledger lists
FOREIGN_POSITION = 90
LEDGER_LENGTH = 52_428_800
#: Listed positions a churn round trims, round by round (never an unlisted one).
TRIMMED = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
#: get_async calls the pipelined reader keeps in flight.
READER_WINDOW = 4000


#: How the tree's ids are handed out (``--ids``): "blocks", each managed ledger's 100
#: ids together; "counter", from one counter with every topic rolling over in turn, as
#: Pulsar's brokers take them (topic ``b``'s ``k``-th ledger is ``k * topics + b``).
ID_ORDERS = ("blocks", "counter")
ID_ORDER = "blocks"


def ledger_id(block: int, position: int, blocks: int) -> int:
    """The id of a managed ledger's ``position``-th ledger, of ``blocks`` of them."""
    if ID_ORDER == "counter":
        return position * blocks + block
    return block * PER_ML + position


def block_of(lid: int, blocks: int) -> tuple[int, int]:
    """Which managed ledger's (block, position) a ledger id of the tree is."""
    if ID_ORDER == "counter":
        return lid % blocks, lid // blocks
    return divmod(lid, PER_ML)


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


def build(client: Any, blocks: int) -> float:
    """Write the ledgers of ``blocks`` managed ledgers, ids 0 .. ``blocks * PER_ML - 1``
    a chunk at a time, then the managed ledgers and cursors (a ledger exists before a
    record references it); seconds taken."""
    import pulsar_cluster
    from ledger_gc.formats.records import encode_managed_cursor_info, encode_managed_ledger_info
    from ledger_gc.proto.mldataformats_pb2 import ManagedCursorInfo, ManagedLedgerInfo
    from ledger_gc.rules.bookkeeper import ledger_paths

    hier = ledger_paths.HIERARCHICAL
    started = time.perf_counter()
    now_ms = int(time.time() * 1000)
    size = blocks * PER_ML
    # Every 10,000 ids lie in one leaf directory: the parents first.
    parents = sorted(
        {
            ledger_paths.ledger_path(ROOT, lid, hier).rsplit("/", 1)[0]
            for lid in range(0, size, 10_000)
        }
    )
    for parent in parents:
        client.ensure_path(parent)
    untagged = pulsar_cluster.ledger_record({}, length=LEDGER_LENGTH, ctime_ms=now_ms)
    records: dict[int, bytes] = {}  # (a managed ledger's record, made once)
    chunk = 10_000
    for low in range(0, size, chunk):
        ledger_ops = []
        for lid in range(low, min(low + chunk, size)):
            block, position = block_of(lid, blocks)
            if position == FOREIGN_POSITION and has_foreign(block):
                data = untagged
            else:
                data = records.get(block) or records.setdefault(
                    block,
                    pulsar_cluster.ledger_record(
                        pulsar_cluster.ml_tags(ml_name(block)),
                        length=LEDGER_LENGTH,
                        ctime_ms=now_ms - 3_600_000,
                    ),
                )
            ledger_ops.append(("create", ledger_paths.ledger_path(ROOT, lid, hier), data))
        _common.multi_ops(client, ledger_ops, per_txn=1000)
        done = low + len(ledger_ops)
        if done % 100_000 == 0 or done == size:
            rate = done / (time.perf_counter() - started)
            say(f"  wrote {done:,} of {size:,} ledgers ({rate:,.0f}/s)")
    records.clear()
    ml_ops = []
    for block in range(blocks):
        if is_gone(block):
            continue
        info = ManagedLedgerInfo()
        for position in range(PER_ML):
            if position not in UNLISTED:
                info.ledgerInfo.add(
                    ledgerId=ledger_id(block, position, blocks),
                    entries=50_000,
                    size=LEDGER_LENGTH,
                    timestamp=now_ms - (PER_ML - position) * 60_000,
                )
        path = f"/managed-ledgers/{ml_name(block)}"
        cursor = ManagedCursorInfo(
            cursorsLedgerId=-1,
            markDeleteLedgerId=ledger_id(block, 98, blocks),
            markDeleteEntryId=49_999,
        )
        ml_ops.append(("create", path, encode_managed_ledger_info(info)))
        ml_ops.append(("create", f"{path}/{CURSOR}", encode_managed_cursor_info(cursor)))
        if len(ml_ops) >= 2_000:
            _common.multi_ops(client, ml_ops, per_txn=200)  # ~2 KB records
            ml_ops = []
    _common.multi_ops(client, ml_ops, per_txn=200)
    return time.perf_counter() - started


# --- churn: 1 % new, 1 % deleted --------------------------------------------------------


def churn(client: Any, size: int, round_no: int, next_id: int) -> tuple[int, int, int]:
    """One rollover and one trim of every live topic, in Pulsar's order: the new ledger
    created, then listed (a record rewritten at its version), the oldest listed one
    dropped from the list in the same write, then its znode deleted. Returns (new, deleted,
    next id)."""
    import pulsar_cluster
    from ledger_gc.formats.records import decode_managed_ledger_info, encode_managed_ledger_info
    from ledger_gc.rules.bookkeeper import ledger_paths

    hier = ledger_paths.HIERARCHICAL
    now_ms = int(time.time() * 1000)
    blocks = [b for b in range(size // PER_ML) if not is_gone(b)]
    new_ids = {block: next_id + i for i, block in enumerate(blocks)}
    trimmed = {b: ledger_id(b, TRIMMED[round_no], size // PER_ML) for b in blocks}
    paths = [ledger_paths.ledger_path(ROOT, lid, hier) for lid in new_ids.values()]
    _common.ensure_parents(client, paths)
    ops = []
    for block, lid in new_ids.items():
        record = pulsar_cluster.ledger_record(
            pulsar_cluster.ml_tags(ml_name(block)), length=LEDGER_LENGTH, ctime_ms=now_ms
        )
        ops.append(("create", ledger_paths.ledger_path(ROOT, lid, hier), record))
    _common.multi_ops(client, ops, per_txn=1000)
    # The managed ledgers' records: read, new ledger added, oldest dropped, written back.
    names = [f"/managed-ledgers/{ml_name(b)}" for b in blocks]
    reads = [client.get_async(path) for path in names]
    writes = []
    for block, path, pending in zip(blocks, names, reads, strict=True):
        data, stat = pending.get(timeout=60)
        info = decode_managed_ledger_info(data, path=path)
        kept = [entry for entry in info.ledgerInfo if entry.ledgerId != trimmed[block]]
        del info.ledgerInfo[:]
        info.ledgerInfo.extend(kept)
        info.ledgerInfo.add(ledgerId=new_ids[block], entries=50_000, size=LEDGER_LENGTH)
        writes.append(client.set_async(path, encode_managed_ledger_info(info), stat.version))
        if len(writes) >= 2000:
            for done in writes:
                done.get(timeout=60)
            writes = []
    for done in writes:
        done.get(timeout=60)
    gone = [("delete", ledger_paths.ledger_path(ROOT, lid, hier), b"") for lid in trimmed.values()]
    _common.multi_ops(client, gone, per_txn=1000)
    return len(new_ids), len(trimmed), next_id + len(new_ids)


# --- the baseline: the pipelined reader a user would write ------------------------------


def pipelined_reader(hosts: str) -> dict[str, Any]:
    """Every ledger's record, the way a user reads them with kazoo: the tree level by
    level, then ``get_async`` with ``READER_WINDOW`` in flight, each record decoded."""
    from kazoo.client import KazooClient

    from ledger_gc.proto.bookkeeper_metadata_pb2 import LedgerMetadataFormat

    header = b"BookieMetadataFormatVersion\t3\n"
    started = time.perf_counter()
    client = KazooClient(hosts=hosts, timeout=30)
    client.start(timeout=30)
    level = [f"{ROOT}/{c}" for c in client.get_children(ROOT) if c.isdigit()]
    leaves: list[str] = []
    while level:
        pending = [(path, client.get_children_async(path)) for path in level]
        level = []
        for path, answer in pending:
            for name in answer.get(timeout=60):
                (leaves if name.startswith("L") else level).append(f"{path}/{name}")
    listed_s = time.perf_counter() - started
    closed = tagged = 0
    for start in range(0, len(leaves), READER_WINDOW):
        window = [client.get_async(path) for path in leaves[start : start + READER_WINDOW]]
        for answer in window:
            data, _stat = answer.get(timeout=60)
            if not data.startswith(header):
                continue
            body = data[len(header) :]
            size = shift = offset = 0
            while True:  # the varint length
                byte = body[offset]
                size |= (byte & 0x7F) << shift
                offset += 1
                shift += 7
                if not byte & 0x80:
                    break
            message = LedgerMetadataFormat()
            message.ParseFromString(body[offset : offset + size])
            closed += message.state == LedgerMetadataFormat.CLOSED
            tagged += any(m.key == "pulsar/managed-ledger" for m in message.customMetadata)
    client.stop()
    client.close()
    return {
        "seconds": time.perf_counter() - started,
        "listing_s": listed_s,
        "ledgers": len(leaves),
        "closed": closed,
        "tagged": tagged,
        "peak_rss_bytes": _vm_hwm_bytes(),
    }


def _vm_hwm_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def run_reader(hosts: str) -> dict[str, Any]:
    child = subprocess.run(
        [sys.executable, __file__, "--child-reader", hosts],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        raise SystemExit(f"the pipelined reader failed (exit {child.returncode})")
    return dict(json.loads(lines[-1]))


# --- the command ---------------------------------------------------------------------------


def command_env(hosts: str, state_dir: Path, **settings: str) -> dict[str, str]:
    """The environment of ``COMMAND`` over the bench's tree: this one's, less every
    LEDGERGC_ setting, with the BookKeeper source on and nothing else to scan."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERGC_")}
    env.update(
        {
            "LEDGERGC_ZK_HOSTS": hosts,
            "LEDGERGC_BUCKET": "",
            "LEDGERGC_BOOKKEEPER": "true",
            "LEDGERGC_STATE_DIR": str(state_dir),
            "LEDGERGC_ORPHAN_MAX_FRACTION": "1",
            "PYSPARK_PYTHON": sys.executable,
            **settings,
        }
    )
    return env


#: The command an operator runs (``command_env``'s).
COMMAND = [str(Path(sys.executable).parent / "ledgergc"), "orphans", "--dry-run", "--json"]


def run_command(
    hosts: str,
    state_dir: Path,
    label: str,
    served: Callable[[], int] | None = None,
    **settings: str,
) -> dict[str, Any]:
    """``ledgergc orphans --dry-run --json`` as an operator runs it: its wall time, its
    report, the process tree's peak memory and CPU."""
    env = command_env(hosts, state_dir, **settings)
    load = os.getloadavg()[0]
    bytes_before = served() if served else 0
    started = time.perf_counter()
    process = subprocess.Popen(COMMAND, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with _common.TreeMemorySampler(process.pid) as sampler:
        out, err = process.communicate()
    seconds = time.perf_counter() - started
    served_bytes_now = (served() - bytes_before) if served else 0
    if process.returncode not in (0, 1):
        raise SystemExit(
            f"{label}: ledgergc orphans failed (exit {process.returncode}):\n{err.decode()[-3000:]}"
        )
    report = json.loads(out)
    bk = report["bookkeeper"]
    return {
        "label": label,
        "seconds": seconds,
        "load_before": load,
        "peak_tree_rss_bytes": sampler.peak_total,
        "served_bytes": served_bytes_now,
        "load_after": os.getloadavg()[0],
        "peak_by_kind": sampler.peak_by_kind,
        "status": report["status"],
        "survey_s": bk["cost"]["seconds"]["total"],
        "cost": bk["cost"],
        "zookeeper": report["zookeeper"],
        "classes": {name: totals["ledgers"] for name, totals in bk["classes"].items()},
        "ledgers": bk["ledgers"],
        "managed_ledgers": bk["managed_ledgers"],
        "not_ledgers": bk["not_ledgers"],
        "missing_listed": len(bk["missing_listed"]),
        "pulsar_metadata": report.get("pulsar_metadata"),
    }


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
            f"{got['label']}: the survey classified wrongly (got, planted): {wrong}; "
            f"unexpected: {others}"
        )


def describe(run: dict[str, Any]) -> str:
    cost = run["cost"]
    steps = ", ".join(f"{k} {v:.1f}" for k, v in cost["seconds"].items() if v and k != "total")
    return (
        f"{run['seconds']:.1f} s whole command (survey {run['survey_s']:.1f} s: {steps}); "
        f"{cost['zk_reads']:,} znodes read by the survey, {run['zookeeper']['reads']:,} by "
        f"the cycle (peak {run['zookeeper']['peak_per_second']:,}/s), "
        f"{cost['records_read']:,} records read, {cost['records_cached']:,} from the cache; "
        f"peak tree RSS {mib(run['peak_tree_rss_bytes']):,.0f} MiB (driver "
        f"{mib(run['peak_by_kind'].get('root', 0)):,.0f}, a worker "
        f"{mib(run['peak_by_kind'].get('python_worker', 0)):,.0f}, JVM "
        f"{mib(run['peak_by_kind'].get('jvm', 0)):,.0f}); ZooKeeper served "
        f"{mib(run.get('served_bytes', 0)):,.0f} MiB; {cost.get('executor_tasks', 0)} tasks; "
        f"load {run['load_before']:.1f}-{run.get('load_after', 0):.1f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=TARGET_SIZE, help="ledgers (x100)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SIZE:,} ledgers")
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help="reads/s")
    parser.add_argument("--zk-heap", default="3g", help="-Xmx of the command's ZooKeeper")
    parser.add_argument(
        "--curve",
        help="sizes, comma-separated (1000000,3000000,10000000): each on a ZooKeeper of its "
        "own, with the reader, the first survey, 1 %% churn and the second survey",
    )
    parser.add_argument(
        "--standalone",
        help="sizes, comma-separated (100000,1000000): the first survey on a Spark "
        "standalone cluster of two workers (the suite's scale-out fixture), no reader",
    )
    parser.add_argument(
        "--no-reader", action="store_true", help="--curve without the reader (its figures only)"
    )
    parser.add_argument("--keep", action="store_true", help="keep ZooKeeper's data dir")
    parser.add_argument(
        "--ids",
        choices=ID_ORDERS,
        default="blocks",
        help="blocks: each managed ledger's ids together; counter: from one counter, every "
        "topic rolling over in turn, as Pulsar hands them out",
    )
    parser.add_argument("--child-reader", help=argparse.SUPPRESS)
    args = parser.parse_args()
    global ID_ORDER
    ID_ORDER = args.ids
    if args.child_reader:
        print(json.dumps(pipelined_reader(args.child_reader)), flush=True)
        return 0
    if args.standalone:
        return standalone([int(size) for size in args.standalone.split(",")], args.keep)
    if args.curve:
        sizes = [int(size) for size in args.curve.split(",")]
        if any(size < PER_ML * 10 or size % PER_ML for size in sizes):
            print("bk_scan.py: --curve sizes must be multiples of 100", file=sys.stderr)
            return 2
        points = []
        for size in sizes:
            heap = args.zk_heap if args.zk_heap != "3g" else curve_heap(size)
            reader, runs = measure(
                size, heap, args.budget, args.keep, curve=True, reader=not args.no_reader
            )
            points.append((size, reader, runs))
        return report_curve(points)
    size = QUICK_SIZE if args.quick else args.size
    if size < PER_ML * 10 or size % PER_ML or args.budget < 1:
        print("bk_scan.py: --size must be a multiple of 100, at least 1000", file=sys.stderr)
        return 2
    heap = "1g" if args.quick else args.zk_heap
    reader, runs = measure(size, heap, args.budget, args.keep, curve=False)
    return report(size, reader, runs, args.budget, args.quick)


def standalone(sizes: list[int], keep: bool) -> int:
    """Each size's first survey with a Spark standalone cluster's executors (two workers
    of one core, as the suite's ``spark_cluster``): the classes checked, the driver's
    peak (the command's process) and each worker's tree (its executor's JVM and Python
    workers) sampled apart."""
    from local_stack.spark_cluster import SparkStandaloneCluster

    base = _common.VAR / "bk-scan-standalone"
    shutil.rmtree(base, ignore_errors=True)
    cluster = SparkStandaloneCluster(base / "spark", executor_memory="768m")
    cluster.start()
    points = {}
    try:
        for size in sizes:
            runs: dict[str, dict[str, Any]] = {}
            samplers = [_common.TreeMemorySampler(worker._proc.pid) for worker in cluster.workers]
            for sampler in samplers:
                sampler.__enter__()
            try:
                measure(
                    size,
                    curve_heap(size),
                    DEFAULT_BUDGET,
                    keep,
                    curve=True,
                    reader=False,
                    env=cluster.driver_env(),
                    only_first=runs,
                )
            finally:
                for sampler in samplers:
                    sampler.__exit__(None, None, None)
            first = runs["first"]
            points[str(size)] = {
                "seconds": round(first["seconds"], 2),
                "classes": first["classes"],
                "executor_tasks": first["cost"].get("executor_tasks"),
                "driver_peak_mib": mib(first["peak_by_kind"].get("root", 0)),
                "driver_tree_peak_mib": mib(first["peak_tree_rss_bytes"]),
                "worker_tree_peaks_mib": [mib(s.peak_total) for s in samplers],
                "zk_reads": first["zookeeper"]["reads"],
            }
            say(f"standalone {size:,}: {json.dumps(points[str(size)])}")
    finally:
        cluster.stop()
    print(json.dumps({"benchmark": "bk_scan_standalone", "points": points}))
    return 0


def curve_heap(size: int) -> str:
    """ZooKeeper's heap for a tree of ``size`` ledgers: about 550 bytes a znode
    (measured: 1M fits in 3g with room), and a GiB to spare."""
    return f"{max(3, -(-size * 800 // 1_000_000_000) + 1)}g"


def measure(
    size: int,
    heap: str,
    budget: int,
    keep: bool,
    *,
    curve: bool,
    reader: bool = True,
    env: dict[str, str] | None = None,
    only_first: dict[str, dict[str, Any]] | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """One size, on a ZooKeeper of its own: the tree built, the reader, then the
    commands (``curve``: the first and second surveys only; else also the full read and
    the budget's run)."""
    directory = _common.VAR / "bk-scan"
    shutil.rmtree(directory, ignore_errors=True)
    server = sized_server(directory, heap)
    say(f"starting ZooKeeper (-Xmx{heap}) in {directory / 'zookeeper'}")
    server.start()
    runs: dict[str, dict[str, Any]] = {} if only_first is None else only_first
    extra = env or {}
    try:
        chroot = f"/bench-bk-scan-{_common.run_tag()}"
        settings = _common.Settings(zk_address=f"{server.hosts}{chroot}", bucket="")
        hosts = settings.zk_hosts

        def served() -> int:
            return served_bytes(server, chroot)

        _common.create_chroot(settings)
        with _common.kazoo_client(settings) as client:
            import pulsar_cluster

            cluster = pulsar_cluster.PulsarCluster(client).init(idgen=False)
            cluster.namespace(NAMESPACE)
            client.ensure_path(f"/managed-ledgers/{NAMESPACE}/persistent")
            want = expected(size)
            say(f"writing {size:,} ledgers, {want['managed_ledgers']:,} managed ledgers")
            build_s = build(client, size // PER_ML)
            say(f"  built in {build_s:.1f} s; ZooKeeper JVM RSS {mib(server_rss(server)):,.0f} MiB")

            base: dict[str, Any] = {"build_s": build_s, "zk_rss_bytes": server_rss(server)}
            if reader:
                say("the pipelined reader (kazoo get_async + decode), every ledger")
                before = served()
                base |= run_reader(hosts)
                base["served_bytes"] = served() - before
                say(
                    f"  {base['seconds']:.1f} s ({base['ledgers']:,} ledgers, listing "
                    f"{base['listing_s']:.1f} s), peak RSS {mib(base['peak_rss_bytes']):,.0f} MiB"
                )
                if base["ledgers"] != size:
                    raise SystemExit(f"the reader listed {base['ledgers']} of {size} ledgers")

            if not curve:
                say("the full read: ledgergc orphans --dry-run --json, record cache off")
                runs["full"] = run_command(
                    hosts,
                    directory / "state-full",
                    "full",
                    served,
                    LEDGERGC_BK_RECORD_CACHE="false",
                )
                check(runs["full"], want)
                say(f"  {describe(runs['full'])}")
            say("the first survey: the same command, record cache on, empty state store")
            runs["first"] = run_command(hosts, directory / "state", "first", served, **extra)
            check(runs["first"], want)
            say(f"  {describe(runs['first'])}")
            if only_first is not None:
                return base, runs

            next_id = size
            new, deleted, next_id = churn(client, size, 0, next_id)
            say(f"churn: {new:,} new ledgers, {deleted:,} deleted")
            runs["second"] = run_command(hosts, directory / "state", "second", served)
            check(runs["second"], want)
            say(f"the second survey: {describe(runs['second'])}")

            if not curve:
                new, deleted, next_id = churn(client, size, 1, next_id)
                say(f"churn: {new:,} new ledgers, {deleted:,} deleted; a budget of {budget:,}/s")
                runs["budget"] = run_command(
                    hosts,
                    directory / "state",
                    "budget",
                    served,
                    LEDGERGC_ZK_MAX_READS_PER_SECOND=str(budget),
                )
                check(runs["budget"], want)
                say(f"under the budget: {describe(runs['budget'])}")
            base["zk_rss_end_bytes"] = server_rss(server)
    finally:
        server.stop()
        if not keep:
            shutil.rmtree(directory / "zookeeper", ignore_errors=True)
    return base, runs


def report(
    size: int,
    reader: dict[str, Any],
    runs: dict[str, dict[str, Any]],
    budget: int,
    quick: bool,
) -> int:
    full, first, second, bounded = runs["full"], runs["first"], runs["second"], runs["budget"]
    speedup = ratio(reader["seconds"], first["seconds"])
    first_reads = first["zookeeper"]["reads"]
    second_share = second["zookeeper"]["reads"] / first_reads if first_reads else 1.0
    peak = bounded["zookeeper"]["peak_per_second"]
    over = peak / budget - 1
    rows = [
        (
            f"first survey of {size:,} ledgers, whole command",
            fmt_s(first["seconds"]),
            fmt_s(reader["seconds"]),
            f"{speedup:.2f}x",
        ),
        ("  its survey step", fmt_s(first["survey_s"]), "", ""),
        ("  ledgers per second (command)", fmt_rate(size / first["seconds"]), "", ""),
        (
            "full read (cache off), whole command",
            fmt_s(full["seconds"]),
            fmt_s(reader["seconds"]),
            f"{ratio(reader['seconds'], full['seconds']):.2f}x",
        ),
        ("  its survey step", fmt_s(full["survey_s"]), "", ""),
        ("second survey (1 % new, 1 % deleted), command", fmt_s(second["seconds"]), "", ""),
        ("  its survey step", fmt_s(second["survey_s"]), "", ""),
        (
            "  znodes read by the cycle, second / first",
            f"{second['zookeeper']['reads']:,}",
            f"{first_reads:,}",
            f"{second_share:.1%}",
        ),
        (
            "  ledger records read / from the cache",
            f"{second['cost']['records_read']:,}",
            f"{second['cost']['records_cached']:,}",
            "",
        ),
        (
            f"budget {budget:,}/s: peak reads in one second",
            f"{peak:,}",
            f"{budget:,}",
            f"{over:+.1%}",
        ),
        ("  its command", fmt_s(bounded["seconds"]), "", ""),
        (
            "peak memory, process tree (first survey)",
            f"{mib(first['peak_tree_rss_bytes']):,.0f} MiB",
            f"{mib(reader['peak_rss_bytes']):,.0f} MiB",
            "",
        ),
    ]
    targets = [
        (
            f"first survey, whole command <= {TARGET_FIRST_S:.0f} s",
            first["seconds"] <= TARGET_FIRST_S,
        ),
        (f"first survey >= {TARGET_RATIO:.0f}x the pipelined reader", speedup >= TARGET_RATIO),
        (
            f"second survey reads <= {TARGET_SECOND_READS:.0%} of the first's",
            second_share <= TARGET_SECOND_READS,
        ),
        (
            f"second survey, whole command <= {TARGET_SECOND_S:.0f} s",
            second["seconds"] <= TARGET_SECOND_S,
        ),
        (
            f"peak rate within {TARGET_BUDGET_OVER:.0%} of the budget",
            peak <= budget * (1 + TARGET_BUDGET_OVER),
        ),
    ]
    if size != TARGET_SIZE:
        print(f"(the targets are for {TARGET_SIZE:,} ledgers; this run: {size:,})")

    def brief(run: dict[str, Any]) -> dict[str, Any]:
        return {
            "seconds": round(run["seconds"], 2),
            "survey_s": round(run["survey_s"], 2),
            "cycle_zk_reads": run["zookeeper"]["reads"],
            "cycle_zk_peak": run["zookeeper"]["peak_per_second"],
            "survey_zk_reads": run["cost"]["zk_reads"],
            "records_read": run["cost"]["records_read"],
            "records_cached": run["cost"]["records_cached"],
            "survey_seconds": run["cost"]["seconds"],
            "peak_tree_rss_mib": mib(run["peak_tree_rss_bytes"]),
            "peak_by_kind_mib": {k: mib(v) for k, v in run["peak_by_kind"].items()},
            "load_before": round(run["load_before"], 2),
        }

    _common.report(
        "bk_scan",
        rows,
        targets,
        {
            "items": size,
            "quick": quick,
            "budget": budget,
            "reader": {
                "seconds": round(reader["seconds"], 2),
                "listing_s": round(reader["listing_s"], 2),
                "peak_rss_mib": mib(reader["peak_rss_bytes"]),
                "window": READER_WINDOW,
            },
            "ratio": speedup,
            "second_read_share": round(second_share, 4),
            "budget_peak": peak,
            "runs": {name: brief(run) for name, run in runs.items()},
        },
    )
    return 0


def report_curve(points: list[tuple[int, dict[str, Any], dict[str, dict[str, Any]]]]) -> int:
    """The curve: each size's first and second survey beside its reader, and each
    against the smallest size (time per ledger, the driver's peak)."""
    base_size, _, base_runs = points[0]
    base_first = base_runs["first"]
    rows = []
    targets = []
    result: dict[str, Any] = {"curve": {}}
    for size, reader, runs in points:
        first, second = runs["first"], runs["second"]
        kinds = first["peak_by_kind"]
        speedup = ratio(reader["seconds"], first["seconds"]) if "seconds" in reader else 0.0
        growth = size / base_size
        time_ratio = first["seconds"] / base_first["seconds"]
        driver_ratio = kinds.get("root", 0) / max(1, base_first["peak_by_kind"].get("root", 1))
        share = second["zookeeper"]["reads"] / max(1, first["zookeeper"]["reads"])
        name = f"{size:,}"
        rows += [
            (
                f"{name}: first survey, whole command",
                fmt_s(first["seconds"]),
                fmt_s(reader["seconds"]) if "seconds" in reader else "(no reader)",
                f"{speedup:.2f}x",
            ),
            (
                f"{name}:   x the {base_size:,} command / x ledgers",
                f"{time_ratio:.2f}x",
                f"{growth:.1f}x",
                "",
            ),
            (
                f"{name}:   ZooKeeper reads / response bytes",
                f"{first['zookeeper']['reads']:,}",
                f"{mib(first['served_bytes']):,.0f} MiB",
                "",
            ),
            (
                f"{name}:   peak driver / worker / JVM",
                f"{mib(kinds.get('root', 0)):,.0f} MiB",
                f"{mib(kinds.get('python_worker', 0)):,.0f} MiB",
                f"{mib(kinds.get('jvm', 0)):,.0f}",
            ),
            (
                f"{name}:   peak process tree / reader",
                f"{mib(first['peak_tree_rss_bytes']):,.0f} MiB",
                f"{mib(reader.get('peak_rss_bytes', 0)):,.0f} MiB",
                "",
            ),
            (
                f"{name}: second survey (1 % churn), command",
                fmt_s(second["seconds"]),
                fmt_s(first["seconds"]),
                f"{second['seconds'] / first['seconds']:.2f}x",
            ),
            (
                f"{name}:   its ZooKeeper reads / response bytes",
                f"{second['zookeeper']['reads']:,}",
                f"{mib(second['served_bytes']):,.0f} MiB",
                f"{share:.1%}",
            ),
        ]
        if "seconds" in reader:
            targets.append((f"{name}: first survey >= 3x the pipelined reader", speedup >= 3.0))
        targets += [
            (
                f"{name}: second survey <= half the first's time",
                second["seconds"] <= first["seconds"] / 2,
            ),
            (f"{name}: second survey reads <= 5% of the first's", share <= 0.05),
            (f"{name}: process tree <= 4 GiB", first["peak_tree_rss_bytes"] <= 4 * 2**30),
        ]
        if size != base_size:
            targets += [
                (f"{name}: time <= 1.1x linear from {base_size:,}", time_ratio <= 1.1 * growth),
                (f"{name}: driver peak <= 1.5x {base_size:,}'s", driver_ratio <= 1.5),
            ]
        result["curve"][str(size)] = {
            "reader": {k: v for k, v in reader.items() if k != "peak_rss_bytes"}
            | {"peak_rss_mib": mib(reader.get("peak_rss_bytes", 0))},
            "ratio": round(speedup, 3),
            "time_vs_base": round(time_ratio, 3),
            "driver_vs_base": round(driver_ratio, 3),
            "second_read_share": round(share, 4),
            "runs": {
                label: {
                    "seconds": round(run["seconds"], 2),
                    "survey_seconds": run["cost"]["seconds"],
                    "zk_reads": run["zookeeper"]["reads"],
                    "served_mib": mib(run["served_bytes"]),
                    "records_read": run["cost"]["records_read"],
                    "records_cached": run["cost"]["records_cached"],
                    "executor_tasks": run["cost"].get("executor_tasks"),
                    "executor_seconds": run["cost"].get("executor_seconds"),
                    "peak_tree_mib": mib(run["peak_tree_rss_bytes"]),
                    "peak_by_kind_mib": {k: mib(v) for k, v in run["peak_by_kind"].items()},
                    "load": [round(run["load_before"], 2), round(run["load_after"], 2)],
                }
                for label, run in runs.items()
            },
        }
    _common.report("bk_scan_curve", rows, targets, result)
    return 0


# --- the server ---------------------------------------------------------------------------


def sized_server(directory: Path, heap: str) -> Any:
    """The bench's ZooKeeper, set up for a tree of millions: ``heap``; a snapshot every
    ``SNAP_COUNT`` transactions (the build's multi-creates are one each: a 10M tree is
    about 10,000, so it is written about once, not a 3 GB snapshot every 100,000
    writes); old snapshots and logs purged (autopurge, 3 kept), and the data dir removed
    after the run (its disk use bounded by about two snapshots and the logs since)."""
    from local_stack.zookeeper import ZooKeeperServer

    class SizedZooKeeper(ZooKeeperServer):
        def _config_lines(self) -> list[str]:
            return [
                *super()._config_lines(),
                f"snapCount={SNAP_COUNT}",
                "autopurge.snapRetainCount=3",
                "autopurge.purgeInterval=1",
            ]

    return SizedZooKeeper(directory / "zookeeper", log_dir=directory / "logs", heap=heap)


#: ZooKeeper's snapCount for the bench (its default is 100,000).
SNAP_COUNT = 200_000


def served_bytes(server: Any, chroot: str) -> int:
    """Response bytes ZooKeeper sent for reads under ``chroot`` so far (``mntr``'s
    ``read_per_namespace`` summary of the chroot's first level; 0 if not reported)."""
    namespace = chroot.strip("/").split("/")[0]
    try:
        text = server.four_letter_word("mntr", timeout=10.0)
    except Exception:
        return 0
    for line in text.splitlines():
        if f'read_per_namespace{{key="{namespace}"}}_sum' in line or (
            "read_per_namespace" in line and namespace in line and "_sum" in line
        ):
            return int(float(line.split()[-1]))
    return 0


def server_rss(server: Any) -> int:
    """The resident memory of the ZooKeeper JVM."""
    import psutil

    proc = getattr(server, "_proc", None)
    try:
        for child in psutil.Process(proc.pid).children(recursive=True) if proc else []:
            if child.name() == "java":
                return int(child.memory_info().rss)
    except psutil.Error:
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
