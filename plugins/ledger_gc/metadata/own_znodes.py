"""Taking back ledger-gc's own znodes that an older ledger-gc left open.

Before issue 33 a session with a SASL login created ``/ledger-gc`` and its locks with
ZooKeeper's open ACL (``world:anyone`` ALL); a session now creates them with its
identity's (``zk_client.own_acl``), but ZooKeeper keeps the ACL a znode was created with,
so on an upgraded cluster anyone could still park a lock node. So before a lock or the
clock's tick is used, ``reclaim`` looks at that znode and its parents up to
``/ledger-gc``: one whose ACL is exactly the open one an older ledger-gc gave it is given
the session's ACL (``setAcl``, which its open ACL allows). An ACL with any other entry is
an operator's choice (the README's "ZooKeeper ACLs": runs of several identities) and is
left alone. A session without a login (no ACL of its own) changes nothing.

A node parked in a lock's dir while it was open stays there once the dir is taken back.
A live holder's is ephemeral (kazoo's lock and the trim's holders are), and goes with its
session; a persistent one is no ledger-gc run's and would hold the lock for good, with
whatever text its maker chose: ``clear_parked`` removes those (the dir's DELETE, which
its ACL gives the session, is what ZooKeeper checks).
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.security import ACL, OPEN_ACL_UNSAFE

log = logging.getLogger(__name__)

ROOT = "/ledger-gc"
#: The ACL an older ledger-gc gave its znodes under SASL: ZooKeeper's open one.
_OLD_OPEN = [(a.perms, a.id.scheme, a.id.id) for a in OPEN_ACL_UNSAFE]


def reclaim(client: KazooClient, hosts: str, path: str) -> list[str]:
    """Give ``path`` and its parents below ``ROOT`` (``ROOT`` included) the session's
    ACL where theirs is exactly the old open one; returns the znodes changed. Best effort: a znode
    it may not read or change is left as it is (the use that follows says why)."""
    own: list[ACL] | None = client.default_acl
    if not own or not (path == ROOT or path.startswith(ROOT + "/")):
        return []
    parts = path[len(ROOT) :].strip("/").split("/")
    chain = [ROOT] + [f"{ROOT}/{'/'.join(parts[: i + 1])}" for i in range(len(parts)) if parts[i]]
    changed = []
    for znode in chain:
        try:
            acl, stat = client.get_acls(znode)
        except KazooException:  # not there yet (it will be created right), or not ours
            continue
        if [(a.perms, a.id.scheme, a.id.id) for a in acl] != _OLD_OPEN:
            continue
        try:
            client.set_acls(znode, own, version=stat.aversion)
        except KazooException as exc:
            log.warning("could not take back %s at %s (%s)", znode, hosts, type(exc).__name__)
            continue
        log.warning(
            "%s at %s could be changed by anyone (an older ledger-gc's ACL); it now has "
            "this session's identity's ACL",
            znode,
            hosts,
        )
        changed.append(znode)
    return changed


def clear_parked(client: KazooClient, hosts: str, lock_dir: str) -> list[str]:
    """Remove the persistent nodes in ``lock_dir`` (a lock's dir, whose holders are all
    ephemeral), which no session's end removes; returns them. Best effort, as
    ``reclaim``: a node it may not remove is left (the lock then says who holds it)."""
    try:
        children = client.get_children(lock_dir)
    except KazooException:
        return []
    removed = []
    for child in children:
        node = f"{lock_dir}/{child}"
        try:
            stat = client.exists(node)
            if stat is None or stat.ephemeralOwner != 0:
                continue
            client.delete(node, version=stat.version)
        except KazooException as exc:
            log.warning("could not remove %s at %s (%s)", node, hosts, type(exc).__name__)
            continue
        log.warning(
            "%s at %s was a persistent node in a lock's dir, which no ledger-gc run makes "
            "(a lock's holders are ephemeral): removed, as it would hold the lock for good",
            node,
            hosts,
        )
        removed.append(node)
    return removed
