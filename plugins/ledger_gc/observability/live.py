"""The live ZooKeeper status behind the page's trim backlog, cached for a web server.

A page view must not open a ZooKeeper session each time: the status is read at most once
per ``ttl`` seconds (metadata only, no bucket listing), by one thread while the others
keep serving the previous answer. A failure is cached for the same time, so a ZooKeeper
that is down costs one timeout per ``ttl``, not one per view.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ledger_gc.config.edge import zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.errors import LedgerGcError
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.observability.status import collect_status

DEFAULT_TTL_SECONDS = 30.0
# A web request waits at most this long for ZooKeeper (Settings' default is 15 s).
LIVE_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class LiveStatus:
    """What the last read gave: the status dict, or the error that replaced it."""

    status: dict[str, Any] | None
    error: str | None
    fetched_at: float


def read_live_status(settings: Settings) -> dict[str, Any]:
    """``collect_status`` without the bucket, as a dict (``StoreStatus.to_dict``)."""
    quick = settings.with_overrides(
        zk_timeout_seconds=min(settings.zk_timeout_seconds, LIVE_TIMEOUT_SECONDS)
    )
    with MetadataStore.open(zk_endpoint(quick)) as store:
        return collect_status(store, None).to_dict()


class LiveStatusCache:
    """``get()`` returns a status at most ``ttl`` seconds old (or its error)."""

    def __init__(
        self,
        settings: Callable[[], Settings],
        *,
        ttl: float = DEFAULT_TTL_SECONDS,
        reader: Callable[[Settings], dict[str, Any]] = read_live_status,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._settings = settings
        self._ttl = ttl
        self._reader = reader
        self._clock = clock
        self._lock = threading.Lock()
        self._current: LiveStatus | None = None

    def get(self) -> LiveStatus:
        current = self._current
        if current is not None and self._clock() - current.fetched_at < self._ttl:
            return current
        # One reader at a time; the others serve the stale answer rather than queue up.
        if not self._lock.acquire(blocking=current is None):
            return current  # type: ignore[return-value]  # not None: blocking otherwise
        try:
            current = self._current
            if current is not None and self._clock() - current.fetched_at < self._ttl:
                return current
            self._current = self._fetch()
            return self._current
        finally:
            self._lock.release()

    def _fetch(self) -> LiveStatus:
        try:
            return LiveStatus(self._reader(self._settings()), None, self._clock())
        except LedgerGcError as exc:
            return LiveStatus(None, str(exc), self._clock())
        except Exception as exc:  # a web page must render; the error is shown on it
            return LiveStatus(None, f"{type(exc).__name__}: {exc}", self._clock())
