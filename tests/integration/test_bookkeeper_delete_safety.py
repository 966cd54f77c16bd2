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
from ledger_gc.config.edge import bookkeeper_endpoint, resolve, zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.delete_lock import DELETE_LOCK_PATH
from ledger_gc.restore.restoring import restore_run
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

    report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0)).to_dict()
    report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0.1)).to_dict()

    assert report["deleted"] == []
    for lid in (young_cursor_ledger, young_leak, *live):
        assert cluster.client.exists(cluster.path(lid)), lid
    # A day on, on ZooKeeper's clock too, they are old enough.
    report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
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
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    real = references.read_live_references

    def and_rewrite(
        store: Any, ml_name: str | None, schema_id: str | None, policies: Any = None
    ) -> Any:
        refs = real(store, ml_name, schema_id, policies=policies)
        cluster.close(leaked, length=2048)  # a new version of the record
        return refs

    monkeypatch.setattr(references, "read_live_references", and_rewrite)
    run = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1))
    monkeypatch.undo()
    assert cluster.client.exists(cluster.path(leaked))
    assert run.to_dict()["deleted"] == []
    statuses = [r["status"] for r in AuditLog(pulsar).read(run_id=run.run_id)]
    assert statuses == [DELETING, NOT_DELETED], statuses
    closing = AuditLog(pulsar).read(run_id=run.run_id)[-1]
    assert "version" in closing["reason"] and closing["ledger_id"] == leaked

    dry = restore_run(resolve(pulsar), run.run_id, dry_run=True).to_dict()
    assert dry["prefixes"] == [] and dry["errors"] == 0, dry
    cluster.client.delete(cluster.path(leaked))  # an operator's bookkeeper shell, later
    done = restore_run(resolve(pulsar), run.run_id).to_dict()
    assert done["objects_restored"] == 0 and done["errors"] == 0, done
    assert not cluster.client.exists(cluster.path(leaked))


def test_restore_run_twice_is_done_the_second_time(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    leaked = [cluster.ledger(ml_tags(TOPIC)) for _ in range(3)]
    cluster.managed_ledger(TOPIC, [cluster.ledger(ml_tags(TOPIC)) for _ in range(2)])
    before = {lid: cluster.client.get(cluster.path(lid))[0] for lid in leaked}
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    run = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).run_id
    assert not any(cluster.client.exists(cluster.path(lid)) for lid in leaked)

    first = restore_run(resolve(pulsar), run)
    assert first.to_dict()["objects_restored"] == 3 and first.exit_code == 0
    second = restore_run(resolve(pulsar), run)
    assert second.exit_code == 0, second.to_dict()
    again = second.to_dict()
    assert again["objects_restored"] == 0 and again["already_restored"] == 3, again
    assert {lid: cluster.client.get(cluster.path(lid))[0] for lid in leaked} == before
    # Nothing was done the second time, so nothing is audited as restored twice.
    restores = [r for r in AuditLog(pulsar).read() if r["operation"] == "restore"]
    assert sum(1 for r in restores if r["status"] == "restored") == 3

    # A znode of that path holding other bytes is not this run's ledger: never replaced.
    cluster.client.set(cluster.path(leaked[0]), b"BookieMetadataFormatVersion\t3\n\x00")
    third = restore_run(resolve(pulsar), run)
    assert third.exit_code == 1
    assert third.to_dict()["errors"] == 1


def test_a_deleted_record_stays_audited_as_deleted(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """The plain path, for contrast: deleting, then deleted, nothing closed twice."""
    leaked = cluster.ledger(ml_tags(TOPIC))
    cluster.managed_ledger(TOPIC, [cluster.ledger(ml_tags(TOPIC)) for _ in range(2)])
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    run = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1))
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
    split = pulsar.with_overrides(bk_zk_address=pulsar.zk_hosts + "/bk")
    pulsar_side = PulsarCluster(zk_client)
    pulsar_side.namespace(NS)
    with session(bookkeeper_endpoint(split).zk) as bk_client:
        bk = PulsarCluster(bk_client).init()
        leaked = [bk.ledger(ml_tags(TOPIC)) for _ in range(2)]
        pulsar_side.managed_ledger(TOPIC, [bk.ledger(ml_tags(TOPIC)) for _ in range(2)])
        run_orphan_cycle(resolve(split), spark=spark, **later(0))
        run = run_orphan_cycle(resolve(split), spark=spark, **later(DAY_H + 1))
        assert {d["ledger_id"] for d in run.to_dict()["deleted"]} == set(leaked)
        assert not any(bk_client.exists(bk.path(lid)) for lid in leaked)
        # Its lock was taken in BookKeeper's chroot, and released with the cycle's.
        assert bk_client.exists(BOOKKEEPER_LOCK_PATH) is not None
        assert bk_client.get_children(BOOKKEEPER_LOCK_PATH) == []
        assert restore_run(resolve(split), run.run_id).to_dict()["objects_restored"] == 2

        with delete_lock(
            zk_endpoint(split), "a", 10, bookkeeper=bookkeeper_endpoint(split).zk
        ) as lock:
            fence = lock.fence_for(bookkeeper_endpoint(split).zk)
            assert fence.path.startswith(BOOKKEEPER_LOCK_PATH + "/")
            version = bk_client.exists(bk.path(leaked[0])).version
            expire_and_reconnect(fence.client, split.bk_zk_hosts or "")
            # Sent on kazoo's new session: only the check of the old node refuses it.
            assert fence.delete(bk.path(leaked[0]), version) is FencedOutcome.FENCE_LOST
            assert lock.should_stop()
        assert bk_client.exists(bk.path(leaked[0]))


def expire_and_reconnect(client: KazooClient, hosts: str) -> None:
    """Expire ``client``'s session on the server (closed from a second client with its
    id and password), and wait until kazoo has opened a new one: a request sent now goes
    on that new session, where nothing but a fence stops it."""
    old = client.client_id[0]
    twin = KazooClient(hosts=hosts, client_id=client.client_id)
    twin.start(timeout=15)
    twin.stop()
    twin.close()
    deadline = time.monotonic() + 30
    while not (client.connected and client.client_id[0] != old):
        assert time.monotonic() < deadline, "kazoo did not open a new session"
        time.sleep(0.05)


def test_a_fenced_delete_sent_on_kazoos_new_session_is_refused(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    """kazoo opens a new session after an expiry and sends what it is asked on it; an
    unfenced delete would be applied there."""
    from ledger_gc.metadata.fencing import FencedOutcome
    from ledger_gc.orphans.delete_lock import delete_lock

    leaked = cluster.ledger(ml_tags(TOPIC))
    version = cluster.client.exists(cluster.path(leaked)).version
    with delete_lock(zk_endpoint(pulsar), "a", 10) as lock:
        expire_and_reconnect(lock.fence.client, pulsar.zk_hosts)
        assert lock.fence.delete(cluster.path(leaked), version) is FencedOutcome.FENCE_LOST
        assert lock.should_stop()
    assert cluster.client.exists(cluster.path(leaked))


def _announcing(
    monkeypatch: pytest.MonkeyPatch, then: Callable[[int], None]
) -> Callable[[], list[Any]]:
    """Patch the audit log so that ``then(n)`` runs after the n-th write-ahead record of
    a BookKeeper delete (n from 1); returns the delete locks taken since."""
    from ledger_gc.orphans import delete_lock as lock_module
    from ledger_gc.rules.bookkeeper.classify import BK_ORPHAN_CLASSES

    locks: list[Any] = []
    real_acquire = lock_module.DeleteLock.acquire
    real_append = AuditLog.append
    seen: list[int] = []

    def acquire(self: Any, wait_seconds: float) -> bool:
        locks.append(self)
        return bool(real_acquire(self, wait_seconds))

    def append(self: AuditLog, records: Any) -> int:
        records = list(records)
        written = real_append(self, records)
        if any(r.status == DELETING and r.target_class in BK_ORPHAN_CLASSES for r in records):
            seen.append(1)
            then(len(seen))
        return written

    monkeypatch.setattr(lock_module.DeleteLock, "acquire", acquire)
    monkeypatch.setattr(AuditLog, "append", append)
    return lambda: locks


def test_a_retried_delete_step_counts_and_restores_what_the_run_deleted(
    pulsar: Settings,
    cluster: PulsarCluster,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The DAG retries its delete task with the same run id. Attempt 1 deletes one
    ledger, then loses its lock after the second's write-ahead record (not deleted);
    attempt 2 deletes the second. The run's report counts both, and restore brings both
    back (the second's not-deleted record closed only attempt 1's delete)."""
    from ledger_gc.orphans import cycle
    from ledger_gc.orphans.options import CycleOptions
    from ledger_gc.orphans.report import build_report

    quick = pulsar.with_overrides(orphan_lock_wait_seconds=30)
    leaked = [cluster.ledger(ml_tags(TOPIC)) for _ in range(2)]
    cluster.managed_ledger(TOPIC, [cluster.ledger(ml_tags(TOPIC)) for _ in range(2)])
    run_orphan_cycle(resolve(quick), spark=spark, **later(0))
    world = later(DAY_H + 1)
    cycle.step_survey(resolve(quick), "r", spark, **world)
    cycle.step_phases(resolve(quick), "r", clock=world["clock"])

    def lose_the_lock_at_the_second(n: int) -> None:
        if n == 2:
            expire_and_reconnect(locks()[-1].fence.client, quick.zk_hosts)

    locks = _announcing(monkeypatch, lose_the_lock_at_the_second)
    with pytest.raises(cycle.DeleteLockLost):
        cycle.step_delete(resolve(quick), "r", **world)
    monkeypatch.undo()
    assert sum(1 for lid in leaked if cluster.client.exists(cluster.path(lid))) == 1
    cycle.step_delete(resolve(quick), "r", **world)  # Airflow's retry
    assert not any(cluster.client.exists(cluster.path(lid)) for lid in leaked)

    statuses = [r["status"] for r in AuditLog(quick).read(run_id="r")]
    assert statuses == [DELETING, DELETED, DELETING, NOT_DELETED, DELETING, DELETED], statuses
    report = build_report(
        resolve(quick), "r", options=CycleOptions(), now_ms=world["clock"]()
    ).to_dict()
    assert {d["ledger_id"] for d in report["deleted"]} == set(leaked)
    assert report["bookkeeper"]["deleted"] == 2 and report["bytes_reclaimed"] == 2 * 1024
    dry = restore_run(resolve(quick), "r", dry_run=True).to_dict()
    assert sorted(p["ledger_id"] for p in dry["prefixes"]) == sorted(leaked), dry


def test_a_busy_bookkeeper_lock_leaves_the_work_pending_and_deletes_nothing(
    pulsar: Settings,
    zk_client: KazooClient,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
) -> None:
    """Two Pulsar clusters share a BookKeeper in its own chroot; the other's cycle holds
    the lock there. A lock that cannot be had is no error: nothing is deleted (the
    BookKeeper lock is taken before any source deletes anything), the work waits."""
    from ledger_gc.metadata.zk_client import session
    from ledger_gc.orphans.delete_lock import BOOKKEEPER_LOCK_PATH, delete_lock

    zk_client.ensure_path("/bk")
    split = pulsar.with_overrides(bk_zk_address=pulsar.zk_hosts + "/bk", orphan_lock_wait_seconds=1)
    PulsarCluster(zk_client).namespace(NS)
    with session(bookkeeper_endpoint(split).zk) as bk_client:
        bk = PulsarCluster(bk_client).init()
        leaked = bk.ledger(ml_tags(TOPIC))
        PulsarCluster(zk_client).managed_ledger(
            TOPIC, [bk.ledger(ml_tags(TOPIC)) for _ in range(2)]
        )
        run_orphan_cycle(resolve(split), spark=spark, **later(0))
        with delete_lock(bookkeeper_endpoint(split).zk, "other", 5, path=BOOKKEEPER_LOCK_PATH):
            report = run_orphan_cycle(resolve(split), spark=spark, **later(DAY_H + 1)).to_dict()
        assert report["status"] == "ok" and report["pending"], report["delete_skipped"]
        assert BOOKKEEPER_LOCK_PATH in report["delete_skipped"]
        assert report["deleted"] == []
        assert bk_client.exists(bk.path(leaked))
        report = run_orphan_cycle(resolve(split), spark=spark, **later(DAY_H + 2)).to_dict()
        assert [d["ledger_id"] for d in report["deleted"]] == [leaked]


def test_a_restore_beside_a_cycle_acts_on_the_records_as_they_are_once_it_has_the_lock(
    pulsar: Settings,
    cluster: PulsarCluster,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An operator runs ``restore --run R`` while R is still deleting. Meanwhile Pulsar
    deletes the ledger itself, so R's delete finds it gone and closes its record. The
    restore waited for the lock; it must not re-create the ledger from the stale bytes
    it saw announced before."""
    import threading

    from ledger_gc.orphans import cycle

    quick = pulsar.with_overrides(orphan_lock_wait_seconds=60)
    leaked = cluster.ledger(ml_tags(TOPIC))
    cluster.managed_ledger(TOPIC, [cluster.ledger(ml_tags(TOPIC)) for _ in range(2)])
    run_orphan_cycle(resolve(quick), spark=spark, **later(0))
    world = later(DAY_H + 1)
    cycle.step_survey(resolve(quick), "r", spark, **world)
    cycle.step_phases(resolve(quick), "r", clock=world["clock"])
    restoring, done = threading.Event(), threading.Event()
    restored: dict[str, Any] = {}
    waiting: list[str] = []  # the lock's contenders while the restore waits

    def operator() -> None:
        restoring.set()
        try:
            restored.update(restore_run(resolve(quick), "r").to_dict())
        except Exception as exc:
            restored["exception"] = repr(exc)
        done.set()

    def restore_meanwhile(n: int) -> None:
        threading.Thread(target=operator, daemon=True).start()
        assert restoring.wait(10)
        # The restore waits for the lock: its contender node (named by the restore's id)
        # is queued behind the run's (seen, not slept on).
        contenders = cluster.client.Lock(DELETE_LOCK_PATH).contenders
        deadline = time.monotonic() + 30
        while len(contenders()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        waiting.extend(contenders())
        cluster.client.delete(cluster.path(leaked))  # Pulsar's own LedgerDeleteOp

    _announcing(monkeypatch, restore_meanwhile)
    cycle.step_delete(resolve(quick), "r", **world)
    monkeypatch.undo()
    assert done.wait(60)
    assert "exception" not in restored, restored
    assert len(waiting) == 2 and waiting[0] == "r" and waiting[1] == restored["run_id"]
    statuses = [r["status"] for r in AuditLog(quick).read(run_id="r")]
    assert statuses == [DELETING, NOT_DELETED], statuses
    assert restored["objects_restored"] == 0 and restored["errors"] == 0, restored
    assert not cluster.client.exists(cluster.path(leaked))
