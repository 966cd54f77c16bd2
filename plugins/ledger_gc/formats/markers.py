"""The trim's deletable markers, in ``ManagedLedgerInfo.properties``.

A marker is an entry ``ledger-gc.deletable.<ledgerId>`` whose value is a compact JSON
object with at least ``size``, ``entries``, ``timestamp`` and ``markedAt`` (and, for an
offloaded ledger, what deleting its tiered-storage copy needs): shared/DESIGN.md,
"Deletable markers". The trim writes one in the same compare-and-set that drops the ledger
from the list; until its data is gone, the marker is the only place that names it.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from ledger_gc.errors import MetadataFormatError
from ledger_gc.formats.records import LedgerInfo, ManagedLedgerInfo

__all__ = [
    "DELETABLE_MARKER_PREFIX",
    "decode_marker_value",
    "deletable_markers",
    "encode_marker_value",
    "java_uuid",
    "marker_key",
    "offload_marker_fields",
    "parse_marker_key",
]


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
