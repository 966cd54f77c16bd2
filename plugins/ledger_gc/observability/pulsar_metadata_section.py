"""The page's Pulsar-metadata section: what deleted tenants, namespaces and dead brokers
left in ZooKeeper, as the latest orphan cycle found it (DESIGN.md "Pulsar's own metadata").

Shown when that source is on (the overview's ``orphans.pulsar_metadata``), or while
leftovers it registered are still in a phase after it was turned off. It says what an
operator acts on: the local store's znode count before and after the cycle, the leftovers
per class and store with the BookKeeper bytes they hold back, the topics that cannot be
read (``bk-missing``), the deletes Pulsar left half done with the ``pulsar-admin``
command that finishes each, the namespaces not replicated here, and what was held and
why. Removing metadata is restorable: ``ledgergc restore --run <id>`` re-creates the
znodes with their ACLs, parents first.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from ledger_gc.observability.figures import bytes_figure, figure, table
from ledger_gc.observability.runs import CLASS_TITLES, PHASE_TITLES, PHASES
from ledger_gc.rules.pulsar_metadata.classes import BK_MISSING, EXPLANATIONS, PM_ORPHAN_CLASSES

_KEY = ("orphans", "pulsar_metadata")
STORE_TITLES = {"local": "local (metadataStoreUrl)", "config": "configuration store"}


def has_pulsar_metadata(orphans: Mapping[str, Any]) -> bool:
    """Whether the page shows the section: the latest cycle surveyed Pulsar's metadata,
    or some leftover is in a phase (registered before the source was turned off)."""
    if orphans.get("pulsar_metadata") is not None:
        return True
    return any(
        by_class.get(cls, {}).get("count")
        for by_class in orphans["phases"].values()
        for cls in PM_ORPHAN_CLASSES
    )


def _headline(pm: Mapping[str, Any]) -> str:
    config = pm["config_hosts"]
    stores = f"local store <code>{escape(pm['local_hosts'])}</code>, configuration store " + (
        f"<code>{escape(config)}</code>"
        if config and config != pm["local_hosts"]
        else "the same (no LEDGERGC_CONFIG_STORE_HOSTS)"
    )
    return (
        f"<p>Pulsar's metadata: {stores}; "
        f"{figure((*_KEY, 'tenants'), pm['tenants'])} tenants and "
        f"{figure((*_KEY, 'namespaces'), pm['namespaces'])} namespaces in the configuration "
        "store.</p>"
    )


def _tiles(pm: Mapping[str, Any]) -> str:
    znodes, back = pm["local_znodes"], pm["held_back"]
    deleted = pm["znodes_deleted"]
    return (
        '<div class="tiles">'
        '<div class="tile"><div class="label">Local store znodes</div><div class="big">'
        f"{figure((*_KEY, 'local_znodes', 'before'), znodes['before'])} &rarr; "
        f"{figure((*_KEY, 'local_znodes', 'after'), znodes['after'])}</div>"
        "<div>before and after the latest cycle (Pulsar's roots)</div></div>"
        '<div class="tile"><div class="label">Znodes removed (latest cycle)</div>'
        f'<div class="big">{figure((*_KEY, "znodes_deleted", "local"), deleted.get("local", 0))}'
        f"</div><div>local; {figure((*_KEY, 'znodes_deleted', 'config'), deleted.get('config', 0))}"
        " in the configuration store</div></div>"
        '<div class="tile"><div class="label">BookKeeper held back</div><div class="big">'
        f"{bytes_figure((*_KEY, 'held_back', 'bytes'), back['bytes'])}</div><div>in "
        f"{figure((*_KEY, 'held_back', 'ledgers'), back['ledgers'])} ledgers the leftovers "
        "list (freed once their metadata goes)</div></div></div>"
    )


def _classes(pm: Mapping[str, Any]) -> str:
    rows = [
        [
            f"<code>{escape(cls)}</code>",
            escape(STORE_TITLES.get(store, store)),
            escape(pm["explanations"].get(cls, "")),
            figure((*_KEY, "classes", cls, store, "leftovers"), leaf["leftovers"]),
            figure((*_KEY, "classes", cls, store, "znodes"), leaf["znodes"]),
            bytes_figure((*_KEY, "classes", cls, store, "bytes"), leaf["bytes"]),
            figure((*_KEY, "classes", cls, store, "ledgers"), leaf["ledgers"]),
            bytes_figure((*_KEY, "classes", cls, store, "ledger_bytes"), leaf["ledger_bytes"]),
        ]
        for cls, per_store in pm["classes"].items()
        for store, leaf in per_store.items()
        if any(leaf.values())
    ]
    return "<h3>Leftovers per class and store (latest cycle)</h3>" + table(
        [
            "Class",
            "Store",
            "What it means",
            "Leftovers",
            "Znodes",
            "Size",
            "Ledgers named",
            "Their size",
        ],
        rows,
        "Nothing left behind in either store.",
    )


def _leftovers(pm: Mapping[str, Any]) -> str:
    rows = [
        [
            f"<code>{escape(item['name'])}</code>",
            f"<code>{escape(item['class'])}</code>",
            escape(item["store"]),
            figure((*_KEY, "leftovers", i, "znodes"), item["znodes"]),
            figure((*_KEY, "leftovers", i, "ledgers"), item["ledgers"]),
            escape(item["why"]),
        ]
        for i, item in enumerate(pm["leftovers"])
    ]
    targets = [
        [
            f"<code>{escape(target)}</code>",
            figure((*_KEY, "held_back", "targets", target, "ledgers"), leaf["ledgers"]),
            bytes_figure((*_KEY, "held_back", "targets", target, "bytes"), leaf["bytes"]),
        ]
        for target, leaf in pm["held_back"]["targets"].items()
    ]
    return (
        "<h3>Leftovers found (samples)</h3>"
        + table(["Name", "Class", "Store", "Znodes", "Ledgers", "Why"], rows, "None.")
        + "<h3>BookKeeper ledgers the leftovers hold back (largest)</h3>"
        + table(["Leftover", "Ledgers", "Size"], targets, "None known.")
    )


def _bk_missing(orphans: Mapping[str, Any]) -> str:
    missing = (orphans.get("bookkeeper") or {}).get("bk_missing")
    if missing is None:
        return ""
    key = ("orphans", "bookkeeper", "bk_missing")
    rows = [
        [
            f"<code>{escape(s['topic'])}</code>",
            figure((*key, "samples", i, "ledger_id"), s["ledger_id"]),
            f"<code>{escape(s['named_by'])}</code>",
        ]
        for i, s in enumerate(missing["samples"])
    ]
    return (
        f'<h3 id="bk-missing">Topics that cannot be read (<code>{BK_MISSING}</code>: '
        f"{figure((*key, 'count'), missing['count'])})</h3>"
        f'<p class="muted">{escape(EXPLANATIONS[BK_MISSING])}. Reported, never changed: '
        "restore the ledger or delete the topic (pulsar-admin topics delete).</p>"
        + table(["Topic", "Missing ledger", "Named by"], rows, "Every named ledger exists.")
    )


def _stuck(pm: Mapping[str, Any]) -> str:
    rows = [
        [
            f"<code>{escape(item['name'])}</code>",
            escape(item["why"]),
            f"<code>{escape(item['command'])}</code>" if item["command"] else "-",
        ]
        for item in pm["stuck_deletes"]
    ]
    return (
        '<h3 id="stuck-deletes">Deletes Pulsar left half done (<code>pm-stuck-delete</code>)</h3>'
        + '<p class="muted">Marked deleted=true for longer than the grace window. ledger-gc '
        "never deletes these: run the command (Pulsar finishes its own delete).</p>"
        + table(["Namespace or topic", "Why", "Finish it with"], rows, "None.")
    )


def _not_replicated(pm: Mapping[str, Any]) -> str:
    rows = [
        [f"<code>{escape(item['name'])}</code>", escape(item["why"])]
        for item in pm["not_replicated"]
    ]
    return (
        "<h3>Namespaces not replicated here (<code>pm-not-replicated-here</code>)</h3>"
        '<p class="muted">replication_clusters excludes this cluster '
        "(LEDGERGC_PULSAR_CLUSTER): Pulsar may add it back, so they are reported, never "
        "deleted.</p>" + table(["Namespace", "Why"], rows, "None.")
    )


def _held(pm: Mapping[str, Any]) -> str:
    rows = [
        [
            f"<code>{escape(item['name'])}</code>",
            escape(item["store"]),
            f"<code>{escape(item['class'])}</code>" if item["class"] else "-",
            escape(item["why"]),
        ]
        for item in pm["held"]
    ]
    count = figure((*_KEY, "held_count"), pm["held_count"])
    return f"<h3>Held leftovers, and why (kept: {count})</h3>" + table(
        ["Name", "Store", "Class", "Why"], rows, "No leftover held."
    )


def _phases(orphans: Mapping[str, Any]) -> str:
    rows = [
        [escape(PHASE_TITLES[p])]
        + [
            figure(("orphans", "phases", p, c, "count"), orphans["phases"][p][c]["count"])
            + " · "
            + bytes_figure(("orphans", "phases", p, c, "bytes"), orphans["phases"][p][c]["bytes"])
            for c in PM_ORPHAN_CLASSES
        ]
        for p in PHASES
    ]
    return "<h3>Registered leftovers per phase</h3>" + table(
        ["Phase"] + [CLASS_TITLES[c] for c in PM_ORPHAN_CLASSES], rows, ""
    )


def _restore(pm: Mapping[str, Any], run_id: str) -> str:
    if any(pm["znodes_deleted"].values()) and run_id:
        return (
            f"<p>To undo this cycle's removals: <code>ledgergc restore --run "
            f"{escape(run_id)}</code>. It re-creates each removed znode from the audit log "
            "with its data and ACL, parents first; the BookKeeper ledgers the records "
            "named are deleted only by a later cycle, under their own grace window.</p>"
        )
    return ""


def pulsar_metadata_section(orphans: Mapping[str, Any]) -> str:
    """The section for the overview's ``orphans`` ("" when ``has_pulsar_metadata`` is
    false)."""
    if not has_pulsar_metadata(orphans):
        return ""
    title = '<h2 id="pulsar-metadata">Pulsar metadata</h2>'
    pm = orphans.get("pulsar_metadata")
    if pm is None:
        return (
            title + '<p class="muted">The latest orphan cycle did not survey Pulsar\'s '
            "metadata (LEDGERGC_PULSAR_METADATA is false, or auto found no /admin/policies, "
            "or the cycle stopped before its survey); the leftovers registered before stay "
            "registered and are checked again when it does.</p>" + _phases(orphans)
        )
    run_id = (orphans.get("latest") or {}).get("run_id") or ""
    return (
        title
        + _headline(pm)
        + _tiles(pm)
        + _restore(pm, run_id)
        + _classes(pm)
        + _stuck(pm)
        + _bk_missing(orphans)
        + _not_replicated(pm)
        + _held(pm)
        + _phases(orphans)
        + _leftovers(pm)
    )
