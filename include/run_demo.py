"""The main job: a demo store with real leaks, the DAGs run against it, and a report.

Run by ``bin/demo`` inside ``include/local_stack run``, which starts a local ZooKeeper
and a local S3 endpoint and passes their addresses in ``LEDGERGC_ZK_HOSTS`` and
``LEDGERGC_S3_ENDPOINT``. Steps:

1. write a demo store (topics, ledgers, consumers that acked part of it);
2. plant leaks: ledgers a legacy delete left behind, a deleted topic's data, a foreign file;
3. run the ``ledger_trim`` DAG (``airflow dags test``): consumed ledgers are reclaimed;
4. run the ``orphan_removal`` DAG twice with a grace window and retention of seconds: the
   first run registers the orphans, the second deletes those still orphaned;
5. check that every live ledger is still readable, and print what was found and reclaimed;
6. the same DAG against a small Pulsar cluster (its own chroot): its BookKeeper leaks,
   and Pulsar's own metadata left by a namespace deleted half way, a deleted tenant and
   a dead broker, reclaimed over a few cycles (records, then emptied parents, then the
   BookKeeper ledgers they named), and what it kept and why (a live broker's heartbeat,
   a namespace not replicated here, a delete Pulsar left half done, a bundle still
   owned, a topic whose ledger is missing).

7. a Pulsar cluster offloading one namespace to Google Cloud Storage (the stack's
   fake-gcs-server) and one to Azure Blob Storage (its Azurite), with the leaks of each
   (``demo_cloud``): the DAG runs once per store with that store's offload settings,
   since a cycle reads one offload bucket.

``--part cloud`` runs step 7 alone.

Both stores' runs go to one state store (``var/demo/state``), so that
``bin/airflow --state-dir var/demo/state`` shows everything the demo did. That is a demo's
shortcut, not a deployment's: the orphan registry has no column for the store, so a
cycle drops the registered orphans of a source it did not scan ("did not scan ...;
tracked again when it is scanned"). The demo runs the store's cycles to the end first
(nothing stays registered), then the cluster's; a deployment gives each store its own
``LEDGERGC_STATE_DIR`` or ``LEDGERGC_STATE_URL``.
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

import boto3
from kazoo.client import KazooClient

import demo_cloud
import demo_pulsar
from demo_leaks import plant_leaks
from demo_store import OFFLOADED_TOPIC, write_demo_store
from ledger_gc import run_log
from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import block_store, offload_store, zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.console import human_bytes
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.observability import pm_runs
from ledger_gc.observability.status import collect_status
from ledger_gc.rules.bookkeeper.records import BYTES_MEANING
from ledger_gc.rules.pulsar_metadata.classes import PM_ORPHAN_CLASSES
from ledger_gc.state.stores import open_store
from ledger_gc.storage.s3 import LedgerStorage, OffloadStorage
from local_stack.server_process import FAST_JVM

ROOT = Path(__file__).resolve().parent.parent
DEMO_DIR = ROOT / "var" / "demo"
#: The one state store of the whole demo: what ``bin/airflow --state-dir`` is pointed at.
STATE_DIR = DEMO_DIR / "state"
CHROOT = "/ledger-gc-demo"
GRACE_SECONDS = 5
RETENTION_SECONDS = 5


def say(message: str = "") -> None:
    print(message, flush=True)


def heading(message: str) -> None:
    say()
    say(f"== {message}")


def demo_settings() -> Settings:
    """The stack's addresses plus the demo's own chroot, bucket, prefix and state dir."""
    # The local stack starts empty every time, so the state describing the last demo's
    # store (registry, audit log, run summaries) must go too.
    shutil.rmtree(STATE_DIR, ignore_errors=True)
    shutil.rmtree(DEMO_DIR / "pulsar-state", ignore_errors=True)  # an older demo's
    base = Settings.from_env()
    hosts = base.zk_hosts.split("/", 1)[0]
    with_chroot = f"{hosts}{CHROOT}"
    client = KazooClient(hosts=hosts)
    client.start(timeout=15)
    client.ensure_path(CHROOT)
    client.stop()
    client.close()
    settings = base.with_overrides(
        zk_address=with_chroot,
        bucket="ledger-gc-demo",
        prefix="ledgers",
        state_dir=STATE_DIR,
        delete_enabled=True,
        grace_seconds=GRACE_SECONDS,
        retention_seconds=RETENTION_SECONDS,
        # Pulsar's tiered storage: an offload bucket on the same local SeaweedFS.
        offload_bucket="ledger-gc-demo-offload",
        offload_prefix="tiered",
    )
    s3 = boto3.client("s3", endpoint_url=settings.s3_endpoint, region_name=settings.s3_region)
    existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
    for bucket in (settings.bucket, settings.offload_bucket):
        if bucket not in existing:
            s3.create_bucket(Bucket=bucket)
    return settings


def airflow_env(settings: Settings) -> dict[str, str]:
    home = DEMO_DIR / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update(settings.to_env())
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "PYSPARK_PYTHON": sys.executable,
            # A demo's Spark apps are short: a JVM tuned for start-up beats one tuned for
            # throughput (the tests do the same; a cluster keeps its own defaults).
            "SPARK_SUBMIT_OPTS": FAST_JVM,
            "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
        }
    )
    return env


def airflow(env: dict[str, str], *args: str, log_name: str) -> None:
    """Run an ``airflow`` command; its output goes to a log file, shown on failure."""
    log_path = DEMO_DIR / "logs" / f"{log_name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    airflow_bin = str(Path(sys.executable).parent / "airflow")
    started = time.monotonic()
    with open(log_path, "w") as log:
        result = subprocess.run([airflow_bin, *args], env=env, stdout=log, stderr=subprocess.STDOUT)
    took = time.monotonic() - started
    if result.returncode != 0:
        say(log_path.read_text()[-6000:])
        raise SystemExit(f"demo: `airflow {' '.join(args)}` failed; full log: {log_path}")
    say(f"   airflow {' '.join(a for a in args if not a.startswith('{'))}: ok in {took:.0f} s")


def run_dag(env: dict[str, str], dag_id: str, conf: dict[str, Any], log_name: str) -> None:
    airflow(env, "dags", "test", dag_id, "-c", json.dumps(conf), log_name=log_name)


def print_store(settings: Settings, title: str) -> dict[str, Any]:
    with MetadataStore.open(zk_endpoint(settings)) as store:
        status = collect_status(store, LedgerStorage(block_store(settings)))
    data = status.to_dict()
    totals = data["totals"]
    heading(title)
    say(
        f"   {totals['managed_ledgers']} topics, {totals['ledgers']} ledgers, "
        f"{totals['cursors']} cursors; {human_bytes(totals['storage_bytes'])} of ledger data, "
        f"{status.orphaned_objects or 0} objects of no topic, "
        f"{status.foreign_objects or 0} foreign objects"
    )
    for ml in status.managed_ledgers:
        cursors = ", ".join(f"{c.name}@{c.mark_delete}" for c in ml.cursors) or "no consumers"
        say(
            f"   {ml.name:<40} {len(ml.ledgers):>3} ledgers {human_bytes(ml.storage_bytes):>10}"
            f"  {cursors}"
        )
    return data


def offload_bucket_keys(settings: Settings) -> dict[str, int]:
    offload = OffloadStorage(offload_store(settings))
    return {obj.key: obj.size for obj in offload.iter_objects(offload.store.key_prefix)}


def verify_live_data(settings: Settings) -> int:
    """Read back every entry of every listed ledger, and check that every listed
    offloaded ledger still has its two tiered-storage objects; return entries read."""
    from ledger_gc.rules.storage.offload_keys import segment_keys
    from ledger_gc.s3_orphans.reading import offload_uuid_of

    storage = LedgerStorage(block_store(settings))
    tiered = offload_bucket_keys(settings)
    read = 0
    with MetadataStore.open(zk_endpoint(settings)) as store:
        for name in store.list_managed_ledgers():
            for ledger in store.get_managed_ledger(name).value.ledgerInfo:
                offload_uuid = offload_uuid_of(ledger)
                if offload_uuid and ledger.offloadContext.complete:
                    missing = [
                        k
                        for k in segment_keys(
                            settings.offload_prefix, offload_uuid, ledger.ledgerId
                        )
                        if k not in tiered
                    ]
                    if missing:
                        raise SystemExit(
                            f"demo: LIVE OFFLOADED DATA LOST: {name} ledger {ledger.ledgerId}: "
                            f"{missing}"
                        )
                blocks = storage.list_blocks(name, ledger.ledgerId)
                got = 0
                for block in blocks:
                    got += len(storage.read_block(name, ledger.ledgerId, block).entries)
                if ledger.entries and got < ledger.entries:
                    raise SystemExit(
                        f"demo: LIVE DATA LOST: {name} ledger {ledger.ledgerId} has "
                        f"{got} of {ledger.entries} entries"
                    )
                read += got
    return read


def runs_of(settings: Settings, kind: str) -> list[dict[str, Any]]:
    """The runs of one of the demo's two stores (they share a state store): those whose
    summary names its ZooKeeper chroot. A trim's summary names none: only the store runs
    the trim."""
    return [
        run
        for run in run_log.read_runs(settings, kind)
        if (run.get("settings") or {}).get("zk_hosts", settings.zk_hosts) == settings.zk_hosts
    ]


def report(settings: Settings, before: dict[str, Any], after: dict[str, Any]) -> None:
    heading("Report")
    for run in run_log.read_runs(settings, run_log.TRIM):
        totals = run.get("totals", {})
        say(
            f"   trim ({run.get('outcome')}): {totals.get('ledgers_marked', 0)} consumed ledgers "
            f"marked, {totals.get('ledgers_deleted', 0)} deleted, "
            f"{human_bytes(totals.get('bytes_reclaimed', 0))} reclaimed, "
            f"{totals.get('markers_pending', 0)} markers pending, "
            f"{totals.get('zk_writes', 0)} ZooKeeper writes"
        )
    for number, run in enumerate(runs_of(settings, run_log.ORPHANS), 1):
        phases = run.get("phases", {})
        classes = run.get("classes", {})

        def phase(name: str, phases: dict[str, Any] = phases) -> str:
            value = phases.get(name, {})
            return f"{value.get('count', 0)} ({human_bytes(value.get('bytes', 0))})"

        found = ", ".join(
            # Orphans count per ledger or topic; foreign keys per object.
            f"{name} {value.get('objects' if name == 'foreign' else 'units', 0)}"
            for name, value in classes.items()
            if name in ("orphan-ledger", "orphan-partition", "foreign", "orphan-segment")
        )
        say(f"   orphan cycle {number} ({run.get('status')}): found {found}")
        tiered = run.get("tiered")
        if tiered:
            say(
                f"     tiered storage {tiered['bucket']}/{tiered['prefix']}: "
                f"{tiered['live_segments']} live segments, {tiered['orphan_segments']} orphan "
                f"segments ({human_bytes(tiered['orphan_bytes'])}), "
                f"{tiered['foreign_objects']} foreign objects untouched; "
                f"deleted {tiered['deleted']} segments, "
                f"{human_bytes(tiered['bytes_reclaimed'])} reclaimed"
            )
        say(
            f"     registered {phase('registered')}, waiting in grace {phase('waiting_grace')}, "
            f"waiting for retention {phase('waiting_retention')}, deleted {phase('deleted')}"
        )
        for refusal in run.get("refusals", []):
            say(f"     refused: {refusal}")
    audit = [r for r in AuditLog(settings).deletions() if not r["target_class"].startswith("bk-")]
    say(f"   audit log: {len(audit)} deletions recorded")
    by_operation: dict[str, list[dict[str, Any]]] = {}
    for record in audit:
        by_operation.setdefault(record["operation"], []).append(record)
    for operation, records in sorted(by_operation.items()):
        classes_count: dict[str, int] = {}
        for record in records:
            classes_count[record["target_class"]] = classes_count.get(record["target_class"], 0) + 1
        total = sum(r["bytes"] for r in records)
        say(f"     {operation:<16} {human_bytes(total):>10}  {classes_count}")
    reclaimed = before["totals"]["storage_bytes"] - after["totals"]["storage_bytes"]
    say(
        f"   storage: {human_bytes(before['totals']['storage_bytes'])} -> "
        f"{human_bytes(after['totals']['storage_bytes'])} ({human_bytes(reclaimed)} reclaimed); "
        f"objects of no topic: {before.get('orphaned_objects')} -> {after.get('orphaned_objects')}"
    )
    say(f"   foreign objects left untouched: {after.get('foreign_objects')}")
    say(f"   state store (audit log, run summaries, registry): {open_store(settings).display_url}")


def pulsar_settings(settings: Settings) -> Settings:
    """The demo's Pulsar cluster: its own chroot, no block store (its data is in
    BookKeeper), tiered storage in the demo's offload bucket under its own prefix (an
    offloaded ledger's BookKeeper copy goes only once its offloaded objects are seen);
    the demo's one state store (see the module's doc)."""
    hosts = settings.zk_hosts.split("/", 1)[0]
    return settings.with_overrides(
        zk_address=f"{hosts}{demo_pulsar.CHROOT}",
        bucket="",
        offload_prefix=demo_pulsar.OFFLOAD_PREFIX,
        bookkeeper="true",
        # Its name, for the namespaces whose replication_clusters exclude it.
        pulsar_clusters=(demo_pulsar.CLUSTER,),
    )


def pulsar_cluster_settings(settings: Settings) -> Settings:
    """``pulsar_settings``, with the cluster's chroot created."""
    hosts = settings.zk_hosts.split("/", 1)[0]
    client = KazooClient(hosts=hosts)
    client.start(timeout=15)
    client.ensure_path(demo_pulsar.CHROOT)
    client.stop()
    client.close()
    return pulsar_settings(settings)


#: Orphan cycles the Pulsar cluster's part runs at most. BookKeeper's leaks go in the
#: second (registered, then deleted past grace); Pulsar's metadata takes longer: a cycle
#: removes a leftover's records, a later one its emptied parents (a client cannot tell a
#: container parent from a persistent one), and the ledgers those records named are
#: handed to the BookKeeper source, which deletes them past their own grace window.
PULSAR_CYCLES = 6


def bookkeeper_demo(settings: Settings) -> None:
    pulsar = pulsar_cluster_settings(settings)
    heading(f"A Pulsar cluster's BookKeeper and metadata: zk={pulsar.zk_hosts}")
    # This session is also the live broker's registration and a bundle's owner (both
    # ephemeral): it stays open while the DAG runs in other processes.
    client = KazooClient(hosts=pulsar.zk_hosts)
    client.start(timeout=15)
    reclaimed_in: dict[str, int] = {}
    try:
        s3 = boto3.client("s3", endpoint_url=pulsar.s3_endpoint, region_name=pulsar.s3_region)
        planted = demo_pulsar.plant(client, s3, pulsar.offload_bucket)
        for group in ("leaks", "kept"):
            ids = planted[group]
            say(f"   planted {group}: {', '.join(f'{w} ({i})' for w, i in ids.items())}")
        for group, items in planted["metadata"].items():
            say(f"   planted metadata {group}: {', '.join(items)}")
        say(f"   live ledgers: {len(planted['live'])}")
        env = airflow_env(pulsar)
        wait = max(GRACE_SECONDS, RETENTION_SECONDS) + 1
        for number in range(1, PULSAR_CYCLES + 1):
            if number > 1:
                say(f"   waiting {wait} s for the grace window and retention to pass")
                time.sleep(wait)
            run_dag(
                env,
                "orphan_removal",
                {"dry_run": False},
                log_name=f"pulsar-orphan_removal-{number}",
            )
            there = demo_pulsar.check(client, planted)
            for what, left in _leaks_left(there).items():
                if not left:
                    reclaimed_in.setdefault(what, number)
            if number >= 2 and not any(_leaks_left(there).values()):
                break
    finally:
        client.stop()
        client.close()
    pulsar_report(pulsar, there, reclaimed_in)


def _leaks_left(there: dict[str, Any]) -> dict[str, bool]:
    """Each planted leak (a ledger, or a group of metadata znodes): still there?"""
    return {
        **there["leaks"],
        **{what: bool(paths) for what, paths in there["metadata"]["leaks"].items()},
    }


def pulsar_report(pulsar: Settings, there: dict[str, Any], reclaimed_in: dict[str, int]) -> None:
    """What each cycle found, reclaimed and kept, read from the cycles' own records."""
    heading("Report: the Pulsar cluster")
    runs = runs_of(pulsar, run_log.ORPHANS)
    for number, run in enumerate(runs, 1):
        bk = run.get("bookkeeper") or {}
        found = ", ".join(
            f"{name} {totals['ledgers']}"
            for name, totals in (bk.get("classes") or {}).items()
            if totals["ledgers"]
        )
        say(
            f"   orphan cycle {number} ({run.get('status')}): {bk.get('ledgers')} ledgers: "
            f"{found}; deleted {bk.get('deleted', 0)}, "
            f"{human_bytes(bk.get('bytes_reclaimed', 0))} reclaimed ({BYTES_MEANING})"
        )
        for line in pulsar_metadata_lines(run):
            say(f"     {line}")
        for refusal in run.get("refusals", []):
            say(f"     refused: {refusal}")
    for what in _leaks_left(there):
        when = f"reclaimed in cycle {reclaimed_in[what]}" if what in reclaimed_in else "STILL THERE"
        say(f"   leak {what}: {when}")
    kept = sum(there["kept"].values()) + sum(there["live"].values())
    say(f"   kept: {kept} live, held or foreign ledgers untouched ({', '.join(there['kept'])})")
    say(f"   kept metadata: {', '.join(there['metadata']['kept'])}")
    audit = AuditLog(pulsar).deletions()
    ledgers = [r for r in audit if r["target_class"].startswith("bk-")]
    znodes = [r for r in audit if r["target_class"] in PM_ORPHAN_CLASSES]
    say(
        f"   audit log: {len(ledgers)} BookKeeper ledgers deleted, each audited ahead with "
        "its record's bytes: `ledgergc restore --run <id>` re-creates them until the "
        "bookies' next garbage collection (gcWaitTime, 10 minutes by default)"
    )
    metadata_runs = sorted({r["run_id"] for r in znodes})
    say(
        f"   audit log: {len(znodes)} metadata znodes removed "
        f"({human_bytes(sum(r['bytes'] for r in znodes))}), each with its data and ACL: "
        + (
            ", ".join(f"`ledgergc restore --run {run_id}`" for run_id in metadata_runs)
            + " re-creates them, parents first"
            if metadata_runs
            else "none yet"
        )
    )
    left = [what for what, ok in _leaks_left(there).items() if ok]
    if left:
        raise SystemExit(f"demo: planted leaks not reclaimed in {len(runs)} cycles: {left}")
    for leftover in demo_pulsar.LEFTOVERS:
        say(f"   {leftover}: {_leftover_order(leftover, there, reclaimed_in)}")


def _leftover_order(leftover: str, there: dict[str, Any], reclaimed_in: dict[str, int]) -> str:
    """When a leftover went, checked against DESIGN's order: its records in one cycle, its
    emptied parents in a later one (never in the cycle that emptied them), and the
    BookKeeper ledgers the records named after the records (handed to the BookKeeper
    source, which deletes them past its own grace window)."""
    records = reclaimed_in[f"{leftover}: records"]
    parents = reclaimed_in[f"{leftover}: parents"]
    ledgers = [reclaimed_in[w] for w in there["leaks"] if w.startswith(f"{leftover}: ")]
    if not records < parents or not all(records < cycle for cycle in ledgers):
        raise SystemExit(
            f"demo: {leftover} went out of order: records in cycle {records}, parents in "
            f"cycle {parents}, its ledgers in cycles {ledgers}"
        )
    return (
        f"records removed in cycle {records}, emptied parents in cycle {parents}, its "
        f"{len(ledgers)} BookKeeper ledgers in cycle {max(ledgers)}"
    )


def pulsar_metadata_lines(run: dict[str, Any]) -> list[str]:
    """A cycle's Pulsar-metadata figures as the page reads them (``pm_runs``)."""
    pm = pm_runs.pulsar_metadata_figures(run)
    if pm is None:
        return ["Pulsar metadata: not surveyed (the source was off in this cycle)"]
    found = ", ".join(
        f"{cls} {store} {leaf['leftovers']} ({leaf['znodes']} znodes)"
        for cls, per_store in pm["classes"].items()
        for store, leaf in per_store.items()
        if leaf["leftovers"]
    )
    znodes = pm["local_znodes"]
    lines = [
        f"Pulsar metadata: {found or 'nothing left behind'}; local store znodes "
        f"{znodes['before']} -> {znodes['after']}; removed "
        f"{pm['znodes_deleted'].get('local', 0)} local and "
        f"{pm['znodes_deleted'].get('config', 0)} configuration-store znodes; the leftovers "
        f"hold back {pm['held_back']['ledgers']} BookKeeper ledgers "
        f"({human_bytes(pm['held_back']['bytes'])})"
    ]
    lines += [f"stuck delete {i['name']}: {i['command'] or i['why']}" for i in pm["stuck_deletes"]]
    lines += [f"not replicated here {i['name']}: {i['why']}" for i in pm["not_replicated"]]
    lines += [f"held {i['name']} ({i['store']}): {i['why']}" for i in pm["held"]]
    missing = pm_runs.bk_missing(run.get("bookkeeper") or {})
    lines += [
        f"bk-missing: {m['topic']} ledger {m['ledger_id']} (named by {m['named_by']})"
        for m in missing["samples"]
    ]
    return lines


def cloud_part(settings: Settings) -> None:
    """The Pulsar cluster offloading to GCS and to Azure (``demo_cloud``)."""
    heading("A Pulsar cluster offloading to Google Cloud Storage and Azure Blob Storage")
    demo_cloud.cloud_demo(
        settings,
        airflow_env,
        run_dag,
        say,
        wait=max(GRACE_SECONDS, RETENTION_SECONDS) + 1,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description="ledger-gc's demo (run by bin/demo)")
    parser.add_argument(
        "--part",
        choices=("all", "cloud"),
        default="all",
        help="cloud: only the Pulsar cluster offloading to GCS and Azure",
    )
    args = parser.parse_args()
    started = time.monotonic()
    settings = demo_settings()
    if args.part == "cloud":
        airflow(airflow_env(settings), "db", "migrate", log_name="db-migrate")
        cloud_part(settings)
        say(f"\ndemo (cloud part) finished in {time.monotonic() - started:.0f} s")
        return 0
    heading(
        f"Demo store: zk={settings.zk_hosts} s3={settings.s3_endpoint} bucket={settings.bucket}"
    )
    names = write_demo_store(settings)
    say(f"   wrote {len(names)} topics with consumers")
    leaks = plant_leaks(settings, offloaded_topic=OFFLOADED_TOPIC)
    tiered_before = offload_bucket_keys(settings)
    say(f"   planted leaks: {json.dumps(leaks, sort_keys=True, default=str)}")
    before = print_store(settings, "The store before maintenance")

    env = airflow_env(settings)
    heading("Airflow")
    airflow(env, "db", "migrate", log_name="db-migrate")
    run_dag(env, "ledger_trim", {"dry_run": False}, log_name="ledger_trim")
    heading("Orphan removal, first run: scan and register")
    run_dag(env, "orphan_removal", {"dry_run": False}, log_name="orphan_removal-1")
    wait = max(GRACE_SECONDS, RETENTION_SECONDS) + 1
    say(f"   waiting {wait} s for the grace window and retention to pass")
    time.sleep(wait)
    heading("Orphan removal, second run: re-check live and delete")
    run_dag(env, "orphan_removal", {"dry_run": False}, log_name="orphan_removal-2")

    after = print_store(settings, "The store after maintenance")
    entries = verify_live_data(settings)
    say(f"   every live ledger is readable: {entries} entries read back")
    report(settings, before, after)
    tiered_after = offload_bucket_keys(settings)
    say(
        f"   tiered storage: {len(tiered_before)} objects "
        f"({human_bytes(sum(tiered_before.values()))}) -> {len(tiered_after)} objects "
        f"({human_bytes(sum(tiered_after.values()))}); the deleted topic's offloaded segments "
        "and the failed offload's stale uuid are gone, live segments and the streaming "
        "offloader's objects stay"
    )
    bookkeeper_demo(settings)
    cloud_part(settings)
    say(
        f"\n   all of it, the store's and the Pulsar cluster's runs, in one state store: "
        f"bin/airflow --state-dir {STATE_DIR.relative_to(ROOT)} shows it"
    )
    say(f"\ndemo finished in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
