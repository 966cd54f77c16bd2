"""The orphan delete lock: one delete phase at a time per store (issue 11, item 3).

Two cycles on one state (a CLI run beside the DAG, a re-run beside a scheduled run) can
both pass the latest-run check while the first is still deleting; both then delete the
same orphans and audit them twice. The registry's own transactions do not help: a
delete phase is minutes of S3 calls between two of them. So the delete phase runs under
kazoo's ``Lock`` recipe at ``/ledger-gc/locks/orphan-delete`` below the chroot (every
worker reaches ZooKeeper; a crashed holder's ephemeral node goes with its session), and
the cycle that gets the lock re-reads the registry before it plans anything.

A lock that cannot be had within ``LEDGERGC_ORPHAN_LOCK_WAIT_SECONDS`` is not an error:
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
from contextlib import ExitStack, contextmanager

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, LockTimeout
from kazoo.protocol.states import KazooState

from ledger_gc.config.endpoints import ZkEndpoint
from ledger_gc.errors import LedgerGcError, MetadataAccessError, MetadataUnavailableError
from ledger_gc.metadata import zk_access
from ledger_gc.metadata.fencing import Fence
from ledger_gc.metadata.own_znodes import clear_parked, reclaim
from ledger_gc.metadata.zk_client import guarded, session
from ledger_gc.metadata.znode_text import quoted

log = logging.getLogger(__name__)

#: How long (a share of the session timeout) a suspended session still holds the lock
#: for sure: the server expires it a timeout after its last answer, which kazoo may
#: report up to 2/3 of a timeout late.
SUSPENDED_SAFE_FRACTION = 0.25
#: How often (a share of the session timeout) ``should_stop`` asks the server whether
#: the lock node is still there: a session that answered a look lives on for at least a
#: timeout after it.
LOOK_FRACTION = 1 / 3

DELETE_LOCK_PATH = "/ledger-gc/locks/orphan-delete"
#: The lock whose node fences BookKeeper's writes when its metadata is not reached with
#: Pulsar's session (another ensemble, chroot or identity): below BookKeeper's chroot.
BOOKKEEPER_LOCK_PATH = "/ledger-gc/locks/bookkeeper-delete"
#: Likewise for Pulsar's configuration store (partitioned-topic metadata of a deleted
#: tenant) when it is not the local store: below the configuration store's chroot.
CONFIG_STORE_LOCK_PATH = "/ledger-gc/locks/config-store-delete"


class DeleteLockBusy(LedgerGcError):
    """Another cycle held the delete lock for longer than this one would wait."""


class DeleteLock:
    """kazoo's ``Lock`` on one session, told when that session is suspended or lost.

    Use it through ``delete_lock`` (``acquire`` on enter, ``release`` on exit), and pass
    ``should_stop`` to whatever sends delete requests while it is held, and ``fence_for``
    to whatever sends ZooKeeper deletes."""

    def __init__(
        self,
        client: KazooClient,
        endpoint: ZkEndpoint,
        run_id: str,
        *,
        path: str = DELETE_LOCK_PATH,
    ) -> None:
        """``client``: a session to ``endpoint``."""
        self._client = client
        self._endpoint = endpoint
        self._hosts = endpoint.hosts
        self._path = path
        self._lock = client.Lock(path, identifier=run_id)
        self._lost: str | None = None
        self._suspended_at: float | None = None
        self._safe_s = endpoint.timeout_seconds * SUSPENDED_SAFE_FRACTION
        self._look_s = endpoint.timeout_seconds * LOOK_FRACTION
        self._looked_at = 0.0
        self._looking = threading.Lock()  # one look at the server at a time
        self._held = False
        self._fence: Fence | None = None
        self._mutex = threading.Lock()
        # The locks of the other ensembles written to (BookKeeper's, the configuration
        # store's), taken after this one (``delete_lock``), in that order.
        self._others: list[DeleteLock] = []
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
            f"the delete lock {self._path} was lost: its ZooKeeper session at "
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

        reclaim(self._client, self._hosts, self._path)  # an older version's open ACL
        clear_parked(self._client, self._hosts, self._path)  # a squat made while open
        with self._mutex:
            self._held = True  # a suspension while it is being taken counts as a loss
        got = guarded(
            f"taking the delete lock {self._path}", self._hosts, take, refused=self._refused
        )
        if got:
            node = f"{self._lock.path}/{self._lock.node}"
            stat = guarded("reading the lock node", self._hosts, lambda: self._client.exists(node))
            if stat is None:  # lost already (the session went while it was taken)
                got = False
            else:
                self._fence = Fence(self._client, self._hosts, node, stat.version)
                self._looked_at = time.monotonic()
        with self._mutex:
            self._held = got
        return got

    @property
    def fence(self) -> Fence:
        """This lock's fence: writes on its session, refused once its node is gone."""
        if self._fence is None:
            raise RuntimeError(f"the delete lock {self._path} is not held")
        return self._fence

    def fence_for(self, endpoint: ZkEndpoint) -> Fence:
        """The fence for writes on sessions to ``endpoint``: this lock's own for the
        endpoint it was taken at, the other locks' for theirs (BookKeeper's, the
        configuration store's). Any other endpoint has none (a programming error:
        ``delete_lock`` names them first)."""
        if endpoint == self._endpoint:
            return self.fence
        for other in self._others:
            if endpoint == other._endpoint:
                return other.fence
        raise RuntimeError(
            f"no delete lock is held at {endpoint.hosts}: take it with delete_lock(...)"
        )

    def holder(self) -> str:
        """The first contender's identifier, quoted: whoever may create a node there
        writes it (``znode_text``)."""
        try:
            holders = guarded(
                f"reading the lock {self._path}",
                self._hosts,
                self._lock.contenders,
                refused=self._refused,
            )
        except UnicodeDecodeError:  # kazoo decodes each node's data as UTF-8
            return "a node whose text is not UTF-8"
        return quoted(str(holders[0])) if holders else "unknown"

    def _refused(self) -> MetadataAccessError:
        """A ``NoAuth`` on the lock's znodes: which one, whose ACL, and who this is."""
        return zk_access.own_refusal(
            self._client,
            self._hosts,
            what=f"taking the delete lock {self._path}",
            znode=self._path,
            names=self._endpoint.names,
        )

    def release(self) -> None:
        with self._mutex:
            self._held = False
        self._fence = None
        try:
            self._lock.release()
        except KazooException as exc:
            # The session is gone (ZooKeeper went away mid-delete): its ephemeral lock
            # node goes with it, and the error that matters is the one in flight.
            log.warning("could not release %s (%s); it ends with the session", self._path, exc)
        finally:
            self._client.remove_listener(self._on_state)

    def lost(self) -> str | None:
        """Why the lock is no longer this cycle's for sure (None: still held)."""
        fence = self._fence
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
            if self._lost is None and fence is not None and fence.gone is not None:
                self._lose(f"ended: {fence.gone}")
            lost = self._lost
        if lost is None and fence is not None:
            lost = self._look(fence)
        for other in self._others:
            if lost is None:
                lost = other.lost()
        return lost

    def _look(self, fence: Fence) -> str | None:
        """Ask the server whether the lock node is still there, when more than
        ``LOOK_FRACTION`` of the session timeout passed since the last answer: a process
        frozen longer than that learns it on its first request after. Only while
        connected, one look at a time: a dropped connection is the listener's to judge
        (the session, and the lock, may well live on)."""
        if time.monotonic() - self._looked_at <= self._look_s or not self._client.connected:
            return None
        if not self._looking.acquire(blocking=False):
            return None  # another thread is asking right now
        try:
            held = fence.held()
        except MetadataUnavailableError:
            return None  # the connection dropped meanwhile: the listener's turn
        finally:
            self._looking.release()
        with self._mutex:
            if held:
                self._looked_at = time.monotonic()
            elif self._lost is None:
                self._lose(f"ended: {fence.gone}")
            return self._lost

    def should_stop(self) -> bool:
        return self.lost() is not None


@contextmanager
def delete_lock(
    endpoint: ZkEndpoint,
    run_id: str,
    wait_seconds: float,
    *,
    bookkeeper: ZkEndpoint | None = None,
    config_store: ZkEndpoint | None = None,
    what: str = "the orphans stay registered and the next run retries",
    path: str = DELETE_LOCK_PATH,
) -> Iterator[DeleteLock]:
    """Hold the delete lock for the ``with`` block, or raise ``DeleteLockBusy``.

    ``bookkeeper``: BookKeeper's ensemble, when its znodes are to be deleted or
    created; ``config_store``: Pulsar's configuration store, likewise. Each one that is
    not ``endpoint`` (another ensemble, chroot or identity), nor one named before it,
    gets a lock of its own there (``BOOKKEEPER_LOCK_PATH``, ``CONFIG_STORE_LOCK_PATH``),
    taken after this one, in that order, before the block runs, so a cycle never starts
    deleting without all of them, and ``fence_for`` gives each one's fence. ``what``:
    what a caller that gets none is told happens next."""
    extra: list[tuple[ZkEndpoint, str]] = []
    for other, other_path in (
        (bookkeeper, BOOKKEEPER_LOCK_PATH),
        (config_store, CONFIG_STORE_LOCK_PATH),
    ):
        if other is not None and other != endpoint and all(other != e for e, _ in extra):
            extra.append((other, other_path))
    with _one_lock(endpoint, run_id, wait_seconds, what, path) as lock, ExitStack() as stack:
        try:
            for other, other_path in extra:
                lock._others.append(
                    stack.enter_context(_one_lock(other, run_id, wait_seconds, what, other_path))
                )
            yield lock
        finally:
            lock._others = []


@contextmanager
def _one_lock(
    endpoint: ZkEndpoint, run_id: str, wait_seconds: float, what: str, path: str
) -> Iterator[DeleteLock]:
    """The lock at ``path`` of one ensemble, held for the ``with`` block."""
    with session(endpoint) as client:
        lock = DeleteLock(client, endpoint, run_id, path=path)
        if not lock.acquire(wait_seconds):
            holder = lock.holder()
            lock.release()
            raise DeleteLockBusy(
                f"another run ({holder}) held the delete lock {path} at {endpoint.hosts} "
                f"for more than {wait_seconds:g} s (LEDGERGC_ORPHAN_LOCK_WAIT_SECONDS); "
                f"nothing was deleted or restored, {what}"
            )
        try:
            yield lock
        finally:
            lock.release()
