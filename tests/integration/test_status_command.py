"""`ledgergc status --json`, the installed console command, against the local stack; its
overview read from the state store (SQLite and PostgreSQL), and a store it cannot use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ledger_gc import run_log
from ledger_gc.audit import AuditLog, AuditRecord
from ledger_gc.config.edge import block_store, zk_endpoint
from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.state.stores import open_store
from ledger_gc.storage.s3 import LedgerStorage

LEDGERGC = Path(sys.executable).parent / "ledgergc"


def run_ledgergc(settings, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "LEDGERGC_ZK_HOSTS": settings.zk_hosts,
        "LEDGERGC_S3_ENDPOINT": settings.s3_endpoint or "",
        "LEDGERGC_BUCKET": settings.bucket,
        "LEDGERGC_PREFIX": settings.prefix,
        "LEDGERGC_STATE_DIR": str(settings.state_dir),
        "LEDGERGC_ZK_TIMEOUT_SECONDS": str(settings.zk_timeout_seconds),
        "LEDGERGC_STATE_URL": settings.state_url or "",
    }
    return subprocess.run(
        [str(LEDGERGC), *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_status_json_lists_managed_ledgers_ledgers_cursors_and_bytes(settings):
    with MetadataStore.open(zk_endpoint(settings)) as store:
        storage = LedgerStorage(block_store(settings))
        for topic, count in (("a", 5), ("b", 2)):
            ml = ManagedLedger.open(
                f"acme/prod/persistent/{topic}",
                store,
                storage,
                ManagedLedgerConfig(max_entries_per_ledger=2),
            )
            ml.add_entries([b"0123456789"] * count)
            ml.open_cursor("sub", "earliest")
            ml.close()
    open_store(settings).ready()  # the state store a first run creates

    result = run_ledgergc(settings, "status", "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    names = [ml["name"] for ml in status["managed_ledgers"]]
    assert names == ["acme/prod/persistent/a", "acme/prod/persistent/b"]
    a = status["managed_ledgers"][0]
    assert sum(ledger["entries"] for ledger in a["ledgers"]) == 5
    assert a["metadata_bytes"] == 50
    assert a["storage_bytes"] > 50  # blocks carry headers, checksums and an index
    assert [c["name"] for c in a["cursors"]] == ["sub"]
    assert status["totals"]["managed_ledgers"] == 2
    assert status["totals"]["pending_markers"] == 0


def test_status_with_zookeeper_down_is_a_clear_error(settings):
    broken = settings.with_overrides(zk_address="127.0.0.1:1", zk_timeout_seconds=2.0)
    result = run_ledgergc(broken, "status", "--json")  # a new install: no state store yet
    assert result.returncode == 2
    assert "unreachable" in json.loads(result.stdout)["error"]
    assert "127.0.0.1:1" in result.stderr


@pytest.mark.state_backends
def test_status_shows_the_audit_log_and_runs_of_the_state_store(settings):
    AuditLog(settings).append(
        [
            AuditRecord(
                "trim",
                "ledger",
                "a/b/persistent/c",
                3,
                "p/",
                2,
                4096,
                "consumed",
                "t-1",
                status=status,
            )
            for status in ("deleting", "deleted")
        ]
    )
    run_log.append_run(settings, run_log.TRIM, {"run_id": "t-1", "status": "ok"})

    result = run_ledgergc(settings, "status", "--json", "--metadata-only")

    assert result.returncode == 0, result.stderr
    overview = json.loads(result.stdout)["overview"]
    assert overview["deletions"]["reclaimed_bytes"]["trim"] == 4096
    assert [r["run_id"] for r in overview["deletions"]["recent"]] == ["t-1"]
    assert overview["trim"]["latest"]["run_id"] == "t-1"
    if settings.state_url:
        assert overview["state_url"].startswith("postgresql+psycopg://postgres:***@")


def test_status_with_a_state_store_it_cannot_use_is_one_line_exit_2(settings, postgres_server):
    broken = settings.with_overrides(state_url=postgres_server.url(password="wrong"))

    result = run_ledgergc(broken, "status", "--metadata-only")

    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "postgres:***@127.0.0.1" in line and "LEDGERGC_STATE_URL" in line
    assert "wrong" not in line and "Traceback" not in result.stderr


#: The commands that only read the state store (``ledgergc orphans --list`` included).
READING_COMMANDS = [
    ["status"],
    ["status", "--metadata-only", "--json"],
    ["audit"],
    ["audit", "--json"],
    ["orphans", "--list"],
    ["restore", "--run", "some-run", "--dry-run"],
]


@pytest.mark.state_backends
@pytest.mark.parametrize("command", READING_COMMANDS, ids=" ".join)
def test_a_reading_command_refuses_a_state_store_that_does_not_exist(settings, command):
    # A mistyped LEDGERGC_STATE_DIR (or a PostgreSQL database no ledger-gc ever wrote)
    # must not read as an empty store: "no audit records match", exit 0, was a lie.
    typo = settings.with_overrides(state_dir=settings.state_dir.parent / "sttae")

    result = run_ledgergc(typo, *command)

    assert result.returncode == 2, result.stdout + result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("ledgergc: error: the state store ") and "does not exist" in line
    if settings.state_url:
        assert "postgres:***@127.0.0.1" in line and "LEDGERGC_STATE_URL" in line
    else:
        assert f"LEDGERGC_STATE_DIR={typo.state_dir}" in line
    assert "ledgergc trim" in line and "ledgergc orphans" in line  # what creates it
    assert not typo.state_dir.exists()  # and it is not created by reading it


@pytest.mark.state_backends
def test_a_writing_command_still_creates_the_state_store(settings):
    trimmed = run_ledgergc(settings, "trim", "--dry-run")
    assert trimmed.returncode == 0, trimmed.stderr

    listed = run_ledgergc(settings, "audit")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.strip() == "no audit records match"


def test_audit_refuses_a_class_it_does_not_know_and_lists_the_known_ones(settings):
    run_log.append_run(settings, run_log.TRIM, {"run_id": "t-1", "status": "ok"})

    result = run_ledgergc(settings, "audit", "--class", "orphan-ledgers")

    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "--class 'orphan-ledgers'" in line
    known = ("ledger", "offloaded-ledger", "orphan-ledger", "orphan-segment", "bk-orphan-ledger")
    for name in known:
        assert name in line
    assert run_ledgergc(settings, "audit", "--class", "orphan-ledger").returncode == 0
