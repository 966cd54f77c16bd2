"""The orphan delete lock: one delete phase at a time per store (issue 11, item 3).

Two cycles on one state (a CLI run beside the DAG, a re-run beside a scheduled run) can
both pass the latest-run check while the first is still deleting; both then delete the
same orphans and audit them twice. The registry's own transactions do not help: a
delete phase is minutes of S3 calls between two of them. So the delete phase runs under
kazoo's ``Lock`` recipe at ``/ledger-gc/locks/orphan-delete`` below the chroot (every
worker reaches ZooKeeper; a crashed holder's ephemeral node goes with its session), and
the cycle that gets the lock re-reads the registry before it plans anything.

A lock that cannot be had within ``Settings.orphan_lock_wait_seconds`` is not an error:
the cycle deletes nothing, says who holds the lock, and the next run retries.

**A lock can be lost while it is held.** Its ephemeral node lives as long as the
holder's ZooKeeper session; a process frozen past the session timeout (a GC pause, a
suspended VM, a partition) comes back to find the session expired and another cycle
holding the lock. kazoo says so through the session's state: ``LOST`` (the session
expired: the lock is gone) and ``SUSPENDED`` (the connection dropped: the session, and
the lock with it, lives on until the server has heard nothing for the session timeout).
``DeleteLock`` listens for both. ``lost()`` answers with the reason once the session is
lost, or once it has been suspended for longer than ``SUSPENDED_SAFE_FRACTION`` of the
session timeout (the server may then have expired it: kazoo reports a dropped connection
up to two thirds of the timeout after the server's last answer); a connection that
comes back within the session keeps the lock, which no one else can have held. Every
source's delete path asks it before each request it sends (``should_stop``), so the
batch under way finishes and is audited, nothing new is sent, and the cycle exits 1
saying why.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, LockTimeout
from kazoo.protocol.states import KazooState

from ledger_gc.errors import LedgerGcError
from ledger_gc.metadata.zk_client import guarded, session
from ledger_gc.settings import Settings

log = logging.getLogger(__name__)

#: How long (a share of the session timeout) a suspended session still holds the lock
#: for sure: the server expires it a timeout after its last answer, which kazoo may
#: report up to 2/3 of a timeout late.
SUSPENDED_SAFE_FRACTION = 0.25

DELETE_LOCK_PATH = "/ledger-gc/locks/orphan-delete"


class DeleteLockBusy(LedgerGcError):
    """Another cycle held the delete lock for longer than this one would wait."""


class DeleteLock:
    """kazoo's ``Lock`` on one session, told when that session is suspended or lost.

    Use it as a context manager (``acquire`` on enter, ``release`` on exit), and pass
    ``lost`` (or ``should_stop``) to whatever sends delete requests while it is held."""

    def __init__(
        self, client: KazooClient, hosts: str, run_id: str, session_timeout_s: float = 15.0
    ) -> None:
        self._client = client
        self._hosts = hosts
        self._lock = client.Lock(DELETE_LOCK_PATH, identifier=run_id)
        self._lost: str | None = None
        self._suspended_at: float | None = None
        self._safe_s = session_timeout_s * SUSPENDED_SAFE_FRACTION
        self._held = False
        self._mutex = threading.Lock()
        client.add_listener(self._on_state)

    def _on_state(self, state: str) -> bool:
        """kazoo's session listener (its event thread)."""
        with self._mutex:
            if not self._held or self._lost is not None:
                return False
            if state == KazooState.LOST:
                self._lose("expired")
            elif state == KazooState.SUSPENDED:
                self._suspended_at = time.monotonic()
            else:  # CONNECTED again within the session: the node was ours throughout
                self._suspended_at = None
        return False  # keep listening

    def _lose(self, how: str) -> None:
        self._lost = (
            f"the delete lock {DELETE_LOCK_PATH} was lost: its ZooKeeper session at "
            f"{self._hosts} {how}, so another cycle may hold it; this cycle stopped "
            "deleting before its next request, and the next run re-checks what is left"
        )
        log.error("%s", self._lost)

    def acquire(self, wait_seconds: float) -> bool:
        def take() -> bool:
            try:
                return bool(self._lock.acquire(timeout=wait_seconds))
            except LockTimeout:
                return False

        with self._mutex:
            self._held = True  # a suspension while it is being taken counts as a loss
        got = guarded(f"taking the delete lock {DELETE_LOCK_PATH}", self._hosts, take)
        with self._mutex:
            self._held = got
        return got

    def holder(self) -> str:
        holders = guarded("reading the lock", self._hosts, self._lock.contenders)
        return str(holders[0]) if holders else "unknown"

    def release(self) -> None:
        with self._mutex:
            self._held = False
        try:
            self._lock.release()
        except KazooException as exc:
            # The session is gone (ZooKeeper went away mid-delete): its ephemeral lock
            # node goes with it, and the error that matters is the one in flight.
            log.warning(
                "could not release %s (%s); it ends with the session", DELETE_LOCK_PATH, exc
            )
        finally:
            self._client.remove_listener(self._on_state)

    def lost(self) -> str | None:
        """Why the lock is no longer this cycle's for sure (None: still held)."""
        with self._mutex:
            suspended = self._suspended_at
            if (
                self._lost is None
                and suspended is not None
                and time.monotonic() - suspended > self._safe_s
            ):
                self._lose(
                    f"has been suspended for more than {self._safe_s:g} s (the server "
                    "may have expired it)"
                )
            return self._lost

    def should_stop(self) -> bool:
        return self.lost() is not None


@contextmanager
def delete_lock(settings: Settings, run_id: str, wait_seconds: float) -> Iterator[DeleteLock]:
    """Hold the delete lock for the ``with`` block, or raise ``DeleteLockBusy``."""
    with session(settings) as client:
        lock = DeleteLock(client, settings.zk_hosts, run_id, settings.zk_timeout_seconds)
        if not lock.acquire(wait_seconds):
            holder = lock.holder()
            lock.release()
            raise DeleteLockBusy(
                f"another orphan cycle ({holder}) held the delete lock {DELETE_LOCK_PATH} "
                f"for more than {wait_seconds:g} s (LEDGERGC_ORPHAN_LOCK_WAIT_SECONDS); "
                "nothing was deleted, the orphans stay registered and the next run retries"
            )
        try:
            yield lock
        finally:
            lock.release()
