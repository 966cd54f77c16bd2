"""The Pulsar-metadata source's part of an orphan cycle's summary, read defensively.

``runs.py``'s companion for one source (DESIGN.md "Pulsar's own metadata"): the summary's
``pulsar_metadata`` is the survey's ``PulsarMetadataManifest.to_manifest()`` (null or
absent: the source was off), its ``deleted`` items of the pm classes are what the cycle
removed (``objects``: znodes), and two figures come from the BookKeeper survey's part
(``bookkeeper.leftover_ledgers``: the BookKeeper ledgers the leftovers name and their
bytes; ``bookkeeper.bk_missing``, ledgers a record names that BookKeeper lacks, is read
here for ``runs.bookkeeper_figures``). Every key
is read with a default, as in ``runs.py``, so an older or newer summary never breaks the
page or the metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ledger_gc.rules.pulsar_metadata.classes import (
    BK_MISSING,
    EXPLANATIONS,
    LOCAL,
    PM_CLASSES,
    PM_NOT_REPLICATED_HERE,
    PM_ORPHAN_CLASSES,
    PM_STUCK_DELETE,
    STORES,
    parse_target,
)

#: Rows of each list kept in the overview (the run log and ``ledgergc orphans --json``
#: have the rest).
SHOWN = 20
_MEASURES = ("leftovers", "znodes", "bytes", "ledgers", "ledger_bytes")


def as_int(value: Any) -> int:
    """An integer from a summary value; anything unusable counts as 0."""
    if isinstance(value, bool):
        return int(value)
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _items(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _text(item: Mapping[str, Any], *keys: str) -> str:
    """The first of ``keys`` that ``item`` has, as text ("" when none)."""
    for key in keys:
        value = item.get(key)
        if value not in (None, ""):
            return str(value)
    return ""


def _totals(value: Any) -> dict[str, int]:
    leaf = _mapping(value)
    return {measure: as_int(leaf.get(measure)) for measure in _MEASURES}


def _classes(classes: Mapping[str, Any]) -> dict[str, dict[str, dict[str, int]]]:
    """Every class of the source in both stores (0 where the survey found none; no
    ``bk-missing``, which the BookKeeper survey counts in ledgers), then any class a newer
    summary names, as it names it."""
    names = [c for c in PM_CLASSES if c != BK_MISSING]
    names += sorted(str(c) for c in classes if c not in PM_CLASSES)
    result = {}
    for name in names:
        per_store = _mapping(classes.get(name))
        stores = (*STORES, *sorted(str(s) for s in per_store if s not in STORES))
        result[name] = {store: _totals(per_store.get(store)) for store in stores}
    return result


def _leftover(item: Mapping[str, Any], cls: str = "") -> dict[str, Any]:
    """One leftover of the samples or the held list: its name, store, class and why."""
    ledgers = item.get("ledgers")
    return {
        "name": _text(item, "name", "target", "prefix"),
        "store": _text(item, "store") or LOCAL,
        "class": _text(item, "class", "target_class") or cls,
        "why": _text(item, "why", "reason"),
        "znodes": as_int(item.get("znodes")),
        "ledgers": len(ledgers) if isinstance(ledgers, list) else as_int(ledgers),
        "command": _text(item, "command"),
    }


def znodes_deleted(summary: Mapping[str, Any]) -> dict[str, int]:
    """Znodes the cycle removed per store: ``pulsar_metadata.znodes_deleted`` when the
    report gives it per store, else the ``objects`` of its ``deleted`` items of the pm
    classes (one leftover each, one object per znode), by the store its target names."""
    given = _mapping(summary.get("pulsar_metadata")).get("znodes_deleted")
    if isinstance(given, Mapping):
        return {store: as_int(given.get(store)) for store in STORES}
    per_store = dict.fromkeys(STORES, 0)
    for item in _items(summary.get("deleted")):
        if item.get("target_class") not in PM_ORPHAN_CLASSES:
            continue
        parsed = parse_target(str(item.get("prefix") or ""))
        store = parsed[0] if parsed else LOCAL
        per_store[store] = per_store.get(store, 0) + as_int(item.get("objects"))
    return per_store


def held_back(bookkeeper: Mapping[str, Any]) -> dict[str, Any]:
    """The BookKeeper ledgers the leftovers name, and their bytes (the BookKeeper survey's
    ``leftover_ledgers`` {target: {ledgers, bytes}}): what the metadata holds back."""
    per_target = {
        str(target): {
            "ledgers": as_int(_mapping(leaf).get("ledgers")),
            "bytes": as_int(_mapping(leaf).get("bytes")),
        }
        for target, leaf in _mapping(bookkeeper.get("leftover_ledgers")).items()
    }
    biggest = sorted(per_target.items(), key=lambda kv: (-kv[1]["bytes"], kv[0]))[:SHOWN]
    return {
        "ledgers": sum(leaf["ledgers"] for leaf in per_target.values()),
        "bytes": sum(leaf["bytes"] for leaf in per_target.values()),
        "targets": dict(biggest),
    }


def bk_missing(bookkeeper: Mapping[str, Any]) -> dict[str, Any]:
    """Ledgers a managed ledger, cursor or schema names that BookKeeper lacks
    (``bookkeeper.bk_missing``: {count, samples [{topic, ledger_id, named_by}]})."""
    missing = _mapping(bookkeeper.get("bk_missing"))
    samples = _items(missing.get("samples"))
    return {
        "count": as_int(missing.get("count")) or len(samples),
        "samples": [
            {
                "topic": _text(s, "topic", "ml_name"),
                "ledger_id": as_int(s.get("ledger_id")),
                "named_by": _text(s, "named_by"),
            }
            for s in samples[:SHOWN]
        ],
    }


def pulsar_metadata_figures(summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """What an orphan cycle's survey of Pulsar's metadata found, or None when the source
    was off (or the summary is older than it): nothing to show, not a clean store."""
    pm = summary.get("pulsar_metadata")
    if not isinstance(pm, Mapping):
        return None
    classes = _classes(_mapping(pm.get("classes")))
    explanations = _mapping(pm.get("explanations"))
    samples = _mapping(pm.get("samples"))
    deleted = znodes_deleted(summary)
    before = as_int(pm.get("local_znodes"))
    bookkeeper = _mapping(summary.get("bookkeeper"))
    return {
        "local_hosts": str(pm.get("local_hosts") or ""),
        "config_hosts": str(pm.get("config_hosts") or ""),
        "namespaces": as_int(pm.get("namespaces")),
        "tenants": as_int(pm.get("tenants")),
        # The local store's znodes under Pulsar's roots as the survey counted them, and
        # less what this cycle removed there (its own count comes with the next survey).
        "local_znodes": {
            "before": before,
            "deleted": deleted[LOCAL],
            "after": max(before - deleted[LOCAL], 0),
        },
        "znodes_deleted": deleted,
        "classes": classes,
        "explanations": {
            name: str(explanations.get(name) or EXPLANATIONS.get(name, ""))
            for name in (*classes, BK_MISSING)
        },
        "stuck_deletes": [
            _leftover(item, PM_STUCK_DELETE)
            for item in _items(samples.get(PM_STUCK_DELETE))[:SHOWN]
        ],
        "not_replicated": [
            _leftover(item, PM_NOT_REPLICATED_HERE)
            for item in _items(samples.get(PM_NOT_REPLICATED_HERE))[:SHOWN]
        ],
        "leftovers": [
            _leftover(item, cls)
            for cls in PM_ORPHAN_CLASSES
            for item in _items(samples.get(cls))[:SHOWN]
        ],
        "held": [_leftover(item) for item in _items(pm.get("held"))[:SHOWN]],
        "held_count": as_int(pm.get("held_count")) or len(_items(pm.get("held"))),
        "held_back": held_back(bookkeeper),
    }
