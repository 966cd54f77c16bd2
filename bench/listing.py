#!/usr/bin/env python3
"""Figure 5: the orphan scan's listing, keys listed per second by 1, 2, 4 and 8
concurrent listers, against one sequential lister, over ``--objects`` objects in
SeaweedFS.

* **the baseline**: one ListObjectsV2 pagination over the whole prefix, what
  ``aws s3 ls --recursive`` does: one request at a time, each continuing the last, each
  page parsed by botocore.
* **concurrent listers**: the scan's way (``spark.scan.scan_store``): the prefix split into
  namespace prefixes (``reading.discover_shards``, two delimiter levels), each listed
  by ``reading.list_prefixes`` (pages read by ``storage.list_pages``, without botocore's
  per-key parse); N listers take namespaces from a queue. A lister is a
  process, as a Spark executor's Python worker is (threads would share one GIL for the
  XML parsing). The split's own requests are inside the measured time.

Every run must list exactly ``--objects`` keys. Objects are empty blocks in the store's
layout (``--blocks-per-ledger`` per ledger, ``--ledgers-per-ml`` per managed ledger,
spread over ``--namespaces`` namespaces). Putting 200,000 objects takes minutes on this
machine, so the SeaweedFS server of this figure is its own, on a data directory kept in
``var/bench/listing/<objects>/`` and reused while the parameters match (``--fresh``
rebuilds it); it runs only while the command does.

    .venv/bin/python bench/listing.py [--objects 200000] [--listers 1,2,4,8] [--quick]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import _common
from _common import fmt_rate, fmt_s, ratio, say

from ledger_gc.config.edge import block_store

sys.path.insert(0, str(_common.ROOT / "include"))

TARGET_RATIO = 2.0
BUCKET = "bench-listing"
PREFIX = "ledgers"
LAYOUT_VERSION = 1

_settings: Any = None


def object_keys(objects: int, blocks: int, ledgers: int, namespaces: int) -> list[str]:
    """Block keys in the store's layout: managed ledgers round-robin over namespaces."""
    from ledger_gc.rules.storage.keys import block_key

    per_ml = blocks * ledgers
    found = []
    for index in range(objects):
        ml, within = divmod(index, per_ml)
        ledger, block = divmod(within, blocks)
        ns = ml % namespaces
        name = f"tenant-{ns % 8}/ns-{ns // 8}/persistent/topic-{ml:06d}"
        found.append(block_key(PREFIX, name, ml * ledgers + ledger + 1, block * 100))
    return found


def populate(client: Any, keys: list[str], threads: int) -> None:
    client.create_bucket(Bucket=BUCKET)
    done = 0
    started = time.perf_counter()
    with ThreadPoolExecutor(threads, thread_name_prefix="bench-put") as pool:
        for start in range(0, len(keys), 20_000):
            chunk = keys[start : start + 20_000]
            list(pool.map(lambda key: client.put_object(Bucket=BUCKET, Key=key, Body=b""), chunk))
            done += len(chunk)
            rate = done / (time.perf_counter() - started)
            say(f"  put {done:,} of {len(keys):,} objects ({rate:,.0f}/s)")


def sequential(settings: Any) -> int:
    """The baseline: one pagination over the whole prefix with botocore's paginator and
    its parse of every page, as ``aws s3 ls --recursive`` does (its client made already)."""
    from ledger_gc.s3_orphans import reading

    client = reading.storage_for(block_store(settings)).client
    paginator = client.get_paginator("list_objects_v2")
    return sum(
        len(page.get("Contents", ()))
        for page in paginator.paginate(Bucket=BUCKET, Prefix=settings.key_prefix)
    )


def _init_lister(settings: Any) -> None:
    """A lister process as a reused Spark Python worker is: its S3 client made."""
    from ledger_gc.s3_orphans import reading

    global _settings
    _settings = settings
    reading.storage_for(block_store(settings))


def _list_shard(shard: str) -> int:
    from ledger_gc.s3_orphans import reading

    return sum(1 for _ in reading.list_prefixes(block_store(_settings), [shard]))


def concurrent(settings: Any, pool: Any) -> tuple[int, int]:
    """The scan's listing: split into namespaces, then listed by the pool's processes."""
    from ledger_gc.s3_orphans import reading

    shards, loose = reading.discover_shards(block_store(settings))
    return sum(pool.imap_unordered(_list_shard, shards)) + len(loose), len(shards)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=200_000)
    parser.add_argument("--listers", default="1,2,4,8", help="concurrent listers to measure")
    parser.add_argument("--blocks-per-ledger", type=int, default=10)
    parser.add_argument("--ledgers-per-ml", type=int, default=10)
    parser.add_argument("--namespaces", type=int, default=64)
    parser.add_argument("--put-threads", type=int, default=32)
    parser.add_argument("--fresh", action="store_true", help="rebuild the cached store")
    parser.add_argument("--quick", action="store_true", help="4,000 objects, 1 and 2 listers")
    args = parser.parse_args()
    if args.quick:
        args.objects, args.listers, args.namespaces = 4_000, "1,2", 8
    listers = [int(n) for n in args.listers.split(",") if n.strip()]
    if not listers or min(listers) < 1 or args.objects < 1:
        print(
            "listing.py: --listers must be positive counts (e.g. 1,2,4,8) and --objects >= 1",
            file=sys.stderr,
        )
        return 2

    from local_stack.seaweedfs import TEST_AWS_ENV, SeaweedS3Server

    params = {
        "version": LAYOUT_VERSION,
        "objects": args.objects,
        "blocks": args.blocks_per_ledger,
        "ledgers": args.ledgers_per_ml,
        "namespaces": args.namespaces,
    }
    directory = _common.VAR / "listing" / str(args.objects)
    marker = directory / "populated.json"
    cached = marker.exists() and json.loads(marker.read_text()) == params and not args.fresh
    if not cached:
        shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    os.environ.update(TEST_AWS_ENV)
    server = SeaweedS3Server(directory / "seaweedfs", log_dir=directory / "logs")
    say(f"starting SeaweedFS on {directory / 'seaweedfs'} ({'cached' if cached else 'new'})")
    server.start()
    try:
        from ledger_gc.config.settings import Settings

        settings = Settings(
            s3_endpoint=server.endpoint, bucket=BUCKET, prefix=PREFIX, state_dir=directory
        )
        if not cached:
            keys = object_keys(
                args.objects, args.blocks_per_ledger, args.ledgers_per_ml, args.namespaces
            )
            say(f"putting {len(keys):,} empty block objects (kept for later runs)")
            populate(server.client(), keys, args.put_threads)
            marker.write_text(json.dumps(params))
        results = measure(settings, listers, args.objects)
    finally:
        server.stop()
    best = max(results["concurrent"], key=lambda r: r["keys_per_s"])
    seq = results["sequential"]
    rows = [("sequential lister (aws s3 ls --recursive)", fmt_rate(seq["keys_per_s"]), "", "")]
    rows += [
        (
            f"{r['listers']} concurrent lister{'s' if r['listers'] > 1 else ''}",
            fmt_rate(r["keys_per_s"]),
            fmt_rate(seq["keys_per_s"]),
            f"{ratio(r['keys_per_s'], seq['keys_per_s']):.2f}x",
        )
        for r in results["concurrent"]
    ]
    rows.append(("  sequential listing time", fmt_s(seq["seconds"]), "", ""))
    rows.append((f"  best ({best['listers']} listers) time", fmt_s(best["seconds"]), "", ""))
    _common.report(
        "listing",
        rows,
        [
            (
                f"best concurrent listing >= {TARGET_RATIO:.0f}x the sequential lister",
                ratio(best["keys_per_s"], seq["keys_per_s"]) >= TARGET_RATIO,
            )
        ],
        {
            "items": args.objects,
            "quick": args.quick,
            "sequential_per_s": round(seq["keys_per_s"]),
            "sequential_s": round(seq["seconds"], 3),
            "concurrent": results["concurrent"],
            "best_listers": best["listers"],
            "best_per_s": round(best["keys_per_s"]),
            "ratio": ratio(best["keys_per_s"], seq["keys_per_s"]),
            "shards": results["shards"],
            "s3_server_cpu_s": results["server_cpu_s"],
        },
    )
    return 0


def measure(settings: Any, listers: list[int], objects: int) -> dict[str, Any]:
    import psutil

    server = psutil.Process(_server_pid(settings))
    server_cpu = sum(server.cpu_times()[:2])
    say("sequential lister: one pagination over the whole prefix")
    from ledger_gc.s3_orphans import reading

    reading.storage_for(
        block_store(settings)
    )  # each side's clients are made before its clock starts
    started = time.perf_counter()
    count = sequential(settings)
    seconds = time.perf_counter() - started
    _check(count, objects, "the sequential lister")
    say(f"  {count:,} keys in {seconds:.1f}s ({count / seconds:,.0f}/s)")
    found: dict[str, Any] = {
        "sequential": {"seconds": seconds, "keys_per_s": count / seconds},
        "concurrent": [],
    }
    context = multiprocessing.get_context("fork")
    for n in listers:
        with context.Pool(n, initializer=_init_lister, initargs=(settings,)) as pool:
            pool.map(abs, range(n))  # the processes are up before the clock starts
            started = time.perf_counter()
            count, shards = concurrent(settings, pool)
            seconds = time.perf_counter() - started
        _check(count, objects, f"{n} listers")
        found["shards"] = shards
        say(
            f"{n} listers over {shards} namespaces: {count:,} keys in {seconds:.1f}s "
            f"({count / seconds:,.0f}/s)"
        )
        found["concurrent"].append(
            {"listers": n, "seconds": round(seconds, 3), "keys_per_s": round(count / seconds)}
        )
    found["server_cpu_s"] = round(sum(server.cpu_times()[:2]) - server_cpu, 2)
    return found


def _server_pid(settings: Any) -> int:
    import psutil

    port = int(str(settings.s3_endpoint).rsplit(":", 1)[-1])
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            return int(conn.pid)
    return os.getpid()


def _check(count: int, objects: int, who: str) -> None:
    if count != objects:
        raise SystemExit(f"{who} listed {count:,} keys, not {objects:,}")


if __name__ == "__main__":
    raise SystemExit(main())
