"""What every object under the prefix is, against a metadata snapshot (pure).

The five classes (DESIGN.md "Orphans" and "S3 layout"):

* ``live``: a block of a ledger its managed ledger lists;
* ``marked``: a block of a ledger its managed ledger marks deletable. The trim owns these
  (PIP-129: marked, then deleted, then unmarked); orphan removal never touches them;
* ``orphan-ledger``: a block of a ledger whose managed ledger exists but neither lists nor
  marks that id. Ledger ids are store-wide unique (BookKeeper's idgen), so a ledger
  directory can only ever belong to the managed ledger whose directory it is in;
* ``orphan-partition``: a block under a managed-ledger directory whose znode does not
  exist (KIP-370's "orphan partition": a deleted topic's data);
* ``foreign``: any key that is not a block of the store (``keys.parse_key``). Reported,
  never deleted.

With tiered storage on (``LEDGERGC_OFFLOAD_BUCKET``), every object of the offload bucket
under ``LEDGERGC_OFFLOAD_PREFIX`` is one of three more classes (DESIGN.md "Tiered
storage"; ``segments.py`` has the rule and the reference diff):

* ``live-segment``: ``<uuid>-ledger-<id>[-index]`` where a listed or marked ledger of that
  id carries that uuid (an offload in progress, complete = false, included);
* ``orphan-segment``: any other ``<uuid>-ledger-<id>[-index]`` (a deleted topic's
  offloaded ledgers, a failed offload's previous uuid, a tiered delete that failed);
* ``offload-foreign``: anything else, the streaming offloader's ``<uuid>`` and
  ``<uuid>-index`` objects included. Reported, never deleted;
* ``other-cluster-segment``: a segment no ledger of ours carries whose objects name
  another Pulsar cluster (``pulsarClusterName``) than this store's: a bucket shared with
  another cluster, whose ledger ids collide with ours and whose metadata we cannot see.
  Reported, never registered or deleted, not an orphan for the byte-fraction guard
  (``segments.our_clusters``);
* ``other-bucket-segment``: a segment whose ledger is listed with its uuid, but offloaded
  (``offloadContext.driverMetadata``) to another driver or bucket than the configured
  one: its copy is there, this object is neither live here nor an orphan. Reported,
  never registered or deleted;
* ``orphan-upload-part``: in a GCS offload bucket, a part of a multipart upload
  (``<uuid>_<8 digits>``) that jclouds composes and deletes; a broker stopped mid-upload
  leaves them for good. An orphan under the three phases (retention keeps the parts of an
  upload still running).

The unit that orphan removal tracks and deletes is a *target*: a ledger directory for an
orphan ledger, a managed-ledger directory for an orphan partition. ``Candidate`` is one
target as one scan saw it (objects, bytes, newest object).

The Spark diff (``spark.diff.diff_blocks``) implements the same rules with Spark SQL over
millions of keys; ``diff_objects`` here is the reference it is tested against, and the
input of the property tests. The block-key regular expression is shared by both: the
Java and Python dialects differ only in the end anchor (Java's ``$`` also matches before
a final newline; ``\\z`` does not), and a test checks that both agree with ``parse_key``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledger_gc.rules.bookkeeper.classify import BK_TARGET_CLASSES
from ledger_gc.rules.bookkeeper.classify import TARGET_SCHEME as BK_TARGET_SCHEME
from ledger_gc.rules.pulsar_metadata.classes import PM_ORPHAN_CLASSES
from ledger_gc.rules.pulsar_metadata.classes import TARGET_SCHEME as PM_TARGET_SCHEME
from ledger_gc.rules.storage import keys

LIVE = "live"
MARKED = "marked"
ORPHAN_LEDGER = "orphan-ledger"
ORPHAN_PARTITION = "orphan-partition"
FOREIGN = "foreign"
LIVE_SEGMENT = "live-segment"
ORPHAN_SEGMENT = "orphan-segment"
OFFLOAD_FOREIGN = "offload-foreign"
OTHER_CLUSTER_SEGMENT = "other-cluster-segment"
OTHER_BUCKET_SEGMENT = "other-bucket-segment"
ORPHAN_UPLOAD_PART = "orphan-upload-part"
SEGMENT_CLASSES = (
    LIVE_SEGMENT,
    ORPHAN_SEGMENT,
    OFFLOAD_FOREIGN,
    OTHER_CLUSTER_SEGMENT,
    OTHER_BUCKET_SEGMENT,
    ORPHAN_UPLOAD_PART,
)
CLASSES = (LIVE, MARKED, ORPHAN_LEDGER, ORPHAN_PARTITION, FOREIGN, *SEGMENT_CLASSES)
ORPHAN_CLASSES = (ORPHAN_LEDGER, ORPHAN_PARTITION, ORPHAN_SEGMENT, ORPHAN_UPLOAD_PART)
#: The orphan classes of the offload bucket (target ``offload:<bucket>/<key>``).
OFFLOAD_ORPHAN_CLASSES = (ORPHAN_SEGMENT, ORPHAN_UPLOAD_PART)
#: Every class the registry tracks: the S3 and tiered-storage orphans, BookKeeper's
#: (``ledger_gc.rules.bookkeeper.classify``; their target is the ledger's metadata znode)
#: and Pulsar's own metadata's (``ledger_gc.rules.pulsar_metadata.classes``; their target
#: is a namespace's or tenant's leftover znodes in one store).
TARGET_CLASSES = (*ORPHAN_CLASSES, *BK_TARGET_CLASSES, *PM_ORPHAN_CLASSES)
#: A registry target of the offload bucket: ``offload:<bucket>/<data key>``.
SEGMENT_TARGET_SCHEME = "offload:"

#: The namespace label of a key that is not inside any ``tenant/ns/persistent/topic/``.
NO_NAMESPACE = "(none)"

# --- the block-key pattern, shared by Python and Spark (Java) --------------------------

# Name segments as keys.validate_ml_name accepts them (Pulsar's tenant/namespace rule, a
# URL-encoded topic), but not "." or ".." alone: the lookahead rejects a dot or two
# followed by "/" or the end (written "(?![^/])" because the two dialects spell "end"
# differently).
_NOT_DOTS = r"(?!\.\.?(?![^/]))"
_SEGMENT = rf"{_NOT_DOTS}{keys.NAMED_ENTITY_PATTERN}"
_TOPIC = rf"{_NOT_DOTS}{keys.ENCODED_TOPIC_PATTERN}"
_ML_NAME = rf"{_SEGMENT}/{_SEGMENT}/{keys.PERSISTENT_DOMAIN}/{_TOPIC}"
_ID = rf"[0-9]{{{keys.ID_WIDTH}}}"
_BLOCK_BODY = rf"^({_ML_NAME})/{keys.LEDGERS_DIR}/({_ID})/({_ID})\.blk"
#: Groups: 1 managed-ledger name, 2 ledger id, 3 first entry id (applied to the key with
#: the store prefix removed). Ids must also be <= keys.MAX_ID.
BLOCK_RE_PYTHON = _BLOCK_BODY + r"\Z"
BLOCK_RE_JAVA = _BLOCK_BODY + r"\z"
#: The block pattern in two halves, for the Spark diff: a key (prefix removed) is a block
#: iff it has exactly seven ``/``-separated segments, its first six match
#: ``LEDGER_DIR_RE_*`` and its last ``ENTRY_FILE_RE_*`` (no name segment holds a ``/``).
#: The diff checks the cheap last segment per key and the long pattern once per ledger
#: directory, about ten times fewer. ``test_orphan_classify`` checks the equivalence.
_LEDGER_DIR_BODY = rf"^({_ML_NAME})/{keys.LEDGERS_DIR}/({_ID})"
LEDGER_DIR_RE_PYTHON = _LEDGER_DIR_BODY + r"\Z"
LEDGER_DIR_RE_JAVA = _LEDGER_DIR_BODY + r"\z"
ENTRY_FILE_RE_PYTHON = rf"^{_ID}\.blk\Z"
ENTRY_FILE_RE_JAVA = rf"^{_ID}\.blk\z"
#: Group 1: the ``tenant/ns`` of a key inside a managed-ledger directory (foreign or not).
_NAMESPACE_BODY = rf"^({_SEGMENT}/{_SEGMENT})/{keys.PERSISTENT_DOMAIN}/{_TOPIC}"
NAMESPACE_RE_PYTHON = _NAMESPACE_BODY + r"(?:/|\Z)"
NAMESPACE_RE_JAVA = _NAMESPACE_BODY + r"(?:/|\z)"


def namespace_of_key(prefix: str, key: str) -> str:
    """``tenant/ns`` of a key inside a managed-ledger directory, else ``NO_NAMESPACE``."""
    parsed = keys.parse_key(prefix, key)
    if parsed.ml_name is None:
        return NO_NAMESPACE
    return keys.namespace_of(parsed.ml_name)


def namespace_of_ml(ml_name: str) -> str:
    tenant, _, rest = ml_name.partition("/")
    namespace = rest.partition("/")[0]
    return f"{tenant}/{namespace}" if namespace else NO_NAMESPACE


# --- the snapshot ----------------------------------------------------------------------


@dataclass(frozen=True)
class ManagedLedgerRefs:
    """The ledger ids one managed ledger references: listed, and marked deletable."""

    listed: frozenset[int] = frozenset()
    marked: frozenset[int] = frozenset()


@dataclass(frozen=True)
class MetadataSnapshot:
    """Every managed ledger of the store and the ledgers it references."""

    managed_ledgers: Mapping[str, ManagedLedgerRefs]
    # (managed ledger, ledger id) -> the offload uuids its listed LedgerInfo's
    # offloadContext or its marker's offloadUuid carry (segments.py); absent: none.
    offloads: Mapping[tuple[str, int], frozenset[str]] = field(default_factory=dict)
    # (managed ledger, ledger id, uuid) -> where that offload went, ``<family>/<bucket>``
    # from its ``driverMetadata`` (``segments.offload_place``); absent: not recorded.
    places: Mapping[tuple[str, int, str], str] = field(default_factory=dict)

    def class_of_block(self, ml_name: str, ledger_id: int) -> str:
        refs = self.managed_ledgers.get(ml_name)
        if refs is None:
            return ORPHAN_PARTITION
        if ledger_id in refs.listed:
            return LIVE
        if ledger_id in refs.marked:
            return MARKED
        return ORPHAN_LEDGER


def classify_key(prefix: str, key: str, snapshot: MetadataSnapshot) -> tuple[str, keys.ParsedKey]:
    """The class of one object key (``foreign`` for anything ``parse_key`` rejects)."""
    parsed = keys.parse_key(prefix, key)
    if not parsed.is_block:
        return FOREIGN, parsed
    assert parsed.ml_name is not None and parsed.ledger_id is not None
    return snapshot.class_of_block(parsed.ml_name, parsed.ledger_id), parsed


# --- candidates ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)  # (hundreds of thousands at once: no __dict__ each)
class Candidate:
    """One orphan target as a scan saw it: a ledger directory, or a managed-ledger one."""

    target_class: str
    ml_name: str
    ledger_id: int | None
    objects: int
    bytes: int
    newest_ms: int
    oldest_ms: int
    # The highest ledger id with a block in the target (an orphan ledger: its own id).
    # Compared with what the metadata knows (horizon.py): data newer than every ledger
    # the metadata can know of means the metadata is stale, not that the data is garbage.
    max_ledger_id: int | None = None
    # An orphan segment's ``<offload bucket>/<data key>`` (its index key is the data key
    # plus ``-index``); ``ml_name`` is then the managed ledger that references its
    # ledger id under another uuid, or "" when none does (a deleted topic).
    # A BookKeeper ledger's metadata znode (``ml_name``: its managed ledger or schema id).
    # A Pulsar-metadata leftover's ``<store>:<name>`` (``ml_name``: the tenant or
    # namespace; no ledger id).
    segment: str | None = None

    def __post_init__(self) -> None:
        if self.target_class not in TARGET_CLASSES:
            raise ValueError(f"{self.target_class!r} is not an orphan class")
        unnumbered = self.target_class in (ORPHAN_PARTITION, ORPHAN_UPLOAD_PART) or (
            self.pulsar_metadata
        )
        if unnumbered == (self.ledger_id is not None):
            raise ValueError(
                "an orphan ledger or segment has a ledger id, a partition or a Pulsar "
                "metadata leftover none"
            )
        named = (
            self.target_class in OFFLOAD_ORPHAN_CLASSES or self.bookkeeper or self.pulsar_metadata
        )
        if named != (self.segment is not None):
            raise ValueError(
                "an orphan segment or BookKeeper ledger, and only they, name their object"
            )
        if self.ledger_id is not None and self.max_ledger_id is None:
            object.__setattr__(self, "max_ledger_id", self.ledger_id)

    @property
    def namespace(self) -> str:
        return namespace_of_ml(self.ml_name)

    @property
    def bookkeeper(self) -> bool:
        """A BookKeeper ledger (its metadata znode is the target), not S3 data."""
        return self.target_class in BK_TARGET_CLASSES

    @property
    def pulsar_metadata(self) -> bool:
        """A leftover of Pulsar's own metadata (its znodes are the target)."""
        return self.target_class in PM_ORPHAN_CLASSES

    def prefix(self, store_prefix: str) -> str:
        """The target's key prefix: what the registry is keyed by and what is deleted."""
        if self.bookkeeper:
            return BK_TARGET_SCHEME + str(self.segment)
        if self.pulsar_metadata:
            return PM_TARGET_SCHEME + str(self.segment)
        if self.segment is not None:
            return SEGMENT_TARGET_SCHEME + self.segment
        if self.ledger_id is None:
            return keys.ml_dir(store_prefix, self.ml_name)
        return keys.ledger_dir(store_prefix, self.ml_name, self.ledger_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "target_class": self.target_class,
            "ml_name": self.ml_name,
            "ledger_id": self.ledger_id,
            "objects": self.objects,
            "bytes": self.bytes,
            "newest_ms": self.newest_ms,
            "oldest_ms": self.oldest_ms,
            "max_ledger_id": self.max_ledger_id,
            "segment": self.segment,
        }


def segment_target(bucket: str, data_key: str) -> str:
    """The registry prefix of an orphan segment (its data key in the offload bucket)."""
    return f"{SEGMENT_TARGET_SCHEME}{bucket}/{data_key}"


def parse_segment_target(prefix: str) -> tuple[str, str] | None:
    """(bucket, data key) of a segment target prefix, None for any other target."""
    if not prefix.startswith(SEGMENT_TARGET_SCHEME):
        return None
    bucket, sep, key = prefix[len(SEGMENT_TARGET_SCHEME) :].partition("/")
    return (bucket, key) if sep and bucket and key else None


@dataclass
class ClassTotals:
    """Objects, bytes and units (ledgers; partitions for orphan partitions) of a class."""

    objects: int = 0
    bytes: int = 0
    units: int = 0

    def add(self, objects: int, size: int, units: int) -> None:
        self.objects += objects
        self.bytes += size
        self.units += units

    def to_dict(self) -> dict[str, int]:
        return {"objects": self.objects, "bytes": self.bytes, "units": self.units}


@dataclass
class DiffResult:
    """What a diff found: totals per class and namespace, and the orphan candidates."""

    managed_ledgers: int
    objects: int = 0
    bytes: int = 0
    block_objects: int = 0
    # Segment objects (data or index) in the offload bucket, live or orphaned.
    segment_objects: int = 0
    offload_objects: int = 0
    offload_bytes: int = 0
    classes: dict[str, ClassTotals] = field(
        default_factory=lambda: {name: ClassTotals() for name in CLASSES}
    )
    namespaces: dict[str, dict[str, ClassTotals]] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    foreign_samples: list[dict[str, str]] = field(default_factory=list)
    # Tiered storage in a bucket shared with other Pulsar clusters (segments.py): the
    # clusters this store is (``segments.OurClusters``; None: no segment judged), the
    # other clusters' segments found per cluster name, and a few of them for the report.
    our_clusters: Any = None
    other_clusters: dict[str, int] = field(default_factory=dict)
    other_cluster_samples: list[dict[str, Any]] = field(default_factory=list)
    # Segments whose ledgers were offloaded to another driver or bucket (a few listed).
    other_bucket_samples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def orphan_bytes(self) -> int:
        return sum(self.classes[name].bytes for name in ORPHAN_CLASSES)

    @property
    def orphan_fraction(self) -> float:
        return self.orphan_bytes / self.bytes if self.bytes else 0.0

    def add(self, namespace: str, name: str, objects: int, size: int, units: int) -> None:
        self.classes[name].add(objects, size, units)
        per_ns = self.namespaces.setdefault(namespace, {c: ClassTotals() for c in CLASSES})
        per_ns[name].add(objects, size, units)

    def to_manifest(self) -> dict[str, Any]:
        """The JSON facts of ``diff.json`` (candidates go to Parquet beside it)."""
        return {
            "managed_ledgers": self.managed_ledgers,
            "objects": self.objects,
            "bytes": self.bytes,
            "block_objects": self.block_objects,
            "segment_objects": self.segment_objects,
            "offload_objects": self.offload_objects,
            "offload_bytes": self.offload_bytes,
            "orphan_bytes": self.orphan_bytes,
            "orphan_fraction": self.orphan_fraction,
            "candidates": len(self.candidates),
            "classes": {name: totals.to_dict() for name, totals in self.classes.items()},
            "namespaces": {
                ns: {name: totals.to_dict() for name, totals in per_ns.items()}
                for ns, per_ns in sorted(self.namespaces.items())
            },
            "foreign_samples": self.foreign_samples,
            "our_clusters": self.our_clusters.to_dict() if self.our_clusters else None,
            "other_clusters": dict(sorted(self.other_clusters.items())),
            "other_cluster_samples": self.other_cluster_samples,
            "other_bucket_samples": self.other_bucket_samples,
        }


@dataclass(frozen=True)
class StoredObject:
    """One object of the bucket as a listing or an inventory reports it."""

    key: str
    size: int
    last_modified: int  # epoch ms


def diff_objects(
    prefix: str,
    objects: Iterable[StoredObject],
    snapshot: MetadataSnapshot,
    *,
    max_foreign_samples: int = 50,
) -> DiffResult:
    """The reference diff: classify every object, aggregate per target and namespace."""
    result = DiffResult(managed_ledgers=len(snapshot.managed_ledgers))
    # (class, ml_name, ledger_id) -> [objects, bytes, newest, oldest]
    per_ledger: dict[tuple[str, str, int], list[int]] = {}
    for obj in objects:
        result.objects += 1
        result.bytes += obj.size
        name, parsed = classify_key(prefix, obj.key, snapshot)
        if name == FOREIGN:
            ns = keys.namespace_of(parsed.ml_name) if parsed.ml_name else NO_NAMESPACE
            result.add(ns, FOREIGN, 1, obj.size, 0)
            if len(result.foreign_samples) < max_foreign_samples:
                result.foreign_samples.append({"key": obj.key, "reason": parsed.reason or ""})
            continue
        result.block_objects += 1
        assert parsed.ml_name is not None and parsed.ledger_id is not None
        agg = per_ledger.setdefault((name, parsed.ml_name, parsed.ledger_id), [0, 0, 0, 2**63])
        agg[0] += 1
        agg[1] += obj.size
        agg[2] = max(agg[2], obj.last_modified)
        agg[3] = min(agg[3], obj.last_modified)
    partitions: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 2**63, 0])
    for (name, ml_name, ledger_id), (count, size, newest, oldest) in sorted(per_ledger.items()):
        ns = namespace_of_ml(ml_name)
        if name == ORPHAN_PARTITION:
            part = partitions[ml_name]
            part[0] += count
            part[1] += size
            part[2] = max(part[2], newest)
            part[3] = min(part[3], oldest)
            part[4] = max(part[4], ledger_id)
            continue
        result.add(ns, name, count, size, 1)
        if name == ORPHAN_LEDGER:
            result.candidates.append(
                Candidate(ORPHAN_LEDGER, ml_name, ledger_id, count, size, newest, oldest)
            )
    for ml_name, (count, size, newest, oldest, top) in sorted(partitions.items()):
        result.add(namespace_of_ml(ml_name), ORPHAN_PARTITION, count, size, 1)
        result.candidates.append(
            Candidate(ORPHAN_PARTITION, ml_name, None, count, size, newest, oldest, top)
        )
    return result
