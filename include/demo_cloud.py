"""The demo's Pulsar cluster offloading to Google Cloud Storage and to Azure Blob Storage:
one namespace on each store, with the leaks Pulsar leaves in each, reclaimed by the same
DAG pointed at one store at a time.

Written into its own chroot (``/pulsar-demo-cloud``; ``include/pulsar_cluster.py``), the
objects into the local stack's fake-gcs-server (a versioned bucket) and Azurite (a
container), as Pulsar's jclouds offloaders write them (``<uuid>-ledger-<id>`` and its
``-index``, the cluster's name in ``pulsarClusterName``). Per store (``cloud/gcs``,
``cloud/azure``):

* a live topic with an offloaded ledger whose BookKeeper copy is gone, as Pulsar leaves
  it (live segments), and three offloaded and marked ``bookkeeperDeleted`` whose
  BookKeeper copies are still there (``bk-offloaded-copy``): one whose offloaded copy is
  whole (**confirmed**: its BookKeeper copy goes), one whose index object is missing and
  one whose data object is shorter than its index says (**unconfirmed**: held);
* a deleted topic's offloaded segments (Pulsar 9962, 16687): **orphan segments**;
* on GCS, jclouds' multipart leftovers of a broker stopped mid-upload, parts named
  ``<uuid>_<8 digits>`` (**orphan upload parts**);
* the streaming offloader's ``<uuid>``/``<uuid>-index`` and an operator's note:
  **foreign**, never deleted.

ledger-gc reads one offload bucket per cycle (its ``LEDGERGC_OFFLOAD_DRIVER``, bucket and
endpoint), so the demo runs the cycles once per store with that store's settings: first
GCS's (its leaks registered, then deleted past grace; the Azure namespace's copies are in
another driver's bucket, so they are neither live nor orphan there and their BookKeeper
copies are held), then Azure's. Each store's cycles run to the end before the other's
(the registry keeps no store column; see ``run_demo``'s doc).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient

from demo_object_stores import AzureObjects, GcsObjects
from ledger_gc import run_log
from ledger_gc.config.settings import Settings
from ledger_gc.console import human_bytes
from pulsar_cluster import PulsarCluster, ml_tags

CHROOT = "/pulsar-demo-cloud"
CLUSTER = "demo-cloud"
MIB = 1 << 20
FOREIGN_NOTE = "_operator-notes/README.txt"


@dataclass(frozen=True)
class CloudStore:
    """One store of the demo: where its namespace offloads, and how ledger-gc reaches it."""

    name: str  # "gcs" or "azure"
    title: str
    driver: str  # Pulsar's managedLedgerOffloadDriver
    bucket: str
    namespace: str
    endpoint: str  # the emulator's
    writer: Any  # GcsObjects or AzureObjects


def stores_from_env() -> list[CloudStore]:
    """The local stack's two emulators (``include/local_stack``); none when not there."""
    gcs_endpoint = os.environ.get("LOCAL_STACK_GCS_ENDPOINT")
    azure_endpoint = os.environ.get("LOCAL_STACK_AZURE_BLOB_ENDPOINT")
    if not gcs_endpoint or not azure_endpoint:
        return []
    from azure.storage.blob import BlobServiceClient
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    gcs = storage.Client(
        project="ledgergc-demo",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": gcs_endpoint},
    )
    azure = BlobServiceClient(
        azure_endpoint,
        credential={
            "account_name": os.environ["AZURE_STORAGE_ACCOUNT"],
            "account_key": os.environ["AZURE_STORAGE_ACCESS_KEY"],
        },
    )
    return [
        CloudStore(
            "gcs",
            "Google Cloud Storage (fake-gcs-server)",
            "google-cloud-storage",
            "pulsar-offload-gcs",
            "cloud/gcs",
            gcs_endpoint,
            GcsObjects(gcs),
        ),
        CloudStore(
            "azure",
            "Azure Blob Storage (Azurite)",
            "azureblob",
            "pulsar-offload-azure",
            "cloud/azure",
            azure_endpoint,
            AzureObjects(azure),
        ),
    ]


def plant(client: KazooClient, store: CloudStore) -> dict[str, Any]:
    """One store's namespace, objects and leaks (see the module's doc)."""
    store.writer.create_bucket(store.bucket)
    c = PulsarCluster(
        client,
        s3=store.writer,
        offload_bucket=store.bucket,
        offload_driver=store.driver,
        cluster_name=CLUSTER,
    )
    c.init()
    if not client.exists(f"/admin/clusters/{CLUSTER}"):
        c.cluster_definition(CLUSTER)
        # Id 0 would give the nil uuid (``pulsar_cluster.offload_uuid``): a broker's
        # first ledger is its own anyway.
        c.next_id()
    c.policies(store.namespace, replication_clusters=(CLUSTER,))
    c.namespace(store.namespace)
    topic = f"{store.namespace}/persistent/events"
    copies = {
        "confirmed": c.ledger(ml_tags(topic), length=MIB),
        "index missing": c.ledger(ml_tags(topic), length=MIB),
        "data truncated": c.ledger(ml_tags(topic), length=MIB),
    }
    # Older data offloaded long ago (its BookKeeper copy deleted, as Pulsar does), and
    # the topic's newest ledgers in BookKeeper: the bulk of the namespace, so that the
    # leaks stay under the orphan-fraction guard as in a real cluster.
    archived = c.ledger(ml_tags(topic), length=MIB)
    recent = c.ledger(ml_tags(topic), length=256 * MIB)
    current = c.ledger(ml_tags(topic), closed=False)
    offloaded = [archived, *copies.values()]
    c.managed_ledger(topic, [*offloaded, recent, current], offloaded_deleted=offloaded)
    c.offload_objects(archived, topic, data_bytes=MIB // 2)
    c.bk.delete(c.path(archived))
    live_keys = [key for lid in offloaded for key in c.offload_keys(lid)]
    # The offloaded copies that cannot be confirmed: an index never written, a data
    # object cut short (its index records the whole length).
    store.writer.delete_object(Bucket=store.bucket, Key=c.offload_keys(copies["index missing"])[1])
    live_keys.remove(c.offload_keys(copies["index missing"])[1])
    short_key = c.offload_keys(copies["data truncated"])[0]
    store.writer.put_object(
        Bucket=store.bucket,
        Key=short_key,
        Body=b"d" * 1000,
        Metadata={"ManagedLedgerName": topic, "pulsarClusterName": CLUSTER, "role": "data"},
    )
    # A deleted topic's offloaded segments: its ledgers' ids, its objects, no metadata.
    gone = f"{store.namespace}/persistent/deleted-topic"
    orphan_keys: list[str] = []
    for _ in range(2):
        lid = c.next_id()
        c.offload_objects(lid, gone)
        orphan_keys += c.offload_keys(lid)
    # jclouds' multipart upload to GCS, interrupted: its parts stay.
    part_keys: list[str] = []
    if store.name == "gcs":
        upload = uuid.uuid4()
        for number in range(1, 3):
            key = f"{upload}_{number:08d}"
            store.writer.put_object(Bucket=store.bucket, Key=key, Body=b"p" * 2048)
            part_keys.append(key)
    streaming = str(uuid.uuid4())
    foreign_keys = [streaming, f"{streaming}-index", FOREIGN_NOTE]
    for key in foreign_keys:
        store.writer.put_object(Bucket=store.bucket, Key=key, Body=b"not a ledger segment")
    return {
        "copies": copies,
        "live_keys": live_keys,
        "orphan_keys": orphan_keys,
        "part_keys": part_keys,
        "foreign_keys": foreign_keys,
    }


def check(client: KazooClient, store: CloudStore, planted: dict[str, Any]) -> dict[str, Any]:
    """What is left of one store's plant; raises if anything that must stay is gone."""
    keys = store.writer.sizes(store.bucket)
    c = PulsarCluster(client)
    copies: dict[str, bool] = {
        w: client.exists(c.path(lid)) is not None for w, lid in planted["copies"].items()
    }
    there: dict[str, Any] = {
        "copies": copies,
        "orphan segments": [k for k in planted["orphan_keys"] if k in keys],
        "upload parts": [k for k in planted["part_keys"] if k in keys],
    }
    lost = [k for k in planted["live_keys"] + planted["foreign_keys"] if k not in keys]
    lost += [f"BookKeeper copy ({w})" for w, ok in copies.items() if w != "confirmed" and not ok]
    if lost:
        raise SystemExit(f"demo: {store.name}: LIVE OR FOREIGN DATA DELETED: {lost}")
    return there


def leaks_left(there: dict[str, Any], store: CloudStore) -> dict[str, bool]:
    """Each planted leak of ``store``: still there?"""
    left = {
        "confirmed BookKeeper copy": there["copies"]["confirmed"],
        "orphan segments": bool(there["orphan segments"]),
    }
    if store.name == "gcs":
        left["upload parts"] = bool(there["upload parts"])
    return left


def store_settings(pulsar: Settings, store: CloudStore) -> Settings:
    """The cluster's settings pointed at one store's offload bucket."""
    return pulsar.with_overrides(
        zk_address=f"{pulsar.zk_hosts.split('/', 1)[0]}{CHROOT}",
        pulsar_clusters=(CLUSTER,),
        offload_driver=store.driver,
        offload_bucket=store.bucket,
        offload_prefix="",
        offload_endpoint=store.endpoint,
    )


def cloud_demo(
    settings: Settings,
    airflow_env: Callable[[Settings], dict[str, str]],
    run_dag: Callable[..., None],
    say: Callable[[str], None],
    wait: int,
    cycles: int = 4,
) -> None:
    """Plant both stores' namespaces, run each store's cycles to the end, report."""
    stores = stores_from_env()
    if not stores:
        say("   (no GCS/Azure emulators in this stack: LOCAL_STACK_GCS_ENDPOINT unset; skipped)")
        return
    hosts = settings.zk_hosts.split("/", 1)[0]
    root = KazooClient(hosts=hosts)
    root.start(timeout=15)
    root.ensure_path(CHROOT)
    root.stop()
    root.close()
    client = KazooClient(hosts=f"{hosts}{CHROOT}")
    client.start(timeout=15)
    try:
        planted = {store.name: plant(client, store) for store in stores}
        for store in stores:
            p = planted[store.name]
            say(
                f"   {store.title}, bucket {store.bucket}, namespace {store.namespace}: "
                f"{len(p['live_keys'])} live segment objects, {len(p['orphan_keys'])} of a "
                f"deleted topic, {len(p['part_keys'])} upload parts, "
                f"{len(p['foreign_keys'])} foreign objects; BookKeeper copies of offloaded "
                f"ledgers: {', '.join(f'{w} ({lid})' for w, lid in p['copies'].items())}"
            )
        results = {}
        for store in stores:
            results[store.name] = run_store(
                client,
                store,
                planted[store.name],
                settings,
                airflow_env,
                run_dag,
                say,
                wait,
                cycles,
            )
        for store in stores:
            there = check(client, store, planted[store.name])
            kept = [w for w, ok in there["copies"].items() if ok]
            say(f"   {store.name}: BookKeeper copies kept after both stores' cycles: {kept}")
    finally:
        client.stop()
        client.close()
    for store in stores:
        restore_note(store, results[store.name], planted[store.name], say)


def run_store(
    client: KazooClient,
    store: CloudStore,
    planted: dict[str, Any],
    settings: Settings,
    airflow_env: Callable[[Settings], dict[str, str]],
    run_dag: Callable[..., None],
    say: Callable[[str], None],
    wait: int,
    cycles: int,
) -> dict[str, Any]:
    """One store's cycles, until its leaks are gone (at most ``cycles``); its report."""
    pulsar = store_settings(settings, store)
    say(f"\n== Tiered storage on {store.title}: the orphan cycle pointed at {store.bucket}")
    env = airflow_env(pulsar)
    reclaimed_in: dict[str, int] = {}
    first_run = len(run_log.read_runs(pulsar, run_log.ORPHANS))
    for number in range(1, cycles + 1):
        if number > 1:
            say(f"   waiting {wait} s for the grace window and retention to pass")
            time.sleep(wait)
        run_dag(
            env,
            "orphan_removal",
            {"dry_run": False},
            log_name=f"{store.name}-orphan_removal-{number}",
        )
        there = check(client, store, planted)
        for what, left in leaks_left(there, store).items():
            if not left:
                reclaimed_in.setdefault(what, number)
        if number >= 2 and not any(leaks_left(there, store).values()):
            break
    runs = run_log.read_runs(pulsar, run_log.ORPHANS)[first_run:]
    for number, run in enumerate(runs, 1):
        for line in cycle_lines(run):
            say(f"   cycle {number}: {line}" if not line.startswith(" ") else f"   {line}")
    for what in leaks_left(there, store):
        when = f"reclaimed in cycle {reclaimed_in[what]}" if what in reclaimed_in else "STILL THERE"
        say(f"   leak {what}: {when}")
    still = [what for what, ok in leaks_left(there, store).items() if ok]
    if still:
        raise SystemExit(
            f"demo: {store.name}: planted leaks not reclaimed in {len(runs)} cycles: {still}"
        )
    return {"runs": runs, "settings": pulsar}


def cycle_lines(run: dict[str, Any]) -> list[str]:
    """A cycle's figures for one store, from its run summary."""
    lines = []
    tiered = run.get("tiered") or {}
    classes = run.get("classes") or {}
    found = ", ".join(
        f"{name} {value.get('units', 0)}"
        for name, value in classes.items()
        if value.get("units") and name != "live-segment"
    )
    lines.append(f"({run.get('status')}) found {found or 'nothing'}")
    if tiered:
        lines.append(
            f"  {tiered.get('bucket')}: {tiered.get('live_segments')} live segments, "
            f"{tiered.get('orphan_segments')} orphan segments "
            f"({human_bytes(tiered.get('orphan_bytes') or 0)}), "
            + (
                f"{tiered['orphan_upload_parts']} upload parts "
                f"({human_bytes(tiered.get('orphan_upload_part_bytes') or 0)}), "
                if tiered.get("orphan_upload_parts")
                else ""
            )
            + f"{tiered.get('foreign_objects')} foreign objects untouched"
        )
        freed = (tiered.get("bytes_reclaimed") or 0) + (
            tiered.get("upload_part_bytes_reclaimed") or 0
        )
        lines.append(
            f"  deleted {tiered.get('deleted')} segments and "
            f"{tiered.get('upload_parts_deleted', 0)} upload parts: {human_bytes(freed)}"
            f" freed, {human_bytes(run.get('bytes_recoverable') or 0)} kept by the bucket "
            "(restorable)"
        )
        for held in tiered.get("held") or []:
            lines.append(f"  held: {held.get('prefix') or held.get('key')}: {held.get('reason')}")
    bk = run.get("bookkeeper") or {}
    if bk:
        copies = (bk.get("classes") or {}).get("bk-offloaded-copy") or {}
        lines.append(
            f"  BookKeeper: {copies.get('ledgers', 0)} offloaded copy confirmed, "
            f"{bk.get('deleted', 0)} ledgers deleted; held:"
        )
        for held in (bk.get("samples") or {}).get("bk-held", [])[:8]:
            lines.append(f"    ledger {held.get('ledger_id')}: {held.get('reason')}")
    for refusal in run.get("refusals", []):
        lines.append(f"  refused: {refusal}")
    return lines


def restore_note(
    store: CloudStore,
    result: dict[str, Any],
    planted: dict[str, Any],
    say: Callable[[str], None],
) -> None:
    """What the store keeps of a delete, in the library's words, and, where it keeps it,
    ``ledgergc restore --run <id>`` of the store's deleting cycle: its segments back from
    their noncurrent generations (fake-gcs-server keeps them in a versioned bucket;
    Azurite keeps no deleted blob, so there only the BookKeeper ledger comes back)."""
    from ledger_gc.config.edge import offload_store
    from ledger_gc.storage.offload_buckets import offload_bucket

    settings: Settings = result["settings"]
    kept = offload_bucket(offload_store(settings)).versioning()
    say(f"   {store.name}: {kept.note}")
    deleting = [r for r in result["runs"] if (r.get("tiered") or {}).get("deleted")]
    if not deleting:
        return
    run_id = str(deleting[-1].get("run_id"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERGC_")}
    env.update(settings.to_env())
    ledgergc = os.path.join(os.path.dirname(sys.executable), "ledgergc")
    done = subprocess.run(
        [ledgergc, "restore", "--run", run_id, "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        report = json.loads(done.stdout)
    except ValueError:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        say(f"   {store.name}: ledgergc restore --run {run_id}: exit {done.returncode}: {last}")
        return
    deleted = planted["orphan_keys"] + planted["part_keys"]
    back = set(store.writer.sizes(store.bucket))
    ledgers = sum(
        1 for p in report.get("prefixes", []) if p.get("target_class", "").startswith("bk-")
    )
    say(
        f"   {store.name}: `ledgergc restore --run {run_id}`: "
        f"{report.get('objects_restored', 0)} restored "
        f"({human_bytes(report.get('bytes_restored') or 0)}): {ledgers} BookKeeper ledger "
        f"re-created, {sum(1 for k in deleted if k in back)} of the {len(deleted)} deleted "
        "objects in the bucket again (a restored orphan is an orphan again)"
    )
