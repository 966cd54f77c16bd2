"""The page's table of registered orphans: what will be deleted, and when.

Rendered from ``registered.registered_orphans`` (the same dict as ``ledgergc orphans
--list --json`` and the ``api/orphans`` endpoint). Every cell carries its raw value in
``data-sort``, which the page's one small script uses to sort by any column; a filter box
hides the rows that do not contain its text (kept in the URL's fragment, so the page's
refresh keeps it). Without the script the table still reads, soonest deletable first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import quote

from ledger_gc.console import human_bytes
from ledger_gc.observability.figures import wide
from ledger_gc.observability.registered import ORPHAN_DAG_ID, dag_run_id
from ledger_gc.observability.timefmt import fmt_time
from ledger_gc.rules.bookkeeper.classify import znode_of_target
from ledger_gc.rules.bookkeeper.records import BYTES_MEANING
from ledger_gc.rules.pulsar_metadata.classes import parse_target

#: How a Pulsar-metadata leftover's store reads in its row.
STORE_TITLES = {"local": "local store", "config": "configuration store"}

#: Rows on the page; the rest are in ``api/orphans`` (and ``ledgergc orphans --list``).
MAX_ROWS = 1000

HEADERS = (
    "Class",
    "Namespace",
    "Prefix",
    "Objects",
    "Size",
    "First seen",
    "Scans seen",
    "Deletable from",
    "Waits for",
    "Runs",
)

SCRIPT = """
(function () {
  var table = document.getElementById("registered-orphans");
  var box = document.getElementById("orphan-filter");
  if (!table || !box) return;
  var body = table.tBodies[0];
  function filter() {
    var text = box.value.toLowerCase();
    Array.prototype.forEach.call(body.rows, function (row) {
      row.hidden = text !== "" && row.textContent.toLowerCase().indexOf(text) < 0;
    });
    history.replaceState(null, "", text ? "#filter=" + encodeURIComponent(text) : "#");
  }
  var hash = location.hash.match(/^#filter=(.*)$/);
  if (hash) { box.value = decodeURIComponent(hash[1]); filter(); }
  box.addEventListener("input", filter);
  Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, column) {
    th.addEventListener("click", function () {
      var up = th.getAttribute("aria-sort") !== "ascending";
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (other) {
        other.removeAttribute("aria-sort");
      });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[column].dataset.sort, y = b.cells[column].dataset.sort;
        var nx = Number(x), ny = Number(y);
        var order = (x !== "" && y !== "" && !isNaN(nx) && !isNaN(ny))
          ? nx - ny : x.localeCompare(y);
        return up ? order : -order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
})();
"""


def _cell(shown: str, sort: Any, css: str = "") -> str:
    attr = f' class="{css}"' if css else ""
    return f'<td{attr} data-sort="{escape(str(sort))}">{shown}</td>'


def _run_link(run_id: str | None) -> str:
    if not run_id:
        return "-"
    dag_run = dag_run_id(run_id)
    if dag_run is None:
        return f"<code>{escape(run_id)}</code>"
    # The page is served at <base>/ledger-gc/ (in the UI's frame): ../dags/... is the UI's.
    href = f"../dags/{ORPHAN_DAG_ID}/runs/{quote(dag_run, safe='')}"
    return f'<a href="{escape(href)}" target="_top"><code>{escape(run_id)}</code></a>'


def _what(item: Mapping[str, Any]) -> tuple[str, str]:
    """The prefix cell and the objects cell. A Pulsar-metadata leftover's "prefix" is
    ``pulsar-metadata:<store>:<tenant or namespace>``, its objects its znodes. A
    BookKeeper ledger's "prefix" is
    ``bookkeeper:<its metadata znode>`` and its one "object" is that znode: shown as the
    znode and the ledger (of its managed ledger or schema), not as an S3 key."""
    leftover = parse_target(item["prefix"])
    if leftover is not None:  # one namespace's (or tenant's) znodes in one store
        store, name = leftover
        return (
            f'Pulsar metadata <code>{escape(name)}</code><br><span class="muted">'
            f"{escape(STORE_TITLES.get(store, store))}</span>",
            f"{item['objects']} znodes",
        )
    znode = znode_of_target(item["prefix"])
    if znode is None:
        return f"<code>{escape(item['prefix'])}</code>", str(item["objects"])
    owner = item.get("ml_name") or ""
    ledger = item.get("ledger_id")
    detail = " ".join(
        part
        for part in (
            f"ledger {ledger}" if ledger is not None else "",
            f"of {escape(owner)}" if owner else "",
        )
        if part
    )
    return (
        f'BookKeeper <code>{escape(znode)}</code><br><span class="muted">{detail}</span>',
        "1 ledger",
    )


def _row(item: Mapping[str, Any]) -> str:
    at = item["deletable_at_ms"]
    waits = item["waiting_for"]
    runs = _run_link(item["first_run_id"])
    if item["last_run_id"] and item["last_run_id"] != item["first_run_id"]:
        runs += " … " + _run_link(item["last_run_id"])
    error = item.get("last_error")
    waits_text = escape(", ".join(waits)) + (
        f'<br><span class="bad">last delete failed: {escape(error)}</span>' if error else ""
    )
    prefix, objects = _what(item)
    cells = [
        _cell(escape(item["class"]), item["class"]),
        _cell(escape(item["namespace"]), item["namespace"]),
        _cell(prefix, item["prefix"]),
        _cell(objects, item["objects"], "n"),
        _cell(escape(human_bytes(item["bytes"])), item["bytes"], "n"),
        _cell(escape(fmt_time(item["first_seen_ms"])), item["first_seen_ms"]),
        _cell(str(item["scans_seen"]), item["scans_seen"], "n"),
        _cell(
            escape(fmt_time(at)) if at is not None else "after its next scan",
            at if at is not None else 2**62,
        ),
        _cell(waits_text, ", ".join(waits), "" if waits == ["the next cycle"] else "warn"),
        _cell(runs, item["first_run_id"] or ""),
    ]
    return f'<tr data-prefix="{escape(item["prefix"])}">' + "".join(cells) + "</tr>"


def registered_section(listing: Mapping[str, Any]) -> str:
    """The section for one ``registered_orphans`` listing."""
    title = '<h2 id="registered">Registered orphans: what will be deleted, and when</h2>'
    orphans: Sequence[Mapping[str, Any]] = listing["orphans"]
    total = sum(int(item["bytes"]) for item in orphans)
    held = []
    if not listing["delete_enabled"]:
        held.append("deletion is disabled (LEDGERGC_DELETE_ENABLED=false)")
    held += [f"guard {escape(g)} refused the latest cycle" for g in listing["blocking_guards"]]
    summary = (
        f"<p>{len(orphans)} registered, {escape(human_bytes(total))}; grace "
        f"{listing['grace_seconds']} s, retention {listing['retention_seconds']} s. "
        "An orphan is deleted by the first cycle after its time, if a live re-check still "
        "finds it orphaned."
        + (
            f' <span class="warn">Nothing is deleted while {"; ".join(held)}.</span>'
            if held
            else ""
        )
        + ' <a href="api/orphans">JSON</a></p>'
    )
    if not orphans:
        return title + summary + '<p class="muted">No orphan is registered.</p>'
    if any(znode_of_target(item["prefix"]) is not None for item in orphans):
        summary += (
            '<p class="muted">A BookKeeper row is a ledger: deleting it removes its '
            "metadata znode (never its parents), and the bookies drop its data at their next "
            "garbage collection (gcWaitTime); until then <code>ledgergc restore --run "
            f"&lt;run id&gt;</code> brings it back. Its size is {escape(BYTES_MEANING)}.</p>"
        )
    shown = orphans[:MAX_ROWS]
    more = (
        f'<p class="muted">The {len(shown)} soonest of {len(orphans)} are shown; '
        'all are in <a href="api/orphans">the JSON</a>.</p>'
        if len(orphans) > len(shown)
        else ""
    )
    head = "".join(f'<th title="sort">{escape(h)}</th>' for h in HEADERS)
    body = "".join(_row(item) for item in shown)
    return (
        title + summary + '<p><input id="orphan-filter" type="search" placeholder="Filter: class, '
        'namespace, prefix or znode, what it waits for…" size="50" aria-label="Filter the '
        'registered orphans"></p>'
        + wide(
            f'<table id="registered-orphans"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>"
        )
        + more
        + f"<script>{SCRIPT}</script>"
    )
