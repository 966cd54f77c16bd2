"""The "Ledger GC" page: the overview as one self-contained HTML document.

Rendered on the server from ``build_overview``'s dict, with inline CSS and SVG charts (one
small inline script only sorts and filters the registered orphans), so it needs nothing
from the network and shows the same numbers as the JSON
endpoint, the metrics and ``ledgergc status --json``. Every figure is also written raw
into ``data-key``/``data-value`` attributes (``data-key`` is the figure's path in the
overview dict), so a test or a script can check the page against that dict exactly
while people read the rounded, human form.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from ledger_gc.console import human_bytes
from ledger_gc.observability.bookkeeper_section import bookkeeper_section, has_bookkeeper
from ledger_gc.observability.charts import Series, line_chart, run_labels
from ledger_gc.observability.figures import bytes_figure, figure, table, time_figure
from ledger_gc.observability.pulsar_metadata_section import pulsar_metadata_section
from ledger_gc.observability.registered_table import registered_section
from ledger_gc.observability.runs import (
    CLASS_TITLES,
    CLASSES,
    MAIN_PHASES,
    PHASE_CLASSES,
    PHASE_TITLES,
    PHASES,
    SEGMENT,
)
from ledger_gc.observability.timefmt import fmt_age, fmt_time

PHASE_COLORS = {
    "registered": "#4c78a8",
    "waiting_grace": "#f58518",
    "waiting_retention": "#b279a2",
    "deleted": "#54a24b",
}

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
  margin:0;padding:16px 20px;color:#1a202c;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:22px 0 8px;border-bottom:1px solid
  #e2e8f0;padding-bottom:4px}h3{font-size:14px;margin:12px 0 6px}
.muted{color:#718096}.warn{color:#b7791f}.bad{color:#c53030}.ok{color:#2f855a}
.tiles{display:flex;flex-wrap:wrap;gap:10px}.tile{border:1px solid #e2e8f0;border-radius:6px;
  padding:8px 12px;min-width:150px}.tile .big{font-size:24px;font-weight:600}
.tile .label{font-size:12px;color:#4a5568;text-transform:uppercase;letter-spacing:.03em}
table{border-collapse:collapse;margin:4px 0 8px}th,td{border-bottom:1px solid #edf2f7;
  padding:4px 10px;text-align:left;vertical-align:top}th{font-size:12px;color:#4a5568}
td.n{text-align:right;font-variant-numeric:tabular-nums}
#registered-orphans th{cursor:pointer}#registered-orphans th[aria-sort=ascending]::after{
  content:" \\25B2"}#registered-orphans th[aria-sort=descending]::after{content:" \\25BC"}
.charts{display:flex;flex-wrap:wrap;gap:16px}.chart .grid{stroke:#edf2f7}
.chart .axis,.chart .legend{font-size:11px;fill:#4a5568}
code{font-size:12px}
svg.chart{max-width:100%;height:auto}.wide{max-width:100%;overflow-x:auto}
td code{overflow-wrap:break-word}
"""


def _run_line(header: Mapping[str, Any] | None, what: str) -> str:
    if not header:
        return f'<p class="muted">No {escape(what)} has run yet.</p>'
    flags = " (dry run)" if header.get("dry_run") else ""
    css = "ok" if header.get("succeeded") else "bad"
    return (
        f"<p>Latest {escape(what)}: <code>{escape(header.get('run_id') or '?')}</code> at "
        f"{escape(fmt_time(header.get('time_ms')))}{escape(flags)}, outcome "
        f'<span class="{css}">{escape(header.get("outcome") or "-")}</span></p>'
    )


def _applies(orphans: Mapping[str, Any], cls: str) -> bool:
    """Whether the store has the storage of an S3 class (as its latest cycle ran), or
    the figures of one anyway (entries registered before a bucket setting changed)."""
    sources = orphans.get("sources")
    needs = "tiered" if cls == SEGMENT else "blocks"
    return (
        sources is None
        or bool(sources.get(needs))
        or any(orphans["phases"][p][cls]["count"] for p in PHASES)
    )


def _trim_applies(overview: Mapping[str, Any]) -> bool:
    """The trim works on the managed ledgers' blocks (``LEDGERGC_BUCKET``): on a Pulsar
    cluster's store (no bucket; Pulsar trims its BookKeeper ledgers itself) that never
    ran a trim, the trim's section would show nothing but zeros and empty charts."""
    trim, sources = overview["trim"], overview["orphans"].get("sources")
    return (
        trim["latest"] is not None
        or bool(trim["backlog"]["pending_markers"])
        or sources is None
        or bool(sources.get("blocks"))
    )


def _orphans_section(orphans: Mapping[str, Any]) -> str:
    totals = orphans["phase_totals"]
    tiles = "".join(
        f'<div class="tile"><div class="label">{escape(PHASE_TITLES[p])}</div>'
        f'<div class="big">{figure(("orphans", "phase_totals", p, "count"), totals[p]["count"])}'
        f"</div><div>{bytes_figure(('orphans', 'phase_totals', p, 'bytes'), totals[p]['bytes'])}"
        "</div></div>"
        for p in MAIN_PHASES
    )
    classes = [c for c in CLASSES if _applies(orphans, c)]
    rows = []
    for p in PHASES:
        cells = [escape(PHASE_TITLES[p])]
        for c in classes:
            leaf = orphans["phases"][p][c]
            cells.append(figure(("orphans", "phases", p, c, "count"), leaf["count"]))
            cells.append(bytes_figure(("orphans", "phases", p, c, "bytes"), leaf["bytes"]))
        rows.append(cells)
    headers = ["Phase"] + [f"{CLASS_TITLES[c]} {m}" for c in classes for m in ("count", "size")]
    by_class = (
        table(headers, rows, "")
        if classes
        else '<p class="muted">The latest cycle had no bucket of ledger blocks or tiered '
        "storage to scan (LEDGERGC_BUCKET and LEDGERGC_OFFLOAD_BUCKET empty).</p>"
    )
    trend = orphans["trend"]
    labels = run_labels([point["time_ms"] for point in trend])
    charts = "".join(
        line_chart(
            title,
            labels,
            [
                Series(PHASE_TITLES[p], PHASE_COLORS[p], [pt["phases"][p][measure] for pt in trend])
                for p in MAIN_PHASES
            ],
            fmt,
        )
        for title, measure, fmt in (
            ("Orphans per phase (count)", "count", lambda v: f"{v:g}"),
            ("Orphans per phase (bytes)", "bytes", lambda v: human_bytes(int(v))),
        )
    )
    ns_rows = [
        [escape(ns), escape(CLASS_TITLES[c])]
        + [
            figure(("orphans", "namespaces", ns, p, c, "count"), phases[p][c]["count"])
            + " · "
            + bytes_figure(("orphans", "namespaces", ns, p, c, "bytes"), phases[p][c]["bytes"])
            for p in MAIN_PHASES
        ]
        for ns, phases in orphans["namespaces"].items()
        for c in PHASE_CLASSES
        # Namespaces with data but no orphan of this class in these phases: not news.
        if any(phases[p][c]["count"] for p in MAIN_PHASES)
    ]
    ns_headers = ["Namespace", "Class"] + [PHASE_TITLES[p] for p in MAIN_PHASES]
    refusals = [
        [
            escape(fmt_time(r["time_ms"])),
            f"<code>{escape(r['run_id'])}</code>",
            escape(r["guard"] or "-"),
            escape(r["reason"]),
            "forced past it: the cycle went on"
            if r["forced"]
            else "cycle stopped: nothing registered or deleted",
        ]
        for r in orphans["refusals"]
    ]
    return (
        '<h2 id="orphans">Orphans</h2>'
        + _run_line(orphans["latest"], "orphan cycle")
        + f'<div class="tiles">{tiles}</div>'
        + by_class
        + (
            '<p class="muted">The tiles and trends count every source; BookKeeper\'s '
            'ledgers per phase are in <a href="#bookkeeper">their section</a>.</p>'
            if has_bookkeeper(orphans)
            else ""
        )
        + _trend(f"Trend over the last {len(trend)} cycles", charts, trend, "No cycle has run yet.")
        + "<h3>Per namespace (latest cycle)</h3>"
        + table(ns_headers, ns_rows, "No orphan in any namespace in the latest cycle.")
        + '<h3 id="refusals">Safety guard refusals (recent cycles)</h3>'
        + table(
            ["Time", "Run", "Guard", "Reason", "Effect"],
            refusals,
            "No safety guard refused a recent cycle.",
        )
    )


def _trend(title: str, charts: str, trend: list[Any], none: str) -> str:
    """Trend charts, or one line when there is no run to draw."""
    if not trend:
        return f'<p class="muted">{escape(none)}</p>'
    return f'<h3>{escape(title)}</h3><div class="charts">{charts}</div>'


def _trim_section(trim: Mapping[str, Any], applies: bool) -> str:
    if not applies:
        return (
            '<h2 id="trim">Trim backlog</h2><p class="muted">No trim has run against this '
            "store, and its latest orphan cycle had no bucket of ledger blocks "
            "(LEDGERGC_BUCKET empty): the trim deletes consumed ledgers' blocks there. A "
            "Pulsar cluster trims its BookKeeper ledgers itself.</p>"
        )
    backlog = trim["backlog"]
    source = {
        "live": "live from ZooKeeper",
        "last_run": "as the latest trim run left it (live metadata not read)",
        "none": "no data yet",
    }.get(backlog["source"], backlog["source"])
    live_error = backlog.get("live_error")
    warning = (
        f'<p class="warn">Live metadata unavailable: {escape(live_error)}</p>' if live_error else ""
    )
    key = ("trim", "backlog")
    tiles = (
        '<div class="tiles">'
        f'<div class="tile"><div class="label">Pending markers</div><div class="big">'
        f"{figure((*key, 'pending_markers'), backlog['pending_markers'])}</div>"
        f"<div>{bytes_figure((*key, 'pending_bytes'), backlog['pending_bytes'])}</div></div>"
        f'<div class="tile"><div class="label">Oldest marker</div><div class="big">'
        f"{escape(fmt_age(backlog['oldest_age_seconds']))}</div><div>marked "
        f"{time_figure((*key, 'oldest_marked_at_ms'), backlog['oldest_marked_at_ms'])}"
        "</div></div></div>"
    )
    errors = [
        [
            escape(str(e.get("ml") or "-")),
            escape("-" if e.get("ledger_id") is None else str(e["ledger_id"])),
            escape(e["error"]),
            escape("-" if e.get("attempts") is None else str(e["attempts"])),
            escape(e.get("run_id") or "live marker"),
        ]
        for e in trim["last_errors"]
    ]
    trend = trim["trend"]
    labels = run_labels([point["time_ms"] for point in trend])
    chart = line_chart(
        "Trim: bytes reclaimed per run",
        labels,
        [Series("Reclaimed", "#54a24b", [pt["bytes_reclaimed"] for pt in trend])],
        lambda v: human_bytes(int(v)),
    ) + line_chart(
        "Trim: markers pending after each run",
        labels,
        [Series("Pending markers", "#e45756", [pt["markers_pending"] for pt in trend])],
    )
    return (
        '<h2 id="trim">Trim backlog</h2>'
        + _run_line(trim["latest"], "trim run")
        + f'<p class="muted">Backlog {escape(source)}.</p>'
        + warning
        + tiles
        + "<h3>Last errors</h3>"
        + table(["Managed ledger", "Ledger", "Error", "Attempts", "Run"], errors, "No errors.")
        + _trend(f"Trend over the last {len(trend)} runs", chart, trend, "No trim run yet.")
    )


def _deletions_section(deletions: Mapping[str, Any]) -> str:
    rows = []
    for i, record in enumerate(deletions["recent"]):
        what = record.get("ml_name") or record.get("prefix") or "-"
        if record.get("ledger_id") is not None:
            what = f"{what} ledger {record['ledger_id']}"
        rows.append(
            [
                escape(fmt_time(record.get("time_ms"))),
                escape(str(record.get("operation") or "-")),
                escape(str(record.get("target_class") or "-")),
                escape(what),
                bytes_figure(("deletions", "recent", i, "bytes"), record.get("bytes")),
                f"<code>{escape(str(record.get('run_id') or '-'))}</code>",
                escape(str(record.get("reason") or "")),
            ]
        )
    totals = " · ".join(
        f"{escape(op)}: {bytes_figure(('deletions', 'reclaimed_bytes', op), value)} in "
        f"{figure(('deletions', 'deleted_units', op), deletions['deleted_units'].get(op, 0))}"
        " units"
        for op, value in deletions["reclaimed_bytes"].items()
    )
    return (
        '<h2 id="deletions">Last deletions (audit log)</h2>'
        + f"<p>Reclaimed in total: {totals}</p>"
        + table(
            ["Time", "Operation", "Class", "What", "Size", "Run", "Reason"],
            rows,
            "Nothing deleted yet.",
        )
    )


def _last_success_section(last_success: Mapping[str, Any], now_ms: int) -> str:
    rows = []
    for job, last in sorted(last_success.items()):
        when = last.get("time_ms") if last else None
        age = None if not when else (now_ms - when) / 1000
        rows.append(
            [
                escape(job),
                # No run yet: no figure, whose path would lead nowhere in the overview.
                time_figure(("last_success", job, "time_ms"), when) if last else "-",
                escape("never" if age is None else fmt_age(age) + ("" if age < 0 else " ago")),
                f"<code>{escape(last['run_id'])}</code>" if last else "-",
            ]
        )
    return '<h2 id="runs">Last successful runs</h2>' + table(
        ["Job", "Finished", "Age", "Run"], rows, ""
    )


def render_page(
    overview: Mapping[str, Any],
    *,
    registered: Mapping[str, Any] | None = None,
    refresh_seconds: int = 60,
) -> str:
    """The whole page for an overview from ``build_overview``, with the table of
    registered orphans when ``registered`` (``registered.registered_orphans``) is given."""
    now = overview["generated_at_ms"]
    body = (
        "<h1>Ledger GC</h1>"
        f'<p class="muted">State store <code>{escape(overview.get("state_url") or "")}</code> · '
        f"generated {escape(fmt_time(now))} · refreshes every {refresh_seconds} s · "
        '<a href="api/overview">JSON</a> · <a href="metrics">metrics</a></p>'
        + _orphans_section(overview["orphans"])
        + bookkeeper_section(overview["orphans"])
        + pulsar_metadata_section(overview["orphans"])
        + (registered_section(registered) if registered is not None else "")
        + _trim_section(overview["trim"], _trim_applies(overview))
        + _deletions_section(overview["deletions"])
        + _last_success_section(overview["last_success"], now)
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{refresh_seconds}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Ledger GC</title><style>{_CSS}</style></head>"
        f"<body>{body}</body></html>"
    )
