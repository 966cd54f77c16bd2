"""BookKeeper's ledger znodes as a source of orphans (``orphan_source.OrphanSource``).

Found by the survey (``survey``), re-checked and deleted one znode at a time
(``deleting``): a delete is a metadata change the bookies act on later, so there is no
bulk request and nothing to distribute over Spark's executors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger_gc.bookkeeper import deleting
from ledger_gc.rules.bookkeeper.classify import BK_ORPHAN_CLASSES

if TYPE_CHECKING:
    from ledger_gc.orphan_source import DeleteRequest
    from ledger_gc.rules.orphans.outcomes import RecheckResult
    from ledger_gc.rules.orphans.phases import RegistryEntry


class BookKeeperSource:
    name = "bookkeeper"

    def owns(self, target_class: str) -> bool:
        return target_class in BK_ORPHAN_CLASSES

    def delete(self, request: DeleteRequest, entries: list[RegistryEntry]) -> list[RecheckResult]:
        return deleting.recheck_and_delete(
            request.settings,
            entries,
            run_id=request.run_id,
            now_ms=request.now_ms,
            deleting=request.deleting,
            should_stop=request.should_stop,
        )
