"""Every reader and writer of the settings follows the one declaration of each field.

Issue 20: the settings were listed by hand in several places, which drifted. These tests
hold the places that are now derived from ``Settings``' declarations to each other: the
environment both ways, the ``ledgergc_settings`` variable, the masked secrets and the
README's table.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pki import CA, CLIENT

from ledger_gc.airflow.settings_hook import apply_mapping
from ledger_gc.config.settings import Settings
from ledger_gc.config.settings_schema import declared, default_of
from ledger_gc.config.settings_table import render_settings_table, replace_table, table_in
from ledger_gc.config.zk_security import ZkSecurity
from ledger_gc.errors import ConfigError
from ledger_gc.rules.trim.eligibility import TrimRetention

README = Path(__file__).resolve().parents[2] / "README.md"
JAAS = Path(__file__).resolve().parent / "zk_security_files" / "broker_jaas.conf"


def _zk_security(password: str) -> ZkSecurity:
    """Every part of one ensemble's TLS and SASL settings but the JAAS file (which
    replaces the username and password: ``WITH_JAAS``)."""
    return ZkSecurity(
        tls=True,
        tls_ca=CA.cert_pem,
        tls_cert=CLIENT.cert_pem,
        tls_key=CLIENT.key_pem(f"key-{password}"),
        tls_keystore_password=f"key-{password}",
        tls_truststore_password=f"trust-{password}",
        tls_verify_hostname=False,
        sasl_mechanism="DIGEST-MD5",
        sasl_username="gc",
        sasl_password=f"sasl-{password}",
        sasl_service="zk",
    )


#: A value other than the default for every declared setting.
EVERY_SETTING_CHANGED = Settings(
    zk_address="zk1:2181,zk2:2181/pulsar",
    zk_digest="gc:zk-pass",
    zk_timeout_seconds=4.5,
    zk_security=_zk_security("zk"),
    s3_endpoint="http://127.0.0.1:9000",
    s3_region="eu-west-1",
    s3_access_key_id="AKIA-TEST",
    s3_secret_access_key="s3cret-key",
    s3_session_token="session-token",
    bucket="b",
    prefix="p/q",
    delete_enabled=True,
    grace_seconds=60,
    retention_seconds=120,
    orphan_max_fraction=0.25,
    orphan_lock_wait_seconds=7.5,
    orphan_delete_spark_over=0,
    state_url="postgresql+psycopg://gc:db-pass@db.example.com:5432/gc",
    state_dir=Path("/var/lib/ledgergc"),
    trim_retention=TrimRetention(seconds=-1, bytes=1048576),
    trim_retention_overrides={"acme/keep": TrimRetention(-1, -1)},
    zk_max_record_bytes=500_000,
    metadata_read_only="true",
    offload_bucket="offload",
    offload_prefix="tiered",
    offload_endpoint="http://127.0.0.1:9001",
    offload_s3_region="eu-central-1",
    offload_driver="google-cloud-storage",
    offload_gcs_key_file=Path("/etc/pulsar/gcs.json"),
    offload_gcs_token="ya29.gcs-token",
    offload_gcs_project="gcs-project",
    azure_storage_account="azureaccount",
    azure_storage_key="azure-account-key",
    azure_storage_sas="sv=2025&sig=azure-sas",
    azure_soft_delete_days=7,
    azure_storage_connection_string="AccountName=a;AccountKey=azure-conn-key",
    bookkeeper="false",
    bk_ledgers_root="/bk/ledgers",
    bk_zk_address="zk3:2181/bk",
    bk_zk_security=_zk_security("bk"),
    config_store_address="zk:zk4:2181/global",
    config_store_security=_zk_security("cfg"),
    config_store_digest="gc:cfg-pass",
    pulsar_metadata="true",
    bk_shared=True,
    bk_remove_unreadable=True,
    bk_record_cache=False,
    bk_full_read_every=3,
    bk_record_cache_keep_days=90,
    zk_max_reads_per_second=2500,
    pulsar_clusters=("us-east", "(untagged)"),
    pulsar_conf=Path("/etc/pulsar/broker.conf"),
)
#: The settings ``EVERY_SETTING_CHANGED`` cannot hold beside the ones they replace.
WITH_JAAS = Settings(
    zk_security=ZkSecurity(jaas=str(JAAS)),
    bk_zk_security=ZkSecurity(jaas=str(JAAS)),
    config_store_security=ZkSecurity(jaas=str(JAAS)),
    state_dir=Path("/var/lib/ledgergc"),
)
SAMPLES = (EVERY_SETTING_CHANGED, WITH_JAAS)


def inherited(sample: Settings) -> Settings:
    """What a child process gets back from ``to_env``: all but the broker.conf's path (it
    gets the values instead; a Spark driver on another host has no broker.conf) and the
    GCS key file (it gets the access token made of it, never the key)."""
    return dataclasses.replace(sample, pulsar_conf=None, offload_gcs_key_file=None)


def _value(settings: Settings, spec) -> object:  # type: ignore[no-untyped-def]
    value = getattr(settings, spec.field)
    return getattr(value, spec.part) if spec.part else value


def test_the_sample_changes_every_declared_setting() -> None:
    unchanged = [
        spec.env
        for spec in declared(Settings)
        if all(_value(sample, spec) == default_of(Settings, spec) for sample in SAMPLES)
    ]
    assert unchanged == []
    declared_fields = {spec.field for spec in declared(Settings)}
    assert declared_fields == {f.name for f in dataclasses.fields(Settings)} - {
        "origins",
        "ensemble",
    }


def test_the_environment_round_trips_every_setting() -> None:
    for sample in SAMPLES:
        assert Settings.from_env(sample.to_env()) == inherited(sample)
    assert set(Settings.from_env({}).to_env()) == {
        spec.env for spec in declared(Settings) if not spec.omit_when_empty and spec.inherited
    }


def test_the_variable_reads_every_setting_as_the_environment_does() -> None:
    """A JSON variable that quotes every value (as text) means what the same text in the
    environment means: one conversion, whichever way a setting arrives."""
    for sample in SAMPLES:
        env = sample.to_env()
        as_text = {spec.key: env[spec.env] for spec in declared(Settings) if spec.env in env}
        assert apply_mapping(Settings(), as_text) == inherited(sample)


def test_the_variable_names_a_setting_by_its_variable_or_its_field() -> None:
    by_variable = {spec.env.removeprefix("LEDGERGC_").lower(): spec for spec in declared(Settings)}
    assert apply_mapping(Settings(), {"pulsar_cluster": "a,b"}).pulsar_clusters == ("a", "b")
    assert apply_mapping(Settings(), {"pulsar_clusters": ["a"]}).pulsar_clusters == ("a",)
    for key, spec in by_variable.items():
        if spec.env.startswith("LEDGERGC_"):
            assert key in spec.keys


def test_an_unknown_key_in_the_variable_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match="ledgergc_settings: 'grace' is not a setting") as err:
        apply_mapping(Settings(), {"grace": 60})
    assert "\n" not in str(err.value)


def test_the_secrets_are_every_secret_setting_and_never_shown() -> None:
    tls_keys = [
        EVERY_SETTING_CHANGED.zk_security.tls_key,
        EVERY_SETTING_CHANGED.bk_zk_security.tls_key,
        EVERY_SETTING_CHANGED.config_store_security.tls_key,
    ]
    assert sorted(EVERY_SETTING_CHANGED.secrets()) == sorted(
        ["zk-pass", "cfg-pass", "s3cret-key", "session-token", "db-pass", *tls_keys]
        + ["ya29.gcs-token", "azure-account-key", "sv=2025&sig=azure-sas"]
        + ["AccountName=a;AccountKey=azure-conn-key"]
        + [f"{kind}-{zk}" for kind in ("key", "trust", "sasl") for zk in ("zk", "bk", "cfg")]
    )
    assert Settings().secrets() == []
    shown = repr(EVERY_SETTING_CHANGED)
    assert not any(secret in shown for secret in EVERY_SETTING_CHANGED.secrets())
    with pytest.raises(ConfigError) as err:
        apply_mapping(Settings(), {"s3_secret_access_key": 42})
    assert "42" not in str(err.value) and "AWS_SECRET_ACCESS_KEY" in str(err.value)


def test_the_readme_table_is_the_declared_settings() -> None:
    """Regenerate with ``python -m ledger_gc.config.settings_table README.md``."""
    table = render_settings_table()
    assert table_in(README.read_text(encoding="utf-8")) == table
    for spec in declared(Settings):
        assert (f"`{spec.env}`" in table) == spec.env.startswith("LEDGERGC_")


def test_the_table_generator_rewrites_only_its_block() -> None:
    from ledger_gc.config.settings_table import BEGIN_MARKER, END_MARKER

    text = f"before\n{BEGIN_MARKER}\n| old |\n{END_MARKER}\nafter\n"
    rewritten = replace_table(text, render_settings_table())
    assert rewritten.startswith(f"before\n{BEGIN_MARKER}\n| variable |")
    assert rewritten.endswith(f"{END_MARKER}\nafter\n")
    assert table_in(rewritten) == render_settings_table()


@pytest.mark.parametrize("value", ["0", "-3", "ten"])
def test_the_record_cache_keep_days_is_a_positive_number_of_days(value: str) -> None:
    with pytest.raises(ConfigError, match="LEDGERGC_BK_RECORD_CACHE_KEEP_DAYS"):
        Settings.from_env({"LEDGERGC_BK_RECORD_CACHE_KEEP_DAYS": value})
    assert Settings.from_env({}).bk_record_cache_keep_days == 30
