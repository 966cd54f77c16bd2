"""How many znodes a process reads from ZooKeeper, and how fast it may.

Why: the ZooKeeper ensemble that ledger-gc reads is the one Pulsar's brokers need for
every topic load, rollover and cursor move. A survey of a large cluster reads a
million znodes; in a burst of tens of thousands per second it competes with them
(``LEDGERGC_ZK_MAX_READS_PER_SECOND``, DESIGN.md "Cost to ZooKeeper").

* ``ReadBudget``: a token bucket shared by every ``MetadataStore`` of the process at
  one rate. It starts empty and holds at most a tenth of a second's reads, so in any
  second a process sends at most 1.1x its rate; a multiRead of ``n`` operations takes
  ``n`` tokens (every znode counts, not every request), and is never larger than the
  bucket (``batch_limit``), so one request cannot overrun it.
* ``METER``: the znodes this process has read, per second of the wall clock, so that
  the driver can add up what every executor read in the same seconds (``peak``).

A Spark task gets a share of the cycle's budget (``shared``): the tasks that can run at
once add up to the budget, never to a multiple of it. The driver reads nothing while
its executors do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

#: A bucket holds at most this share of a second's reads (the burst above the rate).
BURST_SECONDS = 0.1
#: Seconds of history the meter keeps (a cycle's survey and delete fit easily).
KEEP_SECONDS = 24 * 3600


class ReadBudget:
    """A token bucket: ``per_second`` reads per second, bursts of a tenth of that."""

    def __init__(
        self,
        per_second: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if per_second <= 0:
            raise ValueError("a read budget needs a positive rate")
        self.per_second = float(per_second)
        self.capacity = max(1.0, self.per_second * BURST_SECONDS)
        self._clock = clock
        self._sleep = sleep
        self._tokens = 0.0  # empty at first: a new task must not burst on top of others
        self._at = clock()
        self._lock = threading.Lock()

    def batch_limit(self) -> int:
        """The most reads one request may carry (a multiRead is cut to this)."""
        return max(1, int(self.capacity))

    def take(self, reads: int) -> None:
        """Wait until ``reads`` znodes may be read (at most ``batch_limit`` at once)."""
        need = float(min(max(reads, 0), self.batch_limit()))
        while True:
            with self._lock:
                now = self._clock()
                self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.per_second)
                self._at = now
                # (A hair short counts as enough: a wait too small to move the clock
                # would never fill it.)
                if self._tokens >= need - 1e-6:
                    self._tokens -= need
                    return
                wait = max((need - self._tokens) / self.per_second, 1e-4)
            self._sleep(wait)


_BUDGETS: dict[float, ReadBudget] = {}
_BUDGETS_LOCK = threading.Lock()


def budget_for(per_second: float) -> ReadBudget | None:
    """The process's budget at ``per_second`` (None: unbounded). One per rate, shared by
    every session: an executor's tasks run one after another on the same bucket."""
    if per_second <= 0:
        return None
    with _BUDGETS_LOCK:
        budget = _BUDGETS.get(per_second)
        if budget is None:
            budget = _BUDGETS[per_second] = ReadBudget(per_second)
        return budget


def shared(per_second: float, tasks: int) -> float:
    """One task's share of a budget when ``tasks`` tasks may read at once (0: none)."""
    return per_second / max(1, tasks) if per_second > 0 else 0.0


@dataclass
class Reads:
    """Znodes read, per second of the wall clock (epoch seconds -> count)."""

    per_second: dict[int, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.per_second.values())

    @property
    def peak(self) -> int:
        """The most znodes read within one second (of the wall clock)."""
        return max(self.per_second.values(), default=0)

    def add(self, other: Mapping[int, int]) -> Reads:
        """Add another process's reads (the same seconds add up)."""
        for second, count in other.items():
            self.per_second[int(second)] = self.per_second.get(int(second), 0) + int(count)
        return self

    @classmethod
    def merged(cls, parts: Iterable[Mapping[int, int]]) -> Reads:
        merged = cls()
        for part in parts:
            merged.add(part)
        return merged

    def to_dict(self) -> dict[str, int]:
        return {"reads": self.total, "peak_per_second": self.peak}


class ReadMeter:
    """The znodes this process read, per wall-clock second (thread-safe)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._counts: dict[int, int] = {}
        self._lock = threading.Lock()

    def count(self, reads: int) -> None:
        second = int(self._clock())
        with self._lock:
            self._counts[second] = self._counts.get(second, 0) + reads
            if len(self._counts) > KEEP_SECONDS:
                for old in [s for s in self._counts if s < second - KEEP_SECONDS]:
                    del self._counts[old]

    def mark(self) -> tuple[int, dict[int, int]]:
        """A point to measure from (``since``)."""
        with self._lock:
            return int(self._clock()), dict(self._counts)

    def since(self, mark: tuple[int, dict[int, int]]) -> dict[int, int]:
        """What was read after ``mark``, per second."""
        start, before = mark
        with self._lock:
            return {
                second: count - before.get(second, 0)
                for second, count in self._counts.items()
                if second >= start and count > before.get(second, 0)
            }


#: Every ``MetadataStore`` of this process counts its reads here.
METER = ReadMeter()
