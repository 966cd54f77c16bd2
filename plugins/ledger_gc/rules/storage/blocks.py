"""The block object format: encode, decode, and read a block's index (pure, no I/O).

A block is one immutable S3 object holding consecutive entries of one ledger. Its layout
(all integers big-endian, as BookKeeper and Pulsar write theirs)::

    header   magic  b"LGCB"            4 bytes
             format version (u8)       1 byte   (FORMAT_VERSION, currently 1)
             ledger id (i64)           8 bytes
             first entry id (i64)      8 bytes
             entry count (u32)         4 bytes  -> HEADER_SIZE = 25 bytes
    entries  per entry, in entry-id order:
             payload length (u32)      4 bytes
             CRC-32 of the payload     4 bytes  (zlib.crc32, the IEEE polynomial)
             payload                   length bytes
    index    offset of each entry from the start of the object (u64 each)
    trailer  index offset (u64)        8 bytes
             entry count (u32)         4 bytes
             magic  b"LGCI"            4 bytes  -> TRAILER_SIZE = 16 bytes

Why this shape:

* The trailer is fixed-size and last, so a reader that wants a few entries of a large
  block reads the last bytes of the object (one ranged GET), then the index, then
  one ranged GET spanning exactly the entries it wants, never the whole block.
* Every entry carries its own length and checksum, so a ranged read can verify what it
  got without the rest of the object, and a reader can check the length against the
  index (a corrupt index cannot silently return the wrong bytes).
* CRC-32 rather than CRC-32C: no CRC-32C library is installed in the project's
  environment and the format must not need one. The checksum field's meaning is tied
  to the format version; a future version may switch to CRC-32C.
* The header repeats the ledger id and first entry id that the key also encodes, so an
  object copied or renamed to the wrong key is detected on a full read.

Any malformation raises ``BlockFormatError`` naming what is wrong and where.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from ledger_gc.errors import BlockFormatError

BLOCK_MAGIC = b"LGCB"
INDEX_MAGIC = b"LGCI"
FORMAT_VERSION = 1

_HEADER = struct.Struct(">4sBqqI")
_ENTRY_HEADER = struct.Struct(">II")
_OFFSET = struct.Struct(">Q")
_TRAILER = struct.Struct(">QI4s")

HEADER_SIZE = _HEADER.size  # 25
ENTRY_HEADER_SIZE = _ENTRY_HEADER.size  # 8
OFFSET_SIZE = _OFFSET.size  # 8
TRAILER_SIZE = _TRAILER.size  # 16

_MAX_U32 = 2**32 - 1
_MAX_ID = 2**63 - 1


@dataclass(frozen=True)
class Block:
    """A decoded block: its ids and every entry's payload, checksums verified."""

    ledger_id: int
    first_entry_id: int
    entries: tuple[bytes, ...]

    @property
    def last_entry_id(self) -> int:
        """The id of the block's last entry."""
        return self.first_entry_id + len(self.entries) - 1


@dataclass(frozen=True)
class Trailer:
    """The fixed-size end of a block: where the index starts and how many entries."""

    index_offset: int
    entry_count: int

    @property
    def index_size(self) -> int:
        """Bytes of the index section (one u64 offset per entry)."""
        return self.entry_count * OFFSET_SIZE

    @property
    def object_size(self) -> int:
        """The size the whole object must have, given this trailer."""
        return self.index_offset + self.index_size + TRAILER_SIZE


@dataclass(frozen=True)
class BlockIndex:
    """Where each entry of a block starts, enough to plan a ranged read."""

    index_offset: int
    offsets: tuple[int, ...]

    @property
    def entry_count(self) -> int:
        """How many entries the block holds."""
        return len(self.offsets)

    def byte_range(self, first: int, last: int) -> tuple[int, int]:
        """The ``[start, end)`` byte range of entries ``first..last`` (block-relative).

        ``first`` and ``last`` count from 0 at the block's first entry, inclusive.
        """
        if not 0 <= first <= last < self.entry_count:
            raise ValueError(
                f"entries {first}..{last} are outside this block's 0..{self.entry_count - 1}"
            )
        end = self.offsets[last + 1] if last + 1 < self.entry_count else self.index_offset
        return self.offsets[first], end


def encode_block(ledger_id: int, first_entry_id: int, payloads: Sequence[bytes]) -> bytes:
    """Encode entries ``first_entry_id, first_entry_id + 1, ...`` of a ledger as a block.

    Raises ValueError for arguments that could never make a valid block (no entries,
    negative ids, an entry too large for its u32 length field).
    """
    _check_id(ledger_id, "ledger id")
    _check_id(first_entry_id, "first entry id")
    if not payloads:
        raise ValueError("a block needs at least one entry")
    if len(payloads) > _MAX_U32:
        raise ValueError(f"a block holds at most {_MAX_U32} entries, got {len(payloads)}")
    if first_entry_id + len(payloads) - 1 > _MAX_ID:
        raise ValueError("the block's last entry id would overflow a signed 64-bit id")

    parts = [_HEADER.pack(BLOCK_MAGIC, FORMAT_VERSION, ledger_id, first_entry_id, len(payloads))]
    offsets = []
    position = HEADER_SIZE
    for number, payload in enumerate(payloads):
        payload = bytes(payload)
        if len(payload) > _MAX_U32:
            raise ValueError(f"entry {first_entry_id + number} is larger than 4 GiB")
        offsets.append(position)
        parts.append(_ENTRY_HEADER.pack(len(payload), zlib.crc32(payload)))
        parts.append(payload)
        position += ENTRY_HEADER_SIZE + len(payload)
    parts.append(struct.pack(f">{len(offsets)}Q", *offsets))
    parts.append(_TRAILER.pack(position, len(offsets), INDEX_MAGIC))
    return b"".join(parts)


def decode_block(
    data: bytes,
    *,
    expected_ledger_id: int | None = None,
    expected_first_entry_id: int | None = None,
) -> Block:
    """Decode a whole block, verifying its structure and every entry's checksum.

    ``expected_*`` are the ids the object's key claims; a header that disagrees means the
    object is not what its key says, which is reported as corruption.
    """
    data = bytes(data)
    if len(data) < HEADER_SIZE + TRAILER_SIZE:
        raise BlockFormatError(
            f"block is {len(data)} bytes, shorter than the {HEADER_SIZE + TRAILER_SIZE}-byte "
            "minimum (header + trailer): truncated"
        )
    magic, version, ledger_id, first_entry_id, count = _HEADER.unpack_from(data)
    if magic != BLOCK_MAGIC:
        raise BlockFormatError(f"bad block magic {magic!r}, expected {BLOCK_MAGIC!r}")
    if version != FORMAT_VERSION:
        raise BlockFormatError(
            f"unsupported block format version {version} (this reader knows {FORMAT_VERSION})"
        )
    if ledger_id < 0 or first_entry_id < 0:
        raise BlockFormatError(
            f"negative id in block header: ledger {ledger_id}, first entry {first_entry_id}"
        )
    if count == 0:
        raise BlockFormatError("block header says 0 entries; a block has at least one")
    if expected_ledger_id is not None and ledger_id != expected_ledger_id:
        raise BlockFormatError(
            f"block header says ledger {ledger_id}, its key says ledger {expected_ledger_id}"
        )
    if expected_first_entry_id is not None and first_entry_id != expected_first_entry_id:
        raise BlockFormatError(
            f"block header says first entry {first_entry_id}, its key says "
            f"{expected_first_entry_id}"
        )

    trailer = parse_trailer(data, object_size=len(data))
    if trailer.entry_count != count:
        raise BlockFormatError(
            f"block header says {count} entries, trailer says {trailer.entry_count}"
        )
    index = parse_index(
        data[trailer.index_offset : trailer.index_offset + trailer.index_size], trailer
    )
    entries = decode_entries(
        data[HEADER_SIZE : trailer.index_offset],
        first_entry_id,
        count=count,
        offsets=[offset - HEADER_SIZE for offset in index.offsets],
    )
    return Block(ledger_id, first_entry_id, tuple(entries))


def parse_trailer(tail: bytes, *, object_size: int | None = None) -> Trailer:
    """Parse the trailer from the last ``TRAILER_SIZE`` bytes of ``tail``.

    ``tail`` may be any suffix of the object at least that long (a reader typically
    fetches a larger suffix, hoping to get the index in the same request). With
    ``object_size`` the trailer is also checked against the object's real size.
    """
    if len(tail) < TRAILER_SIZE:
        raise BlockFormatError(
            f"block tail is {len(tail)} bytes, shorter than the {TRAILER_SIZE}-byte trailer: "
            "truncated"
        )
    index_offset, count, magic = _TRAILER.unpack_from(tail, len(tail) - TRAILER_SIZE)
    if magic != INDEX_MAGIC:
        raise BlockFormatError(
            f"bad trailer magic {magic!r}, expected {INDEX_MAGIC!r}: truncated or not a block"
        )
    if count == 0:
        raise BlockFormatError("block trailer says 0 entries; a block has at least one")
    if index_offset < HEADER_SIZE + count * ENTRY_HEADER_SIZE:
        raise BlockFormatError(
            f"trailer index offset {index_offset} is too small for {count} entries"
        )
    trailer = Trailer(index_offset, count)
    if object_size is not None and trailer.object_size != object_size:
        raise BlockFormatError(
            f"trailer describes a {trailer.object_size}-byte block, the object is "
            f"{object_size} bytes: truncated or trailing garbage"
        )
    return trailer


def parse_index(index: bytes, trailer: Trailer) -> BlockIndex:
    """Parse the index section (``trailer.index_size`` bytes) and check its offsets.

    The offsets must start right after the header, leave room for each entry's 8-byte
    header, and end before the index: anything else is a corrupt index.
    """
    if len(index) != trailer.index_size:
        raise BlockFormatError(
            f"index is {len(index)} bytes, expected {trailer.index_size} for "
            f"{trailer.entry_count} entries"
        )
    offsets = struct.unpack(f">{trailer.entry_count}Q", index)
    if offsets[0] != HEADER_SIZE:
        raise BlockFormatError(
            f"index says entry 0 starts at byte {offsets[0]}, expected {HEADER_SIZE}"
        )
    bounds = (*offsets, trailer.index_offset)
    for number in range(trailer.entry_count):
        if bounds[number + 1] - bounds[number] < ENTRY_HEADER_SIZE:
            raise BlockFormatError(
                f"index offsets of entries {number} and {number + 1} (block-relative) are "
                f"{bounds[number]} and {bounds[number + 1]}: not increasing by at least "
                f"{ENTRY_HEADER_SIZE}"
            )
    return BlockIndex(trailer.index_offset, offsets)


def decode_entries(
    span: bytes,
    first_entry_id: int,
    *,
    count: int | None = None,
    offsets: Sequence[int] | None = None,
) -> list[bytes]:
    """Decode consecutive entries from ``span``, verifying each checksum.

    ``span`` is the bytes of whole entries (as a ranged GET returns them),
    ``first_entry_id`` the id of the first of them, used to name entries in errors.
    The span must hold whole entries and nothing else. With ``count`` the number of
    entries must match; with ``offsets`` (span-relative starts, e.g. from the index)
    each entry must start exactly where the index says.
    """
    view = memoryview(bytes(span))
    entries: list[bytes] = []
    position = 0
    while position < len(view):
        entry_id = first_entry_id + len(entries)
        if offsets is not None:
            if len(entries) >= len(offsets):
                raise BlockFormatError(
                    f"entry {entry_id}: bytes left over after the {len(offsets)} indexed entries"
                )
            if offsets[len(entries)] != position:
                raise BlockFormatError(
                    f"entry {entry_id}: index says it starts at span byte "
                    f"{offsets[len(entries)]}, the previous entry ends at {position}"
                )
        if len(view) - position < ENTRY_HEADER_SIZE:
            raise BlockFormatError(
                f"entry {entry_id}: only {len(view) - position} bytes left for its "
                f"{ENTRY_HEADER_SIZE}-byte header: truncated"
            )
        length, checksum = _ENTRY_HEADER.unpack_from(view, position)
        start = position + ENTRY_HEADER_SIZE
        if start + length > len(view):
            raise BlockFormatError(
                f"entry {entry_id}: length {length} runs past the end of the data "
                f"({len(view) - start} bytes left): truncated or corrupt length"
            )
        payload = bytes(view[start : start + length])
        actual = zlib.crc32(payload)
        if actual != checksum:
            raise BlockFormatError(
                f"entry {entry_id}: checksum mismatch (stored {checksum:#010x}, "
                f"computed {actual:#010x})"
            )
        entries.append(payload)
        position = start + length
    if count is not None and len(entries) != count:
        raise BlockFormatError(
            f"expected {count} entries from entry {first_entry_id}, found {len(entries)}"
        )
    return entries


def _check_id(value: int, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{what} must be an int, got {type(value).__name__}")
    if not 0 <= value <= _MAX_ID:
        raise ValueError(f"{what} {value} is outside 0..{_MAX_ID}")
