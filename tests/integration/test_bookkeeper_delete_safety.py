"""A BookKeeper delete cannot be undone after the bookies' next garbage collection: these
tests try to make one remove a ledger Pulsar uses, or leave the audit log saying
something other than what happened (real ZooKeeper; issue 27).

* a broker's clock days behind must not age a ledger ZooKeeper created seconds ago;
* a delete ZooKeeper refuses (the record moved between the re-check and the delete)
  closes its write-ahead audit record as not deleted, so ``restore`` never re-creates
  it from the stale bytes;
* ``restore`` run twice is done the second time, not an error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.audit import DELETED, DELETING, NOT_DELETED, AuditLog
from ledger_gc.orphans import run_orphan_cycle
from ledger_gc.restore.restoring import restore_run
from ledger_gc.settings import Settings
from pulsar_cluster import PulsarCluster, cursor_tags, ml_tags

pytestmark = pytest.mark.spark

NS = "public/default"
TOPIC = f"{NS}/persistent/orders"
DAY_H = 24.0
DAY_MS = 24 * 3600 * 1000


@pytest.fixture
def pulsar(settings: Settings) -> Settings:
    return settings.with_overrides(
        bucket="",
        delete_enabled=True,
        grace_seconds=0,
        retention_seconds=int(DAY_H * 3600),
        orphan_max_fraction=1.0,
    )


@pytest.fixture
def cluster(zk_client: KazooClient) -> PulsarCluster:
    c = PulsarCluster(zk_client).init()
    c.namespace(NS)
    return c


def test_a_broker_clock_days_behind_does_not_age_a_ledger_zookeeper_just_created(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """The record's ctime is the broker's clock; three days behind, a ledger ZooKeeper
    created seconds ago looked three days old and went under one day's retention."""
    behind = int(time.time() * 1000) - 3 * DAY_MS
    young_cursor_ledger = cluster.ledger(cursor_tags(TOPIC, "gone-sub"), ctime_ms=behind)
    young_leak = cluster.ledger(ml_tags(TOPIC), ctime_ms=behind)
    live = [cluster.ledger(ml_tags(TOPIC), ctime_ms=behind) for _ in range(2)]
    cluster.managed_ledger(TOPIC, live)

    report = run_orphan_cycle(pulsar, spark=spark, **later(0)).to_dict()
    report = run_orphan_cycle(pulsar, spark=spark, **later(0.1)).to_dict()

    assert report["deleted"] == []
    for lid in (young_cursor_ledger, young_leak, *live):
        assert cluster.client.exists(cluster.path(lid)), lid
    # A day on, on ZooKeeper's clock too, they are old enough.
    report = run_orphan_cycle(pulsar, spark=spark, **later(DAY_H + 1)).to_dict()
    assert {d["ledger_id"] for d in report["deleted"]} == {young_cursor_ledger, young_leak}


def test_a_delete_zookeeper_refuses_closes_its_audit_record_and_is_never_restored(
    pulsar: Settings,
    cluster: PulsarCluster,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """BookKeeper rewrites the record (an ensemble change) between the re-check and the
    delete: ZooKeeper answers BADVERSION, the ledger stays, and the record written ahead
    says so. Deleted some other way later, it is not re-created from the stale bytes."""
    from ledger_gc.bookkeeper import references

    leaked = cluster.ledger(ml_tags(TOPIC))
    cluster.managed_ledger(TOPIC, [cluster.ledger(ml_tags(TOPIC)) for _ in range(2)])
    run_orphan_cycle(pulsar, spark=spark, **later(0))
    real = references.read_live_references

    def and_rewrite(store: Any, ml_name: str | None, schema_id: str | None) -> Any:
        refs = real(store, ml_name, schema_id)
        cluster.close(leaked, length=2048)  # a new version of the record
        return refs

    monkeypatch.setattr(references, "read_live_references", and_rewrite)
    run = run_orphan_cycle(pulsar, spark=spark, **later(DAY_H + 1))
    monkeypatch.undo()
    assert cluster.client.exists(cluster.path(leaked))
    assert run.to_dict()["deleted"] == []
    statuses = [r["status"] for r in AuditLog(pulsar).read(run_id=run.run_id)]
    assert statuses == [DELETING, NOT_DELETED], statuses
    closing = AuditLog(pulsar).read(run_id=run.run_id)[-1]
    assert "version" in closing["reason"] and closing["ledger_id"] == leaked

    dry = restore_run(pulsar, run.run_id, dry_run=True).to_dict()
    assert dry["prefixes"] == [] and dry["errors"] == 0, dry
    cluster.client.delete(cluster.path(leaked))  # an operator's bookkeeper shell, later
    done = restore_run(pulsar, run.run_id).to_dict()
    assert done["objects_restored"] == 0 and done["errors"] == 0, done
    assert not cluster.client.exists(cluster.path(leaked))


def test_restore_run_twice_is_done_the_second_time(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    leaked = [cluster.ledger(ml_tags(TOPIC)) for _ in range(3)]
    cluster.managed_ledger(TOPIC, [cluster.ledger(ml_tags(TOPIC)) for _ in range(2)])
    before = {lid: cluster.client.get(cluster.path(lid))[0] for lid in leaked}
    run_orphan_cycle(pulsar, spark=spark, **later(0))
    run = run_orphan_cycle(pulsar, spark=spark, **later(DAY_H + 1)).run_id
    assert not any(cluster.client.exists(cluster.path(lid)) for lid in leaked)

    first = restore_run(pulsar, run)
    assert first.to_dict()["objects_restored"] == 3 and first.exit_code == 0
    second = restore_run(pulsar, run)
    assert second.exit_code == 0, second.to_dict()
    again = second.to_dict()
    assert again["objects_restored"] == 0 and again["already_restored"] == 3, again
    assert {lid: cluster.client.get(cluster.path(lid))[0] for lid in leaked} == before
    # Nothing was done the second time, so nothing is audited as restored twice.
    restores = [r for r in AuditLog(pulsar).read() if r["operation"] == "restore"]
    assert sum(1 for r in restores if r["status"] == "restored") == 3

    # A znode of that path holding other bytes is not this run's ledger: never replaced.
    cluster.client.set(cluster.path(leaked[0]), b"BookieMetadataFormatVersion\t3\n\x00")
    third = restore_run(pulsar, run)
    assert third.exit_code == 1
    assert third.to_dict()["errors"] == 1


def test_a_deleted_record_stays_audited_as_deleted(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """The plain path, for contrast: deleting, then deleted, nothing closed twice."""
    leaked = cluster.ledger(ml_tags(TOPIC))
    cluster.managed_ledger(TOPIC, [cluster.ledger(ml_tags(TOPIC)) for _ in range(2)])
    run_orphan_cycle(pulsar, spark=spark, **later(0))
    run = run_orphan_cycle(pulsar, spark=spark, **later(DAY_H + 1))
    statuses = [r["status"] for r in AuditLog(pulsar).read(run_id=run.run_id)]
    assert statuses == [DELETING, DELETED]
    assert not cluster.client.exists(cluster.path(leaked))


def test_bookkeeper_metadata_in_its_own_chroot_is_fenced_by_a_lock_there(
    pulsar: Settings,
    zk_client: KazooClient,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
) -> None:
    """A ``multi`` cannot span two chroots or ensembles: with BookKeeper's metadata apart
    from Pulsar's (LEDGERGC_BK_ZK_HOSTS), its deletes and restores are fenced by a lock
    taken there, after the orphan delete lock. Expired, that lock's node refuses them."""
    from ledger_gc.metadata.fencing import FencedOutcome
    from ledger_gc.metadata.zk_client import session
    from ledger_gc.orphans.delete_lock import BOOKKEEPER_LOCK_PATH, delete_lock

    zk_client.ensure_path("/bk")
    split = pulsar.with_overrides(bk_zk_hosts=pulsar.zk_hosts + "/bk")
    pulsar_side = PulsarCluster(zk_client)
    pulsar_side.namespace(NS)
    with session(split.bookkeeper_settings()) as bk_client:
        bk = PulsarCluster(bk_client).init()
        leaked = [bk.ledger(ml_tags(TOPIC)) for _ in range(2)]
        pulsar_side.managed_ledger(TOPIC, [bk.ledger(ml_tags(TOPIC)) for _ in range(2)])
        run_orphan_cycle(split, spark=spark, **later(0))
        run = run_orphan_cycle(split, spark=spark, **later(DAY_H + 1))
        assert {d["ledger_id"] for d in run.to_dict()["deleted"]} == set(leaked)
        assert not any(bk_client.exists(bk.path(lid)) for lid in leaked)
        # Its lock was taken in BookKeeper's chroot, and released with the cycle's.
        assert bk_client.exists(BOOKKEEPER_LOCK_PATH) is not None
        assert bk_client.get_children(BOOKKEEPER_LOCK_PATH) == []
        assert restore_run(split, run.run_id).to_dict()["objects_restored"] == 2

        with delete_lock(split, "a", 10) as lock:
            fence = lock.fence_for(split.bookkeeper_settings())
            assert fence.path.startswith(BOOKKEEPER_LOCK_PATH + "/")
            version = bk_client.exists(bk.path(leaked[0])).version
            session_id, password = fence.client.client_id
            twin = KazooClient(hosts=split.bk_zk_hosts, client_id=(session_id, password))
            twin.start(timeout=15)
            twin.stop()
            twin.close()
            try:
                outcome = fence.delete(bk.path(leaked[0]), version)
            except Exception as exc:  # the session's own answer: expired, not applied
                outcome = exc
            assert outcome in (FencedOutcome.FENCE_LOST,) or "Unavailable" in type(outcome).__name__
            assert lock.should_stop()
        assert bk_client.exists(bk.path(leaked[0]))
