"""The demo's Pulsar cluster: BookKeeper metadata as brokers and bookies write it, with
every BookKeeper leak ledger-gc reclaims planted the way it happens in production.

Written into its own chroot (``/pulsar-demo``) with ``include/pulsar_cluster.py``:

* live topics whose ledgers are BookKeeper format v3 and, for the oldest topic, v2 (a
  cluster older than BookKeeper 4.10 holds both), a consumer whose cursor ledger is open,
  a schema, a compacted topic, a delayed-delivery bucket snapshot;
* leaks: a ledger a trim dropped from the list but failed to delete (Pulsar 13526), a
  deleted topic's ledgers and cursor ledger (13238), an old cursor ledger left by a
  switch (982), an old schema version's ledger (8167), a deleted topic's compacted ledger
  (12522), the BookKeeper copy of a ledger offloaded with ``bookkeeperDeleted=true``;
* what must stay whatever it looks like: an untagged ledger, another application's, a
  ledger of a namespace this cluster does not have (another cluster sharing the
  BookKeeper), a live topic's previous compacted ledger (its ZooKeeper property lags),
  and a rollover in flight (an open ledger newer than its topic's last).

Pulsar's own metadata (DESIGN.md "Pulsar's own metadata"; ``plant_metadata``), with the
configuration store in the same chroot (no ``LEDGERGC_CONFIG_STORE_HOSTS``):

* leaks: a namespace deleted half way (``acme/gone``: policies gone; its managed ledger
  with ledgers and a cursor, a schema, local policies, bundle data and its ``/namespace``
  node left, Pulsar 11734), a deleted tenant (``oldco``: a partitioned topic's metadata
  in the configuration store, 12968, and its partitions' managed ledgers), a dead
  broker's heartbeat namespace; the BookKeeper ledgers their records list are hidden
  leaks: live to ledger-gc until the records go;
* kept: a live broker's heartbeat (registered: an ephemeral znode on the caller's
  session, which must stay open while the cycles run), a namespace whose
  ``replication_clusters`` excludes this cluster (reported), a delete Pulsar left half
  done (``deleted=true``: reported with its ``pulsar-admin`` command), a deleted
  namespace a broker still owns a bundle of (held);
* a topic whose ledger BookKeeper does not have (``bk-missing``: reported).

``plant(client)`` returns the ledger ids of each group and the metadata's znodes
(``metadata``); ``check(client, planted)`` says what is left of each, and raises if
anything that must stay is gone.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient

from pulsar_cluster import (
    PulsarCluster,
    bucket_tags,
    bundle_ranges,
    compacted_tags,
    cursor_tags,
    ml_tags,
    schema_tags,
)

CHROOT = "/pulsar-demo"
#: The demo cluster's offloaded ledgers, in the demo's offload bucket.
OFFLOAD_PREFIX = "pulsar-tiered"
NS = "public/default"
MIB = 1 << 20
#: The demo cluster's name (``LEDGERGC_PULSAR_CLUSTER``) and another one it replicates with.
CLUSTER = "demo"
OTHER_CLUSTER = "other-dc"
LIVE_BROKER = "broker-live:8080"
DEAD_BROKER = "broker-dead:8080"
#: The leftovers planted: each leak's name starts with one of these (``<leftover>: ...``):
#: its ledgers', and its metadata's ``<leftover>: records`` and ``<leftover>: parents``.
LEFTOVERS = ("acme/gone", "oldco", "dead broker")
#: Znodes planted: {group: {what: [paths]}} (groups "leaks", "kept").
Znodes = dict[str, dict[str, list[str]]]


def topic(name: str) -> str:
    return f"{NS}/persistent/{name}"


def plant(client: KazooClient, s3: Any = None, offload_bucket: str = "") -> dict[str, Any]:
    """Plant the cluster; with ``s3``, its offloader's objects go to ``offload_bucket``
    under ``OFFLOAD_PREFIX``. ``client`` is also the session of the live broker and of
    the owned bundle: keep it open while the cycles run."""
    c = PulsarCluster(client, s3=s3, offload_bucket=offload_bucket, offload_prefix=OFFLOAD_PREFIX)
    c.init()
    c.cluster_definition(CLUSTER)
    c.cluster_definition(OTHER_CLUSTER)
    c.policies(NS, replication_clusters=(CLUSTER,))
    c.namespace(NS)
    live: dict[str, int] = {}
    leaks: dict[str, int] = {}
    kept: dict[str, int] = {}
    big = 256 * MIB

    # The oldest topic, from the BookKeeper 4.9 days: v2 records, one offloaded.
    orders = topic("orders")
    offloaded = c.ledger(ml_tags(orders), fmt=2, length=8 * MIB)
    leaks["offloaded copy (bookkeeperDeleted=true)"] = offloaded
    leaks["trimmed, delete failed"] = c.ledger(ml_tags(orders), fmt=2, length=8 * MIB)
    orders_ledgers = [offloaded, *(c.ledger(ml_tags(orders), fmt=2, length=big) for _ in range(2))]
    leaks["old cursor ledger"] = c.ledger(cursor_tags(orders, "billing"), length=MIB)
    cursor_now = c.ledger(cursor_tags(orders, "billing"), closed=False)
    live["cursor ledger"] = cursor_now
    leaks["old schema version"] = c.ledger(schema_tags(f"{NS}/orders"), length=MIB)
    live["schema"] = schema = c.ledger(schema_tags(f"{NS}/orders"), length=MIB)
    live["bucket snapshot"] = bucket = c.ledger(bucket_tags(orders, "billing"), length=MIB)

    gone = topic("deleted-topic")
    leaks["deleted topic"] = c.ledger(ml_tags(gone), length=8 * MIB)
    leaks["deleted topic's cursor ledger"] = c.ledger(cursor_tags(gone, "sub"), length=MIB)
    leaks["deleted topic's compacted ledger"] = c.ledger(
        compacted_tags(topic("deleted-compacted")), length=4 * MIB
    )

    prices = topic("prices")
    kept["live topic's previous compacted ledger"] = c.ledger(compacted_tags(prices), length=MIB)
    live["compacted ledger"] = compacted = c.ledger(compacted_tags(prices), length=MIB)
    prices_ledgers = [c.ledger(ml_tags(prices), length=big) for _ in range(2)]

    kept["untagged (BookKeeper's own tools)"] = c.ledger({}, length=MIB)
    kept["another application's"] = c.ledger({"application": b"stream-archiver"}, length=MIB)
    kept["another cluster's namespace"] = c.ledger(
        ml_tags("partner/events/persistent/clicks"), length=MIB
    )

    # The newest ledgers: the live topics roll over; the current ones are open.
    orders_ledgers += [
        c.ledger(ml_tags(orders), length=big),
        c.ledger(ml_tags(orders), closed=False),
    ]
    prices_ledgers.append(c.ledger(ml_tags(prices), closed=False))
    c.managed_ledger(orders, orders_ledgers, offloaded_deleted=[offloaded])
    c.cursor(
        orders,
        "billing",
        cursor_now,
        cursor_properties={
            f"#pulsar.internal.delayed.bucket_{offloaded}_{cursor_now}": str(bucket)
        },
    )
    c.schema(f"{NS}/orders", [(0, schema)])
    c.managed_ledger(prices, prices_ledgers)
    c.cursor(prices, "__compaction", -1, properties={"CompactedTopicLedger": compacted})
    kept["rollover in flight"] = c.ledger(ml_tags(prices), closed=False)
    # Listed ledgers are live, but for the offloaded one: its BookKeeper copy is a leak.
    for number, lid in enumerate(orders_ledgers[1:] + prices_ledgers):
        live[f"listed ledger {number}"] = lid
    metadata = plant_metadata(c, client, live, leaks, kept)
    return {"live": live, "leaks": leaks, "kept": kept, "metadata": metadata}


def plant_metadata(
    c: PulsarCluster,
    session: KazooClient,
    live: dict[str, int],
    leaks: dict[str, int],
    kept: dict[str, int],
) -> Znodes:
    """Plant what Pulsar leaves of deleted namespaces, tenants and brokers (see the
    module's doc), in the order Pulsar writes and then deletes; add their ledgers to
    ``live``, ``leaks`` (hidden behind the leftovers) and ``kept``; return the znodes."""
    c.tenant("acme", (CLUSTER, OTHER_CLUSTER))
    # A live namespace beside the deleted one: the tenant stays.
    c.policies("acme/live", replication_clusters=(CLUSTER,))
    metrics = "acme/live/persistent/metrics"
    live["acme/live topic"] = c.ledger(ml_tags(metrics), length=256 * MIB)
    c.managed_ledger(metrics, [live["acme/live topic"]])

    # A namespace delete that stopped half way: the policies went first (Pulsar before
    # 2.9, a broker restart between the steps); the local store keeps the rest.
    gone = "acme/gone"
    events = f"{gone}/persistent/events"
    c.policies(gone, replication_clusters=(CLUSTER,))
    gone_ledgers = [c.ledger(ml_tags(events), length=2 * MIB) for _ in range(2)]
    leaks["acme/gone: listed ledger 1"], leaks["acme/gone: listed ledger 2"] = gone_ledgers
    leaks["acme/gone: cursor ledger"] = cursor = c.ledger(cursor_tags(events, "sub"), length=MIB)
    leaks["acme/gone: schema ledger"] = schema = c.ledger(schema_tags(f"{gone}/events"), length=MIB)
    c.managed_ledger(events, gone_ledgers)
    c.cursor(events, "sub", cursor)
    c.schema(f"{gone}/events", [(0, schema)])
    c.local_policies(gone)
    c.bundle_data(gone)
    c.client.ensure_path(f"/namespace/{gone}")  # its bundles were owned, then unloaded
    c.delete_policies(gone)

    # A deleted tenant: a partitioned topic's metadata stays in the configuration store
    # (Pulsar 12968), its partitions' managed ledgers and local policies in the local one.
    c.policies("oldco/ns1", replication_clusters=(CLUSTER,))
    for number, partition in enumerate(c.partitioned_topic("oldco/ns1", "clicks", 2)):
        lid = leaks[f"oldco: partition {number}'s ledger"] = c.ledger(
            ml_tags(partition), length=MIB
        )
        c.managed_ledger(partition, [lid])
    c.local_policies("oldco/ns1")
    c.delete_tenant("oldco")

    # Heartbeats: a dead broker's (unregistered) and a live one's (registered on the
    # caller's session, as a broker registers itself).
    dead, alive = (
        f"pulsar/{broker}/persistent/healthcheck" for broker in (DEAD_BROKER, LIVE_BROKER)
    )
    leaks["dead broker: heartbeat ledger"] = lid = c.ledger(ml_tags(dead), length=MIB)
    c.heartbeat(DEAD_BROKER, [lid], cluster=None)
    registered = c.broker(LIVE_BROKER, session)
    kept["live broker's heartbeat ledger"] = lid = c.ledger(ml_tags(alive), length=MIB)
    c.heartbeat(LIVE_BROKER, [lid], cluster=None)

    # Reported, never deleted: not replicated here; a delete left half done.
    c.policies("acme/elsewhere", replication_clusters=(OTHER_CLUSTER,))
    elsewhere = "acme/elsewhere/persistent/feed"
    kept["not replicated here"] = lid = c.ledger(ml_tags(elsewhere), length=MIB)
    c.managed_ledger(elsewhere, [lid])
    c.policies("acme/stuck", replication_clusters=(CLUSTER,), deleted=True)
    stuck = "acme/stuck/persistent/jobs"
    kept["stuck delete"] = lid = c.ledger(ml_tags(stuck), length=MIB)
    c.managed_ledger(stuck, [lid])
    # Held: its policies are gone, but a broker still owns one of its bundles.
    c.policies("acme/owned", replication_clusters=(CLUSTER,))
    owned_topic = "acme/owned/persistent/orders"
    kept["deleted, bundle still owned"] = lid = c.ledger(ml_tags(owned_topic), length=MIB)
    c.managed_ledger(owned_topic, [lid])
    owned = c.own_bundle("acme/owned", session)
    c.delete_policies("acme/owned")

    # A topic that cannot be read: it lists a ledger BookKeeper does not have.
    broken = topic("broken")
    live["broken topic's ledger"] = lid = c.ledger(ml_tags(broken), length=MIB)
    c.managed_ledger(broken, [lid, c.next_id()])

    bundle = bundle_ranges()[0]
    return {
        "leaks": {
            "acme/gone: records": [
                f"/managed-ledgers/{events}",
                f"/managed-ledgers/{events}/sub",
                f"/schemas/{gone}/events",
                f"/admin/local-policies/{gone}",
                f"/loadbalance/bundle-data/{gone}/{bundle}",
            ],
            "acme/gone: parents": [
                f"/managed-ledgers/{gone}",
                f"/schemas/{gone}",
                f"/namespace/{gone}",
                f"/loadbalance/bundle-data/{gone}",
            ],
            "oldco: records": [
                "/admin/partitioned-topics/oldco/ns1/persistent/clicks",
                "/managed-ledgers/oldco/ns1/persistent/clicks-partition-0",
                "/managed-ledgers/oldco/ns1/persistent/clicks-partition-1",
                "/admin/local-policies/oldco/ns1",
            ],
            "oldco: parents": ["/managed-ledgers/oldco/ns1", "/admin/partitioned-topics/oldco"],
            "dead broker: records": [f"/managed-ledgers/{dead}"],
            "dead broker: parents": [f"/managed-ledgers/pulsar/{DEAD_BROKER}"],
        },
        "kept": {
            "live broker's registration": [registered],
            "live broker's heartbeat": [f"/managed-ledgers/{alive}"],
            "acme/elsewhere (not replicated here)": [f"/managed-ledgers/{elsewhere}"],
            "acme/stuck (delete left half done)": ["/admin/policies/acme/stuck"],
            "acme/owned (a bundle owned)": [owned, f"/managed-ledgers/{owned_topic}"],
            "the broken topic": [f"/managed-ledgers/{broken}"],
        },
    }


def check(client: KazooClient, planted: dict[str, Any]) -> dict[str, Any]:
    """Which planted ledgers and metadata znodes are still there; raises if a live or
    kept one is gone."""
    c = PulsarCluster(client)
    there: dict[str, Any] = {
        group: {what: client.exists(c.path(lid)) is not None for what, lid in ids.items()}
        for group, ids in planted.items()
        if group != "metadata"
    }
    lost = [f"{g}: {w}" for g in ("live", "kept") for w, ok in there[g].items() if not ok]
    if lost:
        raise SystemExit(f"demo: LIVE BOOKKEEPER LEDGER DELETED: {lost}")
    znodes = {
        group: {what: [p for p in paths if client.exists(p)] for what, paths in items.items()}
        for group, items in (planted.get("metadata") or {}).items()
    }
    gone = [
        f"{what}: {sorted(set(paths) - set(znodes['kept'][what]))}"
        for what, paths in (planted.get("metadata") or {}).get("kept", {}).items()
        if set(paths) != set(znodes["kept"][what])
    ]
    if gone:
        raise SystemExit(f"demo: PULSAR METADATA THAT MUST STAY WAS DELETED: {gone}")
    there["metadata"] = znodes
    return there
