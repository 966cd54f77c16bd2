"""The trim lock: one trim that writes and deletes at a time per store.

Two trims over one store (a CLI run beside the DAG's, a manual re-run) decide and mark
safely side by side (every mark is a multi at the versions read), but both then purge
the same markers: both list a ledger's blocks, both delete them, and both write a
``deleted`` audit record and report the bytes, so reclaimed bytes are counted twice
(the trim's form of issue 11's overlapping orphan cycles). So a trim that writes holds
kazoo's ``Lock`` recipe at ``/ledger-gc/locks/trim`` below the chroot for its whole run,
on the session it works on: if that session is lost, its ZooKeeper calls fail and the
run stops, and the ephemeral lock node goes with the session. A dry run writes nothing
and takes no lock.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, LockTimeout

from ledger_gc.errors import LedgerGcError
from ledger_gc.metadata.zk_client import guarded

TRIM_LOCK_PATH = "/ledger-gc/locks/trim"
#: How long a trim waits for another trim to finish before it does nothing this time.
TRIM_LOCK_WAIT_SECONDS = 60.0


class TrimLockBusy(LedgerGcError):
    """Another trim held the trim lock for longer than this one would wait."""


@contextmanager
def trim_lock(
    client: KazooClient, hosts: str, run_id: str, wait_seconds: float = TRIM_LOCK_WAIT_SECONDS
) -> Iterator[None]:
    """Hold the trim lock for the ``with`` block, or raise ``TrimLockBusy``."""
    lock = client.Lock(TRIM_LOCK_PATH, identifier=run_id)

    def acquire() -> bool:
        try:
            return bool(lock.acquire(timeout=wait_seconds))
        except LockTimeout:
            return False

    if not guarded(f"taking the trim lock {TRIM_LOCK_PATH}", hosts, acquire):
        holders = guarded("reading the trim lock", hosts, lock.contenders)
        raise TrimLockBusy(
            f"another trim ({holders[0] if holders else 'unknown'}) has been running against "
            f"this store for more than {wait_seconds:g} s (lock {TRIM_LOCK_PATH}); this run "
            "marked and deleted nothing, the next run goes on"
        )
    try:
        yield
    finally:
        # A lost session cannot release; its ephemeral lock node went with it.
        with contextlib.suppress(KazooException):
            lock.release()
