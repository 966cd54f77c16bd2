"""A SASL login to ZooKeeper: stop at a server that does not speak SASL, and say why a
login failed, naming the ensemble's own settings.

A ZooKeeper without a SASL ``authProvider`` answers every SASL packet with an empty
token (and logs an ERROR). kazoo 2.11 (``ConnectionHandler._authenticate_with_sasl``)
hands that token to pure-sasl, whose DIGEST-MD5 takes an empty challenge as "nothing
yet" and answers it with another empty packet, and so on: issue 33 counted 28,000 to
57,000 packets in 18-19 s, until the session expired, then an error blaming the login.
ZooKeeper's Java client gives up after the first. ``SaslGuard`` does too: kazoo's
connection handler, one method wrapped, ends the login at an empty challenge that
comes before the exchange completed. In a SASL server's exchange every challenge
before completion carries data (DIGEST-MD5's nonce, then its ``rspauth``; GSSAPI's
tokens), so an empty one means only "no SASL here".

kazoo has no extension point for its connection handler; ``guard`` replaces the one a
``KazooClient`` made, before it starts, with this subclass, built from the same
arguments. Only that session is affected.
"""

from __future__ import annotations

from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError
from kazoo.protocol.connection import ConnectionHandler
from kazoo.protocol.serialization import SASL

from ledger_gc.config.jaas import GSSAPI, ZooKeeperLogin
from ledger_gc.config.zk_security import SASL_PARTS, Names, ZkSecurity
from ledger_gc.errors import ConfigError


class EmptyChallenge(AuthFailedError):
    """The server answered a SASL packet with an empty token: kazoo's connection thread
    stops the session (an ``AuthFailedError`` is what it does not retry)."""


class SaslGuard(ConnectionHandler):  # type: ignore[misc]  # kazoo is untyped
    """kazoo's connection handler, which ends a SASL login at the first empty challenge
    (issue 33's flood); ``empty_challenge`` says that it did, ``refused`` that the
    server refused the login (kazoo reports the session connected before it logs in,
    so a caller that looks late finds the session gone, not why)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.empty_challenge = False
        self.refused = False
        self._in_sasl = False

    def _authenticate_with_sasl(self, host: str, timeout: float) -> None:
        self._in_sasl = True
        try:
            super()._authenticate_with_sasl(host, timeout)
        except AuthFailedError:
            self.refused = not self.empty_challenge
            raise
        finally:
            self._in_sasl = False

    def _read_header(self, timeout: float) -> Any:
        read = super()._read_header(timeout)
        if self._in_sasl:
            header, buffer, offset = read
            if not header.err and not SASL.deserialize(buffer, offset)[0]:
                sasl = self.client.sasl_cli
                if sasl is None or not sasl.complete:
                    self.empty_challenge = True
                    raise EmptyChallenge("the server answered SASL with an empty challenge")
        return read


def guard(client: KazooClient) -> SaslGuard:
    """Give ``client`` (made, not started, with ``sasl_options``) a ``SaslGuard`` in
    place of the connection handler it made, with the same arguments
    (``KazooClient.__init__``)."""
    made = client._connection
    guarded = SaslGuard(
        client, client._conn_retry.copy(), logger=made.logger, sasl_options=made.sasl_options
    )
    client._connection = guarded
    return guarded


def not_spoken(
    hosts: str, login: ZooKeeperLogin, security: ZkSecurity, names: Names
) -> ConfigError:
    """The error of a login to an ensemble that does not speak SASL: what turns SASL off
    for that ensemble (``LEDGERGC_BK_ZK_SASL_MECHANISM=none`` on BookKeeper's, whose
    sessions otherwise take Pulsar's login)."""
    fix = f"set {names.own('sasl_mechanism')}=none"
    own_parts = [
        names.own(part)
        for part in ("sasl_username", "sasl_password", "jaas")
        if getattr(security, part) is not None and not names.falls_back(part)
    ]
    if own_parts:
        fix += f" and unset {' and '.join(own_parts)}"
    return ConfigError(
        f"{names.at(hosts)} does not speak SASL: it answered the {login.mechanism} login "
        "with an empty challenge (it has no SASL authProvider), and ledger-gc stopped "
        f"there; to connect without SASL, {fix}{names.taken(security, SASL_PARTS)}. "
        "Nothing was read or deleted"
    )


def refused(hosts: str, login: ZooKeeperLogin, security: ZkSecurity, names: Names) -> ConfigError:
    """The error of a login the ensemble refused, naming its own settings."""
    who = f"as {login.username!r}" if login.username else "with the keytab's principal"
    if login.mechanism == GSSAPI:
        fix = (
            f"check KRB5_CLIENT_KTNAME, {names.own('sasl_username')} and "
            f"{names.own('sasl_service')}"
        )
    else:
        fix = (
            f"check {names.own('sasl_username')} and {names.own('sasl_password')} (or the "
            f"Client section of {names.own('jaas')}) against the servers' JAAS Server section"
        )
    return ConfigError(
        f"{names.at(hosts)} refused the SASL {login.mechanism} login {who}; "
        f"{fix}{names.taken(security, SASL_PARTS)}. Nothing was read or deleted"
    )
