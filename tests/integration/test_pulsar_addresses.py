"""Pointing ledger-gc at a Pulsar cluster the way its brokers are pointed: the installed
``ledgergc`` command, configured by a broker.conf and addresses in Pulsar's and
BookKeeper's own forms, against the real test ZooKeeper.

Each bad address or broker.conf is exit 2 and one line naming the setting (never a
traceback: ``zk:zk1:2181/pulsar`` used to pass the check and die in kazoo with
``ValueError: Port could not be cast``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from pulsar_cluster import PulsarCluster, cursor_tags, ml_tags

LEDGERGC = Path(sys.executable).parent / "ledgergc"
NS = "public/default"
ORDERS = f"{NS}/persistent/orders"
GONE = f"{NS}/persistent/deleted-topic"


def ledgergc(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The installed command with only ``env``'s ledger-gc settings (none inherited)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LEDGERGC_", "AWS_"))}
    return subprocess.run(
        [str(LEDGERGC), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line_error(result: subprocess.CompletedProcess) -> str:
    """The one error line of a refused run (exit 2), after asserting it is one."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("ledgergc: error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


BAD_ADDRESSES = [
    ("LEDGERGC_ZK_HOSTS", "oxia://oxia:6648/default", "is Oxia, not ZooKeeper"),
    ("LEDGERGC_ZK_HOSTS", "etcd:http://etcd:2379", "is etcd, not ZooKeeper"),
    ("LEDGERGC_ZK_HOSTS", "rocksdb:/pulsar/data/metadata", "is RocksDB, not ZooKeeper"),
    ("LEDGERGC_ZK_HOSTS", "memory:local", "is an in-memory store, not ZooKeeper"),
    ("LEDGERGC_ZK_HOSTS", "zk:zk1:2181:2181/pulsar", "has no host name"),
    ("LEDGERGC_ZK_HOSTS", "zk:zk1:port/pulsar", "has port 'port'"),
    ("LEDGERGC_ZK_HOSTS", "garbage in, garbage out", "has no host name"),
    ("LEDGERGC_BK_ZK_HOSTS", "metadata-store:oxia://oxia:6648", "is Oxia, not ZooKeeper"),
    ("LEDGERGC_BK_ZK_HOSTS", "zk+ms://zk1:2181/ledgers", "names ledger manager 'ms'"),
    ("LEDGERGC_BK_ZK_HOSTS", "zk+hierarchical://zk1:2181", "has no ledgers root path"),
    ("LEDGERGC_BK_ZK_HOSTS", "zk+hierarchical://zk1:99999/ledgers", "has port '99999'"),
]


@pytest.mark.parametrize(("variable", "value", "says"), BAD_ADDRESSES)
def test_a_bad_address_is_exit_2_and_one_line_naming_it(
    tmp_path: Path, variable: str, value: str, says: str
) -> None:
    env = {"LEDGERGC_STATE_DIR": str(tmp_path), variable: value}
    line = one_line_error(ledgergc(env, "status", "--json"))
    assert line.startswith(f"ledgergc: error: {variable}={value!r} {says}"), line


def test_a_ledgers_root_contradicting_the_urls_path_is_exit_2_and_one_line(
    tmp_path: Path,
) -> None:
    url = "zk+hierarchical://zk1:2181/bk-east/ledgers"
    env = {
        "LEDGERGC_STATE_DIR": str(tmp_path),
        "LEDGERGC_BK_ZK_HOSTS": url,
        "LEDGERGC_BK_LEDGERS_ROOT": "/ledgers",
    }
    line = one_line_error(ledgergc(env, "status", "--json"))
    assert line.startswith("ledgergc: error: LEDGERGC_BK_LEDGERS_ROOT='/ledgers' contradicts")
    assert url in line


def test_a_broker_conf_that_cannot_be_used_is_exit_2_and_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing.conf"
    env = {"LEDGERGC_STATE_DIR": str(tmp_path), "LEDGERGC_PULSAR_CONF": str(missing)}
    line = one_line_error(ledgergc(env, "status"))
    assert f"LEDGERGC_PULSAR_CONF='{missing}' cannot be read" in line
    oxia = tmp_path / "oxia.conf"
    oxia.write_text("metadataStoreUrl=oxia://oxia:6648/broker\n", encoding="utf-8")
    env["LEDGERGC_PULSAR_CONF"] = str(oxia)
    line = one_line_error(ledgergc(env, "status"))
    assert "is Oxia, not ZooKeeper" in line and f"metadataStoreUrl in {oxia}" in line


# --- against the real ZooKeeper -----------------------------------------------------------


def split(settings: Settings) -> tuple[list[str], str]:
    """The test's ZooKeeper hosts and chroot (``127.0.0.1:port/t…``)."""
    hosts, _, chroot = settings.zk_hosts.partition("/")
    return hosts.split(","), f"/{chroot}"


def broker_conf(tmp_path: Path, settings: Settings, bookkeeper_uri: str = "") -> Path:
    """A broker.conf as a Helm chart renders one: comments, a continued metadataStoreUrl,
    the older key left empty, the offload driver off."""
    hosts, chroot = split(settings)
    continued = ",\\\n    ".join(hosts)
    path = tmp_path / "broker.conf"
    path.write_text(
        "### --- General broker settings --- ###\n"
        "# The metadata store URL\n"
        f"metadataStoreUrl=zk:{continued}{chroot}\n"
        "! Deprecated: use metadataStoreUrl instead\n"
        "zookeeperServers=\n"
        f"bookkeeperMetadataServiceUri: {bookkeeper_uri}\n"
        "clusterName=pulsar-test\n"
        "managedLedgerOffloadDriver=\n",
        encoding="utf-8",
    )
    return path


def base_env(settings: Settings, conf: Path) -> dict[str, str]:
    """Only the broker.conf for ZooKeeper; no block store (a Pulsar cluster's data is in
    BookKeeper); the test's own state dir."""
    return {
        "LEDGERGC_PULSAR_CONF": str(conf),
        "LEDGERGC_BUCKET": "",
        "LEDGERGC_STATE_DIR": str(settings.state_dir),
        "LEDGERGC_ZK_TIMEOUT_SECONDS": "10",
    }


def test_status_json_says_where_each_setting_came_from(
    tmp_path: Path, settings: Settings, zk_client: KazooClient
) -> None:
    cluster = PulsarCluster(zk_client).init()
    cluster.namespace(NS)
    cluster.managed_ledger(ORDERS, [cluster.ledger(ml_tags(ORDERS), closed=False)])
    conf = broker_conf(tmp_path, settings)
    env = {**base_env(settings, conf), "LEDGERGC_GRACE_SECONDS": "60"}
    AuditLog(settings).check()  # the state store a first run made (status only reads it)
    result = ledgergc(env, "status", "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    assert [ml["name"] for ml in status["managed_ledgers"]] == [ORDERS]
    shown = status["settings"]
    hosts, chroot = split(settings)
    assert shown["LEDGERGC_ZK_HOSTS"] == {
        "value": f"zk:{','.join(hosts)}{chroot}",
        "normalized": settings.zk_hosts,
        "source": "broker.conf",
        "from": f"metadataStoreUrl in {conf}",
    }
    assert shown["LEDGERGC_PULSAR_CLUSTER"]["source"] == "broker.conf"
    assert shown["LEDGERGC_GRACE_SECONDS"] == {"value": "60", "source": "env"}
    assert shown["LEDGERGC_BUCKET"] == {"value": "", "source": "env"}
    assert shown["LEDGERGC_RETENTION_SECONDS"]["source"] == "default"
    assert shown["LEDGERGC_BK_LEDGERS_ROOT"] == {"value": "/ledgers", "source": "default"}
    assert shown["LEDGERGC_PULSAR_CONF"] == {"value": str(conf), "source": "env"}
    text = ledgergc(env, "status", "--metadata-only")
    assert f"store: zk=zk:{','.join(hosts)}{chroot} " in text.stdout, text.stderr


def plant(cluster: PulsarCluster) -> dict[str, int]:
    """A live topic and two leaks: a ledger its list dropped, a deleted topic's ledger."""
    cluster.namespace(NS)
    live = cluster.ledger(ml_tags(ORDERS))
    leaked = cluster.ledger(ml_tags(ORDERS))
    cursor = cluster.ledger(cursor_tags(ORDERS, "sub"), closed=False)
    gone = cluster.ledger(ml_tags(GONE))
    current = cluster.ledger(ml_tags(ORDERS), closed=False)
    cluster.managed_ledger(ORDERS, [live, current])
    cluster.cursor(ORDERS, "sub", cursor)
    return {"leaked": leaked, "gone": gone}


@pytest.mark.spark
@pytest.mark.parametrize("form", ["pulsars-own-store", "zk+hierarchical", "metadata-store"])
def test_orphans_dry_run_against_a_cluster_named_only_by_its_broker_conf(
    tmp_path: Path,
    settings: Settings,
    zk_client: KazooClient,
    form: str,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``ledgergc orphans --dry-run --json`` finds exactly the planted leaks, with
    ZooKeeper and BookKeeper named only as the broker.conf names them: Pulsar's own store
    (an empty bookkeeperMetadataServiceUri), BookKeeper's URL (its path the ledgers root,
    below no chroot), or Pulsar's metadata driver (``/ledgers`` below the chroot). The
    first as a command of its own; the others in this process, with the environment
    alone (the session's Spark: one JVM start saved each)."""
    planted = plant(PulsarCluster(zk_client).init())
    hosts, chroot = split(settings)
    uri = {
        "pulsars-own-store": "",
        "zk+hierarchical": f"zk+hierarchical://{';'.join(hosts)}{chroot}/ledgers",
        "metadata-store": f"metadata-store:zk:{';'.join(hosts)}{chroot}",
    }[form]
    conf = broker_conf(tmp_path, settings, uri)
    # Two leaks of five ledgers are far above the byte-fraction guard's 10 %.
    env = {**base_env(settings, conf), "LEDGERGC_ORPHAN_MAX_FRACTION": "1"}
    if form == "pulsars-own-store":
        result = ledgergc(env, "orphans", "--dry-run", "--json")
        assert result.returncode == 0, result.stderr[-3000:]
        report = json.loads(result.stdout)
    else:
        from ledger_gc import cli

        for name in os.environ:
            if name.startswith("LEDGERGC_"):
                monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        assert cli.main(["orphans", "--dry-run", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
    bookkeeper = report["bookkeeper"]
    assert bookkeeper["layout"] == "hierarchical"
    assert bookkeeper["root"].endswith("/ledgers")
    registered = json.loads(ledgergc(env, "orphans", "--list", "--json").stdout)
    ids = {entry["ledger_id"] for entry in registered["orphans"]}
    assert ids == set(planted.values())
    assert report["deleted"] == []


def test_a_url_naming_another_manager_than_layout_is_refused_in_one_line(
    tmp_path: Path, settings: Settings, zk_client: KazooClient
) -> None:
    PulsarCluster(zk_client).init()  # LAYOUT: the hierarchical manager
    hosts, chroot = split(settings)
    conf = broker_conf(tmp_path, settings, f"zk+longhierarchical://{hosts[0]}{chroot}/ledgers")
    line = one_line_error(ledgergc(base_env(settings, conf), "orphans", "--dry-run", "--json"))
    assert "names the longhierarchical ledger manager" in line
    assert f"{chroot}/ledgers/LAYOUT names hierarchical" in line
    assert "Nothing was scanned or deleted" in line


def test_a_spark_app_surveys_the_bookkeeper_root_its_task_names(
    settings: Settings, zk_client: KazooClient, request: pytest.FixtureRequest
) -> None:
    """The orphan DAG hands its settings to spark-submit as ``to_env()``
    (``orphan_tasks.submit_env``) and the Spark apps rebuild them with
    ``Settings.from_env`` (``orphans/apps.py``). This BookKeeper's ledgers are at
    ``/bk-east/ledgers`` (a ``zk+hierarchical://`` URL's path, below no chroot); another
    BookKeeper keeps its own at ``/ledgers`` beside it. The app must survey the first:
    the other's ledger 777 is no orphan of this cluster (review 28, finding 1)."""
    from ledger_gc.airflow.orphan_tasks import submit_env
    from ledger_gc.bookkeeper.survey import survey

    ours = PulsarCluster(zk_client, root="/bk-east/ledgers").init()
    ours.namespace(NS)
    live = ours.ledger(ml_tags(ORDERS), ledger_id=900)
    ours.managed_ledger(ORDERS, [live])
    hosts, chroot = split(settings)
    root_client = KazooClient(hosts=",".join(hosts), timeout=10)
    root_client.start(timeout=30)
    request.addfinalizer(root_client.close)
    request.addfinalizer(root_client.stop)
    request.addfinalizer(lambda: root_client.delete("/ledgers", recursive=True))
    other = PulsarCluster(root_client, root="/ledgers").init()
    foreign = other.ledger(ml_tags(f"{NS}/persistent/another-clusters-topic"), ledger_id=777)

    url = f"zk+hierarchical://{';'.join(hosts)}{chroot}/bk-east/ledgers"
    in_task = settings.with_overrides(
        bucket="", orphan_max_fraction=1.0, grace_seconds=0, retention_seconds=0
    ).with_values({"bk_zk_hosts": url}, source="the task's connection")
    assert in_task.bookkeeper_root == f"{chroot}/bk-east/ledgers"
    in_spark_app = Settings.from_env(submit_env(in_task, local_master=True))
    assert in_spark_app.bookkeeper_root == in_task.bookkeeper_root

    found = survey(resolve(in_spark_app))
    assert found is not None
    assert foreign not in {candidate["ledger_id"] for candidate in found.candidates}
    assert found.root == in_task.bookkeeper_root
