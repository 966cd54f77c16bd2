#!/usr/bin/env python3
"""Figure 11: the tiered-storage survey of an offload bucket on Google Cloud Storage and on
Azure Blob Storage, 200,000 offloaded objects (100,000 ledgers: a data and an index object
each) on each store's emulator: the whole ``ledgergc orphans --dry-run --json`` command
beside a user's paginated SDK listing with the same diff in Python, both in one run, with
the peak memory of each, at two sizes (memory must stay flat in the number of objects).

The data (``plan``), the same ledgers on both stores:

* managed ledgers ``bench/offload/persistent/t-<i>`` of 100 ledgers each, every ledger
  offloaded (a random uuid; ``offloadContext`` complete, ``bookkeeperDeleted``; the
  driver's name and bucket in ``driverMetadata``) and its two objects
  ``<uuid>-ledger-<id>`` and ``<uuid>-ledger-<id>-index`` in the bucket's root, as
  Pulsar's jclouds offloader writes them;
* every 20th managed ledger has no znode (a deleted topic, Pulsar 9962): its 200 objects
  are **orphan segments** (5 %);
* a few objects that are not segments: the streaming offloader's ``<uuid>`` and
  ``<uuid>-index`` and an operator's note (**foreign**), and on GCS, jclouds' multipart
  leftovers ``<uuid>_<8 digits>`` (**upload parts**).

The Pulsar metadata is in a ZooKeeper of the command's own, one chroot per store and size
(the driver name differs). The stores are emulators of the command's own, on free
loopback ports, kept in ``var/bench/offload-listing/<objects>/`` and reused while the
plan matches (``--fresh`` rebuilds them): fake-gcs-server on its filesystem backend (its
memory backend finds an object by a linear scan, so 200,000 uploads into it are
quadratic) and Azurite on disk.

Seeding. Through each emulator's API, tiny objects go in at about 150-300 objects/s on
this (shared, 2-core) machine, parallel or not: 200,000 would take 15-25 minutes a store.
So one data and one index object are uploaded through the API as templates, and every
other object is written in the emulator's own storage beside them while it is stopped,
then it is started on it: for fake-gcs-server's filesystem backend a file per object
with the template's attributes (its own generation) in the same extended attribute; for
Azurite a copy of the template's document per blob in its saved LokiJS database (its own
name, ETag and id; the body is the template's extent) with the sorted indices rebuilt.
Both emulators then serve them as their own uploads: listed, read and deleted through
their APIs like any other object.

One run, per store, per size:

1. **the user's listing** (the baseline, ``user_listing``, in a child process of its own:
   its peak memory is its own): the managed ledgers' records read with kazoo
   (``get_async``, all in flight, each decoded), the set of live ``(uuid, ledger)``
   pairs, then the bucket listed page by page with the store's SDK
   (``google-cloud-storage`` ``list_blobs(...).pages``, 1,000 a page;
   ``azure-storage-blob`` ``list_blobs().by_page()``, 5,000 a page), each key parsed and
   looked up: the orphan segments, the rest counted;
2. **the command**: ``ledgergc orphans --dry-run --json`` with
   ``LEDGERGC_OFFLOAD_DRIVER`` and ``LEDGERGC_OFFLOAD_ENDPOINT`` naming the store
   (ledger-gc runs one offload bucket per cycle, so each store is its own command), its
   whole process time (Python, Spark's JVM, the cycle, the report), its report's
   classes checked against the plan, and the process tree's peak resident memory.

    .venv/bin/python bench/offload_listing.py [--objects 200000] [--stores gcs,azure]
        [--fresh] [--seed-only] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import _common
from _common import fmt_s, mib, ratio, say

sys.path.insert(0, str(_common.ROOT / "include"))

TARGET_OBJECTS = 200_000
QUICK_OBJECTS = 4_000
#: The second size, for memory: this fraction of the first.
SMALL_FRACTION = 10
TARGET_RATIO = 2.0
#: Memory "flat": the command's peak at the big size within this factor of the small's.
FLAT_FACTOR = 1.25
LAYOUT_VERSION = 1

PER_ML = 100
NAMESPACE = "bench/offload"
CLUSTER = "bench"
STORES = ("gcs", "azure")
DRIVERS = {"gcs": "google-cloud-storage", "azure": "azureblob"}
DATA_BODY = b"offloaded ledger data: a benchmark's tiny stand-in"
INDEX_BODY = b"offloaded ledger index: a benchmark's tiny stand-in"
FOREIGN_NOTE = "_operator-notes/README.txt"
STREAMING_OBJECTS = 4
UPLOAD_PARTS = 8
#: Ages of everything in the store: older than any retention.
OLD = datetime(2026, 1, 1, tzinfo=UTC)


# --- the plan ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """What one size of the benchmark puts into a store and its metadata."""

    ledgers: int
    seed: int

    @property
    def managed_ledgers(self) -> int:
        return self.ledgers // PER_ML

    def ml_name(self, index: int) -> str:
        return f"{NAMESPACE}/persistent/t-{index:05d}"

    @staticmethod
    def is_gone(index: int) -> bool:
        """This managed ledger has no znode (a deleted topic): its segments are orphans."""
        return index % 20 == 7

    def entries(self) -> Iterator[tuple[int, int, str]]:
        """(managed-ledger index, ledger id, offload uuid) of every ledger."""
        rng = random.Random(self.seed)
        for ledger_id in range(self.ledgers):
            yield (
                ledger_id // PER_ML,
                ledger_id,
                str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            )

    def others(self, store: str) -> dict[str, list[str]]:
        """The keys that are not segments: foreign objects, and GCS's upload parts."""
        rng = random.Random(self.seed + 1)
        streaming = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(4)]
        foreign = [FOREIGN_NOTE, *streaming, *(f"{s}-index" for s in streaming)]
        parts = (
            [
                f"{uuid.UUID(int=rng.getrandbits(128), version=4)}_{n:08d}"
                for n in range(UPLOAD_PARTS)
            ]
            if store == "gcs"
            else []
        )
        return {"foreign": foreign, "upload_parts": parts}

    def expected(self) -> dict[str, int]:
        gone = sum(1 for i in range(self.managed_ledgers) if self.is_gone(i))
        return {
            "objects": 2 * self.ledgers,
            "live_segments": (self.managed_ledgers - gone) * PER_ML,
            "orphan_segments": gone * PER_ML,
        }


def plans(objects: int) -> dict[str, Plan]:
    """The two sizes: ``objects`` and a tenth of it."""
    big = objects // 2
    return {"big": Plan(big, seed=big), "small": Plan(big // SMALL_FRACTION, seed=big + 7)}


def bucket_name(plan: Plan) -> str:
    return f"bench-offload-{plan.ledgers * 2}"


# --- seeding: Google Cloud Storage (fake-gcs-server) ------------------------------------


def gcs_server(directory: Path) -> Any:
    from local_stack.fake_gcs import FakeGcsServer

    return FakeGcsServer(directory / "fake-gcs", log_dir=directory / "logs", start_timeout=120)


def seed_gcs(server: Any, plan: Plan) -> float:
    """Fill a bucket with ``plan``'s objects (see the module's doc); seconds taken. The
    server is running at the start and at the end (restarted on the written layout)."""
    started = time.perf_counter()
    client = server.client()
    bucket = client.create_bucket(bucket_name(plan))
    templates = {}
    for name, body in (("data", DATA_BODY), ("index", INDEX_BODY)):
        blob = bucket.blob(f"_template-{name}")
        blob.metadata = {"ManagedLedgerName": "template", "role": name}
        blob.upload_from_string(body)
        templates[name] = blob.name
    root = server.data_dir / "objects" / urllib.parse.quote(bucket.name, safe="")
    attrs: dict[str, dict[str, Any]] = {}
    use_xattr = True
    for name, key in templates.items():
        path = root / urllib.parse.quote(key, safe="")
        try:
            attrs[name] = json.loads(os.getxattr(path, "user.metadata"))
        except OSError:
            use_xattr = False
            attrs[name] = json.loads(Path(f"{path}.metadata").read_text())
    server.stop()
    for key in templates.values():
        path = root / urllib.parse.quote(key, safe="")
        path.unlink()
        with contextlib.suppress(FileNotFoundError):
            Path(f"{path}.metadata").unlink()
    stamp = OLD.strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    generation = int(OLD.timestamp() * 1_000_000)

    def write(key: str, role: str, ml_name: str) -> None:
        nonlocal generation
        generation += 1
        meta = dict(attrs[role])
        meta.update(
            Generation=generation,
            Created=stamp,
            Updated=stamp,
            Metadata={"ManagedLedgerName": ml_name, "role": role},
        )
        path = root / urllib.parse.quote(key, safe="")
        path.write_bytes(DATA_BODY if role == "data" else INDEX_BODY)
        encoded = json.dumps(meta, separators=(",", ":")).encode()
        if use_xattr:
            os.setxattr(path, "user.metadata", encoded)
        else:
            Path(f"{path}.metadata").write_bytes(encoded)

    for ml, ledger_id, offload_uuid in plan.entries():
        name = plan.ml_name(ml)
        write(f"{offload_uuid}-ledger-{ledger_id}", "data", name)
        write(f"{offload_uuid}-ledger-{ledger_id}-index", "index", name)
    for keys in plan.others("gcs").values():
        for key in keys:
            write(key, "data", "")
    server.start()
    return time.perf_counter() - started


# --- seeding: Azure Blob Storage (Azurite) ----------------------------------------------


def azure_server(directory: Path) -> Any:
    from local_stack.azurite import AzuriteBlobServer

    return AzuriteBlobServer(directory / "azurite", log_dir=directory / "logs", start_timeout=300)


def seed_azure(server: Any, plan: Plan) -> float:
    """Fill a container with ``plan``'s objects (see the module's doc); seconds taken.
    The server is running at the start and at the end (restarted on the written
    database)."""
    started = time.perf_counter()
    client = server.client()
    container = bucket_name(plan)
    blobs = client.create_container(container)
    for name, body in (("data", DATA_BODY), ("index", INDEX_BODY)):
        blobs.upload_blob(f"_template-{name}", body, metadata={"ManagedLedgerName": "template"})
    server.stop()  # Azurite saves its database on a clean stop
    path = server.data_dir / "__azurite_db_blob__.json"
    database = json.loads(path.read_text())
    collection = next(c for c in database["collections"] if c["name"] == "$BLOBS_COLLECTION$")
    templates = {
        doc["name"].removeprefix("_template-"): doc
        for doc in collection["data"]
        if doc["containerName"] == container and doc["name"].startswith("_template-")
    }
    collection["data"] = [doc for doc in collection["data"] if doc not in templates.values()]
    next_id = int(collection["maxId"])
    stamp = OLD.strftime("%Y-%m-%dT%H:%M:%S.000Z")
    created_ms = int(OLD.timestamp() * 1000)

    def add(key: str, role: str, ml_name: str) -> None:
        nonlocal next_id
        next_id += 1
        doc = json.loads(json.dumps(templates[role]))
        doc["name"] = key
        doc["metadata"] = {"ManagedLedgerName": ml_name}
        props = doc["properties"]
        props["creationTime"] = props["lastModified"] = props["accessTierChangeTime"] = stamp
        props["etag"] = f'"0x{0x8D000000000000 + next_id:X}"'
        doc["meta"] = {"revision": 0, "created": created_ms, "version": 0}
        doc["$loki"] = next_id
        collection["data"].append(doc)

    for ml, ledger_id, offload_uuid in plan.entries():
        name = plan.ml_name(ml)
        add(f"{offload_uuid}-ledger-{ledger_id}", "data", name)
        add(f"{offload_uuid}-ledger-{ledger_id}-index", "index", name)
    for keys in plan.others("azure").values():
        for key in keys:
            add(key, "data", "")
    collection["maxId"] = next_id
    # Its sorted indices: each the documents' positions in the order of that field.
    data = collection["data"]
    for field, index in collection["binaryIndices"].items():
        index["dirty"] = False
        index["values"] = sorted(range(len(data)), key=lambda i, f=field: data[i].get(f, ""))
    path.write_text(json.dumps(database, separators=(",", ":")))
    server.start()
    return time.perf_counter() - started


# --- the metadata ------------------------------------------------------------------------


def write_metadata(client: Any, plan: Plan, store: str) -> float:
    """The managed ledgers of ``plan`` (all but the deleted ones) in the client's chroot,
    each ledger offloaded to ``store``'s bucket; seconds taken."""
    import pulsar_cluster
    from ledger_gc.formats.records import encode_managed_ledger_info
    from ledger_gc.proto.mldataformats_pb2 import ManagedLedgerInfo

    started = time.perf_counter()
    pulsar_cluster.PulsarCluster(client).namespace(NAMESPACE)
    client.ensure_path(f"/managed-ledgers/{NAMESPACE}/persistent")
    now_ms = int(time.time() * 1000)
    infos: dict[int, ManagedLedgerInfo] = {}
    for ml, ledger_id, offload_uuid in plan.entries():
        if plan.is_gone(ml):
            continue
        info = infos.setdefault(ml, ManagedLedgerInfo())
        value = uuid.UUID(offload_uuid).int
        msb, lsb = (h - 2**64 if h >= 2**63 else h for h in (value >> 64, value & (2**64 - 1)))
        entry = info.ledgerInfo.add(
            ledgerId=ledger_id, entries=1000, size=len(DATA_BODY), timestamp=now_ms
        )
        context = entry.offloadContext
        context.uidMsb, context.uidLsb = msb, lsb
        context.complete = True
        context.bookkeeperDeleted = True
        context.driverMetadata.name = DRIVERS[store]
        context.driverMetadata.properties.add(key="bucket", value=bucket_name(plan))
    ops = [
        ("create", f"/managed-ledgers/{plan.ml_name(ml)}", encode_managed_ledger_info(info))
        for ml, info in infos.items()
    ]
    _common.multi_ops(client, ops, per_txn=50)
    return time.perf_counter() - started


# --- the baseline: a user's paginated listing and diff ----------------------------------


def user_listing(store: str, hosts: str, endpoint: str, container: str) -> dict[str, Any]:
    """The user's way (see the module's doc); in its own process."""
    import re

    from kazoo.client import KazooClient

    from ledger_gc.formats.markers import java_uuid
    from ledger_gc.formats.records import decode_managed_ledger_info

    started = time.perf_counter()
    client = KazooClient(hosts=hosts, timeout=30)
    client.start(timeout=30)
    live: set[tuple[str, int]] = set()
    topics: list[str] = []
    level = ["/managed-ledgers"]
    for _depth in range(4):  # tenant, namespace, domain, topic
        pending = [(path, client.get_children_async(path)) for path in level]
        level = [f"{path}/{child}" for path, answer in pending for child in answer.get(timeout=60)]
    topics = level
    for path, answer in [(p, client.get_async(p)) for p in topics]:
        data, _stat = answer.get(timeout=60)
        for ledger in decode_managed_ledger_info(data, path=path).ledgerInfo:
            context = ledger.offloadContext
            if context.complete:
                live.add((java_uuid(context.uidMsb, context.uidLsb), ledger.ledgerId))
    client.stop()
    client.close()
    metadata_s = time.perf_counter() - started
    segment = re.compile(
        r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-ledger-(\d+)(-index)?"
    )
    listed = live_objects = others = pages = 0
    orphans: list[str] = []
    for names in _pages(store, endpoint, container):
        pages += 1
        for name in names:
            listed += 1
            match = segment.fullmatch(name)
            if not match:
                others += 1
            elif (match.group(1), int(match.group(2))) in live:
                live_objects += 1
            else:
                orphans.append(name)
    return {
        "seconds": time.perf_counter() - started,
        "metadata_s": metadata_s,
        "topics": len(topics),
        "live_ledgers": len(live),
        "objects": listed,
        "pages": pages,
        "live_objects": live_objects,
        "orphan_objects": len(orphans),
        "other_objects": others,
        "peak_rss_bytes": _vm_hwm_bytes(),
    }


def _pages(store: str, endpoint: str, container: str) -> Iterator[list[str]]:
    """The bucket's keys, page by page, as each store's SDK hands them."""
    if store == "gcs":
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        gcs = storage.Client(
            project="bench",
            credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            client_options={"api_endpoint": endpoint},
        )
        for page in gcs.list_blobs(container, page_size=1000).pages:
            yield [blob.name for blob in page]
    else:
        from azure.storage.blob import ContainerClient

        from local_stack.azurite import AZURITE_ACCOUNT, AZURITE_KEY

        blobs = ContainerClient(
            endpoint,
            container,
            credential={"account_name": AZURITE_ACCOUNT, "account_key": AZURITE_KEY},
        )
        for page in blobs.list_blobs(results_per_page=5000).by_page():
            yield [blob.name for blob in page]


def _vm_hwm_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def run_user_listing(store: str, hosts: str, endpoint: str, container: str) -> dict[str, Any]:
    child = subprocess.run(
        [sys.executable, __file__, "--child-listing", store, hosts, endpoint, container],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        raise SystemExit(f"the user's listing of {store} failed (exit {child.returncode})")
    return dict(json.loads(lines[-1]))


# --- the command -------------------------------------------------------------------------


def command_env(store: str, hosts: str, endpoint: str, container: str, state: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERGC_")}
    env.update(
        {
            "LEDGERGC_ZK_HOSTS": hosts,
            "LEDGERGC_BUCKET": "",
            "LEDGERGC_BOOKKEEPER": "false",
            "LEDGERGC_OFFLOAD_DRIVER": DRIVERS[store],
            "LEDGERGC_OFFLOAD_BUCKET": container,
            "LEDGERGC_OFFLOAD_ENDPOINT": endpoint,
            "LEDGERGC_PULSAR_CLUSTER": "(untagged)",
            "LEDGERGC_STATE_DIR": str(state),
            "LEDGERGC_ORPHAN_MAX_FRACTION": "1",
            "PYSPARK_PYTHON": sys.executable,
        }
    )
    if store == "azure":
        from local_stack.azurite import AZURITE_ACCOUNT, AZURITE_KEY

        env["AZURE_STORAGE_ACCOUNT"] = AZURITE_ACCOUNT
        env["AZURE_STORAGE_ACCESS_KEY"] = AZURITE_KEY
    return env


def run_command(env: dict[str, str], label: str) -> dict[str, Any]:
    """``ledgergc orphans --dry-run --json`` as an operator runs it: its wall time, its
    report's tiered-storage part, the process tree's peak memory. A command that fails
    is recorded (``ok`` false, its last stderr line), not raised: the listing beside it
    is still a figure."""
    command = [str(Path(sys.executable).parent / "ledgergc"), "orphans", "--dry-run", "--json"]
    load = os.getloadavg()[0]
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with _common.TreeMemorySampler(process.pid) as sampler:
        out, err = process.communicate()
    seconds = time.perf_counter() - started
    base = {
        "label": label,
        "seconds": seconds,
        "load_before": load,
        "peak_tree_rss_bytes": sampler.peak_total,
        "peak_by_kind": sampler.peak_by_kind,
        "exit": process.returncode,
    }
    tiered = None
    with contextlib.suppress(ValueError):
        tiered = (json.loads(out) or {}).get("tiered")
    if process.returncode not in (0, 1) or not tiered:
        lines = [line for line in err.decode(errors="replace").splitlines() if line.strip()]
        return {**base, "ok": False, "error": lines[-1][:300] if lines else "no report"}
    return {**base, "ok": True, "tiered": tiered}


def check(store: str, label: str, plan: Plan, user: dict[str, Any], run: dict[str, Any]) -> None:
    """Both ways found exactly the plan's classes."""
    want = plan.expected()
    others = sum(len(keys) for keys in plan.others(store).values())
    got_user = {
        "objects": user["objects"] - others,
        "live_segments": user["live_objects"] // 2,
        "orphan_segments": user["orphan_objects"] // 2,
    }
    if got_user != want or user["other_objects"] != others:
        raise SystemExit(f"{store} {label}: the user's diff found {got_user}, planted {want}")
    if run["ok"]:
        tiered = run["tiered"]
        got = {name: tiered.get(name) for name in ("live_segments", "orphan_segments")}
        if got != {k: want[k] for k in got}:
            raise SystemExit(f"{store} {label}: the command found {got}, planted {want}")


# --- main --------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=TARGET_OBJECTS)
    parser.add_argument("--stores", default="gcs,azure")
    parser.add_argument("--fresh", action="store_true", help="rebuild the cached stores")
    parser.add_argument("--seed-only", action="store_true", help="build the stores, stop")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_OBJECTS:,} objects")
    parser.add_argument("--child-listing", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_listing:
        print(json.dumps(user_listing(*args.child_listing)), flush=True)
        return 0
    objects = QUICK_OBJECTS if args.quick else args.objects
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    if objects < 2 * PER_ML * SMALL_FRACTION * 2 or objects % (2 * PER_ML * SMALL_FRACTION):
        print(
            f"offload_listing.py: --objects must be a multiple of {2 * PER_ML * SMALL_FRACTION:,}"
            f" and at least {4 * PER_ML * SMALL_FRACTION:,}",
            file=sys.stderr,
        )
        return 2
    if not stores or set(stores) - set(STORES):
        print("offload_listing.py: --stores takes gcs and/or azure", file=sys.stderr)
        return 2
    sizes = plans(objects)
    directory = _common.VAR / "offload-listing" / str(objects)
    seeding = prepare_stores(directory, sizes, stores, args.fresh)
    if args.seed_only:
        print(json.dumps({"seeding_s": seeding}), flush=True)
        return 0
    return measure(directory, sizes, stores, seeding, objects, args.quick)


def prepare_stores(
    directory: Path, sizes: dict[str, Plan], stores: list[str], fresh: bool
) -> dict[str, Any]:
    """Seed each store's emulator (cached in ``directory``); the seconds each took, or
    the cached marker's."""
    seeding: dict[str, Any] = {}
    for store in stores:
        marker = directory / f"{store}-populated.json"
        params = {
            "version": LAYOUT_VERSION,
            "sizes": {label: [plan.ledgers, plan.seed] for label, plan in sizes.items()},
        }
        if marker.exists() and not fresh:
            saved = json.loads(marker.read_text())
            if saved.get("params") == params:
                seeding[store] = {**saved["seconds"], "cached": True}
                say(f"{store}: the seeded store in {directory} is reused")
                continue
        server = gcs_server(directory) if store == "gcs" else azure_server(directory)
        shutil.rmtree(server.data_dir, ignore_errors=True)
        marker.unlink(missing_ok=True)
        server.start()
        try:
            seconds = {}
            for label, plan in sizes.items():
                say(f"{store}: seeding {2 * plan.ledgers:,} objects ({label})")
                if store == "gcs":
                    seconds[label] = round(seed_gcs(server, plan), 1)
                else:
                    seconds[label] = round(seed_azure(server, plan), 1)
                rate = 2 * plan.ledgers / seconds[label]
                say(f"  {store}: seeded in {seconds[label]:,.1f} s ({rate:,.0f} objects/s)")
        finally:
            server.stop()
        marker.write_text(json.dumps({"params": params, "seconds": seconds}))
        seeding[store] = {**seconds, "cached": False}
    return seeding


def measure(
    directory: Path,
    sizes: dict[str, Plan],
    stores: list[str],
    seeding: dict[str, Any],
    objects: int,
    quick: bool,
) -> int:
    from local_stack.zookeeper import ZooKeeperServer

    shutil.rmtree(directory / "zookeeper", ignore_errors=True)
    zookeeper = ZooKeeperServer(directory / "zookeeper", log_dir=directory / "logs")
    servers = {"gcs": gcs_server(directory), "azure": azure_server(directory)}
    results: dict[str, dict[str, Any]] = {}
    started_servers = [zookeeper, *(servers[s] for s in stores)]
    try:
        for server in started_servers:
            server.launch()
        for server in started_servers:
            server.finish_start()
        for store in stores:
            server = servers[store]
            endpoint = server.endpoint if store == "gcs" else server.account_url
            results[store] = {}
            for label, plan in sizes.items():
                chroot = f"/bench-offload-{store}-{label}"
                settings = _common.Settings(zk_address=f"{zookeeper.hosts}{chroot}", bucket="")
                _common.create_chroot(settings)
                with _common.kazoo_client(settings) as client:
                    metadata_s = write_metadata(client, plan, store)
                say(
                    f"{store} {label}: {plan.managed_ledgers:,} managed ledgers "
                    f"({metadata_s:.1f} s)"
                )
                container = bucket_name(plan)
                user = run_user_listing(store, settings.zk_hosts, endpoint, container)
                say(
                    f"  the user's listing: {user['seconds']:.1f} s ({user['objects']:,} objects, "
                    f"{user['pages']} pages, metadata {user['metadata_s']:.1f} s), peak RSS "
                    f"{mib(user['peak_rss_bytes']):,.0f} MiB"
                )
                env = command_env(
                    store,
                    settings.zk_hosts,
                    endpoint,
                    container,
                    directory / f"state-{store}-{label}",
                )
                shutil.rmtree(directory / f"state-{store}-{label}", ignore_errors=True)
                run = run_command(env, f"{store} {label}")
                check(store, label, plan, user, run)
                if run["ok"]:
                    say(
                        f"  the command: {run['seconds']:.1f} s, peak tree RSS "
                        f"{mib(run['peak_tree_rss_bytes']):,.0f} MiB"
                    )
                else:
                    say(f"  the command FAILED (exit {run['exit']}): {run['error']}")
                results[store][label] = {"plan": plan, "user": user, "command": run}
    finally:
        for server in reversed(started_servers):
            server.stop()
        shutil.rmtree(directory / "zookeeper", ignore_errors=True)
    return report(results, seeding, objects, quick)


def report(
    results: dict[str, dict[str, Any]], seeding: dict[str, Any], objects: int, quick: bool
) -> int:
    rows = []
    targets = []
    summary: dict[str, Any] = {}
    for store, by_size in results.items():
        big, small = by_size["big"], by_size["small"]
        user, run = big["user"], big["command"]
        speedup = ratio(user["seconds"], run["seconds"]) if run["ok"] else 0.0
        rows.append(
            (
                f"{store}: {user['objects']:,} objects, whole command",
                fmt_s(run["seconds"]) if run["ok"] else "failed",
                fmt_s(user["seconds"]),
                f"{speedup:.2f}x" if run["ok"] else "",
            )
        )
        for entry in (big, small):
            rows.append(
                (
                    f"  peak memory, {entry['user']['objects']:,} objects",
                    f"{mib(entry['command']['peak_tree_rss_bytes']):,.0f} MiB",
                    f"{mib(entry['user']['peak_rss_bytes']):,.0f} MiB",
                    "",
                )
            )
        flat = (
            run["ok"]
            and small["command"]["ok"]
            and run["peak_tree_rss_bytes"] <= FLAT_FACTOR * small["command"]["peak_tree_rss_bytes"]
        )
        targets.append((f"{store}: whole command >= {TARGET_RATIO:.0f}x", speedup >= TARGET_RATIO))
        targets.append(
            (
                f"{store}: command memory flat ({objects // SMALL_FRACTION:,} -> {objects:,})",
                bool(flat),
            )
        )
        summary[store] = {
            "seeding_s": seeding.get(store),
            "ratio": speedup,
            **{
                label: {
                    "objects": entry["user"]["objects"],
                    "user": {
                        "seconds": round(entry["user"]["seconds"], 2),
                        "metadata_s": round(entry["user"]["metadata_s"], 2),
                        "pages": entry["user"]["pages"],
                        "peak_rss_mib": mib(entry["user"]["peak_rss_bytes"]),
                    },
                    "command": {
                        "ok": entry["command"]["ok"],
                        "error": entry["command"].get("error"),
                        "seconds": round(entry["command"]["seconds"], 2),
                        "peak_tree_rss_mib": mib(entry["command"]["peak_tree_rss_bytes"]),
                        "peak_by_kind_mib": {
                            k: mib(v) for k, v in entry["command"]["peak_by_kind"].items()
                        },
                        "tiered": entry["command"].get("tiered"),
                        "load_before": round(entry["command"]["load_before"], 2),
                    },
                }
                for label, entry in by_size.items()
            },
        }
    if objects != TARGET_OBJECTS:
        print(f"(the targets are for {TARGET_OBJECTS:,} objects; this run: {objects:,})")
    _common.report(
        "offload_listing",
        rows,
        targets,
        {"items": objects, "quick": quick, "stores": summary},
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
