"""A delete lock lost while it is held stops the deleting cycle (real session expiry).

An operator's bad day: the delete phase freezes past its ZooKeeper session timeout, the
session expires, a second cycle that was waiting takes the lock and deletes, and then
the first one thaws. Without listening to its session, the first would go on: re-check
and audit a ledger the second one already deleted, and send its delete. Here the first
cycle's lock session is expired for real (another client closes it with the same
session id and password, as kazoo's own test harness does) while it is between two
BookKeeper deletes, and the test shows that nothing is deleted or audited twice.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.audit import AuditLog
from ledger_gc.bookkeeper import deleting as bk_deleting
from ledger_gc.orphans import cycle, delete_lock
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.records import DeleteRecord
from ledger_gc.settings import Settings
from pulsar_cluster import PulsarCluster, ml_tags

pytestmark = pytest.mark.spark

TOPIC = "public/default/persistent/orders"
DAY_H = 24.0


def expire(client: KazooClient, hosts: str) -> None:
    """Expire ``client``'s session on the server: close it from a second client."""
    twin = KazooClient(hosts=hosts, client_id=client.client_id)
    twin.start(timeout=15)
    twin.stop()
    twin.close()


def test_a_cycle_whose_lock_session_expires_stops_before_its_next_delete(
    settings: Settings,
    zk_client: KazooClient,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pulsar = settings.with_overrides(
        bucket="",
        delete_enabled=True,
        retention_seconds=0,
        orphan_lock_wait_seconds=60,
        orphan_max_fraction=1.0,
    )
    c = PulsarCluster(zk_client).init()
    c.namespace("public/default")
    leaked = [c.ledger(ml_tags(TOPIC)) for _ in range(5)]
    c.managed_ledger(TOPIC, [c.ledger(ml_tags(TOPIC)) for _ in range(2)])
    run_orphan_cycle(pulsar, spark=spark, **later(0))
    world = later(DAY_H + 1)

    locks: dict[str, delete_lock.DeleteLock] = {}
    real_init = delete_lock.DeleteLock.__init__

    def remember(
        self: delete_lock.DeleteLock, client: KazooClient, hosts: str, run: str, *rest: Any
    ) -> None:
        real_init(self, client, hosts, run, *rest)
        locks[run] = self

    monkeypatch.setattr(delete_lock.DeleteLock, "__init__", remember)
    frozen, thaw = threading.Event(), threading.Event()
    real_verdict = bk_deleting._live_verdict
    calls = Counter[str]()

    def freeze_after_first(settings: Settings, pulsar_store: Any, ledger: Any) -> Any:
        verdict = real_verdict(settings, pulsar_store, ledger)
        name = threading.current_thread().name
        calls[name] += 1
        if name == "cycle-a" and calls[name] == 2:
            frozen.set()  # re-checked its second ledger; about to audit and delete it
            assert thaw.wait(120)
        return verdict

    monkeypatch.setattr(bk_deleting, "_live_verdict", freeze_after_first)
    outcome: dict[str, Any] = {}

    def delete(run: str) -> None:
        try:
            outcome[run] = cycle.step_delete(pulsar, run, **world)
        except Exception as exc:
            outcome[run] = exc

    cycle.step_survey(pulsar, "a", spark, **world)
    cycle.step_phases(pulsar, "a", clock=world["clock"])
    first = threading.Thread(target=delete, args=("a",), name="cycle-a")
    first.start()
    assert frozen.wait(60), outcome
    # Cycle B scans while A is frozen, then waits for the lock A holds.
    cycle.step_survey(pulsar, "b", spark, **world)
    cycle.step_phases(pulsar, "b", clock=world["clock"])
    second = threading.Thread(target=delete, args=("b",), name="cycle-b")
    second.start()
    time.sleep(1)
    assert "b" not in outcome  # waiting for the lock
    expire(locks["a"]._client, pulsar.zk_hosts)
    second.join(120)
    assert isinstance(outcome["b"], DeleteRecord), outcome["b"]
    deadline = time.monotonic() + 30
    while locks["a"].lost() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert locks["a"].lost() is not None
    thaw.set()
    first.join(120)

    assert isinstance(outcome["a"], cycle.DeleteLockLost), outcome["a"]
    assert all(not zk_client.exists(c.path(lid)) for lid in leaked)
    records = AuditLog(pulsar).read()
    announced = Counter(r["ledger_id"] for r in records if r["status"] == "deleting")
    done = Counter(r["ledger_id"] for r in records if r["status"] == "deleted")
    assert set(announced) == set(leaked)
    assert max(announced.values()) == 1, announced  # nothing audited twice
    assert max(done.values()) == 1, done  # nor deleted twice
