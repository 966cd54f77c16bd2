"""The page's BookKeeper section: what the latest orphan cycle found in BookKeeper.

Shown beside the S3 and tiered-storage figures when the BookKeeper source is on (the
overview's ``orphans.bookkeeper``), or while BookKeeper ledgers are still registered
after it was turned off; otherwise the page has no such section at all. Deleting a
BookKeeper ledger is removing its metadata znode, and the bookies drop its data at
their next garbage collection (``gcWaitTime``): until then ``ledgergc restore`` can
bring it back, so the section says how, with the run's id.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from ledger_gc.observability.figures import bytes_figure, figure, table
from ledger_gc.observability.runs import CLASS_TITLES, PHASE_TITLES, PHASES
from ledger_gc.rules.bookkeeper.classify import BK_LIVE, BK_ORPHAN_CLASSES
from ledger_gc.rules.bookkeeper.records import BYTES_MEANING

_KEY = ("orphans", "bookkeeper")


def has_bookkeeper(orphans: Mapping[str, Any]) -> bool:
    """Whether the page shows the section: the latest cycle surveyed BookKeeper, or some
    BookKeeper ledger is in a phase (registered before the source was turned off)."""
    if orphans.get("bookkeeper") is not None:
        return True
    return any(
        by_class.get(cls, {}).get("count")
        for by_class in orphans["phases"].values()
        for cls in BK_ORPHAN_CLASSES
    )


def _headline(bk: Mapping[str, Any]) -> str:
    return (
        f"<p>BookKeeper <code>{escape(bk['hosts'])}{escape(bk['root'])}</code> "
        f"({escape(bk['layout'] or 'layout unknown')}): "
        f"{figure((*_KEY, 'ledgers'), bk['ledgers'])} ledgers, "
        f"{bytes_figure((*_KEY, 'bytes'), bk['bytes'])} ("
        f"{figure((*_KEY, 'pulsar_ledgers'), bk['pulsar_ledgers'])} tagged by Pulsar); "
        f"{figure((*_KEY, 'managed_ledgers'), bk['managed_ledgers'])} managed ledgers "
        f"reference them. Sizes are {escape(BYTES_MEANING)} (the length each ledger's "
        "metadata records: unknown, so 0, while a ledger is open).</p>"
    )


def _warnings(bk: Mapping[str, Any]) -> str:
    """Signs that this BookKeeper is not only this metadata's: another cluster's topics,
    or a root that lacks the ledgers the managed ledgers list."""
    parts = [
        f'<p class="warn">BookKeeper looks shared: every ledger of <code>{escape(name)}</code> '
        f"is held. {escape(why)}</p>"
        for name, why in bk["live_elsewhere"].items()
    ]
    if bk["missing_listed"]:
        examples = ", ".join(
            f"{m['ml_name']} ledger {m['ledger_id']}" for m in bk["missing_listed_samples"]
        )
        parts.append(
            f'<p class="warn">{figure((*_KEY, "missing_listed"), bk["missing_listed"])} '
            "ledgers that managed ledgers list are missing from this BookKeeper root "
            f"(e.g. {escape(examples)}): it is another cluster's, or a copy; the cycle "
            "refuses to delete (LEDGERGC_BK_ZK_HOSTS, LEDGERGC_BK_LEDGERS_ROOT).</p>"
        )
    return "".join(parts)


def _bk_missing(bk: Mapping[str, Any]) -> str:
    """Topics that cannot be read: a record names a ledger this BookKeeper lacks."""
    missing = bk.get("bk_missing") or {}
    if not missing.get("count"):
        return ""
    examples = ", ".join(
        f"{s['topic']} ledger {s['ledger_id']} (named by {s['named_by']})"
        for s in missing["samples"]
    )
    return (
        f'<p class="warn">{figure((*_KEY, "bk_missing", "count"), missing["count"])} ledgers '
        f"that Pulsar's records name do not exist in BookKeeper (bk-missing: those topics "
        f"cannot be read; reported, never changed), e.g. {escape(examples)}.</p>"
    )


def _tiles(bk: Mapping[str, Any]) -> str:
    return (
        '<div class="tiles">'
        '<div class="tile"><div class="label">Orphan bytes</div><div class="big">'
        f"{bytes_figure((*_KEY, 'orphan_bytes'), bk['orphan_bytes'])}</div>"
        "<div>bk-orphan-* and bk-offloaded-copy</div></div>"
        '<div class="tile"><div class="label">Deleted (latest cycle)</div><div class="big">'
        f"{figure((*_KEY, 'deleted'), bk['deleted'])}</div><div>ledgers, "
        f"{bytes_figure((*_KEY, 'bytes_reclaimed'), bk['bytes_reclaimed'])} reclaimed</div>"
        "</div></div>"
    )


def _classes(bk: Mapping[str, Any]) -> str:
    rows = [
        [
            f"<code>{escape(cls)}</code>",
            escape(bk["explanations"].get(cls, "")),
            figure((*_KEY, "classes", cls, "ledgers"), leaf["ledgers"]),
            bytes_figure((*_KEY, "classes", cls, "bytes"), leaf["bytes"]),
        ]
        for cls, leaf in bk["classes"].items()
    ]
    return "<h3>Ledgers per class (latest cycle)</h3>" + table(
        ["Class", "What it means", "Ledgers", "Size"], rows, ""
    )


def _held(bk: Mapping[str, Any]) -> str:
    rows = [
        [f"<code>{escape(hold)}</code>", figure((*_KEY, "held_reasons", hold), count)]
        for hold, count in bk["held_reasons"].items()
    ]
    return "<h3>Held, and why (kept, never deleted)</h3>" + table(
        ["Reason", "Ledgers"], rows, "No ledger held."
    )


def _namespaces(bk: Mapping[str, Any]) -> str:
    # Live ledgers are in every namespace and are not news; the rest are.
    rows = [
        [
            escape(ns),
            f"<code>{escape(cls)}</code>",
            figure((*_KEY, "namespaces", ns, cls, "ledgers"), leaf["ledgers"]),
            bytes_figure((*_KEY, "namespaces", ns, cls, "bytes"), leaf["bytes"]),
        ]
        for ns, by_class in bk["namespaces"].items()
        for cls, leaf in by_class.items()
        if cls != BK_LIVE and leaf["ledgers"]
    ]
    return "<h3>Per namespace (latest cycle; live ledgers left out)</h3>" + table(
        ["Namespace", "Class", "Ledgers", "Size"],
        rows,
        "Every BookKeeper ledger in every namespace is live.",
    )


def _phases(orphans: Mapping[str, Any]) -> str:
    """The registered BookKeeper orphans through the phases, as the main table shows the
    S3 and tiered-storage classes."""
    rows = [
        [escape(PHASE_TITLES[p])]
        + [
            figure(("orphans", "phases", p, c, "count"), orphans["phases"][p][c]["count"])
            + " · "
            + bytes_figure(("orphans", "phases", p, c, "bytes"), orphans["phases"][p][c]["bytes"])
            for c in BK_ORPHAN_CLASSES
        ]
        for p in PHASES
    ]
    return "<h3>Registered BookKeeper orphans per phase</h3>" + table(
        ["Phase"] + [CLASS_TITLES[c] for c in BK_ORPHAN_CLASSES], rows, ""
    )


def _restore(bk: Mapping[str, Any], run_id: str) -> str:
    if bk["deleted"] and run_id:
        return (
            f"<p>To undo this cycle's deletions: <code>ledgergc restore --run "
            f"{escape(run_id)}</code>. It re-creates the deleted ledgers' metadata from the "
            "audit log, and only works until the bookies' next garbage collection "
            "(gcWaitTime, 10 minutes by default): after that their data is gone.</p>"
        )
    return f'<p class="muted">Restoring: {escape(bk["restore"])}.</p>'


_STEP_TITLES = {
    "references": "Pulsar's references (read in full)",
    "listing": "listing the ledger directories",
    "cache": "loading the record cache",
    "ledgers": "reading and classifying the ledgers",
    "spark_wait": "… of which waiting for Spark's session to start",
    "cache_save": "saving the record cache",
    "checks": "re-reading what the guards check",
    "total": "the whole survey",
}


def _cost(bk: Mapping[str, Any], zookeeper: Mapping[str, Any]) -> str:
    """What the latest cycle cost ZooKeeper: the survey's reads and the cycle's, the
    records the cache stood in for, and the time each step took."""
    cost = bk.get("cost") or {}
    if not cost:
        return ""
    key = (*_KEY, "cost")
    bound = zookeeper.get("max_reads_per_second")
    cache = cost["cache"]
    cache_text = (
        f"record cache: {escape(cache['why'])}"
        if cache["enabled"]
        else f"record cache off: {escape(cache['why'])}"
    )
    rows = [
        [
            "ZooKeeper reads (znodes) by the survey",
            figure((*key, "zk_reads"), cost["zk_reads"]),
        ],
        [
            "… at most in one second",
            figure((*key, "zk_peak_reads_per_second"), cost["zk_peak_reads_per_second"]),
        ],
        [
            "ZooKeeper reads by the whole cycle (and its peak)",
            figure(("orphans", "zookeeper", "reads"), zookeeper.get("reads"))
            + " ("
            + figure(("orphans", "zookeeper", "peak_per_second"), zookeeper.get("peak_per_second"))
            + "/s)",
        ],
        [
            "bound (LEDGERGC_ZK_MAX_READS_PER_SECOND)",
            figure(
                ("orphans", "zookeeper", "max_reads_per_second"),
                bound,
                f"{bound:g}/s" if bound else "none",
            ),
        ],
        ["ledger records read", figure((*key, "records_read"), cost["records_read"])],
        [
            "ledger records from the record cache (no read)",
            figure((*key, "records_cached"), cost["records_cached"]),
        ],
    ]
    steps = [
        [escape(_STEP_TITLES.get(step, step)), figure((*key, "seconds", step), seconds)]
        for step, seconds in cost["seconds"].items()
    ]
    since = figure((*key, "cache", "cycles_since_full_read"), cache["cycles_since_full_read"])
    return (
        "<h3>Cost to ZooKeeper (latest cycle)</h3>"
        f'<p class="muted">{cache_text} (a full read every LEDGERGC_BK_FULL_READ_EVERY '
        f"cycles; {since} cycle(s) since the last one before this cycle).</p>"
        + table(["What", "Latest cycle"], rows, "")
        + table(["Survey step", "Seconds"], steps, "")
    )


def bookkeeper_section(orphans: Mapping[str, Any]) -> str:
    """The section for the overview's ``orphans`` ("" when ``has_bookkeeper`` is false)."""
    if not has_bookkeeper(orphans):
        return ""
    title = '<h2 id="bookkeeper">BookKeeper ledgers</h2>'
    bk = orphans.get("bookkeeper")
    if bk is None:
        return (
            title + '<p class="muted">The latest orphan cycle did not survey BookKeeper '
            "(LEDGERGC_BOOKKEEPER is false, no LAYOUT under LEDGERGC_BK_LEDGERS_ROOT, or "
            "the cycle stopped before its survey); the BookKeeper ledgers registered "
            "before stay registered and are checked again when it does.</p>" + _phases(orphans)
        )
    run_id = (orphans.get("latest") or {}).get("run_id") or ""
    return (
        title
        + _headline(bk)
        + _warnings(bk)
        # With Pulsar's metadata surveyed its section lists them, beside the stuck deletes.
        + ("" if orphans.get("pulsar_metadata") is not None else _bk_missing(bk))
        + _tiles(bk)
        + _restore(bk, run_id)
        + _classes(bk)
        + _held(bk)
        + _phases(orphans)
        + _namespaces(bk)
        + _cost(bk, orphans.get("zookeeper") or {})
    )
