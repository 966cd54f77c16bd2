"""Why a ZooKeeper session could not start, in one line that names the setting to change.

kazoo retries a connection that fails for any reason (refused, a TLS handshake that
fails, a server that drops a client speaking the wrong protocol) and reports only a time
out. So when a session does not start, ``diagnose`` tries each server once more itself,
speaking as the settings say, and names what it finds:

* TLS configured (with the session's own context, ``zk_tls``): the server's certificate
  is not trusted (``LEDGERGC_ZK_TLS_CA``), has expired or is not valid yet (its dates:
  no setting fixes that), does not name the host (the fix is the address, or the
  certificate's names: never turning the check off), the server wants a client
  certificate (``LEDGERGC_ZK_TLS_CERT``/``_KEY``) or refuses ours (out of date: its
  dates), or the port does not speak TLS at all (a plain ``clientPort``);
* TLS not configured: the port speaks TLS (a ``secureClientPort``: a ZooKeeper client that
  does not drops there with no answer, as Netty's TLS handler closes the connection).

Each probe is bounded by a few seconds; ``None`` means nothing was learned (every server
refused the connection: the caller's "unreachable" stands). The settings an error names
are the ensemble's own (``Names.own``: ``LEDGERGC_BK_ZK_*`` for BookKeeper's), with
the Pulsar values it takes said after them.
"""

from __future__ import annotations

import socket
import ssl
import struct
from datetime import UTC, datetime

from kazoo.hosts import collect_hosts

from ledger_gc.config.zk_security import TLS_PARTS, Names, ZkSecurity
from ledger_gc.errors import ConfigError
from ledger_gc.metadata.zk_tls import tls_context

PROBE_SECONDS = 3.0
#: A ZooKeeper ConnectRequest (protocol 0, no session): a TLS server's first answer to it
#: shows whether it accepts this client's certificate (TLS 1.3 says so only after the
#: handshake, on the first read).
_CONNECT = struct.pack(">iqiqi16sB", 0, 0, 30000, 0, 16, b"\x00" * 16, 0)
_CONNECT_REQUEST = struct.pack(">i", len(_CONNECT)) + _CONNECT
_NOT_TLS = ("WRONG_VERSION_NUMBER", "UNEXPECTED_EOF", "RECORD_LAYER_FAILURE", "HTTP_REQUEST")
_CLIENT_CERT_REFUSED = (
    "BAD_CERTIFICATE",
    "UNKNOWN_CA",
    "CERTIFICATE_UNKNOWN",
    "CERTIFICATE_EXPIRED",
    "DECRYPT_ERROR",
)
_CLIENT_CERT_WANTED = ("CERTIFICATE_REQUIRED", "HANDSHAKE_FAILURE")
#: OpenSSL's X509_V_ERR_CERT_HAS_EXPIRED and X509_V_ERR_CERT_NOT_YET_VALID.
_EXPIRED = 10
_NOT_YET_VALID = 9


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
                found = _tls_problem(raw, host, port, context, security, names)
            else:
                found = _speaks_tls(raw, host, port, names)
        if found is not None:
            return found
    return None


def _tls_problem(
    raw: socket.socket,
    host: str,
    port: int,
    context: ssl.SSLContext,
    security: ZkSecurity,
    names: Names,
) -> ConfigError | None:
    where = names.at(f"{host}:{port}")
    has_cert = bool(security.tls_cert)
    taken = names.taken(security, TLS_PARTS)
    try:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            tls.sendall(_CONNECT_REQUEST)
            answer = tls.recv(4)
    except ssl.SSLCertVerificationError as exc:
        message = exc.verify_message or str(exc)
        if exc.verify_code in (_EXPIRED, _NOT_YET_VALID):
            expired = exc.verify_code == _EXPIRED
            return _out_of_date(where, host, port, expired, security, names, taken)
        if "mismatch" in message.lower():
            return ConfigError(
                f"{where}: its certificate does not name {host} ({message}); connect by a "
                f"name it has ({names.own('hosts')}), or have the server's certificate list "
                f"{host} (a subjectAltName)"
            )
        return ConfigError(
            f"{where}: its certificate is not trusted ({message}); set "
            f"{names.own('tls_ca')} to the CA that signed it (the brokers' "
            f"zookeeper.ssl.trustStore){taken}"
        )
    except ssl.SSLError as exc:
        reason = str(exc.reason or exc)
        if any(mark in reason for mark in _NOT_TLS) or isinstance(exc, ssl.SSLEOFError):
            return _not_tls(where, names, taken)
        if not has_cert and any(
            mark in reason for mark in (*_CLIENT_CERT_WANTED, *_CLIENT_CERT_REFUSED)
        ):
            return _wants_cert(where, names, taken)
        if any(mark in reason for mark in _CLIENT_CERT_REFUSED) and has_cert:
            stale = _client_out_of_date(where, security, names, taken)
            if stale is not None:
                return stale
            return ConfigError(
                f"{where} refused ledger-gc's client certificate ({reason}); its truststore "
                f"must hold the CA of {names.own('tls_cert')}{taken}"
            )
        return ConfigError(f"{where}: the TLS handshake failed ({reason})")
    except (ConnectionResetError, BrokenPipeError):
        if not has_cert:
            return _wants_cert(where, names, taken)
        return _not_tls(where, names, taken)
    except OSError:
        return None  # a time out: nothing learned
    if not answer:
        return _wants_cert(where, names, taken) if not has_cert else None
    return None


def _not_tls(where: str, names: Names, taken: str) -> ConfigError:
    return ConfigError(
        f"{where} does not speak TLS (it is a plain clientPort); point {names.own('hosts')} "
        f"at the servers' secureClientPort (2281 in Pulsar's Helm chart), or set "
        f"{names.own('tls')}=false{taken}"
    )


def _wants_cert(where: str, names: Names, taken: str) -> ConfigError:
    return ConfigError(
        f"{where} asks for a client certificate (ssl.clientAuth=need): set "
        f"{names.own('tls_cert')} and {names.own('tls_key')} (the brokers' "
        f"zookeeper.ssl.keyStore){taken}"
    )


def _out_of_date(
    where: str,
    host: str,
    port: int,
    expired: bool,
    security: ZkSecurity,
    names: Names,
    taken: str,
) -> ConfigError:
    """A certificate of the server's chain is out of date: a renewal (or a clock), not a
    setting. The server's own certificate's dates are read with a second handshake that
    does not verify it (nothing is sent over it)."""
    now = datetime.now(UTC)
    state = "has expired" if expired else "is not valid yet"
    dates = _server_dates(host, port, security, names)
    if dates is None:  # its own or a CA's: not known
        return ConfigError(
            f"{where}: its certificate, or a CA certificate of its chain, {state} (now "
            f"{_utc(now)}); the servers need a certificate and chain valid now (their "
            "ssl.keyStore)"
        )
    not_before, not_after = (_utc(date) for date in dates)
    valid = f"valid from {not_before} to {not_after}; now {_utc(now)}"
    if expired and dates[1] < now:
        return ConfigError(
            f"{where}: its certificate expired on {not_after} ({valid}); the servers "
            "need a renewed certificate (their ssl.keyStore)"
        )
    if not expired and dates[0] > now:
        return ConfigError(
            f"{where}: its certificate is not valid until {not_before} ({valid}); this "
            "host's clock is behind, or the servers were given a certificate too early "
            "(their ssl.keyStore)"
        )
    return ConfigError(
        f"{where}: a CA certificate of its chain {state} (its own is {valid}); the "
        f"servers need a chain valid now, and {names.own('tls_ca')} its CA{taken}"
    )


def _client_out_of_date(
    where: str, security: ZkSecurity, names: Names, taken: str
) -> ConfigError | None:
    """ledger-gc's client certificate, when it is out of date (None: it is not). A Java
    server says only "certificate unknown" of an expired one, which would read as a
    truststore without its CA."""
    from cryptography import x509

    client = security.client_certificate(names)
    if client is None:
        return None
    leaf = x509.load_pem_x509_certificates(client.chain)[0]
    now = datetime.now(UTC)
    not_before, not_after = leaf.not_valid_before_utc, leaf.not_valid_after_utc
    if not_before <= now <= not_after:
        return None
    valid = f"valid from {_utc(not_before)} to {_utc(not_after)}; now {_utc(now)}"
    state = (
        f"expired on {_utc(not_after)}"
        if now > not_after
        else (f"is not valid until {_utc(not_before)}")
    )
    return ConfigError(
        f"{where} refused ledger-gc's client certificate, which {state} ({valid}); set "
        f"{names.own('tls_cert')} and {names.own('tls_key')} to a certificate valid now"
        f"{taken}"
    )


def _server_dates(
    host: str, port: int, security: ZkSecurity, names: Names
) -> tuple[datetime, datetime] | None:
    """The server's certificate's validity (UTC), or None if it cannot be had. The
    handshake presents the session's client certificate (a server that asks for one
    ends the handshake without it), and verifies nothing."""
    from cryptography import x509

    context = tls_context(security, names)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, port), timeout=PROBE_SECONDS) as raw,
            context.wrap_socket(raw, server_hostname=host) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
    except OSError:
        return None
    if not der:
        return None
    certificate = x509.load_der_x509_certificate(der)
    return certificate.not_valid_before_utc, certificate.not_valid_after_utc


def _utc(moment: datetime) -> str:
    return f"{moment:%Y-%m-%d %H:%M:%S} UTC"


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
        f"{names.at(f'{host}:{port}')} speaks TLS (a secureClientPort): set "
        f"{names.own('tls')}=true and {names.own('tls_ca')} (its CA), or point "
        f"{names.own('hosts')} at the plain clientPort"
    )
