"""``include/airflow_local.py``'s conversion of ``airflow_settings.yaml`` into Airflow's
import files: the connections it writes must give the DAG tasks the store it points at.

(That Airflow accepts the files, and that ``airflow standalone`` starts and stops with
them, is what the browser test exercises end to end.)
"""

from __future__ import annotations

import json

import pytest

from airflow_local import StoreLocation, load_settings_yaml, write_import_files
from ledger_gc.airflow.settings_hook import apply_mapping, s3_overrides, zookeeper_overrides
from ledger_gc.config.settings import Settings


def connection(conn_id: str, entry: dict) -> object:
    from airflow.models import Connection

    return Connection(conn_id=conn_id, **entry)


def test_the_connections_point_the_tasks_at_the_given_store(tmp_path, monkeypatch):
    location = StoreLocation(
        zk_hosts="127.0.0.1:40001,127.0.0.1:40002/pulsar/a",
        s3_endpoint="http://127.0.0.1:40003",
        bucket="demo-bucket",
        prefix="",
    )
    files = write_import_files(tmp_path, location)
    connections = json.loads(files["connections"].read_text())
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)  # s3_overrides exports the key pair

    settings = Settings(zk_address="nowhere:1").with_overrides(
        **zookeeper_overrides(connection("ledgergc_zookeeper", connections["ledgergc_zookeeper"])),
        **s3_overrides(connection("ledgergc_s3", connections["ledgergc_s3"])),
    )

    assert settings.zk_hosts == "127.0.0.1:40001,127.0.0.1:40002/pulsar/a"
    assert (settings.s3_endpoint, settings.bucket, settings.prefix) == (
        "http://127.0.0.1:40003",
        "demo-bucket",
        "",
    )
    assert connections["spark_default"] == {
        "conn_type": "spark",
        "host": "local[*]",
        "extra": json.dumps({"deploy-mode": "client"}),
    }
    assert oct(files["connections"].stat().st_mode & 0o777) == "0o600"


def test_without_a_location_the_yaml_values_stand(tmp_path):
    connections = json.loads(write_import_files(tmp_path, None)["connections"].read_text())
    zk = connection("ledgergc_zookeeper", connections["ledgergc_zookeeper"])

    assert Settings().with_overrides(**zookeeper_overrides(zk)).zk_hosts == "127.0.0.1:2181"


def test_pools_and_variables_are_airflows_import_shapes(tmp_path):
    files = write_import_files(tmp_path, None)
    pools = json.loads(files["pools"].read_text())
    variables = json.loads(files["variables"].read_text())

    yaml_pools = {p["pool_name"]: p["pool_slot"] for p in load_settings_yaml()["pools"]}
    assert {name: pool["slots"] for name, pool in pools.items()} == yaml_pools
    assert all(set(pool) == {"slots", "description", "include_deferred"} for pool in pools.values())
    settings = apply_mapping(Settings(), json.loads(variables["ledgergc_settings"]))
    assert (settings.delete_enabled, settings.grace_seconds) == (False, 86400)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        (
            {"LEDGERGC_ZK_HOSTS": "h:1/c", "LEDGERGC_S3_ENDPOINT": ""},
            StoreLocation("h:1/c", None, None, None),
        ),
    ],
)
def test_store_location_from_the_environment(env, expected):
    assert StoreLocation.from_env(env) == expected
