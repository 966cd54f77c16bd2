"""Every managed ledger's listed ids, spilled to a file the survey's driver reads back.

The BookKeeper survey's driver holds Pulsar's references for its whole run, and their
listed ids are what grew with the cluster: four bytes a ledger, 38 MiB at 10,000,000
ledgers (issue 36). The driver reads them only in bulk, a topic after another in the
order they were read (the cut to the Spark tasks, the check of the listed ledgers),
or for a few topics (a live check, a report). So each topic's ids go to an unnamed
temporary file as they are read, and its set (``SpilledIds``) keeps where they are:
the operating system's page cache holds the file while it has room, the process holds
a block of it. Reads go through ``os.pread`` a block at a time, so a pass over every
topic is a few hundred reads.

Where no temporary file can be made (a read-only or full ``TMPDIR``), the ids stay in
memory as they were. A spilled set pickles as the plain ``LedgerIds`` it was: an
executor (or a state store) gets the ids, not a file of this process.
"""

from __future__ import annotations

import logging
import os
import tempfile
from array import array
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from typing import IO, Any

from ledger_gc.rules.bookkeeper.ledger_index import LedgerIds

log = logging.getLogger(__name__)

#: What one read takes from the file (a pass reads the topics in order: one read serves
#: a few thousand topics) and what the writes gather before one write.
BLOCK_BYTES = 1 << 20
FLUSH_BYTES = 1 << 20


class IdSpill:
    """The file the sets of one reading of the references are spilled to (``add``),
    closed when they are all let go (its file object's own finalizer)."""

    def __init__(
        self,
        directory: str | None = None,
        *,
        block_bytes: int = BLOCK_BYTES,
        flush_bytes: int = FLUSH_BYTES,
    ) -> None:
        self._file: IO[bytes] | None
        try:
            # (unnamed on Linux: gone with the process, whatever way it ends; open as
            # long as the spill, which its sets keep)
            self._file = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115
        except OSError as exc:
            log.warning(
                "no temporary file to spill the listed ledger ids to (%s): they are kept in "
                "memory (set TMPDIR to a writable directory)",
                exc,
            )
            self._file = None
        self._block_bytes = block_bytes
        self._flush_bytes = flush_bytes
        self._written = 0  # bytes in the file
        self._pending = bytearray()  # bytes after them, not written yet
        # (where each set starts, and its first id: two arrays, not an int object each)
        self._starts = array("q")
        self._bases = array("q")
        self._block = b""
        self._block_at = 0
        self.reads = 0  # (blocks read back)

    @property
    def spilled(self) -> bool:
        """Whether the sets are in a file (else ``add`` gives each back as it is)."""
        return self._file is not None

    def add(self, ids: LedgerIds) -> LedgerIds:
        """``ids`` as kept from now on: its four-byte offsets in the file. A set of
        eight-byte ids (spanning 2**32 or more) or an empty one is kept as it is."""
        if not isinstance(ids, LedgerIds):
            raise TypeError(f"only a LedgerIds is spilled, not a {type(ids).__name__}")
        if self._file is None or ids.itemsize != 4 or not len(ids):
            return ids
        base, offsets = ids.offsets()
        number = len(self._starts)
        self._starts.append(self._end)
        self._bases.append(base)
        self._pending += offsets
        if len(self._pending) >= self._flush_bytes:
            self._flush()
        return SpilledIds(self, number)

    def base(self, number: int) -> int:
        return self._bases[number]

    def count(self, number: int) -> int:
        """How many ids set ``number`` has (the sets lie one after another)."""
        starts = self._starts
        end = starts[number + 1] if number + 1 < len(starts) else self._end
        return (end - starts[number]) // 4

    @property
    def _end(self) -> int:
        return self._written + len(self._pending)

    def offsets(self, number: int) -> bytes:
        """The four-byte offsets of set ``number``."""
        at, size = self._starts[number], 4 * self.count(number)
        end = at + size
        if end > self._written:
            self._flush()
        if not (self._block_at <= at and end <= self._block_at + len(self._block)):
            # (the aligned blocks that hold them: a pass in either order, as the owners'
            # index reads the topics last first, reads each block about once)
            assert self._file is not None
            block = self._block_bytes
            start = at - at % block
            self._block = os.pread(self._file.fileno(), -(-end // block) * block - start, start)
            self._block_at = start
            self.reads += 1
            if len(self._block) < end - start:  # (a short read: not the file as written)
                raise OSError(f"the listed ids' spill file ends at {start + len(self._block)}")
        start = at - self._block_at
        return self._block[start : start + size]

    def _flush(self) -> None:
        if not self._pending:
            return
        assert self._file is not None
        view = memoryview(self._pending)
        while view:
            done = os.pwrite(self._file.fileno(), view, self._written)
            self._written += done
            view = view[done:]
        self._pending = bytearray()


class SpilledIds(LedgerIds):
    """A ``LedgerIds`` whose four-byte offsets are in an ``IdSpill``'s file: read when
    asked, one read for what each method needs."""

    __slots__ = ("_number", "_spill")

    def __init__(self, spill: IdSpill, number: int) -> None:
        self._spill = spill
        self._number = number

    # (the parent's two fields, read from the spill: every inherited method works)
    @property
    def _base(self) -> int:  # type: ignore[override]
        return self._spill.base(self._number)

    @property
    def _ids(self) -> bytes:  # type: ignore[override]
        return self._spill.offsets(self._number)

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> AbstractSet[Any]:
        # (what ``|``, ``&`` and ``^`` make: ids in memory, as the parent's)
        return LedgerIds(it)

    def _loaded(self) -> LedgerIds:
        """This set as a plain ``LedgerIds`` (one read)."""
        return LedgerIds.of_offsets(self._base, self._ids)

    @property
    def itemsize(self) -> int:
        return 4

    def __len__(self) -> int:
        return self._spill.count(self._number)

    def __contains__(self, ledger_id: object) -> bool:
        return ledger_id in self._loaded()

    def __iter__(self) -> Iterator[int]:
        return iter(self._loaded())

    def offsets(self) -> tuple[int, bytes]:
        return self._base, self._ids

    def numpy(self) -> Any:
        return self._loaded().numpy()

    def sorted_array(self) -> array:
        return self._loaded().sorted_array()

    @property
    def high(self) -> int | None:
        return self._loaded().high

    def __reduce__(self) -> tuple[Any, tuple[int, array | bytes]]:
        return self._loaded().__reduce__()
