"""BookKeeper's ledger znodes as a source of orphans (``orphan_source.OrphanSource``).

Found by the survey (``survey``), re-checked and deleted one znode at a time
(``deleting``): a delete is a metadata change the bookies act on later, so there is no
bulk request and nothing to distribute over Spark's executors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ledger_gc.bookkeeper import deleting
from ledger_gc.rules.bookkeeper.classify import BK_ORPHAN_CLASSES
from ledger_gc.rules.orphans import guards

if TYPE_CHECKING:
    from ledger_gc.orphan_source import DeleteRequest
    from ledger_gc.rules.orphans.guards import Refusal
    from ledger_gc.rules.orphans.outcomes import RecheckResult
    from ledger_gc.rules.orphans.phases import RegistryEntry


class BookKeeperSource:
    name = "bookkeeper"

    def owns(self, target_class: str) -> bool:
        return target_class in BK_ORPHAN_CLASSES

    def refusals(self, diff: dict[str, Any], max_fraction: float, *, force: bool) -> list[Refusal]:
        """Over the survey's ``bookkeeper`` part (None: the source was off)."""
        return guards.bookkeeper_refusals(diff.get("bookkeeper"), max_fraction, force=force)

    def delete(self, request: DeleteRequest, entries: list[RegistryEntry]) -> list[RecheckResult]:
        return deleting.recheck_and_delete(
            request.settings,
            entries,
            run_id=request.run_id,
            now_ms=request.now_ms,
            deleting=request.deleting,
            should_stop=request.should_stop,
        )
