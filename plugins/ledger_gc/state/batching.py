"""Rows written or read a page at a time: one helper for every statement batch."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of at most ``size``, in order, read as they come (a stream
    of rows is never held whole)."""
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
