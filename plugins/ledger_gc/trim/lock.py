"""The trim lock: the trims that write, one run at a time per store.

Two trims over one store (a CLI run beside the DAG's, a manual re-run) decide and mark
safely side by side (every mark is a multi at the versions read), but both then purge
the same markers: both list a ledger's blocks, both delete them, and both write a
``deleted`` audit record and report the bytes, so reclaimed bytes are counted twice
(the trim's form of issue 11's overlapping orphan cycles).

So a trim that writes registers as a *holder* (an ephemeral znode under
``/ledger-gc/locks/trim`` below the chroot, holding its run id) for its whole run, and
may do so only while every other holder belongs to the same run: the DAG's shards of
one run trim disjoint managed ledgers in parallel and share its run id; another run
waits for them, up to ``wait_seconds``, then does nothing this time. Checking the
holders and registering is done under kazoo's ``Lock`` at ``/ledger-gc/locks/trim-gate``
(held for a moment only). The holder znode lives on the session the trim works on: if
that session is lost, its ZooKeeper calls fail and the run stops, and the holder goes
with the session. A dry run writes nothing and takes no lock.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, LockTimeout, NoNodeError

from ledger_gc.errors import LedgerGcError, MetadataAccessError
from ledger_gc.metadata import zk_access
from ledger_gc.metadata.own_znodes import clear_parked, reclaim
from ledger_gc.metadata.zk_client import guarded
from ledger_gc.metadata.znode_text import quoted

TRIM_LOCK_PATH = "/ledger-gc/locks/trim"
TRIM_GATE_PATH = "/ledger-gc/locks/trim-gate"
#: How long a trim waits for another run's trims to finish before it does nothing.
TRIM_LOCK_WAIT_SECONDS = 60.0
# How often a waiting trim looks again.
_POLL_SECONDS = 0.5


class TrimLockBusy(LedgerGcError):
    """Another run's trim held the trim lock for longer than this one would wait."""


def _other_runs(client: KazooClient, run_id: str) -> list[str]:
    """The run ids of the holders that are not ``run_id``."""
    others = []
    for child in client.get_children(TRIM_LOCK_PATH):
        with contextlib.suppress(NoNodeError):  # a holder that finished meanwhile
            data, _ = client.get(f"{TRIM_LOCK_PATH}/{child}")
            holder = data.decode("utf-8", "replace")
            if holder != run_id:
                # Whoever may create a node there wrote it: quoted (``znode_text``).
                others.append(quoted(holder))
    return others


@contextlib.contextmanager
def trim_lock(
    client: KazooClient, hosts: str, run_id: str, wait_seconds: float = TRIM_LOCK_WAIT_SECONDS
) -> Iterator[None]:
    """Be a holder of the trim lock for the ``with`` block, or raise ``TrimLockBusy``."""
    for path in (TRIM_GATE_PATH, TRIM_LOCK_PATH):
        reclaim(client, hosts, path)  # an older version's open ACL
        clear_parked(client, hosts, path)  # a squat made while open
    gate = client.Lock(TRIM_GATE_PATH, identifier=run_id)
    deadline = time.monotonic() + wait_seconds

    def register() -> tuple[str | None, list[str]]:
        """Under the gate: our holder znode, or None and the other runs holding it."""
        if not gate.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise LockTimeout(TRIM_GATE_PATH)
        try:
            client.ensure_path(TRIM_LOCK_PATH)
            others = _other_runs(client, run_id)
            if others:
                return None, others
            mine = client.create(
                f"{TRIM_LOCK_PATH}/holder-", run_id.encode(), ephemeral=True, sequence=True
            )
            return mine, []
        finally:
            gate.release()

    def refused() -> MetadataAccessError:
        return zk_access.own_refusal(
            client, hosts, what=f"taking the trim lock {TRIM_LOCK_PATH}", znode=TRIM_LOCK_PATH
        )

    mine: str | None = None
    others: list[str] = []
    while mine is None:
        try:
            mine, others = guarded(
                f"taking the trim lock {TRIM_LOCK_PATH}", hosts, register, refused=refused
            )
        except LockTimeout:
            others = others or ["unknown"]
        if mine is None:
            if time.monotonic() >= deadline:
                raise TrimLockBusy(
                    f"another trim ({others[0]}) has been running against this store for "
                    f"more than {wait_seconds:g} s (lock {TRIM_LOCK_PATH}); this run marked "
                    "and deleted nothing, the next run goes on"
                )
            time.sleep(min(_POLL_SECONDS, max(0.0, deadline - time.monotonic())))
    try:
        yield
    finally:
        # A lost session cannot delete it; the ephemeral holder went with the session.
        with contextlib.suppress(KazooException):
            client.delete(mine)
