"""What the orphan engine asks of a source of orphans, and what it hands each step.

A source answers four questions, one per step of the cycle: what it finds (``survey``:
list its candidates, read what references them, classify them by the pure rules), what
its own evidence holds back, what it sees against the previous scan, and why a
registered target is no orphan now (``hold``, ``compare`` and ``reasons``, for phases 1
and 2), which guards its findings trip (``refusals``), and the
live re-check and exact delete (``delete``). The engine does the rest once for all of
them: the records, the registry and its phases, the schedule, the audit, the locks and
the report.

Below both the engine (``orphans``) and the sources (``orphans.sources.S3Source``,
``bookkeeper.source.BookKeeperSource``), so that a source is written against this
interface without importing the engine, and the engine lists its sources without
either importing the other back.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ledger_gc.metadata.read_budget import Reads

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ledger_gc.config.endpoints import Endpoints, ZkEndpoint
    from ledger_gc.metadata.fencing import Fence
    from ledger_gc.orphans.records import DiffRecord, PhasesRecord
    from ledger_gc.orphans.witness import ServerClocks
    from ledger_gc.rules.orphans.classify import Candidate
    from ledger_gc.rules.orphans.guards import Refusal
    from ledger_gc.rules.orphans.horizon import Held
    from ledger_gc.rules.orphans.outcomes import RecheckResult
    from ledger_gc.rules.orphans.phases import RegistryEntry


class Registered(Protocol):
    """The orphan registry as a survey reads it (``orphans.registry.OrphanRegistry``):
    only a source's own targets, streamed, never the whole registry (a large cluster's
    holds 500,000 BookKeeper entries, which no other source needs). What a source reads
    is for the reasons of its registered targets it does not find orphaned (text, never
    a verdict) and for the facts of them its survey records; the engine tells which
    entries the survey saw by the registry's mark read before any source read
    (``DiffRecord.registry_mark``)."""

    def prefixes(self, scheme: str) -> Iterator[str]:
        """The registered prefixes that start with ``scheme`` (e.g. ``bookkeeper:``)."""
        ...

    def entries_of_classes(self, classes: Iterable[str]) -> Iterator[RegistryEntry]:
        """The registered entries of these target classes."""
        ...

    def holds_any(self, classes: Iterable[str]) -> bool:
        """Whether any entry of these target classes is registered."""
        ...


@dataclass(frozen=True)
class SurveyRequest:
    """What every source's survey is given: one run, in one Spark application."""

    endpoints: Endpoints  # what the edge resolved the settings to (and its policy)
    run_id: str
    spark: SparkSession
    clock: Callable[[], int]  # this host's clock, epoch ms (tests give a wrong one)
    # The registry, read by each source for its own targets only (``Registered``).
    registry: Registered
    witness: ServerClocks | None = None  # reads the servers' clocks (tests shift them)
    inventory: str | None = None  # an S3 Inventory instead of listing the bucket
    offload_inventory: str | None = None  # the offload bucket's
    # What one source's survey hands a later one in the same survey (sources run in
    # ``SOURCES`` order): the Pulsar-metadata source's reading of Pulsar's references,
    # which the BookKeeper source uses instead of reading /managed-ledgers again, and
    # the ledger ids its leftovers name. Scratch of this survey only, never stored, and
    # emptied once the last source has surveyed (``sources.survey_sources``).
    shared: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Findings:
    """What one source's survey found: the fields of the run's ``DiffRecord`` that are
    its own (no two sources fill the same field), and its orphan candidates."""

    record: dict[str, Any]
    # (Any collection: the BookKeeper source's are a table that makes each as it is
    # read, not a list of every one.)
    candidates: Collection[Candidate] = field(default_factory=list)


@dataclass(frozen=True)
class Comparison:
    """What the sources' findings say against the previous applied scan's, by target:
    targets held now, with why (their candidates are not registered, their registered
    entries are dropped with that reason), and what the next scan must compare with
    (fields of the ``PhasesRecord``, which the registry keeps with the scan). The
    whole-dict form (``sources.compare_by_source``); the phases step asks by batch."""

    held: dict[str, str] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ScanComparison:
    """One source's comparison of this scan with the previous applied one, made from a
    summary of the scan's candidates (``OrphanSource.summarize``), never from each
    target: the names it holds now (the source's own key, e.g. BookKeeper's topics),
    with why (``OrphanSource.held_by`` says which targets they hold), and what the next
    scan must compare with (fields of the ``PhasesRecord``)."""

    held: dict[str, str] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DeleteRequest:
    """What every source's delete is given by the engine, holding the delete lock."""

    endpoints: Endpoints  # what the edge resolved the settings to (and its policy)
    run_id: str
    now_ms: int
    deleting: bool  # False: re-check and report only (a dry run)
    should_stop: Callable[[], bool]  # a signal, or the delete lock lost: stop before the next
    spark: SparkSession | None = None
    distribute_over: int = 0  # more entries than this go to Spark's executors, if any
    ours: dict[str, Any] = field(default_factory=dict)  # our Pulsar clusters (segments)
    # The delete lock's fence for the sessions to an endpoint (BookKeeper's): a
    # ZooKeeper write sent with it is refused once the lock is lost
    # (``metadata/fencing.py``). None: no lock is held, so no ZooKeeper delete is sent.
    fence_for: Callable[[ZkEndpoint], Fence] | None = None
    # Znodes read on executors per second (a distributed delete adds its tasks' here;
    # the driver's own are counted by the step): the cycle's cost to ZooKeeper.
    executor_reads: Reads = field(default_factory=Reads)


class OrphanSource(Protocol):
    """One kind of storage whose orphans the engine removes."""

    name: str

    def survey(self, request: SurveyRequest) -> Findings:
        """List this source's candidates, read what references them, classify them.
        Reads of the registry only its own targets (``request.registry``), for why
        those it does not find orphaned are none. Fails (raises) rather than return
        findings from a partial read."""
        ...

    def owns(self, target_class: str) -> bool:
        """Whether a target of this class (a candidate, a registry entry) is this
        source's: its to hold back, explain, re-check and delete."""
        ...

    def refusals(self, diff: DiffRecord, max_fraction: float, *, force: bool) -> list[Refusal]:
        """The safety guards over this source's part of the survey's record (pure): a
        refusal of any source stops the whole cycle (nothing registered or deleted)."""
        ...

    def hold(
        self, candidates: dict[str, Candidate], diff: DiffRecord
    ) -> tuple[dict[str, Candidate], list[Held]]:
        """This source's candidates (by prefix) split into those to register and those
        its evidence holds back (with why): e.g. a ledger the store's metadata may not
        know of yet. Held ones are neither registered nor deleted this run. Each
        candidate's fate is its own: the phases step asks a batch at a time (any split
        of the scan's candidates gives the same answer); held ones by prefix."""
        ...

    def summarize(self, candidates: Iterable[Candidate]) -> set[str]:
        """What ``compare`` needs of the whole scan's candidates of this source that
        ``hold`` let through: a few names (topics, managed ledgers), never one item per
        target. Asked a batch at a time; the engine unions the batches' answers."""
        ...

    def compare(
        self, names: frozenset[str], diff: DiffRecord, before: PhasesRecord, number: int
    ) -> ScanComparison:
        """This scan (``number``) against the previous applied one (``before``), inside
        the registry's transaction, from the candidates' summary (``names``). E.g. a
        topic this metadata lacks whose ledgers still grow is another cluster's live
        topic."""
        ...

    def held_by(self, comparison: ScanComparison, target_class: str, ml_name: str) -> str | None:
        """Why ``comparison`` holds a target of this source (a candidate or a registered
        entry, by its class and owner), or None: a held candidate is not registered, a
        held entry is dropped with that reason."""
        ...

    def reasons(
        self, entries: list[RegistryEntry], diff: DiffRecord, number: int
    ) -> dict[str, str]:
        """Why each of these registered targets of this source, which scan ``number``
        did not find orphaned, is no orphan (any more): the text phase 2 records."""
        ...

    def delete(self, request: DeleteRequest, entries: list[RegistryEntry]) -> list[RecheckResult]:
        """Re-check each entry live and delete exactly what is still an orphan (or only
        report it, in a dry run); one result per entry, in the outcomes' one shape. Each
        delete is audited ahead; ``request.should_stop`` is asked before each request."""
        ...
