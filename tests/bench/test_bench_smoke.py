"""Every bench/ command runs in --quick mode and ends with one line of JSON.

Not a timing test: speed and memory are shown by the benchmark commands themselves
(docs/BENCHMARKS.md). This only keeps the commands from rotting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from local_stack.stack import LocalStack

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_quick(name: str, stack: LocalStack | None, tmp_path: Path, timeout: int = 240) -> dict:
    env = {**os.environ, "BENCH_DATA_DIR": str(tmp_path)}
    if stack is not None:
        env.update(stack.env())
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / f"{name}.py"), "--quick"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (
        f"bench/{name}.py failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["benchmark"] == name
    assert result["quick"] is True
    assert isinstance(result["target_met"], bool)
    assert result["machine"]["cpus"]
    return result


@pytest.mark.parametrize("name", ["snapshot", "bulk_delete", "trim"])
def test_stack_benchmarks_print_a_json_result(
    name: str, local_stack: LocalStack, tmp_path: Path
) -> None:
    result = run_quick(name, local_stack, tmp_path)
    assert result["items"] > 0


@pytest.mark.spark
def test_orphan_diff_benchmark_prints_a_json_result(tmp_path: Path) -> None:
    result = run_quick("orphan_diff", None, tmp_path)
    assert result["orphan_ledgers"] > 0 and result["baseline_completed"]


def test_listing_benchmark_prints_a_json_result(tmp_path: Path) -> None:
    """Starts a SeaweedFS of its own on BENCH_DATA_DIR (its store is cached there)."""
    result = run_quick("listing", None, tmp_path)
    assert result["items"] > 0 and result["concurrent"]


@pytest.mark.airflow
@pytest.mark.spark
def test_orphan_cycle_benchmark_prints_a_json_result(
    local_stack: LocalStack, tmp_path: Path
) -> None:
    result = run_quick("orphan_cycle", local_stack, tmp_path, timeout=900)
    assert result["leaks_deleted"] > 0 and result["tasks"]


@pytest.mark.spark
def test_bk_scan_benchmark_prints_a_json_result(tmp_path: Path) -> None:
    """Starts a ZooKeeper of its own; each of its commands is a whole `ledgergc orphans`."""
    result = run_quick("bk_scan", None, tmp_path)
    assert result["items"] > 0 and result["runs"]["second"]["records_cached"] > 0


def test_bk_driver_steps_benchmark_prints_a_json_result(tmp_path: Path) -> None:
    """In one process: the references cut to parts and the listed ids checked, each
    beside its baseline."""
    result = run_quick("bk_driver_steps", None, tmp_path)
    assert result["items"] > 0 and set(result["steps"]) == {
        "cut",
        "cut_baseline",
        "check",
        "check_baseline",
    }


@pytest.mark.spark
def test_pulsar_metadata_benchmark_prints_a_json_result(tmp_path: Path) -> None:
    """Starts a ZooKeeper of its own; four whole `ledgergc orphans`, the source on and off."""
    result = run_quick("pulsar_metadata", None, tmp_path)
    assert result["items"] > 0 and result["runs"]["steady-on-0"]["pulsar_metadata_cost"]


@pytest.mark.spark
def test_offload_listing_benchmark_prints_a_json_result(tmp_path: Path) -> None:
    """Starts a ZooKeeper, fake-gcs-server and Azurite of its own; per store and size, a
    whole `ledgergc orphans` beside a user's paginated SDK listing."""
    result = run_quick("offload_listing", None, tmp_path, timeout=600)
    assert result["items"] > 0
    for store in ("gcs", "azure"):
        for size in ("big", "small"):
            command = result["stores"][store][size]["command"]
            assert command["ok"], f"{store} {size}: {command['error']}"
        # The bench checks each command's classes against its plan; the quick small size
        # has no deleted topic (one in every 20 managed ledgers), the big one does.
        assert result["stores"][store]["big"]["command"]["tiered"]["orphan_segments"] > 0
