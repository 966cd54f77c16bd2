"""The BookKeeper survey's scale path, small (issue 36; the curve itself is
``bench/bk_scan.py``): the benchmark's tree (``bk_scan.build``: topics of 100 ledgers,
orphan ledgers, a gone topic's partition, untagged ledgers) surveyed on the suite's Spark
standalone cluster (two workers on loopback) in parts much smaller than the tree, each
task sent only its part of the references (``Classifier.within``), then again from the
record cache the executors wrote, then by the driver alone with every record read: the
same classes, candidates and checks, and exactly what was built, whether the ids lie
in blocks or come from one counter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.orphans.cycle import run_orphan_cycle
from local_stack.spark_cluster import SparkStandaloneCluster
from pulsar_cluster import PulsarCluster, cursor_tags, ml_tags, schema_tags

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

import bk_scan  # noqa: E402  (the benchmark's tree, planted the same way)

#: 60,000 ledgers: six leaf directories, a gone topic (block 503), untagged ledgers.
SIZE = 60_000
#: Ledgers a task classifies: about 10,000 (one directory): six tasks on two workers.
PART = 10_000


@pytest.mark.timeout(900)
@pytest.mark.parametrize("ids", bk_scan.ID_ORDERS)
def test_the_survey_on_a_spark_cluster_in_parts_finds_what_the_driver_alone_finds(
    settings: Settings,
    zk_client: KazooClient,
    spark_cluster: SparkStandaloneCluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ids: str,
) -> None:
    """Ids in blocks (each topic's together), and from one counter as Pulsar hands
    them out: then every part holds ledgers of every topic, and each task's cut of the
    references names them all."""
    monkeypatch.setattr(bk_scan, "ID_ORDER", ids)
    cluster = PulsarCluster(zk_client).init(idgen=False)
    cluster.namespace(bk_scan.NAMESPACE)
    zk_client.ensure_path(f"/managed-ledgers/{bk_scan.NAMESPACE}/persistent")
    bk_scan.build(zk_client, SIZE // bk_scan.PER_ML)
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


@pytest.mark.spark
def test_a_cycle_with_both_sources_reads_each_managed_ledger_and_schema_once(
    pulsar: Settings,
    cluster: PulsarCluster,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Pulsar-metadata source and the BookKeeper source share one read of
    ``/managed-ledgers`` and ``/schemas``: every managed ledger's, cursor's and schema
    locator's znode is read once per cycle, however many sources judge by them. (A
    clean cluster: no live re-check of a suspect reads one again.)"""
    topics = [f"acme/live/persistent/t-{i}" for i in range(3)]
    cluster.cluster_definition()
    cluster.policies("acme/live")
    cluster.local_policies("acme/live")
    for name in topics:
        cluster.managed_ledger(name, [cluster.ledger(ml_tags(name)) for _ in range(2)])
        cluster.cursor(name, "sub", cursors_ledger_id=cluster.ledger(cursor_tags(name, "sub")))
    cluster.schema("acme/live/t-0", [(0, cluster.ledger(schema_tags("acme/live/t-0")))])
    reads: Counter[str] = Counter()
    listed: Counter[str] = Counter()
    get_many, children_of_many = MetadataStore.get_many, MetadataStore.children_of_many

    def counting_get(self: MetadataStore, znodes: Sequence[str]) -> Any:
        reads.update(znodes)
        return get_many(self, znodes)

    def counting_children(self: MetadataStore, znodes: Sequence[str]) -> Any:
        listed.update(znodes)
        return children_of_many(self, znodes)

    monkeypatch.setattr(MetadataStore, "get_many", counting_get)
    monkeypatch.setattr(MetadataStore, "children_of_many", counting_children)
    report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0)).to_dict()
    assert report["status"] == "ok", report["refusals"]
    assert report["pulsar_metadata"] is not None and report["bookkeeper"]["ledgers"] == 10
    records = {
        path: count
        for path, count in reads.items()
        if path.startswith(("/managed-ledgers/", "/schemas/"))
    }
    want = {f"/managed-ledgers/{name}" for name in topics}
    want |= {f"/managed-ledgers/{name}/sub" for name in topics}
    want |= {"/schemas/acme/live/t-0"}
    assert set(records) == want
    assert set(records.values()) == {1}, records
    # The levels are listed again, names only (a few reads whatever the cluster): the
    # Pulsar-metadata source walks its roots, /schemas among them, and the block-store
    # source without a bucket counts the managed ledgers (orphans/survey_steps.py).
    levels = {p: n for p, n in listed.items() if p.startswith(("/managed-ledgers/", "/schemas/"))}
    assert levels and max(levels.values()) <= 2, levels
