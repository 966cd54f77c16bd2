"""Pulsar's own metadata as a source of orphans (``orphan_source.OrphanSource``).

Its survey (``survey``) reads both metadata stores and finds each leftover (a deleted
namespace's or tenant's znodes, a dead broker's heartbeat namespace); its delete
(``deleting``) re-checks one leftover live and removes its records leaves first, one
znode at a time, fenced by the delete lock, audited ahead with each znode's bytes and
ACL so that ``ledgergc restore`` can put the tree back.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ledger_gc.bookkeeper.survey import (
    SHARED_LEFTOVER_LEDGERS,
    SHARED_MANAGED_LEDGERS,
    SHARED_REFERENCES,
)
from ledger_gc.orphan_source import Findings, ScanComparison
from ledger_gc.pulsar_metadata import deleting
from ledger_gc.rules.orphans.classify import Candidate
from ledger_gc.rules.orphans.outcomes import HELD, RecheckResult
from ledger_gc.rules.pulsar_metadata import guards as pm_guards
from ledger_gc.rules.pulsar_metadata.classes import PM_ORPHAN_CLASSES, TARGET_SCHEME

if TYPE_CHECKING:
    from ledger_gc.orphan_source import DeleteRequest, SurveyRequest
    from ledger_gc.orphans.records import DiffRecord, PhasesRecord
    from ledger_gc.rules.orphans.guards import Refusal
    from ledger_gc.rules.orphans.horizon import Held
    from ledger_gc.rules.orphans.phases import RegistryEntry

log = logging.getLogger(__name__)


class PulsarMetadataSource:
    name = "pulsar-metadata"

    def survey(self, request: SurveyRequest) -> Findings:
        """Its part of the record is ``pulsar_metadata`` (None: the source is off). Hands
        the BookKeeper survey Pulsar's references (``shared["pulsar_references"]``: read
        once per cycle) and the ledgers its leftovers name (``shared["leftover_ledgers"]``:
        ledger id -> leftover target), whose bytes that survey counts. Lists no
        ``/managed-ledgers`` the S3 source's survey of this cycle listed
        (``shared["managed_ledger_tree"]``)."""
        from ledger_gc.pulsar_metadata.survey import survey

        if request.witness is None:
            raise ValueError("the Pulsar-metadata survey reads ZooKeeper's clock: give a witness")
        found = survey(
            request.endpoints,
            witness=request.witness,
            registered=request.registry.prefixes(TARGET_SCHEME),
            clock=request.clock,
            tree=request.shared.get(SHARED_MANAGED_LEDGERS),
        )
        if found is None:
            return Findings({"pulsar_metadata": None})
        request.shared[SHARED_REFERENCES] = found.references
        request.shared[SHARED_LEFTOVER_LEDGERS] = found.leftover_ledgers()
        manifest = found.manifest
        log.info(
            "orphan cycle %s: Pulsar metadata at %s (configuration store %s): %d namespaces, "
            "%d leftovers, %d held",
            request.run_id,
            manifest.local_hosts,
            manifest.config_hosts,
            manifest.namespaces,
            len(found.leftovers),
            manifest.held_count,
        )
        candidates = [Candidate(**fields) for fields in found.candidates]
        return Findings({"pulsar_metadata": manifest.to_manifest()}, candidates)

    def owns(self, target_class: str) -> bool:
        return target_class in PM_ORPHAN_CLASSES

    def refusals(self, diff: DiffRecord, max_fraction: float, *, force: bool) -> list[Refusal]:
        """Over the survey's ``pulsar_metadata`` part (None: the source was off)."""
        return pm_guards.refusals(diff.pulsar_metadata, force=force)

    def hold(
        self, candidates: dict[str, Candidate], diff: DiffRecord
    ) -> tuple[dict[str, Candidate], list[Held]]:
        """Nothing more: the survey held each leftover a broker's bundle ownership holds
        (the manifest's ``held``) and made no candidate of it."""
        return dict(candidates), []

    def summarize(self, candidates: Iterable[Candidate]) -> set[str]:
        return set()

    def compare(
        self, names: frozenset[str], diff: DiffRecord, before: PhasesRecord, number: int
    ) -> ScanComparison:
        """Nothing across scans: each scan judges every leftover afresh against both
        stores, and a leftover no longer found is corrected (``reasons``)."""
        return ScanComparison()

    def held_by(self, comparison: ScanComparison, target_class: str, ml_name: str) -> str | None:
        return None

    def reasons(
        self, entries: list[RegistryEntry], diff: DiffRecord, number: int
    ) -> dict[str, str]:
        if diff.pulsar_metadata is None:
            off = (
                f"scan {number} did not survey Pulsar's metadata (LEDGERGC_PULSAR_METADATA, "
                "or no /managed-ledgers or /admin/policies); tracked again when it does"
            )
            return {entry.prefix: off for entry in entries}
        found = diff.pulsar_metadata.get("registered_reasons") or {}
        return {
            entry.prefix: found.get(entry.prefix) or f"not a leftover in scan {number}"
            for entry in entries
        }

    def delete(self, request: DeleteRequest, entries: list[RegistryEntry]) -> list[RecheckResult]:
        """Each leftover re-checked live and its znodes removed, leaves first, fenced
        by the delete lock of its store's ensemble (``deleting``). With the source off
        (``LEDGERGC_PULSAR_METADATA=false``) no lock of the configuration store is held:
        its registered leftovers are kept, untouched, until it is on again."""
        if not request.endpoints.pulsar_metadata_on:
            why = "LEDGERGC_PULSAR_METADATA=false: the source is off; kept as registered"
            return [RecheckResult.of(entry, HELD, why) for entry in entries]
        return deleting.recheck_and_delete(
            request.endpoints,
            entries,
            run_id=request.run_id,
            now_ms=request.now_ms,
            deleting=request.deleting,
            should_stop=request.should_stop,
            fence_for=request.fence_for,
        )
