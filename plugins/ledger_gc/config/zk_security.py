"""How ledger-gc secures its ZooKeeper sessions: TLS and SASL, as Pulsar's brokers do.

Brokers and bookies take ZooKeeper TLS and SASL from JVM properties
(``zookeeper.client.secure``, ``zookeeper.ssl.*``) and a JAAS file, never from
broker.conf, so an operator says them to ledger-gc with these settings (DESIGN.md,
"Connecting to a production Pulsar cluster"): ``LEDGERGC_ZK_TLS*`` and
``LEDGERGC_ZK_SASL_*`` / ``LEDGERGC_ZK_JAAS`` for Pulsar's ensemble (its local store), and
the same names with ``LEDGERGC_BK_ZK_`` for BookKeeper's and ``LEDGERGC_CONFIG_STORE_``
for Pulsar's configuration store, each of which, unset, is the local store's.

``ZkSecurity`` is one ensemble's settings, every part ``None`` while unset. It is a
composite ``Settings`` field (one ``SettingSpec`` per part, made by ``specs``), so each
variable is declared once for both ensembles. ``check`` is what runs before anything
else: the parts agree with each other, the files exist and hold what they should (PEM or
PKCS12, a JAAS ``Client`` section), GSSAPI's library is installed.

BookKeeper's parts fall back to Pulsar's one by one, except that an explicit
``LEDGERGC_BK_ZK_TLS=false`` takes none of Pulsar's TLS parts and an explicit empty (or
``none``) ``LEDGERGC_BK_ZK_SASL_MECHANISM`` none of its SASL parts: a bookie's JVM that
does not set ``zookeeper.client.secure`` (or has no JAAS ``Client`` section) uses none
of the brokers' material either.

The files the parts name (PEM, PKCS12 stores, a JAAS file) are read once, by the checks
that run as the settings are made; what they held is kept with the settings (shared by
the copies ``replace`` makes, never pickled), so a session opened later reads nothing.

A ``Settings`` that leaves its process (a Spark closure or broadcast) carries
``portable()`` copies: the TLS material as PEM text and the JAAS login as a username and
password, because a path on the driver may not exist on an executor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from ledger_gc.config import tls_material
from ledger_gc.config.jaas import DIGEST_MD5, GSSAPI, ZooKeeperLogin, zookeeper_login
from ledger_gc.config.settings_schema import FLAG, SECRET_WHOLE, TEXT, SettingSpec
from ledger_gc.config.tls_material import ClientCertificate
from ledger_gc.errors import ConfigError

MECHANISMS = (DIGEST_MD5, GSSAPI)
#: ``LEDGERGC_*_SASL_MECHANISM`` ``none`` (or, for BookKeeper's, empty): no SASL.
NO_SASL = "NONE"
DEFAULT_SERVICE = "zookeeper"
PULSAR_PREFIX = "LEDGERGC_ZK_"
BOOKKEEPER_PREFIX = "LEDGERGC_BK_ZK_"
#: Pulsar's configuration store (``configurationMetadataStoreUrl``): tenants, policies.
CONFIG_STORE_PREFIX = "LEDGERGC_CONFIG_STORE_"
#: What each ensemble but the local store's is called in docs and errors; each of its
#: parts, unset, is the local store's (``LEDGERGC_ZK_*``).
ENSEMBLES = {
    BOOKKEEPER_PREFIX: "BookKeeper's ensemble",
    CONFIG_STORE_PREFIX: "Pulsar's configuration store",
}
T = TypeVar("T")
#: The TLS parts, which ``LEDGERGC_BK_ZK_TLS=false`` stops BookKeeper taking from Pulsar's.
TLS_PARTS = (
    "tls",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "tls_keystore_password",
    "tls_truststore_password",
    "tls_verify_hostname",
)
#: The SASL parts, which ``LEDGERGC_BK_ZK_SASL_MECHANISM=none`` stops it taking.
SASL_PARTS = ("sasl_mechanism", "sasl_username", "sasl_password", "jaas", "sasl_service")
#: A login given in words, the other way than a JAAS file (``jaas``).
LOGIN_WORDS = ("sasl_username", "sasl_password")
PARTS = TLS_PARTS + SASL_PARTS


def _inline_key(value: Any) -> str | None:
    """PEM text holding a private key is a secret, whichever TLS part holds it (a
    certificate's PEM may carry its key); a path, or certificates alone, are not."""
    text = str(value)
    return text if tls_material.is_inline(text) and "PRIVATE KEY" in text else None


def _inline_pem(value: Any) -> str | None:
    """A PEM key given as text is a secret; a key's path is not."""
    text = str(value)
    return text if tls_material.is_inline(text) else None


def _mechanism(value: str) -> str:
    return value.strip().upper() or NO_SASL


def _check_mechanism(name: str, value: str) -> None:
    if _mechanism(value) not in (*MECHANISMS, NO_SASL):
        raise ConfigError(
            f"{name}={value!r} is not a SASL mechanism ledger-gc speaks: "
            f"{' or '.join(MECHANISMS)} (ZooKeeper's), or none"
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
    # The secret parts (a key may be its PEM text) print as nothing, as Settings' do.
    tls_key: str | None = field(default=None, repr=False)
    tls_keystore_password: str | None = field(default=None, repr=False)
    tls_truststore_password: str | None = field(default=None, repr=False)
    tls_verify_hostname: bool | None = None
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    jaas: str | None = None
    sasl_service: str | None = None
    #: What the files of the parts held, by the parts read (``_read``). Made on the first
    #: read, then shared by the copies ``replace`` makes of this one, so that settings
    #: made from these read nothing again; not by copies made before (the class's
    #: default instance has none: unrelated settings share nothing); never pickled.
    _memo: dict[tuple[Any, ...], Any] | None = field(default=None, repr=False, compare=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_memo": None}

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
        if self.sasl_mechanism == NO_SASL:
            return False
        return bool(self.sasl_mechanism or self.jaas)

    def over(self, base: ZkSecurity) -> ZkSecurity:
        """These settings with every unset part taken from ``base`` (BookKeeper's over
        Pulsar's), but for a group these turn off: TLS ``false`` takes none of
        ``base``'s TLS parts, SASL ``none`` none of its SASL parts, and a login of their
        own (a JAAS file, or a username or password) none of ``base``'s other form of
        login. ``base`` itself when nothing differs (it keeps what its files held)."""
        dropped = (TLS_PARTS if self.tls is False else ()) + (
            SASL_PARTS if self.sasl_mechanism == NO_SASL else ()
        )
        # A login is given one way per ensemble (a JAAS file, or a username and
        # password): one of its own takes no part of ``base``'s other way, else its JAAS
        # file and ``base``'s username and password would be "both set".
        if self.jaas is not None:
            dropped += LOGIN_WORDS
        if any(getattr(self, part) is not None for part in LOGIN_WORDS):
            dropped += ("jaas",)
        values = {
            part: getattr(self, part)
            if getattr(self, part) is not None or part in dropped
            else getattr(base, part)
            for part in PARTS
        }
        if all(values[part] == getattr(base, part) for part in PARTS):
            return base
        return replace(base, **values)

    def is_empty(self) -> bool:
        return all(getattr(self, part) is None for part in PARTS)

    def _read(self, key: tuple[Any, ...], read: Callable[[], T]) -> T:
        """``read()``'s value for ``key`` (the parts it reads), read the first time only."""
        memo = self._memo
        if memo is None:
            memo = {}
            object.__setattr__(self, "_memo", memo)  # a cache, not a part: frozen stands
        if key not in memo:
            memo[key] = read()
        value: T = memo[key]
        return value

    # --- what the files hold ------------------------------------------------------------

    def trusted_cas(self, names: Names) -> bytes | None:
        """The CAs to trust, PEM (None: none configured; the system's then)."""
        if not self.tls_ca:
            return None
        ca, password = self.tls_ca, self.tls_truststore_password
        return self._read(("ca", ca, password), lambda: tls_material.load_ca(ca, password, names))

    def client_certificate(self, names: Names) -> ClientCertificate | None:
        """The client certificate chain and its key (None: none configured)."""
        if not self.tls_cert:
            return None
        cert, key, password = self.tls_cert, self.tls_key, self.tls_keystore_password
        return self._read(
            ("client", cert, key, password),
            lambda: tls_material.load_client(cert, key, password, names),
        )

    # --- SASL -------------------------------------------------------------------------

    def login(self, names: Names) -> ZooKeeperLogin | None:
        """The SASL login: the settings' own, or the JAAS file's ``Client`` section's
        (None: no SASL)."""
        if not self.uses_sasl:
            return None
        if self.jaas:
            login = self._jaas_login(self.jaas, names)
            mechanism = _mechanism(self.sasl_mechanism) if self.sasl_mechanism else None
            if mechanism and mechanism != login.mechanism:
                raise ConfigError(
                    f"{names('sasl_mechanism')}={mechanism} but {names('jaas')}'s Client "
                    f"section is {login.mechanism}; unset one of them"
                )
            return login
        assert self.sasl_mechanism is not None  # uses_sasl
        return ZooKeeperLogin(
            _mechanism(self.sasl_mechanism), self.sasl_username, self.sasl_password
        )

    def _jaas_login(self, jaas: str, names: Names) -> ZooKeeperLogin:
        def read() -> ZooKeeperLogin:
            where = f"{names('jaas')}={jaas}"
            try:
                text = Path(jaas).expanduser().read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                line = exc.object[: exc.start].count(b"\n") + 1
                raise ConfigError(
                    f"{where} is not UTF-8 text (line {line}); save it as UTF-8"
                ) from None
            except OSError as exc:
                raise ConfigError(
                    f"{where} cannot be read ({exc.strerror}); point it at the broker's or "
                    "bookie's JAAS file"
                ) from None
            return zookeeper_login(text, where)

        return self._read(("jaas", jaas), read)

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
                    f"{names.own('tls')}=true to connect with TLS (the servers' "
                    "secureClientPort),"
                    " or unset it"
                )
            return
        self.trusted_cas(names)
        if self.tls_cert:
            self.client_certificate(names)
        elif self.tls_key:
            raise ConfigError(
                f"{names('tls_key')} is set but {names('tls_cert')} is not: set both "
                f"({names.own('tls_cert')} and {names.own('tls_key')}: the client certificate "
                "and its key), or neither"
            )

    def _check_sasl(self, names: Names) -> None:
        if self.jaas and (self.sasl_username or self.sasl_password):
            raise ConfigError(
                f"{names('jaas')} and {names('sasl_username')}/{names('sasl_password')} are "
                "both set; give the login once"
            )
        if not self.uses_sasl:
            given = [p for p in ("sasl_username", "sasl_password", "jaas") if getattr(self, p)]
            if given:
                state = "none" if self.sasl_mechanism == NO_SASL else "not"
                raise ConfigError(
                    f"{names(given[0])} is set but {names('sasl_mechanism')} is {state}: set "
                    f"{names.own('sasl_mechanism')} to {DIGEST_MD5} (username and password) "
                    f"or {GSSAPI} (Kerberos), or use LEDGERGC_ZK_DIGEST for digest auth"
                )
            return
        login = self.login(names)
        assert login is not None  # uses_sasl
        if login.mechanism == DIGEST_MD5:
            if not login.username or not login.password:
                missing = "sasl_username" if not login.username else "sasl_password"
                raise ConfigError(
                    f"{names('sasl_mechanism')}={DIGEST_MD5} needs {names.own(missing)} "
                    f"(or {names.own('jaas')}, a JAAS file with a Client section)"
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
        ca = self.trusted_cas(names) if self.uses_tls else None
        if ca is not None:
            changes.update(tls_ca=ca.decode("ascii"), tls_truststore_password=None)
        client = self.client_certificate(names) if self.uses_tls else None
        if client is not None:
            changes.update(
                tls_cert=client.chain.decode("ascii"),
                tls_key=client.key.decode("ascii"),
                tls_keystore_password=None,
            )
        if self.jaas and self.uses_sasl:
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
            "bookkeeper_doc": "`false`: plain, taking none of Pulsar's TLS settings",
        },
    ),
    (
        "tls_ca",
        "TLS_CA",
        {
            "doc": "the CA certificates to trust, and the only ones (as a truststore): a PEM "
            "file, the PEM text, or a PKCS12 truststore (`zookeeper.ssl.trustStore.location`;"
            " JKS: convert it with keytool)",
            "default_doc": "the system's CAs",
            "secret": _inline_key,
        },
    ),
    (
        "tls_cert",
        "TLS_CERT",
        {
            "doc": "the client certificate, when the servers ask for one (`ssl.clientAuth`): "
            "a PEM file or text, or a PKCS12 keystore with its key "
            "(`zookeeper.ssl.keyStore.location`)",
            "secret": _inline_key,
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
            "keytab in `KRB5_CLIENT_KTNAME`), or `none`; BookKeeper's `zkEnableSecurity` "
            "gives ledger znodes to the bookies' SASL identity",
            "check": _check_mechanism,
            "normalize": _mechanism,
            "bookkeeper_doc": "`none` or empty: no SASL, taking none of Pulsar's SASL "
            "settings (login, JAAS file)",
            "bookkeeper_options": {"empty_is_set": True},
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
    """One ``SettingSpec`` per part, named ``<prefix><suffix>`` (``LEDGERGC_ZK_TLS``);
    another ensemble's (``ENSEMBLES``) each default to the local store's."""
    ensemble = ENSEMBLES.get(prefix)
    made = []
    for part, suffix, options in _PARTS:
        extra = dict(options)
        doc = str(extra.pop("doc"))
        own_doc = extra.pop("bookkeeper_doc", None)
        own_options = extra.pop("bookkeeper_options", {})
        if ensemble is not None:
            doc = f"as `{PULSAR_PREFIX}{suffix}`, for {ensemble}"
            doc += f"; {own_doc}" if own_doc else ""
            extra["default_doc"] = f"`{PULSAR_PREFIX}{suffix}`"
            extra.update(own_options)
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


_SUFFIXES = {part: suffix for part, suffix, _ in _PARTS} | {"hosts": "HOSTS"}


class Names:
    """The variables of one ensemble's settings, for its errors (DESIGN.md: errors about
    BookKeeper's ensemble name ``LEDGERGC_BK_ZK_*``).

    On BookKeeper's ensemble a part it does not set is Pulsar's, so two questions have
    different answers there (issue 33: TLS to BookKeeper's plain port advised
    ``LEDGERGC_ZK_TLS=false``, which turns TLS off for Pulsar's ensemble):

    * ``names(part)``: the variable that holds the value in use (``LEDGERGC_ZK_TLS_CA``
      while ``LEDGERGC_BK_ZK_TLS_CA`` is unset), for an error about that value (a file
      that cannot be read);
    * ``names.own(part)``: the variable that changes it for this ensemble alone
      (``LEDGERGC_BK_ZK_TLS_CA``, set or not), for the fix an error offers; ``taken``
      then says which of Pulsar's values apply.

    ``hosts`` is a part too: the variable that names the ensemble's servers.
    """

    def __init__(
        self, prefix: str, set_here: ZkSecurity | None = None, hosts: str | None = None
    ) -> None:
        #: ``set_here``: BookKeeper's own parts (None: Pulsar's ensemble, whose are all
        #: own); only which parts it sets is kept, none of their values.
        self.prefix = prefix
        self.own_parts = (
            None
            if set_here is None
            else frozenset(p for p in PARTS if getattr(set_here, p) is not None)
        )
        self.hosts = hosts or prefix + _SUFFIXES["hosts"]

    @property
    def bookkeeper(self) -> bool:
        return self.prefix == BOOKKEEPER_PREFIX

    @property
    def ensemble(self) -> str | None:
        """What this ensemble is called ("BookKeeper's ensemble"); None: the local
        store's (Pulsar's ``metadataStoreUrl``)."""
        return ENSEMBLES.get(self.prefix)

    def __call__(self, part: str) -> str:
        if part == "hosts":
            return self.hosts
        if self.falls_back(part):
            return PULSAR_PREFIX + _SUFFIXES[part]
        return self.own(part)

    def own(self, part: str) -> str:
        return self.prefix + _SUFFIXES[part]

    @property
    def digest(self) -> str:
        """The digest-auth variable of this ensemble: the configuration store has its own
        (``LEDGERGC_CONFIG_STORE_DIGEST``); BookKeeper's ensemble uses the local store's."""
        return (
            self.prefix + "DIGEST" if self.prefix == CONFIG_STORE_PREFIX else "LEDGERGC_ZK_DIGEST"
        )

    def falls_back(self, part: str) -> bool:
        """Whether this ensemble takes ``part`` from Pulsar's (it does not set it)."""
        return self.own_parts is not None and part not in self.own_parts

    def at(self, hosts: str) -> str:
        """The words "ZooKeeper at <hosts>", and "(BookKeeper's ensemble)" on BookKeeper's."""
        return f"ZooKeeper at {hosts}" + (f" ({self.ensemble})" if self.ensemble else "")

    def taken(self, security: ZkSecurity, parts: tuple[str, ...]) -> str:
        """ "; <Pulsar's variables> apply to BookKeeper's ensemble too, its own being
        unset" for those of ``parts`` that ``security`` (this ensemble's, Pulsar's filled
        in) takes from Pulsar's; "" when none (always on Pulsar's ensemble)."""
        taken = [self(p) for p in parts if self.falls_back(p) and getattr(security, p) is not None]
        if not taken:
            return ""
        verb = "applies" if len(taken) == 1 else "apply"
        return f"; {', '.join(taken)} {verb} to {self.ensemble} too, its own being unset"

    def __repr__(self) -> str:
        return f"Names({self.prefix!r})"


def names_for(prefix: str, set_here: ZkSecurity | None = None, hosts: str | None = None) -> Names:
    """The variable of each part: ``<prefix><suffix>``; with ``set_here`` (BookKeeper's
    own parts), a part it does not set is named by Pulsar's variable it falls back to
    (``Names.own``: its own all the same)."""
    return Names(prefix, set_here, hosts)


PULSAR_NAMES = names_for(PULSAR_PREFIX)
