"""``LEDGERGC_ZK_MAX_READS_PER_SECOND`` against a real ZooKeeper and Spark's executors:
a cycle under a low budget finishes, only slower, and the executors' reads add up to
the budget, never to a multiple of it (each task reads at its share).

Rates are counted per second of the wall clock by every process and added up by second
(``read_budget.Reads``); a budget holds a tenth of a second's reads at most, so no second
may hold more than 1.1 times the budget. Slowness can only lower those counts: the
bounds asserted here do not depend on the machine's speed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.bookkeeper.survey import survey
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.report import CycleReport, render_text
from ledger_gc.rules.bookkeeper import ledger_paths
from ledger_gc.spark.snapshot import read_snapshot
from pulsar_cluster import PulsarCluster, ledger_record, ml_tags

pytestmark = pytest.mark.spark

NS = "public/default"
TOPIC = f"{NS}/persistent/orders"
DIRECTORIES = 4
PER_DIRECTORY = 100


def plant(zk_client: KazooClient) -> list[int]:
    """``DIRECTORIES`` leaf directories of ``PER_DIRECTORY`` ledgers, every one listed."""
    c = PulsarCluster(zk_client).init(idgen=False)
    c.namespace(NS)
    record = ledger_record(ml_tags(TOPIC))
    ids = [d * ledger_paths.LEAF_SPAN + i for d in range(DIRECTORIES) for i in range(PER_DIRECTORY)]
    for d in range(DIRECTORIES):
        zk_client.ensure_path(c.path(d * ledger_paths.LEAF_SPAN).rsplit("/", 1)[0])
    for start in range(0, len(ids), 200):
        txn = zk_client.transaction()
        for lid in ids[start : start + 200]:
            txn.create(c.path(lid), record)
        assert all(r is not None and not isinstance(r, Exception) for r in txn.commit())
    c.managed_ledger(TOPIC, ids)
    return ids


@pytest.fixture(autouse=True)
def on_executors(monkeypatch: pytest.MonkeyPatch) -> None:
    """The directories on Spark's executors however few (their shares are the test)."""
    monkeypatch.setattr("ledger_gc.bookkeeper.survey.SPARK_OVER_SECONDS", 0.0)


@pytest.fixture
def pulsar(settings: Settings) -> Settings:
    return settings.with_overrides(bucket="", orphan_max_fraction=1.0, bk_record_cache=False)


def test_the_executors_read_at_their_share_of_the_budget(
    pulsar: Settings, zk_client: KazooClient, spark: Any
) -> None:
    ids = plant(zk_client)
    budget = 100
    started = time.monotonic()
    found = survey(resolve(pulsar.with_overrides(zk_max_reads_per_second=budget)), spark=spark)
    took = time.monotonic() - started
    assert found is not None and found.ledgers == len(ids)
    cost = found.cost
    assert cost.reads_by_step["ledgers"] == len(ids)  # read on the executors
    # Two tasks at once (local[2]), each at half the budget: together never more than
    # the budget (+10 %, the bucket's burst), however the seconds fall.
    assert cost.reads.peak <= budget * 1.1, cost.reads.per_second
    # And it is a bound, not a target missed by a mile: the reads took their time.
    assert took >= cost.reads.total / budget * 0.8


def test_without_a_budget_the_executors_read_faster(
    pulsar: Settings, zk_client: KazooClient, spark: Any
) -> None:
    """The same survey unbounded (what the bound above held back)."""
    plant(zk_client)
    found = survey(resolve(pulsar), spark=spark)
    assert found is not None and found.cost.reads.peak > 110


def test_a_cycle_under_a_low_budget_finishes_slower(
    pulsar: Settings,
    zk_client: KazooClient,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
) -> None:
    ids = plant(zk_client)
    budget = 150
    bounded = pulsar.with_overrides(zk_max_reads_per_second=budget)
    started = time.monotonic()
    report = run_orphan_cycle(resolve(bounded), dry_run=True, spark=spark, **later(0)).to_dict()
    took = time.monotonic() - started
    assert report["status"] == "ok"
    assert report["bookkeeper"]["ledgers"] == len(ids)
    zk = report["zookeeper"]
    assert zk["max_reads_per_second"] == budget
    assert zk["reads"] >= len(ids)
    assert zk["peak_per_second"] <= budget * 1.1, zk
    for step, figures in zk["by_step"].items():
        assert figures is None or figures["peak_per_second"] <= budget * 1.1, step
    assert took >= zk["reads"] / budget * 0.8
    text = "\n".join(render_text(CycleReport(report["run_id"], report["status"], report)))
    assert "bound: 150/s" in text


def test_more_snapshot_tasks_than_slots_read_near_the_budget(
    pulsar: Settings, zk_client: KazooClient, spark: Any
) -> None:
    """Six snapshot tasks on two slots (local[2]): the two that run at once share the
    budget, not the six (each at a sixth, the job would read at a third of it). Each task
    reads for seconds, so opening its session weighs little beside its reads."""
    c = PulsarCluster(zk_client).init()
    c.namespace(NS)
    names = [f"{NS}/persistent/t-{i}" for i in range(600)]
    for name in names:
        c.managed_ledger(name, [])
    budget = 100
    zk = resolve(pulsar.with_overrides(zk_max_reads_per_second=budget)).zk
    read = read_snapshot(spark, zk, names, names_per_shard=100)
    assert read.shards == 6 and read.counts["ml"] == len(names)
    seconds = sorted(read.zk_reads)
    # The seconds wholly inside the read (the first and the last are partial).
    inside = [read.zk_reads.get(s, 0) for s in range(seconds[0] + 1, seconds[-1])]
    assert inside, read.zk_reads
    rate = sum(inside) / len(inside)
    assert rate >= budget * 0.6, (rate, read.zk_reads)
    assert max(read.zk_reads.values()) <= budget * 1.1, read.zk_reads
