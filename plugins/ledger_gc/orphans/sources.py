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
from collections.abc import Collection, Iterable, Iterator, Mapping
from itertools import chain
from typing import TYPE_CHECKING, Any, TypeVar

from ledger_gc.bookkeeper.source import BookKeeperSource
from ledger_gc.orphan_source import (
    Comparison,
    DeleteRequest,
    OrphanSource,
    ScanComparison,
    SurveyRequest,
)
from ledger_gc.orphans.records import DiffRecord, PhasesRecord
from ledger_gc.orphans.s3_source import S3Source
from ledger_gc.pulsar_metadata.source import PulsarMetadataSource
from ledger_gc.rules.orphans.classify import Candidate
from ledger_gc.rules.orphans.outcomes import FAILED, RecheckResult
from ledger_gc.rules.orphans.phases import RegistryEntry

if TYPE_CHECKING:
    from ledger_gc.rules.orphans.guards import Refusal
    from ledger_gc.rules.orphans.horizon import Held

Target = TypeVar("Target", Candidate, RegistryEntry)

#: Every source, in the order their surveys and deletes run. Pulsar's metadata before
#: BookKeeper: its survey reads Pulsar's references, which BookKeeper's reuses
#: (``SurveyRequest.shared``), and its deletes hand BookKeeper the ledgers they free.
SOURCES: tuple[OrphanSource, ...] = (S3Source(), PulsarMetadataSource(), BookKeeperSource())


def survey_sources(request: SurveyRequest) -> tuple[DiffRecord, SurveyCandidates]:
    """Every source's survey, in order: the run's diff record (each source's fields)
    and every candidate. A source that fails fails the survey (nothing is recorded); a
    field filled twice, or one the record does not have, is a programming error.

    What the sources handed each other (``request.shared``) is let go once the last has
    surveyed: the diff's write that follows holds every candidate, and at 100,000 topics
    Pulsar's references beside them were the driver's top."""
    fields: dict[str, Any] = {}
    candidates: list[Collection[Candidate]] = []
    try:
        for source in SOURCES:
            found = source.survey(request)
            _add_fields(fields, found.record, source, DiffRecord)
            candidates.append(found.candidates)
    finally:
        request.shared.clear()
    every = SurveyCandidates(tuple(candidates))
    return DiffRecord.from_dict(fields | {"candidates": len(every)}), every


@dataclasses.dataclass(frozen=True)
class SurveyCandidates(Collection[Candidate]):
    """Every source's candidates, one after the other, as each source keeps them (not
    copied into one list: the diff writes them a batch at a time)."""

    parts: tuple[Collection[Candidate], ...]

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts)

    def __iter__(self) -> Iterator[Candidate]:
        return chain.from_iterable(self.parts)

    def __contains__(self, item: object) -> bool:
        return any(item in part for part in self.parts)


def _add_fields(
    into: dict[str, Any], fields: Mapping[str, Any], source: OrphanSource, record: type
) -> None:
    """Add one source's fields of ``record`` (a ``StepRecord`` class) to ``into``. A
    field another source filled, or one the record lacks (it would be dropped, and a
    guard could miss its input), is a programming error."""
    clash = set(fields) & set(into)
    if clash:
        raise ValueError(f"source {source.name} fills fields another filled: {sorted(clash)}")
    unknown = set(fields) - {f.name for f in dataclasses.fields(record)}
    if unknown:
        raise ValueError(
            f"source {source.name} fills fields {record.__name__} lacks: {sorted(unknown)}"
        )
    into.update(fields)


def _owned(source: OrphanSource, targets: Mapping[str, Target]) -> dict[str, Target]:
    """The candidates or registry entries (by prefix) of ``source``'s classes."""
    return {prefix: t for prefix, t in targets.items() if source.owns(t.target_class)}


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
        kept, back = source.hold(_owned(source, candidates), diff)
        usable.update(kept)
        held += back
    return usable, held


def summarize_by_source(
    candidates: Iterable[Candidate], into: dict[str, set[str]] | None = None
) -> dict[str, set[str]]:
    """Each source's summary (``OrphanSource.summarize``, by source name) of candidates
    ``hold`` let through, added to ``into`` (the summaries of earlier batches)."""
    into = {} if into is None else into
    batch = list(candidates)
    for source in SOURCES:
        mine = [c for c in batch if source.owns(c.target_class)]
        into.setdefault(source.name, set()).update(source.summarize(mine))
    return into


def compare_scan_by_source(
    summaries: Mapping[str, set[str]], diff: DiffRecord, before: PhasesRecord, number: int
) -> tuple[dict[str, ScanComparison], dict[str, Any]]:
    """Every source's comparison of this scan with the previous applied one, from its
    summary of the scan's candidates: by source name, and every source's fields for the
    scan's ``PhasesRecord``."""
    compared: dict[str, ScanComparison] = {}
    record: dict[str, Any] = {}
    for source in SOURCES:
        found = source.compare(frozenset(summaries.get(source.name, ())), diff, before, number)
        compared[source.name] = found
        _add_fields(record, found.record, source, PhasesRecord)
    return compared, record


def held_by_source(
    compared: Mapping[str, ScanComparison], target_class: str, ml_name: str
) -> str | None:
    """Why the comparisons hold a target of this class and owner (its source's word;
    None: not held, or a class no source owns)."""
    for source in SOURCES:
        if source.owns(target_class):
            return source.held_by(compared[source.name], target_class, ml_name)
    return None


def compare_by_source(
    candidates: dict[str, Candidate],
    entries: dict[str, RegistryEntry],
    diff: DiffRecord,
    before: PhasesRecord,
    number: int,
) -> Comparison:
    """Every source's comparison of this scan with the previous applied one, over the
    candidates and registered entries it owns, all at once: all held targets by prefix
    (a candidate's reason over its entry's), and every source's fields for the scan's
    ``PhasesRecord``. The phases step asks the same a batch at a time."""
    compared, record = compare_scan_by_source(
        summarize_by_source(candidates.values()), diff, before, number
    )
    held: dict[str, str] = {}
    targets = chain(
        ((p, e.target_class, e.ml_name) for p, e in entries.items()),
        ((p, c.target_class, c.ml_name) for p, c in candidates.items()),
    )
    for prefix, target_class, owner in targets:
        why = held_by_source(compared, target_class, owner)
        if why is not None:
            held[prefix] = why
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
