"""Offloaded segments against the metadata: live, orphaned or foreign (pure).

Pulsar's blob-store offloader (``BlobStoreManagedLedgerOffloader``) writes a ledger to
tiered storage as ``<uuid>-ledger-<id>`` and ``<uuid>-ledger-<id>-index``, under a fresh
``UUID.randomUUID()`` per attempt, and ``ManagedLedgerImpl`` writes that uuid into the
ledger's ``offloadContext`` (complete = false) *before* the upload starts. So an object
of ``(uuid, id)`` is *live* exactly when a listed or marked ledger of that id carries
that uuid; any other segment object is an *orphan segment*:

* a deleted topic's offloaded ledgers (Pulsar issues 9962, 16687): the ledger id is in
  no managed ledger at all;
* a failed or retried offload's previous uuid (a new attempt writes a new uuid and only
  tries once to delete the old objects): the ledger is listed under another uuid;
* a trim whose tiered delete failed: the ledger left the list, its objects stayed.

Ledger ids are unique store-wide (BookKeeper's id generator), so "live" is decided
against the whole metadata, indexed by ledger id, never against one managed ledger. An
orphan segment carries the name of the managed ledger that references its ledger id
under another uuid (none for a deleted topic): the live re-check reads that record.

The Spark diff (``spark_jobs``) implements the same rule with a join; ``diff_segments``
here is the reference it is tested against.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ledger_gc.orphans.classify import (
    LIVE_SEGMENT,
    NO_NAMESPACE,
    OFFLOAD_FOREIGN,
    ORPHAN_SEGMENT,
    Candidate,
    DiffResult,
    MetadataSnapshot,
    StoredObject,
    namespace_of_ml,
    parse_segment_target,
    segment_target,
)
from ledger_gc.settings import Settings
from ledger_gc.storage import offload_keys

# The segment-key pattern for Spark (Java regex) over the key with the offload prefix
# removed. Groups: 1 uuid, 2 ledger id (decimal, no leading zero), 3 "-index" or "".
_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
SEGMENT_RE_JAVA = rf"^({_UUID})-ledger-(0|[1-9][0-9]{{0,18}})(-index)?\z"


@dataclass(frozen=True)
class Owner:
    """A listed or marked ledger as the metadata names it: whose, and which uuid."""

    ml_name: str
    uuid: str | None  # None: the ledger was never offloaded


def owners_by_ledger(snapshot: MetadataSnapshot) -> dict[int, list[Owner]]:
    """Every listed or marked ledger id -> who references it, with which offload uuid."""
    index: dict[int, list[Owner]] = {}
    for name, refs in snapshot.managed_ledgers.items():
        for ledger_id in refs.listed | refs.marked:
            uuids = snapshot.offloads.get((name, ledger_id)) or frozenset({None})
            index.setdefault(ledger_id, []).extend(Owner(name, u) for u in sorted(uuids, key=str))
    return index


def segment_class(owners: Iterable[Owner], uuid: str) -> str:
    """``live-segment`` when a referencing ledger carries ``uuid``, else ``orphan-segment``."""
    return LIVE_SEGMENT if any(owner.uuid == uuid for owner in owners) else ORPHAN_SEGMENT


def associated_ml(owners: Iterable[Owner]) -> str:
    """The managed ledger that references a ledger id (any uuid), "" when none does."""
    names = sorted({owner.ml_name for owner in owners})
    return names[0] if names else ""


def counted_by_ledger_scan(settings: Settings) -> str | None:
    """The key prefix of the offload bucket that the ledger scan lists too (None: none).

    The offload bucket may be the ledger bucket (same name at the same endpoint) with
    overlapping prefixes: an empty offload prefix covers the ledger prefix, an empty
    ledger prefix covers the offload prefix. Both scans then list the overlap, and the
    byte-fraction guard must count each object once: counted twice, the bytes would
    halve the orphan fraction of a misconfigured run. The overlap is still classified
    (a segment is a segment wherever it lies); only the totals leave it out."""
    endpoint = settings.offload_s3_endpoint or settings.s3_endpoint
    if settings.offload_bucket != settings.bucket or endpoint != settings.s3_endpoint:
        return None
    return settings.key_prefix


def diff_segments(
    result: DiffResult,
    bucket: str,
    prefix: str,
    objects: Iterable[StoredObject],
    snapshot: MetadataSnapshot,
    *,
    max_foreign_samples: int = 50,
    counted_elsewhere: str | None = None,
) -> None:
    """Classify the offload bucket's objects into ``result`` (the reference diff).

    ``counted_elsewhere``: keys under it are in the ledger scan's totals already
    (``counted_by_ledger_scan``)."""
    owners = owners_by_ledger(snapshot)
    per_segment: dict[tuple[str, int], list[int]] = {}
    for obj in objects:
        if counted_elsewhere is None or not obj.key.startswith(counted_elsewhere):
            result.objects += 1
            result.bytes += obj.size
        result.offload_objects += 1
        result.offload_bytes += obj.size
        segment = offload_keys.parse_segment_key(prefix, obj.key)
        if segment is None:
            result.add(NO_NAMESPACE, OFFLOAD_FOREIGN, 1, obj.size, 0)
            if len(result.foreign_samples) < max_foreign_samples:
                result.foreign_samples.append(
                    {"key": f"{bucket}/{obj.key}", "reason": "not an offloaded-ledger segment"}
                )
            continue
        result.segment_objects += 1
        agg = per_segment.setdefault((segment.uuid, segment.ledger_id), [0, 0, 0, 2**63])
        agg[0] += 1
        agg[1] += obj.size
        agg[2] = max(agg[2], obj.last_modified)
        agg[3] = min(agg[3], obj.last_modified)
    for (uuid, ledger_id), (count, size, newest, oldest) in sorted(per_segment.items()):
        mine = owners.get(ledger_id, [])
        name = segment_class(mine, uuid)
        ml_name = associated_ml(mine)
        result.add(namespace_of_ml(ml_name), name, count, size, 1)
        if name == ORPHAN_SEGMENT:
            data_key, _ = offload_keys.segment_keys(prefix, uuid, ledger_id)
            result.candidates.append(
                Candidate(
                    ORPHAN_SEGMENT,
                    ml_name,
                    ledger_id,
                    count,
                    size,
                    newest,
                    oldest,
                    segment=f"{bucket}/{data_key}",
                )
            )


def segment_of_target(prefix: str, offload_prefix: str) -> offload_keys.SegmentKey | None:
    """The data segment a registry target names (None: not a segment target)."""
    parsed = parse_segment_target(prefix)
    if parsed is None:
        return None
    return offload_keys.parse_segment_key(offload_prefix, parsed[1])


def carried(owners: Mapping[int, list[Owner]], ledger_id: int, uuid: str) -> list[Owner]:
    """The owners of ``ledger_id`` that carry ``uuid`` (non-empty: the segment is live)."""
    return [owner for owner in owners.get(ledger_id, []) if owner.uuid == uuid]


__all__ = [
    "SEGMENT_RE_JAVA",
    "Owner",
    "associated_ml",
    "carried",
    "counted_by_ledger_scan",
    "diff_segments",
    "owners_by_ledger",
    "segment_class",
    "segment_of_target",
    "segment_target",
]
