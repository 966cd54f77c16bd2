#!/usr/bin/env python3
"""Figure 3: bulk delete (DeleteObjects batches) against one DeleteObject call per key.

Puts ``--objects`` block objects (keys in the store's layout, so the one delete path
accepts them) into a bucket of its own, deletes them with ``LedgerStorage.delete_keys``
(DeleteObjects, 1000 keys a request, the library's default of one request at a time),
puts them again and deletes them with one ``delete_object`` call per key: the baseline,
same run, same endpoint. Both deletes are checked by listing the bucket afterwards.

The per-key baseline is measured in full when a first sample of ``--probe`` keys
projects it to finish within ``--max-baseline-s``; otherwise it stops there and the
full time is extrapolated from the sample (the output says so).

    .venv/bin/python bench/bulk_delete.py [--objects 20000] [--quick]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import _common
from _common import fmt_rate, fmt_s, ratio, say

from ledger_gc.config.edge import block_store

TARGET_RATIO = 10.0


def block_keys(prefix: str, count: int) -> list[str]:
    from ledger_gc.rules.storage import keys

    # 100 managed ledgers x N ledgers, one block each: what a trim or orphan delete sends.
    return [
        keys.block_key(prefix, f"bench/bulk/persistent/topic-{i % 100:03d}", i + 1, 0)
        for i in range(count)
    ]


def put_all(client: object, bucket: str, names: list[str], threads: int) -> float:
    body = b"\0" * 1024
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bench-put") as pool:
        list(pool.map(lambda key: client.put_object(Bucket=bucket, Key=key, Body=body), names))  # type: ignore[attr-defined]
    return time.perf_counter() - started


def count_objects(client: object, bucket: str) -> int:
    paginator = client.get_paginator("list_objects_v2")  # type: ignore[attr-defined]
    return sum(page.get("KeyCount", 0) for page in paginator.paginate(Bucket=bucket))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=20_000)
    parser.add_argument(
        "--quick", action="store_true", help="400 objects, per-key baseline extrapolated from 100"
    )
    parser.add_argument("--probe", type=int, default=1000, help="per-key sample size")
    parser.add_argument(
        "--max-baseline-s",
        type=float,
        default=180.0,
        help="measure the per-key baseline fully if projected under this",
    )
    parser.add_argument("--put-threads", type=int, default=16)
    args = parser.parse_args()
    if args.quick:
        args.objects = min(args.objects, 400)
        args.probe = min(args.probe, 100)
        args.max_baseline_s = 0.0
    _common.require_stack(zookeeper=False)

    from ledger_gc.storage.s3 import LedgerStorage
    from ledger_gc.storage.s3_bucket import build_client

    settings = _common.bench_settings(bucket=f"bench-bulk-{_common.run_tag()}")
    client = build_client(block_store(settings))
    client.create_bucket(Bucket=settings.bucket)
    storage = LedgerStorage(block_store(settings), client=client)
    names = block_keys(settings.prefix, args.objects)
    say(f"S3 {settings.s3_endpoint}, bucket {settings.bucket}: {args.objects:,} objects")
    try:
        put_s = put_all(client, settings.bucket, names, args.put_threads)
        say(f"put {args.objects:,} objects in {put_s:.1f}s ({args.put_threads} threads)")

        started = time.perf_counter()
        result = storage.delete_keys(names)
        bulk_s = time.perf_counter() - started
        left = count_objects(client, settings.bucket)
        assert result.ok and result.deleted == args.objects and left == 0, (result, left)
        say(
            f"bulk delete: {args.objects:,} keys in {bulk_s:.2f}s, {result.requests} "
            "DeleteObjects requests"
        )

        put_all(client, settings.bucket, names, args.put_threads)
        say(f"put {args.objects:,} objects again; deleting one call per key")
        started = time.perf_counter()
        deleted = 0
        extrapolated = False
        for index, key in enumerate(names):
            client.delete_object(Bucket=settings.bucket, Key=key)
            deleted += 1
            if index + 1 == args.probe and args.probe < len(names):
                elapsed = time.perf_counter() - started
                projected = elapsed / deleted * len(names)
                if projected > args.max_baseline_s:
                    say(
                        f"per-key: {deleted:,} keys in {elapsed:.1f}s, projected "
                        f"{projected:.0f}s > {args.max_baseline_s:.0f}s: extrapolating"
                    )
                    extrapolated = True
                    break
                say(f"per-key: projected {projected:.0f}s, measuring all {len(names):,}")
        per_key_s = time.perf_counter() - started
        if extrapolated:
            per_key_s = per_key_s / deleted * len(names)
            storage.delete_keys(names[deleted:])  # clean up, untimed
        left = count_objects(client, settings.bucket)
        assert left == 0, f"{left} objects left after the per-key delete"
        say(
            f"per-key delete: {len(names):,} keys in {per_key_s:.2f}s"
            f"{' (extrapolated)' if extrapolated else ''}"
        )
    finally:
        storage.delete_keys(names)
        client.delete_bucket(Bucket=settings.bucket)

    bulk_rate = args.objects / bulk_s
    per_key_rate = args.objects / per_key_s
    speedup = ratio(per_key_s, bulk_s)
    _common.report(
        "bulk_delete",
        [
            (
                "DeleteObjects batches (delete_keys)",
                fmt_s(bulk_s),
                fmt_s(per_key_s),
                f"{speedup:.1f}x",
            ),
            ("  keys per second", fmt_rate(bulk_rate), fmt_rate(per_key_rate), ""),
            ("  requests", f"{result.requests:,}", f"{args.objects:,}", ""),
        ],
        [(f"bulk delete >= {TARGET_RATIO:.0f}x faster than per-key", speedup >= TARGET_RATIO)],
        {
            "items": args.objects,
            "quick": args.quick,
            "bulk_s": round(bulk_s, 3),
            "per_key_s": round(per_key_s, 3),
            "bulk_per_s": round(bulk_rate),
            "per_key_per_s": round(per_key_rate),
            "ratio": speedup,
            "bulk_requests": result.requests,
            "per_key_measured": deleted,
            "per_key_extrapolated": extrapolated,
            "put_s": round(put_s, 2),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
