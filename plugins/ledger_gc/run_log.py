"""Summaries of past runs (trim, orphan cycle), one row per run in the state store.

The trim and the orphan cycle append a summary when they finish (with the guards that
refused it, if any); ``ledgergc status``, the metrics and the Airflow page read them to
show trends and last-run times without touching ZooKeeper or S3. Summaries are JSON
objects whose shape belongs to the module that writes them (``observability/runs.py``
reads them defensively).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ledger_gc.state import schema
from ledger_gc.state.run_rows import summary_row
from ledger_gc.state.stores import open_store

if TYPE_CHECKING:
    from ledger_gc.state.store import StateLocation

TRIM = "trim"
ORPHANS = "orphans"
# How many summaries ``last_matching`` reads per query, newest first.
_PAGE = 50


def append_run(location: StateLocation, kind: str, summary: dict[str, Any]) -> None:
    """Commit one summary (one transaction)."""
    with open_store(location).write() as conn:
        conn.execute(schema.runs.insert().values(**summary_row(kind, summary)))


def read_runs(location: StateLocation, kind: str, limit: int | None = None) -> list[dict[str, Any]]:
    """Summaries oldest first (the last ``limit`` when given)."""
    if limit is not None and limit <= 0:
        return []
    summaries = list(_newest_first(location, kind, limit or None))
    return summaries[::-1]


def last_matching(
    location: StateLocation, kind: str, predicate: Callable[[dict[str, Any]], bool]
) -> dict[str, Any] | None:
    """The newest summary for which ``predicate`` holds (e.g. the last successful run);
    reads newest first, a page at a time, so a long streak of failures costs more
    queries, not a whole-table read per view."""
    for summary in _newest_first(location, kind, None):
        if predicate(summary):
            return summary
    return None


def _newest_first(
    location: StateLocation, kind: str, limit: int | None
) -> Iterator[dict[str, Any]]:
    from sqlalchemy import select

    table = schema.runs
    store = open_store(location)
    before: int | None = None
    remaining = limit
    while remaining is None or remaining > 0:
        page = _PAGE if remaining is None else min(_PAGE, remaining)
        query = select(table.c.id, table.c.summary).where(table.c.kind == kind)
        if before is not None:
            query = query.where(table.c.id < before)
        query = query.order_by(table.c.id.desc()).limit(page)
        with store.read() as conn:
            rows = conn.execute(query).all()
        for row_id, text in rows:
            before = row_id
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                yield value
        if remaining is not None:
            remaining -= len(rows)
        if len(rows) < page:
            return
