"""Ledger id -> one of a few labels, in two flat arrays: what the classification looks up
for every ledger (``Classifier.referenced``: which record names it; ``owner_of``: which
managed ledger lists it), at 12 bytes a ledger instead of a dict entry, an int object and
a string each (about 200 bytes): at 10,000,000 ledgers the difference between 120 MB and
2 GB in every process that classifies (issue 36).

The labels are few (one per record that names ledgers: a managed ledger, a cursor, a
schema), so each ledger keeps only the label's number. ``within`` cuts the index to an
id range: a Spark task over some leaf directories gets only their ledgers' entries.
"""

from __future__ import annotations

import heapq
import sys
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from collections.abc import Set as AbstractSet
from itertools import pairwise
from pickle import PickleBuffer
from typing import Any, SupportsIndex, TypeVar, overload

K = TypeVar("K")


class LedgerIndex:
    """Sorted unique ledger ids, each with the number of its label."""

    __slots__ = ("_codes", "_ids", "_labels")

    def __init__(self, ids: array, codes: array, labels: Sequence[str]) -> None:
        self._ids = ids  # array('q'), sorted, unique
        self._codes = codes  # array('i'), the label of each id
        # (a part's ``Labels`` as they are: a list of them made every label)
        self._labels = labels if isinstance(labels, Labels) else list(labels)

    @classmethod
    def build(cls, groups: Iterable[tuple[str, Iterable[int]]]) -> LedgerIndex:
        """From (label, ledger ids) groups; an id in several groups keeps the first's
        label (as ``PulsarReferences.referenced``: the first record found names it).

        Gathered in two flat arrays, then sorted by numpy (stable: of equal ids the
        earlier group's first), never as Python ints: at a million ledgers, 0.05 s
        instead of 0.5 s for the runs sorted and merged in Python, which the steady
        state's survey paid twice a cycle."""
        labels: list[str] = []
        ids = array("q")
        codes = array("i")
        for label, group in groups:
            before = len(ids)
            ids.extend(group)
            if len(ids) > before:
                codes.extend(array("i", (len(labels),)) * (len(ids) - before))
                labels.append(label)
        return cls(*_first_of_each(ids, codes), labels)

    def get(self, ledger_id: int, default: str | None = None) -> str | None:
        at = _position(self._ids, ledger_id)
        return default if at is None else self._labels[self._codes[at]]

    def __contains__(self, ledger_id: object) -> bool:
        return _position(self._ids, ledger_id) is not None

    def __getitem__(self, ledger_id: int) -> str:
        label = self.get(ledger_id)
        if label is None:
            raise KeyError(ledger_id)
        return label

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids)

    def __bool__(self) -> bool:
        return len(self._ids) > 0

    @property
    def high(self) -> int | None:
        """The highest id (None: empty)."""
        return self._ids[-1] if self._ids else None

    def within(self, spans: Iterable[tuple[int, int]]) -> LedgerIndex:
        """The entries in ``spans`` (sorted, disjoint ``(low, high)``: ``low <= id <
        high``), with their labels only."""
        ids = array("q")
        codes = array("i")
        for low, high in spans:
            start = bisect_left(self._ids, low)
            end = bisect_left(self._ids, high)
            ids.extend(self._ids[start:end])
            codes.extend(self._codes[start:end])
        used = sorted(set(codes))
        renumber = {old: new for new, old in enumerate(used)}
        labels = self._labels
        return LedgerIndex(
            ids,
            array("i", (renumber[c] for c in codes)),
            labels.picked(used) if isinstance(labels, Labels) else [labels[c] for c in used],
        )

    def items(self) -> Iterator[tuple[int, str]]:
        labels = self._labels
        for lid, code in zip(self._ids, self._codes, strict=True):
            yield lid, labels[code]

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, tuple[Any, ...]]:
        if int(protocol) < 5:
            return (LedgerIndex, (self._ids, self._codes, self._labels))
        # (the arrays handed to the pickler as they are: an array pickles as a bytes
        # copy of itself, 6 MB in the driver for a Spark task's cut as it was packed)
        return (_ledger_index, (PickleBuffer(self._ids), PickleBuffer(self._codes), self._labels))


def _ledger_index(ids: Any, codes: Any, labels: Sequence[str]) -> LedgerIndex:
    """A ``LedgerIndex`` as pickled from protocol 5 (its arrays' bytes)."""
    made_ids, made_codes = array("q"), array("i")
    made_ids.frombytes(ids)
    made_codes.frombytes(codes)
    return LedgerIndex(made_ids, made_codes, labels)


class Labels(Sequence[str]):
    """A part's labels, each made when asked from its kind (which template) and its key
    (what fills it: the references' own name, or a (topic, cursor) pair). With ledger
    ids from one counter every part holds a ledger of every topic, and its labels as
    strings were ``listed by <name>`` for each: 8.5 MB a part at 100,000 topics, made
    by the driver as it cut and packed the parts, which asks none. A task that asks
    one keeps it (each of its live ledgers asks its own: a label made a ledger was a
    quarter of a part's classification)."""

    __slots__ = ("_keys", "_kinds", "_made", "_templates")

    def __init__(self, templates: Sequence[str], kinds: bytes | array, keys: list[Any]) -> None:
        self._templates = tuple(templates)
        self._kinds = kinds  # a byte a label: its template
        self._keys = keys
        self._made: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._keys)

    def __getitem__(self, at: Any) -> Any:
        if isinstance(at, slice):
            return [self[i] for i in range(*at.indices(len(self)))]
        made = self._made.get(at)
        if made is None:
            made = self._made[at] = _label(self._templates[self._kinds[at]], self._keys[at])
        return made

    def picked(self, at: Iterable[int]) -> Labels:
        """These labels (by number, read once), still unmade."""
        kinds, keys = bytearray(), []
        for i in at:
            kinds.append(self._kinds[i])
            keys.append(self._keys[i])
        return Labels(self._templates, bytes(kinds), keys)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (Labels, (self._templates, self._kinds, self._keys))


def _label(template: str, key: Any) -> str:
    """A label of ``template`` filled with ``key`` (a pair fills two places)."""
    return template.format(*key) if isinstance(key, tuple) else template.format(key)


class LedgerIds(AbstractSet[int]):
    """An immutable set of ledger ids in one sorted array: a managed ledger's listed
    ids, the ids a survey found. Kept as the first id and each id's four-byte offset
    from it where they span less than 2**32 (a cluster's ids rarely span four billion;
    the survey's driver holds every topic's for its whole run, 80 MB at 10M as eight
    bytes an id), else eight bytes an id (a frozenset of ints costs about 60). The
    offsets are a ``bytes``, read through a view: an ``array`` object was 47 bytes
    more a topic. Compares equal to the frozenset of the same ids, and mixes with sets
    (``|``, ``&``, ``-``)."""

    __slots__ = ("_base", "_ids")

    def __init__(self, ids: Iterable[int] = ()) -> None:
        if isinstance(ids, LedgerIds):
            self._base: int = ids._base
            self._ids: array | bytes = ids._ids  # array('q') of ids, or uint32 offsets
            return
        if isinstance(ids, array) and ids.typecode == "q" and _strictly_sorted(ids):
            values: Sequence[int] = ids
        else:
            values = sorted(set(ids))
        if not values or values[-1] - values[0] < _OFFSETS_SPAN:
            self._base = values[0] if values else 0
            self._ids = array("I", [lid - self._base for lid in values]).tobytes()
        else:
            self._base = 0
            self._ids = values if isinstance(values, array) else array("q", values)

    @classmethod
    def merged(cls, runs: Iterable[Sequence[int]]) -> LedgerIds:
        """From runs each sorted (a directory's ids): merged without a list of them all."""
        out = array("q")
        last = None
        for lid in heapq.merge(*runs):
            if lid != last:
                out.append(lid)
                last = lid
        return cls(out)

    @classmethod
    def of_offsets(cls, base: int, offsets: bytes) -> LedgerIds:
        """The set of ``base`` plus each four-byte offset (``offsets``' own form)."""
        return _ledger_ids(base, offsets)

    @property
    def itemsize(self) -> int:
        """Bytes an id: 4 (offsets from the first) or 8."""
        return self._ids.itemsize if isinstance(self._ids, array) else 4

    def _values(self) -> Sequence[int]:
        """The ids (eight bytes each) or their offsets, as a sequence."""
        return self._ids if isinstance(self._ids, array) else memoryview(self._ids).cast("I")

    def _offset(self, ledger_id: int) -> int | None:
        """``ledger_id`` as this set keeps it (None: it cannot be here)."""
        if isinstance(self._ids, array):
            return ledger_id
        offset = ledger_id - self._base
        return offset if 0 <= offset < _OFFSETS_SPAN else None

    def __contains__(self, ledger_id: object) -> bool:
        if not isinstance(ledger_id, int):
            return False
        offset = self._offset(ledger_id)
        return offset is not None and _position(self._values(), offset) is not None

    def __iter__(self) -> Iterator[int]:
        if isinstance(self._ids, array):
            return iter(self._ids)
        return map(self._base.__add__, self._values())

    def __len__(self) -> int:
        return len(self._ids) if isinstance(self._ids, array) else len(self._ids) // 4

    def __hash__(self) -> int:
        return self._hash()

    def __repr__(self) -> str:
        return f"LedgerIds({list(self)!r})"

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> AbstractSet[Any]:
        return cls(it)

    def __sub__(self, other: AbstractSet[Any]) -> LedgerIds:  # type: ignore[override]
        if not other:
            return self
        return LedgerIds(array("q", (lid for lid in self if lid not in other)))

    def at_least(self, low: int, below: int | None = None) -> array:
        """The ids from ``low`` on (and under ``below``), in order."""
        ids = self.sorted_array()
        start = bisect_left(ids, low)
        end = len(ids) if below is None else bisect_left(ids, below)
        return ids[start:end]

    def sorted_array(self) -> array:
        """The ids, sorted, as an ``array('q')``: this set's own (do not change it), or
        made from its offsets (a copy: ask once, and let it go)."""
        if isinstance(self._ids, array):
            return self._ids
        out = array("q")
        out.frombytes(self.numpy().tobytes())
        return out

    def offsets(self) -> tuple[int, bytes]:
        """The first id and the four-byte offsets' bytes, as kept (``itemsize`` 4)."""
        if isinstance(self._ids, array):
            raise ValueError("ledger ids kept as eight bytes each have no offsets")
        return self._base, self._ids

    def numpy(self) -> Any:
        """The ids as a numpy ``int64`` array: a view of this set's own, or made from its
        offsets."""
        import numpy as np  # (here: the rules import without it until ids are widened)

        if isinstance(self._ids, array):
            return np.frombuffer(self._ids, dtype=np.int64)
        return np.frombuffer(self._ids, dtype=np.uint32).astype(np.int64) + self._base

    @property
    def high(self) -> int | None:
        """The highest id (None: empty)."""
        return self._base + self._values()[-1] if self._ids else None

    def __reduce__(self) -> tuple[Any, tuple[int, array | bytes]]:
        return (_ledger_ids, (self._base, self._ids))


#: What four-byte offsets from a set's first id reach.
_OFFSETS_SPAN = 2**32


def _ledger_ids(base: int, ids: array | bytes) -> LedgerIds:
    """A ``LedgerIds`` as pickled (its first id and offsets, or its ids)."""
    made = LedgerIds.__new__(LedgerIds)
    # (offsets pickled as an array('I') before they were a bytes)
    made._base, made._ids = (
        base,
        ids.tobytes() if isinstance(ids, array) and ids.typecode == "I" else ids,
    )
    return made


#: Ids of the references ``GroupTable.indexes`` cuts in one pass (12 bytes each held
#: till their parts' indexes are made): about two Spark tasks' parts (``PART_LEDGERS``).
#: With ids from one counter a pass reads every topic's ids; since the survey's driver
#: reads them from its spill (``bookkeeper/id_spill.py``), at 100,000 topics one part a
#: pass took 21 s and two 12 s (5.7 MiB more at their peak, 33.5 MiB, which the spill
#: more than pays: 40 MiB at 10M ledgers).
IDS_AT_ONCE = 500_000
#: Ids numpy takes in one pass where many groups' ids are asked at once (a chunk of the
#: references' records placed in the parts' spans; of the topics' listed ids checked).
_IDS_A_CHUNK = 65_536


class GroupTable:
    """Groups of ledger ids (``LedgerIndex.build``'s: each record and the ledgers it
    names), each group's ids kept sorted once, so that the references are cut to every
    Spark task's spans in one pass (``assign``) rather than asking every record once a
    task: at 10,000,000 ledgers, 100,000 records and 40 tasks.

    A group is its kind (which of ``templates`` makes its label), its key (what the
    template is filled with: a name, a (topic, cursor) pair) and its ids, each as the
    references hold it: a group's label is made only where a part has the group, and
    no object of the table's own is made a group (a label, a tuple, a one-id array
    each were 30 MB at 100,000 topics, beside the references, at the driver's peak)."""

    __slots__ = ("_ids", "_keys", "_kinds", "_templates")

    def __init__(
        self,
        groups: Iterable[tuple[int, Any, Iterable[int] | int]],
        templates: Sequence[str] = ("{}",),
    ) -> None:
        self._templates = list(templates)
        self._kinds = array("B")
        self._keys: list[Any] = []
        # (a managed ledger's ``LedgerIds`` as it is, widened to eight bytes an id only
        # while a part is cut from it; one id as the int it is)
        self._ids: list[LedgerIds | array | int] = []
        for kind, key, ids in groups:
            kept = _kept(ids)
            if kept is not None:
                self._kinds.append(kind)
                self._keys.append(key)
                self._ids.append(kept)

    @classmethod
    def labelled(cls, groups: Iterable[tuple[str, Iterable[int]]]) -> GroupTable:
        """From (label, ids) groups, each label as it is."""
        return cls((0, label, ids) for label, ids in groups)

    def __len__(self) -> int:
        return len(self._ids)

    def ids(self, at: int) -> Iterable[int]:
        """A group's ids (its one id as a tuple of it)."""
        ids = self._ids[at]
        return (ids,) if isinstance(ids, int) else ids

    def label(self, at: int) -> str:
        return _label(self._templates[self._kinds[at]], self._keys[at])

    def indexes(
        self, parts: Sequence[Sequence[tuple[int, int]]], ids_at_once: int | None = None
    ) -> Iterator[LedgerIndex]:
        """Each part's index (its sorted, disjoint spans), in turn: ``LedgerIndex.build``
        of the groups cut to the part, as if built whole and cut (``within``)."""
        for picked in self._picks(parts, ids_at_once):
            yield self._index(picked)

    def index_pairs(
        self,
        parts: Sequence[Sequence[tuple[int, int]]],
        owner_kind: int,
        ids_at_once: int | None = None,
    ) -> Iterator[tuple[LedgerIndex, LedgerIndex]]:
        """Each part's index (``indexes``) and its owners: each id of the part that a
        group of ``owner_kind`` has, labelled with the last such group's key as it is
        (``LedgerIndex.build`` of those groups, the last first, cut to the part). Both
        from one pick of the part's ids: each group's ids are read once a pass for the
        two, and one part's ids held, not two."""
        for picked in self._picks(parts, ids_at_once):
            yield self._index(picked, owner_kind)

    def _picks(
        self, parts: Sequence[Sequence[tuple[int, int]]], ids_at_once: int | None
    ) -> Iterator[list[Any]]:
        """Each part's ids and each id's group, in turn (``_picked``'s, a list its
        index empties).

        Pulsar hands out ledger ids from one counter, so a topic's ledgers lie among
        every other topic's and its record reaches into every part: cut a group a part
        at a time, the driver widened and cut each record once a part (at 100,000
        topics and 40 parts, 27 s). Here the groups' ids are read a chunk of groups at
        a time and placed in the parts by one ``searchsorted`` (numpy's work, not a
        Python call a group): once to learn the parts each group reaches and how many
        ids each part gets, then once a pass, each pass making the next parts whose ids
        together are about ``ids_at_once`` (``IDS_AT_ONCE``; held till their indexes
        are made, 12 bytes an id) from the groups that reach them."""
        import numpy as np  # (here: the rules import without it until a table is cut)

        at_once = IDS_AT_ONCE if ids_at_once is None else ids_at_once
        spans = _span_arrays(parts)
        first, last, sizes = self._reaching(spans, len(parts))
        at = 0
        while at < len(parts):
            end, held = at + 1, sizes[at]
            while end < len(parts) and held + sizes[end] <= at_once:
                held += sizes[end]
                end += 1
            among = _ints(np.flatnonzero((first < end) & (last >= at)))
            picked = self._picked(among, spans, at, sizes[at:end])
            while picked:
                yield picked.pop(0)
            at = end

    def _picked(
        self, among: Iterable[int], spans: tuple[Any, Any, Any], at: int, sizes: Sequence[int]
    ) -> list[list[Any]]:
        """The ids the groups ``among`` have in parts ``at``, ``at + 1``... (``sizes``
        of them, as ``_reaching`` counted) and each id's group: each part's two arrays,
        in a list its index empties."""
        import numpy as np

        picked: list[list[Any]] = [[np.empty(n, np.int64), np.empty(n, np.intc)] for n in sizes]
        filled = [0] * len(sizes)
        for ids, groups, part_of in self._placed(among, spans):
            for slot, (part_ids, part_groups) in enumerate(picked):
                mine = part_of == at + slot
                count = int(np.count_nonzero(mine))
                part_ids[filled[slot] : filled[slot] + count] = ids[mine]
                part_groups[filled[slot] : filled[slot] + count] = groups[mine]
                filled[slot] += count
        assert filled == list(sizes), (filled, sizes)  # (as counted)
        return picked

    def _reaching(self, spans: tuple[Any, Any, Any], parts: int) -> tuple[Any, Any, list[int]]:
        """The first and last part each group has ids in (a group in none: first
        ``parts``, last -1), and how many ids of the groups each part has (with
        repeats): 8 bytes a group, where a list of the groups of each part was 4 bytes
        a group a part (16 MB at 100,000 topics and 40 parts, each reaching all)."""
        import numpy as np

        first = np.full(len(self._ids), parts, dtype=np.intc)
        last = np.full(len(self._ids), -1, dtype=np.intc)
        sizes = np.zeros(parts, dtype=np.int64)
        for _, groups, part_of in self._placed(range(len(self._ids)), spans):
            inside = part_of >= 0
            part_of, groups = part_of[inside], groups[inside]
            if not len(groups):
                continue
            sizes += np.bincount(part_of, minlength=parts)
            # (a group's ids are all in one chunk: each group's least and greatest part)
            order = np.argsort(groups, kind="stable")
            groups, part_of = groups[order], part_of[order]
            starts = np.flatnonzero(np.concatenate(([True], groups[1:] != groups[:-1])))
            first[groups[starts]] = np.minimum.reduceat(part_of, starts)
            last[groups[starts]] = np.maximum.reduceat(part_of, starts)
        return first, last, sizes.tolist()

    def _placed(
        self, among: Iterable[int], spans: tuple[Any, Any, Any]
    ) -> Iterator[tuple[Any, Any, Any]]:
        """The ids of the groups ``among`` (ascending numbers), a chunk of groups at a
        time: each id, its group, and its part (-1: in no part's spans). A managed
        ledger's four-byte offsets are joined as they are kept and widened by numpy,
        not a call a group."""
        import numpy as np

        lows, lasts, owner = spans
        narrow: list[bytes] = []
        bases: list[int] = []
        narrow_at: list[int] = []
        others: list[Any] = []
        others_at: list[int] = []
        pending = 0

        def chunk() -> tuple[Any, Any, Any]:
            lengths = [len(offsets) // 4 for offsets in narrow]
            ids = np.frombuffer(b"".join(narrow), np.uint32).astype(np.int64)
            ids += np.repeat(np.array(bases, np.int64), lengths)
            groups = np.repeat(np.array(narrow_at, np.intc), lengths)
            if others:
                ids = np.concatenate([ids, *others])
                lengths = [len(wide) for wide in others]
                groups = np.concatenate([groups, np.repeat(np.array(others_at, np.intc), lengths)])
            span = np.searchsorted(lows, ids, side="right") - 1
            inside = span >= 0
            inside[inside] = ids[inside] <= lasts[span[inside]]
            for kept in (narrow, bases, narrow_at, others, others_at):
                kept.clear()
            return ids, groups, np.where(inside, owner[np.maximum(span, 0)], -1)

        if not len(lows):
            return
        for number in among:
            ids = self._ids[number]
            if isinstance(ids, LedgerIds) and ids.itemsize == 4:
                base, offsets = ids.offsets()
                bases.append(base)
                narrow.append(offsets)
                narrow_at.append(number)
                pending += len(offsets) // 4
            else:
                wide = np.array([ids], np.int64) if isinstance(ids, int) else _wide(ids)
                others.append(wide)
                others_at.append(number)
                pending += len(wide)
            if pending >= _IDS_A_CHUNK:
                yield chunk()
                pending = 0
        if narrow or others:
            yield chunk()

    @overload
    def _index(self, picked: list[Any]) -> LedgerIndex: ...
    @overload
    def _index(self, picked: list[Any], owner_kind: int) -> tuple[LedgerIndex, LedgerIndex]: ...

    def _index(
        self, picked: list[Any], owner_kind: int | None = None
    ) -> LedgerIndex | tuple[LedgerIndex, LedgerIndex]:
        """A part's index from its ids and each one's group (``picked``, emptied: its
        arrays let go as they are sorted); of an id in several groups, the first
        group's label, as ``LedgerIndex.build``. With ``owner_kind``, its owners too
        (``index_pairs``): of the id's groups of that kind, the last one's key.

        The driver makes a part's at a time, and its top was here: the sort's order,
        the sorted copies and each index's made twice, 60 bytes an id of the part. So
        each id and its group are sorted as one number, in place, where they fit in
        one (``_sorted_pairs``), and each index is written into its arrays once."""
        import numpy as np

        ids, groups = picked
        picked.clear()
        base, offsets, groups = _sorted_pairs(ids, groups)
        del ids
        first = _runs(offsets, last=False)
        index = self._made(base, offsets[first], groups[first])
        del first
        if owner_kind is None:
            return index
        owned = np.frombuffer(self._kinds, np.uint8)[groups] == owner_kind
        offsets, groups = offsets[owned], groups[owned]  # (the sorted ones let go)
        del owned
        last = _runs(offsets, last=True)
        return index, self._made(base, offsets[last], groups[last], as_keys=True)

    def _made(self, base: int, offsets: Any, groups: Any, as_keys: bool = False) -> LedgerIndex:
        """An index of unique sorted ids (``base`` plus ``offsets``), each labelled by
        its group (by the group's key as it is, ``as_keys``), written into its arrays."""
        import numpy as np

        if not len(offsets):
            return LedgerIndex(array("q"), array("i"), [])
        used = np.unique(groups)
        code_of = np.empty(int(used[-1]) + 1, np.intc)
        code_of[used] = np.arange(len(used), dtype=np.intc)
        out_ids, out_codes = array("q", bytes(8)) * len(offsets), array("i", bytes(4)) * len(groups)
        np.add(offsets, np.int64(base), out=np.frombuffer(out_ids, np.int64))
        codes = np.frombuffer(out_codes, np.intc)
        for at in range(0, len(groups), _IDS_A_CHUNK):  # (numpy widens a chunk's to intp)
            np.take(code_of, groups[at : at + _IDS_A_CHUNK], out=codes[at : at + _IDS_A_CHUNK])
        del codes, code_of
        if as_keys or self._templates == ["{}"]:  # (each key its label as it is: a name)
            return LedgerIndex(out_ids, out_codes, [self._keys[g] for g in _ints(used)])
        labels = Labels(self._templates, self._kinds, self._keys).picked(_ints(used))
        return LedgerIndex(out_ids, out_codes, labels)


def _sorted_pairs(ids: Any, groups: Any) -> tuple[int, Any, Any]:
    """Ids and their groups sorted by id, then group, as a base and each id's offset
    from it, and each one's group. Where the part's ids span less than 2**31 (a part
    of a cluster's ids from one counter) each pair is one eight-byte number, offset
    above group, sorted in the ids' own array; the two are read back through views of
    it, no copy. Else a ``lexsort``'s order (eight bytes an id) and sorted copies."""
    import numpy as np

    if len(ids):
        low = int(ids.min())
        if int(ids.max()) - low < 2**31:  # (and a group's number is below 2**31)
            keys = ids  # (the pick's own array, no one else's)
            keys -= low
            keys <<= 32
            np.bitwise_or(keys, groups, out=keys)  # (widened a buffer at a time)
            del groups
            keys.sort()
            halves = keys.view(np.uint32)
            offset_at, group_at = (1, 0) if sys.byteorder == "little" else (0, 1)
            return low, halves[offset_at::2], halves[group_at::2]
    order = np.lexsort((groups, ids))
    return 0, ids[order], groups[order]


def _runs(sorted_ids: Any, last: bool) -> Any:
    """A mask of each run of equal ids' first (or ``last``) position."""
    import numpy as np

    mask = np.empty(len(sorted_ids), dtype=bool)
    if last:
        mask[-1:] = True
        np.not_equal(sorted_ids[1:], sorted_ids[:-1], out=mask[:-1])
    else:
        mask[:1] = True
        np.not_equal(sorted_ids[1:], sorted_ids[:-1], out=mask[1:])
    return mask


def _ints(numbers: Any) -> Iterator[int]:
    """A numpy array's numbers as ints, a slice at a time (not a list of them all: 36
    bytes a number, 7 MB for 200,000 groups)."""
    for at in range(0, len(numbers), 4096):
        yield from numbers[at : at + 4096].tolist()


def _wide(ids: LedgerIds | array) -> Any:
    """A group's ids of eight bytes each, as numpy reads them."""
    import numpy as np

    return ids.numpy() if isinstance(ids, LedgerIds) else np.frombuffer(ids, np.int64)


def _span_arrays(parts: Sequence[Sequence[tuple[int, int]]]) -> tuple[Any, Any, Any]:
    """Every part's spans sorted by their low end: the lows, each span's last id
    (inclusive: the span of ledger 2**63 - 1 ends at 2**63, beyond an int64) and its
    part. Two parts' spans that overlap are refused: an id in both is placed in one,
    and the other part's index would lack it (its ledger unreferenced there)."""
    import numpy as np

    spans = sorted((low, high, part) for part, mine in enumerate(parts) for low, high in mine)
    reach: dict[int, int] = {}  # part -> the highest end of its spans so far
    for low, high, part in spans:
        if any(low < end for other, end in reach.items() if other != part):
            raise ValueError(f"parts' spans overlap at [{low}, {high}): each id in one part")
        reach[part] = max(high, reach.get(part, high))
    return (
        np.array([low for low, _, _ in spans], dtype=np.int64),
        np.array([high - 1 for _, high, _ in spans], dtype=np.int64),
        np.array([part for _, _, part in spans], dtype=np.int64),
    )


def _kept(ids: Iterable[int] | int) -> LedgerIds | array | int | None:
    """A group's ids as the table keeps them (None: none)."""
    if isinstance(ids, int):
        return ids
    if isinstance(ids, LedgerIds):
        return ids if len(ids) else None
    kept = _as_array(ids)
    return kept if len(kept) else None


def _as_array(ids: Iterable[int]) -> array:
    """Sorted ids as an ``array('q')`` (a ``LedgerIds``' own, not a copy)."""
    if isinstance(ids, LedgerIds):
        return ids.sorted_array()
    if isinstance(ids, array) and ids.typecode == "q" and _strictly_sorted(ids):
        return ids
    return array("q", sorted(ids))


class LeafIds(Sequence[int]):
    """One leaf directory's listed ids, sorted, as its first id and, from it, either each
    id's two-byte offset or a bit for each id of its span, whichever is smaller: a leaf
    holds at most 10,000 consecutive ids (``LEAF_SPAN``), and a live cluster's hold most
    of theirs (ids are handed out in order; a trim takes a few of each leaf's), so a
    full leaf is 1,250 bytes, not 20,000. The survey keeps every leaf's listing for its
    whole run (the works, the ids found, the cache's rows): at 10M ledgers about 1 MB in
    the driver, not 20 MB as offsets or 80 as eight-byte ids. Read as the array of the
    same ids."""

    __slots__ = ("_bits", "_last", "_len", "_offsets", "base")
    itemsize = 2

    def __init__(self, base: int, offsets: array | None = None, bits: bytes | None = None) -> None:
        """``offsets``: array('H'), sorted; or ``bits``: bit ``o`` (little-endian, byte
        ``o // 8``) set for each offset ``o``, the first (0) set."""
        self.base = base
        self._offsets = offsets
        self._bits = bits
        if bits is not None:
            import numpy as np

            set_at = np.flatnonzero(np.unpackbits(np.frombuffer(bits, np.uint8), bitorder="little"))
            self._len = len(set_at)
            self._last = int(set_at[-1]) if len(set_at) else -1
        else:
            assert offsets is not None
            self._len = len(offsets)
            self._last = offsets[-1] if offsets else -1

    @classmethod
    def of(cls, ids: Sequence[int]) -> Sequence[int]:
        """``ids`` (sorted) as a ``LeafIds``, or as they are if they span more than two
        bytes of offsets (no leaf's: a stray directory's)."""
        if not len(ids) or ids[-1] - ids[0] > _MAX_OFFSET:
            return ids if len(ids) else cls(0, array("H"))
        base = ids[0]
        span = ids[-1] - base + 1
        if (span + 7) // 8 < 2 * len(ids):
            import numpy as np

            flags = np.zeros(span, dtype=np.uint8)
            flags[np.asarray(ids, dtype=np.int64) - base] = 1
            return cls(base, bits=np.packbits(flags, bitorder="little").tobytes())
        return cls(base, array("H", [lid - base for lid in ids]))

    @property
    def by_bits(self) -> bool:
        """Whether its ids are kept as a bit each of its span (else as offsets)."""
        return self._bits is not None

    @property
    def nbytes(self) -> int:
        """The bytes its ids take."""
        return len(self._bits) if self._bits is not None else 2 * self._len

    @property
    def offsets(self) -> array:
        """Each id's offset from the first, as an array('H') (made from the bits: a copy)."""
        if self._offsets is not None:
            return self._offsets
        out = array("H")
        out.frombytes(self.numpy()[1].tobytes())
        return out

    def __len__(self) -> int:
        return self._len

    def __getitem__(self, at: Any) -> Any:
        if isinstance(at, slice):
            return array("q", [self.base + o for o in self.offsets[at]])
        if at in (0, -self._len) and self._len:
            return self.base  # (the first id is the base)
        if at in (-1, self._len - 1) and self._len:
            return self.base + self._last
        return self.base + self.offsets[at]

    def __iter__(self) -> Iterator[int]:
        return iter(self.tolist())

    def tolist(self) -> list[int]:
        """The ids as a list, made by numpy (a leaf's are iterated several times a
        survey: the cached records that stand, the reads, the cache's row)."""
        import numpy as np

        base, offsets = self.numpy()
        ids: list[int] = (offsets.astype(np.int64) + np.int64(base)).tolist()
        return ids

    def _offset(self, ledger_id: object) -> int | None:
        """``ledger_id``'s offset from the first id, if it is in this leaf's span."""
        if not isinstance(ledger_id, int):
            return None
        offset = ledger_id - self.base
        return offset if 0 <= offset <= self._last else None

    def __contains__(self, ledger_id: object) -> bool:
        offset = self._offset(ledger_id)
        if offset is None:
            return False
        if self._bits is not None:
            return bool(self._bits[offset >> 3] >> (offset & 7) & 1)
        return self.position(ledger_id) is not None

    def position(self, ledger_id: object) -> int | None:
        """Where ``ledger_id`` is (None: not here), by the offsets' own bisect (the bits
        before it counted)."""
        offset = self._offset(ledger_id)
        if offset is None:
            return None
        if self._bits is not None:
            if ledger_id not in self:
                return None
            import numpy as np

            before = np.frombuffer(self._bits, np.uint8)
            return int(np.unpackbits(before, bitorder="little")[:offset].sum())
        at = bisect_left(self._offsets, offset)  # type: ignore[arg-type]
        return at if at < self._len and self.offsets[at] == offset else None

    def has(self, offsets: Any) -> Any:
        """Which of some offsets from the first id (a numpy int64 array) are here, as a
        numpy array of bools: each tested by its bit, or searched among the offsets."""
        import numpy as np

        inside = (offsets >= 0) & (offsets <= self._last)
        found = np.zeros(len(offsets), dtype=bool)
        if not inside.any():
            return found
        wanted = offsets[inside]
        if self._bits is not None:
            bits = np.frombuffer(self._bits, np.uint8)
            found[inside] = (bits[wanted >> 3] >> (wanted & 7).astype(np.uint8)) & 1 == 1
            return found
        values = self.numpy()[1]
        where = np.searchsorted(values, wanted).clip(max=len(values) - 1)
        found[inside] = values[where] == wanted
        return found

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LeafIds):
            return (self.base, self._offsets, self._bits) == (
                other.base,
                other._offsets,
                other._bits,
            ) or (len(self) == len(other) and self.tolist() == other.tolist())
        if isinstance(other, Sequence):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[type[LeafIds], tuple[int, array | None, bytes | None]]:
        return (LeafIds, (self.base, self._offsets, self._bits))

    def numpy(self) -> tuple[int, Any]:
        """The base and the offsets as a numpy array (a view of the offsets, or made
        from the bits)."""
        import numpy as np

        if self._bits is not None:
            flags = np.unpackbits(np.frombuffer(self._bits, np.uint8), bitorder="little")
            return self.base, np.flatnonzero(flags).astype(np.uint16)
        return self.base, np.frombuffer(self._offsets, dtype=np.uint16)  # type: ignore[arg-type]


_MAX_OFFSET = 2**16 - 1


class FoundIds(AbstractSet[int]):
    """The ids a survey found, without a copy of them: the listing's own sorted arrays
    (one a directory, which a survey keeps anyway) less the few ids listed that were
    not found when read (``gone``: a znode deleted between the listing and its read).
    A set to every caller, as ``LedgerIds``; ``- other`` adds to ``gone``."""

    __slots__ = ("_arrays", "_gone", "_len", "_runs", "_starts")

    def __init__(self, runs: Iterable[Sequence[int]] = (), gone: Iterable[int] = ()) -> None:
        kept = sorted((run for run in runs if len(run)), key=_head)
        if not all(_strictly_sorted(run) for run in kept) or any(
            a[-1] >= b[0] for a, b in pairwise(kept)
        ):
            # Runs that overlap, or one out of order (not a listing's): one merged run.
            kept = [LedgerIds.merged(sorted(run) for run in kept).sorted_array()] if kept else []
        self._runs: list[Sequence[int]] = kept
        self._starts = [run[0] for run in kept]
        self._gone = frozenset(lid for lid in gone if self._listed(lid))
        self._len = sum(len(run) for run in kept) - len(self._gone)
        self._arrays: tuple[Any, list[Any], Any] | None = None  # (``_numpy``)

    def _listed(self, ledger_id: object) -> bool:
        if not isinstance(ledger_id, int):
            return False
        at = bisect_right(self._starts, ledger_id) - 1
        return at >= 0 and _position(self._runs[at], ledger_id) is not None

    def __contains__(self, ledger_id: object) -> bool:
        return self._listed(ledger_id) and ledger_id not in self._gone

    def __iter__(self) -> Iterator[int]:
        gone = self._gone
        for run in self._runs:
            if gone:
                yield from (lid for lid in run if lid not in gone)
            else:
                yield from run

    def __len__(self) -> int:
        return self._len

    def __hash__(self) -> int:
        return self._hash()

    def __repr__(self) -> str:
        return f"FoundIds({list(self)!r})"

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> AbstractSet[Any]:
        return LedgerIds(it)

    def __sub__(self, other: AbstractSet[Any]) -> FoundIds:  # type: ignore[override]
        """These ids less ``other``'s (a few: the foreign ones), the runs shared."""
        if not other:
            return self
        if len(other) <= len(self):
            less = [lid for lid in other if lid in self]
        else:
            less = [lid for lid in self if lid in other]
        out = FoundIds.__new__(FoundIds)  # (the runs as they are: checked once)
        out._runs, out._starts = self._runs, self._starts
        out._gone = self._gone.union(less)
        out._len = self._len + len(self._gone) - len(out._gone)
        out._arrays = None
        return out

    def lacking(self, ids: Iterable[int]) -> list[int]:
        """The ids of ``ids`` (sorted: a managed ledger's listed ids) not among these,
        in id order (``lacking_each`` of one)."""
        return next(self.lacking_each([(None, ids)]))[1]

    def lacking_each(
        self, named: Iterable[tuple[K, Iterable[int]]], ids_at_once: int = _IDS_A_CHUNK
    ) -> Iterator[tuple[K, list[int]]]:
        """For each (key, sorted ids), in order: the ids not among these, in id order.
        The survey checks every managed ledger's listed ids (10,000,000 at 10M), and
        Pulsar's ids come from one counter, so one topic's ledgers lie in as many leaf
        directories as it has: asked a topic at a time, each directory was searched
        once a topic (7 s at 1M ledgers of 10,000 topics). The ids of many keys, about
        ``ids_at_once``, are asked at once, sorted by numpy, and each run (a directory's
        listing) searched once for all of them that fall in it."""
        import numpy as np  # (here: the rules import without it until a check runs)

        keys: list[K] = []
        asked: list[Any] = []
        pending = 0
        for key, ids in named:
            keys.append(key)
            asked.append(
                ids.numpy()
                if isinstance(ids, LedgerIds)
                else np.frombuffer(_as_array(ids), np.int64)
            )
            pending += len(asked[-1])
            if pending >= ids_at_once:
                yield from self._lacking_of(keys, asked)
                keys, asked, pending = [], [], 0
        if keys:
            yield from self._lacking_of(keys, asked)

    def _lacking_of(self, keys: list[K], asked: list[Any]) -> Iterator[tuple[K, list[int]]]:
        """``lacking_each`` of one chunk of keys and their ids (numpy arrays)."""
        import numpy as np

        lengths = [len(ids) for ids in asked]
        ids = np.concatenate(asked) if asked else np.empty(0, np.int64)
        present = np.zeros(len(ids), dtype=bool)
        if len(ids) and self._runs:
            starts, runs, gone = self._numpy()
            order = np.argsort(ids, kind="stable")
            ordered = ids[order]
            run_of = np.searchsorted(starts, ordered, side="right") - 1
            # (each run's ids are one slice of the sorted ids: its bounds by numpy)
            bounds = np.searchsorted(run_of, np.arange(len(runs) + 1))
            found = np.zeros(len(ids), dtype=bool)
            for at in np.flatnonzero(bounds[1:] > bounds[:-1]).tolist():
                wanted = ordered[bounds[at] : bounds[at + 1]]
                run = runs[at]
                if isinstance(run, LeafIds):
                    found[bounds[at] : bounds[at + 1]] = run.has(wanted - run.base)
                    continue
                where = np.searchsorted(run, wanted).clip(max=len(run) - 1)
                found[bounds[at] : bounds[at + 1]] = run[where] == wanted
            present[order] = found
            del order, ordered, run_of, found
            if len(gone):
                present &= ~np.isin(ids, gone)
        end = 0
        for key, length in zip(keys, lengths, strict=True):
            start, end = end, end + length
            mine = present[start:end]
            yield key, ([] if mine.all() else ids[start:end][~mine].tolist())

    def _numpy(self) -> tuple[Any, list[Any], Any]:
        """The runs' first ids, each run (a leaf's ``LeafIds`` as it is, which answers
        by its bits or offsets; else its ids as numpy, a view where they are an array)
        and the gone ids as numpy arrays, made once."""
        import numpy as np

        if self._arrays is None:
            runs = [
                run
                if isinstance(run, LeafIds)
                else np.frombuffer(run, dtype=np.int64)
                if isinstance(run, array) and run.typecode == "q"
                else np.array(run, dtype=np.int64)
                for run in self._runs
            ]
            starts = np.array(self._starts, dtype=np.int64)
            gone = np.fromiter(self._gone, dtype=np.int64, count=len(self._gone))
            self._arrays = (starts, runs, gone)
        return self._arrays

    def at_least(self, low: int, below: int | None = None) -> array:
        """The ids from ``low`` on (and under ``below``), in order."""
        out = array("q")
        for run in self._runs[max(0, bisect_right(self._starts, low) - 1) :]:
            if below is not None and run[0] >= below:
                break
            start = bisect_left(run, low)
            end = len(run) if below is None else bisect_left(run, below)
            out.extend(lid for lid in run[start:end] if lid not in self._gone)
        return out

    def __reduce__(self) -> tuple[type[FoundIds], tuple[list[Sequence[int]], frozenset[int]]]:
        return (FoundIds, (self._runs, self._gone))


def _position(ids: Sequence[int], ledger_id: object) -> int | None:
    """Where ``ledger_id`` is in the sorted ``ids`` (None: not there, or not an id)."""
    if isinstance(ids, LeafIds):
        return ids.position(ledger_id)
    if not isinstance(ledger_id, int):
        return None
    at = bisect_left(ids, ledger_id)
    return at if at < len(ids) and ids[at] == ledger_id else None


def _head(run: Sequence[int]) -> int:
    return run[0]


def _first_of_each(ids: array, codes: array) -> tuple[array, array]:
    """The entries sorted by id, each id once with its first entry's code."""
    import numpy as np  # (here: the rules import without it until an index is built)

    if not ids:
        return array("q"), array("i")
    keys = np.frombuffer(ids, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    first = np.empty(len(ordered), dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    out_codes = array("i")
    out_codes.frombytes(np.frombuffer(codes, dtype=np.intc)[order[first]].data.cast("B"))
    del order
    out_ids = array("q")
    out_ids.frombytes(ordered[first].data.cast("B"))
    return out_ids, out_codes


def _strictly_sorted(ids: Sequence[int]) -> bool:
    if isinstance(ids, LeafIds):  # (a leaf's offsets, by numpy: the survey asks of each)
        import numpy as np

        return ids.by_bits or bool(np.all(np.diff(ids.numpy()[1].astype(np.int32)) > 0))
    return all(a < b for a, b in pairwise(ids))
