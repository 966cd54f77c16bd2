#!/usr/bin/env python3
"""Figure 4: a trim of ``--mls`` managed ledgers (mark and delete), its time and its
ZooKeeper writes, against a trim that writes once per ledger.

Each managed ledger gets ``--ledgers`` ledgers (the last one current), one durable cursor
at the start of the current ledger (so every earlier ledger is consumed), and one block
object per consumed ledger. Metadata and blocks are written directly (ZooKeeper multi
transactions, threaded S3 PUTs) because a writer would take far longer; the current
ledger's data is not written (the trim never touches it).

* **the trim** (the figure): ``ledger_gc.trim.run_trim`` over every managed ledger, as
  ``ledgergc trim --all`` runs it.
* **per-ledger trim** (the baseline, implemented here): the same reads (pipelined per
  batch), the same eligibility rule and the same one delete path, but one
  compare-and-set per ledger to mark it and one per ledger to unmark it.

ZooKeeper writes are counted on the kazoo client (every ``set``/``create``/``delete``,
per znode), independently of the library's own ``MetadataStore.writes``. Each run is
checked: no block left, no marker left, one ledger listed per managed ledger.
Targets: the trim within 60 s, at most 2 writes per managed ledger.

With ``--baseline-mls N`` the comparison runs at N managed ledgers (the library trim
again at that size, then the per-ledger trim), so that a long full-size run is needed
only once; ``--profile FILE`` writes a cProfile of the (first) trim.

    .venv/bin/python bench/trim.py [--mls 10000] [--ledgers 3] [--baseline-mls N] [--quick]
"""

from __future__ import annotations

import argparse
import collections
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import _common
from _common import fmt_s, ratio, say

from ledger_gc.config.edge import block_store, policy, resolve

TARGET_SECONDS = 60.0
TARGET_WRITES_PER_ML = 2


def ml_names(count: int, tenant_prefix: str) -> list[str]:
    return [
        f"{tenant_prefix}{i % 10}/ns{(i // 10) % 10}/persistent/topic-{i:06d}" for i in range(count)
    ]


class CountingClient:
    """Wraps a kazoo client's write calls to count them, per znode."""

    WRITES = ("set", "create", "delete")

    def __init__(self, client: Any) -> None:
        self.client = client
        self.per_path: collections.Counter[str] = collections.Counter()
        for name in self.WRITES:
            original = getattr(client, name)
            setattr(client, name, self._counted(original))
        original_transaction = client.transaction

        def transaction() -> Any:
            # A multi is one write request; it counts once, on the znode it sets last
            # (the trim's mark: the managed ledger, after its cursor checks and moves).
            request = original_transaction()
            commit = request.commit

            def counted_commit() -> Any:
                chroot = client.chroot or ""
                paths = [op.path for op in request.operations if hasattr(op, "data")]
                if paths:  # a transaction's paths carry the chroot; the counts do not
                    self.per_path[paths[-1].removeprefix(chroot) or "/"] += 1
                return commit()

            request.commit = counted_commit
            return request

        client.transaction = transaction

    def _counted(self, original: Any) -> Any:
        def call(path: str, *args: Any, **kwargs: Any) -> Any:
            self.per_path[path] += 1  # every attempt counts, a failed CAS included
            return original(path, *args, **kwargs)

        return call

    def reset(self) -> None:
        self.per_path.clear()

    def restore(self) -> None:
        for name in (*self.WRITES, "transaction"):
            self.client.__dict__.pop(name, None)


def populate(settings: Any, names: list[str], ledgers: int, client: Any, threads: int) -> int:
    """Write the managed ledgers, cursors and blocks; return the blocks written."""
    from ledger_gc.formats.records import (
        encode_managed_cursor_info,
        encode_managed_ledger_info,
    )
    from ledger_gc.proto.mldataformats_pb2 import ManagedCursorInfo, ManagedLedgerInfo
    from ledger_gc.rules.metadata import paths
    from ledger_gc.rules.storage import keys
    from ledger_gc.storage.s3_bucket import build_client

    now = int(time.time() * 1000)
    ops = []
    block_keys = []
    for index, name in enumerate(names):
        info = ManagedLedgerInfo()
        first = index * ledgers + 1
        for k in range(ledgers):
            ledger = info.ledgerInfo.add()
            ledger.ledgerId = first + k
            ledger.entries = 1000
            ledger.size = 1_048_576
            ledger.timestamp = now - (ledgers - k) * 3_600_000
            if k < ledgers - 1:
                block_keys.append(keys.block_key(settings.prefix, name, first + k, 0))
        cursor = ManagedCursorInfo(
            cursorsLedgerId=-1, markDeleteLedgerId=first + ledgers - 1, markDeleteEntryId=-1
        )
        path = paths.managed_ledger_path(name)
        ops.append(("create", path, encode_managed_ledger_info(info)))
        ops.append(("create", f"{path}/sub", encode_managed_cursor_info(cursor)))
    _common.ensure_parents(client, [path for op, path, _ in ops[::2]])
    _common.multi_ops(client, ops)
    s3 = build_client(block_store(settings))
    s3.create_bucket(Bucket=settings.bucket)
    body = b"\0" * 1024
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bench-put") as pool:
        list(
            pool.map(
                lambda key: s3.put_object(Bucket=settings.bucket, Key=key, Body=body), block_keys
            )
        )
    return len(block_keys)


def per_ledger_trim(settings: Any, store: Any, storage: Any, names: list[str]) -> dict[str, int]:
    """The baseline: the library's reads, rule and delete path, one CAS per ledger."""
    from ledger_gc.audit import AuditLog
    from ledger_gc.deletion import Deleter, DeleteTarget
    from ledger_gc.formats.markers import marker_key
    from ledger_gc.formats.records import (
        remove_properties,
    )
    from ledger_gc.marking import mark_deletable
    from ledger_gc.rules.positions import ledger_stats
    from ledger_gc.rules.storage.keys import ledger_dir
    from ledger_gc.rules.trim.eligibility import decide_trim
    from ledger_gc.trim.states import LedgerState
    from ledger_gc.trim.trimmer import BATCH_SIZE, ManagedLedgerTrimmer

    deleter = Deleter(storage, AuditLog(settings), "bench-per-ledger")
    reader = ManagedLedgerTrimmer(
        store, deleter, policy(settings), dry_run=False, clock=lambda: int(time.time() * 1000)
    )
    counts = {"marked": 0, "deleted": 0}
    for start in range(0, len(names), BATCH_SIZE):
        batch = names[start : start + BATCH_SIZE]
        for name, state in zip(batch, reader.read_states(batch), strict=True):
            assert isinstance(state, LedgerState)
            now = int(time.time() * 1000)
            decision = decide_trim(
                ledger_stats(state.record), state.positions(), settings.retention_for(name), now
            )
            for ledger_id in decision.ledger_ids:  # one write per ledger to mark
                store.update_managed_ledger(
                    name,
                    lambda info, lid=ledger_id, now=now: bool(mark_deletable(info, [lid], now)),
                )
            counts["marked"] += len(decision.ledger_ids)
            targets = [
                DeleteTarget(
                    ledger_dir(settings.prefix, name, lid),
                    "trim",
                    "ledger",
                    name,
                    lid,
                    "bench per-ledger trim",
                )
                for lid in decision.ledger_ids
            ]
            for outcome in deleter.delete(targets):
                if not outcome.gone:
                    continue
                key = marker_key(outcome.target.ledger_id)  # type: ignore[arg-type]
                store.update_managed_ledger(  # one write per ledger to unmark
                    name, lambda info, key=key: bool(remove_properties(info, [key]))
                )
                counts["deleted"] += 1
    return counts


def s3_server_process(endpoint: str | None) -> Any:
    """The local process serving ``endpoint`` (the local stack's SeaweedFS ``weed``), to
    read its CPU time; None if the endpoint is not served from this machine."""
    import psutil

    port = (endpoint or "").rsplit(":", 1)[-1]
    if not port.isdigit():
        return None
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.AccessDenied:
        return None
    for conn in connections:
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == int(port) and conn.pid:
            return psutil.Process(conn.pid)
    return None


def cpu_seconds(proc: Any) -> float:
    if proc is None:
        return 0.0
    try:
        times = proc.cpu_times()
    except Exception:
        return 0.0
    return float(times.user + times.system)


def verify(settings: Any, store: Any, storage: Any, names: list[str]) -> None:
    """No block left, no marker left, only the current ledger listed."""
    from ledger_gc.formats.markers import deletable_markers
    from ledger_gc.formats.records import (
        decode_managed_ledger_info,
    )
    from ledger_gc.rules.metadata import paths

    left = sum(1 for _ in storage.iter_objects(settings.key_prefix))
    assert left == 0, f"{left} blocks left after the trim"
    ml_paths = [paths.managed_ledger_path(n) for n in names]
    for path, raw in zip(ml_paths, store.get_many_raw(ml_paths), strict=True):
        assert raw is not None, path
        info = decode_managed_ledger_info(raw[0], path=path)
        assert len(info.ledgerInfo) == 1, f"{path} lists {len(info.ledgerInfo)} ledgers"
        assert not deletable_markers(info, path=path), f"{path} still has markers"


def run_case(
    label: str, args: argparse.Namespace, mls: int, tag: str, tenant: str, trim: Any
) -> dict[str, Any]:
    import psutil

    from ledger_gc.metadata.store import MetadataStore
    from ledger_gc.rules.metadata import paths
    from ledger_gc.storage.s3 import LedgerStorage

    settings = _common.bench_settings(
        chroot=f"/bench-trim-{tag}-{label}",
        bucket=f"bench-trim-{tag}-{label}",
        state_dir=_common.VAR / "trim-state" / f"{tag}-{label}",
    )
    _common.create_chroot(settings)
    names = ml_names(mls, tenant)
    with _common.kazoo_client(settings) as client:
        started = time.perf_counter()
        blocks = populate(settings, names, args.ledgers, client, args.put_threads)
        say(
            f"{label}: wrote {len(names):,} managed ledgers, {len(names):,} cursors, "
            f"{blocks:,} blocks in {time.perf_counter() - started:.1f}s"
        )
        counter = CountingClient(client)
        store = MetadataStore(client, settings.zk_hosts)
        storage = LedgerStorage(block_store(settings))
        s3_calls: collections.Counter[str] = collections.Counter()
        storage.client.meta.events.register(
            "before-call.s3", lambda model, **_: s3_calls.update([model.name])
        )
        s3_server = s3_server_process(settings.s3_endpoint)
        s3_server_cpu = cpu_seconds(s3_server)
        own_cpu = time.process_time()
        rss_before = psutil.Process().memory_info().rss
        started = time.perf_counter()
        with _common.TreeMemorySampler(os.getpid(), interval=0.05) as memory:
            outcome = trim(settings, store, storage, names)
        elapsed = time.perf_counter() - started
        own_cpu = time.process_time() - own_cpu
        s3_during = dict(s3_calls)  # the trim's requests, not verify()'s below
        s3_server_cpu = cpu_seconds(s3_server) - s3_server_cpu
        counter.restore()
        say(
            f"{label}: S3 requests {s3_during}; CPU: this process {own_cpu:.1f}s, "
            f"S3 server {s3_server_cpu:.1f}s, of {elapsed:.1f}s"
        )
        ml_paths = {paths.managed_ledger_path(n) for n in names}
        ml_writes = [counter.per_path.get(p, 0) for p in ml_paths]
        other_writes = sum(n for p, n in counter.per_path.items() if p not in ml_paths)
        say(
            f"{label}: trimmed in {elapsed:.2f}s; {sum(ml_writes):,} writes of managed-ledger "
            f"znodes (max {max(ml_writes)} per managed ledger), {other_writes} other writes; "
            f"peak RSS {_common.mib(memory.peak_total):,.0f} MiB "
            f"({_common.mib(rss_before):,.0f} MiB before the trim)"
        )
        verify(settings, store, storage, names)
        say(f"{label}: verified: no block or marker left, current ledgers kept")
        _common.delete_tree(client, "/")
        storage.client.delete_bucket(Bucket=settings.bucket)
    return {
        "seconds": elapsed,
        "s3_requests": s3_during,
        "client_cpu_s": round(own_cpu, 2),
        "s3_server_cpu_s": round(s3_server_cpu, 2),
        "peak_rss_mib": _common.mib(memory.peak_total),
        "rss_before_mib": _common.mib(rss_before),
        "blocks": blocks,
        "ml_writes": sum(ml_writes),
        "max_writes_per_ml": max(ml_writes),
        "other_writes": other_writes,
        "outcome": outcome,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mls", type=int, default=10_000, help="managed ledgers")
    parser.add_argument("--ledgers", type=int, default=3, help="ledgers per managed ledger")
    parser.add_argument("--quick", action="store_true", help="50 managed ledgers")
    parser.add_argument("--no-baseline", action="store_true", help="skip the per-ledger trim")
    parser.add_argument(
        "--baseline-mls",
        type=int,
        help="run the comparison (library trim and per-ledger trim) at this size (default: --mls)",
    )
    parser.add_argument("--profile", help="write a cProfile of the trim to this file")
    parser.add_argument(
        "--curve",
        help="also trim at these sizes (e.g. 1000,3000,30000; --mls is one point of it) and "
        "print time and peak memory against size",
    )
    parser.add_argument("--put-threads", type=int, default=16)
    args = parser.parse_args()
    if args.quick:
        args.mls = min(args.mls, 50)
        args.baseline_mls = None
        args.curve = "20" if args.curve else None
    try:
        curve_sizes = sorted({int(n) for n in (args.curve or "").split(",") if n.strip()})
    except ValueError:
        curve_sizes = [0]
    if any(n < 1 for n in curve_sizes):
        parser.exit(
            2,
            f"trim.py: --curve {args.curve!r} is not a list of sizes; e.g. "
            "--curve 1000,3000,30000\n",
        )
    _common.require_stack()

    from ledger_gc.trim.run import TrimScope, run_trim

    tag = _common.run_tag()
    consumed = args.mls * (args.ledgers - 1)

    def library_trim(settings: Any, store: Any, storage: Any, names: list[str]) -> Any:
        def run() -> Any:
            return run_trim(
                resolve(settings),
                scope=TrimScope.all(),
                store=store,
                storage=storage,
                record_run=False,
                source="bench",
            )

        if args.profile:
            report = _common.profile_all_threads(run, args.profile)
            say(f"profile (every thread) written to {args.profile}")
        else:
            report = run()
        totals = report.totals()
        assert report.error is None and totals["errors"] == 0, (report.error, totals)
        return totals

    trim = run_case("trim", args, args.mls, tag, "bench-gc", library_trim)
    totals = trim["outcome"]
    say(
        f"trim: {totals['ledgers_marked']:,} ledgers marked, {totals['ledgers_deleted']:,} "
        f"deleted, {totals['markers_pending']} pending"
    )
    # The comparison runs at --baseline-mls; when that is not --mls, the library trim runs
    # again at that size so that both sides of the comparison see the same store size.
    base_mls = args.baseline_mls or args.mls
    same = trim
    base: dict[str, Any] | None = None
    if not args.no_baseline:
        if base_mls != args.mls:
            args.profile = None
            same = run_case("trim-small", args, base_mls, tag, "bench-gs", library_trim)
        base = run_case("per-ledger", args, base_mls, tag, "bench-base", per_ledger_trim)

    curve = [
        {
            "mls": args.mls,
            "seconds": round(trim["seconds"], 3),
            "peak_rss_mib": trim["peak_rss_mib"],
            "rss_before_mib": trim["rss_before_mib"],
        }
    ]
    args.profile = None
    for size in (n for n in curve_sizes if n != args.mls):
        point = run_case(f"curve-{size}", args, size, tag, f"bench-c{size}-", library_trim)
        curve.append(
            {
                "mls": size,
                "seconds": round(point["seconds"], 3),
                "peak_rss_mib": point["peak_rss_mib"],
                "rss_before_mib": point["rss_before_mib"],
            }
        )
    curve.sort(key=lambda p: p["mls"])

    per_ml = trim["ml_writes"] / args.mls
    rows = [
        (f"trim of {args.mls:,} managed ledgers", fmt_s(trim["seconds"]), "", ""),
        ("  managed ledgers per second", f"{args.mls / trim['seconds']:,.0f}/s", "", ""),
        ("  ZooKeeper writes per managed ledger", f"{per_ml:.2f}", "", ""),
        ("  max writes on one managed ledger", str(trim["max_writes_per_ml"]), "", ""),
        ("  other ZooKeeper writes (run lock, cursors)", str(trim["other_writes"]), "", ""),
        ("  peak RSS of this process during the trim", f"{trim['peak_rss_mib']:,.0f} MiB", "", ""),
        (
            "  S3 requests per managed ledger",
            f"{sum(trim['s3_requests'].values()) / args.mls:.2f}",
            "",
            "",
        ),
    ]
    if base:
        rows += [
            (
                f"at {base_mls:,} managed ledgers: time",
                fmt_s(same["seconds"]),
                fmt_s(base["seconds"]),
                f"{ratio(base['seconds'], same['seconds']):.2f}x",
            ),
            (
                "  ZooKeeper writes per managed ledger",
                f"{same['ml_writes'] / base_mls:.2f}",
                f"{base['ml_writes'] / base_mls:.2f}",
                f"{ratio(base['ml_writes'], same['ml_writes']):.2f}x",
            ),
            (
                "  max writes on one managed ledger",
                str(same["max_writes_per_ml"]),
                str(base["max_writes_per_ml"]),
                "",
            ),
        ]
    if len(curve) > 1:
        rows += [
            (
                f"curve: {p['mls']:,} managed ledgers",
                fmt_s(p["seconds"]),
                f"{p['mls'] / p['seconds']:,.0f} ml/s",
                f"{p['peak_rss_mib']:,.0f} MiB",
            )
            for p in curve
        ]
    _common.report(
        "trim",
        rows,
        [
            (
                f"trim of {args.mls:,} managed ledgers <= {TARGET_SECONDS:.0f} s",
                trim["seconds"] <= TARGET_SECONDS,
            ),
            (
                f"<= {TARGET_WRITES_PER_ML} ZooKeeper writes per managed ledger",
                trim["max_writes_per_ml"] <= TARGET_WRITES_PER_ML,
            ),
        ],
        {
            "items": args.mls,
            "ledgers_trimmed": consumed,
            "quick": args.quick,
            "trim_s": round(trim["seconds"], 3),
            "zk_writes": trim["ml_writes"] + trim["other_writes"],
            "zk_writes_per_ml": round(per_ml, 3),
            "max_zk_writes_per_ml": trim["max_writes_per_ml"],
            "ledgers_deleted": totals["ledgers_deleted"],
            "s3_requests": trim["s3_requests"],
            "s3_requests_per_ml": round(sum(trim["s3_requests"].values()) / args.mls, 2),
            "client_cpu_s": trim["client_cpu_s"],
            "s3_server_cpu_s": trim["s3_server_cpu_s"],
            "peak_rss_mib": trim["peak_rss_mib"],
            "rss_before_mib": trim["rss_before_mib"],
            "curve": curve,
            "baseline_items": base_mls if base else None,
            "same_size_trim_s": round(same["seconds"], 3) if base else None,
            "baseline_s": round(base["seconds"], 3) if base else None,
            "ratio": ratio(base["seconds"], same["seconds"]) if base else None,
            "baseline_zk_writes_per_ml": round(base["ml_writes"] / base_mls, 3) if base else None,
            "baseline_max_zk_writes_per_ml": base["max_writes_per_ml"] if base else None,
            "writes_ratio": ratio(base["ml_writes"], same["ml_writes"]) if base else None,
            "baseline_s3_requests": base["s3_requests"] if base else None,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
