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

Where no temporary file can be made (a read-only ``TMPDIR``), the ids stay in memory
as they were; where the file takes no more (a full disk), those not written stay in
memory: one warning either way, never a failed cycle. A spilled set pickles as the
plain ``LedgerIds`` it was: an executor (or a state store) gets the ids, not a file of
this process.
"""

from __future__ import annotations

import logging
import os
import tempfile
import weakref
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
    closed when they are all let go."""

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
        else:
            # (closed with the spill, not left to warn when the process ends)
            weakref.finalize(self, self._file.close)
        self._block_bytes = block_bytes
        self._flush_bytes = flush_bytes
        self._full = False  # (the file took no more: what waits stays in memory)
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

    def count(self, number: int) -> int:
        """How many ids set ``number`` has (the sets lie one after another)."""
        starts = self._starts
        end = starts[number + 1] if number + 1 < len(starts) else self._end
        return (end - starts[number]) // 4

    @property
    def _end(self) -> int:
        return self._written + len(self._pending)

    def offsets(self, number: int) -> tuple[int, bytes]:
        """The first id of set ``number`` and its four-byte offsets. (Asked of every
        topic once a pass of the cut to the Spark tasks, about 4,000,000 times at 10M
        ledgers: one call, and the block held answers most.)"""
        starts = self._starts
        at = starts[number]
        end = starts[number + 1] if number + 1 < len(starts) else self._end
        block_at, block = self._block_at, self._block
        if block_at <= at and end <= block_at + len(block):
            return self._bases[number], block[at - block_at : end - block_at]
        return self._bases[number], self._read(at, end)

    def _read(self, at: int, end: int) -> bytes:
        """Bytes ``at`` to ``end``, the aligned blocks that hold them read and held: a
        pass in either order (the owners' index reads the topics last first) reads
        each block about once."""
        if end > self._written:
            self._flush()
            if end > self._written:  # (the file took no more: the rest is in memory)
                kept = self._written
                tail = bytes(self._pending[max(at - kept, 0) : end - kept])
                return tail if at >= kept else self._read(at, kept) + tail
        assert self._file is not None
        block = self._block_bytes
        start = at - at % block
        self._block = os.pread(self._file.fileno(), -(-end // block) * block - start, start)
        self._block_at = start
        self.reads += 1
        if len(self._block) < end - start:  # (a short read: not the file as written)
            raise OSError(f"the listed ids' spill file ends at {start + len(self._block)}")
        return self._block[at - start : end - start]

    def _flush(self) -> None:
        """Write what waits. A disk that takes part of it (full, or a file-size limit)
        keeps the written part, and the rest stays in memory from then on: written
        again whole, it shifted every set after it, ids read back that no topic lists."""
        if not self._pending or self._full:
            return
        assert self._file is not None
        view = memoryview(self._pending)
        try:
            while view:
                done = os.pwrite(self._file.fileno(), view, self._written)
                if not done:  # (taken nothing, and said no error: tried again for ever)
                    raise OSError("a write of the spill file took no bytes")
                self._written += done
                view = view[done:]
        except OSError as exc:
            self._full = True
            log.warning(
                "the file the listed ledger ids are spilled to (in TMPDIR) took no more "
                "(%s): the rest are kept in memory (give TMPDIR room: about 4 bytes a "
                "listed ledger)",
                exc,
            )
        finally:
            rest = bytearray(view)
            view.release()
            self._pending = rest

    @property
    def written(self) -> int:
        """Bytes in the file (the rest wait, or stay in memory once it took no more)."""
        return self._written


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
        return self._spill.offsets(self._number)[0]

    @property
    def _ids(self) -> bytes:  # type: ignore[override]
        return self._spill.offsets(self._number)[1]

    @classmethod
    def _from_iterable(cls, it: Iterable[Any]) -> AbstractSet[Any]:
        # (what ``|``, ``&`` and ``^`` make: ids in memory, as the parent's)
        return LedgerIds(it)

    def _loaded(self) -> LedgerIds:
        """This set as a plain ``LedgerIds`` (one read)."""
        return LedgerIds.of_offsets(*self._spill.offsets(self._number))

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
        return self._spill.offsets(self._number)

    def numpy(self) -> Any:
        return self._loaded().numpy()

    def sorted_array(self) -> array:
        return self._loaded().sorted_array()

    @property
    def high(self) -> int | None:
        return self._loaded().high

    def __reduce__(self) -> tuple[Any, tuple[int, array | bytes]]:
        return self._loaded().__reduce__()
