"""``ledgergc orphans`` run directly against a Spark cluster hands its executors
short-lived credentials only, as the Airflow path does (issue 35, DESIGN.md "Tiered
storage on Google Cloud Storage and Azure Blob Storage").

A CLI whose master is not local (``PYSPARK_SUBMIT_ARGS --master spark://...``) ships its
object stores' credentials to executors in other processes (on other hosts, in a real
cluster) inside the tasks' pickled closures. Long-lived AWS keys are exchanged for an STS
session first, an Azure account key for a SAS of its container; where the exchange fails the
command stops in one line (exit 2) before Spark starts; with a local master nothing
changes. The S3 store here is moto's server (S3 and STS on one loopback port: it checks
no signature, so the session's credentials work on its S3), Azure is Azurite (which
checks a SAS's signature), the cluster the suite's standalone one (``spark_cluster``).

What the executors get is read where PySpark pickles it: a wrapper around the CLI
records every closure, broadcast and row PySpark serialises for them, and the bytes are
searched for the long-lived secrets.
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobServiceClient

from ledger_gc import run_log
from ledger_gc.config.settings import Settings
from ledger_gc.errors import ConfigError
from local_stack.azurite import AZURITE_ACCOUNT, AZURITE_KEY, AzuriteBlobServer
from local_stack.moto_sts import MotoStsServer
from local_stack.server_process import free_port
from local_stack.spark_cluster import SparkStandaloneCluster

LONG_LIVED = ("AKIALONGLIVEDKEY0035", "long-lived-secret-never-on-a-cluster-35")
#: The session token moto's STS answers every GetSessionToken with.
MOTO_SESSION_TOKEN = b"AQoEXAMPLEH4aoAH0gNCAPyJxz4BlCFFxWNE1OPTgk5TthT"
#: Stopped before the Spark session (a JVM start takes tens of seconds on CI).
BEFORE_SPARK_SECONDS = 30

#: Runs ``ledgergc`` with every serialisation PySpark makes for executors (closures,
#: broadcasts, rows) appended to the file named by argv[1].
SPY = textwrap.dedent(
    """
    import pickle
    import sys
    from pathlib import Path

    from pyspark import serializers
    from pyspark.core import broadcast

    out = Path(sys.argv[1])

    def record(data):
        with out.open("ab") as sink:
            sink.write(data)
        return data

    for cls in (serializers.CloudPickleSerializer, serializers.CPickleSerializer):
        def dumps(self, obj, _original=cls.dumps):
            return record(_original(self, obj))
        cls.dumps = dumps

    _dump = broadcast.Broadcast.dump

    def dump(self, value, f):
        record(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))
        return _dump(self, value, f)

    broadcast.Broadcast.dump = dump

    from ledger_gc.cli import main

    sys.exit(main(sys.argv[2:]))
    """
)


@pytest.fixture(scope="module")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoStsServer]:
    server = MotoStsServer(log_dir=tmp_path_factory.mktemp("moto"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _moto_bucket(moto: MotoStsServer, name: str) -> str:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=moto.endpoint,
        region_name="us-east-1",
        aws_access_key_id=LONG_LIVED[0],
        aws_secret_access_key=LONG_LIVED[1],
    )
    client.create_bucket(Bucket=name)
    client.put_object(Bucket=name, Key="not-a-ledger", Body=b"x")
    return name


def _container(azurite: AzuriteBlobServer, name: str) -> str:
    client = azurite.client()
    try:
        client.create_container(name)
    except Exception as exc:  # already there from an earlier test
        if "ContainerAlreadyExists" not in str(exc):
            raise
    client.get_container_client(name).upload_blob("probe", b"x", overwrite=True)
    return name


def _on_both_stores(
    settings: Settings, moto: MotoStsServer, azurite: AzuriteBlobServer, name: str
) -> Settings:
    """The block store on moto's S3 with long-lived keys; tiered storage on Azurite with
    the account key (the brokers' ``AZURE_STORAGE_ACCOUNT``/``_ACCESS_KEY``)."""
    return settings.with_overrides(
        s3_endpoint=moto.endpoint,
        bucket=_moto_bucket(moto, name),
        s3_access_key_id=LONG_LIVED[0],
        s3_secret_access_key=LONG_LIVED[1],
        offload_driver="azureblob",
        offload_bucket=_container(azurite, name),
        offload_endpoint=azurite.account_url,
        azure_storage_account=AZURITE_ACCOUNT,
        azure_storage_key=AZURITE_KEY,
    )


def _cli_env(settings: Settings, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_"))}
    return {**env, **settings.to_env(), **extra}


def test_a_cli_cycle_on_a_spark_cluster_hands_executors_short_lived_credentials_only(
    settings: Settings,
    moto: MotoStsServer,
    azurite: AzuriteBlobServer,
    spark_cluster: SparkStandaloneCluster,
    tmp_path: Path,
) -> None:
    configured = _on_both_stores(settings, moto, azurite, "cli-cluster-creds")
    shipped = tmp_path / "shipped.bin"
    spy = tmp_path / "spy.py"
    spy.write_text(SPY)
    env = _cli_env(
        configured,
        {**spark_cluster.driver_env(), "AWS_ENDPOINT_URL_STS": moto.endpoint},
    )
    result = subprocess.run(
        [sys.executable, str(spy), str(shipped), "orphans", "--dry-run", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    data = shipped.read_bytes()
    assert data, "nothing was serialised for the executors"
    # What the executors got: no long-lived secret ...
    assert LONG_LIVED[1].encode() not in data
    assert LONG_LIVED[0].encode() not in data
    assert AZURITE_KEY.encode() not in data
    # ... but working short-lived ones: an STS session, and a container SAS (the cycle
    # listed both stores on the executors with them, and completed).
    assert MOTO_SESSION_TOKEN in data
    assert b"sig=" in data and b"sv=" in data
    output = result.stdout + result.stderr
    assert LONG_LIVED[1] not in output and AZURITE_KEY not in output


def test_keys_sts_refuses_stop_the_cli_in_one_line_before_spark(
    settings: Settings,
    moto: MotoStsServer,
    azurite: AzuriteBlobServer,
    spark_cluster: SparkStandaloneCluster,
) -> None:
    configured = _on_both_stores(settings, moto, azurite, "cli-cluster-refused")
    dead = f"http://127.0.0.1:{free_port()}"
    env = _cli_env(configured, {**spark_cluster.driver_env(), "AWS_ENDPOINT_URL_STS": dead})
    started = time.monotonic()
    result = subprocess.run(
        [str(Path(sys.executable).with_name("ledgergc")), "orphans", "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert time.monotonic() - started < BEFORE_SPARK_SECONDS, result.stderr[-4000:]
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-4000:]
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("ledgergc: error: long-lived AWS keys are never handed")
    assert "AWS_ACCESS_KEY_ID" in line and dead in line
    assert LONG_LIVED[1] not in line
    assert result.stdout == ""
    assert run_log.read_runs(configured, run_log.ORPHANS) == []


# --- the shared exchange, as the CLI calls it ------------------------------------------------


def _endpoints_pickled(settings: Settings, monkeypatch: pytest.MonkeyPatch, master: str) -> bytes:
    """What the CLI's cycle would hand its executors on ``master``, pickled."""
    from ledger_gc.commands.orphans import cycle_endpoints

    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", f"--master {master} pyspark-shell")
    endpoints, _ = cycle_endpoints(settings)
    return pickle.dumps((endpoints.blocks, endpoints.offload))


def test_a_local_master_changes_nothing(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, azurite: AzuriteBlobServer
) -> None:
    """With a local master the executors are this process's own: no exchange, no STS
    call (there is none here: it would fail), the keys as given."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", f"http://127.0.0.1:{free_port()}")
    configured = settings.with_overrides(
        s3_endpoint="https://s3.eu-west-1.amazonaws.com",
        s3_access_key_id=LONG_LIVED[0],
        s3_secret_access_key=LONG_LIVED[1],
        offload_driver="azureblob",
        offload_bucket="local-master",
        offload_endpoint=azurite.account_url,
        azure_storage_account=AZURITE_ACCOUNT,
        azure_storage_key=AZURITE_KEY,
    )
    for master in ("local[*]", "local[2]", "local"):
        shipped = _endpoints_pickled(configured, monkeypatch, master)
        assert LONG_LIVED[1].encode() in shipped and AZURITE_KEY.encode() in shipped


def test_a_master_in_spark_conf_counts_as_the_master(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, azurite: AzuriteBlobServer
) -> None:
    """``--conf spark.master=...`` in ``PYSPARK_SUBMIT_ARGS`` names the master as
    ``--master`` does: the session runs there, and the account key is exchanged."""
    from ledger_gc.commands.orphans import cycle_endpoints

    configured = settings.with_overrides(
        offload_driver="azureblob",
        offload_bucket="conf-master",
        offload_endpoint=azurite.account_url,
        azure_storage_account=AZURITE_ACCOUNT,
        azure_storage_key=AZURITE_KEY,
    )
    monkeypatch.setenv(
        "PYSPARK_SUBMIT_ARGS", "--conf spark.master=spark://127.0.0.1:7077 pyspark-shell"
    )
    endpoints, master = cycle_endpoints(configured)
    assert master == "spark://127.0.0.1:7077"
    assert endpoints.offload.azure_key is None and endpoints.offload.azure_sas


def test_static_keys_of_a_store_without_sts_go_as_the_airflow_path_hands_them(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """An S3-compatible store that is not AWS and names no STS (SeaweedFS here) has only
    its static keys: the Airflow path hands them over as they are (to spark-submit's
    environment), and the CLI does the same, saying so in its log."""
    monkeypatch.delenv("AWS_ENDPOINT_URL_STS", raising=False)
    caplog.set_level(logging.INFO)
    configured = settings.with_overrides(
        s3_access_key_id=LONG_LIVED[0], s3_secret_access_key=LONG_LIVED[1]
    )
    shipped = _endpoints_pickled(configured, monkeypatch, "spark://127.0.0.1:7077")
    assert LONG_LIVED[1].encode() in shipped
    assert "is not AWS and has no STS" in caplog.text
    assert LONG_LIVED[1] not in caplog.text


def test_an_azure_key_that_is_not_one_is_one_line_naming_the_setting(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, azurite: AzuriteBlobServer
) -> None:
    from ledger_gc.commands.orphans import cycle_endpoints

    wrong = "not-a-base64-key!!"
    configured = settings.with_overrides(
        offload_driver="azureblob",
        offload_bucket="wrong-key",
        offload_endpoint=azurite.account_url,
        azure_storage_account=AZURITE_ACCOUNT,
        azure_storage_key=wrong,
    )
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--master spark://127.0.0.1:7077 pyspark-shell")
    with pytest.raises(ConfigError) as err:
        cycle_endpoints(configured)
    message = str(err.value)
    assert "AZURE_STORAGE_ACCESS_KEY" in message and "\n" not in message
    assert wrong not in message


def test_the_sas_a_cluster_gets_reads_the_container_as_the_key_did(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, azurite: AzuriteBlobServer
) -> None:
    """The SAS the CLI's executors and driver get in place of the key does what a
    cycle does with the container (Azurite checks its signature and permissions): check
    it, read the account's soft delete and versioning as the key reads them (the soft
    delete read with the key when the SAS was minted: a container SAS cannot read the
    account's properties), list, head, read a range, batch-delete; and nothing else: no
    other container, no write, not the account's properties (that decide whether a
    delete can be undone)."""
    from ledger_gc.commands.orphans import cycle_endpoints
    from ledger_gc.config.edge import resolve
    from ledger_gc.storage.azure_container import AzureContainer

    container = _container(azurite, "sas-reads-it-all")
    segment = "3f2504e0-4f89-11d3-9a0c-0305e82c3301-ledger-7"
    azurite.client().get_container_client(container).upload_blob(
        segment, b"segment", overwrite=True
    )
    configured = settings.with_overrides(
        offload_driver="azureblob",
        offload_bucket=container,
        offload_endpoint=azurite.account_url,
        azure_storage_account=AZURITE_ACCOUNT,
        azure_storage_key=AZURITE_KEY,
    )
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--master spark://127.0.0.1:7077 pyspark-shell")
    endpoints, _ = cycle_endpoints(configured)
    store = endpoints.offload
    assert store.azure_key is None and store.azure_connection_string is None
    assert store.azure_sas and AZURITE_KEY.encode() not in pickle.dumps(store)
    bucket = AzureContainer(store)
    bucket.check_bucket()
    with_key = AzureContainer(resolve(configured).offload)
    assert bucket.versioning().to_dict() == with_key.versioning().to_dict()
    [listed] = [o for o in bucket.iter_objects("") if o.key == segment]
    head = bucket.head(segment)
    assert head is not None and head.size == len(b"segment")
    assert bucket.read_range(segment, 0, 3) == b"seg"
    result = bucket.delete_listed([listed])
    assert (result.deleted, result.failed) == (1, {})
    assert bucket.head(segment) is None
    other = _container(azurite, "someone-elses-data")
    azurite.client().get_container_client(other).upload_blob("precious", b"not the GC's")
    executor = BlobServiceClient(azurite.account_url, credential=store.azure_sas)
    policy = azurite.client().get_service_properties()["delete_retention_policy"]
    for refused in (
        lambda: executor.delete_container(other),
        lambda: executor.get_container_client(other).delete_blob("precious"),
        lambda: executor.get_container_client(container).upload_blob("x", b"written"),
        lambda: executor.set_service_properties(delete_retention_policy=policy),
    ):
        with pytest.raises(HttpResponseError):
            refused()
    assert "precious" in {b.name for b in azurite.client().get_container_client(other).list_blobs()}
