"""Each leaf directory's ledgers, as the survey classifies them: the record cache's
records where they stand (``rules/bookkeeper/record_cache.py``), the rest read now.

The driver lists every leaf directory (``scan.list_leaves``) and decides per directory
whether its cached records may stand (``record_cache.reusable``); a ``DirectoryWork`` is
that decision with the listing: the ids listed, and the packed records to reuse. Here
(on an executor, or on the driver for a small tree) the cached records of ids still
listed are taken, every other id is read (pipelined multiReads), everything is
classified by the one classification (``classify``, the survey's), and the directory's
new packed records are returned: those reused and the CLOSED ones just read whose
znode is the one listed (``cacheable``).
"""

from __future__ import annotations

import gc
import logging
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from ledger_gc.bookkeeper import scan
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.bookkeeper.classify import BkLedger
from ledger_gc.rules.bookkeeper.record_cache import (
    BodyError,
    CachedRecord,
    Packed,
    cacheable,
    decode_packed,
    encode_records,
)
from ledger_gc.rules.bookkeeper.records import CLOSED

log = logging.getLogger(__name__)

#: A cached ledger's znode version is not known (it was not read this cycle).
VERSION_NOT_READ = -1


@dataclass(frozen=True)
class DirectoryWork:
    """One leaf directory to classify: what the driver listed and decided."""

    directory: str
    pzxid: int  # the listing's: a znode created after it is not the one listed
    ledger_ids: Sequence[int]  # listed, sorted
    body: bytes | None  # packed records that may stand (None: read every ledger)
    keep: bool  # return the directory's new packed records (the cache is on)
    # Its row's stat is not this listing's: the records go back even if none changed
    # (the row is written again whole, records and stat of one listing).
    restate: bool = False


@dataclass(frozen=True)
class DirectoryDone:
    """What classifying one directory left for the cache and the figures."""

    directory: str
    reused: int  # ledgers classified from the cache
    read: int  # ledger znodes read
    records: int  # records in ``body``
    # The directory's packed records now: b"" unless kept, None when they are the
    # ones its work carried and its row stands as it is (the steady state's driver
    # gets back only what changed).
    body: bytes | None
    # Ids listed but not there when read (deleted since the listing): the ledgers
    # found are the listing's less these (``ledger_index.FoundIds``), no copy of them.
    absent: Sequence[int] = ()


def classify_directories(
    bk: MetadataStore,
    root: str,
    layout: str,
    works: Sequence[DirectoryWork],
    high: int | None,
    classify: Callable[[list[BkLedger]], None],
) -> list[DirectoryDone]:
    """Classify every ledger of ``works`` (``classify`` gets each directory's ledgers in
    id order); ``high``: the previous cycle's highest listed id."""
    with _cyclic_gc_paused():
        return [_classify_directory(bk, root, layout, work, high, classify) for work in works]


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic collector off meanwhile: a million short-lived records (freed by
    reference counting, none in a cycle) set it off thousands of times for nothing,
    a fifth of the survey's CPU."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _classify_directory(
    bk: MetadataStore,
    root: str,
    layout: str,
    work: DirectoryWork,
    high: int | None,
    classify: Callable[[list[BkLedger]], None],
) -> DirectoryDone:
    """One directory: its cached records that stand, the rest read; all classified."""
    ledgers: dict[int, BkLedger] = {}
    packed = Packed()
    keep: list[int] = []
    damaged = False
    if work.body:
        try:
            packed = decode_packed(work.body)
            keep = packed.standing(set(work.ledger_ids), high)
        except BodyError as exc:
            log.warning("cached records of %s: %s; read again", work.directory, exc)
            damaged = True
    for ledger in cached_ledgers(packed, keep):
        ledgers[ledger.ledger_id] = ledger
    reused = len(ledgers)
    missing = [lid for lid in work.ledger_ids if lid not in ledgers]
    read = 0
    fresh: list[CachedRecord] = []
    for ledger_id, data, stat in scan.read_raw(bk, root, layout, missing):
        read += 1
        ledger, decoded = scan.decoded(ledger_id, data, stat.version, int(stat.ctime))
        ledgers[ledger_id] = ledger
        if (
            work.keep
            and decoded is not None
            and cacheable(decoded.state, None, int(stat.czxid), work.pzxid)
        ):
            fresh.append(
                CachedRecord(
                    ledger_id,
                    int(stat.czxid),
                    int(stat.ctime),
                    decoded.ctime_ms,
                    decoded.length,
                    decoded.format_version,
                    ledger.tags,
                )
            )
    classify([ledgers[lid] for lid in sorted(ledgers)])
    absent = array("q", (lid for lid in missing if lid not in ledgers))
    if not work.keep:
        return DirectoryDone(work.directory, reused, read, 0, b"", absent)
    body: bytes | None
    if work.body and not fresh and len(keep) == len(packed) and not damaged:
        # The records it carried, all standing: none back if its row stands too.
        body = work.body if work.restate else None
    else:
        body = encode_records(fresh, packed.rows(keep))
    return DirectoryDone(work.directory, reused, read, len(keep) + len(fresh), body, absent)


def cached_ledgers(packed: Packed, rows: Iterable[int]) -> Iterator[BkLedger]:
    """The ledgers of some rows of a directory's cached records, as a read of their
    znodes gives them (but the znode's version, not read): straight from the columns,
    with the tags the row keeps (none decoded again)."""
    ids, tag_index, formats = packed.ledger_ids, packed.tag_index, packed.formats
    znode_ctimes, lengths, tags = packed.znode_ctimes, packed.lengths, packed.tags
    for i in rows:
        yield scan.ledger_of_fields(
            ids[i],
            VERSION_NOT_READ,
            znode_ctimes[i],
            CLOSED,
            lengths[i],
            formats[i],
            packed.ctime(i),
            tags[tag_index[i]],
        )


def split_works(works: Sequence[DirectoryWork], tasks: int) -> list[list[DirectoryWork]]:
    """``works`` in ``tasks`` groups of about the same number of ledgers (the largest
    first, each to the lightest group), for as many executor tasks."""
    groups: list[list[DirectoryWork]] = [[] for _ in range(max(1, min(tasks, len(works))))]
    weights = [0] * len(groups)
    for work in sorted(works, key=lambda w: -len(w.ledger_ids)):
        lightest = weights.index(min(weights))
        groups[lightest].append(work)
        weights[lightest] += len(work.ledger_ids) + 1
    return [sorted(group, key=lambda w: w.directory) for group in groups if group]
