"""The ``overview`` section of ``ledgergc status`` (``--json``, ``--metrics``, and a few
lines of the plain output).

Registered in ``ledger_gc.cli.STATUS_EXTENSIONS``: it adds the same overview that the
Airflow page shows, built from the state store and the status just read, so the command
and the page can be compared figure by figure.
"""

from __future__ import annotations

from typing import Any

from ledger_gc.config.settings import Settings
from ledger_gc.observability.overview import build_overview
from ledger_gc.observability.runs import MAIN_PHASES, PHASE_TITLES
from ledger_gc.observability.timefmt import fmt_time
from ledger_gc.rules.bookkeeper.classify import BK_LIVE
from ledger_gc.rules.bookkeeper.records import BYTES_MEANING

SECTION = "overview"
# Deletions listed by the plain ``ledgergc status`` (``--json`` has more).
SHOWN_DELETIONS = 5


def add_overview(data: dict[str, Any], settings: Settings) -> None:
    """Add ``data["overview"]``; the trim backlog is the live one of ``data``."""
    data[SECTION] = build_overview(settings, live_status=data)


def describe_overview(overview: dict[str, Any]) -> list[str]:
    """The overview in a few lines, for the plain ``ledgergc status``."""
    from ledger_gc.console import human_bytes

    orphans, deletions = overview["orphans"], overview["deletions"]
    lines = []
    latest = orphans["latest"]
    if latest:
        phases = ", ".join(
            f"{PHASE_TITLES[p].lower()} {orphans['phase_totals'][p]['count']} "
            f"({human_bytes(orphans['phase_totals'][p]['bytes'])})"
            for p in MAIN_PHASES
        )
        lines.append(f"orphans, cycle {latest['run_id']} ({latest['outcome']}): {phases}")
    for refusal in orphans["refusals"][:3]:
        lines.append(f"  refused by {refusal['guard']} in {refusal['run_id']}: {refusal['reason']}")
    if orphans.get("bookkeeper"):
        lines += _bookkeeper_lines(orphans["bookkeeper"])
    if orphans.get("pulsar_metadata"):
        lines += _pulsar_metadata_lines(orphans["pulsar_metadata"])
    reclaimed = ", ".join(
        f"{op} {human_bytes(value)}" for op, value in deletions["reclaimed_bytes"].items()
    )
    lines.append(f"reclaimed (audit log): {reclaimed}")
    recoverable = deletions.get("recoverable_bytes", {})
    if any(recoverable.values()):
        kept = ", ".join(f"{op} {human_bytes(value)}" for op, value in recoverable.items())
        lines.append(
            f"recoverable, not reclaimed (a versioned bucket keeps them, still billed): {kept}"
        )
    for record in deletions["recent"][:SHOWN_DELETIONS]:
        what = record.get("ml_name") or record.get("prefix")
        if record.get("ledger_id") is not None:
            what = f"{what} ledger {record['ledger_id']}"
        lines.append(
            f"  {fmt_time(record.get('time_ms'))} {record.get('operation')} {what} "
            f"{human_bytes(int(record.get('bytes') or 0))}"
            + (" (recoverable)" if record.get("recoverable") else "")
        )
    runs = ", ".join(
        f"{job} {fmt_time(last['time_ms']) if last else 'never'}"
        for job, last in overview["last_success"].items()
    )
    lines.append(f"last successful runs: {runs}")
    return lines


def _bookkeeper_lines(bk: dict[str, Any]) -> list[str]:
    """The latest cycle's BookKeeper figures: what is not live, what was deleted."""
    from ledger_gc.console import human_bytes

    found = ", ".join(
        f"{cls} {leaf['ledgers']} ({human_bytes(leaf['bytes'])})"
        for cls, leaf in bk["classes"].items()
        if leaf["ledgers"] and cls != BK_LIVE
    )
    lines = [
        f"  bookkeeper {bk['hosts']}{bk['root']} ({bk['layout']}): {bk['ledgers']} ledgers "
        f"({human_bytes(bk['bytes'])}); {found or 'all live'}; deleted {bk['deleted']} "
        f"({human_bytes(bk['bytes_reclaimed'])} reclaimed: {BYTES_MEANING})"
    ]
    if bk["held_reasons"]:
        held = ", ".join(f"{hold} {count}" for hold, count in bk["held_reasons"].items())
        lines.append(f"  bookkeeper held: {held}")
    lines += [
        f"  BookKeeper looks shared: {name} held: {why}"
        for name, why in bk["live_elsewhere"].items()
    ]
    missing = bk.get("bk_missing") or {}
    if missing.get("count"):
        examples = ", ".join(
            f"{s['topic']} ledger {s['ledger_id']}" for s in missing["samples"][:3]
        )
        lines.append(
            f"  bk-missing: {missing['count']} ledgers named but not in BookKeeper, e.g. {examples}"
        )
    return lines


def _pulsar_metadata_lines(pm: dict[str, Any]) -> list[str]:
    """The latest cycle's leftovers of Pulsar's metadata per class (znodes per store),
    the local store's znode count before and after, and the stuck deletes' commands."""
    from ledger_gc.console import human_bytes

    found = []
    for cls, per_store in pm["classes"].items():
        stores = [(store, leaf) for store, leaf in per_store.items() if leaf["leftovers"]]
        if stores:
            count = sum(leaf["leftovers"] for _, leaf in stores)
            where = ", ".join(f"{store} {leaf['znodes']} znodes" for store, leaf in stores)
            found.append(f"{cls} {count} ({where})")
    config = pm["config_hosts"]
    config_text = f" (config store {config})" if config and config != pm["local_hosts"] else ""
    znodes, back = pm["local_znodes"], pm["held_back"]
    lines = [
        f"  pulsar metadata {pm['local_hosts']}{config_text}: local store znodes "
        f"{znodes['before']} -> {znodes['after']}; {', '.join(found) or 'nothing left behind'}"
        f"; holding back {back['ledgers']} BookKeeper ledgers ({human_bytes(back['bytes'])})"
    ]
    lines += [
        f"  pulsar metadata stuck delete {item['name']}: {item['command'] or item['why']}"
        for item in pm["stuck_deletes"]
    ]
    lines += [
        f"  pulsar metadata held {item['name']} ({item['store']}): {item['why']}"
        for item in pm["held"]
    ]
    return lines
