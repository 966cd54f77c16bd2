"""The Pulsar-metadata source's survey against a real ZooKeeper (DESIGN.md "Pulsar's own
metadata"): what deleted namespaces and tenants and dead brokers leave, judged against
the configuration store, registered as leftovers or held or reported; and the
configuration store's sanity (a store on another chroot, an empty one, another
cluster's)."""

from __future__ import annotations

import json

from kazoo.client import KazooClient

from ledger_gc.config.settings import Settings
from pulsar_cluster import CLUSTER, PulsarCluster, bundle_ranges


def test_the_cluster_plants_what_pulsar_writes(settings: Settings, zk_client: KazooClient) -> None:
    c = PulsarCluster(zk_client).init()
    c.cluster_definition()
    c.policies("acme/orders", replication_clusters=[CLUSTER, "eu"])
    c.local_policies("acme/orders")
    bundle = c.bundle_data("acme/orders")
    c.partitioned_topic("acme/orders", "clicks", 2, deleted=True)
    tenant = json.loads(zk_client.get("/admin/policies/acme")[0])
    assert tenant == {"adminRoles": [], "allowedClusters": [CLUSTER, "eu"]}
    policies = json.loads(zk_client.get("/admin/policies/acme/orders")[0])
    assert policies["replication_clusters"] == [CLUSTER, "eu"]
    assert policies["deleted"] is False
    assert policies["bundles"]["numBundles"] == 4
    assert bundle == f"/loadbalance/bundle-data/acme/orders/{bundle_ranges()[0]}"
    topic = zk_client.get("/admin/partitioned-topics/acme/orders/persistent/clicks")[0]
    assert json.loads(topic) == {"partitions": 2, "deleted": True}
    assert zk_client.exists("/admin/clusters/standalone")
    assert json.loads(zk_client.get("/admin/local-policies/acme/orders")[0])["bundles"]
    name = c.heartbeat("broker-1:8080", [c.ledger({})])
    assert name == f"pulsar/{CLUSTER}/broker-1:8080/persistent/healthcheck"
    assert c.heartbeat("broker-1:8080", cluster=None).startswith("pulsar/broker-1:8080/")
    assert c.heartbeat("b:1", sla=True).startswith(f"sla-monitor/{CLUSTER}/b:1/")
    broker = KazooClient(hosts=settings.zk_hosts, timeout=10)
    broker.start()
    try:
        owned = c.own_bundle("acme/orders", broker)
        registered = c.broker("broker-1:8080", broker)
        assert zk_client.exists(owned).ephemeralOwner == broker.client_id[0]
        assert zk_client.exists(registered).ephemeralOwner
    finally:
        broker.stop()
        broker.close()
    assert not zk_client.exists(owned)
    assert not zk_client.exists(registered)
    c.delete_policies("acme/orders")
    assert zk_client.exists("/admin/policies/acme")
    c.delete_tenant("acme")
    assert not zk_client.exists("/admin/policies/acme")
    assert zk_client.exists("/admin/partitioned-topics/acme/orders/persistent/clicks")
