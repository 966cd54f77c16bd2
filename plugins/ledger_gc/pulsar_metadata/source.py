"""Pulsar's own metadata as a source of orphans (``orphan_source.OrphanSource``).

Its survey (``survey``) reads both metadata stores and finds each leftover (a deleted
namespace's or tenant's znodes, a dead broker's heartbeat namespace); its delete
(``deleting``) re-checks one leftover live and removes its records leaves first, one
znode at a time, fenced by the delete lock, audited ahead with each znode's bytes and
ACL so that ``ledgergc restore`` can put the tree back.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ledger_gc.orphan_source import Comparison, Findings
from ledger_gc.pulsar_metadata import deleting
from ledger_gc.rules.pulsar_metadata.classes import PM_ORPHAN_CLASSES

if TYPE_CHECKING:
    from ledger_gc.orphan_source import DeleteRequest, SurveyRequest
    from ledger_gc.orphans.records import DiffRecord, PhasesRecord
    from ledger_gc.rules.orphans.classify import Candidate
    from ledger_gc.rules.orphans.guards import Refusal
    from ledger_gc.rules.orphans.horizon import Held
    from ledger_gc.rules.orphans.outcomes import RecheckResult
    from ledger_gc.rules.orphans.phases import RegistryEntry

log = logging.getLogger(__name__)


class PulsarMetadataSource:
    name = "pulsar-metadata"

    def survey(self, request: SurveyRequest) -> Findings:
        """Its part of the record is ``pulsar_metadata`` (None: the source is off)."""
        return Findings({"pulsar_metadata": None})

    def owns(self, target_class: str) -> bool:
        return target_class in PM_ORPHAN_CLASSES

    def refusals(self, diff: DiffRecord, max_fraction: float, *, force: bool) -> list[Refusal]:
        return []

    def hold(
        self, candidates: dict[str, Candidate], diff: DiffRecord
    ) -> tuple[dict[str, Candidate], list[Held]]:
        return dict(candidates), []

    def compare(
        self,
        candidates: dict[str, Candidate],
        entries: dict[str, RegistryEntry],
        diff: DiffRecord,
        before: PhasesRecord,
        number: int,
    ) -> Comparison:
        return Comparison()

    def reasons(
        self, entries: list[RegistryEntry], diff: DiffRecord, number: int
    ) -> dict[str, str]:
        return {entry.prefix: f"not a leftover in scan {number}" for entry in entries}

    def delete(self, request: DeleteRequest, entries: list[RegistryEntry]) -> list[RecheckResult]:
        """Each leftover re-checked live and its znodes removed, leaves first, fenced
        by the delete lock of its store's ensemble (``deleting``)."""
        return deleting.recheck_and_delete(
            request.endpoints,
            entries,
            run_id=request.run_id,
            now_ms=request.now_ms,
            deleting=request.deleting,
            should_stop=request.should_stop,
            fence_for=request.fence_for,
        )
