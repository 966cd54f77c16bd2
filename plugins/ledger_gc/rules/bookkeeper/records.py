"""BookKeeper's ledger metadata record, of every format version a cluster may hold (pure).

A record is ``BookieMetadataFormatVersion\\t<N>\\n`` and then (``LedgerMetadataSerDe``):

* N=3 (BookKeeper 4.9 and later): a varint length and the binary ``LedgerMetadataFormat``;
* N=2 (before 4.9, and what a 4.9+ client writes for older readers): the same message in
  protobuf's text format. Clusters older than BookKeeper 4.10 hold both side by side;
* N=1 (the first BookKeeper releases): lines of quorum size, ensemble size, length, one
  line per ensemble, and a closing ``<lastEntryId>\\tCLOSED`` line. No custom metadata, so
  a v1 ledger never carries Pulsar's tags and is foreign to ledger-gc.

A record that does not decode (empty, truncated, another header, a required field
missing) raises ``RecordError``: the scan reports it and it is never deleted. Guessing
would turn a record of a newer format into an orphan.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from ledger_gc.proto import bookkeeper_metadata_pb2 as pb

HEADER = b"BookieMetadataFormatVersion\t"
SUPPORTED_VERSIONS = (1, 2, 3)

OPEN = "OPEN"
IN_RECOVERY = "IN_RECOVERY"
CLOSED = "CLOSED"
_STATES = {pb.LedgerMetadataFormat.OPEN: OPEN, pb.LedgerMetadataFormat.IN_RECOVERY: IN_RECOVERY}
_STATES[pb.LedgerMetadataFormat.CLOSED] = CLOSED
#: The v1 closing line's state word, and the last-entry id that means "in recovery".
V1_CLOSED = "CLOSED"
V1_IN_RECOVERY_ENTRY_ID = -102


class RecordError(ValueError):
    """A ledger metadata record that does not decode; reported, never deleted."""


class LedgerRecord(NamedTuple):
    """What ledger-gc needs of one record: its state, size, age and custom metadata.

    (A named tuple, not a dataclass: a survey decodes a million, and a frozen dataclass
    costs several times as much to build.)"""

    format_version: int
    state: str  # OPEN | IN_RECOVERY | CLOSED
    length: int  # bytes written; meaningful once CLOSED
    last_entry_id: int | None
    ensemble_size: int
    quorum_size: int
    ctime_ms: int | None  # the record's creation time; None: not stored (use the znode's)
    custom: Mapping[str, bytes] = MappingProxyType({})

    @property
    def closed(self) -> bool:
        return self.state == CLOSED


def decode_record(raw: bytes) -> LedgerRecord:
    """The record in ``raw`` (a ledger znode's data); raises ``RecordError``."""
    if not raw:
        raise RecordError("empty record")
    if not raw.startswith(HEADER):
        raise RecordError("no BookieMetadataFormatVersion header")
    line_end = raw.find(b"\n", len(HEADER))
    if line_end < 0:
        raise RecordError("header without a newline")
    version_text = raw[len(HEADER) : line_end]
    if not version_text.isdigit() or len(version_text) > 9:
        raise RecordError(f"format version {version_text[:20]!r} is not a number")
    version = int(version_text)
    body = raw[line_end + 1 :]
    if version == 3:
        return _from_message(3, _binary_message(body))
    if version == 2:
        return _from_message(2, _text_message(body))
    if version == 1:
        return _v1_record(body)
    raise RecordError(f"format version {version} is not one of {SUPPORTED_VERSIONS}")


def _binary_message(body: bytes) -> pb.LedgerMetadataFormat:
    """v3: one varint-length-delimited message, nothing after it."""
    size, offset = _varint(body)
    payload = body[offset : offset + size]
    if len(payload) != size:
        raise RecordError(f"v3 record truncated ({len(payload)} of {size} bytes)")
    if offset + size != len(body):
        raise RecordError(f"{len(body) - offset - size} bytes after the v3 record")
    message = pb.LedgerMetadataFormat()
    try:
        message.ParseFromString(payload)
    except DecodeError as exc:
        raise RecordError(f"v3 record does not parse: {exc}") from None
    return message


def _varint(body: bytes) -> tuple[int, int]:
    value = shift = 0
    for offset, byte in enumerate(body[:10]):
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset + 1
        shift += 7
    raise RecordError("v3 record without a complete length")


def _text_message(body: bytes) -> pb.LedgerMetadataFormat:
    message = pb.LedgerMetadataFormat()
    try:
        text_format.Parse(body.decode("utf-8"), message, allow_unknown_field=True)
    except (UnicodeDecodeError, text_format.ParseError) as exc:
        raise RecordError(f"v2 record does not parse: {' '.join(str(exc).split())}") from None
    return message


def _from_message(version: int, message: pb.LedgerMetadataFormat) -> LedgerRecord:
    if not message.IsInitialized():
        missing = message.FindInitializationErrors()
        raise RecordError(f"v{version} record lacks {', '.join(sorted(missing))}")
    # (A later entry of a key wins, as in BookKeeper's map; a bytes field is bytes.)
    custom = {entry.key: entry.value for entry in message.customMetadata}
    state = message.state
    ctime = message.ctime
    return LedgerRecord(
        version,
        _STATES.get(state) or f"state-{state}",
        message.length,
        message.lastEntryId if message.HasField("lastEntryId") else None,
        message.ensembleSize,
        message.quorumSize,
        ctime if ctime > 0 and message.HasField("ctime") else None,
        custom,
    )


def _v1_record(body: bytes) -> LedgerRecord:
    """BookKeeper's first format, read as ``LedgerMetadataSerDe`` reads it: exactly
    ``quorum\\nensemble\\nlength``, then one line per ensemble
    (``firstEntryId\\tbookie\\tbookie...``) and, once closed, ``lastEntryId\\tCLOSED``
    (``-102\\tCLOSED``: in recovery; an open ledger has no such line). Every number
    must parse, as in BookKeeper; a line that does not is an unreadable record."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordError("v1 record is not text") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # a final newline
    if len(lines) < 3:
        raise RecordError("v1 record has fewer than three lines")
    try:
        quorum, ensemble, length = (int(lines[0]), int(lines[1]), int(lines[2]))
        state, last_entry = OPEN, None
        for line in lines[3:]:
            fields = line.split("\t")
            if len(fields) >= 2 and fields[1] == V1_CLOSED:
                last_entry = int(fields[0])
                state = IN_RECOVERY if last_entry == V1_IN_RECOVERY_ENTRY_ID else CLOSED
                if state == IN_RECOVERY:
                    last_entry = None
                break
            int(fields[0])  # an ensemble's first entry id
    except ValueError:
        raise RecordError("v1 record has a line that is not what BookKeeper writes") from None
    return LedgerRecord(1, state, length, last_entry, ensemble, quorum, None, {})


# --- encoding, for tests, the demo and ``ledgergc restore``'s checks -------------------


def encode_v3(message: pb.LedgerMetadataFormat) -> bytes:
    payload = message.SerializeToString()
    return HEADER + b"3\n" + _encode_varint(len(payload)) + payload


def encode_v2(message: pb.LedgerMetadataFormat) -> bytes:
    return HEADER + b"2\n" + text_format.MessageToString(message).encode("utf-8")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


#: What a BookKeeper ledger's bytes count wherever ledger-gc shows them (its ``length``:
#: the entries' logical size, the same figure BookKeeper's own tools show). Each entry is
#: stored on a write quorum of bookies (``quorumSize``), and a delete frees nothing at
#: once: a bookie drops a ledger at its next garbage collection and gets the disk back
#: when it compacts the entry logs that held it.
BYTES_MEANING = (
    "the ledgers' logical length: on the bookies that times the write quorum, freed at "
    "their next garbage collection and compaction"
)
