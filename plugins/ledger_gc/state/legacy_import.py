"""The one-time import of a state dir written before the state store existed.

Such a dir holds ``orphans/registry.sqlite`` (the registry, schema version 1),
``audit.jsonl`` and ``trim/runs.jsonl`` / ``orphans/runs.jsonl`` (JSON lines). Each file
is imported in one transaction that also records it in ``ledgergc_imports``; a file
recorded there is never read again, so the import happens once even when several
processes open the store at the same moment (the transaction is serialised and checks the
record first). Once every file is in, the step itself is recorded there for the dir
(``done_marker``): later opens read that record alone, and look at no file of the dir
(``import_state_dir_once``). The files are left where they are: an operator can still read them, and
an older ledger-gc rolled back to still finds them (what it appends then is not imported).

A registry file that is not a readable SQLite database stops the import with the one-line
error of a damaged registry (``ledgergc orphans --reset-registry`` moves it aside); a
registry is imported only into a store whose registry is empty, since scan numbers of two
registries cannot be merged (otherwise it is recorded as skipped, and logged).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from ledger_gc.state import schema
from ledger_gc.state.run_rows import summary_row
from ledger_gc.state.store import (
    RESET_CONSEQUENCE,
    StateCorruptError,
    StateStore,
    StateVersionError,
)

log = logging.getLogger(__name__)

LEGACY_REGISTRY = Path("orphans") / "registry.sqlite"
LEGACY_AUDIT = Path("audit.jsonl")
LEGACY_RUNS = {"trim": Path("trim") / "runs.jsonl", "orphans": Path("orphans") / "runs.jsonl"}
LEGACY_REGISTRY_VERSION = 1
_AUDIT_COLUMNS = {c.name for c in schema.audit.columns} - {"id", "extra"}

# The imports this process has seen done: (store URL, ``done_marker``).
_done: set[tuple[str, str]] = set()
_done_lock = threading.Lock()


def legacy_files(state_dir: Path) -> list[Path]:
    """The files of an older ledger-gc in ``state_dir`` (those that exist)."""
    candidates = [LEGACY_REGISTRY, LEGACY_AUDIT, *LEGACY_RUNS.values()]
    return [state_dir / c for c in candidates if (state_dir / c).is_file()]


def import_state_dir_once(store: StateStore, state_dir: Path) -> None:
    """Import ``state_dir``'s old files into ``store``: a one-time migration step.

    The first open of a store with a state dir looks at the dir's files, imports those
    not imported yet (each with its own record), then records the step as done for that
    dir (``done_marker``); a dir without old files records nothing (its files may be
    copied in later). Every later open, in any process, reads that one record and
    neither looks at the dir again nor takes the store's write lock; within a process,
    not even the record is read twice. A step that failed (a damaged registry file) is
    not recorded, so the next open tries again. An older ledger-gc's files that appear
    in the dir after the step (a rollback's appends) are not imported, as before. The
    record names the dir's path, not the host: with a shared store (PostgreSQL), the
    first open with that path on any host is the step, so an upgrade opens it first
    where the old ledger-gc ran."""
    marker = done_marker(state_dir)
    key = (store.url, marker)
    with _done_lock:
        if key in _done:
            return
    # A dir with no old file yet is not a step done: the old version's files may be
    # copied in after the new version first opened it (a settings check, the API
    # server starting); until they come, an open looks at a few paths and writes nothing.
    if not _recorded(store, marker) and legacy_files(state_dir):
        imported = import_state_dir(store, state_dir)
        _record_done(store, marker, sum(imported.values()))
    with _done_lock:
        _done.add(key)


def done_marker(state_dir: Path) -> str:
    """The ``ledgergc_imports`` source that says ``state_dir``'s import step is done (a
    file's source is its path, which never starts so)."""
    return f"state-dir:{state_dir.resolve()}"


def forget_done() -> None:
    """Forget which imports this process has seen done (tests: a new process)."""
    with _done_lock:
        _done.clear()


def _recorded(store: StateStore, source: str) -> bool:
    from sqlalchemy import select

    with store.read() as conn:
        found = conn.execute(
            select(schema.imports.c.source).where(schema.imports.c.source == source)
        ).first()
    return found is not None


def _record_done(store: StateStore, marker: str, rows: int) -> None:
    from sqlalchemy import select

    with store.write() as conn:
        if conn.execute(
            select(schema.imports.c.source).where(schema.imports.c.source == marker)
        ).first():
            return  # another process finished the step meanwhile
        conn.execute(
            schema.imports.insert().values(
                source=marker,
                imported_ms=int(time.time() * 1000),
                rows=rows,
                note="the state dir's one-time import step is done: later opens skip it",
            )
        )


def import_state_dir(store: StateStore, state_dir: Path) -> dict[str, int]:
    """Import every old file not imported yet; returns rows imported per file."""
    imported: dict[str, int] = {}
    files: list[tuple[Path, Any]] = [(LEGACY_REGISTRY, _registry_rows), (LEGACY_AUDIT, _audit_rows)]
    for kind, relative in LEGACY_RUNS.items():
        files.append((relative, lambda conn, p, kind=kind: _run_rows(conn, p, kind)))
    for relative, rows_of in files:
        path = state_dir / relative
        if path.is_file():
            imported[str(path)] = _import_file(store, path, relative, rows_of)
    return {k: v for k, v in imported.items() if v}


def source_key(path: Path) -> str:
    return str(path.resolve())


def content_key(path: Path, relative: Path) -> str | None:
    """What names an old file wherever its dir is: its place in the dir and a digest, of
    the first line for a JSON-lines file (append-only: an old version's appends keep it,
    and were never imported), of the whole file for the registry (a database, rewritten
    in place). A state dir moved to another disk or mount path keeps it, so its files are
    not imported twice (the path key alone made a moved dir's audit records and run
    summaries come in a second time). None: an empty file."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        if relative == LEGACY_REGISTRY:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        else:
            digest.update(handle.readline(1 << 16))
    if path.stat().st_size == 0:
        return None
    return f"content:{relative.as_posix()}:{digest.hexdigest()}"


def _import_file(store: StateStore, path: Path, relative: Path, rows_of: Any) -> int:
    from sqlalchemy import select

    keys = [source_key(path)]
    content = content_key(path, relative)
    if content is not None:
        keys.append(content)
    with store.write() as conn:
        if conn.execute(
            select(schema.imports.c.source).where(schema.imports.c.source.in_(keys))
        ).first():
            return 0
        count, note = rows_of(conn, path)
        now = int(time.time() * 1000)
        conn.execute(
            schema.imports.insert(),
            [dict(source=key, imported_ms=now, rows=count, note=note) for key in keys],
        )
    log.info("imported %d rows of %s into the state store %s", count, path, store.display_url)
    return count


# --- the files ---------------------------------------------------------------------------


def _json_lines(path: Path) -> list[dict[str, Any]]:
    records = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue  # a torn line from a crashed writer
            if isinstance(value, dict):
                records.append(value)
    return records


def _audit_rows(conn: Any, path: Path) -> tuple[int, str | None]:
    rows = []
    for record in _json_lines(path):
        row = {k: record.get(k) for k in _AUDIT_COLUMNS}
        extra = {k: v for k, v in record.items() if k not in _AUDIT_COLUMNS}
        row.update(
            time_ms=int(record.get("time_ms") or 0),
            operation=str(record.get("operation") or "unknown"),
            target_class=str(record.get("target_class") or ""),
            ml_name=str(record.get("ml_name") or ""),
            prefix=str(record.get("prefix") or ""),
            objects=int(record.get("objects") or 0),
            bytes=int(record.get("bytes") or 0),
            reason=str(record.get("reason") or ""),
            run_id=str(record.get("run_id") or ""),
            # Records of versions before the write-ahead log had no status: written after
            # the delete, they say what was deleted.
            status=str(record.get("status") or "deleted"),
            recoverable=bool(record.get("recoverable")),
            extra=json.dumps(extra, sort_keys=True) if extra else None,
        )
        rows.append(row)
    if rows:
        conn.execute(schema.audit.insert(), rows)
    return len(rows), None


def _run_rows(conn: Any, path: Path, kind: str) -> tuple[int, str | None]:
    rows = [summary_row(kind, summary) for summary in _json_lines(path)]
    if rows:
        conn.execute(schema.runs.insert(), rows)
    return len(rows), None


def _registry_rows(conn: Any, path: Path) -> tuple[int, str | None]:
    from sqlalchemy import func, select

    try:
        source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise _damaged(path, exc) from None
    try:
        source.row_factory = sqlite3.Row
        try:
            version = source.execute("PRAGMA user_version").fetchone()[0]
            if version > LEGACY_REGISTRY_VERSION:
                raise StateVersionError(
                    f"the orphan registry {path} has schema version {version}, newer than "
                    "this ledger-gc understands; upgrade ledger-gc"
                )
            tables = {
                r[0] for r in source.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            if not {"orphans", "scans", "history"} <= tables:
                return 0, "no registry tables"
            orphans = [dict(r) for r in source.execute("SELECT * FROM orphans")]
            scans = [dict(r) for r in source.execute("SELECT * FROM scans ORDER BY number")]
            history = [dict(r) for r in source.execute("SELECT * FROM history ORDER BY id")]
        except sqlite3.DatabaseError as exc:
            raise _damaged(path, exc) from None
    finally:
        source.close()
    existing = conn.execute(select(func.count()).select_from(schema.scans)).scalar()
    if existing:
        log.warning(
            "not importing the orphan registry %s: the state store's registry already has "
            "%d scans (a registry's scan numbers cannot be merged into another's)",
            path,
            existing,
        )
        return 0, f"skipped: the store's registry already had {existing} scans"
    for row in history:
        row.pop("id", None)
    for table, rows in (
        (schema.orphans, orphans),
        (schema.scans, scans),
        (schema.history, history),
    ):
        if rows:
            conn.execute(table.insert(), rows)
    return len(orphans) + len(scans) + len(history), None


def _damaged(path: Path, exc: BaseException) -> StateCorruptError:
    return StateCorruptError(
        f"the orphan registry {path} is damaged ({' '.join(str(exc).split())}); nothing was "
        "read or deleted. Run `ledgergc orphans --reset-registry` to move it aside and start "
        f"a fresh registry ({RESET_CONSEQUENCE})"
    )
