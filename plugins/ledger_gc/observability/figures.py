"""The page's building blocks: figures that carry their exact value, and plain tables.

Shared by ``page`` and the sections it includes (``bookkeeper_section``). Every figure is
written raw into ``data-key``/``data-value`` attributes (``data-key`` is the figure's path
in the overview dict), so a test or a script can check the page against that dict
exactly while people read the rounded, human form.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape
from typing import Any

from ledger_gc.console import human_bytes
from ledger_gc.observability.timefmt import fmt_time

Path = tuple[str | int, ...]


def figure(path: Path, value: Any, text: str | None = None) -> str:
    """A number for people, with its exact value for machines (see the module doc).

    ``data-key`` is the figure's path in the overview as a JSON array (namespaces contain
    "/" and may contain ".", so no separator would do); ``data-value`` is the value as
    JSON (``null`` when unknown)."""
    shown = text if text is not None else ("-" if value is None else str(value))
    return (
        f'<span class="num" data-key="{escape(json.dumps(list(path)))}" '
        f'data-value="{escape(json.dumps(value))}">{escape(shown)}</span>'
    )


def bytes_figure(path: Path, value: int | None) -> str:
    """A byte count: human-readable on the page, exact in ``data-value``."""
    return figure(path, value, human_bytes(value))


def time_figure(path: Path, value: int | None) -> str:
    """A time (ms since the epoch): UTC on the page, exact in ``data-value``."""
    return figure(path, value, fmt_time(value))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> str:
    """A table of already-escaped cells; ``empty`` (escaped here) when it has no row."""
    if not rows:
        return f'<p class="muted">{escape(empty)}</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return wide(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def wide(html: str) -> str:
    """A block that may be wider than the window (a table of many columns, long keys):
    it scrolls sideways on its own, so the page never does."""
    return f'<div class="wide">{html}</div>'
