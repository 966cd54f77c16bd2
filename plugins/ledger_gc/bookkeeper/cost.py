"""What a BookKeeper survey cost ZooKeeper: the znodes it read (driver and executors
together), its peak rate, the records the cache stood in for, and the time per step.

The survey's manifest carries it (``cost``), so the report, the page and the metrics
show an operator what a cycle cost the ensemble their brokers depend on, beside the
bound they set (``LEDGERGC_ZK_MAX_READS_PER_SECOND``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ledger_gc.metadata.read_budget import METER, Reads

#: The survey's steps, in order (``seconds`` and ``reads_by_step`` keys).
STEPS = ("references", "listing", "cache", "ledgers", "cache_save", "checks")
#: Of "ledgers": waiting for Spark's session (the command starts it beside the survey).
SPARK_WAIT = "spark_wait"


@dataclass
class SurveyCost:
    budget_per_second: float = 0.0
    seconds: dict[str, float] = field(default_factory=dict)
    reads_by_step: dict[str, int] = field(default_factory=dict)
    reads: Reads = field(default_factory=Reads)
    records_read: int = 0  # ledger znodes read
    records_cached: int = 0  # ledgers classified from the record cache
    directories: int = 0
    directories_reused: dict[str, int] = field(default_factory=dict)  # why -> count
    cache: dict[str, Any] = field(default_factory=dict)
    total_seconds: float = 0.0
    # Executor tasks' own seconds, added up ("task": each task's whole), beside the
    # wall time of their step, and how many tasks (each a part of the tree: its
    # directories and the references of their ledgers, ``survey.PART_LEDGERS``).
    task_seconds: dict[str, float] = field(default_factory=dict)
    executor_tasks: int = 0
    # What the tasks were sent, packed (their directories, cached records and cut
    # classifiers), and what that was before packing: what the driver and its JVM hold
    # for them while the job runs.
    executor_sent_bytes: int = 0
    executor_sent_unpacked_bytes: int = 0

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Time a step and count the znodes this process read in it."""
        started = time.monotonic()
        mark = METER.mark()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - started
            here = METER.since(mark)
            self.reads.add(here)
            self.reads_by_step[name] = self.reads_by_step.get(name, 0) + sum(here.values())

    def add_remote(self, name: str, per_second: dict[int, int]) -> None:
        """Add what an executor read during step ``name`` (same seconds add up)."""
        self.reads.add(per_second)
        self.reads_by_step[name] = self.reads_by_step.get(name, 0) + sum(per_second.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "zk_reads": self.reads.total,
            "zk_peak_reads_per_second": self.reads.peak,
            "zk_max_reads_per_second": self.budget_per_second or None,
            "zk_reads_by_step": {s: self.reads_by_step.get(s, 0) for s in STEPS},
            "records_read": self.records_read,
            "records_cached": self.records_cached,
            "directories": self.directories,
            "directories_reused": dict(sorted(self.directories_reused.items())),
            "seconds": {s: round(self.seconds.get(s, 0.0), 3) for s in (*STEPS, SPARK_WAIT)}
            | {"total": round(self.total_seconds, 3)},
            "cache": self.cache,
            "executor_seconds": {k: round(v, 3) for k, v in sorted(self.task_seconds.items())},
            "executor_tasks": self.executor_tasks,
            "executor_sent_bytes": self.executor_sent_bytes,
            "executor_sent_unpacked_bytes": self.executor_sent_unpacked_bytes,
        }
