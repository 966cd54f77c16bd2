"""The state store (``ledger_gc.state``) on SQLite and PostgreSQL: migrations (matching the
schema, idempotent, safe when two processes start at once), the one-time import of an old
state dir, the audit log's filters and its write-ahead guarantee, ``ledgergc audit``, and
the one-line errors of a store that is damaged, down or refuses the password."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from ledger_gc import cli, run_log
from ledger_gc.audit import DELETED, DELETING, AuditLog, AuditRecord
from ledger_gc.config.settings import Settings
from ledger_gc.errors import AuditUnavailableError, ConfigError
from ledger_gc.orphans.registry import OrphanRegistry, registry_path
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.state import schema
from ledger_gc.state.legacy_import import LEGACY_AUDIT, LEGACY_RUNS
from ledger_gc.state.store import StateStore, StateUnavailableError
from ledger_gc.state.stores import forget_stores, open_store
from ledger_gc.state.url import check_state_url, masked

ML = "acme/prod/persistent/orders"


def record(run_id: str, status: str = DELETED, **changes: Any) -> AuditRecord:
    base: dict[str, Any] = dict(
        operation="orphan-removal",
        target_class="orphan-ledger",
        ml_name=ML,
        ledger_id=7,
        prefix=f"ledgers/{ML}/ledgers/00000000000000000007/",
        objects=2,
        bytes=300,
        reason="orphaned",
        run_id=run_id,
        time_ms=1_700_000_000_000,
        status=status,
    )
    return AuditRecord(**{**base, **changes})


# --- migrations -------------------------------------------------------------------------------


@pytest.mark.state_backends
def test_the_migrations_build_exactly_the_schema_the_code_uses(state_location: Any) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    store = open_store(state_location)
    store.check()
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": schema.VERSION_TABLE})
        differences = compare_metadata(context, schema.metadata)
    assert differences == []


def test_the_head_revision_the_code_expects_is_alembics_head() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from ledger_gc.state.store import MIGRATIONS_DIR

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    assert ScriptDirectory.from_config(config).get_current_head() == schema.HEAD_REVISION


def test_the_registry_table_has_a_column_for_every_field_of_an_entry() -> None:
    # A new RegistryEntry field needs a new migration (state/migrations/versions).
    assert {f.name for f in fields(RegistryEntry)} == {c.name for c in schema.orphans.columns}


_OPEN_AND_WRITE = """
import sys
from ledger_gc import run_log
run_log.append_run(sys.argv[1], "trim", {"run_id": sys.argv[2]})
"""


@pytest.mark.state_backends
def test_two_processes_opening_a_new_store_at_once_migrate_it_once(
    state_location: Any,
) -> None:
    location = str(state_location)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _OPEN_AND_WRITE, location, f"run-{i}"],
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    errors = [child.communicate(timeout=120)[1] for child in children]
    assert [child.returncode for child in children] == [0, 0, 0], errors
    store = StateStore(open_store(location).url)
    with store.read() as conn:
        versions = conn.exec_driver_sql(f"SELECT version_num FROM {schema.VERSION_TABLE}").all()
    assert versions == [(schema.HEAD_REVISION,)]
    assert sorted(r["run_id"] for r in run_log.read_runs(store, run_log.TRIM)) == [
        "run-0",
        "run-1",
        "run-2",
    ]


# --- the audit log ------------------------------------------------------------------------------


@pytest.mark.state_backends
def test_audit_records_read_back_as_written_and_filter_by_run_class_time_status(
    state_location: Any,
) -> None:
    log = AuditLog(state_location)
    log.append([record("r1", DELETING), record("r1"), record("r2", time_ms=1_800_000_000_000)])
    log.append(
        [
            record(
                "r3",
                target_class="ledger",
                operation="trim",
                recoverable=True,
                versioning="Enabled",
                noncurrent_expiration_days=3,
            )
        ]
    )

    assert [r["run_id"] for r in log.read()] == ["r1", "r1", "r2", "r3"]
    assert [r["status"] for r in log.read(run_id="r1")] == [DELETING, DELETED]
    assert [r["run_id"] for r in log.read(target_class="ledger")] == ["r3"]
    assert [r["run_id"] for r in log.read(since_ms=1_750_000_000_000)] == ["r2"]
    assert [r["run_id"] for r in log.deletions()] == ["r1", "r2", "r3"]
    assert [r["run_id"] for r in log.read(2)] == ["r2", "r3"]
    [trimmed] = log.read(run_id="r3")
    assert trimmed == {
        **json.loads(record("r3", target_class="ledger", operation="trim").to_json()),
        "recoverable": True,
        "versioning": "Enabled",
        "noncurrent_expiration_days": 3,
    }
    prefix = record("r1").prefix
    assert log.announced() == {
        ("orphan-ledger", ML, 7, prefix, None),
        ("ledger", ML, 7, prefix, None),
    }
    log.append([record("r4", DELETING, bucket="b1")])
    assert ("orphan-ledger", ML, 7, prefix, "b1") in log.announced()
    assert log.read(run_id="r4")[0]["bucket"] == "b1"


def test_an_audit_log_that_cannot_be_written_refuses_before_any_delete(tmp_path: Path) -> None:
    # What the delete path relies on: append raises, and then it deletes nothing.
    AuditLog(tmp_path).append([record("r1")])
    forget_stores()
    (tmp_path / "state.sqlite").write_bytes(b"\0" * 4096)  # the disk lost the store
    with pytest.raises(AuditUnavailableError, match="nothing was read or deleted"):
        AuditLog(tmp_path).append([record("r2", DELETING)])


# --- ledgergc audit -------------------------------------------------------------------------------


@pytest.mark.state_backends
def test_ledgergc_audit_prints_a_table_or_json_filtered(
    state_location: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    AuditLog(state_location).append(
        [record("r1", DELETING), record("r1"), record("r2", target_class="orphan-partition")]
    )
    monkeypatch.setenv(
        "LEDGERGC_STATE_DIR",
        str(state_location if isinstance(state_location, Path) else tmp_path / "state"),
    )
    if not isinstance(state_location, Path):
        monkeypatch.setenv("LEDGERGC_STATE_URL", state_location)

    assert cli.main(["audit", "--run", "r1"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["time", "(UTC)", "status"]
    assert [line.split()[2] for line in table[1:3]] == [DELETING, DELETED]
    assert table[-1] == "2 records; 1 deleted, 300 B freed"

    assert cli.main(["audit", "--class", "orphan-partition", "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == ["r2"]
    assert cli.main(["audit", "--since", "2030-01-01", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert cli.main(["audit", "--since", "soon"]) == 2
    assert "--since 'soon' is not a time" in capsys.readouterr().err


# --- importing an old state dir -------------------------------------------------------------------


def _old_state_dir(state_dir: Path) -> None:
    import sqlite3

    path = registry_path(state_dir)
    path.parent.mkdir(parents=True)
    with sqlite3.connect(path) as conn:
        conn.executescript(
            """
            CREATE TABLE orphans (prefix TEXT PRIMARY KEY, target_class TEXT NOT NULL,
              ml_name TEXT NOT NULL, ledger_id INTEGER, first_seen_ms INTEGER NOT NULL,
              last_seen_ms INTEGER NOT NULL, first_scan INTEGER NOT NULL,
              last_scan INTEGER NOT NULL, scans_seen INTEGER NOT NULL,
              objects INTEGER NOT NULL, bytes INTEGER NOT NULL, newest_ms INTEGER NOT NULL,
              attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT);
            CREATE TABLE scans (number INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE,
              recorded_ms INTEGER NOT NULL, result TEXT NOT NULL);
            CREATE TABLE history (id INTEGER PRIMARY KEY AUTOINCREMENT, time_ms INTEGER NOT NULL,
              run_id TEXT NOT NULL, scan INTEGER, prefix TEXT NOT NULL,
              target_class TEXT NOT NULL, ml_name TEXT NOT NULL, ledger_id INTEGER,
              event TEXT NOT NULL, reason TEXT NOT NULL, objects INTEGER NOT NULL,
              bytes INTEGER NOT NULL);
            INSERT INTO orphans VALUES ('p/7/', 'orphan-ledger', 'a/b/persistent/c', 7,
              1, 2, 1, 2, 2, 3, 300, 1, 0, NULL);
            INSERT INTO scans VALUES (1, 'o-1', 1, '{}'), (2, 'o-2', 2, '{"added": 0}');
            INSERT INTO history (time_ms, run_id, scan, prefix, target_class, ml_name,
              ledger_id, event, reason, objects, bytes)
              VALUES (1, 'o-1', 1, 'p/7/', 'orphan-ledger', 'a/b/persistent/c', 7,
              'registered', 'first seen', 3, 300);
            PRAGMA user_version=1;
            """
        )
    old = json.loads(record("t-1").to_json())
    del old["status"], old["recoverable"]  # a record of the version before write-ahead
    lines = [json.dumps({**old, "note": "kept"}), record("t-2", DELETING).to_json()]
    (state_dir / LEGACY_AUDIT).write_text("\n".join(lines) + '\n{"torn": ')
    for kind, relative in LEGACY_RUNS.items():
        (state_dir / relative).parent.mkdir(parents=True, exist_ok=True)
        (state_dir / relative).write_text(f'{{"run_id": "{kind}-1"}}\n{{"run_id": "{kind}-2"}}\n')


@pytest.mark.state_backends
def test_an_old_state_dir_is_imported_once(state_url: str | None, tmp_path: Path) -> None:
    state_dir = tmp_path / "old-state"
    _old_state_dir(state_dir)
    settings = Settings(state_dir=state_dir, state_url=state_url)

    for _ in range(2):  # a second process (caches forgotten) imports nothing again
        forget_stores()
        registry = OrphanRegistry(settings)
        assert list(registry.entries()) == ["p/7/"]
        latest = registry.latest_scan()
        assert latest is not None and (latest.number, latest.run_id) == (2, "o-2")
        assert [h["event"] for h in registry.history()] == ["registered"]
        audit = AuditLog(settings).read()
        assert [(r["run_id"], r["status"]) for r in audit] == [("t-1", DELETED), ("t-2", DELETING)]
        assert audit[0]["note"] == "kept" and audit[0]["recoverable"] is False
        assert [r["run_id"] for r in run_log.read_runs(settings, run_log.ORPHANS)] == [
            "orphans-1",
            "orphans-2",
        ]
        with open_store(settings).read() as conn:
            # Two records per file (its path, its content: content_key), one for the step.
            assert conn.execute(select(func.count()).select_from(schema.imports)).scalar() == 9
    # The next scan continues the imported numbering.
    with OrphanRegistry(settings).transaction() as txn:
        assert txn.record_scan("o-3", 3, {}) == 3


def _looks_in(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file-system look (``is_file``, ``exists``) at ``state_dir`` or below from now."""
    looked: list[Path] = []
    for name in ("is_file", "exists"):
        original = getattr(Path, name)

        def spy(path: Path, *args: Any, original: Any = original, **kwargs: Any) -> Any:
            if path == state_dir or state_dir in path.parents:
                looked.append(path)
            return original(path, *args, **kwargs)

        monkeypatch.setattr(Path, name, spy)
    return looked


@pytest.mark.state_backends
def test_the_old_state_dir_import_is_a_one_time_step(
    state_url: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: the import is a migration step, done once per store and state dir: a
    later open by another process reads one record, and neither looks at the dir's files
    again nor takes the store's write lock for them (a DAG task's open used to queue
    behind a running cycle's writes on PostgreSQL's advisory lock, once per old file)."""
    state_dir = tmp_path / "old-state"
    _old_state_dir(state_dir)
    settings = Settings(state_dir=state_dir, state_url=state_url)
    forget_stores()
    assert [r["run_id"] for r in run_log.read_runs(settings, run_log.TRIM)] == ["trim-1", "trim-2"]

    _another_process()
    store = open_store(Settings(state_dir=state_dir, state_url=state_url))
    store.ready()  # the schema check every open does anyway
    _another_process()
    looked = _looks_in(state_dir, monkeypatch)
    writes: list[str] = []
    monkeypatch.setattr(StateStore, "write", _counting(StateStore.write, writes))
    store = open_store(Settings(state_dir=state_dir, state_url=state_url))

    assert looked == [] and writes == []
    assert [r["run_id"] for r in run_log.read_runs(settings, run_log.TRIM)] == ["trim-1", "trim-2"]
    assert [r["run_id"] for r in AuditLog(settings).read()] == ["t-1", "t-2"]


def _another_process() -> None:
    """Forget what this process opened and imported, as a new process starts."""
    forget_stores()


def _counting(method: Any, calls: list[str]) -> Any:
    def counted(self: StateStore, *args: Any, **kwargs: Any) -> Any:
        calls.append(method.__name__)
        return method(self, *args, **kwargs)

    return counted


# --- stores that cannot be used ---------------------------------------------------------


def test_a_wrong_password_is_one_line_naming_the_url_without_the_password(
    postgres_server: Any,
) -> None:
    url = postgres_server.url(password="not-the-password")
    with pytest.raises(StateUnavailableError) as failure:
        OrphanRegistry(url).check()
    message = str(failure.value)
    assert "\n" not in message and "not-the-password" not in message
    assert masked(url) in message and "LEDGERGC_STATE_URL" in message
    assert "password authentication failed" in message


def test_a_server_that_is_down_is_one_line_and_no_audit_append(postgres_server: Any) -> None:
    from local_stack.server_process import free_port

    url = f"postgresql+psycopg://gc:secret@127.0.0.1:{free_port()}/ledgergc"
    with pytest.raises(StateUnavailableError, match="cannot be used") as failure:
        OrphanRegistry(url).entries()
    assert "secret" not in str(failure.value) and "\n" not in str(failure.value)
    with pytest.raises(AuditUnavailableError, match=r"gc:\*\*\*@127\.0\.0\.1"):
        AuditLog(url).append([record("r1", DELETING)])


def test_state_urls_are_checked_as_settings(tmp_path: Path) -> None:
    assert check_state_url("postgresql://u:p@db/gc") == "postgresql+psycopg://u:p@db/gc"
    assert Settings.from_env({"LEDGERGC_STATE_URL": "sqlite:////x/s.db"}).state_url == (
        "sqlite:////x/s.db"
    )
    for bad, says in [
        ("not a url", "is not a SQLAlchemy URL"),
        ("mysql://u:p@db/gc", "mysql is not supported"),
        ("postgresql+psycopg2://u:secret@db/gc", "use postgresql+psycopg://"),
        ("sqlite://", "names no file"),
    ]:
        with pytest.raises(ConfigError, match="LEDGERGC_STATE_URL") as failure:
            Settings(state_url=bad)
        assert says in str(failure.value) and "secret" not in str(failure.value)
    settings = Settings(state_url="postgresql://u:p@db/gc", state_dir=tmp_path)
    assert Settings.from_env(settings.to_env()) == settings


@pytest.mark.state_backends
def test_a_moved_state_dir_is_not_imported_again(state_url: str | None, tmp_path: Path) -> None:
    """Issue 33's review: the one-time step after the state dir moved (a new disk, a
    new mount path; with the default SQLite store, the store moves with it). The step's
    record and each file's named the dir's absolute path, so the moved dir looked new and
    every old audit record and run summary was imported a second time."""
    state_dir = tmp_path / "old-state"
    _old_state_dir(state_dir)
    forget_stores()
    settings = Settings(state_dir=state_dir, state_url=state_url)
    assert [r["run_id"] for r in AuditLog(settings).read()] == ["t-1", "t-2"]

    moved = tmp_path / "new-disk" / "state"
    moved.parent.mkdir()
    state_dir.rename(moved)
    _another_process()
    settings = Settings(state_dir=moved, state_url=state_url)

    assert [r["run_id"] for r in AuditLog(settings).read()] == ["t-1", "t-2"]
    assert [r["run_id"] for r in run_log.read_runs(settings, run_log.TRIM)] == ["trim-1", "trim-2"]


@pytest.mark.state_backends
def test_old_files_put_in_a_state_dir_opened_before_are_imported(
    state_url: str | None, tmp_path: Path
) -> None:
    """Issue 33's review: the upgrade as an operator may do it: the new version opens
    its state dir first (``ledgergc status`` to check the settings, the API server
    starting), then the old version's files are copied in. That first open found no old
    file, yet recorded the one-time step as done: the copied registry, audit log and run
    summaries were never imported, and nothing said so."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    forget_stores()
    settings = Settings(state_dir=state_dir, state_url=state_url)
    assert AuditLog(settings).read() == []  # the first open: nothing to import yet

    _old_state_dir(state_dir)  # the old version's files, copied in
    _another_process()

    assert [r["run_id"] for r in AuditLog(settings).read()] == ["t-1", "t-2"]
    assert list(OrphanRegistry(settings).entries()) == ["p/7/"]
