"""A damaged orphan registry (issue 11, item 6), through the installed ``ledgergc``.

Random bytes in ``<state_dir>/orphans/registry.sqlite`` (a bad disk) must stop the
cycle before anything is read or deleted, with one line that names the file and the fix,
and ``ledgergc orphans --reset-registry`` must move the file aside and start afresh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from demo_leaks import plant_leaks
from ledger_gc.config.settings import Settings
from ledger_gc.orphans.registry import registry_path

pytestmark = pytest.mark.spark

LEDGERGC = Path(sys.executable).parent / "ledgergc"
ML = "public/default/persistent/orders"


def _ledgergc(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **settings.to_env()}
    return subprocess.run(
        [str(LEDGERGC), *args], env=env, capture_output=True, text=True, timeout=300
    )


def test_a_corrupt_registry_is_one_line_exit_2_and_reset_starts_afresh(
    settings: Settings, store_kit: Any
) -> None:
    eager = settings.with_overrides(delete_enabled=True, grace_seconds=0, retention_seconds=0)
    store_kit.managed_ledger(ML, entries=20)
    plant_leaks(eager, ml_name=ML)
    before = store_kit.keys()
    path = registry_path(eager.state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(8192))

    for _ in range(2):  # every run says the same, and nothing changes
        broken = _ledgergc(eager, "orphans")
        lines = broken.stderr.strip().splitlines()
        assert broken.returncode == 2, broken.stderr
        assert len(lines) == 1, broken.stderr
        assert str(path) in lines[0] and "--reset-registry" in lines[0]
        assert "Traceback" not in broken.stderr + broken.stdout
        assert store_kit.keys() == before

    reset = _ledgergc(eager, "orphans", "--reset-registry")

    assert reset.returncode == 0, reset.stderr
    assert "grace window" in reset.stdout and str(path) in reset.stdout
    [aside] = [p for p in path.parent.iterdir() if p.name.startswith(path.name + ".corrupt-")]
    assert len(aside.read_bytes()) == 8192
    assert store_kit.keys() == before

    fresh = _ledgergc(eager, "orphans", "--dry-run", "--json")
    assert fresh.returncode == 0, fresh.stderr
    report = json.loads(fresh.stdout)
    assert report["status"] == "ok" and report["phases"]["new"]["count"] == 3
    assert store_kit.keys() == before


def test_a_damaged_state_store_file_is_one_line_exit_2_and_reset_moves_it_aside(
    settings: Settings, store_kit: Any
) -> None:
    from ledger_gc.state.url import STATE_FILE

    eager = settings.with_overrides(delete_enabled=True, grace_seconds=0, retention_seconds=0)
    store_kit.managed_ledger(ML, entries=20)
    plant_leaks(eager, ml_name=ML)
    before = store_kit.keys()
    path = eager.state_dir / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(8192))

    broken = _ledgergc(eager, "orphans")

    [line] = broken.stderr.strip().splitlines()
    assert broken.returncode == 2 and str(path) in line and "--reset-registry" in line
    assert store_kit.keys() == before
    reset = _ledgergc(eager, "orphans", "--reset-registry")
    assert reset.returncode == 0, reset.stderr
    assert f"{path}.corrupt-" in reset.stdout and "grace window" in reset.stdout
    assert _ledgergc(eager, "audit").returncode == 0  # a fresh, empty store


@pytest.mark.parametrize("fault", ["wrong password", "server down"])
def test_a_postgresql_store_it_cannot_use_is_one_line_exit_2_and_nothing_deleted(
    settings: Settings, store_kit: Any, postgres_server: Any, fault: str
) -> None:
    from local_stack.server_process import free_port

    url = (
        postgres_server.url(password="not-it")
        if fault == "wrong password"
        else f"postgresql+psycopg://postgres:not-it@127.0.0.1:{free_port()}/ledgergc"
    )
    eager = settings.with_overrides(
        delete_enabled=True, grace_seconds=0, retention_seconds=0, state_url=url
    )
    store_kit.managed_ledger(ML, entries=20)
    plant_leaks(eager, ml_name=ML)
    before = store_kit.keys()

    for command in (["orphans"], ["trim"], ["audit"]):
        result = _ledgergc(eager, *command)
        [line] = result.stderr.strip().splitlines()
        assert result.returncode == 2, result.stderr
        assert "postgres:***@127.0.0.1" in line and "LEDGERGC_STATE_URL" in line
        assert "not-it" not in result.stderr + result.stdout
        assert store_kit.keys() == before
