"""Why a ZooKeeper session could not start, in one line that names the setting to change.

kazoo retries a connection that fails for any reason (refused, a TLS handshake that
fails, a server that drops a client speaking the wrong protocol) and reports only a time
out. So when a session does not start, ``diagnose`` tries each server once more itself,
speaking as the settings say, and names what it finds:

* TLS configured (with the session's own context, ``zk_tls``): the server's certificate
  is not trusted (``LEDGERGC_ZK_TLS_CA``), does not name the host (the fix is the
  address, or the certificate's names: never turning the check off), the server wants a
  client certificate (``LEDGERGC_ZK_TLS_CERT``/``_KEY``) or refuses ours, or the port
  does not speak TLS at all (a plain ``clientPort``);
* TLS not configured: the port speaks TLS (a ``secureClientPort``: a ZooKeeper client that
  does not drops there with no answer, as Netty's TLS handler closes the connection).

Each probe is bounded by a few seconds; ``None`` means nothing was learned (every server
refused the connection: the caller's "unreachable" stands).
"""

from __future__ import annotations

import socket
import ssl
import struct

from kazoo.hosts import collect_hosts

from ledger_gc.config.zk_security import Names, ZkSecurity
from ledger_gc.errors import ConfigError

PROBE_SECONDS = 3.0
#: A ZooKeeper ConnectRequest (protocol 0, no session): a TLS server's first answer to it
#: shows whether it accepts this client's certificate (TLS 1.3 says so only after the
#: handshake, on the first read).
_CONNECT = struct.pack(">iqiqi16sB", 0, 0, 30000, 0, 16, b"\x00" * 16, 0)
_CONNECT_REQUEST = struct.pack(">i", len(_CONNECT)) + _CONNECT
_NOT_TLS = ("WRONG_VERSION_NUMBER", "UNEXPECTED_EOF", "RECORD_LAYER_FAILURE", "HTTP_REQUEST")
_CLIENT_CERT_REFUSED = ("BAD_CERTIFICATE", "UNKNOWN_CA", "CERTIFICATE_UNKNOWN", "DECRYPT_ERROR")
_CLIENT_CERT_WANTED = ("CERTIFICATE_REQUIRED", "HANDSHAKE_FAILURE")


def servers(hosts: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of a connect string (``h1:2181,[::1]/chroot``), read by
    kazoo's own parser: the servers the session tried, IPv6 brackets and all."""
    found: list[tuple[str, int]] = collect_hosts(hosts)[0]
    return found


def diagnose(
    hosts: str, security: ZkSecurity, context: ssl.SSLContext | None, names: Names
) -> ConfigError | None:
    """What stops a session to ``hosts`` that the settings can fix, or None. ``context``:
    the session's TLS context (``zk_tls.tls_context``; None without TLS)."""
    for host, port in servers(hosts):
        try:
            raw = socket.create_connection((host, port), timeout=PROBE_SECONDS)
        except OSError:
            continue  # this one is down or unreachable; another may tell
        with raw:
            if context is not None:
                found = _tls_problem(raw, host, port, context, bool(security.tls_cert), names)
            else:
                found = _speaks_tls(raw, host, port, names)
        if found is not None:
            return found
    return None


def _tls_problem(
    raw: socket.socket, host: str, port: int, context: ssl.SSLContext, has_cert: bool, names: Names
) -> ConfigError | None:
    where = f"ZooKeeper at {host}:{port}"
    try:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(_CONNECT_REQUEST)
            answer = tls.recv(4)
    except ssl.SSLCertVerificationError as exc:
        message = exc.verify_message or str(exc)
        if "mismatch" in message.lower():
            return ConfigError(
                f"{where}: its certificate does not name {host} ({message}); connect by a "
                f"name it has (LEDGERGC_ZK_HOSTS), or have the server's certificate list "
                f"{host} (a subjectAltName)"
            )
        return ConfigError(
            f"{where}: its certificate is not trusted ({message}); set {names('tls_ca')} "
            "to the CA that signed it (the brokers' zookeeper.ssl.trustStore)"
        )
    except ssl.SSLError as exc:
        reason = str(exc.reason or exc)
        if any(mark in reason for mark in _NOT_TLS) or isinstance(exc, ssl.SSLEOFError):
            return _not_tls(where, names)
        if not has_cert and any(
            mark in reason for mark in (*_CLIENT_CERT_WANTED, *_CLIENT_CERT_REFUSED)
        ):
            return _wants_cert(where, names)
        if any(mark in reason for mark in _CLIENT_CERT_REFUSED) and has_cert:
            return ConfigError(
                f"{where} refused ledger-gc's client certificate ({reason}); its truststore "
                f"must hold the CA of {names('tls_cert')}"
            )
        return ConfigError(f"{where}: the TLS handshake failed ({reason})")
    except (ConnectionResetError, BrokenPipeError):
        return _wants_cert(where, names) if not has_cert else _not_tls(where, names)
    except OSError:
        return None  # a time out: nothing learned
    if not answer:
        return _wants_cert(where, names) if not has_cert else None
    return None


def _not_tls(where: str, names: Names) -> ConfigError:
    return ConfigError(
        f"{where} does not speak TLS (it is a plain clientPort); point LEDGERGC_ZK_HOSTS at "
        f"the servers' secureClientPort (2281 in Pulsar's Helm chart), or set "
        f"{names('tls')}=false"
    )


def _wants_cert(where: str, names: Names) -> ConfigError:
    return ConfigError(
        f"{where} asks for a client certificate (ssl.clientAuth=need): set "
        f"{names('tls_cert')} and {names('tls_key')} (the brokers' zookeeper.ssl.keyStore)"
    )


def _speaks_tls(raw: socket.socket, host: str, port: int, names: Names) -> ConfigError | None:
    """A plain client failed: does the port speak TLS? (A TLS handshake that gets a
    server hello, or a TLS alert, says so; a plain port closes on it.)"""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with context.wrap_socket(raw, server_hostname=host):
            pass
    except ssl.SSLError as exc:
        reason = str(exc.reason or exc)
        if isinstance(exc, ssl.SSLEOFError) or any(mark in reason for mark in _NOT_TLS):
            return None
    except OSError:
        return None
    return ConfigError(
        f"ZooKeeper at {host}:{port} speaks TLS (a secureClientPort): set {names('tls')}=true "
        f"and {names('tls_ca')} (its CA), or point LEDGERGC_ZK_HOSTS at the plain clientPort"
    )
