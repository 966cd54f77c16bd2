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

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.audit import AuditLog
from ledger_gc.bookkeeper import deleting as bk_deleting
from ledger_gc.config.edge import resolve, zk_endpoint
from ledger_gc.config.endpoints import ZkEndpoint
from ledger_gc.config.settings import Settings
from ledger_gc.orphans import cycle, delete_lock
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.records import DeleteRecord
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
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    world = later(DAY_H + 1)

    locks: dict[str, delete_lock.DeleteLock] = {}
    real_init = delete_lock.DeleteLock.__init__

    def remember(
        self: delete_lock.DeleteLock, client: KazooClient, zk: ZkEndpoint, run: str, **kw: Any
    ) -> None:
        real_init(self, client, zk, run, **kw)
        locks[run] = self

    monkeypatch.setattr(delete_lock.DeleteLock, "__init__", remember)
    frozen, thaw = threading.Event(), threading.Event()
    real_verdict = bk_deleting._live_verdict
    calls = Counter[str]()

    def freeze_after_first(*args: Any) -> Any:
        verdict = real_verdict(*args)
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
            outcome[run] = cycle.step_delete(resolve(pulsar), run, **world)
        except Exception as exc:
            outcome[run] = exc

    cycle.step_survey(resolve(pulsar), "a", spark, **world)
    cycle.step_phases(resolve(pulsar), "a", clock=world["clock"])
    first = threading.Thread(target=delete, args=("a",), name="cycle-a")
    first.start()
    assert frozen.wait(60), outcome
    # Cycle B scans while A is frozen, then waits for the lock A holds.
    cycle.step_survey(resolve(pulsar), "b", spark, **world)
    cycle.step_phases(resolve(pulsar), "b", clock=world["clock"])
    second = threading.Thread(target=delete, args=("b",), name="cycle-b")
    second.start()
    # B waits for the lock: its contender node is queued behind A's (seen, not slept on).
    contenders = zk_client.Lock(delete_lock.DELETE_LOCK_PATH).contenders
    deadline = time.monotonic() + 30
    while len(contenders()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert contenders() == ["a", "b"]
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

    # Cycle A's report counts exactly what A deleted before it stopped, in its class,
    # although its registry changes were left to B (the lock's holder now).
    from ledger_gc.orphans.options import CycleOptions
    from ledger_gc.orphans.report import build_report

    mine = {r["ledger_id"] for r in records if r["status"] == "deleted" and r["run_id"] == "a"}
    report = build_report(
        resolve(pulsar), "a", options=CycleOptions(), now_ms=world["clock"](), error=outcome["a"]
    ).to_dict()
    assert mine and {d["ledger_id"] for d in report["deleted"]} == mine
    assert report["bytes_reclaimed"] == 1024 * len(mine)
    assert report["bookkeeper"]["deleted"] == len(mine)
    assert report["bookkeeper"]["bytes_reclaimed"] == 1024 * len(mine)
    assert report["phases"]["deleted"]["by_class"]["bk-orphan-ledger"]["count"] == len(mine)


def _stopped(pid: int) -> bool:
    """Whether the process is stopped by a signal (state T in /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "T"


def test_a_delete_queued_by_a_cycle_frozen_past_its_lock_session_is_refused_by_zookeeper(
    settings: Settings,
    zk_client: KazooClient,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
    tmp_path: Any,
) -> None:
    """The attack of issue 27: a cycle is frozen (SIGSTOP: no listener, no ping runs)
    with a BookKeeper delete about to be sent. Its lock session expires, another cycle
    takes the lock and the managed ledger lists the ledger again; then the first one
    wakes up and sends its delete. Only ZooKeeper can refuse it: the delete is one
    ``multi`` with a check of the lock node, on the lock's own session."""
    pulsar = settings.with_overrides(
        bucket="",
        delete_enabled=True,
        retention_seconds=0,
        orphan_lock_wait_seconds=60,
        orphan_max_fraction=1.0,
    )
    c = PulsarCluster(zk_client).init()
    c.namespace("public/default")
    leaked = c.ledger(ml_tags(TOPIC))
    live = [c.ledger(ml_tags(TOPIC)) for _ in range(2)]
    c.managed_ledger(TOPIC, live)
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    world = later(DAY_H + 1)
    cycle.step_survey(resolve(pulsar), "a", spark, **world)
    cycle.step_phases(resolve(pulsar), "a", clock=world["clock"])

    session_file = tmp_path / "lock-session.json"
    script = Path(__file__).with_name("frozen_delete.py")
    offset_ms = int((DAY_H + 1) * 3_600_000)
    env = {**os.environ, **pulsar.to_env()}
    child = subprocess.Popen(
        [sys.executable, str(script), "a", str(offset_ms), str(session_file)],
        env=env,
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
        # ZooKeeper expires the frozen cycle's lock session (it heard nothing from it).
        twin = KazooClient(hosts=pulsar.zk_hosts, client_id=(session_id, bytes.fromhex(password)))
        twin.start(timeout=15)
        twin.stop()
        twin.close()
        with delete_lock.delete_lock(zk_endpoint(pulsar), "b", 60):  # another cycle takes the lock
            c.managed_ledger(TOPIC, [leaked, *live])  # and the topic lists the ledger again
            os.kill(child.pid, signal.SIGCONT)
            out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()

    assert zk_client.exists(c.path(leaked)), f"a listed ledger was deleted: {out} {err[-2000:]}"
    records = [r for r in AuditLog(pulsar).read(run_id="a") if r["ledger_id"] == leaked]
    assert [r["status"] for r in records] == ["deleting", "not-deleted"], records
    assert "never applied: the delete lock's node" in records[-1]["reason"], records[-1]
    assert json.loads(out.strip().splitlines()[-1])["error"] == "DeleteLockLost", out
