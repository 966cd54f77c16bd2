"""Pulsar's configuration store apart from the local store, against real ZooKeepers.

Pulsar keeps namespaces' policies (``/admin/policies``) in its configuration store
(``configurationMetadataStoreUrl``), which may be another chroot of the local store's
servers or another ZooKeeper: the local store then has no ``/admin/policies`` at all.
Where the shape of a ``/managed-ledgers`` level needs the policies (a v1 namespace called
``persistent`` whose topics have no cursor; a v2 namespace named like a v1 cluster whose
tree proves nothing), they are read from the configuration store
(``LEDGERGC_CONFIG_STORE_HOSTS``), and a cycle opens it beside the local store.
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from test_status_command import run_ledgergc

from ledger_gc.bookkeeper.references import read_references
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.errors import MetadataFormatError, MetadataUnavailableError
from ledger_gc.metadata.config_store import configuration_store
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.orphans.cycle import OrphanCycleError, run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.rules.bookkeeper import classify as bk
from ledger_gc.state.stores import open_store
from ledger_gc.trim.run import run_trim
from local_stack.zookeeper import ZooKeeperServer
from pulsar_cluster import PulsarCluster, ml_tags

POLICIES = json.dumps({"bundles": {"numBundles": 4}, "replication_clusters": ["us-west"]})
#: property acme, cluster us-west, the v1 namespace "persistent"; its topic has no cursor,
#: so only /admin/policies tells it from the v2 namespace acme/us-west's topic "persistent".
V1_TOPIC = "acme/us-west/persistent/persistent/clicks"
#: The v2 namespace acme/us-east, named like a v1 cluster of acme (v1 namespace legacy):
#: its domain node is there but holds no topic yet, so only its policies say it exists.
V1_LEGACY = "acme/us-east/legacy/persistent/orders"
ORDERS = "public/default/persistent/orders"


def _kazoo(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=30)
    return client


@pytest.fixture
def config_chroot(_zk_root_client: KazooClient, settings: Settings) -> Iterator[str]:
    """Another chroot on the local store's server, holding the configuration store."""
    chroot = f"/cfg{uuid.uuid4().hex[:10]}"
    _zk_root_client.ensure_path(chroot)
    servers = settings.zk_hosts.split("/", 1)[0]
    yield f"{servers}{chroot}"


def plant_local(cluster: PulsarCluster) -> dict[str, int]:
    """The local store: managed ledgers only, no /admin/policies (as Pulsar writes it
    when the configuration store is elsewhere)."""
    # The leak first: a ledger above every id the metadata names is held (created after
    # the references were read, for all the survey knows).
    ids = {
        "leaked": cluster.ledger(ml_tags(ORDERS)),
        "clicks": cluster.ledger(ml_tags(V1_TOPIC)),
        "legacy": cluster.ledger(ml_tags(V1_LEGACY)),
        "orders": cluster.ledger(ml_tags(ORDERS)),
    }
    cluster.managed_ledger(V1_TOPIC, [ids["clicks"]])
    cluster.managed_ledger(V1_LEGACY, [ids["legacy"]])
    cluster.client.ensure_path("/managed-ledgers/acme/us-east/persistent")
    cluster.managed_ledger(ORDERS, [ids["orders"]])
    return ids


def plant_configuration(hosts: str) -> None:
    """The configuration store: tenants and namespaces' policies, as Pulsar writes them."""
    servers, _, chroot = hosts.partition("/")
    root = _kazoo(servers)
    try:
        root.ensure_path(f"/{chroot}")  # kazoo needs a chroot to exist before use
    finally:
        root.stop()
        root.close()
    client = _kazoo(hosts)
    try:
        for name, data in (
            ("acme", json.dumps({"allowedClusters": ["us-west", "us-east"]})),
            ("public", json.dumps({"allowedClusters": ["us-west"]})),
            ("acme/us-west/persistent", POLICIES),
            ("acme/us-east", POLICIES),
            ("acme/us-east/legacy", POLICIES),
            ("public/default", POLICIES),
        ):
            client.create(f"/admin/policies/{name}", data.encode(), makepath=True)
    finally:
        client.stop()
        client.close()


def _references(settings: Settings) -> Any:
    endpoints = resolve(settings)
    with (
        MetadataStore.open(endpoints.zk) as local,
        configuration_store(local, endpoints.config_store) as config,
    ):
        return read_references(local, policies=config)


def test_policies_on_another_chroot_of_the_same_server(
    settings: Settings, zk_client: KazooClient, config_chroot: str
) -> None:
    cluster = PulsarCluster(zk_client).init()
    plant_local(cluster)
    plant_configuration(config_chroot)

    # The local store alone has no /admin/policies: the v1 namespace "persistent" cannot
    # be told from a v2 topic, and nothing is decided from it.
    with pytest.raises(MetadataFormatError, match="/admin/policies/acme/us-west"):
        _references(settings)

    # A configuration store that cannot be reached, where a level needs it: refused too
    # (its session opens at that first read, not before).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    down = settings.with_overrides(config_store_address=f"127.0.0.1:{port}", zk_timeout_seconds=2.0)
    with pytest.raises(MetadataUnavailableError, match="configuration store"):
        _references(down)

    with_config = settings.with_overrides(config_store_address=f"zk:{config_chroot}")
    endpoints = resolve(with_config)
    assert endpoints.config_store is not None and endpoints.config_store.hosts == config_chroot
    refs = _references(with_config)
    assert set(refs.listed) == {V1_TOPIC, V1_LEGACY, ORDERS}
    assert refs.namespaces == {
        "acme/us-west/persistent",
        "acme/us-east",
        "acme/us-east/legacy",
        "public/default",
    }


@pytest.fixture
def pulsar(settings: Settings) -> Settings:
    return settings.with_overrides(
        bucket="",
        delete_enabled=True,
        grace_seconds=3600,
        retention_seconds=0,
        orphan_max_fraction=1.0,
    )


def test_a_cycle_reads_the_policies_from_another_zookeeper(
    pulsar: Settings,
    zk_client: KazooClient,
    private_zookeeper: ZooKeeperServer,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
) -> None:
    """The BookKeeper source's survey and its delete's live re-check open the
    configuration store on its own ZooKeeper; without it the cycle refuses to guess."""
    cluster = PulsarCluster(zk_client).init()
    ids = plant_local(cluster)
    plant_configuration(f"{private_zookeeper.hosts}/global")

    with pytest.raises(OrphanCycleError):
        run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))

    settings = pulsar.with_overrides(config_store_address=f"{private_zookeeper.hosts}/global")
    first = run_orphan_cycle(resolve(settings), spark=spark, **later(0)).to_dict()
    assert first["bookkeeper"]["managed_ledgers"] == 3
    registry = OrphanRegistry(settings).entries().values()
    assert {e.ledger_id: e.target_class for e in registry} == {ids["leaked"]: bk.BK_ORPHAN_LEDGER}
    report = run_orphan_cycle(resolve(settings), spark=spark, **later(2)).to_dict()
    assert {d["ledger_id"] for d in report["deleted"]} == {ids["leaked"]}
    for name in ("clicks", "legacy", "orders"):
        assert cluster.client.exists(cluster.path(ids[name])) is not None


@pytest.mark.parametrize("command", [["status"], ["orphans", "--dry-run"], ["trim", "--dry-run"]])
@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({"LEDGERGC_CONFIG_STORE_HOSTS": "oxia://oxia:6648/default"}, "is Oxia, not ZooKeeper"),
        ({"LEDGERGC_CONFIG_STORE_HOSTS": "etcd:http://etcd:2379"}, "is etcd, not ZooKeeper"),
        ({"LEDGERGC_CONFIG_STORE_HOSTS": "garbage!!"}, "has no host name"),
        ({"LEDGERGC_CONFIG_STORE_HOSTS": "zk+hierarchical://zk:2181/ledgers"}, "BookKeeper's"),
        ({"LEDGERGC_CONFIG_STORE_TLS_CA": "/etc/ssl/ca.pem"}, "LEDGERGC_CONFIG_STORE_TLS=true"),
        ({"LEDGERGC_PULSAR_METADATA": "maybe"}, "must be auto, true or false"),
        ({"LEDGERGC_BK_REMOVE_UNREADABLE": "yes please"}, "is not a boolean"),
        (
            {"LEDGERGC_CONFIG_STORE_HOSTS": "configurationMetadataStoreUrl=oxia://oxia:6648"},
            "(from configurationMetadataStoreUrl in ",
        ),
    ],
)
def test_a_bad_configuration_store_setting_exits_2_in_one_line(
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    environ: dict[str, str],
    says: str,
    command: list[str],
) -> None:
    """Each command an operator runs first refuses a bad setting of issue 34 in one line
    naming it, exit 2, before it connects or starts Spark; a bad broker.conf key names
    the variable it stands for and the key. Never advises a form the setting refuses."""
    for name, value in environ.items():
        if value.startswith("configurationMetadataStoreUrl="):  # as broker.conf has it
            conf = tmp_path / "broker.conf"
            conf.write_text(value + "\n", encoding="utf-8")
            monkeypatch.setenv("LEDGERGC_PULSAR_CONF", str(conf))
        else:
            monkeypatch.setenv(name, value)
    result = run_ledgergc(settings, *command)
    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("ledgergc: error: ") and says in line, line
    assert next(iter(environ)) in line
    assert "zk+hierarchical" not in line.partition(";")[2], line
    assert result.stdout == "", result.stdout


def test_status_shows_where_the_configuration_store_came_from(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "configurationMetadataStoreUrl=\nglobalZookeeperServers=zk9:2181/global\n",
        encoding="utf-8",
    )
    open_store(settings).ready()
    monkeypatch.setenv("LEDGERGC_PULSAR_CONF", str(conf))
    monkeypatch.setenv("LEDGERGC_CONFIG_STORE_SASL_MECHANISM", "DIGEST-MD5")
    monkeypatch.setenv("LEDGERGC_CONFIG_STORE_SASL_USERNAME", "global")
    monkeypatch.setenv("LEDGERGC_CONFIG_STORE_SASL_PASSWORD", "Global-SeKrit")
    result = run_ledgergc(settings, "status", "--json")
    assert result.returncode == 0, result.stderr
    assert "SeKrit" not in result.stdout + result.stderr
    shown = json.loads(result.stdout)["settings"]
    assert shown["LEDGERGC_CONFIG_STORE_HOSTS"] == {
        "value": "zk9:2181/global",
        "source": "broker.conf",
        "from": f"globalZookeeperServers in {conf}",
    }
    assert shown["LEDGERGC_CONFIG_STORE_SASL_PASSWORD"] == {"value": "***", "source": "env"}
    assert shown["LEDGERGC_CONFIG_STORE_TLS"]["source"] == "default"


def test_status_and_trim_list_the_topics_only_the_configuration_stores_policies_show(
    settings: Settings, zk_client: KazooClient, config_chroot: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The v2 namespace acme/us-east (named like a v1 cluster of acme) whose only topic is
    called ``persistent``: the tree cannot tell it from a v1 namespace ``persistent``, its
    policies in the configuration store can."""
    cluster = PulsarCluster(zk_client)
    cluster.managed_ledger(V1_LEGACY, [])
    cluster.managed_ledger("acme/us-east/persistent/persistent", [])
    cluster.managed_ledger(ORDERS, [])
    plant_configuration(config_chroot)
    open_store(settings).ready()

    def listed() -> list[str]:
        result = run_ledgergc(settings, "status", "--json", "--metadata-only")
        assert result.returncode == 0, result.stderr
        return [ml["name"] for ml in json.loads(result.stdout)["managed_ledgers"]]

    assert listed() == [ORDERS]  # the local store alone: acme/us-east read as a v1 cluster
    monkeypatch.setenv("LEDGERGC_CONFIG_STORE_HOSTS", config_chroot)
    assert listed() == ["acme/us-east/persistent/persistent", ORDERS]
    # The trim's scope likewise.
    with_config = settings.with_overrides(config_store_address=config_chroot)
    report = run_trim(resolve(with_config), dry_run=True, record_run=False)
    assert [ml.name for ml in report.managed_ledgers] == [
        "acme/us-east/persistent/persistent",
        ORDERS,
    ]
