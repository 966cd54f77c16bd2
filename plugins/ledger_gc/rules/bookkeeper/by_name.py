"""A read-only view of a topic-keyed mapping that pickles as a few flat objects.

The classifier every Spark task of a survey shares (``Classifier.common``) holds, per
topic, its name, its highest listed id and its cursors' ledgers. The driver only sends
it (a broadcast), yet at 100,000 topics copying those into dicts of its own and
pickling them cost it 23 MiB at its peak: 10 MiB of dicts, and the pickler's memo, which
keeps a reference to every name and key it writes until the pickle ends. A ``ByName``
reads the references' own mapping, and pickles as its keys joined into one compressed
string and its values as one array: three objects in the memo, whatever the topics.
An executor unpickles it into the dict it stands for.

Keys are names or pairs of names read from ZooKeeper paths, which cannot hold NUL, so
NUL separates them; a key that holds one anyway (or that is not a name or pair of names,
or a value that is not an int64) makes the view pickle as a plain dict.
"""

from __future__ import annotations

import sys
import zlib
from array import array
from collections.abc import Iterable, Iterator, Mapping
from itertools import islice
from typing import Any

_SEP = "\0"
_CHUNK = 4096


class ByName(Mapping[Any, Any]):
    """``source`` as it is, pickled compactly. Its values are ints, None, or
    (``same``) one value for every key."""

    __slots__ = ("_pairs", "_same", "_source")

    def __init__(self, source: Mapping[Any, Any], *, pairs: bool = False, same: Any = None):
        """``pairs``: every key is a (name, name) tuple, else a name. ``same``: every
        key maps to this (the names alone of a mapping whose values are not sent)."""
        self._source = source
        self._pairs = pairs
        self._same = same

    def __getitem__(self, key: Any) -> Any:
        value = self._source[key]
        return value if self._same is None else self._same

    def __contains__(self, key: object) -> bool:
        return key in self._source

    def __iter__(self) -> Iterator[Any]:
        return iter(self._source)

    def __len__(self) -> int:
        return len(self._source)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        try:
            return self._packed()
        except _NotPacked:  # (a key or value this form cannot carry exactly)
            return dict, (dict(self.items()),)

    def _packed(self) -> tuple[Any, tuple[Any, ...]]:
        keys = _names_of_pairs(self._source) if self._pairs else iter(self._source)
        packer = zlib.compressobj(1)
        packed = []
        count = 0
        # (a chunk of names joined at a time: the whole string, and its encoding, were
        # 8 MB at 100,000 topics' cursors)
        while chunk := list(islice(keys, _CHUNK)):
            try:
                joined = _SEP.join(chunk)
                data = ((_SEP if count else "") + joined).encode()
            except (TypeError, UnicodeEncodeError) as exc:  # (no name; a lone surrogate)
                raise _NotPacked from exc
            if joined.count(_SEP) != len(chunk) - 1:
                raise _NotPacked  # (a name holds the separator)
            packed.append(packer.compress(data))
            count += len(chunk)
        packed.append(packer.flush())
        names = b"".join(packed)
        if self._same is not None:
            return _unpacked, (names, count, self._pairs, None, array("I"), self._same)
        values = array("q")
        nones = array("I")
        for at, value in enumerate(self._source.values()):
            if value is None:
                nones.append(at)
            try:
                values.append(0 if value is None else value)
            except (OverflowError, TypeError) as exc:  # (not an int64)
                raise _NotPacked from exc
        return _unpacked, (names, count, self._pairs, values, nones, None)


class _NotPacked(Exception):
    """A key or value the packed form cannot carry exactly."""


def _names_of_pairs(keys: Iterable[Any]) -> Iterator[str]:
    for key in keys:
        if not (isinstance(key, tuple) and len(key) == 2):
            raise _NotPacked
        yield from key


def _unpacked(
    names: bytes, count: int, pairs: bool, values: array | None, nones: array, same: Any
) -> dict[Any, Any]:
    """A ``ByName`` as an executor holds it: the dict it stands for. Its names interned:
    the maps of one classifier share their topics' strings, and the cursors their
    subscriptions', as the pickler's memo had them share the references' own (a copy a
    map and a cursor was 22 MiB more in every task at 100,000 topics)."""
    split = list(map(sys.intern, zlib.decompress(names).decode().split(_SEP))) if count else []
    keys: Any = zip(split[::2], split[1::2], strict=True) if pairs else split
    if values is None:
        return dict.fromkeys(keys, same)
    found: list[Any] = list(values)
    for at in nones:
        found[at] = None
    return dict(zip(keys, found, strict=True))
