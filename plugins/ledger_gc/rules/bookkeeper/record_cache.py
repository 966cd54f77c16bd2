"""When a CLOSED ledger's record read by an earlier cycle may stand for a read (pure).

Why it can: ledger ids come from one counter and are never handed out twice, and what
the classification reads from a CLOSED ledger's record (its tags, state, length,
format version, ctime) never changes after the close: an ensemble change rewrites the
znode, not those fields. So the record of a znode read once stands while *that znode*
exists. The listing says which ids exist; what it cannot say is whether the znode of
an id is still the one that was read: a ``ledgergc restore``, BookKeeper's tools, an
id counter reset or a ZooKeeper restored from a backup can delete a ledger's znode and
create it again (same id, new ``czxid``).

ZooKeeper answers that per directory, in the same read as the listing
(``getChildren2``: the children and the parent's stat, atomically): the parent's
``pzxid`` is the zxid of the last child created or deleted, and its ``cversion``
counts the changes to its children (creates and deletes, ZooKeeper's "number of
changes to the children"; the cycle proves that on its own session first, ``proven``).
Between two listings of a directory (its ``czxid`` the same: not re-created) that
show ``added`` and ``removed`` ids:

* ``pzxid`` and ``cversion`` unchanged: no child was created or deleted since; every
  id listed both times is the same znode;
* otherwise, with both listings' ``cversion`` proven to count creates and deletes: a
  ``cversion`` that moved by exactly ``added + removed`` leaves no room for any other
  create, so no id listed both times was created again. Anything more (a ledger created
  and deleted in between, or one created again) and no record of that directory is
  reused: its ledgers are read again.

A record enters the cache only if its znode is the one the listing saw (its ``czxid``
not after the listing's ``pzxid``). OPEN and IN_RECOVERY ledgers, unreadable records
and ids above the previous cycle's highest are never reused. The records are keyed by
the BookKeeper's ``<root>/INSTANCEID`` and where it was read (``location``): another
cluster's, another root's or another layout's never apply. Only the classification's
*inputs* are kept: Pulsar's references are read in full every cycle, and the live
re-check before a delete reads the znode itself (``bookkeeper/deleting.py``).
"""

from __future__ import annotations

import base64
import json
import struct
import sys
import zlib
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ledger_gc.rules.bookkeeper.records import CLOSED

#: What a row's body holds; a row of another format is read again, never guessed.
CACHE_FORMAT = 1
_MAGIC = b"LGC" + bytes([CACHE_FORMAT])
_HEADER = struct.Struct("<4sII")  # magic, records, bytes of the tags (JSON)
#: "No value" in an int64 column (a record without its own ctime).
_NONE = -(2**63)


@dataclass(frozen=True)
class DirectoryState:
    """A ledger directory's stat as one ``getChildren2`` answered it."""

    czxid: int
    cversion: int
    pzxid: int


class CachedRecord:
    """One CLOSED ledger's classification inputs, as its record and znode had them.

    Has the attributes ``scan.ledger_of_record`` reads of a decoded record (``state``,
    ``length``, ``format_version``, ``ctime_ms``, ``custom``), so a cached ledger is
    built by the same function as a freshly read one."""

    __slots__ = (
        "ctime_ms",
        "custom",
        "czxid",
        "format_version",
        "ledger_id",
        "length",
        "znode_ctime_ms",
    )

    state = CLOSED

    def __init__(
        self,
        ledger_id: int,
        czxid: int,
        znode_ctime_ms: int,
        ctime_ms: int | None,
        length: int,
        format_version: int,
        custom: Mapping[str, bytes],
    ) -> None:
        self.ledger_id = ledger_id
        self.czxid = czxid
        self.znode_ctime_ms = znode_ctime_ms
        self.ctime_ms = ctime_ms
        self.length = length
        self.format_version = format_version
        self.custom = custom

    def key(self) -> tuple[object, ...]:
        return (
            self.ledger_id,
            self.czxid,
            self.znode_ctime_ms,
            self.ctime_ms,
            self.length,
            self.format_version,
            tuple(sorted(self.custom.items())),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CachedRecord) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __repr__(self) -> str:
        return f"CachedRecord{self.key()!r}"


def cacheable(state: str | None, error: str | None, czxid: int, listed_pzxid: int) -> bool:
    """Whether a freshly read record may be kept: CLOSED, decoded, and of the znode the
    listing saw (one created after the listing has a ``czxid`` above its ``pzxid``)."""
    return error is None and state == CLOSED and czxid <= listed_pzxid


@dataclass(frozen=True)
class DirectoryRow:
    """What the cache keeps of one leaf directory, as of one listing of it (its records
    travel packed, ``encode_records``, to whoever reads that directory)."""

    directory: str  # below the root, e.g. "00/0012"
    state: DirectoryState
    proven: bool  # its cversion counted creates and deletes on the server that listed it
    listed: Sequence[int]  # every ledger id listed then


@dataclass(frozen=True)
class Reuse:
    """Whether the cached records of a directory stand for reads this cycle, and why."""

    reuse: bool
    why: str  # "unchanged", "accounted", or why nothing is reused


def reusable(
    before: DirectoryRow | None, state: DirectoryState, listed: Iterable[int], *, proven: bool
) -> Reuse:
    """Whether the records of ``before`` stand for this listing of the same directory
    (``state``, ``listed``): see the module docstring. ``proven``: this listing's
    ``cversion`` counts creates and deletes (the cycle's probe on its session). Of a
    reusable directory, only the records of ids listed now, and not above the previous
    cycle's highest id, are used (``still_listed``)."""
    if before is None:
        return Reuse(False, "not cached")
    if before.state.czxid != state.czxid:
        return Reuse(False, "the directory was created again")
    if state.pzxid < before.state.pzxid or state.cversion < before.state.cversion:
        return Reuse(False, "the directory's stat went back (ZooKeeper restored?)")
    now = set(listed)
    was = set(before.listed)
    added = len(now - was)
    removed = len(was - now)
    if state.pzxid == before.state.pzxid and state.cversion == before.state.cversion:
        if added or removed:
            return Reuse(False, "the listing changed but the directory's stat did not")
        return Reuse(True, "unchanged")
    if before.proven and proven and state.cversion - before.state.cversion == added + removed:
        return Reuse(True, "accounted")
    return Reuse(False, "children created or deleted beyond what the listings show")


def still_listed(
    records: Iterable[CachedRecord], listed: Iterable[int], high: int | None
) -> list[CachedRecord]:
    """The records of a reusable directory that stand for reads now: of ids listed now
    (a ledger gone from the listing leaves the cache), none above ``high`` (the previous
    cycle's highest listed id: a newer ledger is always read)."""
    now = listed if isinstance(listed, (set, frozenset)) else set(listed)
    return [r for r in records if r.ledger_id in now and (high is None or r.ledger_id <= high)]


# --- packed columns, little-endian, zlib ---------------------------------------------------


def _packed(values: array) -> bytes:
    if sys.byteorder != "little":
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _unpacked(typecode: str, data: bytes) -> array:
    values = array(typecode)
    values.frombytes(data)
    if sys.byteorder != "little":
        values.byteswap()
    return values


class BodyError(ValueError):
    """Packed ids or records that do not decode: the directory is read again."""


def encode_ids(ids: Iterable[int]) -> bytes:
    """Ledger ids, packed (a row's ``listed``)."""
    return zlib.compress(_MAGIC + _packed(array("q", ids)), 1)


def decode_ids(data: bytes) -> array:
    """The ledger ids ``encode_ids`` packed; ``BodyError`` if they are not."""
    try:
        raw = zlib.decompress(data)
    except zlib.error as exc:
        raise BodyError(f"not packed ledger ids: {exc}") from None
    if raw[:4] != _MAGIC or (len(raw) - 4) % 8:
        raise BodyError("packed ledger ids of another format, or truncated")
    return _unpacked("q", raw[4:])


def encode_records(records: Sequence[CachedRecord]) -> bytes:
    """Records, packed column by column, their custom metadata once per distinct map."""
    tags: dict[tuple[tuple[str, bytes], ...], int] = {}
    by_map: dict[int, int] = {}  # the same map object (a directory's records share them)
    indexes = []
    for record in records:
        index = by_map.get(id(record.custom))
        if index is None:
            key = tuple(sorted(record.custom.items()))
            index = by_map[id(record.custom)] = tags.setdefault(key, len(tags))
        indexes.append(index)
    tags_json = json.dumps(
        [[[k, base64.b64encode(v).decode("ascii")] for k, v in key] for key in tags]
    ).encode("utf-8")
    columns = [
        array("q", [r.ledger_id for r in records]),
        array("q", [r.czxid for r in records]),
        array("q", [r.znode_ctime_ms for r in records]),
        array("q", [_NONE if r.ctime_ms is None else r.ctime_ms for r in records]),
        array("q", [r.length for r in records]),
        array("i", [r.format_version for r in records]),
        array("i", indexes),
    ]
    header = _HEADER.pack(_MAGIC, len(records), len(tags_json))
    return zlib.compress(header + tags_json + b"".join(_packed(c) for c in columns), 1)


def decode_records(body: bytes) -> list[CachedRecord]:
    """The records ``encode_records`` packed; ``BodyError`` if they are not, whole.
    Records with the same custom metadata share one map (``custom``)."""
    try:
        raw = zlib.decompress(body)
        magic, count, tags_size = _HEADER.unpack_from(raw)
    except (zlib.error, struct.error) as exc:
        raise BodyError(f"not packed records: {exc}") from None
    if magic != _MAGIC:
        raise BodyError(f"packed records of another format ({magic!r})")
    offset = _HEADER.size
    try:
        tags_list = json.loads(raw[offset : offset + tags_size])
        customs = [{k: base64.b64decode(v) for k, v in pairs} for pairs in tags_list]
    except (ValueError, TypeError) as exc:
        raise BodyError(f"packed records' tags do not decode: {exc}") from None
    offset += tags_size
    columns = []
    for typecode in ("q", "q", "q", "q", "q", "i", "i"):
        width = array(typecode).itemsize * count
        chunk = raw[offset : offset + width]
        if len(chunk) != width:
            raise BodyError("packed records truncated")
        columns.append(_unpacked(typecode, chunk))
        offset += width
    if offset != len(raw):
        raise BodyError(f"{len(raw) - offset} bytes after the packed records")
    ids, czxids, znode_ctimes, ctimes, lengths, formats, tag_index = columns
    if any(not 0 <= i < len(customs) for i in tag_index):
        raise BodyError("packed records name tags they do not have")
    return [
        CachedRecord(
            ids[i],
            czxids[i],
            znode_ctimes[i],
            None if ctimes[i] == _NONE else ctimes[i],
            lengths[i],
            formats[i],
            customs[tag_index[i]],
        )
        for i in range(count)
    ]
