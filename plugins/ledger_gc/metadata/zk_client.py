"""A kazoo session built from Settings, with auth, ACLs and errors that say what failed."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry, RetryFailedError
from kazoo.security import make_digest_acl

from ledger_gc.errors import MetadataError, MetadataUnavailableError
from ledger_gc.settings import Settings

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


def connect(settings: Settings) -> KazooClient:
    """Start a session to ``settings.zk_hosts`` (chroot included) or raise a clear error."""
    acl = None
    auth_data = None
    if settings.zk_digest:
        user, sep, password = settings.zk_digest.partition(":")
        if not sep:
            raise MetadataError("LEDGERGC_ZK_DIGEST must be user:password")
        auth_data = [("digest", settings.zk_digest)]
        acl = [make_digest_acl(user, password, all=True)]
    client = KazooClient(
        hosts=settings.zk_hosts,
        timeout=settings.zk_timeout_seconds,
        auth_data=auth_data,
        default_acl=acl,
        # Bounded retries: a GC must fail closed and visibly rather than hang forever.
        connection_retry=KazooRetry(max_tries=3, delay=0.2, max_delay=2, ignore_expire=False),
        command_retry=KazooRetry(max_tries=3, delay=0.2, max_delay=2, ignore_expire=False),
    )
    try:
        client.start(timeout=settings.zk_timeout_seconds)
    except (KazooTimeoutError, *UNAVAILABLE) as exc:
        client.close()
        raise MetadataUnavailableError(
            f"ZooKeeper at {settings.zk_hosts} unreachable ({type(exc).__name__}); "
            "no metadata read, nothing deleted. Check LEDGERGC_ZK_HOSTS and that the "
            "ensemble is up."
        ) from exc
    chroot = settings.zk_chroot
    if chroot:
        try:
            if client.exists("/") is None:
                raise MetadataError(f"ZooKeeper chroot {chroot} does not exist")
        except (MetadataError, NoAuthError) as exc:
            client.stop()  # no session left open behind the error
            client.close()
            if isinstance(exc, MetadataError):
                raise
            raise MetadataError(f"no access to ZooKeeper chroot {chroot}: {exc}") from exc
    return client


@contextmanager
def session(settings: Settings) -> Iterator[KazooClient]:
    """A session for the duration of a ``with`` block."""
    client = connect(settings)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def guarded(what: str, hosts: str, call: Callable[[], T]) -> T:
    """Run a ZooKeeper call, turning session trouble into MetadataUnavailableError."""
    try:
        return call()
    except UNAVAILABLE as exc:
        raise MetadataUnavailableError(
            f"ZooKeeper at {hosts} unavailable while {what} ({type(exc).__name__}); "
            "the operation stopped and nothing was deleted"
        ) from exc
    except NoAuthError as exc:
        raise MetadataError(
            f"ZooKeeper refused access while {what}: set LEDGERGC_ZK_DIGEST to the identity "
            "that owns the metadata"
        ) from exc
