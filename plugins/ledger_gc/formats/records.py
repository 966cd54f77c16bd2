"""Read and write the managed-ledger metadata records (Pulsar's MLDataFormats wire format).

A managed ledger's znode holds a ``ManagedLedgerInfo`` and each of its cursors' znodes a
``ManagedCursorInfo``, as binary proto2 with Pulsar's field numbers (see
``proto/mldataformats.proto`` and shared/DESIGN.md, "Wire format"), raw or in Pulsar's
compression frame (``ledger_gc.formats.framing``).

A record keeps its own framing when written back, and a raw record stays raw while it fits
in a znode. ``encode_for_znode`` compresses a raw record that would not fit (ZooKeeper
refuses requests above ``jute.maxbuffer``, 1 MiB by default) and refuses, before anything
is sent, one that does not fit even compressed.

Every decode failure raises :class:`MetadataFormatError` naming the znode and what is
wrong, and never returns a partly filled record. For a garbage collector "could not tell
what is in here" must never look like "there are no ledgers here": a record read as
empty, or with its ledger list cut short, would make every missing ledger look orphaned.

Fields this module does not declare (a newer Pulsar's, or another tool's) are kept by
protobuf as unknown fields and written back unchanged by the encoders, so a
read-modify-write here never strips what another writer put in a record.

The property helpers at the end read and edit ``ManagedLedgerInfo.properties``, where the
trim's deletable markers (``ledger_gc.formats.markers``) live.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable, Mapping
from typing import TypeVar

from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError, EncodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet

from ledger_gc.errors import MetadataFormatError, RecordTooLargeError
from ledger_gc.formats.framing import (
    RAW,
    CompressionType,
    Framing,
    codec_available,
    describe_record,
    frame,
    is_framed,
    record_format_error,
    unframe,
)
from ledger_gc.proto.mldataformats_pb2 import (
    KeyValue,
    LongProperty,
    ManagedCursorInfo,
    ManagedCursorInfoMetadata,
    ManagedLedgerInfo,
    ManagedLedgerInfoMetadata,
    MessageRange,
    NestedPositionInfo,
    OffloadContext,
    OffloadDriverMetadata,
    StringProperty,
)

__all__ = [
    "PREFERRED_COMPRESSION",
    "KeyValue",
    "LedgerInfo",
    "LongProperty",
    "ManagedCursorInfo",
    "ManagedLedgerInfo",
    "MessageRange",
    "NestedPositionInfo",
    "OffloadContext",
    "OffloadDriverMetadata",
    "StringProperty",
    "decode_managed_cursor_info",
    "decode_managed_cursor_info_framed",
    "decode_managed_ledger_info",
    "decode_managed_ledger_info_framed",
    "encode_for_znode",
    "encode_managed_cursor_info",
    "encode_managed_ledger_info",
    "get_property",
    "properties_of",
    "remove_properties",
    "set_properties",
    "set_property",
]

LedgerInfo = ManagedLedgerInfo.LedgerInfo

_M = TypeVar("_M", bound=Message)


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


def _no_unknown_fields(cls: type[_M], data: bytes) -> bool:
    """Whether ``data`` (which parses as ``cls``) has no unknown field at any depth,
    shown cheaply: parsed again with every unknown field discarded, it re-encodes to as
    many bytes. Sound for messages without repeated scalar fields (``_canonical_is_least``):
    then no encoding of their known fields is shorter than protobuf's own, so bytes left
    out would be bytes of unknown fields. False: the slow, exact walk decides
    (``_wire_type_clash``, a few hundred microseconds for a managed ledger of 100
    ledgers: seconds for a cluster's ten thousand topics)."""
    if not _canonical_is_least(cls.DESCRIPTOR):
        return False
    probe = cls()
    probe.ParseFromString(data)
    probe.DiscardUnknownFields()
    return probe.ByteSize() == len(data)


@functools.cache
def _canonical_is_least(descriptor: Descriptor) -> bool:
    """No repeated scalar field anywhere below ``descriptor`` (a packed one can be
    shorter than protobuf's own unpacked proto2 encoding, or the other way round)."""
    seen = {descriptor.full_name}
    pending = [descriptor]
    while pending:
        for field in pending.pop().fields:
            below = field.message_type
            if below is None:
                if field.is_repeated:
                    return False
            elif below.full_name not in seen:
                seen.add(below.full_name)
                pending.append(below)
    return True


def _parse_record(cls: type[_M], data: bytes, record: str, path: str, what: str) -> _M:
    """Parse ``data`` as a complete, well-formed ``cls`` or raise MetadataFormatError."""
    message = cls()
    try:
        message.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise record_format_error(record, path, f"{what} is not valid protobuf ({exc})") from exc
    # The upb runtime parses records that lack required fields without complaint; a
    # LedgerInfo without its ledgerId is exactly the half-filled record we must refuse.
    if not message.IsInitialized():
        missing = ", ".join(message.FindInitializationErrors())
        raise record_format_error(record, path, f"{what} lacks required field(s): {missing}")
    clash = None if _no_unknown_fields(cls, data) else _wire_type_clash(message)
    if clash is not None:
        raise record_format_error(
            record, path, f"{what} has {clash}: it is not a {record} (corrupt, or another record)"
        )
    return message


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
        raise record_format_error(
            record,
            path,
            "the znode is empty; no bytes cannot be told apart from a lost record",
        )
    if is_framed(data):
        payload, framing = unframe(data, metadata_cls, record, path)
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


_METADATA_CLASSES: dict[
    type[Message], type[ManagedLedgerInfoMetadata] | type[ManagedCursorInfoMetadata]
] = {
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
    return frame(raw, framing, _METADATA_CLASSES[cls], cls.DESCRIPTOR.name)


def encode_managed_ledger_info(info: ManagedLedgerInfo, framing: Framing = RAW) -> bytes:
    """Serialize a ``ManagedLedgerInfo`` (unknown fields included), raw or framed."""
    return _encode(info, ManagedLedgerInfo, framing)


def encode_managed_cursor_info(info: ManagedCursorInfo, framing: Framing = RAW) -> bytes:
    """Serialize a ``ManagedCursorInfo`` (unknown fields included), raw or framed."""
    return _encode(info, ManagedCursorInfo, framing)


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
            if codec_available(compression):
                framing = Framing(compression, framed=True)
                data = _encode(message, cls, framing)
                if len(data) <= max_bytes:
                    return data, framing
                tried.append(f"{len(data)} bytes {framing.codec_name}")
                break
    raise RecordTooLargeError(
        f"{describe_record(cls.DESCRIPTOR.name, path)} would be {', '.join(tried)}, over the "
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
