"""Pulsar's compression framing of a metadata record: read it, write it, and its codecs.

Reading follows Pulsar's ``MetaStoreImpl``: a record is either raw protobuf or, when the
broker was configured to compress metadata, framed as::

    0x4778 (2 bytes, big-endian) | N (int32, big-endian) | N bytes of *InfoMetadata
    | payload compressed with *InfoMetadata.compressionType

The magic cannot be mistaken for raw protobuf: 0x47 as a first byte is field 8 with wire
type 7, which does not exist, so no valid raw record starts with it. (Pulsar falls back to
parsing the whole thing raw when the framed decode fails; that parse always fails for the
same reason, so here the framed error is reported directly.)

Writing keeps the record's own framing (``Framing``): a record read compressed is
written back with the same codec and framing, byte-compatible with Pulsar's reader. The
records themselves (what is inside the frame) are ``ledger_gc.formats.records``.
"""

from __future__ import annotations

import importlib
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from ledger_gc.errors import MetadataFormatError, UnsupportedCompressionError
from ledger_gc.proto.mldataformats_pb2 import (
    CompressionType,
    ManagedCursorInfoMetadata,
    ManagedLedgerInfoMetadata,
)

__all__ = [
    "MAGIC_MANAGED_INFO_METADATA",
    "MAX_UNCOMPRESSED_SIZE",
    "RAW",
    "CompressionType",
    "Framing",
    "ManagedCursorInfoMetadata",
    "ManagedLedgerInfoMetadata",
    "codec_available",
    "describe_record",
    "frame",
    "is_framed",
    "record_format_error",
    "unframe",
]

# Pulsar's MetaStoreImpl.MAGIC_MANAGED_INFO_METADATA.
MAGIC_MANAGED_INFO_METADATA = 0x4778
_FRAME_HEADER = struct.Struct(">Hi")  # magic (unsigned short), metadata length (int32)
_MAGIC_BYTES = MAGIC_MANAGED_INFO_METADATA.to_bytes(2, "big")

# Largest uncompressed size a framed record may claim. ZooKeeper caps a znode at about
# 1 MiB (jute.maxbuffer), so a compressed record this large means a corrupt header; the
# cap keeps a corrupt or hostile header from making the GC allocate gigabytes. 256 MiB is
# several million ledgers, far beyond any real managed ledger.
MAX_UNCOMPRESSED_SIZE = 256 * 1024 * 1024


# --- errors ---------------------------------------------------------------------------


def describe_record(record: str, path: str) -> str:
    """``ManagedLedgerInfo at /managed-ledgers/...``: which record an error is about."""
    return f"{record} at {path}" if path else f"{record} (no znode path given)"


def record_format_error(record: str, path: str, problem: str) -> MetadataFormatError:
    """The error for a record that does not decode: it names the znode and the problem."""
    return MetadataFormatError(
        f"cannot decode {describe_record(record, path)}: {problem}; nothing is decided from it"
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
        f"cannot decode {describe_record(record, path)}: it is {codec.name}-compressed and no "
        f"{codec.name} codec is installed (tried: {', '.join(codec.modules)}); install it "
        f"with `pip install {codec.pip_package}` (or `pip install 'ledger-gc[codecs]'`). "
        "The record was not used."
    )


def unframe(
    data: bytes,
    metadata_cls: type[ManagedLedgerInfoMetadata] | type[ManagedCursorInfoMetadata],
    record: str,
    path: str,
) -> tuple[bytes, Framing]:
    """Undo Pulsar's compression framing; return the raw record bytes."""
    if len(data) < _FRAME_HEADER.size:
        raise record_format_error(
            record,
            path,
            f"compression frame is truncated: {len(data)} bytes, the header alone is "
            f"{_FRAME_HEADER.size}",
        )
    _, metadata_length = _FRAME_HEADER.unpack_from(data)
    metadata_end = _FRAME_HEADER.size + metadata_length
    if metadata_length < 0 or metadata_end > len(data):
        raise record_format_error(
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
        raise record_format_error(
            record, path, f"{metadata_cls.__name__} in the compression frame is corrupt ({exc})"
        ) from exc
    # compressionType is a closed proto2 enum: a value this reader does not know lands in
    # the unknown fields and leaves the field unset. Say which value it was.
    type_field = metadata_cls.COMPRESSIONTYPE_FIELD_NUMBER
    for field in UnknownFieldSet(metadata):
        if field.field_number == type_field:
            raise record_format_error(
                record,
                path,
                f"unknown compression type {field.data} in the compression frame (this "
                f"reader knows {', '.join(c.name for c in _CODECS.values())})",
            )
    if not metadata.IsInitialized():
        missing = ", ".join(metadata.FindInitializationErrors())
        raise record_format_error(
            record,
            path,
            f"the frame's {metadata_cls.__name__} lacks required field(s): {missing}",
        )
    size = metadata.uncompressedSize
    if not 0 <= size <= MAX_UNCOMPRESSED_SIZE:
        raise record_format_error(
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
        raise record_format_error(
            record,
            path,
            f"{codec.name} payload of {len(payload)} bytes does not decompress ({exc})",
        ) from exc
    if len(raw) != size:
        raise record_format_error(
            record,
            path,
            f"{codec.name} payload decompressed to {len(raw)} bytes but the frame says "
            f"{size} (truncated or corrupt)",
        )
    return raw, Framing(metadata.compressionType, framed=True)


def is_framed(data: bytes) -> bool:
    """Whether ``data`` starts with Pulsar's compression frame (else it is raw protobuf)."""
    return data.startswith(_MAGIC_BYTES)


def frame(
    raw: bytes,
    framing: Framing,
    metadata_cls: type[ManagedLedgerInfoMetadata] | type[ManagedCursorInfoMetadata],
    record: str,
) -> bytes:
    """``raw`` (a serialized record) as stored with ``framing``: itself when raw, else
    compressed in Pulsar's frame."""
    if not framing.framed:
        return raw
    # Pulsar's MetaStoreImpl layout: magic, int32 metadata length, *InfoMetadata, payload.
    codec = _CODECS[framing.compression]
    module = _load_codec_module(codec, record, "")
    metadata = metadata_cls(
        compressionType=framing.compression,  # type: ignore[arg-type]
        uncompressedSize=len(raw),
    ).SerializeToString()
    header = _FRAME_HEADER.pack(MAGIC_MANAGED_INFO_METADATA, len(metadata))
    return header + metadata + codec.compress(module, raw)


def codec_available(compression: int) -> bool:
    """Whether this interpreter has the library that ``compression`` needs."""
    codec = _CODECS[compression]
    try:
        _load_codec_module(codec, "", "")
    except UnsupportedCompressionError:
        return False
    return True
