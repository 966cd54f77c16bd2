"""What the orphan engine asks of a source of orphans, and what it hands each delete.

Below both the engine (``orphans``) and the sources (``orphans.sources.S3Source``,
``bookkeeper.source.BookKeeperSource``), so that a source is written against this
interface without importing the engine, and the engine lists its sources without
either importing the other back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ledger_gc.rules.orphans.guards import Refusal
    from ledger_gc.rules.orphans.outcomes import RecheckResult
    from ledger_gc.rules.orphans.phases import RegistryEntry
    from ledger_gc.settings import Settings


@dataclass(frozen=True)
class DeleteRequest:
    """What every source's delete is given by the engine, holding the delete lock."""

    settings: Settings
    run_id: str
    now_ms: int
    deleting: bool  # False: re-check and report only (a dry run)
    should_stop: Callable[[], bool]  # a signal, or the delete lock lost: stop before the next
    spark: SparkSession | None = None
    distribute_over: int = 0  # more entries than this go to Spark's executors, if any
    ours: dict[str, Any] = field(default_factory=dict)  # our Pulsar clusters (segments)


class OrphanSource(Protocol):
    """One kind of storage whose orphans the engine removes."""

    name: str

    def owns(self, target_class: str) -> bool:
        """Whether a registry entry of this class is this source's to re-check and delete."""
        ...

    def refusals(self, diff: dict[str, Any], max_fraction: float, *, force: bool) -> list[Refusal]:
        """The safety guards over this source's part of the survey's record (pure): a
        refusal of any source stops the whole cycle (nothing registered or deleted)."""
        ...

    def delete(self, request: DeleteRequest, entries: list[RegistryEntry]) -> list[RecheckResult]:
        """Re-check each entry live and delete exactly what is still an orphan (or only
        report it, in a dry run); one result per entry, in the outcomes' one shape. Each
        delete is audited ahead; ``request.should_stop`` is asked before each request."""
        ...
