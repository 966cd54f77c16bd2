"""The S3 store's ledger blocks and Pulsar's offloaded segments as one source of orphans.

One source for both: they are listed by one Spark scan, judged against one snapshot of
the managed ledgers' records (``survey_steps``), re-checked against the same records
live, and deleted through the one ``Deleter``; many entries are re-checked and deleted
on Spark's executors (``spark.delete.distributed_delete``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ledger_gc.orphan_source import ScanComparison
from ledger_gc.orphans import survey_steps
from ledger_gc.rules.orphans import guards, horizon, phases, segments
from ledger_gc.rules.orphans.classify import (
    ORPHAN_CLASSES,
    ORPHAN_LEDGER,
    ORPHAN_SEGMENT,
    Candidate,
    ManagedLedgerRefs,
    parse_segment_target,
)
from ledger_gc.s3_orphans import deleting
from ledger_gc.s3_orphans.reading import snapshot_from_rows

if TYPE_CHECKING:
    from ledger_gc.orphan_source import DeleteRequest, Findings, SurveyRequest
    from ledger_gc.orphans.records import DiffRecord, PhasesRecord
    from ledger_gc.rules.orphans.guards import Refusal
    from ledger_gc.rules.orphans.outcomes import RecheckResult
    from ledger_gc.rules.orphans.phases import RegistryEntry


class S3Source:
    """Ledger blocks in the store's bucket and offloaded segments in the offload bucket."""

    name = "s3"

    def survey(self, request: SurveyRequest) -> Findings:
        return survey_steps.survey(request)

    def owns(self, target_class: str) -> bool:
        return target_class in ORPHAN_CLASSES

    def refusals(self, diff: DiffRecord, max_fraction: float, *, force: bool) -> list[Refusal]:
        return guards.evaluate_guards(diff.to_dict(), max_fraction, force=force)

    def hold(
        self, candidates: dict[str, Candidate], diff: DiffRecord
    ) -> tuple[dict[str, Candidate], list[horizon.Held]]:
        """A ledger newer than everything the scanned metadata knows of may be one a
        writer just created: held until the metadata catches up (horizon.py). Per
        candidate: the horizon of a batch has the highs of its candidates' own managed
        ledgers, the only ones a candidate is judged by."""
        return horizon.split_held(candidates, _horizon(diff, candidates.values()))

    def summarize(self, candidates: Iterable[Candidate]) -> set[str]:
        return set()

    def compare(
        self, names: frozenset[str], diff: DiffRecord, before: PhasesRecord, number: int
    ) -> ScanComparison:
        """Nothing across scans: a block ledger is held by this scan's horizon alone."""
        return ScanComparison()

    def held_by(self, comparison: ScanComparison, target_class: str, ml_name: str) -> str | None:
        return None

    def reasons(
        self, entries: list[RegistryEntry], diff: DiffRecord, number: int
    ) -> dict[str, str]:
        facts = SnapshotFacts(diff)
        return {
            entry.prefix: (
                _why_segment_not_orphan(entry, facts.owners, diff, number)
                if entry.target_class == ORPHAN_SEGMENT
                else phases.why_not_orphan(entry, facts.refs.get(entry.ml_name), number)
            )
            for entry in entries
        }

    def delete(self, request: DeleteRequest, entries: list[RegistryEntry]) -> list[RecheckResult]:
        if request.spark is not None and len(entries) > request.distribute_over:
            from ledger_gc.spark.delete import distributed_delete

            return distributed_delete(request.spark, request, entries)
        return deleting.recheck_and_delete(
            request.endpoints,
            entries,
            run_id=request.run_id,
            now_ms=request.now_ms,
            deleting=request.deleting,
            ours=request.ours,
            should_stop=request.should_stop,
        )


class SnapshotFacts:
    """What the survey recorded of its snapshot for the phases step (``survey_steps``'s
    ``classify``): the snapshot itself stays in the survey's application.

    ``refs``: the snapshot rows of the managed ledgers of registered orphan ledgers and
    partitions (their ML rows, and the rows of the registered ledger ids); ``owners``:
    every row that references the ledger id of a registered orphan segment. (The
    horizon's ``ml_high`` is read by ``_horizon``; the prefixes these cover are
    ``DiffRecord.registered``.)
    """

    def __init__(self, diff: DiffRecord) -> None:
        facts = diff.snapshot_facts
        self.refs: dict[str, ManagedLedgerRefs] = dict(
            snapshot_from_rows([tuple(r) for r in facts.get("ml_rows") or []]).managed_ledgers
        )
        self.owners = segments.owners_by_ledger(
            snapshot_from_rows([tuple(r) for r in facts.get("ledger_rows") or []])
        )


def _why_segment_not_orphan(
    entry: RegistryEntry,
    owners: dict[int, list[segments.Owner]],
    diff: DiffRecord,
    number: int,
) -> str:
    """Why a registered orphan segment that this scan did not report is none (any more)."""
    where = parse_segment_target(entry.prefix)
    offload = diff.offload or {}
    if where is None or offload.get("bucket") != where[0]:
        scanned = offload.get("bucket") or "none (LEDGERGC_OFFLOAD_BUCKET unset)"
        return (
            f"scan {number} did not scan offload bucket {where[0] if where else '?'} "
            f"(scanned: {scanned}); tracked again when it is scanned"
        )
    segment = segments.segment_of_target(entry.prefix, offload.get("prefix") or "")
    if segment is not None and entry.ledger_id is not None:
        found = segments.carried(owners, entry.ledger_id, segment.uuid)
        if found:
            return (
                f"ledger {entry.ledger_id} of {found[0].ml_name} carries its offload uuid "
                f"{segment.uuid} again"
            )
    return phases.why_not_orphan(entry, None, number)


def _horizon(diff: DiffRecord, candidates: Iterable[Candidate]) -> horizon.MetadataHorizon:
    """What the run's metadata knows of: its id counter, and the highest listed or
    marked id of each managed ledger that has orphan-ledger candidates (the snapshot
    facts' ``ml_high``)."""
    ml_high: dict[str, int | None] = diff.snapshot_facts.get("ml_high") or {}
    names = {c.ml_name for c in candidates if c.target_class == ORPHAN_LEDGER}
    highs = {name: ml_high[name] for name in names if name in ml_high}
    return horizon.MetadataHorizon(diff.id_counter, diff.metadata_max_ledger_id, highs)
