"""The report's registry part (issue 36): every entry counted in its phase, the waiting
ones listed soonest first (at most ``MAX_LISTED``, ``waiting_total`` counting all), and
the run's history tallied, all as the whole-list computation gave them, without holding
the registry or the history in memory (they are streamed from the store)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from ledger_gc.config.endpoints import BookKeeperEndpoint, Endpoints, StateEndpoint, ZkEndpoint
from ledger_gc.config.policy import Policy
from ledger_gc.config.zk_addresses import parse_zk_address
from ledger_gc.orphans import report
from ledger_gc.orphans.options import CycleOptions
from ledger_gc.orphans.records import DeleteRecord
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.orphans.run_steps import DELETE, RunSteps
from ledger_gc.rules.orphans import outcomes, phases, timekeeping
from ledger_gc.rules.orphans.classify import ORPHAN_LEDGER, ORPHAN_PARTITION
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.rules.orphans.timekeeping import Instant

RUN = "run-2"
HOUR = 3600 * 1000
T0 = 1_800_000_000_000  # scan 1's servers' time
GRACE, RETENTION = 2 * 3600, 3600
NOW = T0 + 5 * HOUR
MANY = 2 * report.MAX_LISTED + 57


def _entry(number: int, rng: random.Random) -> RegistryEntry:
    """An entry in one of the phases: unseen by scan 2, first seen by it (grace), seen by
    both with young data (retention), or old (eligible); equal times on purpose, so the
    list's order is decided by the prefix too."""
    kind = number % 4
    ledger = kind != 3 or number % 8 != 3
    ns = f"tenant/ns{number % 3}"
    return RegistryEntry(
        prefix=f"p/{rng.randrange(10**9):09d}-{number}/",
        target_class=ORPHAN_LEDGER if ledger else ORPHAN_PARTITION,
        ml_name=f"{ns}/persistent/t{number}",
        ledger_id=number if ledger else None,
        first_seen_ms=T0 if kind != 1 else T0 + HOUR,
        last_seen_ms=T0 + HOUR,
        first_scan=2 if kind == 1 else 1,
        last_scan=1 if kind == 0 else 2,
        scans_seen=1,
        objects=number % 5 + 1,
        bytes=1000 + number,
        newest_ms=NOW - (number % 7) * HOUR // 2 if kind == 2 else T0 - HOUR,
    )


def _endpoints(state: Any, tmp_path: Path) -> Endpoints:
    zk = ZkEndpoint(parse_zk_address("LEDGERGC_ZK_HOSTS", "127.0.0.1:1/nowhere"))
    url = str(state) if "://" in str(state) else None
    return Endpoints(
        zk,
        BookKeeperEndpoint(zk),
        state=StateEndpoint(tmp_path / "state", url),
        policy=Policy(grace_seconds=GRACE, retention_seconds=RETENTION),
        bookkeeper_mode="false",
        pulsar_metadata_mode="false",
    )


def _whole_list_report(
    entries: list[RegistryEntry], history: list[tuple[RegistryEntry, str, str]]
) -> dict[str, Any]:
    """What the report said before it streamed: every waiting item built, sorted, cut."""
    by_prefix = {e.prefix: e for e in sorted(entries, key=lambda e: e.prefix)}
    instants = {1: Instant(T0, zk_ms=T0), 2: Instant(T0 + HOUR, zk_ms=T0 + HOUR)}
    now = Instant(NOW, zk_ms=NOW)
    elapsed = timekeeping.grace_elapsed(by_prefix.values(), instants, now)
    waiting, counts = [], {"eligible": 0, phases.WAITING_GRACE: 0, phases.WAITING_RETENTION: 0}
    for entry in by_prefix.values():
        where = phases.entry_phase(
            entry, 2, NOW, GRACE, RETENTION, grace_elapsed_ms=elapsed[entry.prefix]
        )
        if where is None:
            counts["eligible"] += 1
            continue
        counts[where.phase] = counts.get(where.phase, 0) + 1
        waiting.append(
            {
                "prefix": entry.prefix,
                "target_class": entry.target_class,
                "ml_name": entry.ml_name,
                "ledger_id": entry.ledger_id,
                "bytes": entry.bytes,
                "phase": where.phase,
                "first_seen_ms": entry.first_seen_ms,
                "until_ms": where.until_ms,
            }
        )
    waiting.sort(key=lambda w: (w["until_ms"] is None, w["until_ms"] or 0, w["prefix"]))
    target = ("prefix", "target_class", "ml_name", "ledger_id")
    return {
        "waiting": waiting[: report.MAX_LISTED],
        "waiting_total": len(waiting),
        "counts": counts,
        "corrected": [
            {**{k: getattr(e, k) for k in target}, "reason": why}
            for e, event, why in history
            if event == phases.CORRECTED
        ][: report.MAX_LISTED],
        "failed": [
            {"prefix": e.prefix, "error": why}
            for e, event, why in history
            if event == phases.DELETE_FAILED
        ],
        "new": sum(1 for _, event, _ in history if event == phases.REGISTERED),
    }


def _forbidden(*_: Any, **__: Any) -> Any:
    raise AssertionError("the report read the whole registry or history into memory")


@pytest.mark.state_backends
def test_the_report_lists_and_counts_a_large_registry_as_the_whole_list_did(
    state_location: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(36)
    entries = [_entry(number, rng) for number in range(MANY)]
    rng.shuffle(entries)
    registry = OrphanRegistry(state_location)
    events = [phases.REGISTERED, phases.CORRECTED, phases.DELETE_FAILED, phases.CLOCK_RESTARTED]
    history = [(e, events[i % 4], f"why {i}") for i, e in enumerate(entries * 2)][: 3 * MANY]
    with registry.transaction() as txn:
        txn.record_scan("run-1", T0, {"instant": Instant(T0, zk_ms=T0).to_dict()})
        txn.record_scan(RUN, T0 + HOUR, {"instant": Instant(T0 + HOUR, zk_ms=T0 + HOUR).to_dict()})
        txn.upsert_many(entries)
        for entry, event, why in history[:5]:  # one at a time and batched: same order
            txn.add_history(entry, event, why, run_id=RUN, scan=2, time_ms=T0 + HOUR)
        txn.add_history_many(history[5:], run_id=RUN, scan=2, time_ms=T0 + HOUR)
        txn.add_history(entries[0], phases.CORRECTED, "another run's", run_id="run-1", scan=1)
    skipped = [
        outcomes.RecheckResult.of(e, outcomes.SKIPPED, "", error=f"skipped {n}")
        for n, e in enumerate(entries[:30])
    ]
    would = [
        outcomes.RecheckResult.of(e, outcomes.WOULD_DELETE, f"would {n}", objects=1, bytes=n)
        for n, e in enumerate(entries[: report.MAX_LISTED + 9])
    ]
    RunSteps(registry.store, RUN).write_record(
        DELETE,
        DeleteRecord(results=[*would, *skipped], now_instant=Instant(NOW, zk_ms=NOW).to_dict()),
    )
    expected = _whole_list_report(entries, history)
    monkeypatch.setattr(OrphanRegistry, "entries", _forbidden)
    monkeypatch.setattr(OrphanRegistry, "history", _forbidden)

    data = report.build_report(
        _endpoints(state_location, tmp_path), RUN, options=CycleOptions(), now_ms=NOW
    ).to_dict()

    assert data["waiting"] == expected["waiting"]
    assert data["waiting_total"] == expected["waiting_total"] > report.MAX_LISTED
    assert {w["phase"] for w in data["waiting"]} >= {phases.WAITING_GRACE, phases.UNSEEN}
    assert data["registry"]["entries"] == MANY
    assert data["registry"]["bytes"] == sum(e.bytes for e in entries)
    assert data["phases"]["registered"]["count"] == MANY
    assert data["phases"]["eligible"]["count"] == expected["counts"]["eligible"] > 0
    for phase in (phases.WAITING_GRACE, phases.WAITING_RETENTION):
        name = phase.replace("-", "_")
        assert data["phases"][name]["count"] == expected["counts"][phase] > 0
    assert data["phases"]["new"]["count"] == expected["new"]
    assert data["corrected"] == expected["corrected"]
    assert len(data["corrected"]) == report.MAX_LISTED
    failed = [*expected["failed"], *({"prefix": r.prefix, "error": r.error} for r in skipped)]
    assert data["failed"] == failed[: report.MAX_LISTED]
    assert [w["reason"] for w in data["would_delete"]] == [
        f"would {n}" for n in range(report.MAX_LISTED)
    ]
    assert data["phases"]["would_delete"]["count"] == len(would)
    namespaces = data["namespaces"]
    assert sum(ns["phases"]["registered"]["count"] for ns in namespaces.values()) == MANY
