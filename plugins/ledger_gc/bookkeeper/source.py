"""BookKeeper's ledger znodes as a source of orphans (``orphan_source.OrphanSource``).

Found by the survey (``survey``: Pulsar's references, then BookKeeper's ledgers,
classified), re-checked and deleted one znode at a time (``deleting``): a delete is a
metadata change the bookies act on later, so there is no bulk request and nothing to
distribute over Spark's executors.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ledger_gc.bookkeeper import deleting
from ledger_gc.orphan_source import Findings, ScanComparison
from ledger_gc.rules.bookkeeper.classify import BK_TARGET_CLASSES, TARGET_SCHEME, topic_of
from ledger_gc.rules.orphans import guards
from ledger_gc.rules.orphans.classify import Candidate

if TYPE_CHECKING:
    from ledger_gc.orphan_source import DeleteRequest, SurveyRequest
    from ledger_gc.orphans.records import DiffRecord, PhasesRecord
    from ledger_gc.rules.orphans.guards import Refusal
    from ledger_gc.rules.orphans.horizon import Held
    from ledger_gc.rules.orphans.outcomes import RecheckResult
    from ledger_gc.rules.orphans.phases import RegistryEntry

log = logging.getLogger(__name__)


class BookKeeperSource:
    name = "bookkeeper"

    def survey(self, request: SurveyRequest) -> Findings:
        """Its part of the record is ``bookkeeper``: the survey's totals, or None when
        the source is off (no LAYOUT under ``auto``, or ``LEDGERGC_BOOKKEEPER=false``)."""
        from ledger_gc.bookkeeper.survey import survey

        run_id = request.run_id
        found = survey(
            request.endpoints,
            request.registry.prefixes(TARGET_SCHEME),
            spark=request.spark,
            run_id=run_id,
            shared=request.shared,
        )
        if found is None:
            return Findings({"bookkeeper": None})
        log.info(
            "orphan cycle %s: BookKeeper at %s%s: %d ledgers, %d orphan candidates",
            run_id,
            found.hosts,
            found.root,
            found.ledgers,
            len(found.candidates),
        )
        # (As the survey keeps them, a table: each made as the diff writes it.)
        return Findings({"bookkeeper": found.to_manifest()}, found.candidates)

    def owns(self, target_class: str) -> bool:
        return target_class in BK_TARGET_CLASSES

    def refusals(self, diff: DiffRecord, max_fraction: float, *, force: bool) -> list[Refusal]:
        """Over the survey's ``bookkeeper`` part (None: the source was off)."""
        return guards.bookkeeper_refusals(diff.bookkeeper, max_fraction, force=force)

    def hold(
        self, candidates: dict[str, Candidate], diff: DiffRecord
    ) -> tuple[dict[str, Candidate], list[Held]]:
        """Nothing more: the survey judged each ledger against BookKeeper's own horizon
        and held what it must (rules/bookkeeper/classify.py); the block store's (this
        chroot's lists and id counter) says nothing about BookKeeper's ledgers."""
        return dict(candidates), []

    def summarize(self, candidates: Iterable[Candidate]) -> set[str]:
        """The topics of its candidates (``live_elsewhere`` keeps a carried name only
        while a ledger of it is still a candidate)."""
        return {topic_of(c.target_class, c.ml_name) for c in candidates if c.bookkeeper}

    def compare(
        self, names: frozenset[str], diff: DiffRecord, before: PhasesRecord, number: int
    ) -> ScanComparison:
        """Ledgers of a topic another Pulsar cluster sharing this BookKeeper writes are
        held (``live_elsewhere``, by topic; ``held_by``), candidates and registered
        entries alike; the next scan compares with this one's highest ledger per gone
        topic."""
        gone_high = (diff.bookkeeper or {}).get("gone_topic_high") or {}
        elsewhere = live_elsewhere(names, before, gone_high, number)
        for name, why in elsewhere.items():
            log.warning("scan %d holds BookKeeper ledgers of %s: %s", number, name, why)
        record = {"bookkeeper_live_elsewhere": elsewhere, "bookkeeper_gone_topic_high": gone_high}
        return ScanComparison(elsewhere, record)

    def held_by(self, comparison: ScanComparison, target_class: str, ml_name: str) -> str | None:
        if target_class not in BK_TARGET_CLASSES:
            return None
        return comparison.held.get(topic_of(target_class, ml_name))

    def reasons(
        self, entries: list[RegistryEntry], diff: DiffRecord, number: int
    ) -> dict[str, str]:
        if diff.bookkeeper is None:
            off = (
                f"scan {number} did not survey BookKeeper (LEDGERGC_BOOKKEEPER, or no LAYOUT "
                "under LEDGERGC_BK_LEDGERS_ROOT); tracked again when it does"
            )
            return {entry.prefix: off for entry in entries}
        found = diff.bookkeeper.get("registered_reasons") or {}
        return {
            entry.prefix: found.get(entry.prefix) or f"not orphaned in scan {number}"
            for entry in entries
        }

    def delete(self, request: DeleteRequest, entries: list[RegistryEntry]) -> list[RecheckResult]:
        return deleting.recheck_and_delete(
            request.endpoints,
            entries,
            run_id=request.run_id,
            now_ms=request.now_ms,
            deleting=request.deleting,
            should_stop=request.should_stop,
            fence_for=request.fence_for,
        )


def live_elsewhere(
    names: frozenset[str],
    latest: PhasesRecord,
    gone_topic_high: dict[str, int],
    number: int,
) -> dict[str, str]:
    """Topic names whose BookKeeper ledgers are someone's live topic, and why.

    Pulsar's tags carry no cluster name (Pulsar 17213), so another cluster's topic
    looks like a deleted topic of this one. Ledger ids only grow, and a deleted topic
    gains no ledgers: a topic this metadata lacks whose highest tagged ledger id
    (``gone_topic_high``, held ledgers included) is higher than the previous applied
    scan saw is a live topic somewhere (DESIGN.md "Shared BookKeeper"). Once seen, a
    name stays held (each applied scan's result carries it) while any ledger of it is
    still a candidate (``names``: the topics of this scan's candidates, ``summarize``).
    An idle topic gains nothing; its open ledger holds it instead
    (``bookkeeper.survey``)."""
    carried = dict(latest.bookkeeper_live_elsewhere)
    before = dict(latest.bookkeeper_gone_topic_high)
    found: dict[str, str] = {}
    for topic, high in gone_topic_high.items():
        if topic in before and high > before[topic]:
            found[topic] = (
                f"topic {topic} is not in this metadata, yet it gained ledger {high} since "
                f"the previous scan (whose newest was {before[topic]}; scan {number}): "
                "another Pulsar cluster sharing this BookKeeper writes it. Held; set "
                "LEDGERGC_BK_SHARED=true if BookKeeper is shared"
            )
    found.update({name: why for name, why in carried.items() if name in names})
    return found
