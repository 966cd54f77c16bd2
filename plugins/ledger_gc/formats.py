"""Read and write the managed-ledger metadata records (Pulsar's MLDataFormats wire format).

A managed ledger's znode holds a ``ManagedLedgerInfo`` and each of its cursors' znodes a
``ManagedCursorInfo``, as binary proto2 with Pulsar's field numbers (see
``proto/mldataformats.proto`` and shared/DESIGN.md, "Wire format").

Reading follows Pulsar's ``MetaStoreImpl``: a record is either raw protobuf or, when the
broker was configured to compress metadata, framed as::

    0x4778 (2 bytes, big-endian) | N (int32, big-endian) | N bytes of *InfoMetadata
    | payload compressed with *InfoMetadata.compressionType

The magic cannot be mistaken for raw protobuf: 0x47 as a first byte is field 8 with wire
type 7, which does not exist, so no valid raw record starts with it. (Pulsar falls back to
parsing the whole thing raw when the framed decode fails; that parse always fails for the
same reason, so here the framed error is reported directly.)

Writing keeps the record's own framing (``Framing``): a record read compressed is
written back with the same codec and framing, byte-compatible with Pulsar's reader, and a
raw record stays raw while it fits in a znode. ``encode_for_znode`` compresses a raw
record that would not fit (ZooKeeper refuses requests above ``jute.maxbuffer``, 1 MiB by
default) and refuses, before anything is sent, one that does not fit even compressed.

Every decode failure raises :class:`MetadataFormatError` naming the znode and what is
wrong, and never returns a partly filled record. For a garbage collector "could not tell
what is in here" must never look like "there are no ledgers here": a record read as
empty, or with its ledger list cut short, would make every missing ledger look orphaned.

Fields this module does not declare (a newer Pulsar's, or another tool's) are kept by
protobuf as unknown fields and written back unchanged by the encoders, so a
read-modify-write here never strips what another writer put in a record.

The marker helpers at the end implement the trim's deletable markers: entries
``ledger-gc.deletable.<ledgerId>`` in ``ManagedLedgerInfo.properties`` whose value is a
compact JSON object with at least ``size``, ``entries``, ``timestamp`` and ``markedAt``.
"""

from __future__ import annotations

import importlib
import json
import re
import struct
import uuid
import zlib
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

from google.protobuf.message import DecodeError, EncodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from ledger_gc.errors import (
    MetadataFormatError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)
from ledger_gc.proto.mldataformats_pb2 import (
    CompressionType,
    KeyValue,
    LongProperty,
    ManagedCursorInfo,
    ManagedCursorInfoMetadata,
    ManagedLedgerInfo,
    ManagedLedgerInfoMetadata,
    MessageRange,
    NestedPositionInfo,
    OffloadContext,
    StringProperty,
)

__all__ = [
    "DELETABLE_MARKER_PREFIX",
    "MAGIC_MANAGED_INFO_METADATA",
    "MAX_UNCOMPRESSED_SIZE",
    "RAW",
    "CompressionType",
    "Framing",
    "KeyValue",
    "LedgerInfo",
    "LongProperty",
    "ManagedCursorInfo",
    "ManagedCursorInfoMetadata",
    "ManagedLedgerInfo",
    "ManagedLedgerInfoMetadata",
    "MessageRange",
    "NestedPositionInfo",
    "OffloadContext",
    "StringProperty",
    "decode_managed_cursor_info",
    "decode_managed_cursor_info_framed",
    "decode_managed_ledger_info",
    "decode_managed_ledger_info_framed",
    "decode_marker_value",
    "deletable_markers",
    "encode_for_znode",
    "encode_managed_cursor_info",
    "encode_managed_ledger_info",
    "encode_marker_value",
    "get_property",
    "java_uuid",
    "marker_key",
    "offload_marker_fields",
    "parse_marker_key",
    "properties_of",
    "remove_properties",
    "set_properties",
    "set_property",
]

LedgerInfo = ManagedLedgerInfo.LedgerInfo

# Pulsar's MetaStoreImpl.MAGIC_MANAGED_INFO_METADATA.
MAGIC_MANAGED_INFO_METADATA = 0x4778
_FRAME_HEADER = struct.Struct(">Hi")  # magic (unsigned short), metadata length (int32)
_MAGIC_BYTES = MAGIC_MANAGED_INFO_METADATA.to_bytes(2, "big")

# Largest uncompressed size a framed record may claim. ZooKeeper caps a znode at about
# 1 MiB (jute.maxbuffer), so a compressed record this large means a corrupt header; the
# cap keeps a corrupt or hostile header from making the GC allocate gigabytes. 256 MiB is
# several million ledgers, far beyond any real managed ledger.
MAX_UNCOMPRESSED_SIZE = 256 * 1024 * 1024

_M = TypeVar("_M", bound=Message)


# --- errors ---------------------------------------------------------------------------


def _describe(record: str, path: str) -> str:
    return f"{record} at {path}" if path else f"{record} (no znode path given)"


def _format_error(record: str, path: str, problem: str) -> MetadataFormatError:
    return MetadataFormatError(
        f"cannot decode {_describe(record, path)}: {problem}; nothing is decided from it"
    )


# --- codecs ---------------------------------------------------------------------------
#
# Pulsar's CompressionCodec implementations (pulsar-common, org.apache.pulsar.common.
# compression) and what each writes:
#   LZ4    a raw LZ4 block, no frame and no size prefix (airlift Lz4Compressor); the
#          uncompressed size comes from the metadata.
#   ZLIB   java.util.zip.Deflater with defaults: a zlib stream (2-byte header) flushed with
#          SYNC_FLUSH and never finished, so it has no final block and no Adler-32
#          trailer. zlib.decompress() rejects such a stream as truncated; a decompressobj
#          reads it.
#   ZSTD   a zstd frame (airlift ZstdCompressor, level 3).
#   SNAPPY a raw snappy block (length varint + body), not the framing format.


class _Codec:
    """How to (de)compress one CompressionType, and what to install when it is missing."""

    def __init__(
        self,
        name: str,
        modules: tuple[str, ...],
        pip_package: str,
        decompress: Callable[[ModuleType, bytes, int], bytes],
        compress: Callable[[ModuleType, bytes], bytes],
    ) -> None:
        self.name = name
        self.modules = modules  # tried in order; the first that imports is used
        self.pip_package = pip_package
        self.decompress = decompress
        self.compress = compress


def _decompress_zlib(_module: ModuleType, payload: bytes, size: int) -> bytes:
    inflater = zlib.decompressobj()
    # max_length bounds the output: one byte more than claimed is enough to see a lie.
    return inflater.decompress(payload, size + 1)


def _decompress_lz4(lz4_block: ModuleType, payload: bytes, size: int) -> bytes:
    # A raw block carries no size: the destination size is the metadata's, which also
    # bounds what the decompressor may write.
    return bytes(lz4_block.decompress(payload, uncompressed_size=size))


def _decompress_zstd(zstandard: ModuleType, payload: bytes, size: int) -> bytes:
    content_size = zstandard.frame_content_size(payload)
    if content_size >= 0 and content_size != size:
        # Checked before decompressing: zstandard allocates what the frame header claims.
        raise ValueError(f"zstd frame header says {content_size} bytes, metadata says {size}")
    # max_output_size only matters when the frame does not record its content size;
    # 0 would mean "unlimited", hence at least 1 (a longer output then fails the length
    # check below).
    decompressor = zstandard.ZstdDecompressor()
    return bytes(decompressor.decompress(payload, max_output_size=max(size, 1)))


def _snappy_declared_length(payload: bytes) -> int:
    """The uncompressed length a raw snappy block starts with (a little-endian varint)."""
    result = 0
    for shift, byte in zip(range(0, 35, 7), payload, strict=False):
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result
    raise ValueError("snappy block has no valid length header")


def _decompress_snappy(module: ModuleType, payload: bytes, size: int) -> bytes:
    declared = _snappy_declared_length(payload)
    if declared != size:
        # Checked before decompressing: the library allocates what the header claims.
        raise ValueError(f"snappy header says {declared} bytes, metadata says {size}")
    if module.__name__ == "cramjam":
        return bytes(module.snappy.decompress_raw(payload))
    return bytes(module.uncompress(payload))


def _decompress_none(_module: ModuleType, payload: bytes, _size: int) -> bytes:
    return payload


# The compressors write what Pulsar's codecs write (see the table above), so that a
# record ledger-gc writes back reads in Pulsar exactly as one the broker wrote.


def _compress_zlib(_module: ModuleType, raw: bytes) -> bytes:
    # Deflater defaults (level 6), SYNC_FLUSH, never finished: Pulsar's ZLIB codec.
    deflater = zlib.compressobj()
    return deflater.compress(raw) + deflater.flush(zlib.Z_SYNC_FLUSH)


def _compress_lz4(lz4_block: ModuleType, raw: bytes) -> bytes:
    return bytes(lz4_block.compress(raw, store_size=False))


def _compress_zstd(zstandard: ModuleType, raw: bytes) -> bytes:
    return bytes(zstandard.ZstdCompressor(level=3).compress(raw))


def _compress_snappy(module: ModuleType, raw: bytes) -> bytes:
    if module.__name__ == "cramjam":
        return bytes(module.snappy.compress_raw(raw))
    return bytes(module.compress(raw))


_CODECS: dict[int, _Codec] = {
    CompressionType.NONE: _Codec("NONE", (), "", _decompress_none, lambda _m, raw: raw),
    CompressionType.ZLIB: _Codec("ZLIB", (), "", _decompress_zlib, _compress_zlib),
    CompressionType.LZ4: _Codec("LZ4", ("lz4.block",), "lz4", _decompress_lz4, _compress_lz4),
    CompressionType.ZSTD: _Codec(
        "ZSTD", ("zstandard",), "zstandard", _decompress_zstd, _compress_zstd
    ),
    # python-snappy >= 0.7 is itself built on cramjam; either one reads raw blocks.
    CompressionType.SNAPPY: _Codec(
        "SNAPPY", ("snappy", "cramjam"), "python-snappy", _decompress_snappy, _compress_snappy
    ),
}


@dataclass(frozen=True)
class Framing:
    """How a record is stored in its znode: raw protobuf, or Pulsar's compression frame
    with a codec. A read-modify-write keeps it (``decode_*_framed`` returns it)."""

    compression: int = CompressionType.NONE
    framed: bool = False

    @property
    def codec_name(self) -> str:
        return _CODECS[self.compression].name if self.framed else "raw"


RAW = Framing()


def _load_codec_module(codec: _Codec, record: str, path: str) -> ModuleType:
    """Import the codec's library now, not at module import: most stores never compress,
    and a missing optional library must only matter for a record that needs it."""
    if not codec.modules:
        return zlib
    for name in codec.modules:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise UnsupportedCompressionError(
        f"cannot decode {_describe(record, path)}: it is {codec.name}-compressed and no "
        f"{codec.name} codec is installed (tried: {', '.join(codec.modules)}); install it "
        f"with `pip install {codec.pip_package}` (or `pip install 'ledger-gc[codecs]'`). "
        "The record was not used."
    )


# --- decoding -------------------------------------------------------------------------


def _wire_type_clash(message: Message) -> str | None:
    """Find a declared field that arrived with the wrong wire type, anywhere in ``message``.

    protobuf parks such a field among the unknown fields instead of failing, so a znode
    holding some other record (a cursor read as a managed ledger: its field 1 is a varint,
    not a LedgerInfo) would otherwise decode "successfully" as an empty ledger list.
    Unknown *field numbers* are fine and are kept: they are what a newer writer added.
    """
    descriptor = message.DESCRIPTOR
    for field in UnknownFieldSet(message):
        declared = descriptor.fields_by_number.get(field.field_number)
        if declared is not None:
            return (
                f"field {declared.full_name} (number {field.field_number}) with wire type "
                f"{field.wire_type}, which does not fit its declared type"
            )
    for field_descriptor, value in message.ListFields():
        if field_descriptor.message_type is None:
            continue
        children = value if field_descriptor.is_repeated else (value,)
        for child in children:
            clash = _wire_type_clash(child)
            if clash is not None:
                return clash
    return None


def _parse_record(cls: type[_M], data: bytes, record: str, path: str, what: str) -> _M:
    """Parse ``data`` as a complete, well-formed ``cls`` or raise MetadataFormatError."""
    message = cls()
    try:
        message.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise _format_error(record, path, f"{what} is not valid protobuf ({exc})") from exc
    # The upb runtime parses records that lack required fields without complaint; a
    # LedgerInfo without its ledgerId is exactly the half-filled record we must refuse.
    if not message.IsInitialized():
        missing = ", ".join(message.FindInitializationErrors())
        raise _format_error(record, path, f"{what} lacks required field(s): {missing}")
    clash = _wire_type_clash(message)
    if clash is not None:
        raise _format_error(
            record, path, f"{what} has {clash}: it is not a {record} (corrupt, or another record)"
        )
    return message


def _unframe(
    data: bytes,
    metadata_cls: type[ManagedLedgerInfoMetadata] | type[ManagedCursorInfoMetadata],
    record: str,
    path: str,
) -> tuple[bytes, Framing]:
    """Undo Pulsar's compression framing; return the raw record bytes."""
    if len(data) < _FRAME_HEADER.size:
        raise _format_error(
            record,
            path,
            f"compression frame is truncated: {len(data)} bytes, the header alone is "
            f"{_FRAME_HEADER.size}",
        )
    _, metadata_length = _FRAME_HEADER.unpack_from(data)
    metadata_end = _FRAME_HEADER.size + metadata_length
    if metadata_length < 0 or metadata_end > len(data):
        raise _format_error(
            record,
            path,
            f"compression frame is truncated or corrupt: it declares {metadata_length} "
            f"bytes of {metadata_cls.__name__} but {len(data) - _FRAME_HEADER.size} follow "
            "the header",
        )
    metadata_bytes = data[_FRAME_HEADER.size : metadata_end]
    metadata = metadata_cls()
    try:
        metadata.ParseFromString(metadata_bytes)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise _format_error(
            record, path, f"{metadata_cls.__name__} in the compression frame is corrupt ({exc})"
        ) from exc
    # compressionType is a closed proto2 enum: a value this reader does not know lands in
    # the unknown fields and leaves the field unset. Say which value it was.
    type_field = metadata_cls.COMPRESSIONTYPE_FIELD_NUMBER
    for field in UnknownFieldSet(metadata):
        if field.field_number == type_field:
            raise _format_error(
                record,
                path,
                f"unknown compression type {field.data} in the compression frame (this "
                f"reader knows {', '.join(c.name for c in _CODECS.values())})",
            )
    if not metadata.IsInitialized():
        missing = ", ".join(metadata.FindInitializationErrors())
        raise _format_error(
            record,
            path,
            f"the frame's {metadata_cls.__name__} lacks required field(s): {missing}",
        )
    size = metadata.uncompressedSize
    if not 0 <= size <= MAX_UNCOMPRESSED_SIZE:
        raise _format_error(
            record,
            path,
            f"compression frame claims an uncompressed size of {size} bytes (allowed: 0 to "
            f"{MAX_UNCOMPRESSED_SIZE})",
        )
    codec = _CODECS[metadata.compressionType]
    module = _load_codec_module(codec, record, path)
    payload = data[metadata_end:]
    try:
        raw = codec.decompress(module, payload, size)
    except Exception as exc:  # each codec library has its own error types
        raise _format_error(
            record,
            path,
            f"{codec.name} payload of {len(payload)} bytes does not decompress ({exc})",
        ) from exc
    if len(raw) != size:
        raise _format_error(
            record,
            path,
            f"{codec.name} payload decompressed to {len(raw)} bytes but the frame says "
            f"{size} (truncated or corrupt)",
        )
    return raw, Framing(metadata.compressionType, framed=True)


def _decode(
    data: bytes | bytearray | memoryview | None,
    cls: type[_M],
    metadata_cls: type[ManagedLedgerInfoMetadata] | type[ManagedCursorInfoMetadata],
    path: str,
    allow_empty: bool,
) -> tuple[_M, Framing]:
    record = cls.DESCRIPTOR.name
    if data is None:
        data = b""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"{record} data must be bytes, not {type(data).__name__}")
    data = bytes(data)
    if not data:
        if allow_empty:
            return cls(), RAW
        raise _format_error(
            record,
            path,
            "the znode is empty; no bytes cannot be told apart from a lost record",
        )
    if data.startswith(_MAGIC_BYTES):
        payload, framing = _unframe(data, metadata_cls, record, path)
        return _parse_record(cls, payload, record, path, "the decompressed record"), framing
    return _parse_record(cls, data, record, path, "the record"), RAW


def decode_managed_ledger_info(
    data: bytes | bytearray | memoryview | None, *, path: str = "", allow_empty: bool = False
) -> ManagedLedgerInfo:
    """Decode a managed ledger's znode, raw or in Pulsar's compression framing.

    ``path`` is the znode's path, used only in error messages.

    Empty content (``b""``) raises unless ``allow_empty`` is true. Pulsar creates a new
    managed ledger's znode with no content and reads that as an empty managed ledger, and
    a ``ManagedLedgerInfo`` with no ledgers and no properties serializes to no bytes, so
    the writer side (opening or creating a managed ledger) passes ``allow_empty=True``.
    A garbage collector must not: to it "no bytes" says nothing reliable about which
    ledgers exist, and reading it as "no ledgers" would make every ledger of this managed
    ledger look orphaned.

    Raises MetadataFormatError (UnsupportedCompressionError when the codec's library is
    missing) for anything that is not a complete, well-formed record.
    """
    return decode_managed_ledger_info_framed(data, path=path, allow_empty=allow_empty)[0]


def decode_managed_ledger_info_framed(
    data: bytes | bytearray | memoryview | None, *, path: str = "", allow_empty: bool = False
) -> tuple[ManagedLedgerInfo, Framing]:
    """``decode_managed_ledger_info`` plus the record's framing, for writing it back."""
    return _decode(data, ManagedLedgerInfo, ManagedLedgerInfoMetadata, path, allow_empty)


def decode_managed_cursor_info(
    data: bytes | bytearray | memoryview | None, *, path: str = ""
) -> ManagedCursorInfo:
    """Decode a cursor's znode, raw or in Pulsar's compression framing.

    Empty content always raises: ``cursorsLedgerId`` is required, so no valid cursor
    record is empty, and a cursor whose position cannot be read must not be mistaken for
    one that has consumed nothing (or everything).
    """
    return decode_managed_cursor_info_framed(data, path=path)[0]


def decode_managed_cursor_info_framed(
    data: bytes | bytearray | memoryview | None, *, path: str = ""
) -> tuple[ManagedCursorInfo, Framing]:
    """``decode_managed_cursor_info`` plus the record's framing, for writing it back."""
    return _decode(data, ManagedCursorInfo, ManagedCursorInfoMetadata, path, False)


# --- encoding -------------------------------------------------------------------------


_METADATA_CLASSES: dict[type[Message], type[Message]] = {
    ManagedLedgerInfo: ManagedLedgerInfoMetadata,
    ManagedCursorInfo: ManagedCursorInfoMetadata,
}
# The codec a raw record gets when it has to be compressed to fit a znode: Pulsar's
# recommended one for metadata, with the standard library's zlib when zstandard is
# missing (every Pulsar reads both).
PREFERRED_COMPRESSION = (CompressionType.ZSTD, CompressionType.ZLIB)


def _encode(message: Message, cls: type[Message], framing: Framing = RAW) -> bytes:
    if not isinstance(message, cls):
        raise TypeError(f"expected a {cls.DESCRIPTOR.name}, got {type(message).__name__}")
    try:
        raw = message.SerializeToString()
    except EncodeError as exc:
        # A record missing a required field would be unreadable by Pulsar and by us.
        missing = ", ".join(message.FindInitializationErrors())
        raise MetadataFormatError(
            f"refusing to write a {cls.DESCRIPTOR.name} that lacks required field(s) "
            f"{missing}; set them before writing"
        ) from exc
    if not framing.framed:
        return raw
    # Pulsar's MetaStoreImpl layout: magic, int32 metadata length, *InfoMetadata, payload.
    codec = _CODECS[framing.compression]
    module = _load_codec_module(codec, cls.DESCRIPTOR.name, "")
    metadata = _METADATA_CLASSES[cls](
        compressionType=framing.compression,  # type: ignore[call-arg]
        uncompressedSize=len(raw),  # type: ignore[call-arg]
    ).SerializeToString()
    header = _FRAME_HEADER.pack(MAGIC_MANAGED_INFO_METADATA, len(metadata))
    return header + metadata + codec.compress(module, raw)


def encode_managed_ledger_info(info: ManagedLedgerInfo, framing: Framing = RAW) -> bytes:
    """Serialize a ``ManagedLedgerInfo`` (unknown fields included), raw or framed."""
    return _encode(info, ManagedLedgerInfo, framing)


def encode_managed_cursor_info(info: ManagedCursorInfo, framing: Framing = RAW) -> bytes:
    """Serialize a ``ManagedCursorInfo`` (unknown fields included), raw or framed."""
    return _encode(info, ManagedCursorInfo, framing)


def _available(compression: int) -> bool:
    codec = _CODECS[compression]
    try:
        _load_codec_module(codec, "", "")
    except UnsupportedCompressionError:
        return False
    return True


def encode_for_znode(
    message: ManagedLedgerInfo | ManagedCursorInfo,
    framing: Framing,
    max_bytes: int,
    *,
    path: str = "",
) -> tuple[bytes, Framing]:
    """The bytes to write for ``message`` and the framing they use, never over ``max_bytes``.

    The record keeps its own framing. A raw record that would not fit is compressed
    (``PREFERRED_COMPRESSION``), as a broker with ``managedLedgerInfoCompressionType``
    would; one that does not fit even so raises RecordTooLargeError before anything is
    sent, because ZooKeeper drops the connection of a client that sends a request over
    its ``jute.maxbuffer``.
    """
    cls = type(message)
    data = _encode(message, cls, framing)
    if len(data) <= max_bytes:
        return data, framing
    tried = [f"{len(data)} bytes {framing.codec_name}"]
    if not framing.framed or framing.compression == CompressionType.NONE:
        for compression in PREFERRED_COMPRESSION:
            if _available(compression):
                framing = Framing(compression, framed=True)
                data = _encode(message, cls, framing)
                if len(data) <= max_bytes:
                    return data, framing
                tried.append(f"{len(data)} bytes {framing.codec_name}")
                break
    raise RecordTooLargeError(
        f"{_describe(cls.DESCRIPTOR.name, path)} would be {', '.join(tried)}, over the "
        f"{max_bytes}-byte limit of one ZooKeeper write (LEDGERGC_ZK_MAX_RECORD_BYTES); "
        "nothing was written"
    )


# --- ManagedLedgerInfo.properties -----------------------------------------------------
#
# Pulsar turns the property list into a map on load (a later duplicate key wins) and
# writes it back from that map, so duplicates should not exist; these helpers read with
# the same "last wins" rule and never create duplicates, and they keep every other entry
# exactly where it was.


def get_property(info: ManagedLedgerInfo, key: str) -> str | None:
    """The value of property ``key``, or None when absent (the last one if duplicated)."""
    value = None
    for entry in info.properties:
        if entry.key == key:
            value = entry.value
    return value


def set_property(info: ManagedLedgerInfo, key: str, value: str) -> None:
    """Set property ``key`` in place: the first entry with the key is updated (any
    duplicates after it are dropped), or a new entry is appended at the end."""
    positions = [i for i, entry in enumerate(info.properties) if entry.key == key]
    if not positions:
        info.properties.add(key=key, value=value)
        return
    info.properties[positions[0]].value = value
    for index in reversed(positions[1:]):
        del info.properties[index]


def set_properties(info: ManagedLedgerInfo, values: Mapping[str, str]) -> None:
    """``set_property`` for many keys in one pass over the list (a record may hold
    thousands of markers; one scan per key would be quadratic)."""
    pending = dict(values)
    seen: set[str] = set()
    for index in reversed(range(len(info.properties))):
        key = info.properties[index].key
        if key in pending:
            if key in seen:
                del info.properties[index]  # a later duplicate: keep the first only
                continue
            seen.add(key)
    for entry in info.properties:
        if entry.key in pending:
            entry.value = pending.pop(entry.key)
    for key, value in pending.items():
        info.properties.add(key=key, value=value)


def properties_of(info: ManagedLedgerInfo) -> dict[str, str]:
    """Every property, key -> value (the last one if duplicated, as ``get_property``)."""
    return {entry.key: entry.value for entry in info.properties}


def remove_properties(info: ManagedLedgerInfo, keys: Iterable[str]) -> int:
    """Remove every property whose key is in ``keys``; return how many were removed."""
    if isinstance(keys, str):
        # A lone key would be iterated as its characters and remove the wrong things.
        raise TypeError("keys must be a collection of keys, not a single str")
    doomed: Collection[str] = keys if isinstance(keys, set | frozenset) else set(keys)
    removed = 0
    for index in reversed(range(len(info.properties))):
        if info.properties[index].key in doomed:
            del info.properties[index]
            removed += 1
    return removed


# --- deletable markers ----------------------------------------------------------------

DELETABLE_MARKER_PREFIX = "ledger-gc.deletable."

# Canonical decimal only (no sign, no leading zeros, ASCII digits), so that
# parse_marker_key and marker_key are exact inverses: a key we would not have written
# is not ours to act on.
_MARKER_ID = re.compile(r"0|[1-9][0-9]*")
_MARKER_REQUIRED = ("size", "entries", "timestamp", "markedAt")


def _require_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


def marker_key(ledger_id: int) -> str:
    """The property key that marks ledger ``ledger_id`` deletable."""
    if _require_int("ledger_id", ledger_id) < 0:
        raise ValueError(f"ledger id must not be negative, got {ledger_id}")
    return f"{DELETABLE_MARKER_PREFIX}{ledger_id}"


def parse_marker_key(key: str) -> int | None:
    """The ledger id of a deletable-marker key, or None if ``key`` is not one."""
    if not key.startswith(DELETABLE_MARKER_PREFIX):
        return None
    suffix = key[len(DELETABLE_MARKER_PREFIX) :]
    if _MARKER_ID.fullmatch(suffix) is None:
        return None
    return int(suffix)


def encode_marker_value(
    size: int, entries: int, timestamp: int, marked_at: int, **extra: Any
) -> str:
    """The JSON value of a deletable marker: what the ledger was, and when it was marked.

    ``size``/``entries``/``timestamp`` are copied from the ledger's LedgerInfo as it left
    the ledger list, so the delete and its audit record still know what they delete after
    the LedgerInfo is gone. ``extra`` adds more keys (JSON-serializable values).
    """
    value: dict[str, Any] = {
        "size": _require_int("size", size),
        "entries": _require_int("entries", entries),
        "timestamp": _require_int("timestamp", timestamp),
        "markedAt": _require_int("marked_at", marked_at),
    }
    clash = sorted(set(extra) & set(value))
    if clash:
        raise ValueError(f"extra marker fields may not replace {', '.join(clash)}")
    value.update(extra)
    # Compact: the whole ManagedLedgerInfo must fit in one znode.
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def java_uuid(msb: int, lsb: int) -> str:
    """Java's ``new UUID(msb, lsb).toString()``: how Pulsar names an offloaded ledger's
    objects (``<uuid>-ledger-<id>``). The halves are signed longs on the wire."""
    value = ((msb & 0xFFFFFFFFFFFFFFFF) << 64) | (lsb & 0xFFFFFFFFFFFFFFFF)
    return str(uuid.UUID(int=value))


def offload_marker_fields(ledger: LedgerInfo) -> dict[str, Any]:
    """What deleting a ledger's tiered-storage copy needs, for its deletable marker.

    Empty for a ledger that was never offloaded. Once the LedgerInfo leaves the list the
    marker is the only place that still names the offloaded objects, so the offload uuid,
    driver name and the driver's properties (bucket, region, endpoint) are copied here.
    """
    if not ledger.HasField("offloadContext"):
        return {}
    context = ledger.offloadContext
    if not (context.HasField("uidMsb") or context.HasField("uidLsb")):
        return {}
    fields: dict[str, Any] = {"offloadUuid": java_uuid(context.uidMsb, context.uidLsb)}
    if context.HasField("complete"):
        fields["offloadComplete"] = context.complete
    if context.HasField("driverMetadata"):
        fields["offloadDriverName"] = context.driverMetadata.name
        fields["offloadDriverMetadata"] = {
            entry.key: entry.value for entry in context.driverMetadata.properties
        }
    return fields


def decode_marker_value(value: str, *, key: str = "", path: str = "") -> dict[str, Any]:
    """Parse a deletable marker's JSON value; MetadataFormatError if it is not one.

    ``key`` and ``path`` only make the error message say which marker of which znode.
    """
    where = f"deletable marker {key or '(key not given)'}" + (f" in {path}" if path else "")
    try:
        decoded = json.loads(value)
    except (TypeError, ValueError) as exc:
        raise MetadataFormatError(f"{where}: value {value!r} is not JSON ({exc})") from exc
    if not isinstance(decoded, dict):
        raise MetadataFormatError(f"{where}: value {value!r} is not a JSON object")
    for name in _MARKER_REQUIRED:
        field = decoded.get(name)
        if isinstance(field, bool) or not isinstance(field, int):
            raise MetadataFormatError(
                f"{where}: value {value!r} lacks an integer {name!r} (needs "
                f"{', '.join(_MARKER_REQUIRED)})"
            )
    return decoded


def deletable_markers(info: ManagedLedgerInfo, *, path: str = "") -> dict[int, dict[str, Any]]:
    """Every deletable marker in ``info``: ledger id -> decoded marker value.

    A marker whose value does not decode raises rather than being skipped: a skipped
    marker would be a ledger that is neither listed nor marked, i.e. an orphan.
    """
    markers: dict[int, dict[str, Any]] = {}
    for entry in info.properties:
        ledger_id = parse_marker_key(entry.key)
        if ledger_id is not None:
            markers[ledger_id] = decode_marker_value(entry.value, key=entry.key, path=path)
    return markers
