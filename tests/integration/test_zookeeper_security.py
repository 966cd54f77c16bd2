"""ledger-gc against a ZooKeeper secured as a production Pulsar cluster's: TLS and SASL.

One real ZooKeeper for the module (``ZooKeeperSecurity``): a ``secureClientPort`` served by
Netty that asks for a client certificate (keystore and truststore made with ``openssl``
and ``keytool``), SASL logins from a JAAS ``Server`` section, and a plain port beside it
on which a test plants data. Each test gets its own chroot. BookKeeper's znodes are
written as a bookie with ``zkEnableSecurity=true`` writes them: by its SASL session
(``sasl:bookkeeper``), every znode and its parents CREATOR_ALL; the operator has given a
read-only account, ``gc``, READ on them. Pulsar's records are open, as Pulsar writes them.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState
from kazoo.security import CREATOR_ALL_ACL, make_acl
from zk_pki import PASSWORD, Pki, dated_certificate, dated_server_keystore, make_pki

from ledger_gc import cli
from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import bookkeeper_endpoint, resolve, zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.config.zk_security import ZkSecurity
from ledger_gc.errors import ConfigError, MetadataAccessError
from ledger_gc.metadata import zk_access, zk_client
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.orphans.registry import OrphanRegistry
from local_stack.server_process import LocalStackError
from local_stack.zookeeper import ZooKeeperSecurity, ZooKeeperServer
from pulsar_cluster import PulsarCluster, ml_tags

pytestmark = pytest.mark.spark

USERS = {"bookkeeper": "bk-secret", "gc": "gc-secret", "mallory": "mallory-secret"}
NS = "public/default"
ORDERS = f"{NS}/persistent/orders"
GONE = f"{NS}/persistent/deleted-topic"


@dataclass
class SecureZooKeeper:
    server: ZooKeeperServer
    pki: Pki
    root: KazooClient  # anonymous, on the plain port: makes the tests' chroots


@pytest.fixture(scope="module")
def secure_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureZooKeeper]:
    base = tmp_path_factory.mktemp("secure-zookeeper")
    pki = make_pki(base / "pki")
    server = ZooKeeperServer(
        base / "zookeeper",
        log_dir=base / "logs",
        security=ZooKeeperSecurity(
            keystore=pki.server_keystore,
            keystore_password=PASSWORD,
            truststore=pki.truststore,
            truststore_password=PASSWORD,
            client_auth="need",
            sasl_users=USERS,
        ),
    )
    try:
        server.start()
    except LocalStackError as exc:
        pytest.fail(f"secure ZooKeeper did not start (logs in {server.log_dir}): {exc}")
    root = KazooClient(hosts=server.hosts, timeout=10)
    root.start(timeout=30)
    try:
        yield SecureZooKeeper(server, pki, root)
    finally:
        root.stop()
        root.close()
        server.stop()


@dataclass
class Secured:
    """A test's chroot on the secure server, Pulsar's and BookKeeper's sides planted."""

    zookeeper: SecureZooKeeper
    chroot: str
    state_dir: Path
    cluster: PulsarCluster
    orphans: set[int]
    kept: set[int]

    def settings(self, user: str | None = "bookkeeper", **security: Any) -> Settings:
        """TLS (a client certificate) and a SASL login as ``user``: a Pulsar cluster's
        orphan cycle with no block store, deleting, no grace or retention."""
        pki = self.zookeeper.pki
        tls: dict[str, Any] = dict(
            tls=True, tls_ca=str(pki.ca), tls_cert=str(pki.client_cert), tls_key=str(pki.client_key)
        )
        if user is not None:
            tls |= dict(sasl_mechanism="DIGEST-MD5", sasl_username=user)
            tls |= dict(sasl_password=USERS.get(user, "wrong"))
        return Settings(
            zk_address=self.zookeeper.server.secure_hosts + self.chroot,
            zk_security=ZkSecurity(**(tls | security)),
            bucket="",
            delete_enabled=True,
            grace_seconds=0,
            retention_seconds=0,
            orphan_max_fraction=1.0,
            state_dir=self.state_dir,
        )

    def exists(self, ledger_id: int) -> bool:
        return self.cluster.client.exists(self.cluster.path(ledger_id)) is not None


def _bookie(server: ZooKeeperServer, chroot: str) -> KazooClient:
    """A bookie's session with zkEnableSecurity=true: SASL, CREATOR_ALL (and the operator's
    read-only account may read)."""
    client = KazooClient(
        hosts=server.hosts + chroot,
        sasl_options={"mechanism": "DIGEST-MD5", "username": "bookkeeper", "password": "bk-secret"},
        default_acl=[*CREATOR_ALL_ACL, make_acl("sasl", "gc", read=True)],
        timeout=10,
    )
    client.start(timeout=30)
    return client


@pytest.fixture
def secured(secure_zookeeper: SecureZooKeeper, tmp_path: Path) -> Iterator[Secured]:
    chroot = f"/s{uuid.uuid4().hex[:10]}"
    secure_zookeeper.root.ensure_path(chroot)
    pulsar = KazooClient(hosts=secure_zookeeper.server.hosts + chroot, timeout=10)
    pulsar.start(timeout=30)
    bookie = _bookie(secure_zookeeper.server, chroot)
    cluster = PulsarCluster(pulsar, bookkeeper=bookie).init(idgen=False)
    cluster.namespace(NS)
    # Three leaf directories (/ledgers/00/0000, 0001, 0002): the survey reads them on
    # Spark's executors, each over its own TLS + SASL session.
    live = [cluster.ledger(ml_tags(ORDERS), ledger_id=lid) for lid in (5, 20_005)]
    leaked = [cluster.ledger(ml_tags(ORDERS), ledger_id=lid) for lid in (6, 10_003)]
    gone = cluster.ledger(ml_tags(GONE), ledger_id=10_004)
    foreign = cluster.ledger({}, ledger_id=10_006)
    cluster.managed_ledger(ORDERS, live)
    try:
        yield Secured(
            secure_zookeeper,
            chroot,
            tmp_path / "state",
            cluster,
            orphans={*leaked, gone},
            kept={*live, foreign},
        )
    finally:
        for client in (pulsar, bookie):
            client.stop()
            client.close()


def run_cli(
    settings: Settings, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``ledgergc ARGS`` in a process of its own, configured by the environment alone."""
    return subprocess.run(
        [sys.executable, "-m", "ledger_gc.cli", *args],
        env={**settings.to_env(), "PATH": "/usr/bin:/bin", **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=settings.state_dir.parent,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    return lines[0]


def cli_in_process(
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *args: str,
) -> tuple[int, dict[str, Any]]:
    """``ledgergc ARGS --json`` here (the session's Spark is the one it finds), from the
    environment alone."""
    for name, value in settings.to_env().items():
        monkeypatch.setenv(name, value)
    status = cli.main([*args, "--json"])
    return status, json.loads(capsys.readouterr().out)


def _tls_files_in(directory: Path) -> set[Path]:
    """What a session's TLS set-up wrote in ``directory`` (``zk_tls``'s prefix)."""
    return set(directory.glob("ledgergc-zk-tls-*"))


# --- the whole cycle ----------------------------------------------------------------


def test_the_orphan_cycle_over_tls_and_sasl_deletes_exactly_the_orphans(
    secured: Secured,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``ledgergc orphans`` (grace and retention 0: registered, re-checked and deleted in
    one cycle), configured by the environment alone; the survey reads BookKeeper's three
    leaf directories on Spark's executors."""
    settings = secured.settings("bookkeeper")
    # On the executors however small the tree (the settings must reach them).
    monkeypatch.setattr("ledger_gc.bookkeeper.survey.SPARK_OVER_SECONDS", 0.0)
    tls_files_before = _tls_files_in(Path(tempfile.gettempdir()))

    with caplog.at_level(logging.INFO, logger="ledger_gc.bookkeeper.survey"):
        status, report = cli_in_process(settings, monkeypatch, capsys, "orphans")

    assert status == 0, report
    # The driver's sessions and the executors' (Spark's Python workers, which end with
    # os._exit) left none of the client's TLS material on disk.
    assert _tls_files_in(Path(tempfile.gettempdir())) - tls_files_before == set()
    assert "3 shards on Spark" in caplog.text
    assert report["bookkeeper"]["ledgers"] == len(secured.orphans | secured.kept)
    assert {d["ledger_id"] for d in report["deleted"]} == secured.orphans
    assert not any(secured.exists(lid) for lid in secured.orphans)
    assert all(secured.exists(lid) for lid in secured.kept)
    done = [r for r in AuditLog(settings).read(run_id=report["run_id"]) if r["status"] == "deleted"]
    assert {r["ledger_id"] for r in done} == secured.orphans
    bookies = [[31, "sasl", "bookkeeper"], [1, "sasl", "gc"]]
    assert all(r["znode_acl"] == bookies for r in done)

    # Put back with the ACL they had: the bookies' own, never ledger-gc's. The read-only
    # account may not: ZooKeeper wants CREATE on the parent.
    from ledger_gc.restore.restoring import restore_run

    refused = restore_run(resolve(secured.settings("gc")), report["run_id"]).to_dict()
    assert refused["objects_restored"] == 0 and refused["errors"] == len(secured.orphans)
    why = refused["prefixes"][0]["error"]
    assert "sasl:gc (also x509:CN=ledger-gc) lacks CREATE on /ledgers/00/" in why, why
    assert "whose ACL gives it to sasl:bookkeeper" in why
    restored = restore_run(resolve(settings), report["run_id"]).to_dict()
    assert restored["objects_restored"] == len(secured.orphans), restored
    for lid in secured.orphans:
        acl, _ = secured.cluster.bk.get_acls(secured.cluster.path(lid))
        assert [[a.perms, a.id.scheme, a.id.id] for a in acl] == bookies


# --- refusals -------------------------------------------------------------------------


def test_an_identity_without_delete_rights_deletes_nothing_and_says_why(
    secured: Secured,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The operator's read-only account (READ, no DELETE on the ledgers' parents) runs a
    deleting cycle: the survey works, every delete is refused, nothing goes, and the run
    fails (exit 1) saying who lacks what where, and who has it."""
    reader = secured.settings("gc")

    status, report = cli_in_process(reader, monkeypatch, capsys, "orphans")

    assert status == 1, report
    assert report["deleted"] == []
    assert all(secured.exists(lid) for lid in secured.orphans | secured.kept)
    failed = {f["prefix"]: f["error"] for f in report["failed"]}
    znodes = {secured.cluster.path(lid): lid for lid in secured.orphans}
    assert {prefix.removeprefix("bookkeeper:") for prefix in failed} == set(znodes)
    parent = secured.cluster.path(10_003).rsplit("/", 1)[0]
    why = failed[f"bookkeeper:{secured.cluster.path(10_003)}"]
    assert f"sasl:gc (also x509:CN=ledger-gc) lacks DELETE on {parent}, the parent of " in why
    assert f"{parent}/L0003" in why, why
    assert "whose ACL gives it to sasl:bookkeeper" in why and "connect as bookkeeper" in why
    assert "LEDGERGC_ZK_DIGEST" not in why
    # Announced ahead, then closed as not deleted, with why: nothing reads as deleted.
    records = AuditLog(reader).read(run_id=report["run_id"])
    statuses = sorted(r["status"] for r in records)
    assert statuses == ["deleting"] * 3 + ["not-deleted"] * 3
    assert all("lacks DELETE" in r["reason"] for r in records if r["status"] == "not-deleted")
    # Still registered: the next run, with the right identity, deletes them.
    assert {e.ledger_id for e in OrphanRegistry(reader).entries().values()} == secured.orphans


def test_an_identity_that_cannot_read_the_ledgers_is_refused_in_one_line(
    secured: Secured,
) -> None:
    done = run_cli(secured.settings("mallory"), "orphans", "--dry-run")
    assert done.returncode == 2, done.stderr
    line = one_line(done)
    assert "sasl:mallory (also x509:CN=ledger-gc) lacks READ on /ledgers/LAYOUT" in line, line
    assert "LEDGERGC_ZK_DIGEST" not in line
    assert OrphanRegistry(secured.settings()).entries() == {}


def test_no_identity_at_all_is_named_as_anonymous(secured: Secured) -> None:
    anonymous = secured.settings(None)
    with (
        MetadataStore.open(zk_endpoint(anonymous)) as store,
        pytest.raises(MetadataAccessError) as err,
    ):
        store.get_many([secured.cluster.path(5), secured.cluster.path(6)])
    assert "x509:CN=ledger-gc lacks READ" in str(err.value)
    with MetadataStore.open(zk_endpoint(anonymous)) as store:
        assert zk_access.describe(zk_access.who_am_i(store.client)) == "x509:CN=ledger-gc"
    assert zk_access.describe([("ip", "127.0.0.1")]) == zk_access.ANONYMOUS


def test_a_plain_client_on_the_secure_port_gets_a_clear_error_at_once(secured: Secured) -> None:
    plain = secured.settings(None)
    plain = replace(plain, zk_security=ZkSecurity(), zk_timeout_seconds=30.0)
    started = time.monotonic()
    done = run_cli(plain, "status")
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    line = one_line(done)
    assert "speaks TLS" in line and "LEDGERGC_ZK_TLS=true" in line, line
    assert took < 15, f"{took:.1f} s: a hang until the 30 s session time out"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"tls_ca": None}, ["certificate is not trusted", "LEDGERGC_ZK_TLS_CA"]),
        ({"tls_cert": None, "tls_key": None}, ["asks for a client certificate", "_TLS_CERT"]),
        ({"tls_cert": "rogue_cert", "tls_key": "rogue_key"}, ["refused ledger-gc's client"]),
        ({"sasl_password": "wrong"}, ["refused the SASL DIGEST-MD5 login as 'bookkeeper'"]),
        ({"plain_port": True}, ["does not speak TLS", "secureClientPort"]),
    ],
)
def test_a_tls_or_sasl_mistake_is_one_line_naming_what_to_set(
    secured: Secured, change: dict[str, Any], words: list[str]
) -> None:
    pki = secured.zookeeper.pki
    settings = secured.settings("bookkeeper")
    parts = {k: str(getattr(pki, v)) if v in ("rogue_cert", "rogue_key") else v
             for k, v in change.items() if k != "plain_port"}  # fmt: skip
    settings = replace(settings, zk_security=replace(settings.zk_security, **parts))
    if change.get("plain_port"):
        settings = replace(settings, zk_address=secured.zookeeper.server.hosts + secured.chroot)
    started = time.monotonic()
    with pytest.raises(ConfigError) as err, MetadataStore.open(zk_endpoint(settings)):
        pass
    assert time.monotonic() - started < 10
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


def test_a_refused_login_is_named_when_seen_only_after_it_failed(
    secured: Secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kazoo reports the session connected, then logs in: a process paused between the
    two (a loaded machine) sees the session already gone for the refused login, and
    must still say that the login was refused, not that the ensemble is unreachable."""
    settings = secured.settings("bookkeeper")
    settings = replace(settings, zk_security=replace(settings.zk_security, sasl_password="wrong"))
    started = zk_client._started

    def paused_until_the_login_failed(client: KazooClient, timeout: float) -> bool:
        failed = threading.Event()
        client.add_listener(lambda state: failed.set() if state == KazooState.LOST else None)
        original = client.start_async

        def start_async() -> threading.Event:
            original()
            assert failed.wait(10)  # (kazoo's AUTH_FAILED reaches listeners as LOST)
            seen = threading.Event()  # the session was seen connected, before the login
            seen.set()
            return seen

        monkeypatch.setattr(client, "start_async", start_async)
        return started(client, timeout)

    monkeypatch.setattr(zk_client, "_started", paused_until_the_login_failed)
    refused = "refused the SASL DIGEST-MD5 login as 'bookkeeper'"
    with pytest.raises(ConfigError, match=refused), MetadataStore.open(zk_endpoint(settings)):
        pass


def test_a_bad_setting_exits_2_in_one_line_before_anything_runs(secured: Secured) -> None:
    done = run_cli(
        secured.settings("bookkeeper"),
        "orphans",
        env={"LEDGERGC_ZK_TLS_KEY": "", "LEDGERGC_ZK_TLS_CERT": str(secured.zookeeper.pki.ca)},
    )
    assert done.returncode == 2
    assert "LEDGERGC_ZK_TLS_CERT is set but LEDGERGC_ZK_TLS_KEY is not" in one_line(done)


def test_gssapi_without_a_kerberos_ticket_is_one_line(secured: Secured, tmp_path: Path) -> None:
    """GSSAPI's configuration path, up to the ticket: this machine has no KDC, so the
    Kerberos library itself says what is missing."""
    kerberos = secured.settings(None, sasl_mechanism="GSSAPI")
    done = run_cli(
        kerberos,
        "status",
        env={
            "KRB5_CONFIG": str(tmp_path / "no-krb5.conf"),
            "KRB5_CLIENT_KTNAME": str(tmp_path / "no.keytab"),
            "KRB5CCNAME": f"FILE:{tmp_path / 'no-ccache'}",
        },
    )
    assert done.returncode == 2, done.stderr
    line = one_line(done)
    assert "GSSAPI: no Kerberos ticket for zookeeper/127.0.0.1" in line, line
    assert "KRB5_CLIENT_KTNAME" in line


# --- the forms brokers keep their material in; what executors receive -------------


def test_a_brokers_pkcs12_keystore_and_keytool_truststore_connect(secured: Secured) -> None:
    pki = secured.zookeeper.pki
    stores = secured.settings(
        "bookkeeper",
        tls_ca=str(pki.truststore),
        tls_truststore_password=PASSWORD,
        tls_cert=str(pki.client_keystore),
        tls_key=None,
        tls_keystore_password=PASSWORD,
    )
    with MetadataStore.open(bookkeeper_endpoint(stores).zk) as store:
        assert store.get_many_raw([secured.cluster.path(5)])[0] is not None
        assert ("sasl", "bookkeeper") in (zk_access.who_am_i(store.client) or [])


def test_an_executor_connects_with_what_it_receives_not_the_drivers_files(
    secured: Secured, tmp_path: Path
) -> None:
    """Settings reach an executor pickled (a closure, a broadcast); the files the driver
    named need not exist where it runs."""
    driver_files = tmp_path / "driver-only"
    shutil.copytree(secured.zookeeper.pki.directory, driver_files)
    on_driver = secured.settings(
        "bookkeeper",
        tls_ca=str(driver_files / "ca.pem"),
        tls_cert=str(driver_files / "client.pem"),
        tls_key=str(driver_files / "client.key"),
    )
    shipped = pickle.dumps(on_driver)
    shutil.rmtree(driver_files)
    on_executor = pickle.loads(shipped)
    with MetadataStore.open(zk_endpoint(on_executor)) as store:
        assert sorted(store.children_of_many(["/ledgers/00"])[0]) == ["0000", "0001", "0002"]


def test_bookkeeper_on_its_own_secured_ensemble_beside_an_open_pulsar(secured: Secured) -> None:
    """Pulsar's metadata on a plain port with no login, BookKeeper's behind TLS and
    SASL: the LEDGERGC_BK_ZK_* settings are BookKeeper's alone."""
    from ledger_gc.bookkeeper.survey import survey

    server = secured.zookeeper.server
    secure = secured.settings("bookkeeper")
    mixed = replace(
        secure,
        zk_address=server.hosts + secured.chroot,
        zk_security=ZkSecurity(),
        bk_zk_address=server.secure_hosts + secured.chroot,
        bk_zk_security=secure.zk_security,
    )
    # One chroot, two identities: BookKeeper's session creates ledger-gc's own znodes
    # (its cversion probe) as sasl:bookkeeper, Pulsar's anonymous one then may not add
    # its own beside them (README: "ZooKeeper ACLs"); said naming the znode and its ACL.
    with pytest.raises(MetadataAccessError) as refused:
        survey(resolve(Settings.from_env(mixed.to_env())))
    assert "no identity (anonymous) lacks CREATE on /ledger-gc, the parent of " in str(
        refused.value
    ), refused.value
    assert "whose ACL it cannot read either" in str(refused.value)
    # The operator's way: an ACL on /ledger-gc that admits both.
    secured.cluster.bk.set_acls(
        "/ledger-gc", [*CREATOR_ALL_ACL, make_acl("world", "anyone", all=True)]
    )
    found = survey(resolve(Settings.from_env(mixed.to_env())))
    assert found is not None
    assert {c["ledger_id"] for c in found.candidates} == secured.orphans


# --- as an operator configures it: the broker's broker.conf, its JAAS file, TLS ---------


def test_a_dry_run_configured_by_a_brokers_conf_jaas_file_and_tls_settings(
    secured: Secured, tmp_path: Path
) -> None:
    """Issue 28's operator: the addresses come from the broker's own broker.conf (as
    Pulsar writes them: ``metadataStoreUrl=zk:...``, ``bookkeeperMetadataServiceUri=
    metadata-store:zk:...``), the login from the broker's JAAS file, TLS from the PEM
    files its JVM properties name. ``ledgergc orphans --dry-run --json`` finds exactly the
    orphans and deletes nothing; ``status --json`` says where each value came from."""
    pki = secured.zookeeper.pki
    zk = secured.zookeeper.server.secure_hosts
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# Pulsar broker.conf (excerpt)\n"
        "clusterName=pulsar-east\n"
        f"metadataStoreUrl=zk:{zk}{secured.chroot}\n"
        f"configurationMetadataStoreUrl=zk:{zk}{secured.chroot}\n"
        f"bookkeeperMetadataServiceUri=metadata-store:zk:{zk}{secured.chroot}\n"
        "managedLedgerOffloadDriver=\n"
    )
    jaas = tmp_path / "broker_jaas.conf"
    jaas.write_text(
        "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        '  username="bookkeeper"\n  password="bk-secret";\n};\n'
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "LEDGERGC_PULSAR_CONF": str(conf),
        "LEDGERGC_ZK_TLS": "true",
        "LEDGERGC_ZK_TLS_CA": str(pki.ca),
        "LEDGERGC_ZK_TLS_CERT": str(pki.client_cert),
        "LEDGERGC_ZK_TLS_KEY": str(pki.client_key),
        "LEDGERGC_ZK_SASL_MECHANISM": "DIGEST-MD5",
        "LEDGERGC_ZK_JAAS": str(jaas),
        "LEDGERGC_BUCKET": "",
        "LEDGERGC_DELETE_ENABLED": "true",
        "LEDGERGC_GRACE_SECONDS": "0",
        "LEDGERGC_RETENTION_SECONDS": "0",
        "LEDGERGC_ORPHAN_MAX_FRACTION": "1",
        "LEDGERGC_STATE_DIR": str(secured.state_dir),
    }

    def ledgergc(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ledger_gc.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )

    done = ledgergc("orphans", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    print(json.dumps({k: report[k] for k in ("status", "dry_run", "would_delete")}, indent=1))
    assert report["dry_run"] is True
    assert {w["ledger_id"] for w in report["would_delete"]} == secured.orphans
    assert all(secured.exists(lid) for lid in secured.orphans | secured.kept)

    status = ledgergc("status", "--json")
    assert status.returncode == 0, status.stderr[-3000:]
    origins = json.loads(status.stdout)["settings"]
    print(json.dumps({k: origins[k] for k in ("LEDGERGC_ZK_HOSTS", "LEDGERGC_ZK_JAAS")}, indent=1))
    assert origins["LEDGERGC_ZK_HOSTS"]["source"] == "broker.conf"
    assert "metadataStoreUrl" in origins["LEDGERGC_ZK_HOSTS"]["from"]


# --- review of issue 28 ------------------------------------------------------------


def test_the_configured_ca_is_the_only_one_trusted(
    secured: Secured, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``LEDGERGC_ZK_TLS_CA`` is the trust anchor, as the brokers' truststore is (a Java
    truststore replaces the JDK's CAs): a server whose certificate another CA signed,
    even one the system trusts (``SSL_CERT_FILE`` stands for the system's store), is
    refused, before the client certificate or the SASL login reach it. Without the
    setting, the system's CAs are the ones trusted."""
    pki = secured.zookeeper.pki
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))  # the server's CA: "a public CA"
    pinned = secured.settings("bookkeeper", tls_ca=str(pki.rogue_ca))
    with pytest.raises(ConfigError) as err, MetadataStore.open(zk_endpoint(pinned)):
        pass
    assert "certificate is not trusted" in str(err.value), err.value
    assert "LEDGERGC_ZK_TLS_CA" in str(err.value)
    # No CA named: the system's store (here, the server's CA) is trusted.
    with MetadataStore.open(zk_endpoint(secured.settings("bookkeeper", tls_ca=None))) as store:
        assert store.get_many_raw([secured.cluster.path(5)])[0] is not None


def test_a_certificate_that_does_not_name_the_host_is_refused_with_the_fix(
    secured: Secured,
) -> None:
    """The host name is checked by default (ZooKeeper's ``hostnameVerification``); the
    fix offered is the server's certificate or the address, never turning the check off.
    ``127.1`` is 127.0.0.1 by another name, which the server's certificate does not list
    (it names 127.0.0.1 and localhost)."""
    port = secured.zookeeper.server.secure_hosts.rpartition(":")[2]
    settings = replace(secured.settings("bookkeeper"), zk_address=f"127.1:{port}{secured.chroot}")
    with pytest.raises(ConfigError) as err, MetadataStore.open(zk_endpoint(settings)):
        pass
    message = str(err.value)
    assert "does not name 127.1" in message, message
    assert "subjectAltName" in message and "VERIFY_HOSTNAME" not in message, message
    # Turned off by the operator, the chain is still verified: the session starts.
    unchecked = replace(
        settings, zk_security=replace(settings.zk_security, tls_verify_hostname=False)
    )
    with MetadataStore.open(zk_endpoint(unchecked)) as store:
        assert store.get_many_raw([secured.cluster.path(5)])[0] is not None


def test_a_session_leaves_no_tls_material_on_disk(
    secured: Secured, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client key (unencrypted in memory, whatever its form in the settings) is
    loaded into the session's TLS context and its file removed at once: nothing of it
    is on disk while the session is open, nor after (in this test's temporary directory,
    nor in the one an earlier session of this process may have used)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    usual = Path(tempfile.gettempdir())
    before = _tls_files_in(usual)  # an older ledger-gc's, or another process's
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    def keys_on_disk() -> list[Path]:
        written = [*(_tls_files_in(usual) - before), *scratch.iterdir()]
        found = [p for top in written for p in (top, *top.rglob("*")) if p.is_file()]
        return [p for p in found if b"PRIVATE KEY" in p.read_bytes()]

    pki = secured.zookeeper.pki
    for settings in (
        secured.settings("bookkeeper"),
        secured.settings(
            "bookkeeper",
            tls_cert=str(pki.client_keystore),
            tls_key=None,
            tls_keystore_password=PASSWORD,
        ),
        pickle.loads(pickle.dumps(secured.settings("bookkeeper"))),  # PEM text, as shipped
    ):
        with MetadataStore.open(zk_endpoint(settings)) as store:
            assert store.get_many_raw([secured.cluster.path(5)])[0] is not None
            assert keys_on_disk() == []
        assert keys_on_disk() == []
    assert list(scratch.iterdir()) == []


def test_no_private_key_is_left_on_disk_by_a_process_that_ends_like_a_pyspark_worker(
    secured: Secured, tmp_path: Path
) -> None:
    """PySpark's forked workers end with ``os._exit`` (pyspark/daemon.py): no ``atexit``
    runs there, so nothing may rely on one to remove the key."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    code = (
        "import os, pickle, sys\n"
        "from ledger_gc.metadata import zk_client\n"
        "s = pickle.loads(sys.stdin.buffer.read())\n"
        "c = zk_client.connect(s); c.stop(); c.close()\n"
        "os._exit(0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=pickle.dumps(zk_endpoint(secured.settings("bookkeeper"))),
        env={**os.environ, "TMPDIR": str(scratch)},
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert list(scratch.rglob("*")) == []


_opened: list[str] | None = None


def _watch_opens(event: str, args: tuple[Any, ...]) -> None:
    if _opened is not None and event == "open" and isinstance(args[0], str):
        _opened.append(args[0])


def test_a_session_reads_its_tls_material_and_jaas_file_once(
    secured: Secured, tmp_path: Path
) -> None:
    """From the environment to an open session on BookKeeper's ensemble (its own login
    over Pulsar's TLS), each file the settings name is read once: the checks that run
    as the settings are made read them, and the session uses what they read."""
    global _opened
    pki = secured.zookeeper.pki
    jaas = tmp_path / "bookie_jaas.conf"
    jaas.write_text(
        "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        '  username="bookkeeper"\n  password="bk-secret";\n};\n'
    )
    environ = {
        "LEDGERGC_ZK_HOSTS": secured.zookeeper.server.secure_hosts + secured.chroot,
        "LEDGERGC_ZK_TLS": "true",
        "LEDGERGC_ZK_TLS_CA": str(pki.ca),
        "LEDGERGC_ZK_TLS_CERT": str(pki.client_cert),
        "LEDGERGC_ZK_TLS_KEY": str(pki.client_key),
        "LEDGERGC_BK_ZK_JAAS": str(jaas),
    }
    sys.addaudithook(_watch_opens)  # (stays for the process; records only while set)
    _opened = []
    try:
        settings = Settings.from_env(environ)
        with MetadataStore.open(bookkeeper_endpoint(settings).zk) as store:
            assert store.get_many_raw([secured.cluster.path(5)])[0] is not None
        opened, _opened = _opened, None
    finally:
        _opened = None
    files = [str(pki.ca), str(pki.client_cert), str(pki.client_key), str(jaas)]
    assert {name: opened.count(name) for name in files} == dict.fromkeys(files, 1)


def test_bookkeeper_on_a_plain_port_beside_pulsars_tls(secured: Secured) -> None:
    """Pulsar's ensemble behind TLS, BookKeeper's on a plain port:
    ``LEDGERGC_BK_ZK_TLS=false`` takes none of Pulsar's TLS parts, and BookKeeper's
    sessions keep Pulsar's SASL login (not said otherwise). With
    ``LEDGERGC_BK_ZK_SASL_MECHANISM=none`` they log in as no one: the bookies' ledgers
    (CREATOR_ALL) are refused to them, as they are to any anonymous client."""
    from ledger_gc.bookkeeper.survey import survey

    environ = {
        **secured.settings("bookkeeper").to_env(),
        "LEDGERGC_BK_ZK_HOSTS": secured.zookeeper.server.hosts + secured.chroot,
        "LEDGERGC_BK_ZK_TLS": "false",
    }
    found = survey(resolve(Settings.from_env(environ)))
    assert found is not None
    assert {c["ledger_id"] for c in found.candidates} == secured.orphans

    anonymous = Settings.from_env({**environ, "LEDGERGC_BK_ZK_SASL_MECHANISM": "none"})
    with pytest.raises(MetadataAccessError) as err:
        survey(resolve(anonymous))
    assert "no identity (anonymous) lacks READ" in str(err.value), err.value


def test_a_jaas_file_that_is_not_utf8_exits_2_in_one_line(secured: Secured, tmp_path: Path) -> None:
    jaas = tmp_path / "broker_jaas.conf"
    jaas.write_bytes(
        b"Client { org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        b' username="bookkeeper" password="p\xe4ss"; };\n'  # ISO-8859-1
    )
    done = run_cli(secured.settings(None), "status", env={"LEDGERGC_ZK_JAAS": str(jaas)})
    assert done.returncode == 2, done.stderr
    line = one_line(done)
    assert f"LEDGERGC_ZK_JAAS={jaas} is not UTF-8" in line, line


# --- issue 33: an ensemble that is not what its settings say -------------------------


@dataclass
class OtherZooKeeper:
    """A server beside the secure one: TLS with a certificate of the right CA, for the
    right host, but out of date (``not_before``..``not_after``); its plain port has no
    SASL, or SASL logins for others only (``sasl_users``)."""

    server: ZooKeeperServer
    not_before: datetime
    not_after: datetime

    def sasl_errors(self) -> int:
        """The server's log lines for a SASL packet it cannot take (ZooKeeper logs one
        ERROR per packet when it has no SASL provider)."""
        text = self.server.log_path.read_text(errors="replace")
        return sum(1 for line in text.splitlines() if "saslServer is null" in line)


def _other_zookeeper(
    secure_zookeeper: SecureZooKeeper,
    base: Path,
    name: str,
    valid: tuple[timedelta, timedelta],
    sasl_users: dict[str, str],
) -> Iterator[OtherZooKeeper]:
    now = datetime.now(UTC).replace(microsecond=0)
    not_before, not_after = now + valid[0], now + valid[1]
    pki = secure_zookeeper.pki
    keystore = dated_server_keystore(pki, name, not_before, not_after)
    server = ZooKeeperServer(
        base / "zookeeper",
        log_dir=base / "logs",
        security=ZooKeeperSecurity(
            keystore=keystore,
            keystore_password=PASSWORD,
            truststore=pki.truststore,
            truststore_password=PASSWORD,
            client_auth="need",
            sasl_users=sasl_users,
        ),
    )
    server.start()
    try:
        yield OtherZooKeeper(server, not_before, not_after)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def expired_zookeeper(
    secure_zookeeper: SecureZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OtherZooKeeper]:
    """Its certificate expired yesterday; no SASL at all."""
    yield from _other_zookeeper(
        secure_zookeeper,
        tmp_path_factory.mktemp("expired-zookeeper"),
        "server-expired",
        (timedelta(days=-30), timedelta(days=-1)),
        {},
    )


@pytest.fixture(scope="module")
def future_zookeeper(
    secure_zookeeper: SecureZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OtherZooKeeper]:
    """Its certificate is valid from tomorrow; SASL for another login than ours."""
    yield from _other_zookeeper(
        secure_zookeeper,
        tmp_path_factory.mktemp("future-zookeeper"),
        "server-future",
        (timedelta(days=1), timedelta(days=30)),
        {"someone-else": "their-secret"},
    )


def test_sasl_to_bookkeepers_ensemble_without_sasl_stops_at_the_first_empty_challenge(
    secured: Secured, expired_zookeeper: OtherZooKeeper
) -> None:
    """Issue 33, defect 1: BookKeeper's metadata on an ensemble without SASL, its sessions
    taking Pulsar's login (``LEDGERGC_BK_ZK_SASL_MECHANISM`` not set). The server answers
    a SASL packet with an empty token; kazoo and pure-sasl answered that with another
    packet, tens of thousands until the session expired (each an ERROR in the server's
    log), then blamed the login. One packet, a quick exit 2, the setting that turns SASL
    off for BookKeeper's ensemble."""
    other = expired_zookeeper
    settings = replace(
        secured.settings("bookkeeper"),
        bk_zk_address=other.server.hosts,
        bk_zk_security=ZkSecurity(tls=False),
        zk_timeout_seconds=30.0,
    )
    before = other.sasl_errors()
    started = time.monotonic()
    done = run_cli(settings, "orphans", "--dry-run")
    took = time.monotonic() - started
    packets = other.sasl_errors() - before

    assert done.returncode == 2, done.stderr[-3000:]
    line = one_line(done)
    assert packets <= 2, f"{packets} SASL packets reached a server without SASL"
    assert took < 15, f"{took:.1f} s: a session time out, not a refusal"
    assert f"ZooKeeper at {other.server.hosts} (BookKeeper's ensemble) does not speak SASL" in (
        line
    ), line
    assert "LEDGERGC_BK_ZK_SASL_MECHANISM=none" in line, line
    assert "refused" not in line, line


def test_sasl_to_pulsars_ensemble_without_sasl_names_pulsars_setting(
    secured: Secured, expired_zookeeper: OtherZooKeeper
) -> None:
    other = expired_zookeeper
    settings = replace(
        secured.settings("bookkeeper"),
        zk_address=other.server.hosts,
        zk_security=ZkSecurity(
            sasl_mechanism="DIGEST-MD5", sasl_username="bookkeeper", sasl_password="bk-secret"
        ),
        zk_timeout_seconds=30.0,
    )
    before = other.sasl_errors()
    started = time.monotonic()
    done = run_cli(settings, "orphans", "--dry-run")
    took = time.monotonic() - started

    assert done.returncode == 2, done.stderr[-3000:]
    line = one_line(done)
    assert other.sasl_errors() - before <= 2
    assert took < 15, f"{took:.1f} s"
    assert f"ZooKeeper at {other.server.hosts} does not speak SASL" in line, line
    assert "LEDGERGC_ZK_SASL_MECHANISM" in line and "LEDGERGC_BK_ZK" not in line, line


def test_tls_to_bookkeepers_plain_port_names_bookkeepers_settings(secured: Secured) -> None:
    """Issue 33, defect 5: BookKeeper's sessions take Pulsar's TLS; pointed at a plain
    port, the fix is BookKeeper's (``LEDGERGC_BK_ZK_TLS=false``), not turning TLS off for
    Pulsar's ensemble."""
    settings = replace(
        secured.settings("bookkeeper"),
        bk_zk_address=secured.zookeeper.server.hosts + secured.chroot,
    )
    with pytest.raises(ConfigError) as err, MetadataStore.open(bookkeeper_endpoint(settings).zk):
        pass
    message = str(err.value)
    assert "does not speak TLS" in message, message
    assert "LEDGERGC_BK_ZK_TLS=false" in message and "LEDGERGC_ZK_TLS=false" not in message
    assert "LEDGERGC_BK_ZK_HOSTS" in message, message


def test_a_login_bookkeepers_ensemble_refuses_names_bookkeepers_settings(
    secured: Secured, future_zookeeper: OtherZooKeeper
) -> None:
    settings = replace(
        secured.settings("bookkeeper"),
        bk_zk_address=future_zookeeper.server.hosts,
        bk_zk_security=ZkSecurity(tls=False),
    )
    with pytest.raises(ConfigError) as err, MetadataStore.open(bookkeeper_endpoint(settings).zk):
        pass
    message = str(err.value)
    assert "(BookKeeper's ensemble) refused the SASL DIGEST-MD5 login as 'bookkeeper'" in (
        message
    ), message
    for name in ("SASL_USERNAME", "SASL_PASSWORD", "JAAS"):
        assert f"LEDGERGC_BK_ZK_{name}" in message, message


def test_a_refusal_on_bookkeepers_ensemble_names_bookkeepers_settings(secured: Secured) -> None:
    """No login on BookKeeper's ensemble (``LEDGERGC_BK_ZK_SASL_MECHANISM=none``): the
    bookies' ledgers are refused, and the login to give is BookKeeper's."""
    from ledger_gc.bookkeeper.survey import check_layout

    settings = replace(
        secured.settings("bookkeeper"),
        bk_zk_address=secured.zookeeper.server.hosts + secured.chroot,
        bk_zk_security=ZkSecurity(tls=False, sasl_mechanism="none"),
    )
    with pytest.raises(MetadataAccessError) as err:
        check_layout(resolve(settings))
    message = str(err.value)
    assert "no identity (anonymous) lacks READ" in message, message
    assert "LEDGERGC_BK_ZK_SASL_USERNAME" in message, message
    assert "LEDGERGC_ZK_SASL" not in message, message


@pytest.mark.parametrize(
    ("which", "words"),
    [
        ("expired_zookeeper", ["its certificate expired on"]),
        ("future_zookeeper", ["its certificate is not valid until"]),
    ],
)
def test_an_out_of_date_server_certificate_is_named_with_its_dates(
    secured: Secured, request: pytest.FixtureRequest, which: str, words: list[str]
) -> None:
    """Issue 33, defect 5: a server certificate of the right CA, for the right host, out
    of date, is not a CA to set: the error says what is wrong with it, and when it is
    (or was) valid."""
    other: OtherZooKeeper = request.getfixturevalue(which)
    settings = replace(secured.settings("bookkeeper"), zk_address=other.server.secure_hosts)
    with pytest.raises(ConfigError) as err, MetadataStore.open(zk_endpoint(settings)):
        pass
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    for date in (other.not_before, other.not_after):
        assert f"{date:%Y-%m-%d %H:%M:%S} UTC" in message, message
    assert "TLS_CA" not in message and "not trusted" not in message, message


@pytest.mark.parametrize(
    ("valid", "words"),
    [
        ((timedelta(days=-30), timedelta(days=-1)), ["client certificate", "expired on"]),
        ((timedelta(days=1), timedelta(days=30)), ["client certificate", "is not valid until"]),
    ],
)
def test_an_out_of_date_client_certificate_is_named_with_its_dates(
    secured: Secured, valid: tuple[timedelta, timedelta], words: list[str]
) -> None:
    """The server refuses a client certificate of its own CA that is out of date (Java
    says only "certificate unknown"): the error is its dates and the setting to renew,
    not a truststore to fix."""
    now = datetime.now(UTC).replace(microsecond=0)
    not_before, not_after = now + valid[0], now + valid[1]
    name = f"client-{uuid.uuid4().hex[:6]}"
    cert, key = dated_certificate(
        secured.zookeeper.pki, name, "ledger-gc", not_before, not_after, san=False
    )
    settings = secured.settings("bookkeeper", tls_cert=str(cert), tls_key=str(key))
    with pytest.raises(ConfigError) as err, MetadataStore.open(zk_endpoint(settings)):
        pass
    message = str(err.value)
    for word in [*words, "LEDGERGC_ZK_TLS_CERT"]:
        assert word in message, message
    for date in (not_before, not_after):
        assert f"{date:%Y-%m-%d %H:%M:%S} UTC" in message, message
    assert "truststore" not in message, message


def test_the_configuration_store_takes_the_local_stores_tls_and_sasl_or_its_own(
    secured: Secured,
) -> None:
    """Pulsar's configuration store on another chroot of the secured server. Unset, its
    TLS and SASL parts are the local store's; on the plain port the local store's TLS
    fails with a fix in its own variables (not ``LEDGERGC_ZK_TLS=false``, which would
    turn TLS off for the local store too), and ``LEDGERGC_CONFIG_STORE_TLS=false`` alone
    connects it, keeping the local store's SASL login."""
    server = secured.zookeeper.server
    chroot = f"/g{uuid.uuid4().hex[:10]}"
    secured.zookeeper.root.create(f"{chroot}/admin/policies/public", b"{}", makepath=True)
    environ = {
        **secured.settings("gc").to_env(),
        "LEDGERGC_CONFIG_STORE_HOSTS": server.secure_hosts + chroot,
    }
    endpoints = resolve(Settings.from_env(environ))
    config = endpoints.config_store
    assert config is not None and config.security.uses_tls
    login = config.login()
    assert login is not None and login.username == "gc"
    with MetadataStore.open(config) as store:
        assert store.children_of_many(["/admin/policies"]) == [["public"]]
        assert ("sasl", "gc") in (zk_access.who_am_i(store.client) or [])

    plain = {**environ, "LEDGERGC_CONFIG_STORE_HOSTS": server.hosts + chroot}
    taken = resolve(Settings.from_env(plain)).config_store
    assert taken is not None
    with pytest.raises(ConfigError) as err, MetadataStore.open(taken):
        pass
    message = str(err.value)
    assert "does not speak TLS" in message, message
    assert "LEDGERGC_CONFIG_STORE_TLS=false" in message, message
    assert "LEDGERGC_ZK_TLS=false" not in message and "LEDGERGC_CONFIG_STORE_HOSTS" in message

    own = resolve(Settings.from_env({**plain, "LEDGERGC_CONFIG_STORE_TLS": "false"}))
    assert own.config_store is not None and not own.config_store.security.uses_tls
    assert own.zk.security.uses_tls
    with MetadataStore.open(own.config_store) as store:
        assert store.children_of_many(["/admin/policies"]) == [["public"]]
        assert ("sasl", "gc") in (zk_access.who_am_i(store.client) or [])
