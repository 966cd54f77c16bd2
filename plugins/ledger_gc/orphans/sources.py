"""The sources of orphans the engine removes, each behind ``orphan_source.OrphanSource``.

A source is one kind of storage that leaks: the S3 store's ledger blocks and Pulsar's
offloaded segments (one bucket listing, one Spark scan, one re-check against the
managed ledgers' records), and BookKeeper's ledger znodes (``bookkeeper.source``). The
engine (registry, phases, schedule, guards, audit, locks, report) is written once and
knows a source only through ``OrphanSource``: which registered targets are its own, and
how to re-check each live and delete exactly it. What a source finds is registered by
target class (``rules/orphans/classify.py``), so the phases and the schedule need no
source at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ledger_gc.bookkeeper.source import BookKeeperSource
from ledger_gc.orphan_source import DeleteRequest, OrphanSource
from ledger_gc.orphans import deleting
from ledger_gc.rules.orphans import guards
from ledger_gc.rules.orphans.classify import ORPHAN_CLASSES
from ledger_gc.rules.orphans.outcomes import FAILED, RecheckResult

if TYPE_CHECKING:
    from ledger_gc.rules.orphans.guards import Refusal
    from ledger_gc.rules.orphans.phases import RegistryEntry


class S3Source:
    """Ledger blocks in the store's bucket and Pulsar's offloaded segments.

    One source for both: they are listed by one Spark scan, re-checked against the same
    managed-ledger records, and deleted through the one ``Deleter``; many entries are
    re-checked and deleted on Spark's executors (``spark.delete.distributed_delete``)."""

    name = "s3"

    def owns(self, target_class: str) -> bool:
        return target_class in ORPHAN_CLASSES

    def refusals(self, diff: dict[str, Any], max_fraction: float, *, force: bool) -> list[Refusal]:
        return guards.evaluate_guards(diff, max_fraction, force=force)

    def delete(self, request: DeleteRequest, entries: list[RegistryEntry]) -> list[RecheckResult]:
        if request.spark is not None and len(entries) > request.distribute_over:
            from ledger_gc.spark.delete import distributed_delete

            return distributed_delete(
                request.spark,
                request.settings,
                entries,
                run_id=request.run_id,
                now_ms=request.now_ms,
                deleting=request.deleting,
                ours=request.ours,
            )
        return deleting.recheck_and_delete(
            request.settings,
            entries,
            run_id=request.run_id,
            now_ms=request.now_ms,
            deleting=request.deleting,
            ours=request.ours,
            should_stop=request.should_stop,
        )


#: Every source, in the order their deletes run.
SOURCES: tuple[OrphanSource, ...] = (S3Source(), BookKeeperSource())


def survey_refusals(diff: dict[str, Any], max_fraction: float, *, force: bool) -> list[Refusal]:
    """Every source's guards over the survey's record, source by source."""
    return [r for source in SOURCES for r in source.refusals(diff, max_fraction, force=force)]


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
