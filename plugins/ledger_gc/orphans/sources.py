"""The sources of orphans the engine removes, each behind ``orphan_source.OrphanSource``.

A source is one kind of storage that leaks: the S3 store's ledger blocks and Pulsar's
offloaded segments (``s3_source``: one bucket listing, one Spark scan, one re-check
against the managed ledgers' records), and BookKeeper's ledger znodes
(``bookkeeper.source``). The engine (registry, phases, schedule, guards, audit, locks,
report) is written once and knows a source only through ``OrphanSource``; these
functions hand each source its part of every step. What a source finds is registered by
target class (``rules/orphans/classify.py``), so the phases and the schedule need no
source at all.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ledger_gc.bookkeeper.source import BookKeeperSource
from ledger_gc.orphan_source import Comparison, DeleteRequest, OrphanSource, SurveyRequest
from ledger_gc.orphans.records import DiffRecord, PhasesRecord
from ledger_gc.orphans.s3_source import S3Source
from ledger_gc.rules.orphans.outcomes import FAILED, RecheckResult

if TYPE_CHECKING:
    from ledger_gc.rules.orphans.classify import Candidate
    from ledger_gc.rules.orphans.guards import Refusal
    from ledger_gc.rules.orphans.horizon import Held
    from ledger_gc.rules.orphans.phases import RegistryEntry

#: Every source, in the order their surveys and deletes run.
SOURCES: tuple[OrphanSource, ...] = (S3Source(), BookKeeperSource())


def survey_sources(request: SurveyRequest) -> tuple[DiffRecord, list[Candidate]]:
    """Every source's survey, in order: the run's diff record (each source's fields)
    and every candidate. A source that fails fails the survey (nothing is recorded); a
    field filled twice, or one the record does not have, is a programming error."""
    known = {f.name for f in dataclasses.fields(DiffRecord)}
    fields: dict[str, object] = {}
    candidates: list[Candidate] = []
    for source in SOURCES:
        found = source.survey(request)
        clash = set(found.record) & set(fields)
        if clash:
            raise ValueError(f"source {source.name} fills fields another filled: {sorted(clash)}")
        unknown = set(found.record) - known
        if unknown:  # a field the record would drop: a guard could miss its input
            raise ValueError(
                f"source {source.name} fills fields DiffRecord lacks: {sorted(unknown)}"
            )
        fields.update(found.record)
        candidates += found.candidates
    return DiffRecord.from_dict(fields | {"candidates": len(candidates)}), candidates


def survey_refusals(diff: DiffRecord, max_fraction: float, *, force: bool) -> list[Refusal]:
    """Every source's guards over the survey's record, source by source."""
    return [r for source in SOURCES for r in source.refusals(diff, max_fraction, force=force)]


def hold_by_source(
    candidates: dict[str, Candidate], diff: DiffRecord
) -> tuple[dict[str, Candidate], list[Held]]:
    """The candidates each source lets through to the phases, and those it holds back."""
    usable: dict[str, Candidate] = {}
    held: list[Held] = []
    for source in SOURCES:
        mine = {p: c for p, c in candidates.items() if source.owns(c.target_class)}
        kept, back = source.hold(mine, diff)
        usable.update(kept)
        held += back
    return usable, held


def compare_by_source(
    candidates: dict[str, Candidate],
    entries: dict[str, RegistryEntry],
    diff: DiffRecord,
    before: PhasesRecord,
    number: int,
) -> Comparison:
    """Every source's comparison of this scan with the previous applied one, over the
    candidates and registered entries it owns: all held targets, and every source's
    fields for the scan's ``PhasesRecord`` (a field two sources fill is refused)."""
    held: dict[str, str] = {}
    record: dict[str, Any] = {}
    for source in SOURCES:
        mine = {p: c for p, c in candidates.items() if source.owns(c.target_class)}
        owned = {p: e for p, e in entries.items() if source.owns(e.target_class)}
        found = source.compare(mine, owned, diff, before, number)
        clash = set(found.record) & set(record)
        if clash:
            raise ValueError(f"source {source.name} fills fields another filled: {sorted(clash)}")
        held.update(found.held)
        record.update(found.record)
    return Comparison(held, record)


def reasons_by_source(
    entries: list[RegistryEntry], diff: DiffRecord, number: int
) -> dict[str, str]:
    """Why each registered entry that scan ``number`` did not find orphaned is none, as
    the source it belongs to explains it (an entry of no source's class: kept as it is)."""
    reasons: dict[str, str] = {}
    for source in SOURCES:
        mine = [entry for entry in entries if source.owns(entry.target_class)]
        if mine:
            reasons.update(source.reasons(mine, diff, number))
    return reasons


def delete_by_source(request: DeleteRequest, entries: list[RegistryEntry]) -> list[RecheckResult]:
    """Hand each source the eligible entries it owns; their results, source by source.

    An entry no source owns (a class this ledger-gc does not know: a registry written by
    a newer one, mid-upgrade) is deleted by none: it fails, and stays registered."""
    results: list[RecheckResult] = []
    for source in SOURCES:
        mine = [entry for entry in entries if source.owns(entry.target_class)]
        if mine:
            results += source.delete(request, mine)
    for entry in entries:
        if not any(source.owns(entry.target_class) for source in SOURCES):
            why = f"no source of this ledger-gc deletes a {entry.target_class!r}: kept"
            results.append(RecheckResult.of(entry, FAILED, why, error=why))
    return results
