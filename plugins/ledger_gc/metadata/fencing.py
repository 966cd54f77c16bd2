"""Writes that ZooKeeper applies only while a lock is still held: fenced by its node.

A lock holder can be frozen past its session (a long GC pause, a suspended VM) with a
write about to be sent. Its session expires, another process takes the lock, and the
first one wakes up and sends the write: nothing in the frozen process can stop it (its
listeners and checks ran before the pause). Only the server can refuse it, so every
destructive write of ledger-gc's BookKeeper path is one ZooKeeper ``multi``:

    check(<our lock node>, <its version>) + delete(<ledger znode>, <version read>)

sent on the lock's own session (Chubby's sequencers, Kleppmann's fencing tokens). The
lock node is ephemeral and sequential: once the session that made it is gone, so is the
node, and no later lock holder ever has the same path. The ``check`` therefore fails
(``NoNode``), and ZooKeeper applies neither operation, whichever session the request
arrives on (kazoo opens a new session after an expiry and would send it there).

``Fence.delete`` and ``Fence.create`` return what ZooKeeper answered as a
``FencedOutcome``; a session that cannot answer raises ``MetadataUnavailableError``
(``guarded``), which the caller treats as "sent, answer lost": applied or not, it was
applied only while the lock was held. Once the lock node is gone (``Fence.over``), no
write fenced by it can be applied any more, and one that was is ordered before the
node's removal: a synced read after that tells whether a write whose answer was lost
was applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)

from ledger_gc.metadata import zk_access
from ledger_gc.metadata.zk_client import guarded

if TYPE_CHECKING:
    from ledger_gc.config.endpoints import ZkEndpoint


class FencedOutcome(StrEnum):
    """What ZooKeeper answered to one fenced write."""

    APPLIED = "applied"
    FENCE_LOST = "fence-lost"  # the lock node is gone: another process may hold the lock
    CHANGED = "changed"  # the target's version moved since it was read
    MISSING = "missing"  # the target (or, for a create, its parent) does not exist
    EXISTS = "exists"  # a create whose target exists
    NOT_EMPTY = "not-empty"  # a delete of a znode with children
    NO_AUTH = "no-auth"  # the session's identity lacks the permission


#: ZooKeeper's error of the failed operation -> the outcome (the others report
#: RolledBack or RuntimeInconsistency).
_OUTCOMES: dict[type[Exception], FencedOutcome] = {
    BadVersionError: FencedOutcome.CHANGED,
    NoNodeError: FencedOutcome.MISSING,
    NodeExistsError: FencedOutcome.EXISTS,
    NotEmptyError: FencedOutcome.NOT_EMPTY,
    NoAuthError: FencedOutcome.NO_AUTH,
}


@dataclass
class Fence:
    """A held lock's node, and the session that holds it: writes go on that session.

    ``gone`` says why, once the server showed the node gone (a refused check, a look,
    ``end``): the lock's holder reads it as the lock lost, whatever its listener heard."""

    client: KazooClient
    hosts: str  # for messages
    path: str  # the lock node, below the session's chroot
    version: int  # the lock node's data version when it was made (never changed)
    gone: str | None = None

    def delete(self, znode: str, version: int) -> FencedOutcome:
        """Delete ``znode`` at ``version`` (never -1), only while the lock is held."""
        if version < 0:
            raise ValueError(f"a fenced delete of {znode} needs the version read, not {version}")
        transaction = self.client.transaction()
        transaction.check(self.path, self.version)
        transaction.delete(znode, version)
        return self._commit(f"deleting {znode}", transaction)

    def create(self, znode: str, data: bytes, acl: list[Any]) -> FencedOutcome:
        """Create ``znode`` (its parent must exist), only while the lock is held."""
        transaction = self.client.transaction()
        transaction.check(self.path, self.version)
        transaction.create(znode, data, acl=acl)
        return self._commit(f"creating {znode}", transaction)

    def held(self) -> bool:
        """Whether the lock node is still there, as the server has it now: for writes
        that cannot carry the check (an S3 delete), the last look before sending. A
        pause after it is not covered; only a fenced write is."""
        return not self.over(self.client)

    def over(self, via: KazooClient) -> bool:
        """Whether the lock node is gone (``sync``, then read with ``via``: any session of
        the same ensemble and chroot, since this fence's own may be the one that
        failed). Then no write fenced by it can be applied any more (its check would
        fail), and one that was came before the node's removal."""

        def look() -> bool:
            via.sync(self.path)
            stat = via.exists(self.path)
            return stat is None or stat.version != self.version

        if guarded(f"checking the lock node {self.path}", self.hosts, look):
            self.gone = self.gone or "its node is gone (seen on the server)"
        return self.gone is not None

    def end(self) -> None:
        """Remove the lock node, best effort (its session ends it anyway): after a write
        whose answer was lost, so that ``over`` can say the write will never apply."""
        try:
            guarded(
                f"ending the lock {self.path}",
                self.hosts,
                lambda: self.client.delete(self.path, version=self.version),
            )
        except Exception:  # unreachable, or gone already: ``over`` tells which
            return
        self.gone = self.gone or "ledger-gc removed its node after a write's answer was lost"

    def _commit(self, what: str, transaction: Any) -> FencedOutcome:
        results = guarded(what, self.hosts, transaction.commit)
        check, write = results[0], results[1]
        if isinstance(check, Exception) and not isinstance(
            check, RolledBackError | RuntimeInconsistency
        ):
            # NoNode or BadVersion of the lock node itself
            self.gone = self.gone or "ZooKeeper refused a write fenced by its node"
            return FencedOutcome.FENCE_LOST
        if isinstance(write, Exception):
            for error, outcome in _OUTCOMES.items():
                if isinstance(write, error):
                    return outcome
            raise write
        return FencedOutcome.APPLIED


def create_refusal(endpoint: ZkEndpoint, fence: Fence, znode: str, outcome: FencedOutcome) -> str:
    """Why a restore's fenced create of ``znode`` was not applied, for its report and its
    ``not-restored`` audit record. A ``NoAuth`` is said with the identity of the session
    the create went on and who has CREATE on the parent (what ZooKeeper checks)."""
    parent = znode.rsplit("/", 1)[0] or "/"
    if outcome is FencedOutcome.FENCE_LOST:
        return (
            f"ZooKeeper refused to re-create {znode}: the delete lock's node {fence.path} is "
            "gone (its session ended: an orphan cycle may hold the lock now); run the "
            "restore again"
        )
    if outcome is FencedOutcome.EXISTS:
        return f"{znode} was created by someone else meanwhile: not replaced"
    if outcome is FencedOutcome.MISSING:
        return f"{parent} vanished before {znode} could be re-created; run the restore again"
    if outcome is FencedOutcome.NO_AUTH:
        return str(
            zk_access.refusal(
                fence.client,
                endpoint.hosts,
                what=f"re-creating {znode}",
                permission=zk_access.CREATE,
                znode=znode,
                checked=parent,
                names=endpoint.names,
            )
        )
    return f"ZooKeeper refused to re-create {znode} ({outcome})"
