"""The BookKeeper survey's orphan candidates, kept as columns.

A candidate differs from the next in a few numbers: its ledger id, bytes and time, its
class and its owner (a topic with many). As objects (a ``BkCandidate``, its znode's path
and its ints) they were hundreds of bytes each, and the driver held all of them: 500,000
at 10M ledgers, 193 MiB collected from the executors. Here they are 33 bytes each in
flat columns, the few distinct classes once, each owner a reference to the references'
own string (interned; numbered, the merged table's dict of owner -> number was 80 bytes
a topic, more than a candidate's columns); a ``BkCandidate`` is made again only for
whoever iterates (the diff's rows, a batch at a time), with the znode path its id and
the layout give.
"""

from __future__ import annotations

import itertools
import sys
from array import array
from collections.abc import Collection, Iterable, Iterator
from dataclasses import fields
from typing import Any

import numpy as np

from ledger_gc.rules.bookkeeper import ledger_paths
from ledger_gc.rules.bookkeeper.classify import (
    BkLedger,
    Verdict,
    ledger_id_of_target,
    topic_of,
)
from ledger_gc.rules.orphans.classify import Candidate


class BkCandidate(Candidate):
    """A BookKeeper ledger's candidate: the ``Candidate`` of the cycle, whose fields
    also read by name (``candidate["ledger_id"]``) as the dict it replaced. Equal to a
    ``Candidate`` of the same fields, as one."""

    __slots__ = ()  # (as ``Candidate``'s: no ``__dict__``)

    def __getitem__(self, name: str) -> Any:
        if name not in _CANDIDATE_FIELDS:
            raise KeyError(name)
        return getattr(self, name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Candidate):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in _CANDIDATE_FIELDS)

    __hash__ = Candidate.__hash__

    @property
    def bk_ledger_id(self) -> int:
        """Its ledger id (a BookKeeper candidate always has one)."""
        assert self.ledger_id is not None
        return self.ledger_id


_CANDIDATE_FIELDS = frozenset(f.name for f in fields(Candidate))


def make_candidate(
    root: str, layout: str, ledger_id: int, ledger_class: str, owner: str, size: int, ctime_ms: int
) -> BkCandidate:
    """The candidate of one classified ledger (one object: every field is its own)."""
    return BkCandidate(
        target_class=ledger_class,
        ml_name=owner,
        ledger_id=ledger_id,
        objects=1,
        bytes=size,
        newest_ms=ctime_ms,
        oldest_ms=ctime_ms,
        max_ledger_id=ledger_id,
        segment=ledger_paths.ledger_path(root, ledger_id, layout),
    )


class CandidateTable(Collection[BkCandidate]):
    """Candidates of one BookKeeper root and layout, in the order they were added."""

    def __init__(self, root: str, layout: str) -> None:
        self.root = root
        self.layout = layout
        self._ids = array("q")
        self._bytes = array("q")
        self._ctimes = array("q")
        self._classes = array("B")  # index into _class_names
        self._owners: list[str] = []  # (interned: one string a topic, however many rows)
        self._class_names: list[str] = []
        self._class_at: dict[str, int] = {}

    # --- filling it ---------------------------------------------------------------------

    def add(self, ledger: BkLedger, verdict: Verdict) -> None:
        """A classified ledger whose verdict is a candidate."""
        self._ids.append(ledger.ledger_id)
        self._bytes.append(ledger.bytes)
        self._ctimes.append(ledger.ctime_ms)
        self._classes.append(_index(self._class_at, self._class_names, verdict.ledger_class))
        self._owners.append(sys.intern(verdict.owner))

    def extend(self, other: CandidateTable) -> None:
        """Another part's candidates after these (an executor task's, of the same root)."""
        if (other.root, other.layout) != (self.root, self.layout):
            raise ValueError(
                f"candidates of {other.root} ({other.layout}) added to {self.root} ({self.layout})"
            )
        self._ids.extend(other._ids)
        self._bytes.extend(other._bytes)
        self._ctimes.extend(other._ctimes)
        self._classes.extend(
            _renumbered(other._classes, other._class_names, self._class_at, self._class_names)
        )
        self._owners.extend(other._owners)  # (interned as they were unpickled)

    def remove(self, ledger_ids: Collection[int]) -> list[BkCandidate]:
        """Take out the candidates of these ledgers; the ones taken, in order."""
        if not self._ids or not ledger_ids:
            return []
        ids = np.frombuffer(self._ids, dtype=np.int64)
        wanted = np.fromiter((int(i) for i in ledger_ids), dtype=np.int64, count=len(ledger_ids))
        hit = np.isin(ids, wanted)
        if not hit.any():
            return []
        taken = [self._candidate(int(i)) for i in np.flatnonzero(hit)]
        keep = ~hit
        for name, code in (("_ids", "q"), ("_bytes", "q"), ("_ctimes", "q"), ("_classes", "B")):
            column = getattr(self, name)
            kept = np.frombuffer(column, dtype=np.dtype(code))[keep]
            setattr(self, name, array(code, kept.tobytes()))
        self._owners = list(itertools.compress(self._owners, keep.tolist()))
        return taken

    # --- reading it ---------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[BkCandidate]:
        for row in range(len(self._ids)):
            yield self._candidate(row)

    def __contains__(self, item: object) -> bool:
        return isinstance(item, Candidate) and any(c == item for c in self)

    def count(self, ledger_class: str) -> int:
        at = self._class_at.get(ledger_class)
        return 0 if at is None else self._classes.count(at)

    def ids_of(self, ledger_class: str) -> list[int]:
        """The ledger ids of one class's candidates, in order."""
        at = self._class_at.get(ledger_class)
        if at is None:
            return []
        return [lid for lid, cls in zip(self._ids, self._classes, strict=True) if cls == at]

    def topics_among(self, topics: Collection[str]) -> set[str]:
        """Which of ``topics`` some candidate belongs to (``classify.topic_of``)."""
        return {topic for topic in self._topics() if topic in topics} if topics else set()

    def ids_of_topics(self, topics: Collection[str]) -> list[int]:
        """The ledger ids of the candidates that belong to ``topics``, in order."""
        if not topics:
            return []
        return [
            lid for lid, topic in zip(self._ids, self._topics(), strict=True) if topic in topics
        ]

    def not_candidates(self, prefixes: Iterable[str]) -> list[str]:
        """Of these registry prefixes, those no candidate here is (by its ledger's
        znode: a prefix of another root, layout or source is none)."""
        ids = np.sort(np.frombuffer(self._ids, dtype=np.int64))
        out = []
        for prefix in prefixes:
            lid = ledger_id_of_target(prefix, self.root, self.layout)
            if lid is None or not _holds(ids, lid):
                out.append(prefix)
        return out

    # --- pickled to and from executors ---------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_class_at"]  # (made again from the names)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._class_names = [sys.intern(name) for name in self._class_names]
        # (each owner is pickled once a table, and lands on the references' string)
        self._owners = [sys.intern(name) for name in self._owners]
        self._class_at = {name: at for at, name in enumerate(self._class_names)}

    # --- helpers --------------------------------------------------------------------------

    def _candidate(self, row: int) -> BkCandidate:
        return make_candidate(
            self.root,
            self.layout,
            self._ids[row],
            self._class_names[self._classes[row]],
            self._owners[row],
            self._bytes[row],
            self._ctimes[row],
        )

    def _topics(self) -> Iterator[str]:
        """Each candidate's topic, in order: asked of the few topics a survey asks about,
        row by row (a set of every candidate's class and owner was 12 MiB at the top of
        the driver's peak at 10M)."""
        names = self._class_names
        return map(topic_of, (names[code] for code in self._classes), self._owners)


def _index(at: dict[str, int], names: list[str], name: str) -> int:
    found = at.get(name)
    if found is None:
        found = at[name] = len(names)
        names.append(sys.intern(name))
    return found


def _renumbered(
    codes: array[int], names: list[str], at: dict[str, int], into: list[str]
) -> array[int]:
    """Another table's class numbers (``codes`` of ``names``) as the numbers of the
    same names in ``at`` and ``into``, which gain those they lack."""
    code = codes.typecode
    mapping = np.array([_index(at, into, name) for name in names], dtype=np.dtype(code))
    if not len(codes):
        return array(code)
    renumbered = mapping[np.frombuffer(codes, dtype=np.dtype(code))]
    return array(code, renumbered.tobytes())


def _holds(sorted_ids: np.ndarray[Any, Any], ledger_id: int) -> bool:
    at = int(np.searchsorted(sorted_ids, ledger_id))
    return at < len(sorted_ids) and int(sorted_ids[at]) == ledger_id
