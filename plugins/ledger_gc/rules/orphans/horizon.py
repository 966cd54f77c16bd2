"""What the metadata can know of, and orphans newer than that (pure; issue 11, item 1).

A store that registers a ledger in its managed ledger's metadata *before* writing any
block of it (DESIGN.md), allocates ids from one counter (``/ledgers/idgen``, BookKeeper's
sequential-znode generator, ledger/ids.py) and never trims a managed ledger's current
ledger cannot hold a block of a ledger that is at once

* above every ledger id its managed ledger lists or marks (for an orphan partition:
  above every id any managed ledger lists or marks), and
* at or above the chroot's id counter, read *after* the scan's listing (so a writer that
  allocated, registered and wrote during the scan is below it).

Such a block is evidence that the metadata being read is older than the data: a DR
replica, a restored snapshot, a wrong chroot that holds an old copy. Its target is
*held* (never registered, never deleted), and the cycle refuses (guards.STALE_METADATA).

Without an id counter in the chroot (the ids come from elsewhere) only the managed
ledgers' lists are evidence, and a target above them is still held, but the cycle is not
refused: a writer that rolled over between the snapshot and the listing looks the same
for one scan, and the next scan sees its ledger listed.

An orphan ledger *below* its managed ledger's highest id (a legacy delete's leak), or
below the counter (allocated by this store), is the ordinary orphan and stays removable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ledger_gc.rules.metadata.paths import LEDGER_IDGEN_PATH
from ledger_gc.rules.orphans.classify import ORPHAN_LEDGER, Candidate, ManagedLedgerRefs


@dataclass(frozen=True)
class MetadataHorizon:
    """The newest ledgers the scanned metadata can know of."""

    id_counter: int | None  # /ledgers/idgen's next id, read after the listing (None: absent)
    store_high: int | None  # the highest id any managed ledger lists or marks
    ml_high: Mapping[str, int | None]  # per managed ledger of an orphan-ledger candidate

    @classmethod
    def of(
        cls,
        id_counter: int | None,
        store_high: int | None,
        refs: Mapping[str, ManagedLedgerRefs],
    ) -> MetadataHorizon:
        highs = {name: max(r.listed | r.marked, default=None) for name, r in refs.items()}
        return cls(id_counter, store_high, highs)

    def known_high(self, candidate: Candidate) -> int | None:
        """The highest id the metadata relevant to ``candidate`` lists or marks."""
        if candidate.target_class == ORPHAN_LEDGER:
            return self.ml_high.get(candidate.ml_name)
        return self.store_high

    def above_counter(self, ledger_id: int) -> bool:
        return self.id_counter is not None and ledger_id >= self.id_counter

    def newer_than_metadata(self, candidate: Candidate) -> str | None:
        """Why ``candidate`` must be held (None: the metadata knows newer ledgers)."""
        top = candidate.max_ledger_id
        if top is None:
            return None  # a candidate of an older run (no max id recorded): not judged
        known = self.known_high(candidate)
        if known is not None and top <= known:
            return None
        if self.id_counter is not None and top < self.id_counter:
            return None
        whose = (
            f"its managed ledger {candidate.ml_name}"
            if candidate.target_class == ORPHAN_LEDGER
            else "any managed ledger"
        )
        lists = "lists no ledger" if known is None else f"lists ledgers only up to {known}"
        counter = (
            f"the chroot's ledger-id counter ({LEDGER_IDGEN_PATH}) is at {self.id_counter}"
            if self.id_counter is not None
            else f"the chroot has no ledger-id counter ({LEDGER_IDGEN_PATH})"
        )
        return (
            f"ledger {top} of {candidate.ml_name} has data, but {whose} {lists} and "
            f"{counter}: the metadata is older than this data, which is kept"
        )


@dataclass(frozen=True)
class Held:
    """A candidate kept out of the registry because it is newer than the metadata."""

    candidate: Candidate
    prefix: str
    reason: str
    above_counter: bool  # also at/above the id counter: proof the metadata is stale

    def to_dict(self) -> dict[str, object]:
        return {
            "prefix": self.prefix,
            "target_class": self.candidate.target_class,
            "ml_name": self.candidate.ml_name,
            "ledger_id": self.candidate.max_ledger_id,
            "bytes": self.candidate.bytes,
            "reason": self.reason,
        }


def split_held(
    candidates: Mapping[str, Candidate], horizon: MetadataHorizon
) -> tuple[dict[str, Candidate], list[Held]]:
    """The candidates that may go through the phases, and those held (by prefix)."""
    usable: dict[str, Candidate] = {}
    held: list[Held] = []
    for prefix, candidate in candidates.items():
        reason = horizon.newer_than_metadata(candidate)
        if reason is None:
            usable[prefix] = candidate
        else:
            top = candidate.max_ledger_id
            assert top is not None
            held.append(Held(candidate, prefix, reason, horizon.above_counter(top)))
    return usable, sorted(held, key=lambda h: h.prefix)


def proof_of_staleness(held: Iterable[Held]) -> list[Held]:
    """The held targets that prove the metadata stale (above the id counter too)."""
    return [h for h in held if h.above_counter]
