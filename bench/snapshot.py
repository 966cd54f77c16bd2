#!/usr/bin/env python3
"""Figure 2: the metadata snapshot's ZooKeeper read rate, against sequential gets.

Populates ``--mls`` ManagedLedgerInfo znodes (``--ledgers`` ledgers each) in a chroot of
its own, then reads them all three ways, in the same run, over the same znodes:

* **snapshot path** (the figure): what each Spark snapshot task runs,
  ``s3_orphans.reading.read_managed_ledgers`` over shards of ``NAMES_PER_SHARD`` names: a
  session, a ``sync``, ``MetadataStore.get_many_raw`` (batched multiRead, pipelined),
  decoding every record into snapshot rows;
* **kazoo async**: the same reads as pipelined ``get_async`` calls, one per znode (what
  ``get_many_raw`` did before multiRead, and still does on ZooKeeper < 3.6);
* **sequential** (the baseline): one ``client.get`` per znode, decoded the same way.

The listing of the managed ledgers (``list_managed_ledgers``, pipelined children) is
timed too. Target: >= 5,000 znodes/s and >= 3x sequential.

    .venv/bin/python bench/snapshot.py [--mls 100000] [--ledgers 3] [--quick] [--keep]
"""

from __future__ import annotations

import argparse
import time

import _common
from _common import fmt_rate, fmt_s, ratio, say

from ledger_gc.config.edge import zk_endpoint

TARGET_RATE = 5000.0
TARGET_RATIO = 3.0


def ml_names(count: int) -> list[str]:
    """``count`` names over 10 tenants x 10 namespaces (like a real cluster's spread)."""
    return [f"bench-t{i % 10}/ns{(i // 10) % 10}/persistent/topic-{i:07d}" for i in range(count)]


def ml_record(index: int, ledgers: int, now_ms: int) -> bytes:
    from ledger_gc.formats.records import encode_managed_ledger_info
    from ledger_gc.proto.mldataformats_pb2 import ManagedLedgerInfo

    info = ManagedLedgerInfo()
    for k in range(ledgers):
        ledger = info.ledgerInfo.add()
        ledger.ledgerId = index * ledgers + k + 1
        ledger.entries = 50_000
        ledger.size = 52_428_800
        ledger.timestamp = now_ms - (ledgers - k) * 3_600_000
    return encode_managed_ledger_info(info)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mls", type=int, default=100_000, help="managed ledgers (znodes)")
    parser.add_argument("--ledgers", type=int, default=3, help="ledgers per managed ledger")
    parser.add_argument("--quick", action="store_true", help="2,000 managed ledgers")
    parser.add_argument("--keep", action="store_true", help="leave the znodes behind")
    args = parser.parse_args()
    if args.quick:
        args.mls = min(args.mls, 2000)
    _common.require_stack(s3=False)

    from ledger_gc.formats.records import decode_managed_ledger_info
    from ledger_gc.metadata.store import MetadataStore
    from ledger_gc.rules.metadata import paths
    from ledger_gc.s3_orphans import reading
    from ledger_gc.spark.snapshot import NAMES_PER_SHARD

    settings = _common.bench_settings(chroot=f"/bench-snapshot-{_common.run_tag()}")
    _common.create_chroot(settings)
    names = ml_names(args.mls)
    ml_paths = [paths.managed_ledger_path(name) for name in names]
    now_ms = int(time.time() * 1000)
    say(
        f"ZooKeeper {settings.zk_hosts}: writing {args.mls:,} managed ledgers "
        f"({args.ledgers} ledgers each)"
    )
    with _common.kazoo_client(settings) as client:
        started = time.perf_counter()
        _common.ensure_parents(client, ml_paths)
        _common.multi_ops(
            client,
            [("create", p, ml_record(i, args.ledgers, now_ms)) for i, p in enumerate(ml_paths)],
        )
        say(f"written in {time.perf_counter() - started:.1f}s")
        store = MetadataStore(client, settings.zk_hosts)
        try:
            started = time.perf_counter()
            listed = store.list_managed_ledgers()
            list_s = time.perf_counter() - started
            assert len(listed) == args.mls, f"listed {len(listed)} of {args.mls}"
            say(f"listing: {len(listed):,} managed ledgers in {list_s:.2f}s")

            # 1. The snapshot path: read_managed_ledgers per shard, as a Spark task runs it.
            started = time.perf_counter()
            rows = 0
            for start in range(0, len(listed), NAMES_PER_SHARD):
                rows += len(
                    reading.read_managed_ledgers(
                        zk_endpoint(settings), listed[start : start + NAMES_PER_SHARD]
                    )
                )
            snapshot_s = time.perf_counter() - started
            say(f"snapshot path: {args.mls:,} znodes in {snapshot_s:.2f}s ({rows:,} rows)")

            # 2. Pipelined get_async, one call per znode (kazoo's own pipelining).
            started = time.perf_counter()
            got = store._pipelined(ml_paths, client.get_async, on_missing=lambda: None)
            async_rows = sum(
                1 + len(decode_managed_ledger_info(r[0], path=p).ledgerInfo)
                for p, r in zip(ml_paths, got, strict=True)
            )
            async_s = time.perf_counter() - started
            say(f"kazoo get_async pipelined: {args.mls:,} znodes in {async_s:.2f}s")

            # 3. The baseline: one synchronous get per znode.
            started = time.perf_counter()
            seq_rows = 0
            for path in ml_paths:
                data, _ = client.get(path)
                seq_rows += 1 + len(decode_managed_ledger_info(data, path=path).ledgerInfo)
            seq_s = time.perf_counter() - started
            say(f"sequential get: {args.mls:,} znodes in {seq_s:.2f}s")
            assert rows == async_rows == seq_rows, (rows, async_rows, seq_rows)
        finally:
            if not args.keep:
                started = time.perf_counter()
                removed = _common.delete_tree(client, "/")
                say(f"removed {removed:,} znodes in {time.perf_counter() - started:.1f}s")
    if not args.keep:
        with _common.kazoo_client(
            settings.with_overrides(zk_address=settings.zk_hosts.partition("/")[0])
        ) as root:
            root.delete("/" + settings.zk_hosts.partition("/")[2], recursive=True)

    snapshot_rate = args.mls / snapshot_s
    async_rate = args.mls / async_s
    seq_rate = args.mls / seq_s
    snap_ratio = ratio(snapshot_rate, seq_rate)
    _common.report(
        "snapshot",
        [
            (
                "snapshot path (multiRead, pipelined)",
                fmt_rate(snapshot_rate),
                fmt_rate(seq_rate),
                f"{snap_ratio:.1f}x",
            ),
            (
                "kazoo get_async pipelined",
                fmt_rate(async_rate),
                fmt_rate(seq_rate),
                f"{ratio(async_rate, seq_rate):.1f}x",
            ),
            ("sequential get (baseline)", fmt_rate(seq_rate), "", ""),
            ("listing (pipelined children)", fmt_s(list_s), "", ""),
        ],
        [
            (f"snapshot >= {TARGET_RATE:,.0f} znodes/s", snapshot_rate >= TARGET_RATE),
            (f"snapshot >= {TARGET_RATIO:.0f}x sequential", snap_ratio >= TARGET_RATIO),
        ],
        {
            "items": args.mls,
            "ledgers_per_ml": args.ledgers,
            "quick": args.quick,
            "pipelined_per_s": round(snapshot_rate),
            "kazoo_async_per_s": round(async_rate),
            "sequential_per_s": round(seq_rate),
            "ratio": snap_ratio,
            "async_ratio": ratio(async_rate, seq_rate),
            "listing_s": round(list_s, 3),
            "snapshot_s": round(snapshot_s, 3),
            "sequential_s": round(seq_s, 3),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
