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

``plant(client)`` returns the ledger ids of each group; ``check(client, planted)`` says
what is left of each, and raises if anything that must stay is gone.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient

from pulsar_cluster import (
    PulsarCluster,
    bucket_tags,
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


def topic(name: str) -> str:
    return f"{NS}/persistent/{name}"


def plant(
    client: KazooClient, s3: Any = None, offload_bucket: str = ""
) -> dict[str, dict[str, int]]:
    """Plant the cluster; with ``s3``, its offloader's objects go to ``offload_bucket``
    under ``OFFLOAD_PREFIX``."""
    c = PulsarCluster(client, s3=s3, offload_bucket=offload_bucket, offload_prefix=OFFLOAD_PREFIX)
    c.init()
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
    return {"live": live, "leaks": leaks, "kept": kept}


def check(client: KazooClient, planted: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Which planted ledgers are still there; raises if a live or kept one is gone."""
    c = PulsarCluster(client)
    there = {
        group: {what: client.exists(c.path(lid)) is not None for what, lid in ids.items()}
        for group, ids in planted.items()
    }
    lost = [f"{g}: {w}" for g in ("live", "kept") for w, ok in there[g].items() if not ok]
    if lost:
        raise SystemExit(f"demo: LIVE BOOKKEEPER LEDGER DELETED: {lost}")
    return there
