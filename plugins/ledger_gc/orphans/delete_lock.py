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
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.exceptions import KazooException, LockTimeout

from ledger_gc.errors import LedgerGcError
from ledger_gc.metadata.zk_client import guarded, session
from ledger_gc.settings import Settings

log = logging.getLogger(__name__)

DELETE_LOCK_PATH = "/ledger-gc/locks/orphan-delete"


class DeleteLockBusy(LedgerGcError):
    """Another cycle held the delete lock for longer than this one would wait."""


@contextmanager
def delete_lock(settings: Settings, run_id: str, wait_seconds: float) -> Iterator[None]:
    """Hold the delete lock for the ``with`` block, or raise ``DeleteLockBusy``."""
    with session(settings) as client:
        lock = client.Lock(DELETE_LOCK_PATH, identifier=run_id)

        def acquire() -> bool:
            try:
                return bool(lock.acquire(timeout=wait_seconds))
            except LockTimeout:
                return False

        if not guarded(f"taking the delete lock {DELETE_LOCK_PATH}", settings.zk_hosts, acquire):
            holders = guarded("reading the lock", settings.zk_hosts, lock.contenders)
            holder = holders[0] if holders else "unknown"
            raise DeleteLockBusy(
                f"another orphan cycle ({holder}) held the delete lock {DELETE_LOCK_PATH} "
                f"for more than {wait_seconds:g} s (LEDGERGC_ORPHAN_LOCK_WAIT_SECONDS); "
                "nothing was deleted, the orphans stay registered and the next run retries"
            )
        try:
            yield
        finally:
            try:
                lock.release()
            except KazooException as exc:
                # The session is gone (ZooKeeper went away mid-delete): its ephemeral lock
                # node goes with it, and the error that matters is the one in flight.
                log.warning(
                    "could not release %s (%s); it ends with the session", DELETE_LOCK_PATH, exc
                )
