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

**Another cluster's segments.** Geo-replicated Pulsar clusters commonly share one
offload bucket. Ledger ids are unique only within one BookKeeper cluster, and the other
cluster's metadata is not in our ZooKeeper, so its live segments look orphaned here.
Pulsar's offloader writes the cluster's name into every offloaded object's user metadata
(``LedgerOffloader.METADATA_PULSAR_CLUSTER_NAME``, "pulsarClusterName"; S3 returns it as
``x-amz-meta-pulsarclustername``), and Pulsar's own offloaded-ledger scanner
(``OffloaderObjectsScannerUtils``, apache/pulsar PR 14930) judges only objects of its own
cluster name. So does ledger-gc (``our_clusters``, ``why_not_ours``): an orphan-looking
segment is this store's only when its objects' cluster name is one of ours, the names
that ``LEDGERGC_PULSAR_CLUSTER`` lists or, unset, the names read from a small sample of
this store's live segments; anything else is *another cluster's segment*: held, never
deleted. A segment with no name (a Pulsar from before the tag) is ours only when none of
our sampled live segments carries a name either, or the setting lists ``(untagged)``.

The Spark diff (``spark.segment_diff``) implements the same rule with a join; ``diff_segments``
here is the reference it is tested against.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger_gc.rules.orphans.classify import (
    LIVE_SEGMENT,
    NO_NAMESPACE,
    OFFLOAD_FOREIGN,
    ORPHAN_SEGMENT,
    ORPHAN_UPLOAD_PART,
    OTHER_BUCKET_SEGMENT,
    OTHER_CLUSTER_SEGMENT,
    Candidate,
    DiffResult,
    MetadataSnapshot,
    StoredObject,
    namespace_of_ml,
    parse_segment_target,
    segment_target,
)
from ledger_gc.rules.storage import offload_drivers, offload_keys

#: The user-metadata key of Pulsar's cluster name on an offloaded object, as S3 returns
#: it (lower case; ``LedgerOffloader.METADATA_PULSAR_CLUSTER_NAME`` is "pulsarClusterName").
CLUSTER_METADATA = "pulsarclustername"
#: How the setting and the report name "no cluster name" (Pulsar before the tag).
if TYPE_CHECKING:
    from ledger_gc.config.endpoints import ObjectStore

UNTAGGED = offload_keys.UNTAGGED_CLUSTER
#: Live segments whose data objects are read (HEAD) to learn this store's cluster names.
MAX_LIVE_SAMPLE = 16
#: Other clusters' segments listed in the report (all are counted).
MAX_OTHER_SAMPLES = 50

# The segment-key pattern for Spark (Java regex) over the key with the offload prefix
# removed. Groups: 1 uuid, 2 ledger id (decimal, no leading zero), 3 "-index" or "".
_UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
SEGMENT_RE_JAVA = rf"^({_UUID})-ledger-(0|[1-9][0-9]{{0,18}})(-index)?\z"


@dataclass(frozen=True)
class Owner:
    """A listed or marked ledger as the metadata names it: whose, which uuid, and where
    that offload went (``offload_place``; None: not recorded)."""

    ml_name: str
    uuid: str | None  # None: the ledger was never offloaded
    place: str | None = None


def owners_by_ledger(snapshot: MetadataSnapshot) -> dict[int, list[Owner]]:
    """Every listed or marked ledger id -> who references it, with which offload uuid."""
    index: dict[int, list[Owner]] = {}
    for name, refs in snapshot.managed_ledgers.items():
        for ledger_id in refs.listed | refs.marked:
            uuids: Iterable[str | None] = snapshot.offloads.get((name, ledger_id)) or (None,)
            index.setdefault(ledger_id, []).extend(
                Owner(name, u, snapshot.places.get((name, ledger_id, u)) if u else None)
                for u in sorted(uuids, key=str)
            )
    return index


# --- where an offload went: the ledger's driverMetadata ------------------------------


def offload_place(driver_name: str | None, bucket: str | None) -> str | None:
    """Where one offload went, as ``<family>/<bucket>`` (the bucket may be empty: the
    driver only), from its ``driverMetadata`` (the driver, ``offload_drivers.family``;
    property ``bucket``); None when it records neither (older Pulsar: then it is taken
    to be here). A driver of no family ledger-gc reads (``filesystem``) is a place of
    its own, never here."""
    name = (driver_name or "").strip()
    if not name and not bucket:
        return None
    known = offload_drivers.family(name) if name else ""
    return f"{known if known is not None else name.lower()}/{bucket or ''}"


def is_here(place: str | None, here: tuple[str, str] | None) -> bool:
    """Whether an offload recorded at ``place`` is in the configured bucket ``here``
    (family, bucket; None: not checked). Unrecorded, or only partly (a driver without a
    bucket, a bucket without a driver), what is recorded must agree."""
    if place is None or here is None:
        return True
    family, _, bucket = place.partition("/")
    return (not family or family == here[0]) and (not bucket or bucket == here[1])


# --- whose segment: Pulsar's cluster name --------------------------------------------


@dataclass(frozen=True)
class OurClusters:
    """The cluster names whose segments are this store's, and where they came from."""

    names: frozenset[str]
    untagged: bool  # a segment with no cluster name is ours
    source: str  # "setting" (LEDGERGC_PULSAR_CLUSTER) or "learned" (live segments)
    sampled: int = 0  # live segments whose cluster name was read

    def to_dict(self) -> dict[str, Any]:
        return {
            "names": sorted(self.names),
            "untagged": self.untagged,
            "source": self.source,
            "sampled": self.sampled,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> OurClusters | None:
        if not data:
            return None
        return cls(
            frozenset(data.get("names") or ()),
            bool(data.get("untagged")),
            str(data.get("source") or "learned"),
            int(data.get("sampled") or 0),
        )


def our_clusters(configured: Sequence[str], live_tags: Sequence[str | None]) -> OurClusters:
    """This store's clusters: the setting when set, else learned from its live segments.

    ``live_tags``: the cluster name of each sampled live segment (None: it has none).
    The setting is the whole truth when set: an untagged segment is ours only if it
    lists ``(untagged)``. Learned, an untagged segment is ours only while no sampled live
    segment carries a name: a store whose Pulsar writes no names keeps the rule it had
    (nothing to tell clusters apart by), but once ours are named, a nameless segment may
    be an older cluster's sharing the bucket, and holding our own old orphans (reported;
    the setting releases them) is the safe side of that doubt."""
    if configured:
        return OurClusters(
            frozenset(name for name in configured if name != UNTAGGED),
            UNTAGGED in configured,
            "setting",
            len(live_tags),
        )
    return OurClusters(
        frozenset(tag for tag in live_tags if tag is not None),
        all(tag is None for tag in live_tags),
        "learned",
        len(live_tags),
    )


def why_not_ours(tags: Iterable[str | None], ours: OurClusters) -> str | None:
    """None when a segment whose objects carry ``tags`` (None: no name) is this store's,
    else why it is held. No tags at all (nothing could be read): the records decide."""
    for tag in sorted(set(tags), key=lambda t: (t is None, t or "")):
        if tag is None and not ours.untagged:
            named = ", ".join(sorted(ours.names)) or "none"
            return (
                "another cluster's segment (no pulsarClusterName, while this store's are "
                f"{named}); kept: list {UNTAGGED} in LEDGERGC_PULSAR_CLUSTER if nameless "
                "segments are this store's"
            )
        if tag is not None and tag not in ours.names:
            return f"another cluster's segment (pulsarClusterName={tag}); kept"
    return None


def cluster_label(tag: str | None) -> str:
    """A cluster name as the report counts it."""
    return UNTAGGED if tag is None else tag


def live_sample(data_keys: Sequence[str]) -> list[str]:
    """At most ``MAX_LIVE_SAMPLE`` keys, spread over the sorted keys (several managed
    ledgers and times, not the first few of one)."""
    ordered = sorted(set(data_keys))
    if len(ordered) <= MAX_LIVE_SAMPLE:
        return ordered
    step = len(ordered) / MAX_LIVE_SAMPLE
    return [ordered[int(i * step)] for i in range(MAX_LIVE_SAMPLE)]


def live_data_keys(
    objects: Iterable[StoredObject],
    snapshot: MetadataSnapshot,
    prefix: str,
    here: tuple[str, str] | None = None,
) -> list[str]:
    """The data keys of live segments among ``objects`` (what ``live_sample`` takes)."""
    owners = owners_by_ledger(snapshot)
    found = []
    for obj in objects:
        segment = offload_keys.parse_segment_key(prefix, obj.key)
        if segment is None or segment.is_index:
            continue
        if segment_class(owners.get(segment.ledger_id, []), segment.uuid, here) == LIVE_SEGMENT:
            found.append(obj.key)
    return sorted(found)


def other_cluster_sample(
    bucket: str, data_key: str, ml_name: str, ledger_id: int, size: int, reason: str
) -> dict[str, Any]:
    return {
        "prefix": segment_target(bucket, data_key),
        "target_class": OTHER_CLUSTER_SEGMENT,
        "ml_name": ml_name,
        "ledger_id": ledger_id,
        "bytes": size,
        "reason": reason,
    }


def add_orphan_or_other(
    result: DiffResult,
    candidate: Candidate,
    data_key: str,
    bucket: str,
    tags: Mapping[str, str | None],
    ours: OurClusters,
) -> None:
    """An orphan-looking segment into ``result``: a candidate, or, when its object names
    another cluster, that cluster's segment (counted apart, never a candidate)."""
    assert candidate.ledger_id is not None
    namespace = namespace_of_ml(candidate.ml_name)
    reason = why_not_ours([tags[data_key]], ours) if data_key in tags else None
    if reason is None:
        result.add(namespace, ORPHAN_SEGMENT, candidate.objects, candidate.bytes, 1)
        result.candidates.append(candidate)
        return
    result.add(namespace, OTHER_CLUSTER_SEGMENT, candidate.objects, candidate.bytes, 1)
    label = cluster_label(tags[data_key])
    result.other_clusters[label] = result.other_clusters.get(label, 0) + 1
    if len(result.other_cluster_samples) < MAX_OTHER_SAMPLES:
        result.other_cluster_samples.append(
            other_cluster_sample(
                bucket, data_key, candidate.ml_name, candidate.ledger_id, candidate.bytes, reason
            )
        )


def segment_class(owners: Iterable[Owner], uuid: str, here: tuple[str, str] | None = None) -> str:
    """``live-segment`` when a referencing ledger carries ``uuid`` and names this bucket
    (``here``; or names none), ``other-bucket-segment`` when the ledgers that carry it
    name only another driver or bucket (its copy is there: neither live here nor an
    orphan), else ``orphan-segment``."""
    carriers = [owner for owner in owners if owner.uuid == uuid]
    if any(is_here(owner.place, here) for owner in carriers):
        return LIVE_SEGMENT
    return OTHER_BUCKET_SEGMENT if carriers else ORPHAN_SEGMENT


def associated_ml(owners: Iterable[Owner]) -> str:
    """The managed ledger that references a ledger id (any uuid), "" when none does."""
    names = sorted({owner.ml_name for owner in owners})
    return names[0] if names else ""


def counted_by_ledger_scan(blocks: ObjectStore, offload: ObjectStore) -> str | None:
    """The key prefix of the offload bucket that the ledger scan lists too (None: none).

    The offload bucket may be the ledger bucket (same name at the same endpoint) with
    overlapping prefixes: an empty offload prefix covers the ledger prefix, an empty
    ledger prefix covers the offload prefix. Both scans then list the overlap, and the
    byte-fraction guard must count each object once: counted twice, the bytes would
    halve the orphan fraction of a misconfigured run. The overlap is still classified
    (a segment is a segment wherever it lies); only the totals leave it out."""
    if offload.bucket != blocks.bucket or offload.endpoint != blocks.endpoint:
        return None
    return blocks.key_prefix


def diff_segments(
    result: DiffResult,
    bucket: str,
    prefix: str,
    objects: Iterable[StoredObject],
    snapshot: MetadataSnapshot,
    *,
    max_foreign_samples: int = 50,
    counted_elsewhere: str | None = None,
    tags: Mapping[str, str | None] | None = None,
    configured: Sequence[str] = (),
    here: tuple[str, str] | None = None,
) -> None:
    """Classify the offload bucket's objects into ``result`` (the reference diff).

    ``counted_elsewhere``: keys under it are in the ledger scan's totals already
    (``counted_by_ledger_scan``). ``tags``: the cluster name read from a data object
    (None: it has none; absent: not read), for the live sample and the orphan-looking
    segments; ``configured``: ``LEDGERGC_PULSAR_CLUSTER``. ``here``: the configured
    store's (driver family, bucket); a GCS bucket's upload parts are orphans
    (``orphan-upload-part``), elsewhere such keys are foreign."""
    objects = list(objects)
    tags = tags or {}
    owners = owners_by_ledger(snapshot)
    parts = here is not None and has_upload_parts(here[0])
    sample = live_sample(live_data_keys(objects, snapshot, prefix, here))
    ours = our_clusters(configured, [tags[key] for key in sample if key in tags])
    result.our_clusters = ours
    per_segment: dict[tuple[str, int], list[int]] = {}
    for obj in objects:
        if counted_elsewhere is None or not obj.key.startswith(counted_elsewhere):
            result.objects += 1
            result.bytes += obj.size
        result.offload_objects += 1
        result.offload_bytes += obj.size
        segment = offload_keys.parse_segment_key(prefix, obj.key)
        if segment is None and parts and offload_keys.parse_upload_part(prefix, obj.key):
            add_upload_part(result, bucket, obj.key, obj.size, obj.last_modified)
            continue
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
        name = segment_class(mine, uuid, here)
        ml_name = associated_ml(mine)
        if name == OTHER_BUCKET_SEGMENT:
            data_key, _ = offload_keys.segment_keys(prefix, uuid, ledger_id)
            add_other_bucket(result, bucket, data_key, mine, uuid, count, size)
            continue
        if name != ORPHAN_SEGMENT:
            result.add(namespace_of_ml(ml_name), name, count, size, 1)
            continue
        data_key, _ = offload_keys.segment_keys(prefix, uuid, ledger_id)
        candidate = Candidate(
            ORPHAN_SEGMENT,
            ml_name,
            ledger_id,
            count,
            size,
            newest,
            oldest,
            segment=f"{bucket}/{data_key}",
        )
        add_orphan_or_other(result, candidate, data_key, bucket, tags, ours)


def has_upload_parts(family: str) -> bool:
    """Whether jclouds leaves multipart parts (``<uuid>_<8 digits>``) in a bucket of this
    driver family: on GCS only (it composes them there)."""
    return family == "gcs"


def add_upload_part(result: DiffResult, bucket: str, key: str, size: int, modified: int) -> None:
    """A GCS multipart leftover into ``result``: an orphan candidate (its age decides)."""
    result.add(NO_NAMESPACE, ORPHAN_UPLOAD_PART, 1, size, 1)
    result.candidates.append(
        Candidate(
            ORPHAN_UPLOAD_PART, "", None, 1, size, modified, modified, segment=f"{bucket}/{key}"
        )
    )


def add_other_bucket(
    result: DiffResult,
    bucket: str,
    data_key: str,
    owners: Iterable[Owner],
    uuid: str,
    count: int,
    size: int,
) -> None:
    """A segment whose ledger went to another driver or bucket: counted, a few listed."""
    carriers = sorted({(o.ml_name, o.place or "?") for o in owners if o.uuid == uuid})
    ml_name = carriers[0][0] if carriers else ""
    segment = offload_keys.parse_segment_key("", data_key.rpartition("/")[2])
    result.add(namespace_of_ml(ml_name), OTHER_BUCKET_SEGMENT, count, size, 1)
    if len(result.other_bucket_samples) < MAX_OTHER_SAMPLES:
        result.other_bucket_samples.append(
            {
                "prefix": segment_target(bucket, data_key),
                "target_class": OTHER_BUCKET_SEGMENT,
                "ml_name": ml_name,
                "ledger_id": segment.ledger_id if segment else None,
                "bytes": size,
                "reason": (
                    "its ledger was offloaded to "
                    f"{', '.join(place for _, place in carriers)} (driverMetadata), not to "
                    f"this bucket; neither live here nor an orphan: kept"
                ),
            }
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
    "CLUSTER_METADATA",
    "MAX_LIVE_SAMPLE",
    "SEGMENT_RE_JAVA",
    "UNTAGGED",
    "OurClusters",
    "Owner",
    "add_orphan_or_other",
    "add_other_bucket",
    "add_upload_part",
    "associated_ml",
    "carried",
    "counted_by_ledger_scan",
    "diff_segments",
    "has_upload_parts",
    "is_here",
    "live_data_keys",
    "live_sample",
    "offload_place",
    "our_clusters",
    "owners_by_ledger",
    "segment_class",
    "segment_of_target",
    "segment_target",
    "why_not_ours",
]
