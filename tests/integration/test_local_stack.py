"""The local stack every other integration test stands on: ZooKeeper, SeaweedFS S3, the CLI."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient, KazooState

from ledger_gc.config.settings import Settings
from local_stack.seaweedfs import SeaweedS3Server
from local_stack.server_process import LocalStackError
from local_stack.spark_cluster import SparkStandaloneCluster
from local_stack.stack import LocalStack
from local_stack.zookeeper import ZooKeeperEnsemble, ZooKeeperServer

LOCAL_STACK_DIR = Path(__file__).resolve().parents[2] / "include" / "local_stack"


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def test_zookeeper_answers_inside_the_test_chroot(
    zk_client: KazooClient, settings: Settings
) -> None:
    zk_client.create("/managed-ledgers/t/ns/persistent/topic", b"info", makepath=True)

    data, stat = zk_client.get("/managed-ledgers/t/ns/persistent/topic")

    assert data == b"info"
    assert stat.version == 0
    assert settings.zk_chroot.startswith("/t")
    assert zk_client.get_children("/") == ["managed-ledgers"]


def test_s3_answers_in_the_test_bucket(s3_client: Any, settings: Settings) -> None:
    key = f"{settings.key_prefix}t/ns/persistent/topic/ledgers/{1:020d}/0"
    s3_client.put_object(Bucket=settings.bucket, Key=key, Body=b"block")

    body = s3_client.get_object(Bucket=settings.bucket, Key=key)["Body"].read()

    assert body == b"block"
    assert settings.s3_endpoint is not None
    assert os.environ["AWS_ACCESS_KEY_ID"] == "testing"


def test_each_test_gets_an_empty_namespace(
    settings: Settings, zk_client: KazooClient, s3_client: Any
) -> None:
    assert zk_client.get_children("/") == []
    assert s3_client.list_objects_v2(Bucket=settings.bucket)["KeyCount"] == 0


def test_private_zookeeper_restart_keeps_port_data_and_clients(
    private_zookeeper: ZooKeeperServer, private_settings: Settings
) -> None:
    states: list[str] = []
    client = KazooClient(hosts=private_settings.zk_hosts, timeout=10)
    client.add_listener(states.append)
    client.start(timeout=30)
    try:
        client.create("/kept", b"before restart")
        port = private_zookeeper.port

        private_zookeeper.stop()
        wait_until(lambda: KazooState.SUSPENDED in states, 15, "kazoo to see ZooKeeper gone")
        assert not port_open(port)
        private_zookeeper.restart()

        assert private_zookeeper.port == port
        wait_until(lambda: client.connected, 30, "kazoo to reconnect")
        assert client.get("/kept")[0] == b"before restart"
    finally:
        client.stop()
        client.close()


def test_a_port_taken_before_start_is_replaced_unless_it_was_asked_for(tmp_path: Path) -> None:
    server = ZooKeeperServer(tmp_path / "zk", log_dir=tmp_path / "logs")
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", server.port))
        squatter.listen()
        taken = server.port

        with server:
            assert server.port != taken
            assert server.four_letter_word("ruok") == "imok"

        with pytest.raises(LocalStackError, match=r"zookeeper\.log"):
            ZooKeeperServer(tmp_path / "zk2", port=taken, log_dir=tmp_path / "logs2").start()


def _listening(pid: int) -> set[tuple[str, int]]:
    import psutil

    return {
        (conn.laddr.ip, conn.laddr.port)
        for conn in psutil.Process(pid).net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    }


def _weed_pid(server: SeaweedS3Server) -> int:
    import psutil

    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == server.port and conn.pid:
            return int(conn.pid)
    raise AssertionError(f"nothing listens on the S3 port {server.port}")


def _java_listening(pid: int) -> set[tuple[str, int]]:
    """A JVM's listening sockets; Java binds IPv4-mapped IPv6 sockets (::ffff:127.0.0.1)."""
    return {(ip.removeprefix("::ffff:"), port) for ip, port in _listening(pid)}


def _pid_listening_on(port: int) -> int:
    import psutil

    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            return int(conn.pid)
    raise AssertionError(f"nothing listens on port {port}")


def test_zookeeper_ensemble_elects_a_leader_survives_it_going_down_and_takes_it_back(
    zookeeper_ensemble: ZooKeeperEnsemble,
) -> None:
    members = zookeeper_ensemble.members
    assert len(members) == 3 and len(zookeeper_ensemble.hosts.split(",")) == 3
    for member in members:
        picked = set(zookeeper_ensemble.members[0].quorum[member.myid])
        listening = _java_listening(_pid_listening_on(member.port))
        assert listening <= {("127.0.0.1", port) for port in picked}
    leader = zookeeper_ensemble.leader()
    assert leader is not None
    assert sorted(str(m.mode()) for m in members) == ["follower", "follower", "leader"]
    client = KazooClient(hosts=zookeeper_ensemble.hosts, timeout=10)
    client.start(timeout=30)
    try:
        path = client.create("/ensemble-test-", b"before", sequence=True)
        leader.stop()
        try:
            assert not port_open(leader.port)
            wait_until(lambda: zookeeper_ensemble.leader() is not None, 30, "a new leader")
            wait_until(lambda: client.connected, 30, "kazoo on the other two servers")
            client.retry(client.set, path, b"with two of three")
        finally:
            leader.restart()
        assert leader.mode() == "follower"
        assert len([m for m in members if m.mode() == "leader"]) == 1
        alone = KazooClient(hosts=leader.hosts, timeout=10)
        alone.start(timeout=30)
        try:
            alone.sync(path)
            assert alone.get(path)[0] == b"with two of three"
            assert zookeeper_ensemble.member_with_session(alone.client_id[0]) is leader
        finally:
            alone.stop()
            alone.close()
    finally:
        client.stop()
        client.close()


def test_spark_cluster_has_a_master_and_two_workers_on_loopback(
    spark_cluster: SparkStandaloneCluster,
) -> None:
    master = spark_cluster.master
    assert master.state()["status"] == "ALIVE"
    workers = master.alive_workers()
    assert len(workers) == 2
    assert {(w["host"], w["cores"], w["memory"]) for w in workers} == {("127.0.0.1", 1, 1024)}
    for daemon in (master, *spark_cluster.workers):
        listening = _java_listening(_pid_listening_on(daemon.port))
        assert {ip for ip, _ in listening} == {"127.0.0.1"}
        assert {daemon.port, daemon.webui_port} <= {port for _, port in listening}
    env = spark_cluster.driver_env()
    assert f"--master {spark_cluster.master_url}" in env["PYSPARK_SUBMIT_ARGS"]
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"


def test_seaweedfs_listens_on_its_picked_loopback_ports_only(local_stack: LocalStack) -> None:
    server = local_stack.s3
    assert isinstance(server, SeaweedS3Server)
    listening = _listening(_weed_pid(server))

    # master, volume, filer and S3, each HTTP and gRPC: the ports we picked, no default
    # (9333, 8080, 8888, 8333, the Iceberg and Lance catalogs' 8181 and 9101...)
    assert listening == {("127.0.0.1", port) for port in [server.port, *server.role_ports.values()]}
    assert len(listening) == 8


def test_a_seaweedfs_port_taken_before_start_is_replaced(tmp_path: Path) -> None:
    server = SeaweedS3Server(tmp_path / "seaweedfs", log_dir=tmp_path / "logs")
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", server.role_ports["filer.port"]))
        squatter.listen()
        taken = server.role_ports["filer.port"]

        with server:
            assert server.role_ports["filer.port"] != taken
            client = server.client()
            client.create_bucket(Bucket="squatted")
            client.put_object(Bucket="squatted", Key="k", Body=b"v")
            assert client.get_object(Bucket="squatted", Key="k")["Body"].read() == b"v"
            sockets = [path for path in server._leftovers() if path.exists()]
            assert sockets, "weed serves its gRPC ports on /tmp/seaweedfs-*.sock too"

    assert not any(path.exists() for path in server._leftovers())
    assert not port_open(server.port)
    assert (tmp_path / "logs" / "seaweedfs.log").stat().st_size > 0


def local_stack_cli(tmp_path: Path, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
    """``python include/local_stack ARGS`` with some of the user's own LEDGERGC_* set."""
    env = {**os.environ, "LEDGERGC_BUCKET": "users-own-bucket", "LEDGERGC_ZK_HOSTS": "nowhere:1"}
    base_dir = ["--base-dir", str(tmp_path / "stack")]
    return subprocess.Popen(
        [sys.executable, str(LOCAL_STACK_DIR), args[0], *base_dir, *args[1:]],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        **kwargs,
    )


CHILD = """
import os, socket, sys
import boto3
zk_host, zk_port = os.environ["LEDGERGC_ZK_HOSTS"].split(":")
with socket.create_connection((zk_host, int(zk_port))) as sock:
    sock.sendall(b"ruok")
    assert sock.recv(4) == b"imok"
# signed with the AWS_* credentials the stack put into our environment
s3 = boto3.client("s3", endpoint_url=os.environ["LEDGERGC_S3_ENDPOINT"])
assert s3.list_buckets()["ResponseMetadata"]["HTTPStatusCode"] == 200
assert os.environ["LEDGERGC_BUCKET"] == "users-own-bucket"
assert os.environ["AWS_ACCESS_KEY_ID"] == "testing"
print(zk_port, os.environ["LEDGERGC_S3_ENDPOINT"].rsplit(":", 1)[1], flush=True)
{tail}
"""

# The object-store emulators the stack starts beside them: a client of each, built only
# from what the stack put into the environment, writes and lists an object.
EMULATORS_CHILD = """
import os
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage
from azure.storage.blob import BlobServiceClient

gcs = storage.Client(
    project="p",
    credentials=AnonymousCredentials(),
    client_options={"api_endpoint": os.environ["LOCAL_STACK_GCS_ENDPOINT"]},
)
bucket = gcs.bucket("stack-check")
bucket.versioning_enabled = True
bucket = gcs.create_bucket(bucket)
bucket.blob("a").upload_from_string(b"x")
assert [b.name for b in gcs.list_blobs("stack-check")] == ["a"]
assert gcs.get_bucket("stack-check").versioning_enabled

account, key = os.environ["AZURE_STORAGE_ACCOUNT"], os.environ["AZURE_STORAGE_ACCESS_KEY"]
azure = BlobServiceClient(
    os.environ["LOCAL_STACK_AZURE_BLOB_ENDPOINT"],
    credential={"account_name": account, "account_key": key},
)
container = azure.create_container("stack-check")
container.upload_blob("a", b"x")
assert [b.name for b in container.list_blobs()] == ["a"]
gcs_port = os.environ["LOCAL_STACK_GCS_ENDPOINT"].rsplit(":", 1)[1]
azure_port = os.environ["LOCAL_STACK_AZURE_BLOB_ENDPOINT"].split(":")[2].split("/")[0]
print(gcs_port, azure_port, flush=True)
"""


def test_run_passes_the_env_and_the_exit_code_and_stops_the_stack(tmp_path: Path) -> None:
    child = CHILD.format(tail="sys.exit(3)")
    proc = local_stack_cli(tmp_path, "run", "--", sys.executable, "-c", child)
    out, _ = proc.communicate(timeout=120)

    assert proc.returncode == 3, out
    zk_port, s3_port = map(int, out.split())
    assert not port_open(zk_port)
    assert not port_open(s3_port)
    assert (tmp_path / "stack" / "logs" / "zookeeper.log").stat().st_size > 0
    assert (tmp_path / "stack" / "logs" / "seaweedfs.log").stat().st_size > 0


def test_run_starts_fake_gcs_and_azurite_for_the_command_and_stops_them(tmp_path: Path) -> None:
    proc = local_stack_cli(tmp_path, "run", "--", sys.executable, "-c", EMULATORS_CHILD)
    out, _ = proc.communicate(timeout=120)

    assert proc.returncode == 0, out
    gcs_port, azure_port = map(int, out.split())
    assert not port_open(gcs_port)
    assert not port_open(azure_port)
    assert (tmp_path / "stack" / "logs" / "fake-gcs-server.log").exists()
    assert (tmp_path / "stack" / "logs" / "azurite-debug.log").stat().st_size > 0


def test_run_passes_sigterm_on_and_stops_the_stack(tmp_path: Path) -> None:
    child = CHILD.format(tail="input()")
    command = ["run", "--", sys.executable, "-c", child]
    proc = local_stack_cli(tmp_path, *command, stdin=subprocess.PIPE)
    assert proc.stdout is not None
    zk_port, s3_port = map(int, proc.stdout.readline().split())

    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)

    assert proc.returncode == 128 + signal.SIGTERM
    assert not port_open(zk_port)
    assert not port_open(s3_port)


def test_servers_die_with_a_killed_parent(tmp_path: Path) -> None:
    proc = local_stack_cli(tmp_path, "up")
    assert proc.stdout is not None
    exports: dict[str, str] = {}
    for line in proc.stdout:
        if line.startswith("export "):
            name, value = line.removeprefix("export ").strip().split("=", 1)
            exports[name] = value
        if len(exports) == 5:
            break
    zk_port = int(exports["LEDGERGC_ZK_HOSTS"].rsplit(":", 1)[1])
    s3_port = int(exports["LEDGERGC_S3_ENDPOINT"].rsplit(":", 1)[1])
    assert port_open(zk_port)
    assert port_open(s3_port)

    proc.kill()  # no atexit, no finally: only the watchdogs can clean up now
    proc.wait()

    wait_until(lambda: not port_open(zk_port) and not port_open(s3_port), 30, "servers to die")


@pytest.mark.parametrize("args", [["run"], ["run", "--"]])
def test_run_without_a_command_is_a_usage_error(args: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, str(LOCAL_STACK_DIR), *args], capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 2
    assert "no command given" in result.stderr
