"""How ledger-gc secures its ZooKeeper sessions: TLS and SASL, as Pulsar's brokers do.

Brokers and bookies take ZooKeeper TLS and SASL from JVM properties
(``zookeeper.client.secure``, ``zookeeper.ssl.*``) and a JAAS file, never from
broker.conf, so an operator says them to ledger-gc with these settings (DESIGN.md,
"Connecting to a production Pulsar cluster"): ``LEDGERGC_ZK_TLS*`` and
``LEDGERGC_ZK_SASL_*`` / ``LEDGERGC_ZK_JAAS`` for Pulsar's ensemble, and the same names
with ``LEDGERGC_BK_ZK_`` for BookKeeper's, each of which, unset, is Pulsar's.

``ZkSecurity`` is one ensemble's settings, every part ``None`` while unset. It is a
composite ``Settings`` field (one ``SettingSpec`` per part, made by ``specs``), so each
variable is declared once for both ensembles. ``check`` is what runs before anything
else: the parts agree with each other, the files exist and hold what they should (PEM or
PKCS12, a JAAS ``Client`` section), GSSAPI's library is installed.

A ``Settings`` that leaves its process (a Spark closure or broadcast) carries
``portable()`` copies: the TLS material as PEM text and the JAAS login as a username and
password, because a path on the driver may not exist on an executor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from ledger_gc import tls_material
from ledger_gc.errors import ConfigError
from ledger_gc.jaas import DIGEST_MD5, GSSAPI, ZooKeeperLogin, zookeeper_login
from ledger_gc.settings_schema import FLAG, SECRET_WHOLE, TEXT, SettingSpec

MECHANISMS = (DIGEST_MD5, GSSAPI)
DEFAULT_SERVICE = "zookeeper"
PULSAR_PREFIX = "LEDGERGC_ZK_"
BOOKKEEPER_PREFIX = "LEDGERGC_BK_ZK_"
#: A part of ``ZkSecurity`` -> the variable that set it.
Names = Callable[[str], str]


def _inline_pem(value: Any) -> str | None:
    """A PEM key given as text is a secret; a key's path is not."""
    text = str(value)
    return text if tls_material.is_inline(text) else None


def _mechanism(value: str) -> str:
    return value.strip().upper()


def _check_mechanism(name: str, value: str) -> None:
    if _mechanism(value) not in MECHANISMS:
        raise ConfigError(
            f"{name}={value!r} is not a SASL mechanism ledger-gc speaks: "
            f"{' or '.join(MECHANISMS)} (ZooKeeper's)"
        )


def _check_service(name: str, value: str) -> None:
    if not value.strip() or any(c.isspace() or c in "/@" for c in value.strip()):
        raise ConfigError(
            f"{name}={value!r} is not a Kerberos service name (like zookeeper: the first "
            "part of the servers' principal zookeeper/host@REALM)"
        )


@dataclass(frozen=True)
class ZkSecurity:
    """One ensemble's TLS and SASL settings; ``None``: unset (defaults, or Pulsar's)."""

    tls: bool | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_keystore_password: str | None = None
    tls_truststore_password: str | None = None
    tls_verify_hostname: bool | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    jaas: str | None = None
    sasl_service: str | None = None

    @property
    def uses_tls(self) -> bool:
        return bool(self.tls)

    @property
    def verify_hostname(self) -> bool:
        """Hostname verification, on unless turned off (ZooKeeper's
        ``zookeeper.ssl.hostnameVerification`` defaults to true too)."""
        return self.tls_verify_hostname is not False

    @property
    def service(self) -> str:
        return self.sasl_service or DEFAULT_SERVICE

    @property
    def uses_sasl(self) -> bool:
        return bool(self.sasl_mechanism or self.jaas)

    def over(self, base: ZkSecurity) -> ZkSecurity:
        """These settings with every unset part taken from ``base`` (BookKeeper's over
        Pulsar's)."""
        return replace(
            base,
            **{
                f.name: getattr(self, f.name)
                for f in fields(self)
                if getattr(self, f.name) is not None
            },
        )

    def is_empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))

    # --- SASL -------------------------------------------------------------------------

    def login(self, names: Names) -> ZooKeeperLogin | None:
        """The SASL login: the settings' own, or the JAAS file's ``Client`` section's
        (None: no SASL). Reads the JAAS file."""
        if self.jaas:
            path = Path(self.jaas).expanduser()
            try:
                text = path.read_text(encoding="utf-8")
            except OSError as exc:
                raise ConfigError(
                    f"{names('jaas')}={self.jaas} cannot be read ({exc.strerror}); point it "
                    "at the broker's or bookie's JAAS file"
                ) from None
            login = zookeeper_login(text, f"{names('jaas')}={self.jaas}")
            mechanism = _mechanism(self.sasl_mechanism) if self.sasl_mechanism else None
            if mechanism and mechanism != login.mechanism:
                raise ConfigError(
                    f"{names('sasl_mechanism')}={mechanism} but {names('jaas')}'s Client "
                    f"section is {login.mechanism}; unset one of them"
                )
            return login
        if not self.sasl_mechanism:
            return None
        return ZooKeeperLogin(
            _mechanism(self.sasl_mechanism), self.sasl_username, self.sasl_password
        )

    def configured_identity(self, names: Names) -> str | None:
        """The identity these settings authenticate as (``sasl:bookkeeper``), when they
        say it: GSSAPI's principal may come from the keytab alone."""
        login = self.login(names)
        if login is None:
            return None
        return f"sasl:{login.username}" if login.username else None

    # --- checks ----------------------------------------------------------------------

    def check(self, names: Names) -> None:
        """Refuse, in one line naming the variable, settings that cannot work together
        or whose files do not hold what they should; read before anything runs."""
        self._check_tls(names)
        self._check_sasl(names)

    def _check_tls(self, names: Names) -> None:
        material = ("tls_ca", "tls_cert", "tls_key", "tls_keystore_password")
        given = [part for part in material if getattr(self, part)]
        if not self.uses_tls:
            if given:
                raise ConfigError(
                    f"{names(given[0])} is set but {names('tls')} is not true: set "
                    f"{names('tls')}=true to connect with TLS (the servers' secureClientPort),"
                    " or unset it"
                )
            return
        if self.tls_ca:
            tls_material.load_ca(self.tls_ca, self.tls_truststore_password, names)
        if self.tls_cert:
            tls_material.load_client(self.tls_cert, self.tls_key, self.tls_keystore_password, names)
        elif self.tls_key:
            raise ConfigError(
                f"{names('tls_key')} is set but {names('tls_cert')} is not: set both (the "
                "client certificate and its key), or neither"
            )

    def _check_sasl(self, names: Names) -> None:
        if self.jaas and (self.sasl_username or self.sasl_password):
            raise ConfigError(
                f"{names('jaas')} and {names('sasl_username')}/{names('sasl_password')} are "
                "both set; give the login once"
            )
        if not self.uses_sasl:
            given = [p for p in ("sasl_username", "sasl_password") if getattr(self, p)]
            if given:
                raise ConfigError(
                    f"{names(given[0])} is set but {names('sasl_mechanism')} is not: set it "
                    f"to {DIGEST_MD5} (username and password) or {GSSAPI} "
                    "(Kerberos), or use LEDGERGC_ZK_DIGEST for digest auth"
                )
            return
        login = self.login(names)
        assert login is not None  # uses_sasl
        if login.mechanism == DIGEST_MD5:
            if not login.username or not login.password:
                missing = "sasl_username" if not login.username else "sasl_password"
                raise ConfigError(
                    f"{names('sasl_mechanism')}={DIGEST_MD5} needs {names(missing)} "
                    f"(or {names('jaas')}, a JAAS file with a Client section)"
                )
            return
        if self.sasl_password:
            raise ConfigError(
                f"{names('sasl_password')} is set with {GSSAPI}, which takes no "
                "password: the Kerberos keytab (KRB5_CLIENT_KTNAME) authenticates"
            )
        try:
            import kerberos  # noqa: F401  # pure-sasl's GSSAPI
        except ImportError:
            raise ConfigError(
                f"{names('sasl_mechanism')}={GSSAPI} needs the `kerberos` package "
                "(requirements.txt; it builds against Debian's libkrb5-dev): run bin/setup"
            ) from None

    # --- crossing a process boundary ------------------------------------------------

    def portable(self, names: Names) -> ZkSecurity:
        """A copy that needs no file of this host: TLS material as PEM text (the key
        unencrypted, its store's passwords then unneeded) and a JAAS DIGEST-MD5 login as
        a username and password. A Kerberos keytab stays the executor's own
        (``KRB5_CLIENT_KTNAME`` there)."""
        changes: dict[str, Any] = {}
        if self.uses_tls and self.tls_ca:
            ca = tls_material.load_ca(self.tls_ca, self.tls_truststore_password, names)
            changes.update(tls_ca=ca.decode("ascii"), tls_truststore_password=None)
        if self.uses_tls and self.tls_cert:
            client = tls_material.load_client(
                self.tls_cert, self.tls_key, self.tls_keystore_password, names
            )
            changes.update(
                tls_cert=client.chain.decode("ascii"),
                tls_key=client.key.decode("ascii"),
                tls_keystore_password=None,
            )
        if self.jaas:
            login = self.login(names)
            assert login is not None
            changes.update(
                jaas=None,
                sasl_mechanism=login.mechanism,
                sasl_username=login.username,
                sasl_password=login.password,
            )
        return replace(self, **changes) if changes else self


#: Each part: its variable's suffix, kind, line for the README and how it is kept.
_PARTS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    (
        "tls",
        "TLS",
        {
            "kind": FLAG,
            "doc": "`true`: connect with TLS, to the servers' `secureClientPort` (Pulsar's "
            "`zookeeper.client.secure`); the server's certificate is verified",
            "default_doc": "`false`",
        },
    ),
    (
        "tls_ca",
        "TLS_CA",
        {
            "doc": "the CA certificates to trust: a PEM file, the PEM text, or a PKCS12 "
            "truststore (`zookeeper.ssl.trustStore.location`; JKS: convert it with keytool)",
            "default_doc": "the system's CAs",
        },
    ),
    (
        "tls_cert",
        "TLS_CERT",
        {
            "doc": "the client certificate, when the servers ask for one (`ssl.clientAuth`): "
            "a PEM file or text, or a PKCS12 keystore with its key "
            "(`zookeeper.ssl.keyStore.location`)",
        },
    ),
    (
        "tls_key",
        "TLS_KEY",
        {
            "doc": "the client certificate's PEM key (a file or the text; not with a PKCS12 "
            "keystore)",
            "secret": _inline_pem,
        },
    ),
    (
        "tls_keystore_password",
        "TLS_KEYSTORE_PASSWORD",
        {
            "doc": "the PKCS12 keystore's password, or an encrypted PEM key's "
            "(`zookeeper.ssl.keyStore.password`)",
            "secret": SECRET_WHOLE,
        },
    ),
    (
        "tls_truststore_password",
        "TLS_TRUSTSTORE_PASSWORD",
        {
            "doc": "the PKCS12 truststore's password (`zookeeper.ssl.trustStore.password`)",
            "secret": SECRET_WHOLE,
        },
    ),
    (
        "tls_verify_hostname",
        "TLS_VERIFY_HOSTNAME",
        {
            "kind": FLAG,
            "doc": "check that the server's certificate names the host connected to "
            "(`zookeeper.ssl.hostnameVerification`); the certificate's chain is verified "
            "either way",
            "default_doc": "`true`",
        },
    ),
    (
        "sasl_mechanism",
        "SASL_MECHANISM",
        {
            "doc": "SASL: `DIGEST-MD5` (username and password) or `GSSAPI` (Kerberos: the "
            "keytab in `KRB5_CLIENT_KTNAME`); BookKeeper's `zkEnableSecurity` gives ledger "
            "znodes to the bookies' SASL identity",
            "check": _check_mechanism,
            "normalize": _mechanism,
        },
    ),
    (
        "sasl_username",
        "SASL_USERNAME",
        {"doc": "the DIGEST-MD5 username (GSSAPI: the principal, else the keytab's)"},
    ),
    (
        "sasl_password",
        "SASL_PASSWORD",
        {"doc": "the DIGEST-MD5 password", "secret": SECRET_WHOLE},
    ),
    (
        "jaas",
        "JAAS",
        {
            "doc": "a JAAS file (the broker's `java.security.auth.login.config`): its "
            "`Client` section's DigestLoginModule or Krb5LoginModule is the SASL login",
        },
    ),
    (
        "sasl_service",
        "SASL_SERVICE",
        {
            "doc": "GSSAPI's service name: the servers' principal is `<service>/<host>@REALM`",
            "check": _check_service,
            "default_doc": f"`{DEFAULT_SERVICE}`",
        },
    ),
)


def specs(prefix: str) -> tuple[SettingSpec, ...]:
    """One ``SettingSpec`` per part, named ``<prefix><suffix>`` (``LEDGERGC_ZK_TLS``)."""
    bookkeeper = prefix == BOOKKEEPER_PREFIX
    made = []
    for part, suffix, options in _PARTS:
        extra = dict(options)
        doc = str(extra.pop("doc"))
        if bookkeeper:
            doc = f"as `{PULSAR_PREFIX}{suffix}`, for BookKeeper's ensemble"
            extra["default_doc"] = f"`{PULSAR_PREFIX}{suffix}`"
        made.append(
            SettingSpec(
                prefix + suffix,
                extra.pop("kind", TEXT),
                doc,
                part=part,
                omit_when_empty=True,
                **extra,
            )
        )
    return tuple(made)


def names_for(prefix: str, set_here: ZkSecurity | None = None) -> Names:
    """The variable of each part: ``<prefix><suffix>``; with ``set_here`` (BookKeeper's
    own parts), a part it does not set is named by Pulsar's variable it falls back to."""
    suffixes = {part: suffix for part, suffix, _ in _PARTS}

    def name(part: str) -> str:
        if set_here is not None and getattr(set_here, part) is None:
            return PULSAR_PREFIX + suffixes[part]
        return prefix + suffixes[part]

    return name


PULSAR_NAMES = names_for(PULSAR_PREFIX)
