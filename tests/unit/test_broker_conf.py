"""A broker's broker.conf (LEDGERGC_PULSAR_CONF): read as Java reads it, mapped by
Pulsar's own key names and precedence, and never over a value set explicitly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ledger_gc.config.broker_conf import ConfValue, read_broker_conf, settings_of
from ledger_gc.config.java_properties import parse_properties
from ledger_gc.config.settings import Settings
from ledger_gc.errors import ConfigError

# --- java.util.Properties.load's rules -------------------------------------------------


def test_comments_blank_lines_and_the_three_separators() -> None:
    text = (
        "# a comment\n"
        "! also a comment\n"
        "   \n"
        "a=1\n"
        "b: 2\n"
        "c 3\n"
        "  d   =   4 with spaces inside\n"
        "e\t:\tfive\n"
        "f\n"
        "g=\n"
        "  # indented comment=not a key\n"
    )
    assert parse_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "4 with spaces inside",
        "e": "five",
        "f": "",
        "g": "",
    }


def test_continuations_join_lines_and_drop_the_next_lines_indent() -> None:
    text = (
        "metadataStoreUrl=zk:zk1:2181,\\\n"
        "                 zk2:2181,\\\n"
        "   zk3:2181/pulsar\n"
        "even=ends in two backslashes\\\\\n"
        "next=line\n"
        "# a comment never continues \\\n"
        "after=comment\n"
        "last=at the end\\"
    )
    assert parse_properties(text) == {
        "metadataStoreUrl": "zk:zk1:2181,zk2:2181,zk3:2181/pulsar",
        "even": "ends in two backslashes\\",
        "next": "line",
        "after": "comment",
        "last": "at the end",
    }


def test_escapes_in_keys_and_values_and_the_last_repeat_wins() -> None:
    text = (
        "key\\ with\\ spaces = v\n"
        "a\\:b=c\\=d\n"
        "tab=x\\ty\n"
        "uni=caf\\u00e9\n"
        "plain=\\q\n"
        "dup=first\r\n"
        "dup=second\r"
        "mac=line"
    )
    assert parse_properties(text) == {
        "key with spaces": "v",
        "a:b": "c=d",
        "tab": "x\ty",
        "uni": "café",
        "plain": "q",
        "dup": "second",
        "mac": "line",
    }


def test_a_malformed_unicode_escape_names_its_line() -> None:
    with pytest.raises(ValueError, match="line 2: malformed"):
        parse_properties("ok=1\nbad=\\u12\n")


# --- Pulsar's keys ---------------------------------------------------------------------


def _values(properties: dict[str, str]) -> dict[str, tuple[str, str]]:
    return {v.env: (v.value, v.key) for v in settings_of(properties)}


def test_metadata_store_url_wins_over_the_older_zookeeper_servers() -> None:
    both = {"metadataStoreUrl": "zk:new:2181/p", "zookeeperServers": "old:2181"}
    assert _values(both)["LEDGERGC_ZK_HOSTS"] == ("zk:new:2181/p", "metadataStoreUrl")
    # The stock broker.conf leaves metadataStoreUrl empty: the older key is read then.
    older = {"metadataStoreUrl": "  ", "zookeeperServers": "old:2181/p"}
    assert _values(older)["LEDGERGC_ZK_HOSTS"] == ("old:2181/p", "zookeeperServers")
    assert "LEDGERGC_ZK_HOSTS" not in _values({"metadataStoreUrl": ""})


def test_an_empty_bookkeeper_uri_is_pulsars_own_store() -> None:
    assert "LEDGERGC_BK_ZK_HOSTS" not in _values({"bookkeeperMetadataServiceUri": ""})
    assert "LEDGERGC_BK_ZK_HOSTS" not in _values(
        {"bookkeeperMetadataServiceUri": "metadata-store:"}
    )
    uri = "zk+hierarchical://bk1:2181;bk2:2181/ledgers"
    assert _values({"bookkeeperMetadataServiceUri": uri})["LEDGERGC_BK_ZK_HOSTS"] == (
        uri,
        "bookkeeperMetadataServiceUri",
    )


def test_offload_keys_the_drivers_older_spelling_first_then_the_generic_one() -> None:
    conf = {
        "managedLedgerOffloadDriver": "aws-s3",
        "s3ManagedLedgerOffloadBucket": "old-bucket",
        "managedLedgerOffloadBucket": "new-bucket",
        "s3ManagedLedgerOffloadRegion": "",  # empty, as in the stock file: not set
        "managedLedgerOffloadRegion": "eu-west-1",
        "managedLedgerOffloadServiceEndpoint": "http://minio:9000",
    }
    assert _values(conf) == {
        "LEDGERGC_OFFLOAD_DRIVER": ("aws-s3", "managedLedgerOffloadDriver"),
        "LEDGERGC_OFFLOAD_BUCKET": ("old-bucket", "s3ManagedLedgerOffloadBucket"),
        "LEDGERGC_OFFLOAD_S3_REGION": ("eu-west-1", "managedLedgerOffloadRegion"),
        "LEDGERGC_OFFLOAD_ENDPOINT": (
            "http://minio:9000",
            "managedLedgerOffloadServiceEndpoint",
        ),
    }
    # Only aws-s3 has an older spelling (TieredStorageConfiguration.getBackwardCompatibleKey:
    # the AWS_S3 provider): for S3 and aliyun-oss, a stale s3ManagedLedgerOffloadBucket
    # is not what the broker offloads to, the generic key is.
    for driver in ("S3", "s3", "aliyun-oss"):
        other = {**conf, "managedLedgerOffloadDriver": driver}
        assert _values(other) == {
            "LEDGERGC_OFFLOAD_DRIVER": (driver, "managedLedgerOffloadDriver"),
            "LEDGERGC_OFFLOAD_BUCKET": ("new-bucket", "managedLedgerOffloadBucket"),
            "LEDGERGC_OFFLOAD_S3_REGION": ("eu-west-1", "managedLedgerOffloadRegion"),
            "LEDGERGC_OFFLOAD_ENDPOINT": (
                "http://minio:9000",
                "managedLedgerOffloadServiceEndpoint",
            ),
        }, driver
    only_old = {"managedLedgerOffloadDriver": "S3", "s3ManagedLedgerOffloadBucket": "stale"}
    assert "LEDGERGC_OFFLOAD_BUCKET" not in _values(only_old)
    # The driver's name is matched as Pulsar matches it, case aside.
    assert _values({**conf, "managedLedgerOffloadDriver": "AWS-S3"})["LEDGERGC_OFFLOAD_BUCKET"] == (
        "old-bucket",
        "s3ManagedLedgerOffloadBucket",
    )
    # No driver: tiered storage is off, whatever buckets the file lists.
    assert _values({**conf, "managedLedgerOffloadDriver": ""}) == {}


def test_a_driver_that_is_no_object_store_leaves_tiered_storage_off_and_says_why() -> None:
    conf = {
        "managedLedgerOffloadDriver": "filesystem",
        "managedLedgerOffloadBucket": "g",
    }
    [value] = settings_of(conf)
    assert (value.env, value.value, value.key) == (
        "LEDGERGC_OFFLOAD_BUCKET",
        "",
        "managedLedgerOffloadDriver",
    )
    assert "managedLedgerOffloadDriver=filesystem is no object store ledger-gc reads" in value.why


def test_the_cluster_name_is_the_offload_tag_to_keep() -> None:
    assert settings_of({"clusterName": "us-east"}) == [
        ConfValue("LEDGERGC_PULSAR_CLUSTER", "us-east", "clusterName")
    ]


# --- the settings read from it ------------------------------------------------------------

BROKER_CONF = """\
### --- General broker settings --- ###
# The metadata store URL
metadataStoreUrl=zk:zk1.pulsar.svc:2181,\\
    zk2.pulsar.svc:2181/pulsar
zookeeperServers=
bookkeeperMetadataServiceUri=
clusterName=us-east
managedLedgerOffloadDriver=aws-s3
s3ManagedLedgerOffloadBucket=pulsar-offload
s3ManagedLedgerOffloadRegion=eu-west-1
s3ManagedLedgerOffloadServiceEndpoint=
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.conf"
    path.write_text(text, encoding="utf-8")
    return path


def test_settings_not_set_otherwise_come_from_the_broker_conf(tmp_path: Path) -> None:
    conf = write(tmp_path, BROKER_CONF)
    settings = Settings.from_env({"LEDGERGC_PULSAR_CONF": str(conf)})
    assert settings.zk_hosts == "zk1.pulsar.svc:2181,zk2.pulsar.svc:2181/pulsar"
    assert settings.bookkeeper_hosts == settings.zk_hosts
    assert settings.bookkeeper_root == "/ledgers"
    assert settings.offload_bucket == "pulsar-offload"
    assert settings.offload_s3_region == "eu-west-1"
    assert settings.offload_endpoint is None
    assert settings.pulsar_clusters == ("us-east",)
    shown = settings.provenance()
    assert shown["LEDGERGC_ZK_HOSTS"] == {
        "value": "zk:zk1.pulsar.svc:2181,zk2.pulsar.svc:2181/pulsar",
        "normalized": "zk1.pulsar.svc:2181,zk2.pulsar.svc:2181/pulsar",
        "source": "broker.conf",
        "from": f"metadataStoreUrl in {conf}",
    }
    assert shown["LEDGERGC_OFFLOAD_BUCKET"]["from"] == f"s3ManagedLedgerOffloadBucket in {conf}"
    assert shown["LEDGERGC_GRACE_SECONDS"]["source"] == "default"
    assert shown["LEDGERGC_PULSAR_CONF"] == {"value": str(conf), "source": "env"}
    # A child process gets the values, not the file (an executor has no broker.conf).
    env = settings.to_env()
    assert "LEDGERGC_PULSAR_CONF" not in env
    child = Settings.from_env(env)
    assert (child.zk_hosts, child.offload_bucket) == (settings.zk_hosts, "pulsar-offload")


def test_an_explicit_setting_wins_over_the_broker_conf(tmp_path: Path) -> None:
    conf = write(tmp_path, BROKER_CONF)
    settings = Settings.from_env(
        {
            "LEDGERGC_PULSAR_CONF": str(conf),
            "LEDGERGC_ZK_HOSTS": "127.0.0.1:2181/mine",
            "LEDGERGC_PULSAR_CLUSTER": "other",
        }
    )
    assert settings.zk_hosts == "127.0.0.1:2181/mine"
    assert settings.pulsar_clusters == ("other",)
    assert settings.offload_s3_region == "eu-west-1"  # not set explicitly: from the file
    shown = settings.provenance()
    assert shown["LEDGERGC_ZK_HOSTS"]["source"] == "env"
    assert shown["LEDGERGC_OFFLOAD_S3_REGION"]["source"] == "broker.conf"


def test_the_variable_and_connections_win_over_the_broker_conf(tmp_path: Path) -> None:
    conf = write(tmp_path, BROKER_CONF)
    settings = (
        Settings.from_env({})
        .overridden_by("connection", "ledgergc_zookeeper", {"zk_address": "zk:conn:2181/c"})
        .with_values({"pulsar_conf": str(conf)}, source="ledgergc_settings")
        .with_broker_conf()
    )
    assert settings.zk_hosts == "conn:2181/c"
    assert settings.offload_bucket == "pulsar-offload"
    shown = settings.provenance()
    assert shown["LEDGERGC_ZK_HOSTS"]["source"] == "connection"
    assert shown["LEDGERGC_ZK_HOSTS"]["value"] == "zk:conn:2181/c"
    assert shown["LEDGERGC_PULSAR_CONF"]["source"] == "variable"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("metadataStoreUrl=oxia://oxia:6648/default\n", "is Oxia, not ZooKeeper"),
        ("metadataStoreUrl=etcd:http://etcd:2379\n", "is etcd, not ZooKeeper"),
        ("metadataStoreUrl=zk:zk1:2181:bad\n", "has no host name"),
        ("bookkeeperMetadataServiceUri=metadata-store:oxia://o:6648\n", "is Oxia"),
        ("bookkeeperMetadataServiceUri=zk+ms://zk1:2181/ledgers\n", "ledger manager 'ms'"),
        ("managedLedgerOffloadDriver=aws-s3\ns3ManagedLedgerOffloadBucket=a b\n", "bucket"),
    ],
)
def test_a_broker_conf_naming_what_ledger_gc_cannot_read_is_one_line(
    tmp_path: Path, text: str, says: str
) -> None:
    conf = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        Settings.from_env({"LEDGERGC_PULSAR_CONF": str(conf)})
    message = str(err.value)
    assert says in message and f"in {conf}" in message and "\n" not in message


def test_a_missing_or_unreadable_broker_conf_is_one_line(tmp_path: Path) -> None:
    for path in (tmp_path / "nope.conf", tmp_path):
        with pytest.raises(ConfigError) as err:
            read_broker_conf(path)
        assert str(err.value).startswith(f"LEDGERGC_PULSAR_CONF='{path}' cannot be read")


def test_the_readmes_worked_example_reads_as_the_readme_says(tmp_path: Path) -> None:
    """The broker.conf lines of README's worked example, and the settings it shows."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    example = readme.split("**A worked example.**", 1)[1]
    conf = example.split("```properties\n", 1)[1].split("```", 1)[0]
    shown = example.split("```json\n", 1)[1].split("```", 1)[0]
    path = write(tmp_path, conf)
    settings = Settings.from_env({"LEDGERGC_PULSAR_CONF": str(path), "LEDGERGC_BUCKET": ""})
    expected = json.loads("{" + shown.replace("/home/me/broker.conf", str(path)) + "}")
    provenance = settings.provenance()
    assert {name: provenance[name] for name in expected} == expected


def test_a_child_process_scans_the_bookkeeper_the_broker_conf_names(tmp_path: Path) -> None:
    """spark-submit gets the values, not the file: BookKeeper's URL (its path the ledgers
    root, its manager) must reach the Spark app whole (review 28, finding 1)."""
    uri = "zk+longhierarchical://bk1:2181;bk2:2181/bk-east/ledgers"
    conf = write(
        tmp_path,
        BROKER_CONF.replace("bookkeeperMetadataServiceUri=", f"bookkeeperMetadataServiceUri={uri}"),
    )
    settings = Settings.from_env({"LEDGERGC_PULSAR_CONF": str(conf)})
    assert (settings.bookkeeper_root, settings.bookkeeper_manager) == (
        "/bk-east/ledgers",
        "longhierarchical",
    )
    env = settings.to_env()
    assert "LEDGERGC_PULSAR_CONF" not in env
    child = Settings.from_env(env)
    assert (child.bookkeeper_hosts, child.bookkeeper_root, child.bookkeeper_manager) == (
        "bk1:2181,bk2:2181",
        "/bk-east/ledgers",
        "longhierarchical",
    )


def test_an_explicitly_empty_setting_wins_over_the_broker_conf(tmp_path: Path) -> None:
    """``LEDGERGC_OFFLOAD_BUCKET=`` is documented as "tiered storage off", and
    ``LEDGERGC_BK_ZK_HOSTS=`` as "BookKeeper in Pulsar's store": set, even empty, they
    are the operator's word, and a broker.conf only fills what nobody set."""
    text = BROKER_CONF.replace(
        "bookkeeperMetadataServiceUri=", "bookkeeperMetadataServiceUri=zk+null://bk:2181/ledgers"
    )
    conf = write(tmp_path, text)
    settings = Settings.from_env(
        {
            "LEDGERGC_PULSAR_CONF": str(conf),
            "LEDGERGC_OFFLOAD_BUCKET": "",
            "LEDGERGC_BK_ZK_HOSTS": "",
        }
    )
    assert settings.offload_bucket == ""
    assert settings.bk_zk_hosts is None
    assert settings.bookkeeper_hosts == settings.zk_hosts  # the broker.conf's Pulsar store
    assert settings.offload_s3_region == "eu-west-1"  # not set: from the file
    shown = settings.provenance()
    assert shown["LEDGERGC_OFFLOAD_BUCKET"]["source"] == "env"
    assert shown["LEDGERGC_BK_ZK_HOSTS"]["source"] == "env"
    # Unset, the file's values stand.
    unset = Settings.from_env({"LEDGERGC_PULSAR_CONF": str(conf)})
    assert (unset.offload_bucket, unset.bk_zk_hosts) == ("pulsar-offload", "bk:2181")
