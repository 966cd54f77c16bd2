"""The ZooKeeper read budget (metadata/read_budget.py) on a clock of the test's own."""

from __future__ import annotations

import pytest

from ledger_gc.metadata.read_budget import ReadBudget, ReadMeter, Reads, budget_for, shared


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def per_second(taken: list[tuple[float, int]]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for at, reads in taken:
        counts[int(at)] = counts.get(int(at), 0) + reads
    return counts


@pytest.mark.parametrize("rate", [7.0, 100.0, 5000.0])
@pytest.mark.parametrize("batch", [1, 50, 128])
def test_no_second_holds_more_than_a_tenth_over_the_rate(rate: float, batch: int) -> None:
    time = FakeTime()
    budget = ReadBudget(rate, clock=time.clock, sleep=time.sleep)
    size = min(batch, budget.batch_limit())
    taken = []
    for _ in range(int(rate * 5 / size) + 1):
        budget.take(size)
        taken.append((time.now, size))
        time.now += 0.0001  # the request itself
    counts = per_second(taken)
    assert max(counts.values()) <= rate * 1.1
    # and it does not starve: the average over the run is the rate
    total = sum(r for _, r in taken)
    assert total / (taken[-1][0] - 1000.0 + 1 / rate) == pytest.approx(rate, rel=0.15)


def test_a_request_is_cut_to_the_burst() -> None:
    assert ReadBudget(5000).batch_limit() == 500
    assert ReadBudget(20).batch_limit() == 2
    assert ReadBudget(3).batch_limit() == 1


def test_a_new_bucket_starts_empty() -> None:
    time = FakeTime()
    budget = ReadBudget(10, clock=time.clock, sleep=time.sleep)
    budget.take(1)
    assert time.now == pytest.approx(1000.1)


def test_tasks_share_the_budget() -> None:
    assert shared(5000, 2) == 2500
    assert shared(5000, 0) == 5000
    assert shared(0, 4) == 0
    assert budget_for(0) is None
    assert budget_for(123.0) is budget_for(123.0)


def test_the_meter_adds_processes_by_second() -> None:
    time = FakeTime()
    meter = ReadMeter(clock=time.clock)
    meter.count(5)
    mark = meter.mark()
    meter.count(3)
    time.now += 1
    meter.count(4)
    mine = meter.since(mark)
    assert mine == {1000: 3, 1001: 4}
    both = Reads.merged([mine, {1001: 10, 1002: 1}])
    assert both.total == 18 and both.peak == 14


class _Slots:
    """What ``spark.session.zk_share`` asks of a session: its cores."""

    def __init__(self, cores: int) -> None:
        self.sparkContext = type("Context", (), {"defaultParallelism": cores})()


@pytest.mark.parametrize(
    ("tasks", "cores", "each"), [(20, 2, 300.0), (1, 2, 600.0), (3, 16, 200.0)]
)
def test_a_jobs_tasks_share_the_budget_by_the_slots_they_run_in(
    tasks: int, cores: int, each: float
) -> None:
    """Every Spark job reading ZooKeeper (the survey, the S3 snapshot, the distributed
    delete) splits the budget over the tasks that can run at once, not all its tasks."""
    from ledger_gc.config.endpoints import ZkEndpoint
    from ledger_gc.config.zk_addresses import parse_zk_address
    from ledger_gc.spark.session import zk_share

    zk = ZkEndpoint(
        parse_zk_address("LEDGERGC_ZK_HOSTS", "127.0.0.1:1/x"), max_reads_per_second=600
    )
    share = zk_share(zk, tasks, _Slots(cores))  # type: ignore[arg-type]
    assert share.max_reads_per_second == each
    unbounded = ZkEndpoint(parse_zk_address("LEDGERGC_ZK_HOSTS", "127.0.0.1:1/x"))
    assert zk_share(unbounded, tasks, _Slots(cores)).max_reads_per_second == 0  # type: ignore[arg-type]
