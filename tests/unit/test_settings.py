from pathlib import Path

import pytest

from ledger_gc.config.settings import Settings
from ledger_gc.rules.trim.eligibility import TrimRetention


def test_defaults_follow_the_design():
    settings = Settings.from_env({})
    assert settings.delete_enabled is False  # orphan deletion is off until configured on
    assert settings.grace_seconds == 24 * 3600
    assert settings.retention_seconds == 7 * 24 * 3600
    assert settings.trim_retention == TrimRetention(0, 0)  # Pulsar's defaults
    assert settings.orphan_max_fraction == 0.10
    assert settings.s3_endpoint is None  # AWS default


def test_every_design_variable_is_read():
    settings = Settings.from_env(
        {
            "LEDGERGC_ZK_HOSTS": "zk1:2181,zk2:2181/pulsar",
            "LEDGERGC_S3_ENDPOINT": "",
            "LEDGERGC_BUCKET": "b",
            "LEDGERGC_PREFIX": "/p/q/",
            "LEDGERGC_DELETE_ENABLED": "true",
            "LEDGERGC_GRACE_SECONDS": "60",
            "LEDGERGC_RETENTION_SECONDS": "120",
            "LEDGERGC_STATE_DIR": "/var/lib/ledgergc",
            "LEDGERGC_TRIM_RETENTION_SECONDS": "-1",
            "LEDGERGC_TRIM_RETENTION_BYTES": "1048576",
            "LEDGERGC_TRIM_RETENTION_OVERRIDES": '{"acme/keep": {"seconds": -1, "bytes": -1}}',
        }
    )
    assert settings.zk_hosts == "zk1:2181,zk2:2181/pulsar"
    assert settings.zk_chroot == "/pulsar"
    assert settings.s3_endpoint is None
    assert (settings.bucket, settings.prefix, settings.key_prefix) == ("b", "p/q", "p/q/")
    assert settings.delete_enabled is True
    assert (settings.grace_seconds, settings.retention_seconds) == (60, 120)
    assert settings.state_dir == Path("/var/lib/ledgergc")
    assert settings.trim_retention == TrimRetention(-1, 1048576)
    assert settings.retention_for("acme/keep/persistent/t") == TrimRetention(-1, -1)
    assert settings.retention_for("acme/other/persistent/t") == TrimRetention(-1, 1048576)


def test_an_empty_prefix_means_the_bucket_root():
    settings = Settings.from_env({"LEDGERGC_PREFIX": ""})
    assert settings.prefix == "" and settings.key_prefix == ""


def test_the_orphan_delete_lock_wait_is_a_setting() -> None:
    from ledger_gc.config.settings import Settings
    from ledger_gc.errors import ConfigError

    assert Settings.from_env({}).orphan_lock_wait_seconds == 300.0
    settings = Settings.from_env({"LEDGERGC_ORPHAN_LOCK_WAIT_SECONDS": "7.5"})
    assert settings.orphan_lock_wait_seconds == 7.5
    assert Settings.from_env(settings.to_env()).orphan_lock_wait_seconds == 7.5
    with pytest.raises(ConfigError, match="LEDGERGC_ORPHAN_LOCK_WAIT_SECONDS"):
        Settings.from_env({"LEDGERGC_ORPHAN_LOCK_WAIT_SECONDS": "-1"})


def test_where_the_orphan_delete_runs_is_a_setting() -> None:
    from ledger_gc.errors import ConfigError

    assert Settings.from_env({}).orphan_delete_spark_over == 500
    settings = Settings.from_env({"LEDGERGC_ORPHAN_DELETE_SPARK_OVER": "0"})
    assert settings.orphan_delete_spark_over == 0
    assert Settings.from_env(settings.to_env()).orphan_delete_spark_over == 0
    for bad in ("-1", "many", "2.5"):
        with pytest.raises(ConfigError, match="LEDGERGC_ORPHAN_DELETE_SPARK_OVER"):
            Settings.from_env({"LEDGERGC_ORPHAN_DELETE_SPARK_OVER": bad})


def test_the_pulsar_cluster_setting_is_a_list_of_cluster_names() -> None:
    from ledger_gc.errors import ConfigError

    assert Settings.from_env({}).pulsar_clusters == ()
    settings = Settings.from_env({"LEDGERGC_PULSAR_CLUSTER": " us-east , eu_1:a=b.c,(untagged)"})
    assert settings.pulsar_clusters == ("us-east", "eu_1:a=b.c", "(untagged)")
    assert Settings.from_env(settings.to_env()).pulsar_clusters == settings.pulsar_clusters
    for bad in ("us east", "a,,b", "a,", "a/b", "(none)"):
        with pytest.raises(ConfigError, match="LEDGERGC_PULSAR_CLUSTER") as err:
            Settings.from_env({"LEDGERGC_PULSAR_CLUSTER": bad})
        assert "\n" not in str(err.value)


def test_where_each_value_came_from_keeps_no_secret_in_clear() -> None:
    """``origins`` go wherever the settings go (a pickle to every executor, a repr in a
    traceback): they say where a value came from, never what a secret is."""
    import pickle

    secrets = ("digest-secret", "sasl-secret", "db-secret", "aws-secret", "params-secret")
    settings = Settings.from_env(
        {
            "LEDGERGC_ZK_DIGEST": "gc:digest-secret",
            "LEDGERGC_ZK_SASL_MECHANISM": "DIGEST-MD5",
            "LEDGERGC_ZK_SASL_USERNAME": "bookkeeper",
            "LEDGERGC_ZK_SASL_PASSWORD": "sasl-secret",
            "LEDGERGC_STATE_URL": "postgresql+psycopg://gc:db-secret@db/ledgergc",
            "AWS_ACCESS_KEY_ID": "AKIAKEYID",
            "AWS_SECRET_ACCESS_KEY": "aws-secret",
        }
    ).with_values({"zk_sasl_password": "params-secret"}, source="the run's params", kind="params")
    kept = pickle.dumps(settings.origins) + repr(settings.origins).encode()
    assert not [secret for secret in secrets if secret.encode() in kept]
    # Still known, and still dropped when the value changes behind their back.
    assert settings.source_of("LEDGERGC_ZK_SASL_PASSWORD") == "params"
    assert settings.source_of("LEDGERGC_ZK_DIGEST") == "env"
    changed = settings.with_overrides(zk_digest="gc:another")
    assert changed.source_of("LEDGERGC_ZK_DIGEST") == "code"
