"""Faults of the state store that a test can switch on and off: an audit log that refuses
every new record (as a full disk or a revoked grant would), the rest of the store intact."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text

from ledger_gc.config.settings import Settings
from ledger_gc.state.stores import open_store

_SQLITE = [
    "CREATE TRIGGER ledgergc_test_block_audit BEFORE INSERT ON ledgergc_audit "
    "BEGIN SELECT RAISE(ABORT, 'audit log refused by the test'); END",
]
_SQLITE_UNDO = ["DROP TRIGGER ledgergc_test_block_audit"]
_POSTGRES = [
    "CREATE FUNCTION ledgergc_test_block_audit() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN RAISE EXCEPTION 'audit log refused by the test'; END $$",
    "CREATE TRIGGER ledgergc_test_block_audit BEFORE INSERT ON ledgergc_audit "
    "FOR EACH ROW EXECUTE FUNCTION ledgergc_test_block_audit()",
]
_POSTGRES_UNDO = [
    "DROP TRIGGER ledgergc_test_block_audit ON ledgergc_audit",
    "DROP FUNCTION ledgergc_test_block_audit()",
]


def _run(settings: Settings, statements: list[str]) -> None:
    with open_store(settings).write() as conn:
        for statement in statements:
            conn.execute(text(statement))


def block_audit(settings: Settings) -> None:
    store = open_store(settings)
    store.check()
    _run(settings, _SQLITE if store.dialect == "sqlite" else _POSTGRES)


def unblock_audit(settings: Settings) -> None:
    _run(settings, _SQLITE_UNDO if open_store(settings).dialect == "sqlite" else _POSTGRES_UNDO)


@contextmanager
def audit_refused(settings: Settings) -> Iterator[None]:
    """Every audit append fails inside the block; the registry and run log still work."""
    block_audit(settings)
    try:
        yield
    finally:
        unblock_audit(settings)
