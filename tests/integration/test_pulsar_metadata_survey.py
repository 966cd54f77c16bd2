"""The Pulsar-metadata source's survey against a real ZooKeeper (DESIGN.md "Pulsar's own
metadata"): what deleted namespaces and tenants and dead brokers leave, judged against
the configuration store, registered as leftovers or held or reported; and the
configuration store's sanity (a store on another chroot, an empty one, another
cluster's)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.config.edge import resolve
from ledger_gc.config.endpoints import Endpoints
from ledger_gc.config.settings import Settings
from ledger_gc.errors import ConfigError
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.orphans.witness import ServerClocks
from ledger_gc.pulsar_metadata import survey as pm_survey
from ledger_gc.pulsar_metadata.survey import PulsarMetadataSurvey
from ledger_gc.rules.pulsar_metadata.classes import (
    CONFIG,
    LOCAL,
    PM_DEAD_BROKER,
    PM_DELETED_NAMESPACE,
    PM_DELETED_TENANT,
    PM_NOT_REPLICATED_HERE,
    PM_STUCK_DELETE,
    RECORD,
)
from pulsar_cluster import CLUSTER, PulsarCluster, bundle_ranges, cursor_tags, ml_tags, schema_tags

LEDGERGC = Path(sys.executable).parent / "ledgergc"


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


# --- the survey --------------------------------------------------------------------------

LIVE = "acme/live"
LIVE_TOPIC = f"{LIVE}/persistent/orders"
GONE = "acme/gone"
GONE_TOPIC = f"{GONE}/persistent/clicks"
DAY_H = 24.0


def endpoints_of(settings: Settings, **changes: Any) -> Endpoints:
    return dataclasses.replace(resolve(settings), **changes)


def survey_at(endpoints: Endpoints, hours: float = 0.0) -> PulsarMetadataSurvey | None:
    """The source's survey in a world ``hours`` on (ZooKeeper's clock shifted)."""
    return pm_survey.survey(endpoints, witness=ServerClocks(offset_ms=int(hours * 3_600_000)))


def live_namespace(c: PulsarCluster) -> list[int]:
    """A namespace in use, with a topic, its cursor and schema: what a real cluster has
    beside its leftovers (and what keeps the unknown-namespaces guard quiet)."""
    c.cluster_definition()
    c.policies(LIVE)
    c.local_policies(LIVE)
    ledgers = [c.ledger(ml_tags(LIVE_TOPIC)) for _ in range(2)]
    c.managed_ledger(LIVE_TOPIC, ledgers)
    cursor = c.ledger(cursor_tags(LIVE_TOPIC, "sub"))
    c.cursor(LIVE_TOPIC, "sub", cursor)
    return [*ledgers, cursor]


def half_deleted_namespace(c: PulsarCluster) -> list[int]:
    """A namespace whose delete removed its policies and stopped: its managed ledger
    (two ledgers), its cursor (a ledger), its schema (a ledger), its local policies and
    a bundle's load data are left in the local store."""
    c.policies(GONE)
    c.local_policies(GONE)
    c.bundle_data(GONE)
    ledgers = [c.ledger(ml_tags(GONE_TOPIC)) for _ in range(2)]
    c.managed_ledger(GONE_TOPIC, ledgers)
    cursor = c.ledger(cursor_tags(GONE_TOPIC, "sub"))
    c.cursor(GONE_TOPIC, "sub", cursor)
    schema = c.ledger(schema_tags(f"{GONE}/clicks"))
    c.schema(f"{GONE}/clicks", [(0, schema)])
    c.delete_policies(GONE)
    return [*ledgers, cursor, schema]


def test_a_namespace_deleted_half_way_is_a_leftover_and_its_ledger_bytes_are_reported(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    live = live_namespace(cluster)
    gone = half_deleted_namespace(cluster)
    report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0)).to_dict()
    assert report["status"] == "ok", report["refusals"]
    target = f"pulsar-metadata:local:{GONE}"
    entries = OrphanRegistry(pulsar).entries()
    assert entries[target].target_class == PM_DELETED_NAMESPACE
    assert entries[target].ml_name == GONE
    pm = report["pulsar_metadata"]
    local = pm["classes"][PM_DELETED_NAMESPACE]["local"]
    # /managed-ledgers/acme/gone, .../persistent, the topic, its cursor; /schemas/acme/gone
    # and its locator; the local policies; /loadbalance/bundle-data/acme/gone and a bundle.
    assert local["leftovers"] == 1
    assert local["znodes"] == 9
    assert local["ledgers"] == len(gone)
    assert local["ledger_bytes"] == 1024 * len(gone)
    assert pm["held_back"] == {"ledgers": len(gone), "bytes": 1024 * len(gone)}
    assert report["bookkeeper"]["leftover_ledgers"] == {
        target: {"ledgers": len(gone), "bytes": 1024 * len(gone)}
    }
    (sample,) = pm["samples"][PM_DELETED_NAMESPACE]
    assert "tenant acme exists" in sample["why"]
    assert set(pm["leftovers"]) == {target}
    # The leftover's ledgers are still listed: live to BookKeeper until the metadata goes.
    assert {e.ledger_id for e in entries.values()} & set(gone + live) == set()
    text = "\n".join(report_lines(report))
    assert "pm-deleted-namespace" in text
    assert "leftovers hold back 4 BookKeeper ledgers" in text


def report_lines(report: dict[str, Any]) -> list[str]:
    from ledger_gc.orphans.report import CycleReport, render_text

    return list(render_text(CycleReport(report["run_id"], report["status"], report)))


def test_a_deleted_tenant_with_its_partitioned_topic_metadata(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    live_namespace(cluster)
    cluster.policies("gone-tenant/ns")
    topic = "gone-tenant/ns/persistent/t"
    cluster.managed_ledger(topic, [cluster.ledger(ml_tags(topic))])
    partitions = cluster.partitioned_topic("gone-tenant/ns", "p", 2)
    cluster.managed_ledger(partitions[0], [])
    cluster.delete_tenant("gone-tenant")
    found = survey_at(endpoints_of(pulsar))
    assert found is not None
    classes = {(left.store, left.name): left.judgement.target_class for left in found.leftovers}
    assert classes == {
        (LOCAL, "gone-tenant/ns"): PM_DELETED_TENANT,
        (CONFIG, "gone-tenant"): PM_DELETED_TENANT,
    }
    config = next(left for left in found.leftovers if left.store == CONFIG)
    records = [z.path for z in config.znodes if z.kind == RECORD]
    assert records == ["/admin/partitioned-topics/gone-tenant/ns/persistent/p"]
    candidates = {c["segment"]: c for c in found.candidates}
    assert candidates["config:gone-tenant"]["ml_name"] == "gone-tenant"
    # /managed-ledgers/gone-tenant/ns, its domain node, the topic and the partition.
    assert candidates["local:gone-tenant/ns"]["objects"] == 4


@pytest.fixture
def broker_session(settings: Settings) -> Iterator[KazooClient]:
    """A broker's own ZooKeeper session: its ephemeral znodes go when it closes."""
    client = KazooClient(hosts=settings.zk_hosts, timeout=10)
    client.start()
    try:
        yield client
    finally:
        client.stop()
        client.close()


def classes_of(found: PulsarMetadataSurvey | None) -> dict[tuple[str, str], str | None]:
    assert found is not None
    return {(left.store, left.name): left.judgement.target_class for left in found.leftovers}


def test_a_dead_brokers_heartbeat_is_a_leftover_and_a_live_brokers_is_not(
    pulsar: Settings, cluster: PulsarCluster, broker_session: KazooClient
) -> None:
    live_namespace(cluster)
    cluster.broker("broker-1:8080", broker_session)
    cluster.heartbeat("broker-1:8080", [cluster.ledger({})])
    cluster.heartbeat("broker-1:8080", cluster=None)
    cluster.heartbeat("broker-1:8080", sla=True)
    cluster.heartbeat("broker-2:8080", [cluster.ledger({})])
    cluster.heartbeat("broker-2:8080", cluster=None)
    cluster.heartbeat("broker-2:8080", sla=True)
    found = survey_at(endpoints_of(pulsar))
    assert classes_of(found) == {
        (LOCAL, f"pulsar/{CLUSTER}/broker-2:8080"): PM_DEAD_BROKER,
        (LOCAL, "pulsar/broker-2:8080"): PM_DEAD_BROKER,
        (LOCAL, f"sla-monitor/{CLUSTER}/broker-2:8080"): PM_DEAD_BROKER,
    }
    # Broker 1 dies: its heartbeats are leftovers from the next survey on.
    broker_session.stop()
    again = classes_of(survey_at(endpoints_of(pulsar)))
    assert again[(LOCAL, f"pulsar/{CLUSTER}/broker-1:8080")] == PM_DEAD_BROKER
    assert again[(LOCAL, f"sla-monitor/{CLUSTER}/broker-1:8080")] == PM_DEAD_BROKER


def test_a_namespace_not_replicated_here_is_reported_and_never_a_leftover(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    live_namespace(cluster)
    cluster.policies("acme/eu-only", replication_clusters=["eu"])
    cluster.managed_ledger(
        "acme/eu-only/persistent/t", [cluster.ledger(ml_tags("acme/eu-only/persistent/t"))]
    )
    endpoints = endpoints_of(pulsar)
    ours = dataclasses.replace(endpoints.policy, pulsar_clusters=(CLUSTER,))
    found = survey_at(dataclasses.replace(endpoints, policy=ours))
    assert classes_of(found) == {}
    assert found is not None
    manifest = found.manifest.to_manifest()
    (sample,) = manifest["samples"][PM_NOT_REPLICATED_HERE]
    assert sample["name"] == "acme/eu-only"
    assert "names none of this cluster's (standalone)" in sample["why"]
    # This cluster's name unknown: not judged.
    unknown = survey_at(endpoints).manifest.to_manifest()  # type: ignore[union-attr]
    assert PM_NOT_REPLICATED_HERE not in unknown["samples"]


def test_a_stuck_delete_is_reported_with_its_command_after_the_grace(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    live_namespace(cluster)
    cluster.policies("acme/stuck", deleted=True)
    topic = "acme/stuck/persistent/t"
    cluster.managed_ledger(topic, [cluster.ledger(ml_tags(topic))])
    cluster.partitioned_topic(LIVE, "click stream", 2, deleted=True)
    soon = survey_at(endpoints_of(pulsar), hours=1).manifest.to_manifest()  # type: ignore[union-attr]
    assert PM_STUCK_DELETE not in soon["samples"]
    later_on = survey_at(endpoints_of(pulsar), hours=DAY_H + 1)
    assert classes_of(later_on) == {}  # its policies exist: never a leftover
    samples = later_on.manifest.to_manifest()["samples"][PM_STUCK_DELETE]  # type: ignore[union-attr]
    commands = {s["name"]: s["command"] for s in samples}
    assert commands == {
        "acme/stuck": "pulsar-admin namespaces delete --force acme/stuck",
        "persistent://acme/live/click stream": (
            "pulsar-admin topics delete-partitioned-topic 'persistent://acme/live/click stream'"
        ),
    }


def test_an_owned_bundle_holds_the_whole_leftover(
    pulsar: Settings, cluster: PulsarCluster, broker_session: KazooClient
) -> None:
    live_namespace(cluster)
    gone = half_deleted_namespace(cluster)
    owned = cluster.own_bundle(GONE, broker_session)
    found = survey_at(endpoints_of(pulsar))
    assert found is not None
    assert found.candidates == []
    held = found.manifest.to_manifest()["held"]
    assert [h["target"] for h in held] == [f"pulsar-metadata:local:{GONE}"]
    assert found.manifest.to_manifest()["held_targets"] == [f"pulsar-metadata:local:{GONE}"]
    assert owned in held[0]["why"]
    assert set(found.leftover_ledgers()) == set(gone)  # what it holds back, held or not
    broker_session.stop()  # the broker lets go (or dies)
    after = survey_at(endpoints_of(pulsar))
    assert after is not None
    assert [c["segment"] for c in after.candidates] == [f"local:{GONE}"]


# --- the configuration store's sanity ----------------------------------------------------


def config_store(settings: Settings, zk_client: KazooClient, chroot: str = "/config") -> Any:
    """Another chroot (below the test's) as Pulsar's configuration store, and its
    endpoint."""
    zk_client.ensure_path(chroot)
    return resolve(settings.with_overrides(zk_address=settings.zk_hosts + chroot)).zk


def test_a_configuration_store_on_another_chroot(
    pulsar: Settings,
    settings: Settings,
    zk_client: KazooClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The local store has no /admin/policies: not every namespace is deleted."""
    endpoint = config_store(settings, zk_client)
    config_client = KazooClient(hosts=endpoint.hosts, timeout=10)
    config_client.start()
    try:
        c = PulsarCluster(zk_client, config=config_client).init()
        live_namespace(c)
        half_deleted_namespace(c)
        assert not zk_client.exists("/admin/policies")
        # Under auto, none given: the source is off, with one warning.
        with caplog.at_level(logging.WARNING):
            assert survey_at(endpoints_of(pulsar)) is None
        warnings = [r.getMessage() for r in caplog.records if "Pulsar-metadata" in r.getMessage()]
        assert len(warnings) == 1
        assert "LEDGERGC_CONFIG_STORE_HOSTS" in warnings[0]
        # On by LEDGERGC_PULSAR_METADATA=true, with none given: a wrong address.
        with pytest.raises(ConfigError, match="has no /admin/policies"):
            survey_at(endpoints_of(pulsar, pulsar_metadata_mode="true"))
        # Given: judged against it.
        found = survey_at(endpoints_of(pulsar, config_store=endpoint))
        assert classes_of(found) == {(LOCAL, GONE): PM_DELETED_NAMESPACE}
    finally:
        config_client.stop()
        config_client.close()


def test_an_empty_configuration_store_is_refused(
    pulsar: Settings, settings: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    live_namespace(cluster)
    endpoint = config_store(settings, zk_client, "/empty")
    with pytest.raises(ConfigError, match="LEDGERGC_CONFIG_STORE_HOSTS") as refused:
        survey_at(endpoints_of(pulsar, config_store=endpoint))
    assert "\n" not in str(refused.value)
    assert endpoint.hosts in str(refused.value)


def test_every_namespace_with_topics_looking_deleted_refuses_the_cycle(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    cluster.tenant("acme")
    half_deleted_namespace(cluster)
    cluster.heartbeat("broker-9:8080", [])  # a heartbeat does not count
    report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0)).to_dict()
    assert report["status"] == "refused"
    (refusal,) = report["refusals"]
    assert refusal["guard"] == "pulsar-metadata-unknown-namespaces"
    assert "does not know any namespace of this cluster" in refusal["reason"]
    assert OrphanRegistry(pulsar).entries() == {}


def ledgergc(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGERGC_", "AWS_"))}
    return subprocess.run(
        [str(LEDGERGC), *args], env={**base, **env}, capture_output=True, text=True, timeout=300
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ledgergc: error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_another_clusters_configuration_store_is_refused_in_one_line_by_the_command(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    live_namespace(cluster)
    cluster.cluster_definition("eu-west")
    env = {
        **pulsar.to_env(),
        "LEDGERGC_PULSAR_CLUSTER": "us-east",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    # (the standalone cluster of live_namespace and eu-west: neither is us-east)
    line = one_line_error(ledgergc(env, "orphans", "--dry-run", "--json"))
    assert "not this cluster (us-east" in line
    assert "LEDGERGC_CONFIG_STORE_HOSTS" in line


def test_an_empty_configuration_store_is_refused_in_one_line_by_the_command(
    pulsar: Settings, settings: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    live_namespace(cluster)
    endpoint = config_store(settings, zk_client, "/empty")
    env = {
        **pulsar.to_env(),
        "LEDGERGC_CONFIG_STORE_HOSTS": endpoint.hosts,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    line = one_line_error(ledgergc(env, "orphans", "--dry-run", "--json"))
    assert "has no /admin/policies" in line


def test_a_leftovers_znodes_read_again_live_are_the_surveys(
    pulsar: Settings, cluster: PulsarCluster, broker_session: KazooClient
) -> None:
    """What a delete's live re-check reads for one leftover (``live_unit_nodes`` then
    ``read_units``) is what the survey found: v2 and v1 namespaces, a tenant's own
    unit, a heartbeat, and the v1 namespace of a v2 namespace named like its cluster."""
    live_namespace(cluster)
    half_deleted_namespace(cluster)
    v1 = "acme/us-west/legacy"
    cluster.policies(v1)
    cluster.managed_ledger(f"{v1}/persistent/t", [cluster.ledger(ml_tags(f"{v1}/persistent/t"))])
    cluster.local_policies(v1)
    cluster.bundle_data(v1)
    cluster.delete_policies(v1)
    both = "acme/us-east"  # a v2 namespace named like a v1 cluster: its v1 one is gone
    cluster.policies(both)
    cluster.policies(f"{both}/old")
    cluster.managed_ledger(f"{both}/persistent/t", [])
    cluster.managed_ledger(f"{both}/old/persistent/t", [])
    cluster.delete_policies(f"{both}/old")
    cluster.client.ensure_path("/schemas/gone-tenant")
    cluster.client.ensure_path("/managed-ledgers/gone-v1/us-west")  # its namespaces gone
    cluster.heartbeat("broker-3:8080", [])
    found = survey_at(endpoints_of(pulsar))
    assert found is not None
    names = {(left.store, left.name) for left in found.leftovers}
    assert (LOCAL, v1) in names
    assert (LOCAL, "gone-tenant") in names
    assert (LOCAL, "gone-v1/us-west") in names  # (an empty level reads as a v2 namespace)
    assert (LOCAL, "pulsar/standalone/broker-3:8080") in names
    with pm_survey.stores(endpoints_of(pulsar)) as (local, config):
        for left in found.leftovers:
            nodes, exclude = pm_survey.live_unit_nodes(local, config, left.store, left.name)
            again = pm_survey.read_units(local, left.store, {left.name: nodes}, None, exclude)
            assert [z.path for z in again[left.name]] == [z.path for z in left.znodes], left.name
    assert (LOCAL, f"{both}/old") in names
    assert (LOCAL, both) not in names


def test_another_clusters_configuration_store_is_refused_with_no_cluster_name_set(
    pulsar: Settings,
    settings: Settings,
    zk_client: KazooClient,
    broker_session: KazooClient,
) -> None:
    """LEDGERGC_PULSAR_CLUSTER unset (no broker.conf): a configuration store given that is
    another cluster's, sharing this cluster's tenant and one namespace (``acme/live``),
    would judge every other namespace of this cluster deleted, and the guard of "every
    namespace looks deleted" stays quiet (``acme/live`` looks live). A registered broker's
    heartbeat namespace (``pulsar/<cluster>/<broker>``) names this cluster: that store
    does not define it, so it is refused before anything is judged."""
    endpoint = config_store(settings, zk_client, "/staging")
    config_client = KazooClient(hosts=endpoint.hosts, timeout=10)
    config_client.start()
    try:
        staging = PulsarCluster(config_client).init()
        staging.cluster_definition("staging")
        staging.policies(LIVE)
        prod = PulsarCluster(zk_client, config=config_client).init()
        live_namespace(prod)  # acme/live: a namespace of both clusters
        topic = "acme/orders/persistent/t"
        prod.managed_ledger(topic, [prod.ledger(ml_tags(topic))])  # this cluster's only
        prod.broker("broker-1:8080", broker_session)
        prod.heartbeat("broker-1:8080", [prod.ledger({})], cluster="prod")
        prod.heartbeat("broker-9:8080", [], cluster="old-name")  # a dead broker's: not used
        endpoints = endpoints_of(pulsar, config_store=endpoint)
        assert endpoints.policy.pulsar_clusters == ()
        with pytest.raises(ConfigError, match="not this cluster") as refused:
            survey_at(endpoints)
        line = str(refused.value)
        assert "\n" not in line
        assert "staging" in line
        assert "prod" in line and "pulsar/prod/broker-1:8080" in line
        assert "old-name" not in line
        with pytest.raises(ConfigError, match="not this cluster"):
            pm_survey.check_config_store(endpoints)
        # The right store (it defines prod too, as a shared one does): judged.
        staging.cluster_definition("prod")
        staging.policies("acme/orders")
        assert classes_of(survey_at(endpoints)) == {
            (LOCAL, "pulsar/old-name/broker-9:8080"): PM_DEAD_BROKER
        }
    finally:
        config_client.stop()
        config_client.close()


def test_a_live_v1_namespaces_schemas_are_not_a_leftover_without_its_other_znodes(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    """Pulsar keys a v1 topic's schema without its cluster (``/schemas/<p>/<ns>/<topic>``
    for ``p/<c>/ns``). A live v1 namespace whose only local znodes are its schemas (its
    persistent topics deleted, or only non-persistent ones, its bundles unowned) is not
    listed under any other root: its schemas must still be judged by its policies, not
    as the deleted namespace ``p/ns`` (their removal hands the schema ledgers to the
    BookKeeper source)."""
    live_namespace(cluster)
    cluster.policies("legacy/us-east/events")
    schema = cluster.ledger(schema_tags("legacy/events/clicks"))
    cluster.schema("legacy/events/clicks", [(0, schema)])
    # A v1 namespace deleted in this cluster whose schemas stayed: still a leftover.
    cluster.tenant("legacy")
    gone = cluster.ledger(schema_tags("legacy/gone/views"))
    cluster.schema("legacy/gone/views", [(0, gone)])
    found = survey_at(endpoints_of(pulsar))
    assert classes_of(found) == {(LOCAL, "legacy/gone"): PM_DELETED_NAMESPACE}


def test_a_tenant_created_while_the_survey_reads_the_local_store_is_not_deleted(
    pulsar: Settings, cluster: PulsarCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pulsar writes a tenant, then its namespace's policies, then the namespace's
    local znodes (and its partitioned topics' metadata): whatever the survey reads of
    the local store, the configuration store's facts read after it have them. A tenant
    created after the survey's first read of the configuration store (its sanity
    check) but before its local listing must not look deleted, nor its live znodes be
    registered. (The interleaving is made by running Pulsar's writes just before the
    listing: a race between two real reads cannot be timed otherwise.)"""
    live_namespace(cluster)
    topic = "newco/ns/persistent/t"
    listing = pm_survey._list_local

    def pulsar_creates_a_tenant_meanwhile(*args: Any, **kwargs: Any) -> Any:
        cluster.policies("newco/ns")
        cluster.partitioned_topic("newco/ns", "p", 2)
        cluster.managed_ledger(topic, [cluster.ledger(ml_tags(topic))])
        return listing(*args, **kwargs)

    monkeypatch.setattr(pm_survey, "_list_local", pulsar_creates_a_tenant_meanwhile)
    found = survey_at(endpoints_of(pulsar))
    assert classes_of(found) == {}


def test_an_empty_policies_root_in_the_local_store_under_auto_judges_nothing(
    pulsar: Settings,
    settings: Settings,
    zk_client: KazooClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Under ``auto`` with no configuration store given, the local store's
    ``/admin/policies`` holding no tenant is no configuration store (Pulsar's real one is
    elsewhere): every namespace would look deleted. With no namespace that has topics
    (a cluster of non-persistent topics: schemas, local policies, bundle data), the guard
    of "every namespace looks deleted" has nothing to count, so this must not be judged:
    the source is off with its warning, as with no ``/admin/policies`` at all."""
    endpoint = config_store(settings, zk_client)
    config_client = KazooClient(hosts=endpoint.hosts, timeout=10)
    config_client.start()
    try:
        c = PulsarCluster(zk_client, config=config_client).init()
        c.cluster_definition()
        c.policies("acme/events")
        c.local_policies("acme/events")
        c.schema("acme/events/clicks", [(0, c.ledger(schema_tags("acme/events/clicks")))])
        zk_client.ensure_path("/managed-ledgers")  # (pulsar-cluster-metadata initialize)
        zk_client.ensure_path("/admin/policies")  # (left from a single-store past)
        with caplog.at_level(logging.WARNING):
            assert survey_at(endpoints_of(pulsar)) is None
        assert any("LEDGERGC_CONFIG_STORE_HOSTS" in r.getMessage() for r in caplog.records)
        assert pm_survey.check_config_store(endpoints_of(pulsar)) is False
        # Given, it is judged against the real one.
        assert classes_of(survey_at(endpoints_of(pulsar, config_store=endpoint))) == {}
    finally:
        config_client.stop()
        config_client.close()


def test_a_v2_namespace_named_like_a_v1_cluster_keeps_its_bundles_load_data(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    """``/admin/policies/acme/us-east`` holds Policies JSON (a v2 namespace) and has the
    v1 namespace ``legacy`` below it. Below the bundle-keyed roots its node then holds
    both its bundle ranges and ``legacy``: a bundle range is that v2 namespace's bundle,
    never a v1 namespace called ``0x00000000_0x40000000`` whose policies are missing."""
    live_namespace(cluster)
    cluster.policies("acme/us-east")
    cluster.policies("acme/us-east/legacy")
    cluster.bundle_data("acme/us-east")
    cluster.bundle_data("acme/us-east/legacy")
    topic = "acme/us-east/persistent/t"
    cluster.managed_ledger(topic, [cluster.ledger(ml_tags(topic))])
    assert classes_of(survey_at(endpoints_of(pulsar))) == {}
    # Its v1 namespace deleted: that one's bundle data is its leftover, nothing else.
    cluster.delete_policies("acme/us-east/legacy")
    found = survey_at(endpoints_of(pulsar))
    assert classes_of(found) == {(LOCAL, "acme/us-east/legacy"): PM_DELETED_NAMESPACE}
    assert found is not None
    (left,) = found.leftovers
    assert {z.path for z in left.znodes} == {
        "/loadbalance/bundle-data/acme/us-east/legacy",
        f"/loadbalance/bundle-data/acme/us-east/legacy/{bundle_ranges()[0]}",
    }


def _only_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one line of stderr of a refused command (exit 2): nothing else there."""
    line = one_line_error(result)
    assert result.stderr.strip() == line, result.stderr[-3000:]
    return line


def test_an_unreachable_configuration_store_is_one_line_naming_its_variable(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    """Review 3 of issue 34: the configuration store is down (a closed port)."""
    live_namespace(cluster)
    env = {
        **pulsar.to_env(),
        "LEDGERGC_CONFIG_STORE_HOSTS": "127.0.0.1:1/global",
        "LEDGERGC_ZK_TIMEOUT_SECONDS": "3",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    line = _only_line(ledgergc(env, "orphans", "--dry-run", "--json"))
    assert "LEDGERGC_CONFIG_STORE_HOSTS" in line and "127.0.0.1:1" in line, line


def test_a_configuration_store_that_refuses_ledger_gcs_identity_is_one_line(
    pulsar: Settings, settings: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    """Review 3 of issue 34: /admin/policies readable by the brokers' identity only
    (``NoAuth``): the line names ledger-gc's identity, the permission and the znode."""
    from kazoo.security import make_digest_acl

    live_namespace(cluster)
    endpoint = config_store(settings, zk_client, "/locked")
    admin = KazooClient(hosts=endpoint.hosts, timeout=10)
    admin.start(timeout=30)
    try:
        admin.add_auth("digest", "broker:Broker-pw")
        admin.create(
            "/admin/policies",
            b"",
            acl=[make_digest_acl("broker", "Broker-pw", all=True)],
            makepath=True,
        )
        admin.create("/admin/policies/acme", b"{}")
    finally:
        admin.stop()
        admin.close()
    env = {
        **pulsar.to_env(),
        "LEDGERGC_CONFIG_STORE_HOSTS": endpoint.hosts,
        "LEDGERGC_CONFIG_STORE_DIGEST": "ledger-gc:Gc-pw",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
    line = _only_line(ledgergc(env, "orphans", "--dry-run", "--json"))
    assert "digest:ledger-gc" in line and "READ" in line, line
    assert "/admin/policies" in line and "Gc-pw" not in line, line
    # The fix is the brokers' identity on the configuration store, not the bookies'.
    assert "BookKeeper" not in line and "bookies" not in line, line
    assert "LEDGERGC_CONFIG_STORE_DIGEST" in line and "brokers'" in line, line
