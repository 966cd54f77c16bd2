"""Who ZooKeeper says this session is, and what a ``NoAuth`` refusal means, in one line.

ZooKeeper answers ``NoAuth`` with no detail. Which permission it checked follows from the
operation (ZooKeeper's ``PrepRequestProcessor`` and ``FinalRequestProcessor``): a read or
a listing needs READ on the znode, a delete needs DELETE on its **parent**, a create
CREATE on its parent. BookKeeper with ``zkEnableSecurity=true`` creates every ledger
znode and its parents with CREATOR_ALL, i.e. ``sasl:<the bookies' principal>``, so
another identity can neither list, read nor delete them.

``refusal`` turns one refused operation into a ``MetadataAccessError`` that names:

* the identity the server sees, asked with ZooKeeper's ``whoAmI`` (3.7+): ``sasl:...``,
  ``digest:...``, ``x509:...``, or "no identity (anonymous)" (the ``ip`` identity every
  connection has is left out); an older server: "the identity ledger-gc connects as";
* the permission, and the znode it is checked on (the parent, for a delete or create);
* who has that permission, read from the znode's ACL where this identity may read it,
  and the setting that would connect as one of them: for a ``sasl:`` ACL, SASL (never
  ``LEDGERGC_ZK_DIGEST``, which cannot give that identity).
"""

from __future__ import annotations

import logging
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.protocol.serialization import int_struct, read_string
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions

from ledger_gc.config.zk_security import CONFIG_STORE_PREFIX, PULSAR_NAMES, Names
from ledger_gc.errors import MetadataAccessError

log = logging.getLogger(__name__)

READ = "READ"
WRITE = "WRITE"
CREATE = "CREATE"
DELETE = "DELETE"
ADMIN = "ADMIN"
_BITS = {
    READ: Permissions.READ,
    WRITE: Permissions.WRITE,
    CREATE: Permissions.CREATE,
    DELETE: Permissions.DELETE,
    ADMIN: Permissions.ADMIN,
}
#: ZooKeeper's OpCode.whoAmI (ZooKeeper 3.7+).
WHO_AM_I = 107
ANONYMOUS = "no identity (anonymous)"


class WhoAmI:
    """ZooKeeper's ``whoAmI`` request in kazoo's request protocol: no body; the answer
    is the session's identities as (scheme, user) pairs. (Not an empty namedtuple:
    kazoo hands a response only to a request that is true.)"""

    type = WHO_AM_I

    def __repr__(self) -> str:
        return "WhoAmI()"

    def serialize(self) -> bytearray:
        return bytearray()

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> list[tuple[str, str]]:
        count = int_struct.unpack_from(buffer, offset)[0]
        offset += int_struct.size
        identities = []
        for _ in range(max(count, 0)):
            scheme, offset = read_string(buffer, offset)
            user, offset = read_string(buffer, offset)
            identities.append((scheme or "", user or ""))
        return identities


def who_am_i(client: KazooClient, timeout: float = 5.0) -> list[tuple[str, str]] | None:
    """The session's identities as the server sees them; None when it cannot say (a
    server older than 3.7 answers UNIMPLEMENTED, or the session is in trouble)."""
    try:
        answer = client.handler.async_result()
        client._call(WhoAmI(), answer)
        return list(answer.get(timeout=timeout))
    except Exception as exc:  # only a message depends on it
        log.debug("whoAmI failed: %s", exc)
        return None


def describe(identities: list[tuple[str, str]] | None) -> str:
    """``sasl:bookkeeper`` (a TLS client certificate's identity after it: ``(also
    x509:CN=...)``), or "no identity (anonymous)"; the ``ip`` identity every connection
    has is left out. Unknown (a server older than 3.7): said so."""
    if identities is None:
        return "the identity ledger-gc connects as"
    order = {"sasl": 0, "digest": 1, "x509": 2}
    named = sorted(
        (f"{scheme}:{user}" for scheme, user in identities if scheme != "ip"),
        key=lambda who: order.get(who.partition(":")[0], 3),
    )
    if not named:
        return ANONYMOUS
    return named[0] + (f" (also {', '.join(named[1:])})" if len(named) > 1 else "")


def holder(acl: ACL) -> str:
    """One ACL entry's identity, as ``describe`` writes it (a digest's hash left out)."""
    scheme, ident = acl.id.scheme, acl.id.id
    if scheme == "digest":
        ident = ident.partition(":")[0]
    return f"{scheme}:{ident}"


def _fix(holders: list[str], permission: str, names: Names) -> str:
    """What to set so that ledger-gc connects as one who has the permission: the
    ensemble's own settings (``LEDGERGC_BK_ZK_*`` on BookKeeper's). Pulsar's
    configuration store is written by the brokers, never by the bookies: its fix names
    the brokers' identity."""
    brokers = names.prefix == CONFIG_STORE_PREFIX
    for who in holders:
        scheme, _, ident = who.partition(":")
        if scheme == "sasl":
            why = (
                "the brokers' identity: Pulsar's brokers write the configuration store"
                if brokers
                else "BookKeeper with zkEnableSecurity=true gives ledger znodes and their "
                "parents to the bookies' SASL identity"
            )
            return (
                f"connect as {ident} with SASL ({names.own('sasl_username')}, or "
                f"{names.own('jaas')} with that login; GSSAPI: its keytab): {why}"
            )
        if scheme == "digest":
            return f"set {names.digest} to {ident}'s user:password"
        if scheme == "x509":
            return f"connect with {ident}'s client certificate ({names.own('tls_cert')})"
        if scheme == "ip":
            return f"run ledger-gc from {ident}"
    if brokers:
        return (
            f"connect as an identity that has {permission} there, the brokers' (their SASL "
            f"login: {names.own('sasl_username')} or {names.own('jaas')}; or "
            f"{names.digest}), or grant it to ledger-gc's (setAcl)"
        )
    return (
        f"connect as an identity that has {permission} there: for BookKeeper with "
        f"zkEnableSecurity=true, the bookies' SASL identity ({names.own('sasl_username')} or "
        f"{names.own('jaas')}); else grant it to ledger-gc's (setAcl)"
    )


def refusal(
    client: KazooClient,
    hosts: str,
    *,
    what: str,
    permission: str,
    znode: str,
    checked: str | None = None,
    names: Names = PULSAR_NAMES,
    fix: str | None = None,
) -> MetadataAccessError:
    """The error of one refused operation: ``permission`` on ``checked`` (``znode``
    itself, or its parent for a delete or create), the identity, who has it, the fix
    (``fix``, else the one for BookKeeper's and Pulsar's znodes)."""
    checked = checked or znode
    identity = describe(who_am_i(client))
    where = checked if checked == znode else f"{checked}, the parent of {znode}"
    text = f"{names.at(hosts)} refused {what}: {identity} lacks {permission} on {where}"
    acl = _acl(client, checked)
    holders: list[str] = []
    if acl is None:
        text += " (whose ACL it cannot read either)"
    else:
        holders = [holder(entry) for entry in acl if entry.perms & _BITS[permission]]
        given = ", ".join(holders) if holders else "no one"
        text += f", whose ACL gives it to {given}"
    text += f"; {fix or _fix(holders, permission, names)}"
    return MetadataAccessError(text, identity=identity, permission=permission, znode=checked)


def own_refusal(
    client: KazooClient,
    hosts: str,
    *,
    what: str,
    znode: str,
    names: Names = PULSAR_NAMES,
) -> MetadataAccessError:
    """The error of a refused operation on one of ledger-gc's own znodes (``znode``: a
    lock's path, ``/ledger-gc/ticks``), which it creates with ``makepath``, lists, and
    creates children in.

    Which check failed is found out: the deepest of ``znode`` and its parents that
    exists (``exists`` needs no permission) is where the refusal was. Below it a znode
    was to be created: CREATE on it. At ``znode`` itself: READ if it cannot be listed,
    else CREATE (a child). Its ACL is named where it can be read. These znodes carry
    their creator's identity (``zk_client.own_acl``), so the fix is to connect as that
    identity, or to change their ACL by hand."""
    at = znode
    while at != "/" and _exists(client, at) is False:
        at = at.rsplit("/", 1)[0] or "/"
    if at != znode:
        below = znode[len(at.rstrip("/")) + 1 :].split("/", 1)[0]
        permission, target = CREATE, f"{at.rstrip('/')}/{below}"
    elif _listable(client, at):
        permission, target = CREATE, f"{at}/<a node of its own>"
    else:
        permission, target = READ, at
    return refusal(
        client,
        hosts,
        what=what,
        permission=permission,
        znode=target,
        checked=at,
        names=names,
        fix=(
            f"{at} is ledger-gc's and carries the identity of the run that created it: every "
            "ledger-gc run of a cluster must connect as one identity (the README's "
            '"ZooKeeper ACLs"), so connect as the identity that created it, or have an operator '
            f"give this identity READ, CREATE and DELETE on {at} and below (setAcl). Nothing "
            "was deleted"
        ),
    )


def _exists(client: KazooClient, znode: str) -> bool | None:
    """Whether ``znode`` exists (None: the session cannot say)."""
    try:
        return client.exists(znode) is not None
    except Exception:  # a message depends on it, nothing else
        return None


def _listable(client: KazooClient, znode: str) -> bool:
    """Whether this session may list ``znode`` (READ)."""
    try:
        client.get_children(znode)
        return True
    except NoAuthError:
        return False
    except Exception:  # a message depends on it, nothing else
        return True


def _acl(client: KazooClient, znode: str) -> list[ACL] | None:
    """The znode's ACL, or None where it cannot be read (ZooKeeper asks READ or ADMIN)."""
    try:
        acl: Any = client.get_acls(znode)[0]
        return list(acl)
    except Exception:  # a message depends on it, nothing else
        return None


def acl_rows(acls: list[ACL]) -> list[list[Any]]:
    """An ACL as an audit record keeps it: ``[perms, scheme, id]`` rows (JSON)."""
    return [[a.perms, a.id.scheme, a.id.id] for a in acls]


def acl_of_rows(rows: Any) -> list[ACL]:
    """The ACL an audit record kept (``acl_rows``), for a restore to create the znode
    with as it was; none kept (an older record): ZooKeeper's open ACL, which is what
    BookKeeper and Pulsar create their znodes with when no login is configured."""
    if not rows:
        return list(OPEN_ACL_UNSAFE)
    return [ACL(int(perms), Id(str(scheme), str(ident))) for perms, scheme, ident in rows]
