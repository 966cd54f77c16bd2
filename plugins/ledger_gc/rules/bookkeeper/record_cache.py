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
re-check before a delete reads the znode itself (``bookkeeper/deleting.py``). Of a
record's custom metadata only its Pulsar tags are kept, decoded (``PulsarTags``), each
distinct one once a row: a reused ledger's metadata is not decoded again, which with a
topic's ledgers among every other topic's (ids from one counter) was most of a cached
ledger's time.
"""

from __future__ import annotations

import json
import struct
import sys
import zlib
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain

from ledger_gc.rules.bookkeeper.classify import PulsarTags
from ledger_gc.rules.bookkeeper.records import CLOSED

#: What a row's body holds; a row of another format is read again, never guessed.
#: 1: each distinct custom-metadata map, raw (base64 in JSON); 2: each distinct
#: ``PulsarTags``, decoded.
CACHE_FORMAT = 2
_MAGIC = b"LGC" + bytes([CACHE_FORMAT])
_HEADER = struct.Struct("<4sII")  # magic, records, bytes of the tags (JSON)
#: The fields of a ``PulsarTags`` (a row keeps each as a JSON list of them, in order).
_TAG_WIDTH = len(PulsarTags._fields)
_TEXT_OR_NONE = frozenset({str, type(None)})
#: "No value" in an int64 column (a record without its own ctime).
_NONE = -(2**63)


@dataclass(frozen=True)
class DirectoryState:
    """A ledger directory's stat as one ``getChildren2`` answered it."""

    czxid: int
    cversion: int
    pzxid: int


class CachedRecord:
    """One CLOSED ledger's classification inputs, as its record and znode had them:
    what ``scan.ledger_of_record`` reads of a decoded record (``state``, ``length``,
    ``format_version``, ``ctime_ms``, and ``custom`` as ``PulsarTags``), so a cached
    ledger is built by the same function as a freshly read one
    (``scan.ledger_of_fields``)."""

    __slots__ = (
        "ctime_ms",
        "czxid",
        "format_version",
        "ledger_id",
        "length",
        "tags",
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
        tags: PulsarTags,
    ) -> None:
        self.ledger_id = ledger_id
        self.czxid = czxid
        self.znode_ctime_ms = znode_ctime_ms
        self.ctime_ms = ctime_ms
        self.length = length
        self.format_version = format_version
        self.tags = tags

    def key(self) -> tuple[object, ...]:
        return (
            self.ledger_id,
            self.czxid,
            self.znode_ctime_ms,
            self.ctime_ms,
            self.length,
            self.format_version,
            self.tags,
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
    cycle's highest id, are used (``Packed.standing``)."""
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


class CountersError(ValueError):
    """A cycle row's id counters that do not decode: the cycle reads every ledger and
    writes the row afresh (a guess could reuse records of another history)."""


def decode_counters(
    text: str | bytes, history_key: str
) -> tuple[dict[str, list[int]], list[int] | None]:
    """A ``bk_record_cycles`` row's ``id_counters`` JSON: counter name -> ``[czxid,
    cversion]``, and the probe parent's mark under ``history_key`` (None: absent).
    ``CountersError`` if it is not JSON, or not of those types (a row cut short by a
    failed write, or edited by hand)."""
    try:
        decoded = json.loads(text)
    except (ValueError, TypeError) as exc:
        raise CountersError(f"not JSON ({exc})") from None
    if not isinstance(decoded, dict):
        raise CountersError(f"a JSON {type(decoded).__name__}, not an object")
    counters: dict[str, list[int]] = {}
    probe: list[int] | None = None
    for name, value in decoded.items():
        pair = _int_pair(value)
        if pair is None:
            raise CountersError(f"{name!r} is {value!r}, not [czxid, cversion]")
        if name == history_key:
            probe = pair
        else:
            counters[name] = pair
    return counters, probe


def _int_pair(value: object) -> list[int] | None:
    if not isinstance(value, list) or len(value) != 2:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return None
    return [int(v) for v in value]


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


@dataclass
class Packed:
    """Records as they are packed: one column per field (``array``), and the distinct
    tags the ``tag_index`` column points into. A survey classifies a directory's cached
    records straight from the columns: no object per record unless asked
    (``record``)."""

    ledger_ids: array = field(default_factory=lambda: array("q"))
    czxids: array = field(default_factory=lambda: array("q"))
    znode_ctimes: array = field(default_factory=lambda: array("q"))
    ctimes: array = field(default_factory=lambda: array("q"))  # _NONE: the record has none
    lengths: array = field(default_factory=lambda: array("q"))
    formats: array = field(default_factory=lambda: array("i"))
    tag_index: array = field(default_factory=lambda: array("i"))
    tags: list[PulsarTags] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ledger_ids)

    def ctime(self, i: int) -> int | None:
        value = self.ctimes[i]
        return None if value == _NONE else value

    def record(self, i: int) -> CachedRecord:
        return CachedRecord(
            self.ledger_ids[i],
            self.czxids[i],
            self.znode_ctimes[i],
            self.ctime(i),
            self.lengths[i],
            self.formats[i],
            self.tags[self.tag_index[i]],
        )

    def records(self) -> list[CachedRecord]:
        return [self.record(i) for i in range(len(self))]

    def standing(self, listed: Iterable[int], high: int | None) -> list[int]:
        """The rows that stand for reads now (of a directory ``reusable`` said may be
        reused): of ids listed now (a ledger gone from the listing leaves the cache),
        none above ``high`` (the previous cycle's highest listed id: a newer ledger is
        always read)."""
        now = listed if isinstance(listed, set | frozenset) else set(listed)
        ids = self.ledger_ids
        if high is None:
            return [i for i in range(len(ids)) if ids[i] in now]
        return [i for i in range(len(ids)) if ids[i] in now and ids[i] <= high]

    def rows(self, keep: Sequence[int]) -> Packed:
        """These rows only (the tags kept whole: tags no row points at cost nothing)."""

        def pick(column: array) -> array:
            return array(column.typecode, [column[i] for i in keep])

        return Packed(
            pick(self.ledger_ids),
            pick(self.czxids),
            pick(self.znode_ctimes),
            pick(self.ctimes),
            pick(self.lengths),
            pick(self.formats),
            pick(self.tag_index),
            list(self.tags),
        )


def encode_records(records: Sequence[CachedRecord], packed: Packed | None = None) -> bytes:
    """``packed``'s rows (if any) and then ``records``, packed column by column, their
    tags once per distinct value."""
    base = packed or Packed()
    tags: dict[PulsarTags, int] = {}
    remap = [tags.setdefault(t, len(tags)) for t in base.tags]
    by_object: dict[int, int] = {}  # the same object (a topic's records share one)
    indexes = [remap[i] for i in base.tag_index]
    for record in records:
        index = by_object.get(id(record.tags))
        if index is None:
            index = by_object[id(record.tags)] = tags.setdefault(record.tags, len(tags))
        indexes.append(index)
    tags_json = json.dumps(list(tags)).encode("utf-8")  # (each a tuple: a JSON list)
    columns = [
        base.ledger_ids + array("q", [r.ledger_id for r in records]),
        base.czxids + array("q", [r.czxid for r in records]),
        base.znode_ctimes + array("q", [r.znode_ctime_ms for r in records]),
        base.ctimes + array("q", [_NONE if r.ctime_ms is None else r.ctime_ms for r in records]),
        base.lengths + array("q", [r.length for r in records]),
        base.formats + array("i", [r.format_version for r in records]),
        array("i", indexes),
    ]
    count = len(base) + len(records)
    header = _HEADER.pack(_MAGIC, count, len(tags_json))
    return zlib.compress(header + tags_json + b"".join(_packed(c) for c in columns), 1)


def decode_records(body: bytes) -> list[CachedRecord]:
    """The records ``encode_records`` packed (``decode_packed``), one object each."""
    return decode_packed(body).records()


def decode_packed(body: bytes) -> Packed:
    """The columns ``encode_records`` packed; ``BodyError`` if they are not, whole.
    Rows with the same tags point at one ``PulsarTags``."""
    try:
        raw = zlib.decompress(body)
        magic, count, tags_size = _HEADER.unpack_from(raw)
    except (zlib.error, struct.error) as exc:
        raise BodyError(f"not packed records: {exc}") from None
    if magic != _MAGIC:
        raise BodyError(f"packed records of another format ({magic!r})")
    offset = _HEADER.size
    tags = _decoded_tags(raw[offset : offset + tags_size])
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
    packed = Packed(ids, czxids, znode_ctimes, ctimes, lengths, formats, tag_index, tags)
    if packed.tag_index and not 0 <= min(packed.tag_index) <= max(packed.tag_index) < len(tags):
        raise BodyError("packed records name tags they do not have")
    return packed


def _decoded_tags(data: bytes) -> list[PulsarTags]:
    """A body's distinct tags; ``BodyError`` unless each is its fields, text or None
    (a row edited by hand must not pass a number or a list off as a topic's name)."""
    try:
        rows = json.loads(data)
    except ValueError as exc:
        raise BodyError(f"packed records' tags do not decode: {exc}") from None
    if type(rows) is not list or any(type(r) is not list or len(r) != _TAG_WIDTH for r in rows):
        raise BodyError("packed records' tags are not lists of their fields")
    if not set(map(type, chain.from_iterable(rows))) <= _TEXT_OR_NONE:
        raise BodyError("packed records' tags hold values that are not text")
    return list(map(PulsarTags._make, rows))
