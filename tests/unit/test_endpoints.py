"""The edge: Settings resolved into endpoints, as every command and task does it once."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

from ledger_gc.config.edge import resolve
from ledger_gc.config.endpoints import BOOKKEEPER, PULSAR
from ledger_gc.config.settings import Settings


def test_no_secret_shows_in_the_endpoints_repr(tmp_path: Path) -> None:
    settings = Settings(
        zk_digest="gc:zk-digest-secret",
        s3_access_key_id="AKIDEXAMPLE",
        s3_secret_access_key="s3-secret-key",
        s3_session_token="s3-session-token",
        state_url="postgresql+psycopg://gc:state-password@db:5432/gc",
        state_dir=tmp_path,
    )
    shown = repr(resolve(settings))
    for secret in ("zk-digest-secret", "s3-secret-key", "s3-session-token", "state-password"):
        assert secret not in shown, shown


def test_bookkeeper_on_pulsars_ensemble_is_one_endpoint_named_as_bookkeepers() -> None:
    """Unset, BookKeeper's ensemble is Pulsar's: the same sessions (one delete lock), its
    errors naming BookKeeper's variables where they would be read."""
    endpoints = resolve(Settings(zk_address="zk1:2181/pulsar"))
    assert endpoints.zk.ensemble == PULSAR and endpoints.bookkeeper.zk.ensemble == BOOKKEEPER
    assert endpoints.bookkeeper.zk == endpoints.zk
    assert endpoints.bookkeeper.where == "zk1:2181/pulsar/ledgers"
    assert endpoints.zk.names("tls_ca") == "LEDGERGC_ZK_TLS_CA"


def test_bookkeepers_own_ensemble_is_another_endpoint() -> None:
    endpoints = resolve(
        Settings(
            zk_address="zk1:2181/pulsar", bk_zk_address="zk+hierarchical://bk1:2181/bk/ledgers"
        )
    )
    bookkeeper = endpoints.bookkeeper
    assert bookkeeper.zk != endpoints.zk
    assert bookkeeper.hosts == "bk1:2181" and bookkeeper.root == "/bk/ledgers"
    assert bookkeeper.manager == "hierarchical"
    assert bookkeeper.zk.hosts_variable == "LEDGERGC_BK_ZK_HOSTS"


def test_tiered_storage_takes_the_block_stores_endpoint_and_credentials_unless_its_own() -> None:
    settings = Settings(
        s3_endpoint="http://s3.local:8333",
        s3_region="eu-west-1",
        s3_access_key_id="AKIDEXAMPLE",
        s3_secret_access_key="secret",
        offload_bucket="offload",
        offload_prefix="tiered",
    )
    endpoints = resolve(settings)
    offload = endpoints.offload
    assert (offload.bucket, offload.key_prefix) == ("offload", "tiered/")
    assert (offload.endpoint, offload.region) == ("http://s3.local:8333", "eu-west-1")
    assert offload.access_key_id == "AKIDEXAMPLE" and offload.secret_access_key == "secret"
    own = resolve(settings.with_overrides(offload_endpoint="http://other:9000")).offload
    assert own.endpoint == "http://other:9000"
    assert not resolve(settings.with_overrides(bucket="")).blocks.configured


def test_a_spark_tasks_endpoint_carries_its_share_of_the_read_budget() -> None:
    zk = resolve(Settings(zk_max_reads_per_second=100.0)).zk
    assert zk.share(4).max_reads_per_second == 25.0
    assert resolve(Settings()).zk.share(4).max_reads_per_second == 0.0  # no bound stays none


def test_endpoints_cross_a_process_boundary_whole(tmp_path: Path) -> None:
    settings = Settings(
        zk_digest="gc:pw", grace_seconds=60, delete_enabled=True, state_dir=tmp_path
    )
    endpoints = resolve(settings)
    again = pickle.loads(pickle.dumps(endpoints))
    assert again == endpoints
    assert again.zk.names("sasl_username") == "LEDGERGC_ZK_SASL_USERNAME"
    assert again.policy.grace_seconds == 60 and again.policy.delete_enabled


def test_an_executor_masks_what_its_endpoints_carry_once_unpickled(tmp_path: Path) -> None:
    """A Spark task's closure carries endpoints, not settings (a snapshot shard, a
    BookKeeper directory, a delete batch): unpickling them is where their secrets enter
    the executor, so that is where they are masked, as a Settings' are. In a process of
    its own: the masker is the process's."""
    endpoints = resolve(
        Settings(
            zk_digest="gc:digest-pw-endpoint",
            s3_secret_access_key="s3-key-endpoint",
            state_url="postgresql+psycopg://gc:state-pw-endpoint@db:5432/gc",
            state_dir=tmp_path,
        )
    )
    code = textwrap.dedent(
        """
        import logging, pickle, sys
        endpoints = pickle.loads(sys.stdin.buffer.read())
        log = logging.getLogger("kazoo.client")
        log.warning("auth %s", endpoints.zk.digest)
        log.warning("key %s", endpoints.blocks.secret_access_key)
        log.warning("url %s", endpoints.state.state_url)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=pickle.dumps(endpoints),
        capture_output=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr.decode()
    log = done.stderr.decode()
    for secret in ("digest-pw-endpoint", "s3-key-endpoint", "state-pw-endpoint"):
        assert secret not in log, log
    assert "auth gc:***" in log, log


def test_an_endpoints_sasl_login_shows_no_password(tmp_path: Path) -> None:
    """``ZkEndpoint.login()`` is handed to every layer below the edge (``connect``, the
    SASL errors): its ``repr`` must not carry the password, given as a setting or read
    from a JAAS file, on Pulsar's ensemble or BookKeeper's."""
    from ledger_gc.config.jaas import parse
    from ledger_gc.config.zk_security import ZkSecurity

    jaas = tmp_path / "jaas.conf"
    jaas.write_text(
        "Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        '  username="bk"\n  password="jaas-secret-pw";\n};\n',
        encoding="utf-8",
    )
    endpoints = resolve(Settings(zk_security=ZkSecurity(jaas=str(jaas))))
    own = resolve(
        Settings(
            bk_zk_address="bk1:2181/bk",
            bk_zk_security=ZkSecurity(
                sasl_mechanism="DIGEST-MD5", sasl_username="b", sasl_password="bk-sasl-secret"
            ),
        )
    )
    shown = repr(endpoints.zk.login()) + repr(own.bookkeeper.zk.login())
    shown += repr(parse(jaas.read_text(encoding="utf-8"), "jaas.conf"))
    assert "jaas-secret-pw" not in shown and "bk-sasl-secret" not in shown, shown
    assert endpoints.zk.login().password == "jaas-secret-pw"  # kept, only not shown
