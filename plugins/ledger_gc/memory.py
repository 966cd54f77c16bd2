"""Freed memory given back to the system between the phases of a long run.

CPython returns the blocks it frees to the C allocator, and glibc keeps them in its
heap for the next allocation: a phase that builds and drops tens of megabytes (the
references cut to every Spark task, the tasks' results merged) leaves the process that
much larger, and every later phase adds to it. ``malloc_trim`` hands the free pages
back (about 10 ms for 100 MiB); Dask's workers do the same. Elsewhere (macOS, musl)
there is nothing to ask, and the call says so.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache


@cache
def _malloc_trim() -> ctypes._NamedFuncPointer | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None


def release_freed() -> bool:
    """Give the heap's free pages back to the system (False: this C library cannot)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
