"""The TLS of a ZooKeeper session: one ``ssl.SSLContext``, built from the settings.

One builder, ``tls_context``, for kazoo's connections and for ``zk_diagnose``'s probes,
so what the diagnosis tries is what the session tried:

* trust: ``LEDGERGC_ZK_TLS_CA``'s certificates and nothing else when it is set, as the
  brokers' ``zookeeper.ssl.trustStore`` replaces the JDK's CAs (kazoo would add the
  system's store to any CA it is given: a server with any publicly trusted certificate
  would then receive the client certificate and the SASL login); the system's store only
  when no CA is set;
* the host name checked unless ``LEDGERGC_ZK_TLS_VERIFY_HOSTNAME=false``; the chain is
  verified either way;
* the client certificate and key, loaded into the context. ``ssl`` loads them from a file
  only, so they are written, the key encrypted with a one-time password, into a private
  directory (0700, the file 0600) that is removed as soon as they are loaded: nothing
  stays on disk (an ``atexit`` clean-up would not run in PySpark's workers, which end
  with ``os._exit``), and a process killed in between leaves only an encrypted key whose
  password died with it.

The context is built once per session; kazoo's reconnections reuse it (``TlsHandler``),
so rotated files take effect with the next session.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import ssl
import tempfile
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler

from ledger_gc.config.tls_material import ClientCertificate
from ledger_gc.config.zk_security import Names, ZkSecurity

#: The prefix of the private directory the client's material passes through.
SCRATCH_PREFIX = "ledgergc-zk-tls-"


def tls_context(security: ZkSecurity, names: Names) -> ssl.SSLContext:
    """The context of ``security``'s TLS (``uses_tls``): trust, host name, client."""
    ca = security.trusted_cas(names)
    # With cadata, create_default_context trusts those CAs alone; without, the system's.
    context = ssl.create_default_context(
        ssl.Purpose.SERVER_AUTH, cadata=ca.decode("ascii") if ca else None
    )
    context.check_hostname = security.verify_hostname  # CERT_REQUIRED stays
    client = security.client_certificate(names)
    if client is not None:
        _load_client(context, client)
    return context


def _load_client(context: ssl.SSLContext, client: ClientCertificate) -> None:
    password = secrets.token_urlsafe(32)
    directory = tempfile.mkdtemp(prefix=SCRATCH_PREFIX)  # mode 0700
    try:
        path = os.path.join(directory, "client.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(client.chain + client.encrypted_key(password.encode()))
        context.load_cert_chain(path, password=password)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class TlsHandler(SequentialThreadingHandler):
    """kazoo's threading handler, its TLS connections made with one ``SSLContext``.

    kazoo 2.11 builds a context of its own on each connection from file paths and always
    adds the system's CAs (``handlers.utils.create_tcp_connection``); the handler is
    kazoo's documented extension point (``KazooClient(handler=...)``), so the TCP
    connection stays kazoo's and only the TLS layer is this context's. kazoo's own TLS
    arguments (paths, ``verify_certs``) are not used: the context says all of it.
    """

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__()
        self.context = context

    def create_connection(
        self,
        address: tuple[str, int],
        hostname: str | None = None,
        timeout: float | None = None,
        use_ssl: bool = False,
        **kazoo_tls: Any,
    ) -> socket.socket:
        plain: socket.socket = super().create_connection(address, timeout=timeout)
        if not use_ssl:
            return plain
        try:
            # Connected, so the handshake runs here, bounded by the socket's time out.
            return self.context.wrap_socket(plain, server_hostname=hostname)
        except BaseException:
            plain.close()
            raise
