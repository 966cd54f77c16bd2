"""BookKeeper's ledger metadata record (pure): BookKeeper's own test vectors, byte
compatibility with an independently compiled ``LedgerMetadataFormat``, and garbage."""

from __future__ import annotations

import base64
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import text_format
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_gc.rules.bookkeeper import records
from ledger_gc.rules.bookkeeper.records import (
    CLOSED,
    IN_RECOVERY,
    OPEN,
    LedgerRecord,
    RecordError,
    decode_record,
)

HEADER = b"BookieMetadataFormatVersion\t"

# --- BookKeeper's TestLedgerMetadataSerDe vectors (verbatim base64) ----------------------

V1 = (
    "Qm9va2llTWV0YWRhdGFGb3JtYXRWZXJzaW9uCTEKMgozCjAKMAkxOTIuMC4yLjE6MTIzNAkxOTIuMC4yLjI6"
    "MTIzNAkxOTIuMC4yLjM6MTIzNAotMTAyCUNMT1NFRA=="
)
V2 = (
    "Qm9va2llTWV0YWRhdGFGb3JtYXRWZXJzaW9uCTIKcXVvcnVtU2l6ZTogMgplbnNlbWJsZVNpemU6IDMKbGVu"
    "Z3RoOiAwCmxhc3RFbnRyeUlkOiAtMQpzdGF0ZTogSU5fUkVDT1ZFUlkKc2VnbWVudCB7CiAgZW5zZW1ibGVN"
    "ZW1iZXI6ICIxOTIuMC4yLjE6MTIzNCIKICBlbnNlbWJsZU1lbWJlcjogIjE5Mi4wLjIuMjoxMjM0IgogIGVu"
    "c2VtYmxlTWVtYmVyOiAiMTkyLjAuMi4zOjEyMzQiCiAgZmlyc3RFbnRyeUlkOiAwCn0KZGlnZXN0VHlwZTog"
    "Q1JDMzIKcGFzc3dvcmQ6ICJwYXNzd2QiCmFja1F1b3J1bVNpemU6IDIK"
)
V2_CTIME = (
    "Qm9va2llTWV0YWRhdGFGb3JtYXRWZXJzaW9uCTIKcXVvcnVtU2l6ZTogMgplbnNlbWJsZVNpemU6IDMKbGVu"
    "Z3RoOiAwCmxhc3RFbnRyeUlkOiAtMQpzdGF0ZTogSU5fUkVDT1ZFUlkKc2VnbWVudCB7CiAgZW5zZW1ibGVN"
    "ZW1iZXI6ICIxOTIuMC4yLjE6MTIzNCIKICBlbnNlbWJsZU1lbWJlcjogIjE5Mi4wLjIuMjoxMjM0IgogIGVu"
    "c2VtYmxlTWVtYmVyOiAiMTkyLjAuMi4zOjEyMzQiCiAgZmlyc3RFbnRyeUlkOiAwCn0KZGlnZXN0VHlwZTog"
    "Q1JDMzIKcGFzc3dvcmQ6ICJwYXNzd2QiCmFja1F1b3J1bVNpemU6IDIKY3RpbWU6IDE1NDQwMDIzODMwNzUK"
)
V3 = (
    "Qm9va2llTWV0YWRhdGFGb3JtYXRWZXJzaW9uCTMKYAgCEAMYACD///////////8BKAEyMgoOMTkyLjAuMi4x"
    "OjMxODEKDjE5Mi4wLjIuMjozMTgxCg4xOTIuMC4yLjM6MzE4MRAAOANCBmZvb2JhckgBUP///////////wFg"
    "AA=="
)


@pytest.mark.parametrize(
    ("vector", "size", "expected"),
    [
        # quorum 2, ensemble 3, length 0, closed at -102: in recovery; v1 has no ctime.
        (V1, 94, LedgerRecord(1, IN_RECOVERY, 0, None, 3, 2, None, {})),
        (V2, 294, LedgerRecord(2, IN_RECOVERY, 0, -1, 3, 2, None, {})),
        (V2_CTIME, 315, LedgerRecord(2, IN_RECOVERY, 0, -1, 3, 2, 1544002383075, {})),
        # ctime=-1 is *present* in BookKeeper's v3 vector: not a stored creation time.
        (V3, 127, LedgerRecord(3, OPEN, 0, -1, 3, 2, None, {})),
    ],
    ids=["v1", "v2", "v2-ctime", "v3"],
)
def test_bookkeepers_own_vectors(vector: str, size: int, expected: LedgerRecord) -> None:
    raw = base64.b64decode(vector)
    assert len(raw) == size
    record = decode_record(raw)
    assert record == expected
    assert record.closed is False


def test_v1_closed_and_open() -> None:
    body = b"2\n3\n4096\n0\tb1:3181\tb2:3181\tb3:3181\n10\tb1:3181\tb2:3181\tb4:3181\n41\tCLOSED"
    closed = decode_record(HEADER + b"1\n" + body)
    assert (closed.state, closed.last_entry_id, closed.length) == (CLOSED, 41, 4096)
    assert closed.closed
    assert (closed.quorum_size, closed.ensemble_size, closed.custom) == (2, 3, {})
    opened = decode_record(HEADER + b"1\n2\n3\n0\n0\tb1:3181\tb2:3181\tb3:3181\n")
    assert (opened.state, opened.last_entry_id) == (OPEN, None)


# --- byte compatibility with an independently compiled LedgerMetadataFormat --------------

# Transcribed from the field list in DESIGN.md "BookKeeper ledgers" (required as in
# BookKeeper), under a package of its own so that it cannot share the library's classes.
REFERENCE_PROTO = """\
syntax = "proto2";
package bkref;

message LedgerMetadataFormat {
  required int32 quorumSize = 1;
  required int32 ensembleSize = 2;
  required int64 length = 3;
  optional int64 lastEntryId = 4;
  enum State { OPEN = 1; IN_RECOVERY = 2; CLOSED = 3; }
  required State state = 5 [default = OPEN];
  message Segment {
    repeated string ensembleMember = 1;
    required int64 firstEntryId = 2;
  }
  repeated Segment segment = 6;
  enum DigestType { CRC32 = 1; HMAC = 2; CRC32C = 3; DUMMY = 4; }
  optional DigestType digestType = 7;
  optional bytes password = 8;
  optional int32 ackQuorumSize = 9;
  optional int64 ctime = 10;
  message cMetadataMapEntry {
    optional string key = 1;
    optional bytes value = 2;
  }
  repeated cMetadataMapEntry customMetadata = 11;
  optional int64 cToken = 12;
}
"""
STATE_NAMES = {1: OPEN, 2: IN_RECOVERY, 3: CLOSED}


@pytest.fixture(scope="module")
def bkref(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """The reference proto compiled with grpc_tools.protoc and imported from tmp."""
    if "bkref_dataformats_pb2" in sys.modules:  # the descriptor pool takes a file once
        return sys.modules["bkref_dataformats_pb2"]
    pytest.importorskip("grpc_tools")
    out: Path = tmp_path_factory.mktemp("bkref")
    proto = out / "bkref_dataformats.proto"
    proto.write_text(REFERENCE_PROTO)
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{out}", f"--python_out={out}", str(proto)],
        check=True,
    )
    spec = importlib.util.spec_from_file_location(
        "bkref_dataformats_pb2", out / "bkref_dataformats_pb2.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["bkref_dataformats_pb2"] = module
    assert module.LedgerMetadataFormat.DESCRIPTOR.full_name == "bkref.LedgerMetadataFormat"
    return module


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def v3_bytes(message) -> bytes:
    payload = message.SerializeToString()
    return HEADER + b"3\n" + _varint(len(payload)) + payload


def v2_bytes(message) -> bytes:
    return HEADER + b"2\n" + text_format.MessageToString(message).encode("utf-8")


def build(bkref: ModuleType, **fields) -> object:
    custom = fields.pop("custom", [])
    members = fields.pop("members", ["192.0.2.1:3181", "192.0.2.2:3181"])
    message = bkref.LedgerMetadataFormat(**fields)
    message.segment.add(ensembleMember=members, firstEntryId=0)
    if fields.get("state") == 3:
        message.segment.add(ensembleMember=members[::-1], firstEntryId=7)
    for key, value in custom:
        message.customMetadata.add(key=key, value=value)
    return message


def expected_record(version: int, message) -> LedgerRecord:
    has_ctime = message.HasField("ctime") and message.ctime > 0
    return LedgerRecord(
        format_version=version,
        state=STATE_NAMES[message.state],
        length=message.length,
        last_entry_id=message.lastEntryId if message.HasField("lastEntryId") else None,
        ensemble_size=message.ensembleSize,
        quorum_size=message.quorumSize,
        ctime_ms=message.ctime if has_ctime else None,
        custom={entry.key: entry.value for entry in message.customMetadata},  # last wins
    )


PULSAR_TAGS = [
    ("application", b"pulsar"),
    ("component", b"managed-ledger"),
    ("pulsar/managed-ledger", b"public/default/persistent/z%C3%A4hler"),
    ("pulsar/cursor", b"billing"),
    ("EnsemblePlacementPolicyConfig", b'{"policyClass":"x","properties":{}}'),
    ("pulsar/compactedTo", b'\x08\xff\x01\x10\x00\x80\xfe\n\t"\\'),  # raw, not UTF-8
]


CLOSED_LONG = dict(quorumSize=3, ensembleSize=5, length=2**62 + 1, lastEntryId=2**63 - 1, state=3)
CLOSED_LONG |= dict(digestType=3, password=b"", ackQuorumSize=2, ctime=1_700_000_000_123)
CLOSED_LONG |= dict(cToken=2**63 - 2)


@pytest.mark.parametrize("encode", [v3_bytes, v2_bytes], ids=["v3", "v2"])
@pytest.mark.parametrize(
    "fields",
    [
        dict(quorumSize=2, ensembleSize=3, length=0, lastEntryId=-1, state=1, custom=PULSAR_TAGS),
        {**CLOSED_LONG, "custom": [*PULSAR_TAGS, ("application", b"pulsar-last-wins")]},
        dict(quorumSize=1, ensembleSize=1, length=0, lastEntryId=-102, state=2, ctime=0),
        dict(quorumSize=2, ensembleSize=2, length=10, state=3, ctime=-5, cToken=0),
        dict(quorumSize=2, ensembleSize=2, length=0, state=1, custom=[("k", b"\xff\xfe\x00")]),
    ],
    ids=["open-tagged", "closed-long", "recovery", "closed-no-last-entry", "binary-value"],
)
def test_decodes_what_bookkeepers_format_encodes(bkref: ModuleType, encode, fields) -> None:
    message = build(bkref, **fields)
    version = 3 if encode is v3_bytes else 2
    assert decode_record(encode(message)) == expected_record(version, message)


def test_library_encoders_write_the_reference_bytes(bkref: ModuleType) -> None:
    message = build(bkref, quorumSize=2, ensembleSize=3, length=9, state=3, custom=PULSAR_TAGS)
    ours = records.pb.LedgerMetadataFormat.FromString(message.SerializeToString())
    assert records.encode_v3(ours) == v3_bytes(message)
    assert records.encode_v2(ours) == v2_bytes(message)


int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def messages(draw: st.DrawFn, bkref: ModuleType) -> object:
    fields = {
        "quorumSize": draw(int32),
        "ensembleSize": draw(int32),
        "length": draw(int64),
        "state": draw(st.sampled_from([1, 2, 3])),
        "members": draw(st.lists(st.text(max_size=20), min_size=1, max_size=4)),
        "custom": draw(
            st.lists(st.tuples(st.text(max_size=30), st.binary(max_size=30)), max_size=6)
        ),
    }
    optional = dict(lastEntryId=int64, ctime=int64, cToken=int64, ackQuorumSize=int32)
    optional |= dict(digestType=st.sampled_from([1, 2, 3, 4]), password=st.binary(max_size=20))
    for name, strategy in optional.items():
        value = draw(st.none() | strategy)
        if value is not None:
            fields[name] = value
    return build(bkref, **fields)


def test_random_records_decode_field_for_field(bkref: ModuleType) -> None:
    @settings(max_examples=150, deadline=None)
    @given(message=messages(bkref), version=st.sampled_from([2, 3]))
    def check(message, version: int) -> None:
        raw = v3_bytes(message) if version == 3 else v2_bytes(message)
        assert decode_record(raw) == expected_record(version, message)

    check()


# --- garbage: never a record --------------------------------------------------------------


GARBAGE = {
    "empty": b"",
    "random": bytes(range(256)) * 4,
    "random-after-header": HEADER + b"3\n" + bytes(range(255, 0, -3)),
    "wrong-header": b"BookieMetadataFormatVersion 3\n\x02\x08\x01",
    "lowercase-header": b"bookieMetadataFormatVersion\t3\n\x00",
    "header-only-no-newline": HEADER + b"3",
    "header-key-only": HEADER,
    "version-4": HEADER + b"4\nquorumSize: 2\n",
    "version-0": HEADER + b"0\n2\n3\n0\n",
    "version-huge": HEADER + b"123456789123456789\nblahblah",
    "version-foobar": HEADER + b"foobar\nblahblah",
    "version-negative": HEADER + b"-3\n\x00",
    "v3-empty-body": HEADER + b"3\n",
    "v3-incomplete-varint": HEADER + b"3\n\xff\xff",
    "v3-truncated": base64.b64decode(V3)[:-10],
    "v2-not-text-format": HEADER + b"2\nthis is { not : protobuf text",
    "v2-unknown-state": HEADER + b"2\nquorumSize: 2\nensembleSize: 2\nlength: 0\nstate: GONE\n",
    "v2-missing-state": HEADER + b"2\nquorumSize: 2\nensembleSize: 2\nlength: 0\n",
    "v2-not-utf8": HEADER + b"2\nquorumSize: 2\n\xff\xfe",
    "v1-too-short": HEADER + b"1\n2\n3\n",
    "v1-non-numeric-quorum": HEADER + b"1\ntwo\n3\n0\n0\tb1\tb2\tb3\n5\tCLOSED",
    "v1-non-numeric-length": HEADER + b"1\n2\n3\nlots\n0\tb1\tb2\tb3\n5\tCLOSED",
    "v1-non-numeric-last-entry": HEADER + b"1\n2\n3\n0\n0\tb1\tb2\tb3\nfive\tCLOSED",
    # BookKeeper parses each ensemble line's first field as the ensemble's first entry id
    # (NumberFormatException -> IOException), and quorum/ensemble/length are lines 1-3.
    "v1-non-numeric-ensemble-entry": HEADER + b"1\n2\n3\n0\nzero\tb1\tb2\tb3\n5\tCLOSED",
    "v1-empty-line": HEADER + b"1\n2\n\n3\n0\n0\tb1\tb2\tb3\n5\tCLOSED",
}


@pytest.mark.parametrize("raw", list(GARBAGE.values()), ids=list(GARBAGE))
def test_garbage_raises_record_error(raw: bytes) -> None:
    with pytest.raises(RecordError):
        decode_record(raw)


@pytest.mark.parametrize(
    "field", ["quorumSize", "ensembleSize", "length", "state", "segment.firstEntryId"]
)
def test_v3_missing_a_required_field_raises(bkref: ModuleType, field: str) -> None:
    message = build(bkref, quorumSize=2, ensembleSize=3, length=0, state=1)
    if field.startswith("segment."):
        message.segment[0].ClearField("firstEntryId")
    else:
        message.ClearField(field)
    payload = message.SerializePartialToString()
    with pytest.raises(RecordError):
        decode_record(HEADER + b"3\n" + _varint(len(payload)) + payload)
    with pytest.raises(RecordError):
        decode_record(v2_bytes(message))  # text_format prints it all the same


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=200) | st.binary(max_size=120).map(lambda b: HEADER + b))
def test_any_bytes_decode_or_raise_record_error(raw: bytes) -> None:
    try:
        record = decode_record(raw)
    except RecordError:
        return
    assert record.state in (OPEN, IN_RECOVERY, CLOSED) or record.state.startswith("state-")
