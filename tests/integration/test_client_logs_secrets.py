"""``--verbose`` and DEBUG logs show no secret (issue 33).

Run as an operator runs it: ``ledgergc --log-level DEBUG`` (and ``--verbose``) in a
process of its own, its stderr captured whole. The secrets are the settings' (a digest
password, a SASL password, AWS keys) and the ones derived from them that no setting
names: kazoo's ``Auth(... auth='user:password')`` and the digest ACL's
``base64(sha1(user:password))``, the SASL DIGEST-MD5 ``response=`` (an MD5 of the
password, open to a dictionary attack), a kazoo session's password, botocore's canonical
request with ``x-amz-security-token``, and the temporary credentials STS returns to
botocore itself (a profile that assumes a role), which the process never had before.

Real servers: a ZooKeeper with SASL DIGEST-MD5 users (``ZooKeeperSecurity``), the
session's SeaweedFS and a local STS (moto).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from kazoo.client import KazooClient

from ledger_gc.config.settings import Settings
from local_stack.moto_sts import MotoStsServer
from local_stack.seaweedfs import TEST_AWS_ENV
from local_stack.server_process import LocalStackError
from local_stack.zookeeper import ZooKeeperSecurity, ZooKeeperServer

SASL_PASSWORD = "Sasl-pw-9f3k"
DIGEST_PASSWORD = "Digest-pw-7q2z"
#: The configuration store's own login and digest (issue 34), unlike the local store's.
CFG_SASL_PASSWORD = "Cfg-sasl-pw-4m8x"
CFG_DIGEST_PASSWORD = "Cfg-digest-pw-2v6n"
#: What must never show: a hex MD5 after response= or rspauth= (a DIGEST-MD5 exchange).
SASL_RESPONSE = re.compile(r"(?:response|rspauth)=\"?[0-9a-fA-F]{32}")
SESSION_PASSWORD = re.compile(r"session_passwd: b?'?[0-9a-fA-F]{8,}")


@pytest.fixture(scope="module")
def sasl_zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    base = tmp_path_factory.mktemp("sasl-zookeeper")
    server = ZooKeeperServer(
        base / "zookeeper",
        log_dir=base / "logs",
        security=ZooKeeperSecurity(sasl_users={"gc": SASL_PASSWORD, "cfg": CFG_SASL_PASSWORD}),
    )
    try:
        server.start()
    except LocalStackError as exc:
        pytest.fail(f"SASL ZooKeeper did not start (logs in {server.log_dir}): {exc}")
    try:
        yield server
    finally:
        server.stop()


def ledgergc(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ledger_gc.cli", *args],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def digest_form(user: str, password: str) -> str:
    """ZooKeeper's digest of ``user:password`` (what a digest ACL carries)."""
    return base64.b64encode(hashlib.sha1(f"{user}:{password}".encode()).digest()).decode()


@pytest.mark.parametrize("flags", [["--log-level", "DEBUG"], ["--verbose"]])
def test_zookeeper_digest_and_sasl_secrets_are_in_no_log_line(
    sasl_zookeeper: ZooKeeperServer, settings: Settings, tmp_path: Path, flags: list[str]
) -> None:
    """A trim (it takes its lock: a znode created with the digest ACL) over a session
    that logs in with SASL DIGEST-MD5 and adds digest auth, every client log on."""
    chroot = f"/m{uuid.uuid4().hex[:10]}"
    root = KazooClient(hosts=sasl_zookeeper.hosts, timeout=10)
    root.start(timeout=30)
    try:
        root.ensure_path(f"{chroot}/managed-ledgers")
    finally:
        root.stop()
        root.close()
    env = {
        "LEDGERGC_ZK_HOSTS": sasl_zookeeper.hosts + chroot,
        "LEDGERGC_ZK_SASL_MECHANISM": "DIGEST-MD5",
        "LEDGERGC_ZK_SASL_USERNAME": "gc",
        "LEDGERGC_ZK_SASL_PASSWORD": SASL_PASSWORD,
        "LEDGERGC_ZK_DIGEST": f"gc-digest:{DIGEST_PASSWORD}",
        "LEDGERGC_S3_ENDPOINT": str(settings.s3_endpoint),
        "LEDGERGC_BUCKET": settings.bucket,
        "LEDGERGC_STATE_DIR": str(tmp_path / "state"),
        **TEST_AWS_ENV,
    }

    done = ledgergc(env, tmp_path, *flags, "trim", "--json")

    log = done.stderr
    assert done.returncode == 0, log[-3000:]
    if "DEBUG" in flags:  # the lines that carried the secrets are there, masked
        assert "scheme='digest', auth='gc-digest:***'" in log, log[-3000:]
        assert "SASL(challenge=" in log and "response=***" in log, log[-3000:]
        # ledger-gc's own znodes are created CREATOR_ALL (the server fills in the
        # session's identities), so no digest id need be logged; any that is, is masked.
        assert "Id(scheme='auth'" in log, log[-3000:]
        assert not re.search(r"id='gc-digest:(?!\*\*\*')", log), log[-3000:]
    for secret in (SASL_PASSWORD, DIGEST_PASSWORD, digest_form("gc-digest", DIGEST_PASSWORD)):
        assert secret not in log and secret not in done.stdout, secret
    assert not SASL_RESPONSE.search(log), SASL_RESPONSE.search(log)
    assert not SESSION_PASSWORD.search(log), SESSION_PASSWORD.search(log)


def _plant(hosts: str, paths: dict[str, bytes]) -> None:
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=30)
    try:
        for path, data in paths.items():
            client.create(path, data, makepath=True)
    finally:
        client.stop()
        client.close()


@pytest.mark.parametrize("login", ["settings", "jaas"])
def test_the_configuration_stores_secrets_are_in_no_log_line_report_or_state(
    sasl_zookeeper: ZooKeeperServer, settings: Settings, tmp_path: Path, login: str
) -> None:
    """Issue 34: Pulsar's configuration store on a chroot of its own, with a login and
    digest of its own (``LEDGERGC_CONFIG_STORE_SASL_*`` or ``_JAAS``, ``_DIGEST``). An
    orphan cycle's dry run reads the policies there (the Pulsar-metadata source on), every
    client log on; then ``status --json`` shows where each came from. No password, no
    digest derived from one, no SASL response is in the logs, the report, the status or
    the state store's files."""
    local, config = (f"/{name}{uuid.uuid4().hex[:10]}" for name in ("m", "c"))
    _plant(
        sasl_zookeeper.hosts,
        {
            f"{local}/managed-ledgers/acme/gone/persistent/orders": b"",
            f"{local}/managed-ledgers/acme/live/persistent/clicks": b"",
            f"{config}/admin/policies/acme": b'{"allowedClusters": ["standalone"]}',
            f"{config}/admin/policies/acme/live": b'{"replication_clusters": ["standalone"]}',
        },
    )
    if login == "jaas":
        jaas = tmp_path / "config-store-jaas.conf"
        jaas.write_text(
            "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
            f'  username="cfg"\n  password="{CFG_SASL_PASSWORD}";\n}};\n'
        )
        cfg_login = {"LEDGERGC_CONFIG_STORE_JAAS": str(jaas)}
    else:
        cfg_login = {
            "LEDGERGC_CONFIG_STORE_SASL_USERNAME": "cfg",
            "LEDGERGC_CONFIG_STORE_SASL_PASSWORD": CFG_SASL_PASSWORD,
        }
    env = {
        "LEDGERGC_ZK_HOSTS": sasl_zookeeper.hosts + local,
        "LEDGERGC_ZK_SASL_MECHANISM": "DIGEST-MD5",
        "LEDGERGC_ZK_SASL_USERNAME": "gc",
        "LEDGERGC_ZK_SASL_PASSWORD": SASL_PASSWORD,
        "LEDGERGC_CONFIG_STORE_HOSTS": sasl_zookeeper.hosts + config,
        "LEDGERGC_CONFIG_STORE_SASL_MECHANISM": "DIGEST-MD5",
        **cfg_login,
        "LEDGERGC_CONFIG_STORE_DIGEST": f"cfg-digest:{CFG_DIGEST_PASSWORD}",
        "LEDGERGC_PULSAR_METADATA": "true",
        "LEDGERGC_BOOKKEEPER": "false",
        "LEDGERGC_S3_ENDPOINT": str(settings.s3_endpoint),
        "LEDGERGC_BUCKET": settings.bucket,
        "LEDGERGC_STATE_DIR": str(tmp_path / "state"),
        **TEST_AWS_ENV,
    }

    cycle = ledgergc(env, tmp_path, "--log-level", "DEBUG", "orphans", "--dry-run", "--json")
    status = ledgergc(env, tmp_path, "status", "--json")

    log = cycle.stderr
    assert cycle.returncode == 0, log[-3000:]
    assert "pulsar-metadata:local:acme/gone" in cycle.stdout, cycle.stdout[-3000:]
    # The configuration store's session logged in and added its digest, masked.
    assert "scheme='digest', auth='cfg-digest:***'" in log, log[-3000:]
    assert "SASL(challenge=" in log and "response=***" in log, log[-3000:]
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)["settings"]
    assert shown["LEDGERGC_CONFIG_STORE_DIGEST"] == {"value": "cfg-digest:***", "source": "env"}
    if login == "settings":
        assert shown["LEDGERGC_CONFIG_STORE_SASL_PASSWORD"] == {"value": "***", "source": "env"}
    else:
        assert shown["LEDGERGC_CONFIG_STORE_JAAS"] == {"value": str(jaas), "source": "env"}
    state = b"".join(f.read_bytes() for f in (tmp_path / "state").rglob("*") if f.is_file())
    derived = digest_form("cfg-digest", CFG_DIGEST_PASSWORD)
    for secret in (CFG_SASL_PASSWORD, CFG_DIGEST_PASSWORD, derived):
        for where, text in (
            ("log", log),
            ("report", cycle.stdout),
            ("status", status.stdout + status.stderr),
        ):
            assert secret not in text, (secret, where)
        assert secret.encode() not in state, (secret, "state store")
    assert not SASL_RESPONSE.search(log), SASL_RESPONSE.search(log)
    assert not SESSION_PASSWORD.search(log), SESSION_PASSWORD.search(log)


def test_a_configuration_store_refusing_its_login_is_one_line_naming_its_own_settings(
    sasl_zookeeper: ZooKeeperServer, settings: Settings, tmp_path: Path
) -> None:
    """Review 3 of issue 34: a wrong password for the configuration store's login (the
    local store's right): one line on stderr, exit 2, naming the configuration store's
    variables and neither password, at DEBUG too."""
    local, config = (f"/{name}{uuid.uuid4().hex[:10]}" for name in ("m", "c"))
    _plant(
        sasl_zookeeper.hosts,
        {
            f"{local}/managed-ledgers/acme/live/persistent/clicks": b"",
            f"{config}/admin/policies/acme/live": b"{}",
        },
    )
    wrong = "Wrong-cfg-pw-5t1q"
    env = {
        "LEDGERGC_ZK_HOSTS": sasl_zookeeper.hosts + local,
        "LEDGERGC_ZK_SASL_MECHANISM": "DIGEST-MD5",
        "LEDGERGC_ZK_SASL_USERNAME": "gc",
        "LEDGERGC_ZK_SASL_PASSWORD": SASL_PASSWORD,
        "LEDGERGC_CONFIG_STORE_HOSTS": sasl_zookeeper.hosts + config,
        "LEDGERGC_CONFIG_STORE_SASL_USERNAME": "cfg",
        "LEDGERGC_CONFIG_STORE_SASL_PASSWORD": wrong,
        "LEDGERGC_PULSAR_METADATA": "true",
        "LEDGERGC_BOOKKEEPER": "false",
        "LEDGERGC_S3_ENDPOINT": str(settings.s3_endpoint),
        "LEDGERGC_BUCKET": settings.bucket,
        "LEDGERGC_STATE_DIR": str(tmp_path / "state"),
        **TEST_AWS_ENV,
    }

    plain = ledgergc(env, tmp_path, "orphans", "--dry-run")
    debug = ledgergc(env, tmp_path, "--log-level", "DEBUG", "orphans", "--dry-run")

    assert plain.returncode == 2, plain.stderr[-3000:]
    [line] = plain.stderr.strip().splitlines()
    assert line.startswith("ledgergc: error: "), line
    assert "LEDGERGC_CONFIG_STORE_SASL" in line and "configuration store" in line, line
    assert debug.returncode == 2, debug.stderr[-3000:]
    for done in (plain, debug):
        for secret in (wrong, SASL_PASSWORD):
            assert secret not in done.stdout + done.stderr, secret
        assert not SASL_RESPONSE.search(done.stderr), SASL_RESPONSE.search(done.stderr)


@pytest.fixture(scope="module")
def moto_sts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoStsServer]:
    server = MotoStsServer(log_dir=tmp_path_factory.mktemp("moto"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def temporary_credentials(sts: MotoStsServer) -> dict[str, str]:
    client = boto3.client(
        "sts",
        endpoint_url=sts.endpoint,
        region_name="us-east-1",
        aws_access_key_id="AKIALONGLIVEDKEY0001",
        aws_secret_access_key="long-lived-secret-0001",
    )
    role = "arn:aws:iam::123456789012:role/ledger-gc"
    found = client.assume_role(RoleArn=role, RoleSessionName="ledger-gc")["Credentials"]
    return {
        "AWS_ACCESS_KEY_ID": found["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": found["SecretAccessKey"],
        "AWS_SESSION_TOKEN": found["SessionToken"],
    }


def s3_env(settings: Settings) -> dict[str, str]:
    return {
        "LEDGERGC_ZK_HOSTS": settings.zk_hosts,
        "LEDGERGC_S3_ENDPOINT": str(settings.s3_endpoint),
        "LEDGERGC_BUCKET": settings.bucket,
        "LEDGERGC_STATE_DIR": str(settings.state_dir),
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def test_sts_temporary_credentials_in_the_environment_are_in_no_log_line(
    settings: Settings, moto_sts: MotoStsServer, tmp_path: Path
) -> None:
    """Temporary credentials as a task hands them to a Spark application (the
    environment): every request botocore logs carries the session token (its headers,
    the canonical request). SeaweedFS does not take STS tokens, so the request is refused
    (exit 2): the log and the error show neither the secret key nor the token."""
    credentials = temporary_credentials(moto_sts)
    env = {**s3_env(settings), **credentials}

    done = ledgergc(env, tmp_path, "--log-level", "DEBUG", "status")

    log = done.stdout + done.stderr
    assert "x-amz-security-token" in log.lower(), log[-3000:]  # the request was logged
    for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        assert credentials[name] not in log, name
        assert credentials[name][:24] not in log, name


def test_credentials_sts_returns_to_botocore_itself_are_in_no_log_line(
    settings: Settings, moto_sts: MotoStsServer, tmp_path: Path
) -> None:
    """A profile that assumes a role: botocore calls STS and logs its answer (the new
    secret key and token) before any code of ledger-gc could know them."""
    config = tmp_path / "aws-config"
    config.write_text(
        "[profile ledger-gc]\n"
        "role_arn = arn:aws:iam::123456789012:role/ledger-gc\n"
        "source_profile = base\n"
        "[profile base]\n"
    )
    credentials = tmp_path / "aws-credentials"
    credentials.write_text(
        "[base]\naws_access_key_id = AKIALONGLIVEDKEY0002\n"
        "aws_secret_access_key = long-lived-secret-0002\n"
    )
    env = {
        **s3_env(settings),
        "AWS_CONFIG_FILE": str(config),
        "AWS_SHARED_CREDENTIALS_FILE": str(credentials),
        "AWS_PROFILE": "ledger-gc",
        "AWS_ENDPOINT_URL_STS": moto_sts.endpoint,
    }

    done = ledgergc(env, tmp_path, "--log-level", "DEBUG", "status")

    log = done.stdout + done.stderr
    assert "AssumeRole" in log, log[-3000:]  # botocore did call STS and log it
    assert "long-lived-secret-0002" not in log
    for tag in ("SecretAccessKey", "SessionToken"):
        shown = re.findall(rf"<{tag}>([^<]*)</{tag}>", log)
        assert shown and set(shown) == {"***"}, (tag, shown)
    tokens = re.findall(r"(?i)x-amz-security-token['\"]?\s*[:=]\s*(?:b?['\"])?([^'\"\s,&}]+)", log)
    assert tokens and set(tokens) == {"***"}, tokens


def test_a_spark_executor_masks_the_secrets_its_settings_carry(spark: Any) -> None:
    """Settings reach an executor in a task's closure: the Python worker that unpickles
    them masks their secrets in every log record from then on (nothing else sets up its
    logging). The task logs through a handler of its own, added after, and returns what
    it wrote."""
    settings = Settings(zk_address="127.0.0.1:2181/x", zk_digest=f"gc:{DIGEST_PASSWORD}")

    def log_on_executor(part: Iterator[int]) -> Iterator[str]:
        import io
        import logging

        written = io.StringIO()
        handler = logging.StreamHandler(written)
        logger = logging.getLogger("kazoo.client")
        logger.addHandler(handler)
        try:
            for _ in part:
                logger.warning("auth %s", settings.zk_digest)
        finally:
            logger.removeHandler(handler)
        yield written.getvalue()

    lines = spark.sparkContext.parallelize(range(4), 2).mapPartitions(log_on_executor).collect()

    assert lines and all(line.startswith("auth gc:***") for line in lines), lines
    assert not any(DIGEST_PASSWORD in line for line in lines)
