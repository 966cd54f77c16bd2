#!/usr/bin/env python3
"""Figure 10: what the Pulsar-metadata source adds to a cycle over 1,000,000 BookKeeper
ledgers and 10,000 topics: the whole ``ledgergc orphans --dry-run --json`` command with
the source on and off, first survey and steady state, side by side in one run against
one ZooKeeper (issue 34: at most +15 % first, +10 % steady).

The data is ``bk_scan``'s (its own ZooKeeper, ``--zk-heap``; 1,000,000 ledgers under
9,990 managed ledgers with a cursor each in ``bench/ns``), with what Pulsar's own
metadata adds: the cluster and the tenant, ``bench/ns``'s policies (Policies JSON),
local policies and bundle data, and two leftovers for the source to find: a namespace
deleted half way (``bench/gone``: its policies gone, 100 managed ledgers with a cursor
each, local policies, bundle data) and a dead broker's heartbeat namespace.

One run, each command on a state store of its own per mode (the record cache is the
BookKeeper source's, so both modes have theirs), ``--repeat`` rounds (default 2) with
the order swapped each round, so that neither mode always runs first on a cold
ZooKeeper or a busier machine; each figure is a mode's best round:

1. **first survey**, off (``LEDGERGC_PULSAR_METADATA=false``) and on (``=true``), each on
   an empty state store, round by round;
2. **steady state**: per round, 1 % churn (``bk_scan.churn``), then the command on and
   off again on their last first survey's state store (each mode sees the same churn
   since its previous command).

With the source on, Pulsar's references are read once, by the source, and handed to the
BookKeeper survey (``SurveyRequest.shared``): what it adds is the listing of the local
store's other roots, the configuration store's facts and the leftovers' znodes.

    .venv/bin/python bench/pulsar_metadata.py [--size 1000000] [--quick] [--zk-heap 3g]
        [--repeat 2]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import Any

import _common
import bk_scan
from _common import fmt_s, mib, say

sys.path.insert(0, str(_common.ROOT / "include"))

TARGET_SIZE = 1_000_000
QUICK_SIZE = 5_000
TARGET_FIRST = 0.15
TARGET_STEADY = 0.10
GONE = "bench/gone"
GONE_TOPICS = 100
BROKER = "broker-dead:8080"


def plant(cluster: Any) -> int:
    """Pulsar's own metadata around ``bk_scan``'s namespace, and the two leftovers;
    returns the managed ledgers it adds."""
    cluster.cluster_definition()
    cluster.policies(bk_scan.NAMESPACE)
    cluster.local_policies(bk_scan.NAMESPACE)
    cluster.bundle_data(bk_scan.NAMESPACE)
    cluster.policies(GONE)
    cluster.local_policies(GONE)
    cluster.bundle_data(GONE)
    for i in range(GONE_TOPICS):
        name = f"{GONE}/persistent/t-{i:03d}"
        cluster.managed_ledger(name, [])
        cluster.cursor(name, "sub")
    cluster.delete_policies(GONE)
    cluster.heartbeat(BROKER)
    return GONE_TOPICS + 1


MODES = {"false": "off", "true": "on"}


def run(hosts: str, state: Any, label: str, mode: str, *, fresh: bool = False) -> dict[str, Any]:
    """The command in one mode; ``fresh``: on an empty state store (a first survey)."""
    if fresh:
        shutil.rmtree(state, ignore_errors=True)
    got = bk_scan.run_command(hosts, state, label, LEDGERGC_PULSAR_METADATA=mode)
    got["mode"] = mode
    return got


def survey_seconds(got: dict[str, Any]) -> float:
    """The cycle's survey of both sources: BookKeeper's step, and the metadata's."""
    pm = got.get("pulsar_metadata") or {}
    return float(got["survey_s"]) + float((pm.get("cost") or {}).get("seconds") or 0.0)


def check_metadata(got: dict[str, Any]) -> None:
    import pulsar_cluster

    pm = got.get("pulsar_metadata")
    if got["mode"] == "false":
        if pm is not None:
            raise SystemExit(f"{got['label']}: the source is off, yet it surveyed")
        return
    if not pm:
        raise SystemExit(f"{got['label']}: the source is on, yet it did not survey")
    found = sorted(pm["leftovers"].items())
    want = [
        (f"pulsar-metadata:local:{GONE}", "pm-deleted-namespace"),
        (f"pulsar-metadata:local:pulsar/{pulsar_cluster.CLUSTER}/{BROKER}", "pm-dead-broker"),
    ]
    if found != sorted(want):
        raise SystemExit(f"{got['label']}: leftovers {found}, planted {want}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=TARGET_SIZE, help="ledgers (x100)")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_SIZE:,} ledgers")
    parser.add_argument("--zk-heap", default="3g", help="-Xmx of the command's ZooKeeper")
    parser.add_argument("--repeat", type=int, default=2, help="rounds, the order swapped")
    args = parser.parse_args()
    size = QUICK_SIZE if args.quick else args.size
    if size < bk_scan.PER_ML * 10 or size % bk_scan.PER_ML:
        print(
            "pulsar_metadata.py: --size must be a multiple of 100, at least 1000", file=sys.stderr
        )
        return 2
    heap = "1g" if args.quick else args.zk_heap

    from local_stack.zookeeper import ZooKeeperServer

    directory = _common.VAR / "pulsar-metadata"
    shutil.rmtree(directory, ignore_errors=True)
    server = ZooKeeperServer(directory / "zookeeper", log_dir=directory / "logs", heap=heap)
    say(f"starting ZooKeeper (-Xmx{heap}) in {directory / 'zookeeper'}")
    server.start()
    runs: dict[str, dict[str, Any]] = {}
    try:
        chroot = f"/bench-pulsar-metadata-{_common.run_tag()}"
        settings = _common.Settings(zk_address=f"{server.hosts}{chroot}", bucket="")
        hosts = settings.zk_hosts
        _common.create_chroot(settings)
        with _common.kazoo_client(settings) as client:
            import pulsar_cluster

            cluster = pulsar_cluster.PulsarCluster(client).init(idgen=False)
            client.ensure_path(f"/managed-ledgers/{bk_scan.NAMESPACE}/persistent")
            extra = plant(cluster)
            want = bk_scan.expected(size)
            want["managed_ledgers"] += extra
            say(f"writing {size:,} ledgers, {want['managed_ledgers']:,} managed ledgers")
            build_s = bk_scan.build(client, size // bk_scan.PER_ML)
            say(f"  built in {build_s:.1f} s")
            orders = [("false", "true"), ("true", "false")]
            for round_no in range(args.repeat):
                for mode in orders[round_no % 2]:
                    label = f"first-{MODES[mode]}-{round_no}"
                    runs[label] = run(hosts, directory / f"state-{mode}", label, mode, fresh=True)
                    bk_scan.check(runs[label], want)
                    check_metadata(runs[label])
                    say(f"{label}: {bk_scan.describe(runs[label])}")
            next_id = size
            for round_no in range(args.repeat):
                new, deleted, next_id = bk_scan.churn(client, size, round_no, next_id)
                say(f"churn: {new:,} new ledgers, {deleted:,} deleted")
                for mode in orders[(round_no + 1) % 2]:
                    label = f"steady-{MODES[mode]}-{round_no}"
                    runs[label] = run(hosts, directory / f"state-{mode}", label, mode)
                    bk_scan.check(runs[label], want)
                    check_metadata(runs[label])
                    say(f"{label}: {bk_scan.describe(runs[label])}")
    finally:
        server.stop()
        shutil.rmtree(directory / "zookeeper", ignore_errors=True)
    return report(size, runs, args.quick)


def mine(runs: dict[str, dict[str, Any]], phase: str, mode: str) -> list[dict[str, Any]]:
    return [got for label, got in runs.items() if label.startswith(f"{phase}-{mode}-")]


def best(runs: dict[str, dict[str, Any]], phase: str, mode: str) -> dict[str, Any]:
    """A mode's fastest command of a phase (the least disturbed by the machine's load)."""
    return min(mine(runs, phase, mode), key=lambda got: got["seconds"])


def pm_seconds(got: dict[str, Any]) -> float:
    return float(((got.get("pulsar_metadata") or {}).get("cost") or {}).get("seconds") or 0.0)


def references_seconds(got: dict[str, Any]) -> float:
    return float(got["cost"]["seconds"].get("references") or 0.0)


def added_work(runs: dict[str, dict[str, Any]], phase: str) -> float:
    """What the source adds, apart from the work both modes share (Spark's start, the
    ledgers' records, the report), whose time the machine's load moves by far more than
    the source costs: its own step (Pulsar's references included) less the BookKeeper
    survey's references step it replaces, as a share of the best command off (each the
    best of its rounds)."""
    on = min(pm_seconds(got) for got in mine(runs, phase, "on"))
    off = min(references_seconds(got) for got in mine(runs, phase, "off"))
    return (on - off) / best(runs, phase, "off")["seconds"]


def report(size: int, runs: dict[str, dict[str, Any]], quick: bool) -> int:
    def added(phase: str) -> float:
        return best(runs, phase, "on")["seconds"] / best(runs, phase, "off")["seconds"] - 1

    first, steady = added("first"), added("steady")
    rows = []
    for phase in ("first", "steady"):
        on, off = best(runs, phase, "on"), best(runs, phase, "off")
        pm = on["pulsar_metadata"] or {}
        cost = pm.get("cost") or {}
        rounds = " / ".join(
            f"{got['seconds']:.1f}" for label, got in runs.items() if label.startswith(phase)
        )
        rows += [
            (
                f"{phase}: whole command, source on vs off (best)",
                fmt_s(on["seconds"]),
                fmt_s(off["seconds"]),
                f"{on['seconds'] / off['seconds'] - 1:+.1%}",
            ),
            (f"  every round, in order (s): {rounds}", "", "", ""),
            (
                "  survey (BookKeeper's step + the metadata's)",
                fmt_s(survey_seconds(on)),
                fmt_s(survey_seconds(off)),
                f"{survey_seconds(on) / survey_seconds(off) - 1:+.1%}",
            ),
            (
                "  the metadata source's own step (references included)",
                fmt_s(float(cost.get("seconds") or 0.0)),
                "",
                "",
            ),
            (
                "  the metadata step vs the references step it replaces (best)",
                fmt_s(min(pm_seconds(g) for g in mine(runs, phase, "on"))),
                fmt_s(min(references_seconds(g) for g in mine(runs, phase, "off"))),
                f"{added_work(runs, phase):+.1%} of the command",
            ),
            (
                "  znodes read by the cycle",
                f"{on['zookeeper']['reads']:,}",
                f"{off['zookeeper']['reads']:,}",
                f"{on['zookeeper']['reads'] / max(1, off['zookeeper']['reads']) - 1:+.1%}",
            ),
            (
                "  peak memory, process tree",
                f"{mib(on['peak_tree_rss_bytes']):,.0f} MiB",
                f"{mib(off['peak_tree_rss_bytes']):,.0f} MiB",
                "",
            ),
        ]
    targets = [
        (f"first survey: the source adds <= {TARGET_FIRST:.0%}", first <= TARGET_FIRST),
        (f"steady state: the source adds <= {TARGET_STEADY:.0%}", steady <= TARGET_STEADY),
        (
            f"first survey: the source's own work adds <= {TARGET_FIRST:.0%}",
            added_work(runs, "first") <= TARGET_FIRST,
        ),
        (
            f"steady state: the source's own work adds <= {TARGET_STEADY:.0%}",
            added_work(runs, "steady") <= TARGET_STEADY,
        ),
    ]
    if size != TARGET_SIZE:
        print(f"(the targets are for {TARGET_SIZE:,} ledgers; this run: {size:,})")

    def brief(got: dict[str, Any]) -> dict[str, Any]:
        pm = got.get("pulsar_metadata") or {}
        return {
            "mode": got["mode"],
            "seconds": round(got["seconds"], 2),
            "bookkeeper_survey_s": round(got["survey_s"], 2),
            "bookkeeper_seconds": got["cost"]["seconds"],
            "pulsar_metadata_cost": pm.get("cost"),
            "cycle_zk_reads": got["zookeeper"]["reads"],
            "by_step": got["zookeeper"]["by_step"],
            "peak_tree_rss_mib": mib(got["peak_tree_rss_bytes"]),
            "load_before": round(got["load_before"], 2),
        }

    _common.report(
        "pulsar_metadata",
        rows,
        targets,
        {
            "items": size,
            "quick": quick,
            "first_added": round(first, 4),
            "steady_added": round(steady, 4),
            "first_added_work": round(added_work(runs, "first"), 4),
            "steady_added_work": round(added_work(runs, "steady"), 4),
            "runs": {name: brief(got) for name, got in runs.items()},
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
