"""A kazoo session to a ``ZkEndpoint``: TLS, SASL, digest auth, ACLs, clear errors.

``connect`` is the one place a session is opened, for the CLI, every DAG task and every
Spark executor alike. It says to kazoo what the endpoint says, as the edge resolved it
from the settings (``ledger_gc.config.endpoints``, ``ledger_gc.config.zk_security``):

* TLS (``LEDGERGC_ZK_TLS``): the server's certificate verified against the configured
  CAs alone (else the system's) and its host name checked, a client certificate when
  set: one ``SSLContext`` per set of TLS material and process (``zk_tls``), which
  kazoo's connections use through ``zk_tls.TlsHandler``;
* SASL (``LEDGERGC_ZK_SASL_*`` or a JAAS file): DIGEST-MD5 or GSSAPI through
  ``pure-sasl``; a Kerberos ticket is asked for first, so a missing keytab is its own
  error rather than a refused session; a server that does not speak SASL ends the login
  at its first (empty) answer (``zk_sasl``), not at the session's expiry;
* digest auth (``LEDGERGC_ZK_DIGEST``);
* the ACL of what ledger-gc creates (``own_acl``): the session's identity's, whatever
  the login, never ``world:anyone`` ALL where one is configured.

A session that does not start fails within seconds, not at the time out: a state
listener sees kazoo give up, and ``zk_diagnose`` names the cause it can (a plain client
on a TLS port, an untrusted certificate, a missing client certificate). SASL completes
after the session is connected, so a first request shows whether the server accepted
the login.

Errors name the ensemble's own settings (``Names.own``): ``LEDGERGC_BK_ZK_*`` on
BookKeeper's sessions, whichever of Pulsar's values they take.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionLoss,
    InvalidACLError,
    NoAuthError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KeeperState
from kazoo.retry import KazooRetry, RetryFailedError
from kazoo.security import ACL, CREATOR_ALL_ACL

from ledger_gc.config.endpoints import ZkEndpoint
from ledger_gc.config.jaas import GSSAPI, ZooKeeperLogin
from ledger_gc.config.zk_security import Names, ZkSecurity
from ledger_gc.errors import (
    ConfigError,
    MetadataAccessError,
    MetadataError,
    MetadataUnavailableError,
)
from ledger_gc.metadata import zk_sasl
from ledger_gc.metadata.zk_diagnose import diagnose, servers
from ledger_gc.metadata.zk_tls import TlsHandler, tls_context

log = logging.getLogger(__name__)
T = TypeVar("T")

# What kazoo raises when the session cannot answer: none of these may ever be read as
# "the node is not there".
UNAVAILABLE = (
    ConnectionLoss,
    ConnectionClosedError,
    SessionExpiredError,
    OperationTimeoutError,
    KazooTimeoutError,
    RetryFailedError,
)
#: kazoo's connection states once it stopped trying.
_GAVE_UP = (KeeperState.CLOSED, KeeperState.AUTH_FAILED, KeeperState.EXPIRED_SESSION)


def connect(endpoint: ZkEndpoint) -> KazooClient:
    """Start a session to ``endpoint`` (its chroot included) or raise a clear error:
    ``ConfigError`` for what a setting can fix (TLS, SASL), ``MetadataUnavailableError``
    for an ensemble that does not answer."""
    security = endpoint.security
    names = endpoint.names
    hosts = endpoint.hosts
    auth_data = None
    if endpoint.digest:
        _, sep, _ = endpoint.digest.partition(":")
        if not sep:
            raise MetadataError("LEDGERGC_ZK_DIGEST must be user:password")
        auth_data = [("digest", endpoint.digest)]
    context = _context(endpoint) if security.uses_tls else None
    login = endpoint.login()
    acl = own_acl(
        digest=endpoint.digest,
        login=login,
        client_certificate=security.uses_tls and bool(security.tls_cert),
    )
    if login is not None and login.mechanism == GSSAPI:
        _check_kerberos(hosts, security, login, names)
    quiet = _StartingLog()
    client = KazooClient(
        hosts=hosts,
        logger=quiet,
        timeout=endpoint.timeout_seconds,
        auth_data=auth_data,
        default_acl=acl,
        sasl_options=_sasl_options(security, login),
        # Bounded retries: a GC must fail closed and visibly rather than hang forever.
        connection_retry=KazooRetry(max_tries=3, delay=0.2, max_delay=2, ignore_expire=False),
        command_retry=KazooRetry(max_tries=3, delay=0.2, max_delay=2, ignore_expire=False),
        # kazoo's TLS arguments stay unset: the handler's context says all of it.
        handler=TlsHandler(context) if context is not None else None,
        use_ssl=context is not None,
    )
    sasl = zk_sasl.guard(client) if login is not None else None
    started = _started(client, endpoint.timeout_seconds)
    if not started:
        # The login may end before kazoo reports the session connected (its state goes
        # from connecting straight to auth-failed): the guard still saw why.
        if login is not None and sasl is not None and sasl.empty_challenge:
            raise zk_sasl.not_spoken(hosts, login, security, names)
        if login is not None and sasl is not None and sasl.refused:
            raise zk_sasl.refused(hosts, login, security, names)
        found = diagnose(hosts, security, context, names)
        if found is not None:
            raise found
        raise MetadataUnavailableError(
            f"{names.at(hosts)} unreachable; no metadata read, nothing "
            f"deleted. Check {names('hosts')} and that the ensemble is up."
        )
    try:
        # The first request: it waits for the SASL login, which follows the connection.
        root = client.exists("/")
    except (AuthFailedError, *UNAVAILABLE) as exc:
        _close(client)
        if login is None:
            raise MetadataUnavailableError(
                f"{names.at(hosts)} closed the session as it started "
                f"({type(exc).__name__}); no metadata read, nothing deleted"
            ) from exc
        if sasl is not None and sasl.empty_challenge:
            raise zk_sasl.not_spoken(hosts, login, security, names) from exc
        raise zk_sasl.refused(hosts, login, security, names) from exc
    # kazoo's warnings until now (a refused login among them) are summed up above.
    quiet.starting = False
    chroot = endpoint.chroot
    if chroot and root is None:
        _close(client)
        raise MetadataError(f"ZooKeeper chroot {chroot} does not exist")
    return client


#: The TLS context of each set of material (the CAs, the client certificate and key, the
#: host name check), built once per process and shared by the sessions that use it
#: (never pickled: an executor builds its own from the endpoint's portable material).
#: Keyed by what the files held, not by their paths: rotated files are new material.
_CONTEXTS: dict[tuple[Any, ...], ssl.SSLContext] = {}
_CONTEXTS_LOCK = threading.Lock()


def _context(endpoint: ZkEndpoint) -> ssl.SSLContext:
    security, names = endpoint.security, endpoint.names
    cas = security.trusted_cas(names)
    if cas is None:
        # The system's CAs, as OpenSSL finds them now (SSL_CERT_FILE may have changed):
        # a context of its own for each session, as before.
        return tls_context(security, names)
    client = security.client_certificate(names)
    key = (cas, None if client is None else (client.chain, client.key), security.verify_hostname)
    with _CONTEXTS_LOCK:
        context = _CONTEXTS.get(key)
        if context is None:
            context = _CONTEXTS[key] = tls_context(security, names)
        return context


def own_acl(
    *, digest: str | None, login: ZooKeeperLogin | None, client_certificate: bool
) -> list[ACL] | None:
    """The ACL of every znode ledger-gc creates (its locks, its clock's ticks, its probes
    under ``/ledger-gc``): the session's default, so no create can forget it.

    With a login (``LEDGERGC_ZK_DIGEST``, SASL, a TLS client certificate) it is
    ZooKeeper's CREATOR_ALL: ALL for each identity the session authenticated as
    (``digest:``, ``sasl:`` after the server's principal stripping, ``x509:``), worked
    out by the server, so GSSAPI's principal need not be guessed here. Every ledger-gc
    run of a cluster must then connect as the same identity (the README's "ZooKeeper
    ACLs"). Without one: None, kazoo's ``world:anyone`` ALL, the only ACL an anonymous
    session may set (CREATOR_ALL needs an authenticated identity)."""
    if digest or login is not None or client_certificate:
        return list(CREATOR_ALL_ACL)
    return None


class _StartingLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """kazoo's log for one session. While it starts, kazoo's warnings (each refused or
    dropped connection attempt) are what ``connect`` sums up in its one-line error, so
    they go at DEBUG; from then on, at their own level."""

    def __init__(self) -> None:
        super().__init__(logging.getLogger("kazoo.client"), {})
        self.starting = True

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if self.starting and level > logging.INFO:
            level = logging.DEBUG
        super().log(level, msg, *args, **kwargs)


def _sasl_options(security: ZkSecurity, login: ZooKeeperLogin | None) -> dict[str, Any] | None:
    """pure-sasl's options, as kazoo passes them (DIGEST-MD5's realm is ZooKeeper's
    fixed ``zk-sasl-md5``, which kazoo sets itself)."""
    if login is None:
        return None
    options: dict[str, Any] = {"mechanism": login.mechanism, "service": security.service}
    if login.username:
        options["username" if login.mechanism != GSSAPI else "principal"] = login.username
    if login.password:
        options["password"] = login.password
    return options


def _started(client: KazooClient, timeout: float) -> bool:
    """Start the session; False as soon as kazoo gives up (its connection retries are
    bounded), not only at the time out. kazoo reports no state change then (its state
    was "lost" before it started), so its connection state is watched: connecting, then
    closed is a start that failed. Between two of its retries it stays connecting for
    0.2 s or more, longer than a turn of this loop."""
    live = client.start_async()
    deadline = time.monotonic() + timeout
    connecting = False
    while not live.wait(0.02) and time.monotonic() < deadline:
        state = client.client_state
        if state == KeeperState.CONNECTING:
            connecting = True
        elif connecting and state in _GAVE_UP:
            break
    if live.is_set() and client.connected:
        return True
    _close(client)
    return False


def _close(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()


def _check_kerberos(hosts: str, security: ZkSecurity, login: ZooKeeperLogin, names: Names) -> None:
    """Get a service ticket for the first server before kazoo does: pure-sasl's GSSAPI
    failure reaches kazoo's connection thread only as "AUTH_FAILED", without why."""
    import kerberos

    host = servers(hosts)[0][0]
    service = f"{security.service}@{host}"
    context = None
    try:
        if login.username:
            _, context = kerberos.authGSSClientInit(service, principal=login.username)
        else:
            _, context = kerberos.authGSSClientInit(service)
        kerberos.authGSSClientStep(context, "")
    except kerberos.GSSError as exc:
        principal = login.username or "ledger-gc's principal"
        # A JAAS file's keyTab is the JVM's; MIT Kerberos reads the client keytab from
        # KRB5_CLIENT_KTNAME, which ledger-gc leaves to the environment.
        keytab = (
            f"KRB5_CLIENT_KTNAME={login.keytab} (the JAAS file's keyTab of {principal})"
            if login.keytab
            else f"KRB5_CLIENT_KTNAME to the keytab of {principal}"
        )
        raise ConfigError(
            f"GSSAPI: no Kerberos ticket for {security.service}/{host} ({_gss_text(exc)}); "
            f"set {keytab} (and KRB5_CONFIG when the realm is not in /etc/krb5.conf), or "
            f"{names.own('sasl_service')} to the servers' service"
        ) from None
    finally:
        if context is not None:
            kerberos.authGSSClientClean(context)


def _gss_text(exc: Exception) -> str:
    """GSSError's (major, minor) message pairs as one phrase."""
    parts = []
    for arg in exc.args:
        text = arg[0] if isinstance(arg, tuple) and arg else arg
        if text and str(text) not in parts:
            parts.append(str(text))
    return ": ".join(parts) or type(exc).__name__


@contextmanager
def session(endpoint: ZkEndpoint) -> Iterator[KazooClient]:
    """A session for the duration of a ``with`` block."""
    client = connect(endpoint)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def guarded(
    what: str,
    hosts: str,
    call: Callable[[], T],
    *,
    refused: Callable[[], MetadataAccessError] | None = None,
) -> T:
    """Run a ZooKeeper call, turning session trouble into MetadataUnavailableError and a
    refusal (``NoAuth``) into MetadataAccessError: ``refused()``'s, which names the
    identity, the permission and the znode (``MetadataStore.refusal``), where the caller
    knows them."""
    try:
        return call()
    except UNAVAILABLE as exc:
        raise MetadataUnavailableError(
            f"ZooKeeper at {hosts} unavailable while {what} ({type(exc).__name__}); "
            "the operation stopped and nothing was deleted"
        ) from exc
    except AuthFailedError as exc:
        # The login refused as kazoo reconnected (to another member, or a restarted
        # server): it stops the session and fails what is in flight. ``connect`` names
        # a first login's refusal; this is one that had been accepted before.
        raise MetadataUnavailableError(
            f"ZooKeeper at {hosts} refused the session's login while {what}, on "
            "reconnecting (AuthFailed: a server of the ensemble without the SASL "
            "authProvider, or a login the servers no longer accept); the operation "
            "stopped and nothing was deleted"
        ) from exc
    except InvalidACLError as exc:
        # ``own_acl``'s CREATOR_ALL with no identity the server authenticated: a client
        # certificate it does not check (no ssl.clientAuth), and no SASL or digest login.
        raise MetadataAccessError(
            f"ZooKeeper at {hosts} refused the ACL of {what}: ledger-gc gives what it "
            "creates to the identity its session authenticated as, and the server saw none; "
            "configure SASL or LEDGERGC_ZK_DIGEST, or have the servers authenticate client "
            "certificates (ssl.clientAuth=need). Nothing was deleted"
        ) from exc
    except NoAuthError as exc:
        if refused is not None:
            raise refused() from exc
        raise MetadataAccessError(
            f"ZooKeeper at {hosts} refused {what} (NoAuth): the identity ledger-gc connects "
            "as lacks a permission there; connect as the identity its ACL names (SASL, "
            "LEDGERGC_ZK_DIGEST or a client certificate). Nothing was deleted"
        ) from exc
