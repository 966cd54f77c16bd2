"""Pulsar's tiered-storage object names (pure, no I/O).

Pulsar's blob-store offloader (``DataBlockUtils``) writes an offloaded ledger as two
objects, ``<uuid>-ledger-<ledgerId>`` (the data) and ``<uuid>-ledger-<ledgerId>-index``,
where ``<uuid>`` is the ledger's ``OffloadContext`` (uidMsb, uidLsb) as Java prints a
UUID (lower-case hex, 8-4-4-4-12). ledger-gc reads them below an optional prefix
(``LEDGERGC_OFFLOAD_PREFIX``). The streaming offloader's ``<uuid>`` and ``<uuid>-index``
objects, and anything else, are not segments of an offloaded ledger: foreign.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# Java prints a long in decimal with no leading zeros; ids are never negative.
_SEGMENT = re.compile(rf"({_UUID})-ledger-(0|[1-9][0-9]{{0,18}})(-index)?", re.ASCII)
MAX_ID = 2**63 - 1
#: How LEDGERGC_PULSAR_CLUSTER and the report name an offloaded object with no cluster
#: name (Pulsar before the tag): listed there, such objects are this store's too.
UNTAGGED_CLUSTER = "(untagged)"


@dataclass(frozen=True)
class SegmentKey:
    """An offloaded ledger's data or index object."""

    key: str
    uuid: str
    ledger_id: int
    is_index: bool


def _base(prefix: str) -> str:
    stripped = prefix.strip("/")
    return f"{stripped}/" if stripped else ""


def segment_keys(prefix: str, uuid: str, ledger_id: int) -> tuple[str, str]:
    """The data and index keys of ledger ``ledger_id`` offloaded under ``uuid``."""
    data = f"{_base(prefix)}{uuid}-ledger-{ledger_id}"
    return data, f"{data}-index"


def parse_segment_key(prefix: str, key: str) -> SegmentKey | None:
    """The segment a key is, or None when it is not one (foreign)."""
    base = _base(prefix)
    if not key.startswith(base):
        return None
    match = _SEGMENT.fullmatch(key[len(base) :])
    if match is None or int(match.group(2)) > MAX_ID:
        return None
    return SegmentKey(key, match.group(1), int(match.group(2)), match.group(3) is not None)


#: Why a key that is not a segment is never deleted from an offload bucket.
NOT_A_SEGMENT = "not an offloaded-ledger segment (<uuid>-ledger-<id>[-index]); never deleted"


def why_not_a_segment(prefix: str, key: str) -> str | None:
    """None when ``key`` is a segment below ``prefix``, else ``NOT_A_SEGMENT``: what an
    offload bucket owns on S3 and Azure (GCS owns its upload parts too)."""
    return None if parse_segment_key(prefix, key) is not None else NOT_A_SEGMENT


# jclouds uploads a multipart upload to GCS as parts ``<random uuid>_<8 digits>`` and
# composes them; a broker stopped mid-upload leaves the parts (``orphan-upload-part``).
_UPLOAD_PART = re.compile(rf"({_UUID})_([0-9]{{8}})", re.ASCII)


@dataclass(frozen=True)
class UploadPart:
    """A part of a GCS multipart upload: ``<uuid>_<8 digits>``."""

    key: str
    uuid: str
    number: int


def parse_upload_part(prefix: str, key: str) -> UploadPart | None:
    """The upload part a key is, or None when it is not one."""
    base = _base(prefix)
    if not key.startswith(base):
        return None
    match = _UPLOAD_PART.fullmatch(key[len(base) :])
    if match is None:
        return None
    return UploadPart(key, match.group(1), int(match.group(2)))


#: The first character of every segment and upload-part key below the prefix (the uuid's
#: first hex digit): the offload listing runs one shard per digit, plus the keys outside.
SHARD_DIGITS = "0123456789abcdef"


def shard_prefixes(prefix: str) -> list[str]:
    """The 16 key prefixes the offload listing is sharded by."""
    return [f"{_base(prefix)}{digit}" for digit in SHARD_DIGITS]


def outside_shards(prefix: str) -> list[tuple[str | None, str | None]]:
    """(start, end) ranges of the keys below ``prefix`` that no shard lists (a first
    character before "0", between "9" and "a", after "f"): foreign keys, listed apart."""
    base = _base(prefix)
    return [(None, f"{base}0"), (f"{base}:", f"{base}a"), (f"{base}g", None)]
