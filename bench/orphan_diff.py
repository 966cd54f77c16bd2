#!/usr/bin/env python3
"""Figure 1: the Spark orphan diff over an S3 Inventory of ``--objects`` objects, its time
and driver memory, its scaling from a tenth of the size, and a single-process Python
set difference over the same input as the baseline.

The input is generated (vectorised, pyarrow) under ``var/bench/orphan-diff/<objects>/``
and reused while its parameters match:

* ``inventory/part-*.parquet``: an S3 Inventory-style Parquet report (``bucket``,
  ``key``, ``size``, ``last_modified_date``, ``storage_class``) of ``--objects`` keys in
  the store's layout, ``--blocks-per-ledger`` blocks per ledger and
  ``--ledgers-per-ml`` ledgers per managed ledger (10M objects: 1M ledgers in 100,000
  managed ledgers), of which 1 % are orphans (0.9 % in orphan ledgers, 0.1 % in orphan
  partitions, i.e. managed ledgers with no znode) and 0.1 % are foreign keys; 0.1 % of
  the ledgers are marked deletable;
* the metadata snapshot of the same store, as the snapshot step writes it
  (``snapshot/`` Parquet rows ``entry_type, ml_name, ledger_id`` and its manifest).

Spark runs in a child process (``local[*]``, ``spark.driver.memory`` = ``--driver-memory``)
exactly as the orphan cycle does: ``survey_steps.step_scan`` with the inventory,
then ``survey_steps.step_diff``. The resident memory of that process tree (the Python driver and its
JVM) is sampled every 0.1 s. The baseline runs in another child: it loads every key into
memory and computes ``ledger directories seen - ledger directories referenced`` with
Python sets (``keys.parse_key`` per key), under an address-space cap of
``--baseline-mem-gb``; where it runs out of memory the output says where it stopped.
Both results are checked against what the generator planted.

    .venv/bin/python bench/orphan_diff.py [--objects 10000000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common
from _common import fmt_s, mib, ratio, say

from ledger_gc.config.edge import resolve

TARGET_SECONDS = 30.0
TARGET_RATIO = 2.0
TARGET_DRIVER_BYTES = 2 * 2**30
TARGET_SCALING = 12.0
GENERATOR_VERSION = 1
BUCKET = "ledger-gc"
PREFIX = "ledgers"
ROWS_PER_FILE = 1_000_000
RUN_ID = "bench"


# --- the input ------------------------------------------------------------------------


def plan(objects: int, blocks_per_ledger: int, ledgers_per_ml: int) -> dict[str, Any]:
    ledgers = max(1, objects // blocks_per_ledger)
    mls = max(1, ledgers // ledgers_per_ml)
    return {
        "version": GENERATOR_VERSION,
        "objects": ledgers * blocks_per_ledger,
        "ledgers": ledgers,
        "mls": mls,
        "blocks_per_ledger": blocks_per_ledger,
        "ledgers_per_ml": ledgers_per_ml,
        # every 1000th ML has no znode (0.1 % of the objects are in orphan partitions),
        # 9 in 1000 ledgers are neither listed nor marked (0.9 % in orphan ledgers),
        # 1 in 1000 ledgers is marked, 1 in 1000 objects is a foreign key.
        "partition_every": 1000,
        "orphan_ledger_per_mille": 9,
        "marked_per_mille": 1,
        "foreign_every": 1000,
    }


def ml_name(index: Any) -> Any:
    """Names over 10 tenants x 10 namespaces (vectorised over a numpy array)."""
    import numpy as np

    index = np.asarray(index)
    return np.char.add(
        np.char.add(
            np.char.add("t", (index % 10).astype(str)),
            np.char.add("/ns", ((index // 10) % 10).astype(str)),
        ),
        np.char.add("/persistent/topic-", np.char.zfill(index.astype(str), 7)),
    )


def classify_plan(p: dict[str, Any]) -> dict[str, Any]:
    """Which ledgers are orphan, marked, in an orphan partition (numpy masks)."""
    import numpy as np

    ledger = np.arange(p["ledgers"], dtype=np.int64)
    ml = ledger // p["ledgers_per_ml"]
    partition = (ml % p["partition_every"]) == p["partition_every"] - 1
    slot = (ledger * 7919) % 1000  # a spread-out, deterministic choice
    orphan = ~partition & (slot < p["orphan_ledger_per_mille"])
    marked = ~partition & ~orphan & (slot >= 1000 - p["marked_per_mille"])
    return {"ml": ml, "partition": partition, "orphan": orphan, "marked": marked}


def generate(directory: Path, p: dict[str, Any]) -> dict[str, Any]:
    """Write the inventory and the snapshot; return what was planted (the expected diff)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from ledger_gc.orphans.layout import SNAPSHOT, RunPaths
    from ledger_gc.orphans.run_steps import RunSteps
    from ledger_gc.s3_orphans import reading

    meta_path = directory / "meta.json"
    if meta_path.exists() and json.loads(meta_path.read_text()).get("plan") == p:
        say(f"input exists: {directory}")
        return dict(json.loads(meta_path.read_text())["expected"])
    shutil.rmtree(directory, ignore_errors=True)
    inventory = directory / "inventory"
    inventory.mkdir(parents=True)
    started = time.perf_counter()
    masks = classify_plan(p)
    names = ml_name(np.arange(p["mls"]))
    ml_prefixes = pa.array(np.char.add(np.char.add(f"{PREFIX}/", names), "/ledgers/"))
    rng = np.random.default_rng(42)
    now_ms = int(time.time() * 1000)
    bpl = p["blocks_per_ledger"]
    foreign_total = 0
    files = 0
    for start in range(0, p["objects"], ROWS_PER_FILE):
        row = np.arange(start, min(start + ROWS_PER_FILE, p["objects"]), dtype=np.int64)
        ledger = row // bpl
        entry = (row % bpl) * 1000
        ml = masks["ml"][ledger]
        key = pc.binary_join_element_wise(
            pc.take(ml_prefixes, pa.array(ml)),
            pc.utf8_lpad(pc.cast(pa.array(ledger + 1), pa.string()), 20, "0"),
            pa.scalar("/"),
            pc.utf8_lpad(pc.cast(pa.array(entry), pa.string()), 20, "0"),
            pa.scalar(".blk"),
            "",
        )
        # Foreign keys: a temp file beside a block, a 19-digit ledger id, stray files.
        foreign = (row % p["foreign_every"]) == p["foreign_every"] // 2
        kind = (row // p["foreign_every"]) % 3
        stray = pc.binary_join_element_wise(
            pa.scalar(f"{PREFIX}/"), pa.array(names[ml]), pa.scalar("/schema.json"), ""
        )
        short_id = pc.binary_join_element_wise(
            pc.take(ml_prefixes, pa.array(ml)),
            pc.utf8_lpad(pc.cast(pa.array(ledger + 1), pa.string()), 19, "0"),
            pa.scalar("/00000000000000000000.blk"),
            "",
        )
        tmp = pc.binary_join_element_wise(key, pa.scalar(".tmp"), "")
        foreign_key = pc.if_else(
            pa.array(kind == 0), tmp, pc.if_else(pa.array(kind == 1), short_id, stray)
        )
        key = pc.if_else(pa.array(foreign), foreign_key, key)
        foreign_total += int(foreign.sum())
        table = pa.table(
            {
                "bucket": pa.DictionaryArray.from_arrays(
                    pa.array(np.zeros(len(row), dtype=np.int32)), pa.array([BUCKET])
                ),
                "key": key,
                "size": pa.array(rng.integers(1 << 19, 1 << 21, len(row)), pa.int64()),
                "last_modified_date": pa.array(
                    now_ms - rng.integers(8 * 86_400_000, 60 * 86_400_000, len(row)),
                    pa.timestamp("ms", tz="UTC"),
                ),
                "storage_class": pa.DictionaryArray.from_arrays(
                    pa.array(np.zeros(len(row), dtype=np.int32)), pa.array(["STANDARD"])
                ),
            }
        )
        pq.write_table(table, inventory / f"part-{files:05d}.parquet", row_group_size=256_000)
        files += 1
    say(
        f"inventory: {p['objects']:,} objects in {files} files "
        f"({sum(f.stat().st_size for f in inventory.iterdir()) / 2**20:,.0f} MiB) "
        f"in {time.perf_counter() - started:.1f}s"
    )

    # The snapshot, as step_snapshot leaves it: one ml row per existing managed ledger,
    # one row per listed and per marked ledger.
    ledger_ids = np.arange(p["ledgers"], dtype=np.int64) + 1
    existing_ml = np.ones(p["mls"], dtype=bool)
    existing_ml[(np.arange(p["mls"]) % p["partition_every"]) == p["partition_every"] - 1] = False
    listed = ~masks["partition"] & ~masks["orphan"] & ~masks["marked"]
    kinds = [
        (reading.ML_ROW, names[existing_ml], None),
        (reading.LISTED_ROW, names[masks["ml"][listed]], ledger_ids[listed]),
        (reading.MARKED_ROW, names[masks["ml"][masks["marked"]]], ledger_ids[masks["marked"]]),
    ]
    run = RunPaths(directory / "state", RUN_ID)
    snapshot_dir = run.data(SNAPSHOT)
    snapshot_dir.mkdir(parents=True)
    schema = pa.schema(
        [("entry_type", pa.string()), ("ml_name", pa.string()), ("ledger_id", pa.int64())]
    )
    for index, (entry_type, ml_names, ids) in enumerate(kinds):
        table = pa.table(
            {
                "entry_type": pa.array([entry_type] * len(ml_names), pa.string()),
                "ml_name": pa.array(ml_names, pa.string()),
                "ledger_id": pa.array(ids, pa.int64())
                if ids is not None
                else pa.nulls(len(ml_names), pa.int64()),
            },
            schema=schema,
        )
        pq.write_table(table, snapshot_dir / f"part-{index:05d}.parquet")
    RunSteps(directory / "state", RUN_ID).write_manifest(
        SNAPSHOT,
        {
            "started_ms": now_ms,
            "finished_ms": now_ms,
            "managed_ledgers": int(existing_ml.sum()),
            "listed_ledgers": int(listed.sum()),
            "markers": int(masks["marked"].sum()),
            "managed_ledgers_listed": int(existing_ml.sum()),
            "shards": 0,
            "generated_by": "bench/orphan_diff.py",
        },
    )
    # What the diff must find. Foreign rows replace blocks, so a ledger whose blocks were
    # all replaced would vanish; with foreign_every >= blocks_per_ledger that cannot be.
    foreign_row = (np.arange(p["objects"]) % p["foreign_every"]) == p["foreign_every"] // 2
    block_ledger = (np.arange(p["objects"], dtype=np.int64) // bpl)[~foreign_row]
    orphan_objects = int(masks["orphan"][block_ledger].sum())
    partition_objects = int(masks["partition"][block_ledger].sum())
    expected = {
        "objects": p["objects"],
        "managed_ledgers": int(existing_ml.sum()),
        "orphan_ledgers": int(masks["orphan"].sum()),
        "orphan_ledger_objects": orphan_objects,
        "orphan_partitions": int((~existing_ml).sum()),
        "orphan_partition_objects": partition_objects,
        "foreign_objects": foreign_total,
        "marked_ledgers": int(masks["marked"].sum()),
    }
    meta_path.write_text(json.dumps({"plan": p, "expected": expected}, indent=1))
    say(
        f"snapshot: {expected['managed_ledgers']:,} managed ledgers, "
        f"{int(listed.sum()):,} listed and {expected['marked_ledgers']:,} marked ledgers; "
        f"planted {expected['orphan_ledgers']:,} orphan ledgers, "
        f"{expected['orphan_partitions']:,} orphan partitions, "
        f"{foreign_total:,} foreign keys"
    )
    return expected


# --- the children -----------------------------------------------------------------------


def child_spark(directory: Path) -> dict[str, Any]:
    """Runs in the child: the scan (inventory) and diff steps of the orphan cycle."""
    from ledger_gc.config.settings import Settings
    from ledger_gc.metadata import id_counter
    from ledger_gc.orphans import survey_steps, witness
    from ledger_gc.orphans.layout import SNAPSHOT, RunPaths
    from ledger_gc.rules.orphans.classify import FOREIGN, ORPHAN_LEDGER, ORPHAN_PARTITION
    from ledger_gc.rules.orphans.timekeeping import Instant
    from ledger_gc.spark.session import local_session

    settings = Settings(bucket=BUCKET, prefix=PREFIX, state_dir=directory / "state")
    # This figure is the diff over an inventory: there is no ZooKeeper and no S3, so no
    # ledger-id counter to read (the scan then has only the managed ledgers' own lists
    # as evidence) and no server clock (the host's stands in; nothing is deleted here).
    id_counter.read_id_counter = lambda _zk: None
    witness.ServerClocks.observe = lambda _self, _zk, clock, _blocks=None: witness.Observation(  # type: ignore[method-assign]
        1, Instant(clock(), clock(), clock())
    )
    started = time.perf_counter()
    spark = local_session("ledger-gc-bench-orphan-diff")
    session_s = time.perf_counter() - started
    try:
        # The snapshot as the survey's snapshot step leaves it: held on the executors
        # (survey_steps.hold: a checkpoint), before the clocks start.
        run = RunPaths(settings.state_dir, RUN_ID)
        survey_steps.hold(run, SNAPSHOT, spark.read.parquet(run.data_uri(SNAPSHOT)))
        started = time.perf_counter()
        scan = survey_steps.step_scan(
            resolve(settings), RUN_ID, spark, inventory=str(directory / "inventory")
        )
        scan_s = time.perf_counter() - started
        started, cpu = time.perf_counter(), _common.tree_cpu_seconds()
        diff = survey_steps.step_diff(resolve(settings), RUN_ID, spark)
        diff_s = time.perf_counter() - started
        diff_cpu_s = _common.tree_cpu_seconds() - cpu
        conf = spark.sparkContext.getConf()
        driver_memory = conf.get("spark.driver.memory", "default")
        master = spark.sparkContext.master
    finally:
        spark.stop()
    classes = diff.classes
    return {
        "session_s": session_s,
        "scan_s": scan_s,
        "diff_s": diff_s,
        "diff_cpu_s": diff_cpu_s,
        "objects": scan.objects,
        "orphan_ledgers": classes[ORPHAN_LEDGER]["units"],
        "orphan_ledger_objects": classes[ORPHAN_LEDGER]["objects"],
        "orphan_partitions": classes[ORPHAN_PARTITION]["units"],
        "orphan_partition_objects": classes[ORPHAN_PARTITION]["objects"],
        "foreign_objects": classes[FOREIGN]["objects"],
        "candidates": diff.candidates,
        "driver_memory": driver_memory,
        "master": master,
    }


def child_python(directory: Path) -> dict[str, Any]:
    """Runs in the child: the plain single-process set difference (the baseline)."""
    import pyarrow.parquet as pq

    from ledger_gc.orphans.layout import SNAPSHOT, RunPaths
    from ledger_gc.rules.storage import keys
    from ledger_gc.s3_orphans import reading

    stage = "reading the snapshot"
    result: dict[str, Any] = {}
    started = time.perf_counter()
    try:
        snapshot = pq.read_table(RunPaths(directory / "state", RUN_ID).data(SNAPSHOT)).to_pylist()
        managed_ledgers = {r["ml_name"] for r in snapshot if r["entry_type"] == reading.ML_ROW}
        referenced = {
            keys.ledger_dir(PREFIX, r["ml_name"], r["ledger_id"])
            for r in snapshot
            if r["entry_type"] != reading.ML_ROW
        }
        del snapshot
        stage = "loading every key"
        all_keys: list[str] = []
        for path in sorted((directory / "inventory").glob("*.parquet")):
            all_keys.extend(pq.read_table(path, columns=["key"]).column("key").to_pylist())
        result["keys_loaded"] = len(all_keys)
        stage = "parsing every key into the set of ledger directories"
        seen: set[str] = set()
        objects_in: dict[str, int] = {}
        foreign = 0
        for key in all_keys:
            parsed = keys.parse_key(PREFIX, key)
            if not parsed.is_block:
                foreign += 1
                continue
            directory_key = key[: len(key) - len(parsed.block or "")]
            seen.add(directory_key)
            objects_in[directory_key] = objects_in.get(directory_key, 0) + 1
        stage = "the set difference"
        orphans = seen - referenced
        orphan_ledgers = {
            d for d in orphans if d.split("/ledgers/")[0][len(PREFIX) + 1 :] in managed_ledgers
        }
        partitions = {d.split("/ledgers/")[0] for d in orphans - orphan_ledgers}
        result.update(
            {
                "completed": True,
                "objects": len(all_keys),
                "orphan_ledgers": len(orphan_ledgers),
                "orphan_ledger_objects": sum(objects_in[d] for d in orphan_ledgers),
                "orphan_partitions": len(partitions),
                "orphan_partition_objects": sum(objects_in[d] for d in orphans - orphan_ledgers),
                "foreign_objects": foreign,
            }
        )
    except MemoryError:
        result.update({"completed": False, "stopped_at": stage})
    result["seconds"] = time.perf_counter() - started
    result["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return result


def run_child(
    mode: str, directory: Path, env: dict[str, str], cap_bytes: int | None = None
) -> tuple[dict[str, Any], _common.TreeMemorySampler, float]:
    """Run this script as a child, sample its process tree, return its JSON line."""
    command = [sys.executable, __file__, f"--child-{mode}", str(directory)]
    if cap_bytes:
        command += ["--cap-bytes", str(cap_bytes)]
    started = time.perf_counter()
    child = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    with child, _common.TreeMemorySampler(child.pid) as sampler:
        out, _ = child.communicate()
    wall = time.perf_counter() - started
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        raise SystemExit(f"the {mode} child failed (exit {child.returncode}):\n{out[-3000:]}")
    return json.loads(lines[-1]), sampler, wall


def measure(directory: Path, args: argparse.Namespace, expected: dict[str, Any]) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYSPARK_SUBMIT_ARGS"] = f"--driver-memory {args.driver_memory} pyspark-shell"
    say(f"Spark diff over {expected['objects']:,} objects (driver memory {args.driver_memory})")
    spark, sampler, wall = run_child("spark", directory, env)
    say(
        f"  session {spark['session_s']:.1f}s, scan step {spark['scan_s']:.1f}s, diff step "
        f"{spark['diff_s']:.1f}s (CPU {spark['diff_cpu_s']:.1f}s); child {wall:.1f}s; "
        f"peak RSS {mib(sampler.peak_total):,.0f} MiB "
        f"(JVM {mib(sampler.peak_by_kind.get('jvm', 0)):,.0f}, Python "
        f"{mib(sampler.peak_by_kind.get('python', 0)):,.0f}) {' '.join(sampler.jvm_args)}"
    )
    check("Spark diff", spark, expected)
    python: dict[str, Any] | None = None
    if not args.no_baseline:
        say(
            f"Python set difference over {expected['objects']:,} objects "
            f"(address space capped at {args.baseline_mem_gb} GB)"
        )
        python, py_sampler, _ = run_child(
            "python", directory, env, cap_bytes=int(args.baseline_mem_gb * 2**30)
        )
        python["peak_rss_bytes"] = max(python["peak_rss_bytes"], py_sampler.peak_total)
        if python.get("completed"):
            check("Python baseline", python, expected)
            say(f"  {python['seconds']:.1f}s, peak RSS {mib(python['peak_rss_bytes']):,.0f} MiB")
        else:
            say(
                f"  ran out of memory after {python['seconds']:.1f}s while {python['stopped_at']} "
                f"(peak RSS {mib(python['peak_rss_bytes']):,.0f} MiB)"
            )
    return {
        "objects": expected["objects"],
        "spark": spark,
        "wall_s": wall,
        "peak_rss_bytes": sampler.peak_total,
        "peak_jvm_bytes": sampler.peak_by_kind.get("jvm", 0),
        "peak_python_bytes": sampler.peak_by_kind.get("python", 0),
        "jvm_args": sampler.jvm_args,
        "python": python,
    }


def check(label: str, got: dict[str, Any], expected: dict[str, Any]) -> None:
    fields = (
        "orphan_ledgers",
        "orphan_ledger_objects",
        "orphan_partitions",
        "orphan_partition_objects",
        "foreign_objects",
    )
    wrong = {f: (got[f], expected[f]) for f in fields if got[f] != expected[f]}
    if wrong:
        raise SystemExit(f"{label} found the wrong orphans (got, expected): {wrong}")
    say(
        f"  {label}: found exactly what was planted ({got['orphan_ledgers']:,} orphan ledgers, "
        f"{got['orphan_partitions']:,} orphan partitions, {got['foreign_objects']:,} foreign)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=10_000_000)
    parser.add_argument("--blocks-per-ledger", type=int, default=10)
    parser.add_argument("--ledgers-per-ml", type=int, default=10)
    parser.add_argument(
        "--scale-from",
        type=int,
        default=10,
        help="also run at objects/N to measure scaling (0: skip)",
    )
    parser.add_argument("--driver-memory", default="1g", help="spark.driver.memory")
    parser.add_argument(
        "--baseline-mem-gb",
        type=float,
        default=8.0,
        help="address-space cap of the Python baseline",
    )
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--quick", action="store_true", help="20,000 objects, no scaling run")
    parser.add_argument("--child-spark", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-python", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cap-bytes", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_spark or args.child_python:
        if args.cap_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (args.cap_bytes, args.cap_bytes))
        result = (
            child_spark(args.child_spark) if args.child_spark else child_python(args.child_python)
        )
        print(json.dumps(result), flush=True)
        return 0
    if args.quick:
        args.objects = min(args.objects, 20_000)
        args.scale_from = 0

    sizes = [args.objects]
    if args.scale_from > 1:
        sizes.insert(0, args.objects // args.scale_from)
    runs = []
    for objects in sizes:
        p = plan(objects, args.blocks_per_ledger, args.ledgers_per_ml)
        directory = _common.VAR / "orphan-diff" / str(p["objects"])
        expected = generate(directory, p)
        say(
            f"{p['objects']:,} objects over {p['ledgers']:,} ledgers in {p['mls']:,} managed "
            "ledgers"
        )
        runs.append(measure(directory, args, expected))

    full = runs[-1]
    small = runs[0] if len(runs) > 1 else None
    diff_s = full["spark"]["diff_s"]
    scaling = ratio(diff_s, small["spark"]["diff_s"]) if small else None
    base = full["python"]
    rows = [
        (
            "Spark diff step",
            fmt_s(diff_s),
            fmt_s(base["seconds"])
            if base and base.get("completed")
            else ("out of memory" if base else "-"),
            f"{ratio(base['seconds'], diff_s):.2f}x" if base and base.get("completed") else "",
        ),
        ("  CPU of the diff step (driver, executors)", fmt_s(full["spark"]["diff_cpu_s"]), "", ""),
        (
            "  + scan step (inventory) + session",
            fmt_s(full["spark"]["scan_s"] + full["spark"]["session_s"]),
            "",
            "",
        ),
        ("  whole child process", fmt_s(full["wall_s"]), "", ""),
        (
            "driver peak RSS (Python + JVM)",
            f"{mib(full['peak_rss_bytes']):,.0f} MiB",
            f"{mib(base['peak_rss_bytes']):,.0f} MiB" if base else "-",
            f"{ratio(base['peak_rss_bytes'], full['peak_rss_bytes']):.2f}x" if base else "",
        ),
        ("  of which the JVM", f"{mib(full['peak_jvm_bytes']):,.0f} MiB", "", ""),
    ]
    if small:
        rows.append(
            (
                f"scaling {small['objects']:,} -> {full['objects']:,} objects",
                f"{scaling:.2f}x",
                fmt_s(small["spark"]["diff_s"]),
                "",
            )
        )
    targets = [
        (
            f"diff of {full['objects']:,} objects <= {TARGET_SECONDS:.0f} s",
            diff_s <= TARGET_SECONDS,
        ),
        ("driver peak memory < 2 GB", full["peak_rss_bytes"] < TARGET_DRIVER_BYTES),
    ]
    if base:
        targets.append(
            (
                f"Spark diff >= {TARGET_RATIO:.0f}x faster than the Python set difference",
                not base.get("completed") or ratio(base["seconds"], diff_s) >= TARGET_RATIO,
            )
        )
    if small:
        targets.append(
            (
                f"10x the objects costs <= {TARGET_SCALING:.0f}x the time",
                scaling is not None and scaling <= TARGET_SCALING,
            )
        )
    _common.report(
        "orphan_diff",
        rows,
        targets,
        {
            "items": full["objects"],
            "quick": args.quick,
            "diff_s": round(diff_s, 2),
            "diff_cpu_s": round(full["spark"]["diff_cpu_s"], 2),
            "scan_s": round(full["spark"]["scan_s"], 2),
            "session_s": round(full["spark"]["session_s"], 2),
            "child_wall_s": round(full["wall_s"], 2),
            "driver_peak_rss_mib": mib(full["peak_rss_bytes"]),
            "driver_peak_jvm_mib": mib(full["peak_jvm_bytes"]),
            "driver_peak_python_mib": mib(full["peak_python_bytes"]),
            "driver_memory": args.driver_memory,
            "jvm_args": full["jvm_args"],
            "small_items": small["objects"] if small else None,
            "small_diff_s": round(small["spark"]["diff_s"], 2) if small else None,
            "small_driver_peak_rss_mib": mib(small["peak_rss_bytes"]) if small else None,
            "scaling": scaling,
            "baseline_completed": bool(base and base.get("completed")),
            "baseline_s": round(base["seconds"], 2) if base else None,
            "baseline_peak_rss_mib": mib(base["peak_rss_bytes"]) if base else None,
            "baseline_stopped_at": base.get("stopped_at") if base else None,
            "ratio": ratio(base["seconds"], diff_s) if base and base.get("completed") else None,
            "orphan_ledgers": full["spark"]["orphan_ledgers"],
            "orphan_partitions": full["spark"]["orphan_partitions"],
            "foreign_objects": full["spark"]["foreign_objects"],
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
