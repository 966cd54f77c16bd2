"""ZooKeeper TLS and SASL settings: read as brokers keep them, refused in one line.

Every way an operator can get them wrong is a ``ConfigError`` naming the variable (the
CLI's exit 2) before anything runs; what a Spark executor receives needs no file of the
driver's host.
"""

from __future__ import annotations

import pickle
import ssl
from pathlib import Path

import pytest
from pki import CA, CLIENT, OTHER, issue, truststore

from ledger_gc.config import jaas
from ledger_gc.config.settings import Settings
from ledger_gc.config.zk_security import ZkSecurity
from ledger_gc.errors import ConfigError

FILES = Path(__file__).resolve().parent / "zk_security_files"
BROKER_JAAS = FILES / "broker_jaas.conf"
CA_NAME = "ledger-gc test CA"


def env(**values: str) -> dict[str, str]:
    return {f"LEDGERGC_{key.upper()}": value for key, value in values.items()}


def refused(environ: dict[str, str], *words: str) -> str:
    with pytest.raises(ConfigError) as err:
        Settings.from_env(environ)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    return message


@pytest.fixture
def pem(tmp_path: Path) -> dict[str, str]:
    """The test CA's and client's PEM files (the key encrypted with ``key-pass``)."""
    files = {
        "ca": CA.cert_pem,
        "cert": CLIENT.cert_pem,
        "key": CLIENT.key_pem(),
        "encrypted_key": CLIENT.key_pem("key-pass"),
        "other_key": OTHER.key_pem(),
        "both": CLIENT.cert_pem + CLIENT.key_pem(),
    }
    paths = {}
    for name, text in files.items():
        path = tmp_path / f"{name}.pem"
        path.write_text(text)
        paths[name] = str(path)
    return paths


# --- JAAS ------------------------------------------------------------------------------


def test_a_brokers_jaas_file_gives_its_client_login() -> None:
    login = jaas.zookeeper_login(BROKER_JAAS.read_text())
    assert login == jaas.ZooKeeperLogin("DIGEST-MD5", "bookkeeper", 'bk "quoted" secret')


def test_a_kerberos_client_section_is_gssapi_with_its_principal_and_keytab() -> None:
    text = """
    // a bookie's
    Client {
       com.sun.security.auth.module.Krb5LoginModule required
       useKeyTab=true storeKey=true
       keyTab="/etc/security/keytabs/bookie.keytab"
       principal="bookkeeper/bk-0.example.com@EXAMPLE.COM";
    };
    """
    login = jaas.zookeeper_login(text)
    assert login.mechanism == "GSSAPI"
    assert login.username == "bookkeeper/bk-0.example.com@EXAMPLE.COM"
    assert login.keytab == "/etc/security/keytabs/bookie.keytab"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("Server { a.B required; };", ["no Client section", "Server"]),
        ("Client { a.B sometimes; };", ["line 1, column 14", "not a login module flag"]),
        ('Client { a.B required x="unterminated; };', ["unterminated"]),
        ("Client { a.B required x=; };", ["an option value expected", "';'"]),
        ("Client {\n a.B required\n x=1", ["ends where", "expected"]),
        ('Client { a.B required x="${user.home}"; };', ["system property"]),
        ("Client { com.example.Custom required; };", ["cannot run", "DigestLoginModule"]),
        (
            'Client { org.apache.zookeeper.server.auth.DigestLoginModule required username="u"; };',
            ["no password"],
        ),
        ("Client { a.B required; }; Client { a.B required; };", ["appears twice"]),
    ],
)
def test_a_bad_jaas_file_is_one_line_naming_where(text: str, words: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        jaas.zookeeper_login(text, "LEDGERGC_ZK_JAAS=/etc/jaas.conf")
    assert "\n" not in str(err.value)
    for word in words:
        assert word in str(err.value)


# --- TLS -------------------------------------------------------------------------------


def test_pem_files_pem_text_and_pkcs12_stores_are_all_accepted(
    pem: dict[str, str], tmp_path: Path
) -> None:
    keystore = tmp_path / "client.p12"
    keystore.write_bytes(CLIENT.pkcs12("store-pass", CA))
    trust = tmp_path / "truststore.p12"
    trust.write_bytes(truststore(CA, "trust-pass"))
    forms = [
        env(zk_tls="true", zk_tls_ca=pem["ca"], zk_tls_cert=pem["cert"], zk_tls_key=pem["key"]),
        env(zk_tls="true", zk_tls_ca=CA.cert_pem, zk_tls_cert=CLIENT.cert_pem)
        | env(zk_tls_key=CLIENT.key_pem()),
        env(zk_tls="true", zk_tls_cert=pem["both"]),
        env(zk_tls="true", zk_tls_cert=pem["cert"], zk_tls_key=pem["encrypted_key"])
        | env(zk_tls_keystore_password="key-pass"),
        env(zk_tls="true", zk_tls_ca=str(trust), zk_tls_truststore_password="trust-pass")
        | env(zk_tls_cert=str(keystore), zk_tls_keystore_password="store-pass"),
    ]
    for environ in forms:
        assert Settings.from_env(environ).zk_security.uses_tls


@pytest.mark.parametrize(
    ("values", "words"),
    [
        (dict(zk_tls_ca="CA"), ["LEDGERGC_ZK_TLS_CA is set but LEDGERGC_ZK_TLS is not true"]),
        (dict(zk_tls="true", zk_tls_ca="/no/such/ca.pem"), ["LEDGERGC_ZK_TLS_CA", "not exist"]),
        (dict(zk_tls="true", zk_tls_ca="/"), ["LEDGERGC_ZK_TLS_CA", "directory"]),
        (dict(zk_tls="true", zk_tls_cert="CERT"), ["LEDGERGC_ZK_TLS_KEY", "is not"]),
        (dict(zk_tls="true", zk_tls_key="KEY"), ["LEDGERGC_ZK_TLS_CERT is not"]),
        (dict(zk_tls="true", zk_tls_cert="CERT", zk_tls_key="OTHER"), ["does not belong"]),
        (dict(zk_tls="true", zk_tls_cert="CERT", zk_tls_key="ENC"), ["KEYSTORE_PASSWORD"]),
        (dict(zk_tls="true", zk_tls_ca="KEY"), ["LEDGERGC_ZK_TLS_CA", "no PEM certificate"]),
        (dict(zk_tls="maybe"), ["LEDGERGC_ZK_TLS='maybe' is not a boolean"]),
    ],
)
def test_bad_tls_settings_are_one_line_naming_the_variable(
    pem: dict[str, str], values: dict[str, str], words: list[str]
) -> None:
    files = {"CA": pem["ca"], "CERT": pem["cert"], "KEY": pem["key"]}
    files |= {"OTHER": pem["other_key"], "ENC": pem["encrypted_key"]}
    refused(env(**{k: files.get(v, v) for k, v in values.items()}), *words)


def test_a_pkcs12_store_with_a_wrong_password_or_a_jks_store_is_refused(tmp_path: Path) -> None:
    keystore = tmp_path / "client.p12"
    keystore.write_bytes(CLIENT.pkcs12("store-pass", CA))
    refused(
        env(zk_tls="true", zk_tls_cert=str(keystore), zk_tls_keystore_password="wrong"),
        "LEDGERGC_ZK_TLS_CERT",
        "LEDGERGC_ZK_TLS_KEYSTORE_PASSWORD is not its password",
    )
    refused(
        env(zk_tls="true", zk_tls_cert=str(keystore), zk_tls_key=str(keystore)),
        "holds the key: unset LEDGERGC_ZK_TLS_KEY",
    )
    trust = tmp_path / "truststore.p12"
    trust.write_bytes(truststore(CA, "trust-pass"))
    refused(
        env(zk_tls="true", zk_tls_cert=str(trust), zk_tls_keystore_password="trust-pass"),
        "without a private key",
    )
    jks = tmp_path / "broker.keystore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 60)
    refused(
        env(zk_tls="true", zk_tls_ca=str(jks)),
        "is a JKS keystore",
        "keytool -importkeystore",
        "-deststoretype PKCS12",
    )


# --- SASL ------------------------------------------------------------------------------


def test_sasl_from_settings_or_from_the_brokers_jaas_file() -> None:
    direct = Settings.from_env(
        env(zk_sasl_mechanism="digest-md5", zk_sasl_username="gc", zk_sasl_password="pw")
    )
    assert direct.zk_security.login(lambda part: part) == jaas.ZooKeeperLogin(
        "DIGEST-MD5", "gc", "pw"
    )
    from_jaas = Settings.from_env(env(zk_jaas=str(BROKER_JAAS)))
    assert from_jaas.zk_security.login(lambda part: part) == jaas.ZooKeeperLogin(
        "DIGEST-MD5", "bookkeeper", 'bk "quoted" secret'
    )


@pytest.mark.parametrize(
    ("values", "words"),
    [
        (dict(zk_sasl_mechanism="PLAIN"), ["LEDGERGC_ZK_SASL_MECHANISM='PLAIN'", "DIGEST-MD5"]),
        (dict(zk_sasl_username="gc"), ["LEDGERGC_ZK_SASL_MECHANISM is not"]),
        (dict(zk_sasl_mechanism="DIGEST-MD5", zk_sasl_username="gc"), ["needs", "PASSWORD"]),
        (
            dict(zk_jaas=str(BROKER_JAAS), zk_sasl_username="gc", zk_sasl_password="pw"),
            ["LEDGERGC_ZK_JAAS and", "both set"],
        ),
        (dict(zk_jaas="/no/such/jaas.conf"), ["LEDGERGC_ZK_JAAS=/no/such/jaas.conf", "read"]),
        (
            dict(zk_jaas=str(BROKER_JAAS), zk_sasl_mechanism="GSSAPI"),
            ["LEDGERGC_ZK_SASL_MECHANISM=GSSAPI but", "DIGEST-MD5"],
        ),
        (
            dict(zk_sasl_mechanism="GSSAPI", zk_sasl_password="pw"),
            ["LEDGERGC_ZK_SASL_PASSWORD is set with GSSAPI", "KRB5_CLIENT_KTNAME"],
        ),
        (dict(zk_sasl_mechanism="GSSAPI", zk_sasl_service="zk/host"), ["SASL_SERVICE"]),
    ],
)
def test_bad_sasl_settings_are_one_line_naming_the_variable(
    values: dict[str, str], words: list[str]
) -> None:
    message = refused(env(**values), *words)
    assert "pw" not in message.split("LEDGERGC")[0]


def test_gssapi_without_its_library_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """(The library is installed: its absence is simulated, a fault no real setup here
    can produce.)"""
    import sys

    monkeypatch.setitem(sys.modules, "kerberos", None)
    refused(env(zk_sasl_mechanism="GSSAPI"), "needs the `kerberos` package", "bin/setup")


def test_the_password_is_masked_and_never_in_repr() -> None:
    settings = Settings.from_env(
        env(zk_sasl_mechanism="DIGEST-MD5", zk_sasl_username="gc", zk_sasl_password="s3cret")
        | env(bk_zk_sasl_password="bk-s3cret")
    )
    assert {"s3cret", "bk-s3cret"} <= set(settings.secrets())
    assert "s3cret" not in repr(settings)


# --- BookKeeper's ensemble ---------------------------------------------------------


def test_bookkeepers_settings_fall_back_to_pulsars_part_by_part() -> None:
    settings = Settings.from_env(
        env(zk_hosts="zk:2281/pulsar", zk_tls="true", zk_tls_ca=CA.cert_pem)
        | env(zk_sasl_mechanism="DIGEST-MD5", zk_sasl_username="pulsar", zk_sasl_password="p")
        | env(bk_zk_hosts="bk-zk:2281", bk_zk_sasl_username="bookkeeper")
        | env(bk_zk_sasl_password="b")
    )
    bookkeeper = settings.bookkeeper_settings()
    assert bookkeeper.zk_hosts == "bk-zk:2281"
    assert bookkeeper.zk_security.uses_tls and bookkeeper.zk_security.tls_ca == CA.cert_pem
    assert bookkeeper.zk_security.sasl_username == "bookkeeper"
    assert settings.zk_security.sasl_username == "pulsar"
    # Same ensemble, another identity: a session of its own all the same.
    same_hosts = settings.with_overrides(bk_zk_address=None)
    assert same_hosts.bookkeeper_settings() is not same_hosts
    assert same_hosts.bookkeeper_settings().zk_security.sasl_username == "bookkeeper"
    # Nothing of BookKeeper's own: Pulsar's session is BookKeeper's.
    plain = Settings.from_env(env(zk_tls="true"))
    assert plain.bookkeeper_settings() == plain
    # BookKeeper's TLS off while Pulsar's is on: false is a value, not "unset".
    off = Settings.from_env(env(zk_tls="true", bk_zk_tls="false"))
    assert not off.bookkeeper_security.uses_tls
    assert not Settings.from_env(off.to_env()).bookkeeper_security.uses_tls


def test_a_bad_bookkeeper_setting_names_the_variable_it_came_from() -> None:
    refused(env(bk_zk_tls_ca="/x.pem"), "LEDGERGC_BK_ZK_TLS_CA is set but LEDGERGC_ZK_TLS")
    refused(
        env(zk_tls="true", bk_zk_tls_cert=CLIENT.cert_pem),
        "LEDGERGC_BK_ZK_TLS_CERT is set but LEDGERGC_ZK_TLS_KEY is not",
    )


# --- what reaches a Spark executor -------------------------------------------------


def test_a_pickled_copy_carries_the_material_not_the_paths(
    pem: dict[str, str], tmp_path: Path
) -> None:
    """A Spark closure or broadcast pickles the settings: the executor may be another
    host, where the driver's files are not."""
    keystore = tmp_path / "client.p12"
    keystore.write_bytes(CLIENT.pkcs12("store-pass", CA))
    settings = Settings.from_env(
        env(zk_tls="true", zk_tls_ca=pem["ca"], zk_jaas=str(BROKER_JAAS))
        | env(bk_zk_tls_cert=str(keystore), bk_zk_tls_keystore_password="store-pass")
    )
    shipped = pickle.loads(pickle.dumps(settings))
    for security in (shipped.zk_security, shipped.bookkeeper_security):
        assert security.tls_ca is not None and security.tls_ca.startswith("-----BEGIN")
        assert security.jaas is None and security.sasl_username == "bookkeeper"
    assert shipped.bookkeeper_security.tls_key.startswith("-----BEGIN PRIVATE KEY")
    assert shipped.bookkeeper_security.tls_keystore_password is None
    # What arrives is settings that check out on their own, with no file at all.
    for path in tmp_path.iterdir():
        path.unlink()
    assert Settings.from_env(shipped.to_env()).bookkeeper_settings().zk_security.uses_tls
    assert isinstance(ZkSecurity().portable(lambda part: part), ZkSecurity)


def test_the_rendered_view_masks_the_sasl_password_and_a_pem_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The orphan DAG's Spark tasks hand the settings to spark-submit's environment, which
    the task's Rendered view shows: every secret part is registered with Airflow's masker."""
    import airflow.sdk.log

    from ledger_gc.airflow import orphan_tasks

    masked: list[str] = []
    monkeypatch.setattr(airflow.sdk.log, "mask_secret", masked.append)
    settings = Settings.from_env(
        env(zk_tls="true", zk_tls_cert=CLIENT.cert_pem, zk_tls_key=CLIENT.key_pem())
        | env(zk_sasl_mechanism="DIGEST-MD5", zk_sasl_username="gc", zk_sasl_password="s3cret")
        | env(state_dir=str(tmp_path))
    )
    environment = orphan_tasks.submit_env(settings, local_master=True)
    assert environment["LEDGERGC_ZK_SASL_PASSWORD"] == "s3cret"
    assert {"s3cret", CLIENT.key_pem()} <= set(masked)
    assert CLIENT.cert_pem not in masked  # a certificate is public


# --- review of issue 28 --------------------------------------------------------------


@pytest.mark.parametrize(
    "values",
    [
        dict(zk_tls_cert=CLIENT.cert_pem + CLIENT.key_pem()),  # the key in the cert's PEM
        dict(zk_tls_cert=CLIENT.cert_pem, zk_tls_key=CLIENT.key_pem()),
        dict(zk_tls_ca=CA.cert_pem + CLIENT.key_pem(), zk_tls_cert=CLIENT.cert_pem)
        | dict(zk_tls_key=CLIENT.key_pem()),  # a bundle pasted whole into the CA too
    ],
    ids=["cert-with-its-key", "key", "ca-with-a-key"],
)
def test_an_inline_private_key_is_a_secret_in_every_tls_part(
    values: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Any PEM text holding a PRIVATE KEY is a secret, whichever TLS setting holds it:
    masked by ``status --json`` (``provenance``), listed by ``secrets()`` (Airflow's
    masker: the Rendered view of the Spark tasks' environment)."""
    import json

    import airflow.sdk.log

    from ledger_gc.airflow import orphan_tasks

    settings = Settings.from_env(env(zk_tls="true", state_dir=str(tmp_path)) | env(**values))
    assert "PRIVATE KEY" not in json.dumps(settings.provenance())
    secrets = settings.secrets()
    for name, value in values.items():
        if "PRIVATE KEY" in value:
            assert value.strip() in {secret.strip() for secret in secrets}, name
    masked: list[str] = []
    monkeypatch.setattr(airflow.sdk.log, "mask_secret", masked.append)
    orphan_tasks.submit_env(settings, local_master=True)
    for value in values.values():
        if "PRIVATE KEY" in value:
            assert any(value.strip() == secret.strip() for secret in masked)
    assert CLIENT.cert_pem not in masked  # a certificate alone is public


def test_a_jaas_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    latin1 = tmp_path / "broker_jaas.conf"
    latin1.write_bytes(
        b"Client { org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        b' username="bookkeeper" password="p\xe4ss"; };\n'  # ISO-8859-1
    )
    message = refused(
        env(zk_sasl_mechanism="DIGEST-MD5", zk_jaas=str(latin1)),
        f"LEDGERGC_ZK_JAAS={latin1}",
        "not UTF-8",
    )
    assert "p\\xe4ss" not in message and "pss" not in message


def test_a_jaas_value_naming_a_property_is_refused_without_echoing_it() -> None:
    """A ``${`` in a value is refused (only the JVM expands it), but the value may be a
    password that happens to hold one: the error names the option, never its value."""
    text = (
        "Client { org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        ' username="bookkeeper" password="s3cr${et"; };'
    )
    with pytest.raises(ConfigError) as err:
        jaas.zookeeper_login(text, "LEDGERGC_ZK_JAAS=/etc/jaas.conf")
    message = str(err.value)
    assert "line 2" in message and "password" in message and "system property" in message
    assert "s3cr" not in message and "${et" not in message


def _pulsar_tls_and_sasl(pem: dict[str, str]) -> dict[str, str]:
    return env(zk_hosts="zk-pulsar:2281/pulsar", zk_tls="true", zk_tls_ca=pem["ca"]) | env(
        zk_tls_cert=pem["cert"],
        zk_tls_key=pem["key"],
        zk_sasl_mechanism="DIGEST-MD5",
        zk_sasl_username="pulsar",
        zk_sasl_password="p",
    )


def test_bookkeeper_tls_false_stops_inheriting_pulsars_tls(pem: dict[str, str]) -> None:
    """BookKeeper's ensemble may be plain beside a TLS Pulsar ensemble: an explicit
    ``LEDGERGC_BK_ZK_TLS=false`` takes none of Pulsar's TLS parts (its CA, certificate,
    key), as a bookie's JVM without ``zookeeper.client.secure`` uses none of them."""
    settings = Settings.from_env(
        _pulsar_tls_and_sasl(pem) | env(bk_zk_hosts="zk-bookkeeper:2181", bk_zk_tls="false")
    )
    bookkeeper = settings.bookkeeper_settings().zk_security
    assert not bookkeeper.uses_tls
    assert (bookkeeper.tls_ca, bookkeeper.tls_cert, bookkeeper.tls_key) == (None, None, None)
    assert bookkeeper.sasl_username == "pulsar"  # SASL still Pulsar's: only TLS was said
    assert settings.zk_security.tls_ca == pem["ca"]
    again = Settings.from_env(settings.to_env())
    assert not again.bookkeeper_security.uses_tls and again.zk_security.uses_tls
    # BookKeeper's own TLS part while its TLS is off is still a mistake.
    refused(
        _pulsar_tls_and_sasl(pem) | env(bk_zk_tls="false", bk_zk_tls_ca=pem["ca"]),
        "LEDGERGC_BK_ZK_TLS_CA is set but LEDGERGC_BK_ZK_TLS is not true",
    )


@pytest.mark.parametrize("none", ["", "none", "NONE"])
def test_bookkeeper_sasl_mechanism_none_stops_inheriting_pulsars_login(
    pem: dict[str, str], none: str, tmp_path: Path
) -> None:
    """An explicit empty (or ``none``) ``LEDGERGC_BK_ZK_SASL_MECHANISM``: BookKeeper's
    sessions log in with no SASL at all, not with Pulsar's login (its JAAS file or its
    username and password)."""
    for pulsar_login in (
        env(zk_sasl_mechanism="DIGEST-MD5", zk_sasl_username="pulsar", zk_sasl_password="p"),
        env(zk_jaas=str(BROKER_JAAS)),
    ):
        settings = Settings.from_env(pulsar_login | env(bk_zk_sasl_mechanism=none))
        bookkeeper = settings.bookkeeper_settings().zk_security
        assert not bookkeeper.uses_sasl
        assert bookkeeper.login(lambda part: part) is None
        assert settings.zk_security.uses_sasl
        again = Settings.from_env(settings.to_env())
        assert not again.bookkeeper_security.uses_sasl and again.zk_security.uses_sasl
        shipped = pickle.loads(pickle.dumps(settings))
        assert not shipped.bookkeeper_security.uses_sasl
    refused(
        env(bk_zk_sasl_mechanism=none, bk_zk_sasl_username="bookkeeper"),
        "LEDGERGC_BK_ZK_SASL_USERNAME is set but LEDGERGC_BK_ZK_SASL_MECHANISM is",
    )


def test_the_tls_context_trusts_the_configured_ca_alone(
    pem: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One context for kazoo's connections and the diagnosis (``zk_tls``): the CA named is
    the only one trusted (the system's store, here ``SSL_CERT_FILE``, is not added); with
    none named, the system's store is the one."""
    from ledger_gc.metadata.zk_tls import tls_context

    system = tmp_path / "system-ca.pem"
    system.write_text(issue("a public CA", ca=True).cert_pem)
    monkeypatch.setenv("SSL_CERT_FILE", str(system))
    names = str  # a part names itself
    pinned = tls_context(ZkSecurity(tls=True, tls_ca=pem["ca"]), names)
    assert [c["subject"] for c in pinned.get_ca_certs()] == [((("commonName", CA_NAME),),)]
    assert pinned.check_hostname
    system_only = tls_context(ZkSecurity(tls=True, tls_verify_hostname=False), names)
    assert [c["subject"] for c in system_only.get_ca_certs()] == [
        ((("commonName", "a public CA"),),)
    ]
    assert not system_only.check_hostname
    assert system_only.verify_mode == ssl.CERT_REQUIRED


def test_settings_made_anew_read_the_files_anew(pem: dict[str, str]) -> None:
    """What the files held is kept with the settings made from them (and their copies),
    never across settings made anew: a rotated certificate is the next settings'."""
    first = Settings.from_env(env(zk_tls="true", zk_tls_ca=pem["ca"]))
    Path(pem["ca"]).write_text(OTHER.cert_pem)
    assert first.zk_security.trusted_cas(lambda part: part) == CA.cert_pem.encode()
    again = Settings.from_env(env(zk_tls="true", zk_tls_ca=pem["ca"]))
    assert again.zk_security.trusted_cas(lambda part: part) == OTHER.cert_pem.encode()


def test_the_diagnosis_probes_the_servers_kazoo_tried() -> None:
    """``zk_diagnose`` reads the connect string as kazoo does: a bracketed IPv6 address
    without a port is that address on 2181, not a host named ``:``."""
    from ledger_gc.metadata.zk_diagnose import servers

    assert servers("[::1]") == [("::1", 2181)]
    assert servers("[::1]:2281,zk-1:2282,zk-2/pulsar") == [
        ("::1", 2281),
        ("zk-1", 2282),
        ("zk-2", 2181),
    ]


def test_bookkeepers_names_offer_its_own_variables_and_say_what_it_takes() -> None:
    """Issue 33: an error about BookKeeper's ensemble offers ``LEDGERGC_BK_ZK_*`` (its
    own: what changes it alone), while a value it takes from Pulsar's is still named by
    the variable that holds it, and said to apply."""
    settings = Settings.from_env(
        env(
            zk_hosts="zk1:2181",
            zk_sasl_mechanism="DIGEST-MD5",
            zk_sasl_username="bookkeeper",
            zk_sasl_password="secret",
            bk_zk_hosts="bk1:2181",
            bk_zk_sasl_service="zk",
        )
    )
    pulsar = settings.zk_setting_names()
    bookkeeper = settings.bookkeeper_settings()
    names = bookkeeper.zk_setting_names()

    assert pulsar.own("sasl_username") == pulsar("sasl_username") == "LEDGERGC_ZK_SASL_USERNAME"
    assert pulsar.taken(settings.zk_security, ("sasl_username",)) == ""
    assert pulsar.at("zk1:2181") == "ZooKeeper at zk1:2181"
    assert names("sasl_username") == "LEDGERGC_ZK_SASL_USERNAME"
    assert names.own("sasl_username") == "LEDGERGC_BK_ZK_SASL_USERNAME"
    assert names("sasl_service") == names.own("sasl_service") == "LEDGERGC_BK_ZK_SASL_SERVICE"
    assert (names("hosts"), names.own("hosts")) == ("LEDGERGC_BK_ZK_HOSTS",) * 2
    assert names.at("bk1:2181") == "ZooKeeper at bk1:2181 (BookKeeper's ensemble)"
    taken = names.taken(bookkeeper.zk_security, ("sasl_mechanism", "sasl_service", "jaas"))
    assert taken == (
        "; LEDGERGC_ZK_SASL_MECHANISM applies to BookKeeper's ensemble too, its own being unset"
    )
    # On Pulsar's ensemble, BookKeeper's address unset: its variable names it.
    shared = Settings.from_env(env(zk_hosts="zk1:2181")).bookkeeper_settings()
    assert shared.zk_setting_names()("hosts") == "LEDGERGC_ZK_HOSTS"
