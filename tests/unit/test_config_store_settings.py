"""Pulsar's configuration store at the edge (DESIGN.md "Pulsar's own metadata"): where it
is (``LEDGERGC_CONFIG_STORE_HOSTS``, else broker.conf's keys, else the local store), its
TLS, SASL and digest (``LEDGERGC_CONFIG_STORE_*``, each unset part the local store's),
errors that name its own variables, its secrets masked, and the source's mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ledger_gc.config.broker_conf import settings_of
from ledger_gc.config.edge import resolve
from ledger_gc.config.secret_values import secret_values
from ledger_gc.config.settings import Settings
from ledger_gc.errors import ConfigError

LOCAL = {"LEDGERGC_ZK_HOSTS": "zk1:2181/pulsar"}


def _values(properties: dict[str, str]) -> dict[str, tuple[str, str]]:
    return {v.env: (v.value, v.key) for v in settings_of(properties)}


def test_broker_conf_keys_newest_first_and_blank_is_unset() -> None:
    keys = {
        "configurationMetadataStoreUrl": "zk:global:2181/cfg",
        "configurationStoreServers": "older:2181",
        "globalZookeeperServers": "oldest:2181",
    }
    assert _values(keys)["LEDGERGC_CONFIG_STORE_HOSTS"] == (
        "zk:global:2181/cfg",
        "configurationMetadataStoreUrl",
    )
    keys["configurationMetadataStoreUrl"] = "  "
    assert _values(keys)["LEDGERGC_CONFIG_STORE_HOSTS"] == (
        "older:2181",
        "configurationStoreServers",
    )
    keys["configurationStoreServers"] = ""
    assert _values(keys)["LEDGERGC_CONFIG_STORE_HOSTS"] == (
        "oldest:2181",
        "globalZookeeperServers",
    )
    # The stock broker.conf leaves all three empty: the local store.
    assert "LEDGERGC_CONFIG_STORE_HOSTS" not in _values(
        {"configurationMetadataStoreUrl": "", "globalZookeeperServers": ""}
    )


def test_unset_the_configuration_store_is_the_local_store() -> None:
    endpoints = resolve(Settings.from_env(LOCAL))
    assert endpoints.config_store is None and not endpoints.config_store_given
    assert endpoints.configuration is endpoints.zk
    assert endpoints.pulsar_metadata_mode == "auto"
    # Set empty: the local store too, and a broker.conf does not fill it.
    empty = resolve(Settings.from_env({**LOCAL, "LEDGERGC_CONFIG_STORE_HOSTS": ""}))
    assert empty.config_store is None and not empty.config_store_given


@pytest.mark.parametrize(
    ("given", "hosts"),
    [
        ("zk2:2181/global", "zk2:2181/global"),
        ("zk:zk2:2181,zk3:2181/global", "zk2:2181,zk3:2181/global"),
        ("metadata-store:zk:zk2:2181/global", "zk2:2181/global"),
        ("zk1:2181/configuration", "zk1:2181/configuration"),  # another chroot, same server
    ],
)
def test_its_own_address_in_pulsars_forms(given: str, hosts: str) -> None:
    settings = Settings.from_env({**LOCAL, "LEDGERGC_CONFIG_STORE_HOSTS": given})
    endpoints = resolve(settings)
    assert endpoints.config_store is not None and endpoints.config_store_given
    assert endpoints.config_store.hosts == hosts
    assert endpoints.configuration is endpoints.config_store
    assert endpoints.config_store.names("hosts") == "LEDGERGC_CONFIG_STORE_HOSTS"
    assert settings.provenance()["LEDGERGC_CONFIG_STORE_HOSTS"]["source"] == "env"


def test_the_local_stores_own_address_is_no_second_store_but_is_given() -> None:
    endpoints = resolve(
        Settings.from_env({**LOCAL, "LEDGERGC_CONFIG_STORE_HOSTS": "zk:zk1:2181/pulsar"})
    )
    assert endpoints.config_store is None and endpoints.config_store_given


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("oxia://oxia:6648/default", "is Oxia, not ZooKeeper"),
        ("etcd:http://etcd:2379", "is etcd, not ZooKeeper"),
        ("memory:local", "is an in-memory store"),
        ("zk+hierarchical://zk1:2181/ledgers", "BookKeeper's metadataServiceUri form"),
        ("zk1:2181:x", "has no host name"),
        ("garbage!!", "has no host name"),
        ("zk1:99999", "not a port number"),
        ("http://zk1:2181", "is a URL of a store ledger-gc cannot read"),
        ("metadata-store:", "names no metadata store"),
    ],
)
def test_another_store_is_one_line_naming_the_variable(given: str, says: str) -> None:
    """The fix offered is a form this setting takes: never BookKeeper's ``zk+…://``,
    which it refuses (review 3 of issue 34)."""
    with pytest.raises(ConfigError) as err:
        Settings.from_env({**LOCAL, "LEDGERGC_CONFIG_STORE_HOSTS": given})
    message = str(err.value)
    assert message.startswith("LEDGERGC_CONFIG_STORE_HOSTS=") and says in message, message
    assert "\n" not in message
    fix = message.removeprefix(f"LEDGERGC_CONFIG_STORE_HOSTS={given!r}")
    assert "zk+hierarchical" not in fix, message
    assert "configurationMetadataStoreUrl" in fix and "zk:" in fix, message


def test_from_broker_conf_with_provenance(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "metadataStoreUrl=zk:zk1:2181/pulsar\n"
        "configurationMetadataStoreUrl=\n"
        "configurationStoreServers=zk9:2181/global\n",
        encoding="utf-8",
    )
    settings = Settings.from_env({"LEDGERGC_PULSAR_CONF": str(conf)})
    endpoints = resolve(settings)
    assert endpoints.config_store is not None and endpoints.config_store.hosts == "zk9:2181/global"
    assert endpoints.config_store_given
    assert settings.provenance()["LEDGERGC_CONFIG_STORE_HOSTS"] == {
        "value": "zk9:2181/global",
        "source": "broker.conf",
        "from": f"configurationStoreServers in {conf}",
    }
    # An explicit setting wins; set empty, it is the local store and the file is not read.
    env = Settings.from_env(
        {"LEDGERGC_PULSAR_CONF": str(conf), "LEDGERGC_CONFIG_STORE_HOSTS": "x:1"}
    )
    assert resolve(env).configuration.hosts == "x:1"
    empty = Settings.from_env(
        {"LEDGERGC_PULSAR_CONF": str(conf), "LEDGERGC_CONFIG_STORE_HOSTS": ""}
    )
    assert resolve(empty).config_store is None
    # A child process gets the value, not the file.
    child = Settings.from_env(settings.to_env())
    assert resolve(child).configuration.hosts == "zk9:2181/global"
    bad = tmp_path / "bad.conf"
    bad.write_text("configurationMetadataStoreUrl=oxia://o:6648\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        Settings.from_env({"LEDGERGC_PULSAR_CONF": str(bad)})
    assert "LEDGERGC_CONFIG_STORE_HOSTS" in str(err.value)
    assert f"configurationMetadataStoreUrl in {bad}" in str(err.value)


def test_each_unset_security_part_is_the_local_stores() -> None:
    environ = {
        **LOCAL,
        "LEDGERGC_CONFIG_STORE_HOSTS": "zk2:2181/global",
        "LEDGERGC_ZK_SASL_MECHANISM": "DIGEST-MD5",
        "LEDGERGC_ZK_SASL_USERNAME": "broker",
        "LEDGERGC_ZK_SASL_PASSWORD": "Local-SeKrit",
        "LEDGERGC_ZK_DIGEST": "gc:Digest-SeKrit",
    }
    endpoints = resolve(Settings.from_env(environ))
    config = endpoints.configuration
    login = config.login()
    assert login is not None and (login.username, login.password) == ("broker", "Local-SeKrit")
    assert config.digest == "gc:Digest-SeKrit"
    own = resolve(
        Settings.from_env(
            {
                **environ,
                "LEDGERGC_CONFIG_STORE_SASL_USERNAME": "global",
                "LEDGERGC_CONFIG_STORE_SASL_PASSWORD": "Global-SeKrit",
                "LEDGERGC_CONFIG_STORE_DIGEST": "gc2:Digest2-SeKrit",
            }
        )
    )
    login = own.configuration.login()
    assert login is not None and (login.username, login.password) == ("global", "Global-SeKrit")
    assert own.configuration.digest == "gc2:Digest2-SeKrit"
    local = own.zk.login()
    assert local is not None and local.username == "broker"
    assert own.zk.digest == "gc:Digest-SeKrit"
    # Off on its own: SASL none takes none of the local store's login.
    plain = resolve(Settings.from_env({**environ, "LEDGERGC_CONFIG_STORE_SASL_MECHANISM": "none"}))
    assert plain.configuration.login() is None and plain.zk.login() is not None


def test_its_secrets_are_masked_and_never_printed() -> None:
    settings = Settings.from_env(
        {
            **LOCAL,
            "LEDGERGC_CONFIG_STORE_HOSTS": "zk2:2181/global",
            "LEDGERGC_CONFIG_STORE_SASL_MECHANISM": "DIGEST-MD5",
            "LEDGERGC_CONFIG_STORE_SASL_USERNAME": "global",
            "LEDGERGC_CONFIG_STORE_SASL_PASSWORD": "Global-SeKrit",
            "LEDGERGC_CONFIG_STORE_DIGEST": "gc2:Digest2-SeKrit",
        }
    )
    found = secret_values(settings)
    assert "Global-SeKrit" in found and "Digest2-SeKrit" in found
    endpoints = resolve(settings)
    assert endpoints.config_store is not None
    assert "Global-SeKrit" in endpoints.config_store.secrets()
    shown = settings.provenance()
    assert shown["LEDGERGC_CONFIG_STORE_SASL_PASSWORD"]["value"] == "***"
    assert shown["LEDGERGC_CONFIG_STORE_DIGEST"]["value"] == "gc2:***"
    for text in (repr(settings), repr(endpoints), str(shown)):
        assert "SeKrit" not in text


def _jaas(tmp_path: Path, user: str, password: str) -> str:
    path = tmp_path / f"{user}-jaas.conf"
    path.write_text(
        "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        f'  username="{user}"\n  password="{password}";\n}};\n'
    )
    return str(path)


@pytest.mark.parametrize("prefix", ["LEDGERGC_CONFIG_STORE_", "LEDGERGC_BK_ZK_"])
def test_a_login_of_its_own_takes_no_part_of_the_local_stores_other_login_form(
    tmp_path: Path, prefix: str
) -> None:
    """A JAAS file for one ensemble and a username and password for the other are two
    logins, one each: the ensemble with a login of its own takes none of the local
    store's (its JAAS file, or its username and password), else its own JAAS file and the
    local store's username and password were "both set" (review 3 of issue 34)."""
    local = {
        **LOCAL,
        prefix + "HOSTS": "zk2:2181/other",
        "LEDGERGC_ZK_SASL_MECHANISM": "DIGEST-MD5",
    }
    by_words = {"LEDGERGC_ZK_SASL_USERNAME": "broker", "LEDGERGC_ZK_SASL_PASSWORD": "Local-SeKrit"}
    own_jaas = {prefix + "JAAS": _jaas(tmp_path, "other", "Other-SeKrit")}
    endpoints = resolve(Settings.from_env({**local, **by_words, **own_jaas}))
    other = endpoints.config_store if "CONFIG" in prefix else endpoints.bookkeeper.zk
    assert other is not None
    login = other.login()
    assert login is not None and (login.username, login.password) == ("other", "Other-SeKrit")
    local_login = endpoints.zk.login()
    assert local_login is not None and local_login.username == "broker"

    by_file = {"LEDGERGC_ZK_JAAS": _jaas(tmp_path, "broker", "Local-SeKrit")}
    own_words = {prefix + "SASL_USERNAME": "other", prefix + "SASL_PASSWORD": "Other-SeKrit"}
    endpoints = resolve(Settings.from_env({**local, **by_file, **own_words}))
    other = endpoints.config_store if "CONFIG" in prefix else endpoints.bookkeeper.zk
    assert other is not None
    login = other.login()
    assert login is not None and (login.username, login.password) == ("other", "Other-SeKrit")
    local_login = endpoints.zk.login()
    assert local_login is not None and local_login.username == "broker"


@pytest.mark.parametrize(
    ("environ", "fix", "not_offered"),
    [
        (
            {"LEDGERGC_CONFIG_STORE_TLS_CA": "/etc/ssl/ca.pem"},
            "set LEDGERGC_CONFIG_STORE_TLS=true",
            "set LEDGERGC_ZK_TLS=true",
        ),
        (
            {"LEDGERGC_CONFIG_STORE_SASL_USERNAME": "global"},
            "set LEDGERGC_CONFIG_STORE_SASL_MECHANISM to DIGEST-MD5",
            "set LEDGERGC_ZK_SASL_MECHANISM to",
        ),
        (
            {
                "LEDGERGC_CONFIG_STORE_SASL_MECHANISM": "DIGEST-MD5",
                "LEDGERGC_CONFIG_STORE_SASL_USERNAME": "global",
            },
            "needs LEDGERGC_CONFIG_STORE_SASL_PASSWORD (or LEDGERGC_CONFIG_STORE_JAAS",
            "needs LEDGERGC_ZK_SASL_PASSWORD",
        ),
        ({"LEDGERGC_CONFIG_STORE_DIGEST": "nocolon"}, "LEDGERGC_CONFIG_STORE_DIGEST", "ZK_DIGEST"),
    ],
)
def test_a_configuration_store_setting_error_names_its_own_variable(
    environ: dict[str, str], fix: str, not_offered: str
) -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({**LOCAL, "LEDGERGC_CONFIG_STORE_HOSTS": "zk2:2181/g", **environ})
    message = str(err.value)
    assert fix in message and not_offered not in message and "\n" not in message, message


@pytest.mark.parametrize("mode", ["auto", "true", "false", "TRUE"])
def test_the_pulsar_metadata_mode(mode: str) -> None:
    endpoints = resolve(Settings.from_env({**LOCAL, "LEDGERGC_PULSAR_METADATA": mode}))
    assert endpoints.pulsar_metadata_mode == mode.lower()
    assert endpoints.pulsar_metadata_on is (mode.lower() != "false")


def test_a_bad_pulsar_metadata_mode_is_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        Settings.from_env({**LOCAL, "LEDGERGC_PULSAR_METADATA": "maybe"})
    assert str(err.value) == "LEDGERGC_PULSAR_METADATA='maybe' must be auto, true or false"


class _Conn:
    """An Airflow connection as the settings hook reads it."""

    def __init__(self, host: str, **extra: Any) -> None:
        self.host, self.port, self.login, self.password = host, None, "", ""
        self.conn_id, self.conn_type, self.schema = "ledgergc_zookeeper", "generic", None
        self.extra_dejson = extra


def test_the_zookeeper_connection_names_the_configuration_store(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from ledger_gc.airflow import settings_hook

    monkeypatch.setenv("LEDGERGC_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(settings_hook, "_variable", dict)
    conn = _Conn(
        "zk:zk1:2181/pulsar",
        config_store_hosts="zk:zk2:2181/global",
        config_store_tls="false",
        config_store_sasl_mechanism="none",
    )
    monkeypatch.setattr(
        settings_hook, "_connection", lambda conn_id: {conn.conn_id: conn}.get(conn_id)
    )
    settings = settings_hook.LedgerGcHook().get_conn()
    endpoints = resolve(settings)
    assert endpoints.config_store is not None and endpoints.config_store.hosts == "zk2:2181/global"
    shown = settings.provenance()["LEDGERGC_CONFIG_STORE_HOSTS"]
    assert (shown["value"], shown["source"]) == ("zk:zk2:2181/global", "connection")


def test_a_digest_refusal_on_the_configuration_store_names_its_own_digest() -> None:
    from ledger_gc.metadata.zk_access import _fix

    names = resolve(
        Settings.from_env({**LOCAL, "LEDGERGC_CONFIG_STORE_HOSTS": "zk2:2181/g"})
    ).configuration.names
    assert _fix(["digest:admin"], "DELETE", names) == (
        "set LEDGERGC_CONFIG_STORE_DIGEST to admin's user:password"
    )
    local = resolve(Settings.from_env(LOCAL)).zk.names
    assert "set LEDGERGC_ZK_DIGEST to" in _fix(["digest:admin"], "DELETE", local)


@pytest.mark.parametrize("holders", [["sasl:broker"], []])
def test_a_refusal_on_the_configuration_store_offers_the_brokers_identity(
    holders: list[str],
) -> None:
    """The configuration store is written by Pulsar's brokers: its refusals never send the
    operator to BookKeeper's bookies (review 3 of issue 34)."""
    from ledger_gc.metadata.zk_access import _fix

    names = resolve(
        Settings.from_env({**LOCAL, "LEDGERGC_CONFIG_STORE_HOSTS": "zk2:2181/g"})
    ).configuration.names
    fix = _fix(holders, "READ", names)
    assert "BookKeeper" not in fix and "bookies" not in fix, fix
    assert "brokers'" in fix and "LEDGERGC_CONFIG_STORE_JAAS" in fix, fix
