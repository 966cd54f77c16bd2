"""Phase 3 for Pulsar's own metadata against a real ZooKeeper: a leftover's records go
leaves first, one znode at a time, fenced and audited ahead; its parents on a later
cycle; anything that shows the namespace alive (policies, a re-created tenant, a topic
created meanwhile, a bundle owned) keeps the rest (issue 34).

The delete is driven with registry entries directly (``PulsarMetadataSource.delete``
under the delete lock), as the engine's phase 3 hands them over.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections import namedtuple
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.serialization import Create2
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions

from ledger_gc.audit import DELETED, DELETING, NOT_DELETED, AuditLog
from ledger_gc.config.edge import resolve, zk_endpoint
from ledger_gc.config.endpoints import Endpoints
from ledger_gc.config.settings import Settings
from ledger_gc.metadata import fencing
from ledger_gc.orphan_source import DeleteRequest
from ledger_gc.orphans import delete_lock as delete_lock_module
from ledger_gc.orphans.cycle import step_delete, step_report
from ledger_gc.orphans.delete_lock import (
    BOOKKEEPER_LOCK_PATH,
    CONFIG_STORE_LOCK_PATH,
    delete_lock,
)
from ledger_gc.orphans.records import PhasesRecord
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.orphans.run_steps import PHASES, RunSteps
from ledger_gc.pulsar_metadata.source import PulsarMetadataSource
from ledger_gc.restore.restoring import restore_run
from ledger_gc.rules.orphans import outcomes
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.rules.pulsar_metadata.classes import (
    CONFIG,
    LOCAL,
    PM_DEAD_BROKER,
    PM_DELETED_NAMESPACE,
    PM_DELETED_TENANT,
    target_of,
)
from ledger_gc.state.handoff import handed_off, removed_namespaces
from pulsar_cluster import PulsarCluster

LEDGERGC = Path(sys.executable).parent / "ledgergc"
NS = "acme/gone"
TOPIC = f"{NS}/persistent/orders"
BUNDLE = "0x00000000_0xffffffff"
#: An ACL ledger-gc may delete under, and that a restore must give back as it was.
ODD_ACL = [ACL(Permissions.ALL, Id("world", "anyone")), ACL(Permissions.READ, Id("ip", "10.9.8.7"))]

#: The records of the planted namespace, in the order a delete takes them: deepest first.
RECORDS = [
    f"/managed-ledgers/{TOPIC}/sub",
    f"/loadbalance/bundle-data/{NS}/{BUNDLE}",
    f"/managed-ledgers/{TOPIC}",
    f"/admin/local-policies/{NS}",
    f"/schemas/{NS}/orders",
]
PARENTS = [
    f"/loadbalance/bundle-data/{NS}",
    f"/managed-ledgers/{NS}/persistent",
    f"/managed-ledgers/{NS}",
    f"/namespace/{NS}",
    f"/schemas/{NS}",
]


@pytest.fixture
def pulsar(settings: Settings) -> Settings:
    return settings.with_overrides(bucket="", delete_enabled=True, retention_seconds=0)


@pytest.fixture
def cluster(zk_client: KazooClient) -> PulsarCluster:
    c = PulsarCluster(zk_client).init()
    tenant(zk_client, "acme")
    c.namespace("acme/live")
    return c


def tenant(client: KazooClient, name: str) -> None:
    client.create(f"/admin/policies/{name}", b'{"allowedClusters":["c1"]}', makepath=True)


def plant_namespace(cluster: PulsarCluster, ns: str = NS, *, containers: bool = False) -> None:
    """What a namespace delete that stopped half way leaves in the local store: a topic
    with ledgers 11 and 12 and a cursor (ledger 13), a schema (ledger 14), its local
    policies, bundle data and its ownership node (no owner)."""
    client = cluster.client
    if containers:  # Pulsar 2.9+: parents as container znodes
        for path in (f"/managed-ledgers/{ns}", f"/managed-ledgers/{ns}/persistent"):
            client.ensure_path(path.rsplit("/", 1)[0])
            create_container(client, path)
    else:
        client.ensure_path(f"/managed-ledgers/{ns}/persistent")
        client.set_acls(f"/managed-ledgers/{ns}/persistent", ODD_ACL)
    topic = f"{ns}/persistent/orders"
    cluster.managed_ledger(topic, [11, 12])
    cluster.cursor(topic, "sub", 13)
    parts = ns.split("/")  # a v1 topic's schema is keyed without its cluster
    cluster.schema(f"{parts[0]}/{parts[-1]}/orders", [(0, 14)])
    client.create(f"/admin/local-policies/{ns}", b'{"bundles":{}}', makepath=True, acl=ODD_ACL)
    client.create(f"/loadbalance/bundle-data/{ns}/{BUNDLE}", b'{"msgRateIn":0}', makepath=True)
    client.ensure_path(f"/namespace/{ns}")


class _CreateContainer(namedtuple("_CreateContainer", "path data acl flags")):
    """ZooKeeper's createContainer (opcode 19; kazoo has no call for it)."""

    type = 19
    serialize = Create2.serialize
    deserialize = Create2.deserialize


def create_container(client: KazooClient, path: str) -> Any:
    """Create ``path`` as a container znode (flags 4), as Pulsar 2.9+ creates parents;
    its stat."""
    result = client.handler.async_result()
    client._call(_CreateContainer(client.chroot + path, b"", OPEN_ACL_UNSAFE, 4), result)
    result.get(timeout=15)
    return client.exists(path)


def entry(store: str, name: str, cls: str) -> RegistryEntry:
    return RegistryEntry(
        prefix=target_of(store, name),
        target_class=cls,
        ml_name=name,
        ledger_id=None,
        first_seen_ms=0,
        last_seen_ms=0,
        first_scan=1,
        last_scan=1,
        scans_seen=2,
        objects=0,
        bytes=0,
        newest_ms=0,
    )


def delete(
    endpoints: Endpoints,
    entries: list[RegistryEntry],
    run_id: str,
    *,
    deleting_: bool = True,
    should_stop: Callable[[], bool] | None = None,
) -> list[outcomes.RecheckResult]:
    """Phase 3 of the Pulsar-metadata source, as the engine runs it under the lock."""
    with delete_lock(endpoints.zk, run_id, 10, config_store=endpoints.configuration) as lock:
        request = DeleteRequest(
            endpoints=endpoints,
            run_id=run_id,
            now_ms=int(time.time() * 1000),
            deleting=deleting_,
            should_stop=should_stop or lock.should_stop,
            fence_for=lock.fence_for,
        )
        return PulsarMetadataSource().delete(request, entries)


def exists(client: KazooClient, paths: list[str]) -> list[str]:
    return [p for p in paths if client.exists(p)]


def test_records_go_leaves_first_then_persistent_parents_on_a_later_cycle(
    pulsar: Settings,
    cluster: PulsarCluster,
    zk_client: KazooClient,
) -> None:
    plant_namespace(cluster)
    endpoints = resolve(pulsar)
    leftover = entry(LOCAL, NS, PM_DELETED_NAMESPACE)

    dry = delete(endpoints, [leftover], "dry", deleting_=False)
    assert [r.action for r in dry] == [outcomes.WOULD_DELETE], dry
    assert dry[0].objects == len(RECORDS)
    assert exists(zk_client, RECORDS) == RECORDS

    first = delete(endpoints, [leftover], "run-1")
    assert [r.action for r in first] == [outcomes.DELETED], first
    sizes = {p: zk_client.exists(p) for p in RECORDS}
    assert first[0].objects == len(RECORDS)
    assert exists(zk_client, RECORDS) == []
    assert exists(zk_client, PARENTS) == PARENTS  # never by the cycle that emptied them
    assert zk_client.exists("/managed-ledgers/acme/live")
    assert sizes and first[0].bytes > 0
    records = AuditLog(pulsar).read(run_id="run-1")
    assert [r["status"] for r in records] == [DELETING, DELETED] * len(RECORDS)
    assert [r["znode"] for r in records[::2]] == RECORDS  # deepest first
    by_znode = {r["znode"]: r for r in records if r["status"] == DELETED}
    assert by_znode[f"/managed-ledgers/{TOPIC}"]["ledger_ids"] == [11, 12]
    assert by_znode[f"/managed-ledgers/{TOPIC}/sub"]["ledger_ids"] == [13]
    assert by_znode[f"/schemas/{NS}/orders"]["ledger_ids"] == [14]
    local_policies = by_znode[f"/admin/local-policies/{NS}"]
    assert local_policies["znode_acl"] == [[a.perms, a.id.scheme, a.id.id] for a in ODD_ACL]
    assert [a[0] for a in local_policies["ancestors"]] == [
        "/admin",
        "/admin/local-policies",
        "/admin/local-policies/acme",
    ]
    assert {r["prefix"] for r in records} == {target_of(LOCAL, NS)}
    # The ledgers they named, handed to the BookKeeper source (state.handoff).
    handed = {
        lid: (h.namespace, h.owner, h.named_by) for lid, h in handed_off(endpoints.state).items()
    }
    assert handed == {
        11: (NS, TOPIC, f"/managed-ledgers/{TOPIC}"),
        12: (NS, TOPIC, f"/managed-ledgers/{TOPIC}"),
        13: (NS, TOPIC, f"/managed-ledgers/{TOPIC}/sub"),
        14: (NS, f"{NS}/orders", f"/schemas/{NS}/orders"),
    }
    # And the namespace as this cluster's: its ledgers no record named stay judged.
    assert removed_namespaces(endpoints.state) == {NS}
    assert dry and not any(r["status"] == DELETING for r in AuditLog(pulsar).read(run_id="dry"))

    # A later cycle (the survey registered what is left: parents only): they go now.
    second = delete(endpoints, [leftover], "run-2")
    assert [r.action for r in second] == [outcomes.DELETED], second
    assert second[0].objects == len(PARENTS) and second[0].bytes == 0
    assert exists(zk_client, PARENTS) == []
    assert zk_client.exists("/managed-ledgers/acme/live") and zk_client.exists("/namespace")
    third = delete(endpoints, [leftover], "run-3")
    assert [r.action for r in third] == [outcomes.GONE], third


def test_a_container_parent_is_never_removed_by_the_cycle_that_emptied_it(
    pulsar: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    plant_namespace(cluster, containers=True)
    results = delete(resolve(pulsar), [entry(LOCAL, NS, PM_DELETED_NAMESPACE)], "run-1")
    assert [r.action for r in results] == [outcomes.DELETED], results
    touched = {r["znode"] for r in AuditLog(pulsar).read(run_id="run-1")}
    assert touched == set(RECORDS)
    assert {d["znode"] for d in results[0].deleted_ledgers} == set(RECORDS)


def test_a_namespace_created_before_or_during_the_delete_is_kept(
    pulsar: Settings,
    cluster: PulsarCluster,
    zk_client: KazooClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plant_namespace(cluster)
    leftover = entry(LOCAL, NS, PM_DELETED_NAMESPACE)
    zk_client.create(f"/admin/policies/{NS}", b"{}")  # created between survey and delete
    results = delete(resolve(pulsar), [leftover], "run-1")
    assert [r.action for r in results] == [outcomes.CORRECTED], results
    assert "live" in results[0].reason
    assert exists(zk_client, RECORDS) == RECORDS
    assert AuditLog(pulsar).read(run_id="run-1") == []

    # Created while its records go: the one deleted before stays deleted, no other goes.
    zk_client.delete(f"/admin/policies/{NS}")
    real = fencing.Fence.delete

    def then_create(self: fencing.Fence, znode: str, version: int) -> Any:
        outcome = real(self, znode, version)
        if not zk_client.exists(f"/admin/policies/{NS}"):
            zk_client.create(f"/admin/policies/{NS}", b"{}")
        return outcome

    monkeypatch.setattr(fencing.Fence, "delete", then_create)
    results = delete(resolve(pulsar), [leftover], "run-2")
    assert results[0].objects == 1, results
    assert exists(zk_client, RECORDS) == RECORDS[1:]
    statuses = [r["status"] for r in AuditLog(pulsar).read(run_id="run-2")]
    assert statuses == [DELETING, DELETED], statuses


def test_a_tenant_recreated_with_the_same_name_is_kept(
    pulsar: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    plant_namespace(cluster, "gone/ns")
    zk_client.create(
        "/admin/partitioned-topics/gone/ns/persistent/t", b'{"partitions":2}', makepath=True
    )
    tenant(zk_client, "gone")  # re-created after the survey saw it deleted
    endpoints = resolve(pulsar)
    results = delete(
        endpoints,
        [entry(LOCAL, "gone/ns", PM_DELETED_TENANT), entry(CONFIG, "gone", PM_DELETED_TENANT)],
        "run-1",
    )
    assert [r.action for r in results] == [outcomes.CORRECTED] * 2, results
    assert zk_client.exists("/managed-ledgers/gone/ns/persistent/orders")
    assert zk_client.exists("/admin/partitioned-topics/gone/ns/persistent/t")
    assert AuditLog(pulsar).read(run_id="run-1") == []


def test_a_topic_auto_created_in_the_namespace_mid_delete_is_kept(
    pulsar: Settings,
    cluster: PulsarCluster,
    zk_client: KazooClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plant_namespace(cluster)
    created = f"/managed-ledgers/{NS}/persistent/new-topic"
    real = fencing.Fence.delete

    def then_auto_create(self: fencing.Fence, znode: str, version: int) -> Any:
        outcome = real(self, znode, version)
        if not zk_client.exists(created):
            zk_client.create(created, b"")  # a producer's lookup: a new managed ledger
        return outcome

    monkeypatch.setattr(fencing.Fence, "delete", then_auto_create)
    results = delete(resolve(pulsar), [entry(LOCAL, NS, PM_DELETED_NAMESPACE)], "run-1")
    # The cursor went before it, the bundle data (elsewhere) after it; the topic's own
    # managed ledger, in the folder that changed, stays, and so does the rest.
    assert [r.action for r in results] == [outcomes.DELETED], results
    assert "child" in results[0].reason, results[0].reason
    assert zk_client.exists(created)
    assert exists(zk_client, RECORDS) == RECORDS[2:]
    closing = AuditLog(pulsar).read(run_id="run-1")[-1]
    assert closing["status"] == DELETED  # the stop came before its audit record


def test_an_owned_bundle_holds_everything_of_its_namespace(
    pulsar: Settings,
    cluster: PulsarCluster,
    zk_client: KazooClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plant_namespace(cluster)
    leftover = entry(LOCAL, NS, PM_DELETED_NAMESPACE)
    owner = KazooClient(hosts=pulsar.zk_hosts)
    owner.start(timeout=15)
    try:
        owner.create(
            f"/namespace/{NS}/{BUNDLE}", b'{"nativeUrl":"pulsar://b1:6650"}', ephemeral=True
        )
        results = delete(resolve(pulsar), [leftover], "run-1")
        assert [r.action for r in results] == [outcomes.HELD], results
        assert "ephemeral" in results[0].reason
        assert exists(zk_client, RECORDS) == RECORDS
        assert AuditLog(pulsar).read(run_id="run-1") == []
    finally:
        owner.stop()
        owner.close()
    # Taken while the records go: nothing more of it is deleted, the owner's node stays.
    real = fencing.Fence.delete
    owned = f"/namespace/{NS}/{BUNDLE}"

    def then_own(self: fencing.Fence, znode: str, version: int) -> Any:
        outcome = real(self, znode, version)
        if not zk_client.exists(owned):
            zk_client.create(owned, b"{}", ephemeral=True)
        return outcome

    monkeypatch.setattr(fencing.Fence, "delete", then_own)
    results = delete(resolve(pulsar), [leftover], "run-2")
    assert results[0].objects == 1 and "bundle" in results[0].reason, results
    assert exists(zk_client, RECORDS) == RECORDS[1:]
    assert zk_client.exists(owned)


def test_a_dead_brokers_heartbeat_goes_and_a_live_ones_stays(
    pulsar: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    dead, live = "pulsar/b1.example:8080", "pulsar/b2.example:8080"
    for ns in (dead, live):
        cluster.managed_ledger(f"{ns}/persistent/healthcheck", [21])
    zk_client.create("/loadbalance/brokers/b2.example:8080", b"{}", makepath=True, ephemeral=True)
    results = delete(
        resolve(pulsar),
        [entry(LOCAL, dead, PM_DEAD_BROKER), entry(LOCAL, live, PM_DEAD_BROKER)],
        "run-1",
    )
    assert [r.action for r in results] == [outcomes.DELETED, outcomes.CORRECTED], results
    assert not zk_client.exists(f"/managed-ledgers/{dead}/persistent/healthcheck")
    assert zk_client.exists(f"/managed-ledgers/{live}/persistent/healthcheck")


def expire(client: KazooClient, hosts: str) -> None:
    """Expire ``client``'s session on the server: close it from a second client."""
    twin = KazooClient(hosts=hosts, client_id=client.client_id)
    twin.start(timeout=15)
    twin.stop()
    twin.close()


def test_a_queued_delete_of_a_cycle_frozen_past_its_lock_session_is_fenced(
    pulsar: Settings,
    cluster: PulsarCluster,
    zk_client: KazooClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Frozen right after its first write-ahead record (its checks all ran before the
    pause: ``should_stop`` says nothing), its lock session expires meanwhile; the
    delete it then sends must not be applied."""
    plant_namespace(cluster)
    endpoints = resolve(pulsar)
    real_append = AuditLog.append
    frozen: list[fencing.Fence] = []
    real_delete = fencing.Fence.delete

    def remember(self: fencing.Fence, znode: str, version: int) -> Any:
        frozen.append(self)
        return real_delete(self, znode, version)

    def append(self: AuditLog, records: Any) -> int:
        records = list(records)
        written = real_append(self, records)
        if any(r.status == DELETING for r in records) and not expired:
            expired.append(True)
            expire(lock_client[0], pulsar.zk_hosts)  # the pause outlived the session
            time.sleep(1)
        return written

    expired: list[bool] = []
    lock_client: list[KazooClient] = []
    monkeypatch.setattr(AuditLog, "append", append)
    monkeypatch.setattr(fencing.Fence, "delete", remember)
    with delete_lock(endpoints.zk, "frozen", 10) as lock:
        lock_client.append(lock._client)
        request = DeleteRequest(
            endpoints=endpoints,
            run_id="frozen",
            now_ms=int(time.time() * 1000),
            deleting=True,
            should_stop=lambda: False,  # frozen: its checks ran before the pause
            fence_for=lock.fence_for,
        )
        results = PulsarMetadataSource().delete(request, [entry(LOCAL, NS, PM_DELETED_NAMESPACE)])
    assert frozen, "no delete was sent"
    assert [r.action for r in results] == [outcomes.SKIPPED], results
    assert results[0].objects == 0
    assert exists(zk_client, RECORDS) == RECORDS
    statuses = [r["status"] for r in AuditLog(pulsar).read(run_id="frozen")]
    assert statuses == [DELETING, NOT_DELETED], statuses


def test_a_config_store_on_another_zookeeper_is_deleted_under_its_own_lock(
    pulsar: Settings,
    cluster: PulsarCluster,
    zk_client: KazooClient,
    private_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deleted tenant's partitioned-topic metadata in a configuration store on another
    ensemble: deleted there, fenced by the lock of that store (its own node)."""
    config = zk_endpoint(private_settings)
    endpoints = dataclasses.replace(resolve(pulsar), config_store=config)
    meta = [
        "/admin/partitioned-topics/gone/ns/persistent/a",
        "/admin/partitioned-topics/gone/ns/persistent/b",
    ]
    remote = KazooClient(hosts=private_settings.zk_hosts)
    remote.start(timeout=15)
    try:
        tenant(remote, "acme")
        for path in meta:
            remote.create(path, json.dumps({"partitions": 3}).encode(), makepath=True)
        # A tenant of that name in the local store says nothing: tenants live in the
        # configuration store.
        tenant(zk_client, "gone")
        fences: list[tuple[str, str]] = []
        real = fencing.Fence.delete

        def seen(self: fencing.Fence, znode: str, version: int) -> Any:
            fences.append((self.hosts, self.path))
            return real(self, znode, version)

        monkeypatch.setattr(fencing.Fence, "delete", seen)
        results = delete(endpoints, [entry(CONFIG, "gone", PM_DELETED_TENANT)], "run-1")
        assert [r.action for r in results] == [outcomes.DELETED], results
        assert results[0].objects == 2
        assert exists(remote, meta) == []
        assert remote.exists("/admin/partitioned-topics/gone/ns/persistent")  # a parent
        assert {h for h, _ in fences} == {config.hosts}
        assert all(p.startswith(CONFIG_STORE_LOCK_PATH) for _, p in fences), fences
        audited = AuditLog(pulsar).read(run_id="run-1")
        assert {r["hosts"] for r in audited} == {config.hosts}
        assert {r["store"] for r in audited} == {CONFIG}
        restored = restore_run(endpoints, "run-1").to_dict()
        assert restored["objects_restored"] == 2 and restored["exit_code"] == 0, restored
        assert exists(remote, meta) == meta
        assert not zk_client.exists("/admin/partitioned-topics")
    finally:
        remote.stop()
        remote.close()


def snapshot(client: KazooClient, roots: list[str]) -> dict[str, tuple[bytes, list[Any]]]:
    """Every znode below ``roots`` and above them: its bytes and ACL."""
    found: dict[str, tuple[bytes, list[Any]]] = {}
    todo = [p for root in roots for p in (*_above(root), root)]
    while todo:
        path = todo.pop()
        if path in found or not client.exists(path):
            continue
        found[path] = (client.get(path)[0], client.get_acls(path)[0])
        todo += [f"{path}/{child}" for child in client.get_children(path)]
    return found


def _above(path: str) -> list[str]:
    parts = path.strip("/").split("/")
    return ["/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def test_restore_twice_gives_back_the_tree_and_its_acls(
    pulsar: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    """Records removed by one run, their parents by the next: restoring the first run
    re-creates the parents it recorded (with their ACLs) and every record; a second
    restore changes nothing and exits 0, and so does restoring the parents' run."""
    plant_namespace(cluster)
    endpoints = resolve(pulsar)
    leftover = entry(LOCAL, NS, PM_DELETED_NAMESPACE)
    roots = [
        f"/managed-ledgers/{NS}",
        f"/schemas/{NS}",
        f"/admin/local-policies/{NS}",
        f"/namespace/{NS}",
        f"/loadbalance/bundle-data/{NS}",
    ]
    before = snapshot(zk_client, roots)
    assert [r.action for r in delete(endpoints, [leftover], "run-1")] == [outcomes.DELETED]
    assert [r.action for r in delete(endpoints, [leftover], "run-2")] == [outcomes.DELETED]
    assert exists(zk_client, RECORDS + PARENTS) == []

    dry = restore_run(endpoints, "run-1", dry_run=True)
    assert dry.exit_code == 0 and exists(zk_client, RECORDS) == []
    # The records' run alone: its records, and the ancestors they recorded.
    first = restore_run(endpoints, "run-1")
    assert first.exit_code == 0, first.to_dict()
    done = first.to_dict()
    assert done["objects_restored"] == len(RECORDS) and done["errors"] == 0, done
    assert exists(zk_client, RECORDS) == RECORDS
    # Then the parents' run: the one parent no record was below (/namespace/<ns>).
    parents = restore_run(endpoints, "run-2").to_dict()
    assert parents["exit_code"] == 0, parents
    assert parents["objects_restored"] == 1, parents
    assert parents["already_restored"] == len(PARENTS) - 1, parents
    assert snapshot(zk_client, roots) == before

    # Twice, as an operator runs it: the command, exit 0, nothing changed.
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGERGC_", "AWS_"))}
    for run, count in (("run-1", len(RECORDS)), ("run-2", len(PARENTS))):
        again = subprocess.run(
            [str(LEDGERGC), "restore", "--run", run, "--json"],
            env={**base, **pulsar.to_env()},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert again.returncode == 0, (again.stdout, again.stderr)
        twice = json.loads(again.stdout)
        assert twice["objects_restored"] == 0 and twice["already_restored"] == count, twice
    assert snapshot(zk_client, roots) == before
    restored = [r for r in AuditLog(pulsar).read() if r["operation"] == "restore"]
    assert sum(1 for r in restored if r["status"] == "restored") == len(RECORDS) + 1

    # A znode of that path holding other bytes is not this run's: never replaced.
    zk_client.set(f"/admin/local-policies/{NS}", b'{"other":1}')
    third = restore_run(endpoints, "run-1")
    assert third.exit_code == 1
    assert zk_client.get(f"/admin/local-policies/{NS}")[0] == b'{"other":1}'


def test_the_delete_lock_takes_one_lock_per_other_ensemble(
    pulsar: Settings, private_settings: Settings
) -> None:
    """BookKeeper and the configuration store on one other ensemble: one lock there (its
    fence serves both); the configuration store alone: its own lock, at its own path."""
    local, other = zk_endpoint(pulsar), zk_endpoint(private_settings)
    remote = KazooClient(hosts=private_settings.zk_hosts)
    remote.start(timeout=15)
    try:
        with delete_lock(local, "both", 10, bookkeeper=other, config_store=other) as lock:
            assert lock.fence_for(other) is lock.fence_for(other)
            assert lock.fence_for(other).path.startswith(BOOKKEEPER_LOCK_PATH)
            assert not remote.exists(CONFIG_STORE_LOCK_PATH) or not remote.get_children(
                CONFIG_STORE_LOCK_PATH
            )
        with delete_lock(local, "config", 10, config_store=other) as lock:
            fence = lock.fence_for(other)
            assert fence.path.startswith(CONFIG_STORE_LOCK_PATH)
            assert remote.exists(fence.path)
            assert lock.fence_for(local).hosts == local.hosts
        with delete_lock(local, "same", 10, config_store=local) as lock:
            assert lock.fence_for(local) is lock.fence
    finally:
        remote.stop()
        remote.close()


def test_a_leftover_younger_than_retention_waits_and_a_v1_schema_key_is_its_namespaces(
    pulsar: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    """Retention on ZooKeeper's clock (the newest znode's mtime); and ``p/ns`` of a v1
    namespace ``p/c/ns`` (Pulsar keys a v1 topic's schema without its cluster) is that
    namespace's while its policies exist: kept."""
    plant_namespace(cluster)
    day = 24 * 3600
    endpoints = resolve(pulsar.with_overrides(retention_seconds=day))
    waiting = delete(endpoints, [entry(LOCAL, NS, PM_DELETED_NAMESPACE)], "run-1")
    assert [r.action for r in waiting] == [outcomes.WAITING], waiting
    newest = max(zk_client.exists(p).mtime for p in RECORDS + PARENTS)
    assert waiting[0].until_ms == newest + day * 1000
    assert exists(zk_client, RECORDS) == RECORDS

    tenant(zk_client, "prop")
    zk_client.create("/admin/policies/prop/us-east/legacy", b"{}", makepath=True)
    cluster.schema("prop/legacy/orders", [(0, 31)])
    kept = delete(resolve(pulsar), [entry(LOCAL, "prop/legacy", PM_DELETED_NAMESPACE)], "run-2")
    assert [r.action for r in kept] == [outcomes.CORRECTED], kept
    assert "prop/us-east/legacy" in kept[0].reason
    assert zk_client.exists("/schemas/prop/legacy/orders")


def test_a_v2_namespace_named_like_a_v1_cluster_never_takes_the_v1_namespaces_below_it(
    pulsar: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    """``acme/us-east`` was a v2 namespace and is also the v1 cluster of
    ``acme/us-east/legacy``; both deleted (while the v1 namespace's policies exist, so do
    the v2 one's parent node, and the survey's rules keep both). The v2 namespace's
    leftover is its own znodes: the v1 namespace's below its nodes are a leftover of
    their own (registered, re-checked and audited as that one), never entered."""
    v2, v1 = "acme/us-east", "acme/us-east/legacy"
    plant_namespace(cluster, v2)
    plant_namespace(cluster, v1)
    theirs = [
        f"/managed-ledgers/{v1}/persistent/orders",
        f"/managed-ledgers/{v1}/persistent/orders/sub",
        f"/loadbalance/bundle-data/{v1}/{BUNDLE}",
        f"/admin/local-policies/{v1}",
        f"/namespace/{v1}",
    ]
    results = delete(resolve(pulsar), [entry(LOCAL, v2, PM_DELETED_NAMESPACE)], "run-1")
    assert [r.action for r in results] == [outcomes.DELETED], results
    assert exists(zk_client, theirs) == theirs
    gone = {d["znode"] for d in results[0].deleted_ledgers}
    assert not any(v1 in path for path in gone), gone
    assert f"/managed-ledgers/{v2}/persistent/orders" in gone
    # Its local policies hold the v1 namespace's below them: kept, as its parents are.
    assert zk_client.exists(f"/admin/local-policies/{v2}")
    # Later cycles: its parents go but those holding the v1 namespace's nodes; then
    # nothing of it is left to remove but those: held.
    again = delete(resolve(pulsar), [entry(LOCAL, v2, PM_DELETED_NAMESPACE)], "run-2")
    assert [r.action for r in again] == [outcomes.DELETED], again
    assert exists(zk_client, theirs) == theirs, again
    assert not zk_client.exists(f"/managed-ledgers/{v2}/persistent")
    last = delete(resolve(pulsar), [entry(LOCAL, v2, PM_DELETED_NAMESPACE)], "run-3")
    assert [r.action for r in last] == [outcomes.HELD], last
    assert not any(v1 in r["znode"] for r in AuditLog(pulsar).read())


# --- through the engine's phase 3 --------------------------------------------------------


def register(pulsar: Settings, run_id: str, entries: list[RegistryEntry]) -> None:
    """The registry as phases 1 and 2 of run ``run_id`` leave it: ``entries`` seen by
    its scan (the survey's part is another helper's), the scan applied."""
    endpoints = resolve(pulsar)
    registry = OrphanRegistry(endpoints.state)
    with registry.transaction() as txn:
        number = txn.record_scan(run_id, int(time.time() * 1000), {})
        txn.upsert_many(
            [dataclasses.replace(e, first_scan=number, last_scan=number) for e in entries]
        )
    RunSteps(endpoints.state, run_id).write_record(
        PHASES, PhasesRecord(applied=True, scan_number=number)
    )


def _stopped(pid: int) -> bool:
    """Whether the process is stopped by a signal (state T in /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def test_the_engines_delete_step_removes_a_leftover_and_closes_its_entry(
    pulsar: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    plant_namespace(cluster)
    settings = pulsar.with_overrides(grace_seconds=0, orphan_max_fraction=1.0)
    register(settings, "a", [entry(LOCAL, NS, PM_DELETED_NAMESPACE)])
    record = step_delete(resolve(settings), "a")
    assert [r.action for r in record.results] == [outcomes.DELETED], record
    assert exists(zk_client, RECORDS) == []
    assert OrphanRegistry(resolve(settings).state).entries() == {}
    report = step_report(resolve(settings), "a").to_dict()
    assert [d["prefix"] for d in report["deleted"]] == [target_of(LOCAL, NS)], report["deleted"]
    assert report["phases"]["deleted"]["by_class"][PM_DELETED_NAMESPACE]["count"] == 1
    assert report["deleted"][0]["objects"] == len(RECORDS)  # znodes ZooKeeper removed
    assert report["bytes_reclaimed"] == report["deleted"][0]["bytes"] > 0  # their data


def test_a_queued_metadata_delete_of_a_cycle_frozen_by_sigstop_is_refused_by_zookeeper(
    pulsar: Settings, cluster: PulsarCluster, zk_client: KazooClient, tmp_path: Path
) -> None:
    """The whole process frozen (SIGSTOP: no listener, no ping) right after the
    write-ahead record of its first metadata delete; its lock session expires, another
    cycle takes the lock and the namespace is created again (policies written); then the
    first one wakes up and sends its delete: ZooKeeper refuses it (the fencing multi)."""
    plant_namespace(cluster)
    settings = pulsar.with_overrides(
        grace_seconds=0, orphan_max_fraction=1.0, orphan_lock_wait_seconds=60
    )
    register(settings, "a", [entry(LOCAL, NS, PM_DELETED_NAMESPACE)])
    session_file = tmp_path / "lock-session.json"
    script = Path(__file__).with_name("frozen_delete.py")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGERGC_", "AWS_"))}
    child = subprocess.Popen(
        [sys.executable, str(script), "a", "0", str(session_file)],
        env={**base, **settings.to_env()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not _stopped(child.pid):
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the delete step never reached its delete"
            time.sleep(0.05)
        session_id, password = json.loads(session_file.read_text())
        twin = KazooClient(hosts=pulsar.zk_hosts, client_id=(session_id, bytes.fromhex(password)))
        twin.start(timeout=15)
        twin.stop()
        twin.close()
        with delete_lock(zk_endpoint(pulsar), "b", 60):  # another cycle takes the lock
            zk_client.create(f"/admin/policies/{NS}", b"{}")  # and the namespace is back
            os.kill(child.pid, signal.SIGCONT)
            out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
    assert exists(zk_client, RECORDS) == RECORDS, f"deleted: {out} {err[-2000:]}"
    records = AuditLog(pulsar).read(run_id="a")
    assert [r["status"] for r in records] == [DELETING, NOT_DELETED], records
    assert records[0]["znode"] == RECORDS[0]
    assert json.loads(out.strip().splitlines()[-1])["error"] == "DeleteLockLost", out


def test_the_engines_delete_step_takes_the_config_stores_lock_on_another_ensemble(
    pulsar: Settings,
    cluster: PulsarCluster,
    private_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``cycle.step_delete`` holds a lock in the configuration store's ensemble too, and
    the source's deletes there are fenced by it (``fence_for(endpoints.configuration)``)."""
    settings = pulsar.with_overrides(grace_seconds=0, orphan_max_fraction=1.0)
    config = zk_endpoint(private_settings)
    endpoints = dataclasses.replace(resolve(settings), config_store=config)
    meta = "/admin/partitioned-topics/gone/ns/persistent/a"
    remote = KazooClient(hosts=private_settings.zk_hosts)
    remote.start(timeout=15)
    try:
        tenant(remote, "acme")
        remote.create(meta, b'{"partitions":2}', makepath=True)
        register(settings, "a", [entry(CONFIG, "gone", PM_DELETED_TENANT)])
        fences: list[tuple[str, str]] = []
        real = fencing.Fence.delete

        def seen(self: fencing.Fence, znode: str, version: int) -> Any:
            fences.append((self.hosts, self.path))
            return real(self, znode, version)

        monkeypatch.setattr(fencing.Fence, "delete", seen)
        record = step_delete(endpoints, "a")
        assert [r.action for r in record.results] == [outcomes.DELETED], record
        assert not remote.exists(meta)
        assert [(h, p.rsplit("/", 1)[0]) for h, p in fences] == [
            (config.hosts, CONFIG_STORE_LOCK_PATH)
        ]
    finally:
        remote.stop()
        remote.close()


def test_a_delete_zookeeper_refuses_for_want_of_permission_is_closed_and_kept(
    pulsar: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    """No DELETE on a record's parent (an ACL ledger-gc's identity lacks): ZooKeeper
    refuses, the write-ahead record is closed ``not-deleted`` naming the permission, and
    the rest of the leftover is kept."""
    plant_namespace(cluster)
    parent = f"/managed-ledgers/{TOPIC}"  # the cursor's
    no_delete = Permissions.ALL & ~Permissions.DELETE
    zk_client.set_acls(parent, [ACL(no_delete, Id("world", "anyone"))])
    results = delete(resolve(pulsar), [entry(LOCAL, NS, PM_DELETED_NAMESPACE)], "run-1")
    assert [r.action for r in results] == [outcomes.FAILED], results
    assert "DELETE" in results[0].reason, results[0].reason
    assert exists(zk_client, RECORDS) == RECORDS
    records = AuditLog(pulsar).read(run_id="run-1")
    assert [r["status"] for r in records] == [DELETING, NOT_DELETED], records


def test_a_restore_whose_lock_session_expires_creates_nothing_more(
    pulsar: Settings,
    cluster: PulsarCluster,
    zk_client: KazooClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The restore's creates are fenced like the deletes: its lock session expired
    after its first write-ahead record, the create it then sends is refused."""
    plant_namespace(cluster)
    endpoints = resolve(pulsar)
    assert [
        r.action for r in delete(endpoints, [entry(LOCAL, NS, PM_DELETED_NAMESPACE)], "run-1")
    ] == [outcomes.DELETED]
    locks: list[delete_lock_module.DeleteLock] = []
    real_init = delete_lock_module.DeleteLock.__init__

    def remember(self: delete_lock_module.DeleteLock, *args: Any, **kw: Any) -> None:
        real_init(self, *args, **kw)
        locks.append(self)

    real_append = AuditLog.append

    def append(self: AuditLog, records: Any) -> int:
        records = list(records)
        written = real_append(self, records)
        if any(r.status == "restoring" for r in records) and locks and not expired:
            expired.append(True)
            expire(locks[0]._client, pulsar.zk_hosts)
            time.sleep(1)
        return written

    expired: list[bool] = []
    monkeypatch.setattr(delete_lock_module.DeleteLock, "__init__", remember)
    monkeypatch.setattr(AuditLog, "append", append)
    report = restore_run(endpoints, "run-1")
    monkeypatch.undo()
    assert report.exit_code == 1, report.to_dict()
    assert exists(zk_client, RECORDS) == []
    errors = [p.error for p in report.prefixes if p.error]
    assert len(errors) == len(RECORDS) and "delete lock" in errors[0], errors
    # Run again (the lock is free): everything comes back.
    again = restore_run(endpoints, "run-1").to_dict()
    assert again["exit_code"] == 0 and again["objects_restored"] == len(RECORDS), again


def test_a_deleted_tenants_own_path_nodes_go_once_no_namespace_is_below_them(
    pulsar: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    """``gone`` (no tenant): its namespace's leftover first (its own unit), then the
    tenant's empty path nodes; never while a namespace is below them."""
    plant_namespace(cluster, "gone/ns")
    endpoints = resolve(pulsar)
    tenant_unit = entry(LOCAL, "gone", PM_DELETED_TENANT)
    held = delete(endpoints, [tenant_unit], "run-1")
    assert [r.action for r in held] == [outcomes.HELD], held
    assert "gone/ns" in held[0].reason
    namespace = entry(LOCAL, "gone/ns", PM_DELETED_TENANT)
    for run in ("run-2", "run-3"):  # records, then parents
        assert [r.action for r in delete(endpoints, [namespace], run)] == [outcomes.DELETED]
    tenant_nodes = [
        "/managed-ledgers/gone",
        "/schemas/gone",
        "/admin/local-policies/gone",
        "/namespace/gone",
        "/loadbalance/bundle-data/gone",
    ]
    assert exists(zk_client, tenant_nodes) == tenant_nodes
    done = delete(endpoints, [tenant_unit], "run-4")
    assert [r.action for r in done] == [outcomes.DELETED], done
    assert done[0].objects == len(tenant_nodes)
    assert exists(zk_client, tenant_nodes) == []
    assert zk_client.exists("/managed-ledgers/acme/live")


def test_a_record_someone_else_removes_mid_delete_stops_the_leftover_and_counts_what_went(
    pulsar: Settings,
    cluster: PulsarCluster,
    zk_client: KazooClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plant_namespace(cluster)
    removed = f"/admin/local-policies/{NS}"  # Pulsar finishing its own delete, say
    real = fencing.Fence.delete

    def then_remove(self: fencing.Fence, znode: str, version: int) -> Any:
        outcome = real(self, znode, version)
        if zk_client.exists(removed):
            zk_client.delete(removed)
        return outcome

    monkeypatch.setattr(fencing.Fence, "delete", then_remove)
    results = delete(resolve(pulsar), [entry(LOCAL, NS, PM_DELETED_NAMESPACE)], "run-1")
    assert [r.action for r in results] == [outcomes.DELETED], results
    assert results[0].objects == 3 and "vanished" in results[0].reason, results
    assert exists(zk_client, RECORDS) == [f"/schemas/{NS}/orders"]
    statuses = [r["status"] for r in AuditLog(pulsar).read(run_id="run-1")]
    assert statuses == [DELETING, DELETED] * 3, statuses


def test_a_v1_leftover_never_takes_the_schema_of_a_live_v2_namespaces_topic_of_its_name(
    pulsar: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    """Pulsar keys a v1 topic's schema without its cluster (``p/ns/<topic>``), so
    ``/schemas/acme/us-east/legacy`` is never the v1 namespace ``acme/us-east/legacy``'s:
    it is the schema of topic ``legacy`` of the live v2 namespace ``acme/us-east`` (named
    like the v1 cluster). The deleted v1 namespace's leftover goes; that schema, and the
    ledger it names, stay."""
    v2, v1 = "acme/us-east", "acme/us-east/legacy"
    cluster.policies(v2)
    cluster.managed_ledger(f"{v2}/persistent/legacy", [41])
    cluster.schema(f"{v2}/legacy", [(0, 42)])
    plant_namespace(cluster, v1)
    live_schema = f"/schemas/{v2}/legacy"
    results = delete(resolve(pulsar), [entry(LOCAL, v1, PM_DELETED_NAMESPACE)], "run-1")
    assert [r.action for r in results] == [outcomes.DELETED], results
    assert zk_client.exists(live_schema), results[0].deleted_ledgers
    assert zk_client.exists(f"/managed-ledgers/{v2}/persistent/legacy")
    assert not zk_client.exists(f"/managed-ledgers/{v1}/persistent/orders")
    assert 42 not in handed_off(resolve(pulsar).state)
    assert not any(r["znode"] == live_schema for r in AuditLog(pulsar).read())


@pytest.mark.parametrize("level", ["0x00000000_0x40000000", "persistent"])
def test_a_v1_name_that_is_a_live_v2_namespaces_own_node_is_kept(
    pulsar: Settings, cluster: PulsarCluster, zk_client: KazooClient, level: str
) -> None:
    """Below ``/loadbalance/bundle-data/acme/us-east`` lie the bundles of the live v2
    namespace ``acme/us-east`` (named like a v1 cluster) beside the deleted v1 namespace
    ``acme/us-east/legacy``'s node, so a listing of that level reads each bundle as a v1
    namespace ``acme/us-east/<range>``; and ``/managed-ledgers/acme/us-east/persistent``
    is both the v2 namespace's domain and a v1 namespace ``persistent``'s node. No such
    name's leftover is deleted while the v2 namespace lives: its znodes are that
    namespace's own (a bundle not owned right now, a topic named ``persistent``)."""
    v2 = "acme/us-east"
    cluster.policies(v2)
    bundle = cluster.bundle_data(v2)
    live = [bundle, bundle.replace("/bundle-data/", "/resource-quota/namespace/")]
    zk_client.create(live[1], b'{"msgRateIn":1}', makepath=True)
    cluster.managed_ledger(f"{v2}/persistent/persistent", [51])  # no subscription yet
    live.append(f"/managed-ledgers/{v2}/persistent/persistent")
    plant_namespace(cluster, f"{v2}/legacy")
    name = f"{v2}/{level}"
    results = delete(resolve(pulsar), [entry(LOCAL, name, PM_DELETED_NAMESPACE)], "run-1")
    assert exists(zk_client, live) == live, results
    assert [r.action for r in results] == [outcomes.CORRECTED], results
    assert v2 in results[0].reason
    assert not any(r["status"] == DELETING for r in AuditLog(pulsar).read())


def test_a_restore_never_puts_a_removed_cursor_under_a_topic_recreated_since(
    pulsar: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    """The namespace was created again and its topic ``orders`` with it (a managed
    ledger of other bytes, ledger 21): restoring the run that removed the old topic
    replaces nothing, and does not put the old topic's cursor (its mark-delete position
    in ledgers that topic never had, its cursor ledger handed to BookKeeper) below the
    new live topic either; what had no such parent comes back."""
    plant_namespace(cluster)
    endpoints = resolve(pulsar)
    leftover = entry(LOCAL, NS, PM_DELETED_NAMESPACE)
    assert [r.action for r in delete(endpoints, [leftover], "run-1")] == [outcomes.DELETED]
    cluster.policies(NS)
    cluster.managed_ledger(TOPIC, [21])
    new_topic = zk_client.get(f"/managed-ledgers/{TOPIC}")[0]
    report = restore_run(endpoints, "run-1")
    assert report.exit_code == 1, report.to_dict()
    assert zk_client.get(f"/managed-ledgers/{TOPIC}")[0] == new_topic
    assert not zk_client.exists(f"/managed-ledgers/{TOPIC}/sub"), report.to_dict()
    errors = [p.error for p in report.prefixes if p.error and p.bucket.endswith("/orders/sub")]
    assert errors and f"removed /managed-ledgers/{TOPIC} too" in errors[0], report.to_dict()
    assert zk_client.exists(f"/admin/local-policies/{NS}")


def test_an_operator_restores_and_audits_a_metadata_run_by_the_command(
    pulsar: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    """Review 3 of issue 34, as an operator meets it: ``ledgergc audit`` lists each
    removed znode with its store; ``restore --dry-run`` says which znodes it would
    re-create and creates none; ``restore`` says which it re-created (text and
    ``--json``); a run id the audit log does not know is one line, exit 2."""
    plant_namespace(cluster)
    endpoints = resolve(pulsar)
    leftover = entry(LOCAL, NS, PM_DELETED_NAMESPACE)
    assert [r.action for r in delete(endpoints, [leftover], "run-1")] == [outcomes.DELETED]
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGERGC_", "AWS_"))}

    def ledgergc(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(LEDGERGC), *args],
            env={**base, **pulsar.to_env()},
            capture_output=True,
            text=True,
            timeout=300,
        )

    audit = ledgergc("audit", "--run", "run-1", "--status", "deleted")
    assert audit.returncode == 0, audit.stderr
    for znode in RECORDS:
        assert f"local:{znode}" in audit.stdout, audit.stdout

    dry = ledgergc("restore", "--run", "run-1", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert exists(zk_client, RECORDS) == []
    assert "dry run: nothing changed" in dry.stdout, dry.stdout
    for znode in RECORDS:
        lines = dry.stdout.splitlines()
        assert any(znode in line and "would restore" in line for line in lines), dry.stdout
    assert "bucket" not in dry.stdout and "objects" not in dry.stdout, dry.stdout

    done = ledgergc("restore", "--run", "run-1", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert sorted(p["znode"] for p in report["prefixes"]) == sorted(RECORDS), report
    assert {p["store"] for p in report["prefixes"]} == {LOCAL}, report
    assert exists(zk_client, RECORDS) == RECORDS
    again = ledgergc("restore", "--run", "run-1")
    assert again.returncode == 0, again.stderr
    for znode in RECORDS:
        lines = again.stdout.splitlines()
        assert any(znode in line and "already" in line for line in lines), again.stdout

    wrong = ledgergc("restore", "--run", "run-nope")
    assert wrong.returncode == 2, (wrong.stdout, wrong.stderr)
    [line] = wrong.stderr.strip().splitlines()
    assert line.startswith("ledgergc: error: ") and "run-nope" in line, line
