"""Stopping cleanly on SIGTERM (an Airflow task timeout, a pod eviction, Ctrl-C).

A GC killed in the middle of a bulk delete must leave a consistent record: the batch
under way finishes (its keys deleted, its ``deleted`` audit record written), nothing new
starts, and the run reports what it left for the next one. ``stop_on_signals`` turns
the signals into a flag that the delete path and the trim check between batches; the
previous handlers come back when the run ends.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopFlag:
    """Set once a stop was asked for; callable, so it can be passed as ``should_stop``."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name: str | None = None

    def __call__(self) -> bool:
        return self._event.is_set()

    def set(self, signal_name: str = "a stop request") -> None:
        self.signal_name = signal_name
        self._event.set()


NEVER: Callable[[], bool] = lambda: False  # noqa: E731

# The flag of the innermost ``stop_on_signals`` block in force, for code that is not
# handed one (the orphan delete path, deep under a cycle step).
_active: list[StopFlag] = []


def requested() -> bool:
    """Whether a stop was asked for in the ``stop_on_signals`` block in force."""
    return bool(_active) and _active[-1]()


@contextmanager
def stop_on_signals() -> Iterator[StopFlag]:
    """A flag that SIGTERM and SIGINT set while the block runs (main thread only; from
    another thread the flag is returned but no handler can be installed)."""
    flag = StopFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handle(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if flag():
            return
        log.warning("%s received: finishing the delete batch under way, then stopping", name)
        flag.set(name)

    previous = {sig: signal.signal(sig, handle) for sig in SIGNALS}
    _active.append(flag)
    try:
        yield flag
    finally:
        _active.remove(flag)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
