"""The BookKeeper survey's scale path, small (issue 36; the curve itself is
``bench/bk_scan.py``): the benchmark's tree (``bk_scan.build``: topics of 100 ledgers,
orphan ledgers, a gone topic's partition, untagged ledgers) surveyed on the suite's Spark
standalone cluster (two workers on loopback) in parts much smaller than the tree, each
task sent only its part of the references (``Classifier.within``), then again from the
record cache the executors wrote, then by the driver alone with every record read: the
same classes, candidates and checks, and exactly what was built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.config.settings import Settings
from local_stack.spark_cluster import SparkStandaloneCluster
from pulsar_cluster import PulsarCluster

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import bk_scan  # noqa: E402  (the benchmark's tree, planted the same way)

#: 60,000 ledgers: six leaf directories, a gone topic (block 503), untagged ledgers.
SIZE = 60_000
#: Ledgers a task classifies: about 10,000 (one directory): six tasks on two workers.
PART = 10_000


@pytest.mark.timeout(900)
def test_the_survey_on_a_spark_cluster_in_parts_finds_what_the_driver_alone_finds(
    settings: Settings,
    zk_client: KazooClient,
    spark_cluster: SparkStandaloneCluster,
    tmp_path: Path,
) -> None:
    cluster = PulsarCluster(zk_client).init(idgen=False)
    cluster.namespace(bk_scan.NAMESPACE)
    zk_client.ensure_path(f"/managed-ledgers/{bk_scan.NAMESPACE}/persistent")
    bk_scan.build(zk_client, 0, SIZE // bk_scan.PER_ML)
    want = bk_scan.expected(SIZE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERGC_")}
    env.update(spark_cluster.driver_env())
    env.update(
        {
            "LEDGERGC_ZK_HOSTS": settings.zk_hosts,
            "LEDGERGC_BUCKET": "",
            "LEDGERGC_BOOKKEEPER": "true",
            "LEDGERGC_STATE_DIR": str(tmp_path / "state"),
        }
    )
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("bk_scale_driver.py")), str(PART)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=800,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    runs: dict[str, dict[str, Any]] = {line["label"]: line for line in lines}
    assert set(runs) == {"first", "second", "driver"}
    first, second, alone = runs["first"], runs["second"], runs["driver"]
    # On the executors: six parts, every record read, then every one from their cache.
    assert first["executor_tasks"] == second["executor_tasks"] == SIZE // PART
    assert first["executor_seconds"] and second["executor_seconds"]
    assert (first["records_read"], first["records_cached"]) == (SIZE, 0)
    assert (second["records_read"], second["records_cached"]) == (0, SIZE)
    planted = {name: count for name, count in want.items() if name.startswith("bk-")}
    for run in (first, second, alone):
        got = {name: run["classes"].get(name, 0) for name in planted}
        assert got == planted, run["label"]
        assert not {n: c for n, c in run["classes"].items() if c and n not in planted}
        assert run["ledgers"] == run["found"] == SIZE
        assert run["missing_listed"] == 0 and run["above_counter"] == []
    for run in (first, second):
        assert run["candidates"] == alone["candidates"], run["label"]
        assert run["held_reasons"] == alone["held_reasons"]
    assert len(alone["candidates"]) == (want["bk-orphan-ledger"] + want["bk-orphan-partition"])
