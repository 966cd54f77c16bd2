"""Tests of ledger_gc.formats: Pulsar's MLDataFormats wire format and compression framing.

The byte-level tests build records with a tiny protobuf encoder written here, not with the
generated classes, so they check the field numbers of shared/DESIGN.md independently of
mldataformats.proto. The framing tests compress with each codec's own library the way
Pulsar's CompressionCodec classes do, independently of the decoder under test.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from google.protobuf.unknown_fields import UnknownFieldSet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger_gc.errors import MetadataFormatError, UnsupportedCompressionError
from ledger_gc.formats.framing import CompressionType
from ledger_gc.formats.markers import (
    DELETABLE_MARKER_PREFIX,
    decode_marker_value,
    deletable_markers,
    encode_marker_value,
    marker_key,
    parse_marker_key,
)
from ledger_gc.formats.records import (
    LedgerInfo,
    ManagedCursorInfo,
    ManagedLedgerInfo,
    decode_managed_cursor_info,
    decode_managed_ledger_info,
    encode_managed_cursor_info,
    encode_managed_ledger_info,
    get_property,
    remove_properties,
    set_property,
)

ML_PATH = "/managed-ledgers/public/default/persistent/orders"
CURSOR_PATH = ML_PATH + "/billing"
ROOT = Path(__file__).resolve().parents[2]

# --- a tiny protobuf wire encoder (independent of the generated code) -------------------

VARINT, I64, LEN, I32 = 0, 1, 2, 5


def varint(value: int) -> bytes:
    """Base-128 varint; negative int64 values are sent as their 64-bit two's complement."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint(number << 3 | wire_type)


def f_varint(number: int, value: int) -> bytes:
    return tag(number, VARINT) + varint(value)


def f_bytes(number: int, payload: bytes) -> bytes:
    return tag(number, LEN) + varint(len(payload)) + payload


def f_str(number: int, text: str) -> bytes:
    return f_bytes(number, text.encode())


def position(ledger_id: int, entry_id: int) -> bytes:  # NestedPositionInfo
    return f_varint(1, ledger_id) + f_varint(2, entry_id)


def metadata_bytes(compression_type: int, uncompressed_size: int) -> bytes:
    """ManagedLedgerInfoMetadata / ManagedCursorInfoMetadata, by hand."""
    return f_varint(1, compression_type) + f_varint(2, uncompressed_size)


def frame(metadata: bytes, payload: bytes) -> bytes:
    """Pulsar's framing: short magic 0x4778, int32 metadata length, metadata, payload."""
    return struct.pack(">Hi", 0x4778, len(metadata)) + metadata + payload


# --- records built byte by byte --------------------------------------------------------

OFFLOAD_CTX = (
    f_varint(1, 0x1234_5678_9ABC_DEF0)  # uidMsb
    + f_varint(2, -42)  # uidLsb (negative: a 10-byte varint)
    + f_varint(3, 1)  # complete
    + f_varint(4, 1)  # bookkeeperDeleted
    + f_varint(5, 1_700_000_000_123)  # timestamp
)
LEDGER_7 = (
    f_varint(1, 7)  # ledgerId
    + f_varint(2, 1000)  # entries
    + f_varint(3, 65_536)  # size
    + f_varint(4, 1_690_000_000_000)  # timestamp
    + f_bytes(5, OFFLOAD_CTX)  # offloadContext
)
LEDGER_9 = f_varint(1, 9) + f_varint(2, 3) + f_varint(3, 300) + f_varint(4, 1_690_000_500_000)
ML_BYTES = (
    f_bytes(1, LEDGER_7)  # ledgerInfo
    + f_bytes(1, LEDGER_9)
    + f_bytes(2, position(9, 2))  # terminatedPosition
    + f_bytes(3, f_str(1, "owner") + f_str(2, "broker-1"))  # properties
    + f_bytes(3, f_str(1, "ledger-gc.deletable.5") + f_str(2, '{"size":1}'))
)

CURSOR_BYTES = (
    f_varint(1, -1)  # cursorsLedgerId: position stored in the znode
    + f_varint(2, 9)  # markDeleteLedgerId
    + f_varint(3, 1)  # markDeleteEntryId
    + f_bytes(4, f_bytes(1, position(9, 3)) + f_bytes(2, position(9, 5)))  # MessageRange
    + f_bytes(4, f_bytes(1, position(11, 0)) + f_bytes(2, position(11, 0)))
    + f_bytes(5, f_str(1, "#pulsar.internal.replicated") + f_varint(2, 12))  # LongProperty
    + f_varint(6, 1_700_000_000_999)  # lastActive
    + f_bytes(8, f_str(1, "subscription-type") + f_str(2, "Shared"))  # StringProperty
)


def test_managed_ledger_info_field_numbers() -> None:
    info = decode_managed_ledger_info(ML_BYTES, path=ML_PATH)

    assert [ledger.ledgerId for ledger in info.ledgerInfo] == [7, 9]
    first = info.ledgerInfo[0]
    assert (first.entries, first.size, first.timestamp) == (1000, 65_536, 1_690_000_000_000)
    ctx = first.offloadContext
    assert ctx.uidMsb == 0x1234_5678_9ABC_DEF0
    assert ctx.uidLsb == -42
    assert ctx.complete is True
    assert ctx.bookkeeperDeleted is True
    assert ctx.timestamp == 1_700_000_000_123
    assert not info.ledgerInfo[1].HasField("offloadContext")
    assert (info.terminatedPosition.ledgerId, info.terminatedPosition.entryId) == (9, 2)
    assert [(p.key, p.value) for p in info.properties] == [
        ("owner", "broker-1"),
        ("ledger-gc.deletable.5", '{"size":1}'),
    ]
    # Canonical bytes: the encoder writes exactly what Pulsar's field numbers say.
    assert encode_managed_ledger_info(info) == ML_BYTES


def test_managed_cursor_info_field_numbers() -> None:
    info = decode_managed_cursor_info(CURSOR_BYTES, path=CURSOR_PATH)

    assert info.cursorsLedgerId == -1
    assert (info.markDeleteLedgerId, info.markDeleteEntryId) == (9, 1)
    ranges = [
        (r.lowerEndpoint.ledgerId, r.lowerEndpoint.entryId, r.upperEndpoint.ledgerId,
         r.upperEndpoint.entryId)
        for r in info.individualDeletedMessages
    ]  # fmt: skip
    assert ranges == [(9, 3, 9, 5), (11, 0, 11, 0)]
    assert [(p.name, p.value) for p in info.properties] == [("#pulsar.internal.replicated", 12)]
    assert info.lastActive == 1_700_000_000_999
    assert [(p.name, p.value) for p in info.cursorProperties] == [("subscription-type", "Shared")]
    assert encode_managed_cursor_info(info) == CURSOR_BYTES


# --- round trips ------------------------------------------------------------------------


def full_managed_ledger_info() -> ManagedLedgerInfo:
    info = ManagedLedgerInfo()
    for ledger_id in (3, 4, 10):
        ledger = info.ledgerInfo.add(
            ledgerId=ledger_id, entries=ledger_id * 10, size=ledger_id * 1024, timestamp=1000
        )
        if ledger_id == 3:
            ledger.offloadContext.uidMsb = -1
            ledger.offloadContext.uidLsb = 2**63 - 1
            ledger.offloadContext.complete = True
            ledger.offloadContext.bookkeeperDeleted = False
            ledger.offloadContext.timestamp = 5
    info.terminatedPosition.ledgerId = 10
    info.terminatedPosition.entryId = 99
    info.properties.add(key="a", value="1")
    info.properties.add(key=marker_key(2), value=encode_marker_value(1, 2, 3, 4))
    return info


def full_managed_cursor_info() -> ManagedCursorInfo:
    info = ManagedCursorInfo(cursorsLedgerId=42, markDeleteLedgerId=3, markDeleteEntryId=-1)
    rng = info.individualDeletedMessages.add()
    rng.lowerEndpoint.ledgerId, rng.lowerEndpoint.entryId = 4, 0
    rng.upperEndpoint.ledgerId, rng.upperEndpoint.entryId = 4, 7
    info.properties.add(name="x", value=-5)
    info.lastActive = 123
    info.cursorProperties.add(name="k", value="v")
    return info


def test_round_trip_managed_ledger_info() -> None:
    info = full_managed_ledger_info()
    data = encode_managed_ledger_info(info)
    assert decode_managed_ledger_info(data, path=ML_PATH) == info


def test_round_trip_managed_cursor_info() -> None:
    info = full_managed_cursor_info()
    data = encode_managed_cursor_info(info)
    assert decode_managed_cursor_info(data, path=CURSOR_PATH) == info


def test_encoders_write_raw_bytes() -> None:
    assert not encode_managed_ledger_info(full_managed_ledger_info()).startswith(b"\x47\x78")
    assert not encode_managed_cursor_info(full_managed_cursor_info()).startswith(b"\x47\x78")


def test_encoder_refuses_record_missing_required_field() -> None:
    info = ManagedLedgerInfo()
    info.ledgerInfo.add(entries=1)  # no ledgerId
    with pytest.raises(MetadataFormatError, match=r"ledgerInfo\[0\]\.ledgerId"):
        encode_managed_ledger_info(info)
    with pytest.raises(MetadataFormatError, match="cursorsLedgerId"):
        encode_managed_cursor_info(ManagedCursorInfo())


def test_encoder_rejects_the_wrong_record_type() -> None:
    with pytest.raises(TypeError):
        encode_managed_ledger_info(ManagedCursorInfo(cursorsLedgerId=1))  # type: ignore[arg-type]


# --- unknown fields ---------------------------------------------------------------------


def unknown_fields(message: object) -> list[tuple[int, int, object]]:
    return [(f.field_number, f.wire_type, f.data) for f in UnknownFieldSet(message)]


def test_unknown_fields_survive_decode_modify_encode() -> None:
    driver_metadata = f_str(1, "aws-s3") + f_bytes(2, f_str(1, "bucket") + f_str(2, "b"))
    offload_segment = f_varint(1, 5) + f_varint(6, 77)
    ctx = OFFLOAD_CTX + f_bytes(6, driver_metadata) + f_bytes(7, offload_segment)
    ledger = f_varint(1, 7) + f_varint(2, 10) + f_bytes(5, ctx) + f_varint(99, 12345)
    ledger += f_bytes(100, b"opaque")
    data = f_bytes(1, ledger) + f_bytes(3, f_str(1, "k") + f_str(2, "v")) + f_varint(4, 1)

    info = decode_managed_ledger_info(data, path=ML_PATH)
    info.ledgerInfo[0].entries = 11  # modify known fields around the unknown ones
    info.ledgerInfo.add(ledgerId=8, entries=0, size=0, timestamp=1)
    set_property(info, marker_key(3), encode_marker_value(1, 1, 1, 1))
    again = decode_managed_ledger_info(encode_managed_ledger_info(info), path=ML_PATH)

    assert again.ledgerInfo[0].entries == 11
    assert unknown_fields(again) == [(4, VARINT, 1)]
    assert unknown_fields(again.ledgerInfo[0]) == [(99, VARINT, 12345), (100, LEN, b"opaque")]
    # driverMetadata (6) is declared now; offloadSegment (7) stays an unknown field.
    assert unknown_fields(again.ledgerInfo[0].offloadContext) == [(7, LEN, offload_segment)]
    context = again.ledgerInfo[0].offloadContext
    assert context.driverMetadata.SerializeToString() == driver_metadata
    assert context.uidLsb == -42
    assert get_property(again, marker_key(3)) is not None


def test_unknown_cursor_fields_survive() -> None:
    batch_deletion = f_bytes(1, position(9, 4)) + f_varint(2, 3)  # Pulsar's field 7
    data = CURSOR_BYTES + f_bytes(7, batch_deletion)
    info = decode_managed_cursor_info(data, path=CURSOR_PATH)
    info.markDeleteEntryId = 2
    again = decode_managed_cursor_info(encode_managed_cursor_info(info), path=CURSOR_PATH)
    assert again.markDeleteEntryId == 2
    assert unknown_fields(again) == [(7, LEN, batch_deletion)]


# --- compression framing ----------------------------------------------------------------


def pulsar_zlib(raw: bytes) -> bytes:
    """java.util.zip.Deflater() defaults, SYNC_FLUSH and never finished (no trailer)."""
    deflater = zlib.compressobj()
    return deflater.compress(raw) + deflater.flush(zlib.Z_SYNC_FLUSH)


def finished_zlib(raw: bytes) -> bytes:
    return zlib.compress(raw)


def pulsar_lz4(raw: bytes) -> bytes:
    import lz4.block

    return bytes(lz4.block.compress(raw, store_size=False))  # a raw block, no size prefix


def pulsar_zstd(raw: bytes) -> bytes:
    import zstandard

    return bytes(zstandard.ZstdCompressor(level=3).compress(raw))


def zstd_checksum_no_size(raw: bytes) -> bytes:
    import zstandard

    compressor = zstandard.ZstdCompressor(write_checksum=True, write_content_size=False)
    return bytes(compressor.compress(raw))


def pulsar_snappy(raw: bytes) -> bytes:
    import cramjam

    return bytes(cramjam.snappy.compress_raw(raw))  # raw block, not the framing format


CODECS = [
    pytest.param(CompressionType.NONE, lambda raw: raw, id="NONE"),
    pytest.param(CompressionType.ZLIB, pulsar_zlib, id="ZLIB-pulsar"),
    pytest.param(CompressionType.ZLIB, finished_zlib, id="ZLIB-finished"),
    pytest.param(CompressionType.LZ4, pulsar_lz4, id="LZ4"),
    pytest.param(CompressionType.ZSTD, pulsar_zstd, id="ZSTD"),
    pytest.param(CompressionType.ZSTD, zstd_checksum_no_size, id="ZSTD-checksum-no-size"),
    pytest.param(CompressionType.SNAPPY, pulsar_snappy, id="SNAPPY"),
]


@pytest.mark.parametrize(("compression", "compress"), CODECS)
def test_compressed_managed_ledger_info(compression: int, compress) -> None:
    info = full_managed_ledger_info()
    raw = encode_managed_ledger_info(info)
    data = frame(metadata_bytes(compression, len(raw)), compress(raw))
    assert decode_managed_ledger_info(data, path=ML_PATH) == info


@pytest.mark.parametrize(("compression", "compress"), CODECS)
def test_compressed_managed_cursor_info(compression: int, compress) -> None:
    info = full_managed_cursor_info()
    raw = encode_managed_cursor_info(info)
    data = frame(metadata_bytes(compression, len(raw)), compress(raw))
    assert decode_managed_cursor_info(data, path=CURSOR_PATH) == info


def test_compressed_empty_managed_ledger_info() -> None:
    # Pulsar compresses whatever it writes, even a record that serializes to no bytes.
    for compression, compress in [
        (CompressionType.ZLIB, pulsar_zlib),
        (CompressionType.LZ4, pulsar_lz4),
        (CompressionType.ZSTD, pulsar_zstd),
        (CompressionType.ZSTD, zstd_checksum_no_size),
        (CompressionType.SNAPPY, pulsar_snappy),
    ]:
        data = frame(metadata_bytes(compression, 0), compress(b""))
        assert decode_managed_ledger_info(data, path=ML_PATH) == ManagedLedgerInfo()


def test_snappy_falls_back_to_cramjam(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "snappy", None)  # python-snappy not installed
    raw = encode_managed_ledger_info(full_managed_ledger_info())
    data = frame(metadata_bytes(CompressionType.SNAPPY, len(raw)), pulsar_snappy(raw))
    assert decode_managed_ledger_info(data) == full_managed_ledger_info()


def test_snappy_via_python_snappy(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("snappy")
    raw = encode_managed_ledger_info(full_managed_ledger_info())
    data = frame(metadata_bytes(CompressionType.SNAPPY, len(raw)), pulsar_snappy(raw))
    monkeypatch.setitem(sys.modules, "cramjam", None)  # only python-snappy's own API
    assert decode_managed_ledger_info(data) == full_managed_ledger_info()


@pytest.mark.parametrize(
    ("compression", "compress", "hidden", "codec", "package"),
    [
        (CompressionType.LZ4, pulsar_lz4, ["lz4.block"], "LZ4", "lz4"),
        (CompressionType.ZSTD, pulsar_zstd, ["zstandard"], "ZSTD", "zstandard"),
        (CompressionType.SNAPPY, pulsar_snappy, ["snappy", "cramjam"], "SNAPPY", "python-snappy"),
    ],
)
def test_missing_codec_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, compression, compress, hidden, codec, package
) -> None:
    raw = encode_managed_ledger_info(full_managed_ledger_info())
    data = frame(metadata_bytes(compression, len(raw)), compress(raw))
    for module in hidden:
        monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    with pytest.raises(UnsupportedCompressionError) as caught:
        decode_managed_ledger_info(data, path=ML_PATH)
    message = str(caught.value)
    assert codec in message
    assert f"pip install {package}" in message
    assert ML_PATH in message
    assert isinstance(caught.value, MetadataFormatError)  # callers catching the base see it


# --- corrupt input ----------------------------------------------------------------------

GOOD_RAW = encode_managed_ledger_info(full_managed_ledger_info())
GOOD_LZ4 = pulsar_lz4(GOOD_RAW)

CORRUPT = {
    "random bytes": b"\xff\xfe\xfd\xfc\x00\x01garbage",
    "plain text": b"this is not a protobuf record",
    "truncated raw record": GOOD_RAW[: len(GOOD_RAW) // 2 + 1],
    "ledger without ledgerId": f_bytes(1, f_varint(2, 5)),
    "cursor bytes": CURSOR_BYTES,  # wire type of field 1 does not match a LedgerInfo
    "wrong wire type deep inside": f_bytes(1, f_varint(1, 3) + f_varint(5, 1)),
    "magic only": b"\x47\x78",
    "truncated header": b"\x47\x78\x00\x00",
    "metadata length beyond end": frame(metadata_bytes(1, 10), b"")[:6] + b"\x08\x01",
    "negative metadata length": b"\x47\x78\xff\xff\xff\xff" + GOOD_RAW,
    "corrupt metadata": frame(b"\xff\xff\xff", GOOD_LZ4),
    "metadata without size": frame(f_varint(1, CompressionType.LZ4), GOOD_LZ4),
    "metadata without type": frame(f_varint(2, len(GOOD_RAW)), GOOD_LZ4),
    "unknown compression type": frame(metadata_bytes(9, len(GOOD_RAW)), GOOD_LZ4),
    "negative uncompressed size": frame(metadata_bytes(1, -1), GOOD_LZ4),
    "huge uncompressed size": frame(metadata_bytes(1, 2**31 - 1), GOOD_LZ4),
    "size larger than payload": frame(metadata_bytes(1, len(GOOD_RAW) + 1), GOOD_LZ4),
    "size smaller than payload": frame(metadata_bytes(1, len(GOOD_RAW) - 1), GOOD_LZ4),
    "truncated lz4 payload": frame(metadata_bytes(1, len(GOOD_RAW)), GOOD_LZ4[:-4]),
    "garbage zlib payload": frame(metadata_bytes(2, len(GOOD_RAW)), b"\x78\x9c" + b"\xff" * 20),
    "truncated zlib payload": frame(metadata_bytes(2, len(GOOD_RAW)), pulsar_zlib(GOOD_RAW)[:-8]),
    "truncated zstd frame": frame(metadata_bytes(3, len(GOOD_RAW)), pulsar_zstd(GOOD_RAW)[:-3]),
    "zstd size lie": frame(metadata_bytes(3, len(GOOD_RAW) - 1), pulsar_zstd(GOOD_RAW)),
    "garbage zstd payload": frame(metadata_bytes(3, len(GOOD_RAW)), b"not zstd at all"),
    "garbage snappy payload": frame(metadata_bytes(4, len(GOOD_RAW)), b"\xff\xff\xff\xff\xff\xff"),
    "snappy size lie": frame(metadata_bytes(4, len(GOOD_RAW) + 3), pulsar_snappy(GOOD_RAW)),
    "none size lie": frame(metadata_bytes(0, len(GOOD_RAW) + 3), GOOD_RAW),
    "compressed garbage": frame(metadata_bytes(2, 4), pulsar_zlib(b"\xff\xff\xff\xff")),
}


@pytest.mark.parametrize("data", CORRUPT.values(), ids=CORRUPT.keys())
def test_corrupt_managed_ledger_info_is_an_error_naming_the_path(data: bytes) -> None:
    with pytest.raises(MetadataFormatError) as caught:
        decode_managed_ledger_info(data, path=ML_PATH, allow_empty=True)
    assert ML_PATH in str(caught.value)
    assert not isinstance(caught.value, UnsupportedCompressionError)


def test_error_messages_say_what_is_wrong() -> None:
    cases = {
        "unknown compression type": "unknown compression type 9",
        "ledger without ledgerId": r"ledgerInfo\[0\]\.ledgerId",
        "cursor bytes": "wire type",
        "negative metadata length": "truncated or corrupt",
        "size larger than payload": "LZ4",
    }
    for name, pattern in cases.items():
        with pytest.raises(MetadataFormatError, match=pattern):
            decode_managed_ledger_info(CORRUPT[name], path=ML_PATH)


def test_managed_ledger_info_read_as_cursor_is_an_error() -> None:
    with pytest.raises(MetadataFormatError, match=CURSOR_PATH):
        decode_managed_cursor_info(ML_BYTES, path=CURSOR_PATH)


def test_corrupt_cursor_frame_is_an_error() -> None:
    raw = encode_managed_cursor_info(full_managed_cursor_info())
    with pytest.raises(MetadataFormatError, match=CURSOR_PATH):
        decode_managed_cursor_info(frame(metadata_bytes(1, len(raw)), b"\x00"), path=CURSOR_PATH)


def test_empty_managed_ledger_info_needs_allow_empty() -> None:
    for empty in (b"", None, bytearray()):
        with pytest.raises(MetadataFormatError, match=f"{ML_PATH}: the znode is empty"):
            decode_managed_ledger_info(empty, path=ML_PATH)
        assert decode_managed_ledger_info(empty, allow_empty=True) == ManagedLedgerInfo()


def test_empty_cursor_is_always_an_error() -> None:
    with pytest.raises(MetadataFormatError, match=CURSOR_PATH):
        decode_managed_cursor_info(b"", path=CURSOR_PATH)


def test_error_without_a_path_says_so() -> None:
    with pytest.raises(MetadataFormatError, match="no znode path given"):
        decode_managed_ledger_info(b"\xff")


def test_decoders_take_bytes_like_input() -> None:
    assert decode_managed_ledger_info(memoryview(ML_BYTES)) == decode_managed_ledger_info(ML_BYTES)
    with pytest.raises(TypeError):
        decode_managed_ledger_info("text")  # type: ignore[arg-type]


# --- properties -------------------------------------------------------------------------


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200))
def test_any_bytes_decode_or_raise_metadata_format_error(data: bytes) -> None:
    """Never another exception type, never a half-filled record."""
    for decode in (decode_managed_ledger_info, decode_managed_cursor_info):
        try:
            record = decode(data)
        except MetadataFormatError:
            continue
        assert record.IsInitialized()


@given(st.binary(max_size=64))
def test_any_bytes_after_the_magic_decode_or_raise(tail: bytes) -> None:
    try:
        record = decode_managed_ledger_info(b"\x47\x78" + tail)
    except MetadataFormatError:
        return
    assert record.IsInitialized()


INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
NON_NEGATIVE = st.integers(min_value=0, max_value=2**63 - 1)
offload_contexts: st.SearchStrategy[dict[str, object]] = st.builds(
    dict,
    uidMsb=INT64,
    uidLsb=INT64,
    complete=st.booleans(),
    bookkeeperDeleted=st.booleans(),
    timestamp=NON_NEGATIVE,
)
ledger_lists = st.lists(NON_NEGATIVE, unique=True, max_size=40).flatmap(
    lambda ids: st.tuples(
        *[
            st.builds(
                dict,
                ledgerId=st.just(ledger_id),
                entries=NON_NEGATIVE,
                size=NON_NEGATIVE,
                timestamp=NON_NEGATIVE,
                offloadContext=st.none() | offload_contexts,
            )
            for ledger_id in sorted(ids)
        ]
    )
)
property_lists = st.lists(st.tuples(st.text(max_size=30), st.text(max_size=60)), max_size=8)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(ledgers=ledger_lists, properties=property_lists)
def test_managed_ledger_info_round_trips(ledgers, properties) -> None:
    info = ManagedLedgerInfo()
    for fields in ledgers:
        ledger = LedgerInfo(**{k: v for k, v in fields.items() if v is not None})
        info.ledgerInfo.append(ledger)
    for key, value in properties:
        info.properties.add(key=key, value=value)

    data = encode_managed_ledger_info(info)
    assert not data.startswith(b"\x47")  # raw records can never look framed
    decoded = decode_managed_ledger_info(data, path=ML_PATH, allow_empty=True)
    assert decoded == info
    assert [ledger.ledgerId for ledger in decoded.ledgerInfo] == [f["ledgerId"] for f in ledgers]

    framed = frame(metadata_bytes(CompressionType.ZLIB, len(data)), pulsar_zlib(data))
    assert decode_managed_ledger_info(framed, path=ML_PATH) == info


# --- ManagedLedgerInfo.properties helpers -----------------------------------------------


def info_with(*pairs: tuple[str, str]) -> ManagedLedgerInfo:
    info = ManagedLedgerInfo()
    for key, value in pairs:
        info.properties.add(key=key, value=value)
    return info


def pairs_of(info: ManagedLedgerInfo) -> list[tuple[str, str]]:
    return [(p.key, p.value) for p in info.properties]


def test_get_property() -> None:
    info = info_with(("a", "1"), ("b", "2"), ("a", "3"))
    assert get_property(info, "b") == "2"
    assert get_property(info, "a") == "3"  # Pulsar loads the list into a map: last wins
    assert get_property(info, "missing") is None


def test_set_property_updates_in_place_or_appends() -> None:
    info = info_with(("a", "1"), ("b", "2"), ("c", "3"))
    set_property(info, "b", "20")
    set_property(info, "d", "4")
    assert pairs_of(info) == [("a", "1"), ("b", "20"), ("c", "3"), ("d", "4")]


def test_set_property_collapses_duplicates() -> None:
    info = info_with(("a", "1"), ("x", "0"), ("a", "2"), ("a", "3"))
    set_property(info, "a", "9")
    assert pairs_of(info) == [("a", "9"), ("x", "0")]


def test_remove_properties_keeps_the_others_in_order() -> None:
    info = info_with(("a", "1"), ("m1", "x"), ("b", "2"), ("m2", "y"), ("m1", "z"), ("c", "3"))
    assert remove_properties(info, (key for key in ["m1", "m2", "absent"])) == 3
    assert pairs_of(info) == [("a", "1"), ("b", "2"), ("c", "3")]
    assert remove_properties(info, []) == 0
    with pytest.raises(TypeError):
        remove_properties(info, "a")


# --- deletable markers ------------------------------------------------------------------


def test_marker_key_round_trip() -> None:
    assert DELETABLE_MARKER_PREFIX == "ledger-gc.deletable."
    assert marker_key(42) == "ledger-gc.deletable.42"
    assert marker_key(0) == "ledger-gc.deletable.0"
    for ledger_id in (0, 1, 42, 2**63 - 1):
        assert parse_marker_key(marker_key(ledger_id)) == ledger_id


@pytest.mark.parametrize(
    "key",
    [
        "owner",
        "ledger-gc.deletable.",
        "ledger-gc.deletable.abc",
        "ledger-gc.deletable.-1",
        "ledger-gc.deletable.+1",
        "ledger-gc.deletable.007",
        "ledger-gc.deletable.1.5",
        "ledger-gc.deletable. 1",
        "ledger-gc.deletable.\u0663",  # ARABIC-INDIC DIGIT THREE: int() would accept it
        "ledger-gc.deletable.1\n",
        "xledger-gc.deletable.1",
    ],
)
def test_parse_marker_key_rejects_what_marker_key_would_not_write(key: str) -> None:
    assert parse_marker_key(key) is None


def test_marker_key_rejects_bad_ids() -> None:
    with pytest.raises(ValueError):
        marker_key(-1)
    with pytest.raises(TypeError):
        marker_key(True)
    with pytest.raises(TypeError):
        marker_key("5")  # type: ignore[arg-type]


def test_marker_value_round_trip() -> None:
    value = encode_marker_value(4096, 10, 1_690_000_000_000, 1_700_000_000_000, reason="trim")
    assert " " not in value  # compact: the whole record must fit one znode
    assert json.loads(value) == {
        "size": 4096,
        "entries": 10,
        "timestamp": 1_690_000_000_000,
        "markedAt": 1_700_000_000_000,
        "reason": "trim",
    }
    assert decode_marker_value(value)["markedAt"] == 1_700_000_000_000


def test_marker_value_extra_may_not_replace_required_fields() -> None:
    with pytest.raises(ValueError, match="markedAt"):
        encode_marker_value(1, 2, 3, 4, markedAt=5)
    with pytest.raises(TypeError):
        encode_marker_value(1.5, 2, 3, 4)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        "",
        "[1, 2]",
        '"text"',
        '{"size": 1, "entries": 2, "timestamp": 3}',
        '{"size": 1, "entries": 2, "timestamp": 3, "markedAt": "4"}',
        '{"size": true, "entries": 2, "timestamp": 3, "markedAt": 4}',
    ],
)
def test_bad_marker_value_is_a_clear_error(value: str) -> None:
    key = marker_key(7)
    with pytest.raises(MetadataFormatError) as caught:
        decode_marker_value(value, key=key, path=ML_PATH)
    assert key in str(caught.value)
    assert ML_PATH in str(caught.value)


def test_deletable_markers() -> None:
    info = info_with(
        ("owner", "b"),
        (marker_key(5), encode_marker_value(1, 2, 3, 4)),
        ("ledger-gc.deletable.007", "ignored: not a key we write"),
        (marker_key(6), encode_marker_value(10, 20, 30, 40, note="x")),
    )
    markers = deletable_markers(info, path=ML_PATH)
    assert sorted(markers) == [5, 6]
    assert markers[6]["note"] == "x"
    set_property(info, marker_key(8), "{broken")
    with pytest.raises(MetadataFormatError, match=marker_key(8)):
        deletable_markers(info, path=ML_PATH)


# --- generated code ---------------------------------------------------------------------


def test_generated_module_matches_the_proto(tmp_path: Path) -> None:
    """The committed _pb2 files are what bin/gen-proto makes from the committed .proto."""
    pytest.importorskip("grpc_tools")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            "plugins",
            f"--python_out={tmp_path}",
            f"--pyi_out={tmp_path}",
            "plugins/ledger_gc/proto/mldataformats.proto",
        ],
        cwd=ROOT,
        check=True,
    )
    for name in ("mldataformats_pb2.py", "mldataformats_pb2.pyi"):
        generated = (tmp_path / "ledger_gc" / "proto" / name).read_text()
        committed = (ROOT / "plugins" / "ledger_gc" / "proto" / name).read_text()
        assert generated == committed, f"{name} is stale: run bin/gen-proto"


def test_module_exports() -> None:
    from ledger_gc.formats import framing, markers, records

    for module in (framing, records, markers):
        for name in module.__all__:
            assert hasattr(module, name), name


# --- the fast proof that a record has no unknown field ----------------------------------


@pytest.mark.parametrize(
    ("data", "none_unknown"),
    [
        (GOOD_RAW, True),
        (f_bytes(1, LEDGER_7), True),
        # an unknown field at the top, inside a LedgerInfo, inside its offload context
        (GOOD_RAW + f_varint(99, 1), False),
        (f_bytes(1, LEDGER_7 + f_bytes(100, b"opaque")), False),
        (f_bytes(1, f_varint(1, 7) + f_bytes(5, OFFLOAD_CTX + f_varint(77, 1))), False),
        # a declared field of the wrong wire type, deep inside (kept as unknown by protobuf)
        (f_bytes(1, f_varint(1, 3) + f_varint(5, 1)), False),
        # known fields encoded longer than protobuf's own (a padded varint): the walk decides
        (f_bytes(1, tag(1, VARINT) + b"\x87\x80\x00"), False),
    ],
)
def test_records_without_unknown_fields_are_told_cheaply(data: bytes, none_unknown: bool) -> None:
    from ledger_gc.formats.records import _no_unknown_fields, _wire_type_clash

    assert _no_unknown_fields(ManagedLedgerInfo, data) is none_unknown
    if none_unknown:  # never says "none" where the exact walk finds one
        parsed = ManagedLedgerInfo()
        parsed.ParseFromString(data)
        assert _wire_type_clash(parsed) is None and not unknown_fields(parsed)


@given(
    st.lists(
        st.tuples(st.integers(0, 2**63 - 1), st.integers(-1, 2**40), st.booleans()), max_size=8
    ),
    st.integers(0, 3),
    st.binary(max_size=8),
)
def test_the_cheap_proof_never_misses_an_unknown_field(
    ledgers: list[tuple[int, int, bool]], where: int, extra: bytes
) -> None:
    from ledger_gc.formats.records import _no_unknown_fields

    body = b"".join(
        f_bytes(1, f_varint(1, lid) + f_varint(2, entries) + (f_varint(3, 5) if sized else b""))
        for lid, entries, sized in ledgers
    )
    unknown = f_bytes(120, extra)
    data = (
        body + unknown
        if where == 0
        else f_bytes(1, f_varint(1, 1) + unknown) + body
        if where == 1
        else body
    )
    parsed = ManagedLedgerInfo()
    parsed.ParseFromString(data)
    has_unknown = bool(unknown_fields(parsed)) or any(
        unknown_fields(ledger) for ledger in parsed.ledgerInfo
    )
    if _no_unknown_fields(ManagedLedgerInfo, data):
        assert not has_unknown
