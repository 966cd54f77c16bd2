"""Every cursor's ledger, as the references hold it for a whole survey.

A cursor is its managed ledger's name and its own, and its ``cursorsLedgerId`` (-1: its
position is in its znode). The driver of a survey holds every topic's cursors from the
references' read to the report; as a dict of (topic, cursor) tuples they were 100 bytes
a cursor, 10 MiB at 100,000 topics. Here they are three columns sorted by cursor (the
names the references' own strings), 24 bytes a cursor, looked up by bisection: the
survey asks of a few cursors, not of every ledger (an executor's classifier has a dict
of them, ``ByName``).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections.abc import ItemsView, Iterable, Iterator, Mapping, ValuesView
from typing import Any

Cursor = tuple[str, str]


class CursorLedgers(Mapping[Cursor, int]):
    """(managed ledger, cursor) -> its ``cursorsLedgerId``, sorted by cursor."""

    __slots__ = ("_cursors", "_ledgers", "_topics")

    def __init__(self, cursors: Iterable[tuple[Cursor, int]] = ()) -> None:
        # (a cursor listed twice: its last ledger, as a dict would have it)
        entries = sorted(dict(cursors).items())
        self._topics = [topic for (topic, _), _ in entries]
        self._cursors = [cursor for (_, cursor), _ in entries]
        self._ledgers = array("q", [ledger for _, ledger in entries])

    def _at(self, key: object) -> int | None:
        if not (isinstance(key, tuple) and len(key) == 2):
            return None
        topic, cursor = key
        if not (isinstance(topic, str) and isinstance(cursor, str)):
            return None
        low = bisect_left(self._topics, topic)
        high = bisect_right(self._topics, topic, low)
        at = bisect_left(self._cursors, cursor, low, high)
        return at if at < high and self._cursors[at] == cursor else None

    def __getitem__(self, key: Cursor) -> int:
        at = self._at(key)
        if at is None:
            raise KeyError(key)
        return self._ledgers[at]

    def __contains__(self, key: object) -> bool:
        return self._at(key) is not None

    def __iter__(self) -> Iterator[Cursor]:
        return zip(self._topics, self._cursors, strict=True)

    def __len__(self) -> int:
        return len(self._ledgers)

    def items(self) -> ItemsView[Cursor, int]:
        return _Items(self)

    def values(self) -> ValuesView[int]:
        return _Values(self)

    def __reduce__(self) -> tuple[Any, tuple[list[tuple[Cursor, int]]]]:
        return CursorLedgers, (list(self.items()),)


class _Items(ItemsView[Cursor, int]):
    """In order, a column at a time: not a bisection a cursor."""

    _mapping: CursorLedgers

    def __iter__(self) -> Iterator[tuple[Cursor, int]]:
        table = self._mapping
        return zip(iter(table), table._ledgers, strict=True)


class _Values(ValuesView[int]):
    _mapping: CursorLedgers

    def __iter__(self) -> Iterator[int]:
        return iter(self._mapping._ledgers)
