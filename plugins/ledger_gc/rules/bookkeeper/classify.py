"""Every BookKeeper ledger against the Pulsar records that reference it (pure).

The classes (DESIGN.md "BookKeeper ledgers"); the orphan classes go through the three
phases, guards, live re-check and audit like every other orphan:

* ``bk-live``: some Pulsar record names the ledger's id (a managed ledger's list or
  deletable markers, a cursor's ``cursorsLedgerId``, the ``__compaction`` cursor's
  ``CompactedTopicLedger``, a delayed-delivery bucket property, a schema index);
* ``bk-offloaded-copy``: a listed ledger whose offload is complete with
  ``bookkeeperDeleted=true``: Pulsar reads it from tiered storage and meant to delete
  this copy. The only class judged by id, so the only one deleted in a shared BookKeeper;
  its offloaded objects are looked at before it goes, and while they cannot be confirmed
  it is held (``offloaded_copy``, ``HOLD_OFFLOAD_UNCONFIRMED``);
* ``bk-orphan-ledger``: its managed ledger exists and neither lists nor marks it;
* ``bk-orphan-partition``: its managed ledger is gone, in a namespace this metadata has;
* ``bk-orphan-cursor-ledger``: its cursor is gone, or names another (newer) ledger, or
  keeps its position in its znode (-1) and the ledger is older than its managed
  ledger's newest ledger (a close's leftover: ``_znode_cursor_class``);
* ``bk-orphan-schema-ledger``: no schema index names it (judged by the schema's locator,
  never by a managed ledger: a partitioned or non-persistent topic's schema has none);
* ``bk-orphan-compacted-ledger``: its topic is gone;
* ``bk-held``: looks unreferenced, but is not ours to judge (``HOLD_*``): a ledger newer
  than what the metadata knows (a rollover, cursor switch or topic creation in flight),
  a namespace this metadata does not have (another Pulsar cluster's, sharing this
  BookKeeper), a live topic's compacted ledger (its ZooKeeper property lags), a schema
  index that does not start at version 0, a declared shared BookKeeper;
* ``bk-foreign``: untagged (BookKeeper's own tools, Pulsar before 2.3.0, v1 records), a
  v1 topic's (``property/cluster/ns``) that no record names,
  another application's, another Pulsar component's (a delayed-delivery bucket's...).
  Reported, never deleted;
* ``bk-unreadable``: an empty or garbage record (Pulsar 13480: it stops BookKeeper's
  auditor, and the bookies never collect its ledger). Reported; with
  ``LEDGERGC_BK_REMOVE_UNREADABLE=true`` one whose id no Pulsar record names, older than
  the horizon, in a BookKeeper not declared shared, is ``removable``: a candidate under
  the three phases like the orphan classes (``BK_TARGET_CLASSES``).

Ids *handed off* by the Pulsar-metadata source (``handed_off``: a managed ledger, cursor
or schema of this cluster named them, and that source removed the record) are judged
like any other unreferenced ledger, as their tags say, except that neither the horizon
nor the unknown-namespace hold applies: this metadata named them, so they are neither
newer than it nor another cluster's. The shared-BookKeeper rules still apply. A
hand-off whose owner is not the one the ledger's tags name is not used.

Namespaces that source *removed* (``removed_namespaces``: it deleted leftover znodes of
them) were this cluster's: a ledger tagged with one of them that no record named (a
leak from before the removal, e.g. a trim whose delete failed) is not held as another
cluster's, but judged as its tags say (its managed ledger is gone: a partition,
cursor, schema or compacted orphan). Everything else applies to it as to any ledger:
the horizon (no record names it), the shared-BookKeeper rules, and the holds of a gone
topic that has an open ledger or still grows (someone writes that namespace again). A
namespace this metadata has again (re-created) is simply known.

Ledger ids come from one counter and only grow, so a ledger created after the Pulsar
records were read has an id above every id they reference (``store_high``): such a
ledger is held, whatever its tags say. A ledger created before and referenced after
the read is what the grace window and the live re-check are for.
"""

from __future__ import annotations

import copy
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, NamedTuple
from urllib.parse import quote_plus, unquote_plus

from ledger_gc.rules.bookkeeper import ledger_paths
from ledger_gc.rules.bookkeeper.by_name import ByName
from ledger_gc.rules.bookkeeper.ledger_index import GroupTable, LedgerIds, LedgerIndex
from ledger_gc.rules.bookkeeper.offloaded_copy import OffloadedCopy
from ledger_gc.rules.bookkeeper.records import CLOSED, OPEN

BK_LIVE = "bk-live"
BK_OFFLOADED_COPY = "bk-offloaded-copy"
BK_ORPHAN_LEDGER = "bk-orphan-ledger"
BK_ORPHAN_PARTITION = "bk-orphan-partition"
BK_ORPHAN_CURSOR_LEDGER = "bk-orphan-cursor-ledger"
BK_ORPHAN_SCHEMA_LEDGER = "bk-orphan-schema-ledger"
BK_ORPHAN_COMPACTED_LEDGER = "bk-orphan-compacted-ledger"
BK_HELD = "bk-held"
BK_FOREIGN = "bk-foreign"
BK_UNREADABLE = "bk-unreadable"

BK_ORPHAN_CLASSES = (
    BK_OFFLOADED_COPY,
    BK_ORPHAN_LEDGER,
    BK_ORPHAN_PARTITION,
    BK_ORPHAN_CURSOR_LEDGER,
    BK_ORPHAN_SCHEMA_LEDGER,
    BK_ORPHAN_COMPACTED_LEDGER,
)
BK_CLASSES = (BK_LIVE, *BK_ORPHAN_CLASSES, BK_HELD, BK_FOREIGN, BK_UNREADABLE)
#: What the BookKeeper source may register and delete: the orphan classes, and an
#: unreadable ledger that is ``removable`` (LEDGERGC_BK_REMOVE_UNREADABLE).
BK_TARGET_CLASSES = (*BK_ORPHAN_CLASSES, BK_UNREADABLE)
#: What an unreadable ledger record does to BookKeeper, for the report.
UNREADABLE_HARM = (
    "an empty or undecodable ledger record stops BookKeeper's auditor (Pulsar 13480), and "
    "the bookies never collect that ledger"
)
#: The classes of ledgers whose topic is gone from this metadata: judged by a topic name
#: that another Pulsar cluster sharing the BookKeeper may still write.
BK_TOPIC_GONE_CLASSES = (BK_ORPHAN_PARTITION, BK_ORPHAN_COMPACTED_LEDGER)
#: Classes judged by a Pulsar *name* (a topic, a cursor, a schema id), which another
#: Pulsar cluster sharing the BookKeeper may also use: never deleted when it is shared.
BK_NAME_JUDGED = tuple(c for c in BK_ORPHAN_CLASSES if c != BK_OFFLOADED_COPY)

#: What each class means, for the report, ``--json`` and the page.
EXPLANATIONS = {
    BK_LIVE: "a Pulsar record references it",
    BK_OFFLOADED_COPY: (
        "offloaded to tiered storage with bookkeeperDeleted=true: Pulsar meant to delete "
        "this BookKeeper copy (deleted only once both offloaded objects are found in "
        "LEDGERGC_OFFLOAD_BUCKET, the data object of the size the offload wrote)"
    ),
    BK_ORPHAN_LEDGER: "its managed ledger exists and neither lists nor marks it",
    BK_ORPHAN_PARTITION: "its managed ledger (topic) is gone, in a namespace this metadata has",
    BK_ORPHAN_CURSOR_LEDGER: (
        "its cursor is gone or uses a newer ledger, or keeps its position in its znode and "
        "this ledger is older than its topic's newest ledger"
    ),
    BK_ORPHAN_SCHEMA_LEDGER: "no schema index names it (judged by the schema's locator)",
    BK_ORPHAN_COMPACTED_LEDGER: "its compacted topic is gone",
    BK_HELD: "looks unreferenced, but is not ledger-gc's to judge (see each reason); kept",
    BK_FOREIGN: "not a Pulsar ledger ledger-gc judges (untagged, another application or "
    "component); never deleted",
    BK_UNREADABLE: (
        "its metadata record is empty or does not decode (it stops BookKeeper's auditor, "
        "Pulsar 13480); reported, or removed through the phases when no Pulsar record names "
        "it and LEDGERGC_BK_REMOVE_UNREADABLE=true"
    ),
}

#: A registry target of a BookKeeper ledger: ``bookkeeper:<its metadata znode>``.
TARGET_SCHEME = "bookkeeper:"


def target_of(znode: str) -> str:
    """The registry prefix of a BookKeeper ledger."""
    return TARGET_SCHEME + znode


def znode_of_target(prefix: str) -> str | None:
    """The znode a registry prefix names (None: not a BookKeeper target)."""
    return prefix[len(TARGET_SCHEME) :] if prefix.startswith(TARGET_SCHEME) else None


def ledger_id_of_target(prefix: str, root: str, layout: str) -> int | None:
    """The ledger a registry prefix names under ``root`` in ``layout`` (None: not a
    BookKeeper target, another root's, or no ledger's znode in this layout)."""
    znode = znode_of_target(prefix)
    base = root.rstrip("/") + "/"
    if znode is None or not znode.startswith(base):
        return None
    return ledger_paths.ledger_id_of(znode[len(base) :], layout)


# Why a ledger is held.
HOLD_NEWER = "newer-than-metadata"
HOLD_ROLLOVER = "rollover-in-flight"
HOLD_CURSOR_SWITCH = "cursor-switch-in-flight"
HOLD_OTHER_CLUSTER = "unknown-namespace"
HOLD_LIVE_COMPACTED = "live-topic-compacted-ledger"
HOLD_SCHEMA_INDEX = "schema-index-not-from-0"
HOLD_SHARED = "shared-bookkeeper"
HOLD_OFFLOAD_MISMATCH = "offloaded-copy-tag-mismatch"
HOLD_OFFLOAD_UNCONFIRMED = "offloaded-copy-unconfirmed"
HOLD_NAME_SPELLING = "topic-name-spelling"
HOLD_OPEN_WRITER = "gone-topic-with-open-ledger"
HOLD_GROWING_ELSEWHERE = "gone-topic-still-growing"  # across scans (BookKeeperSource.compare)

# Pulsar's tags (LedgerMetadataUtils, since Pulsar 2.3.0).
APPLICATION = "application"
PULSAR = "pulsar"
COMPONENT = "component"
MANAGED_LEDGER_COMPONENT = "managed-ledger"
SCHEMA_COMPONENT = "schema"
COMPACTED_COMPONENT = "compacted-ledger"
ML_NAME_TAG = "pulsar/managed-ledger"
CURSOR_TAG = "pulsar/cursor"
SCHEMA_ID_TAG = "pulsar/schemaId"
COMPACTED_TOPIC_TAG = "pulsar/compactedTopic"
PERSISTENT_SCHEME = "persistent://"
#: ``PulsarTags``' fields' tags, in its order.
_TAG_KEYS = (
    APPLICATION,
    COMPONENT,
    ML_NAME_TAG,
    CURSOR_TAG,
    SCHEMA_ID_TAG,
    COMPACTED_TOPIC_TAG,
)


class PulsarTags(NamedTuple):
    """A ledger's custom metadata as Pulsar's tags (None: absent or not UTF-8).

    A named tuple, not a frozen dataclass: a survey makes one a record where a topic's
    ledgers lie among every other's, and the dataclass's ``__init__`` (a
    ``object.__setattr__`` a field) was three times the tuple's. The record cache's
    rows keep these fields as they are decoded here (``record_cache.CACHE_FORMAT``):
    a change to the fields or to ``of`` is a new format there."""

    application: str | None = None
    component: str | None = None
    ml_name: str | None = None
    cursor: str | None = None
    schema_id: str | None = None
    compacted_topic: str | None = None

    @classmethod
    def of(cls, custom: Mapping[str, bytes]) -> PulsarTags:
        """From a ledger's custom metadata, each tag decoded once (a survey makes one a
        record where a topic's ledgers lie among every other topic's: 10,000,000 at
        10M; a closure a tag was a quarter of it)."""
        values: list[str | None] = []
        get = custom.get
        for key in _TAG_KEYS:
            raw = get(key)
            text = None
            if raw is not None:
                try:
                    text = (raw if type(raw) is bytes else bytes(raw)).decode("utf-8")
                except UnicodeDecodeError:
                    text = None  # (not UTF-8: as absent)
            values.append(text)
        return cls(*values)

    def owner(self) -> str:
        """The Pulsar name the ledger belongs to, for the registry and reports."""
        if self.component == SCHEMA_COMPONENT and self.schema_id:
            return self.schema_id
        if self.component == COMPACTED_COMPONENT and self.compacted_topic:
            return compacted_ml_name(self.compacted_topic) or self.compacted_topic
        return self.ml_name or ""


#: A ledger without Pulsar's tags (an unreadable record's).
NO_TAGS = PulsarTags()


def encode_local_name(name: str) -> str:
    """A topic's local name as Pulsar's managed-ledger name has it: Java's
    ``URLEncoder.encode(name, UTF-8)`` (``Codec.encode``), which keeps letters, digits
    and ``.-*_``, turns a space into ``+`` and every other byte into ``%XX``. (Python's
    ``quote_plus`` keeps ``~`` too; Java encodes it.)"""
    return quote_plus(name, safe=".-*_").replace("~", "%7E")


def topic_key(ml_name: str) -> tuple[str, str, str] | None:
    """(tenant, namespace, decoded local name): what names one topic however its local
    name was encoded. Two managed-ledger names with the same key are the same topic."""
    parts = ml_name.split("/")
    if len(parts) != 4 or parts[2] != "persistent":
        return None
    return parts[0], parts[1], unquote_plus(parts[3])


def compacted_ml_name(topic: str) -> str | None:
    """``persistent://t/ns/topic`` -> the managed ledger ``t/ns/persistent/<encoded>``.

    The tag holds the topic's plain name (``TwoPhaseCompactor``), the managed ledger its
    URL-encoded one (``TopicName.getPersistenceNamingEncoding``): ``orders eu`` is
    ``orders+eu``. A v1 name (``persistent://prop/cluster/ns/topic``) is not judged."""
    if not topic.startswith(PERSISTENT_SCHEME):
        return None
    parts = topic[len(PERSISTENT_SCHEME) :].split("/", 2)
    if len(parts) != 3 or not all(parts) or "/" in parts[2]:
        return None
    return f"{parts[0]}/{parts[1]}/persistent/{encode_local_name(parts[2])}"


def schema_ml_name(schema_id: str) -> str | None:
    """``t/ns/topic`` (a schema id: Pulsar's ``getSchemaName``, the partitioned topic's
    *encoded* local name) -> the managed-ledger name of that topic."""
    parts = schema_id.split("/", 2)
    if len(parts) != 3 or not all(parts) or "/" in parts[2]:
        return None
    return f"{parts[0]}/{parts[1]}/persistent/{parts[2]}"


#: Names whose form is kept (``lru_cache``): a survey asks the same few thousand topics'
#: names about every one of their ledgers (a tenth of a cached ledger's time).
_NAMES_CACHED = 1 << 16


@lru_cache(maxsize=_NAMES_CACHED)
def is_topic_ml_name(name: str) -> bool:
    """A managed-ledger name of today's form, ``tenant/ns/persistent/<encoded topic>``.

    A v1 name (``prop/cluster/ns/persistent/topic``) is not: its managed ledgers are not
    where ledger-gc reads them, so its ledgers could not be told from leaks."""
    parts = name.split("/")
    return len(parts) == 4 and all(parts) and parts[2] == "persistent"


def is_v1_ml_name(name: str) -> bool:
    """A v1 managed-ledger name, ``property/cluster/ns/persistent/<encoded topic>``."""
    parts = name.split("/")
    return len(parts) == 5 and all(parts) and parts[3] == "persistent"


@lru_cache(maxsize=_NAMES_CACHED)
def namespace_of(name: str) -> str | None:
    """``tenant/ns`` of a managed-ledger name or a schema id."""
    parts = name.split("/")
    return f"{parts[0]}/{parts[1]}" if len(parts) >= 3 and parts[0] and parts[1] else None


class BkLedger(NamedTuple):
    """One ledger as the scan read it: its znode and what its record says.

    A named tuple, as ``PulsarTags``: a survey makes one a ledger, ten million at 10M,
    and the frozen dataclass's ``__init__`` cost 1.2 us of each, the tuple's 0.3."""

    ledger_id: int
    version: int  # the znode's data version when read
    ctime_ms: int  # the later of the record's ctime (a broker's clock) and the znode's
    state: str | None = None  # OPEN | IN_RECOVERY | CLOSED; None: unreadable
    length: int = 0
    format_version: int | None = None
    tags: PulsarTags = NO_TAGS
    error: str | None = None  # why the record did not decode

    @property
    def bytes(self) -> int:
        """The bytes a delete frees: the record's length once CLOSED (unknown before)."""
        return self.length if self.state == CLOSED and self.length > 0 else 0


@dataclass(frozen=True)
class SchemaIndex:
    """A schema locator (``/schemas/<tenant>/<ns>/<topic>``): the ledgers it names."""

    ledger_ids: frozenset[int]
    lowest_version: int | None  # None: an empty index
    unreadable: str | None = None  # why the locator did not decode (its ledgers are held)


#: Each kind of record that names ledgers, and its label (``reference_groups``): a
#: managed ledger's name, a (managed ledger, cursor) pair or a schema id fills it.
LISTED_BY, MARKED_BY, CURSOR_OF, COMPACTED_OF, BUCKETS, SCHEMA_OF = range(6)
REFERENCE_LABELS = (
    "listed by {}",
    "marked deletable by {}",
    "ledger of cursor {1} of {0}",
    "compacted ledger of {}",
    "a delayed-delivery bucket snapshot",
    "schema of {}",
)


@dataclass(frozen=True)
class PulsarReferences:
    """What the Pulsar metadata says about BookKeeper ledgers, read before the BK scan."""

    # managed ledger -> its listed and marked ledger ids
    # (a frozenset, or as read from ZooKeeper a ``LedgerIds``: 8 bytes an id)
    listed: Mapping[str, AbstractSet[int]]
    marked: Mapping[str, AbstractSet[int]] = field(default_factory=dict)
    # listed ledger id -> its managed ledger, for offloads complete with bookkeeperDeleted
    offloaded_deleted: Mapping[int, str] = field(default_factory=dict)
    # those ledgers' offloaded copies: uuid, driver, bucket (checked before a delete)
    offload_copies: Mapping[int, OffloadedCopy] = field(default_factory=dict)
    # (managed ledger, cursor) -> its cursorsLedgerId (-1: the position is in the znode)
    cursors: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # managed ledger -> the compacted ledger id of its __compaction cursor's property
    compacted: Mapping[str, int] = field(default_factory=dict)
    # ledger ids of delayed-delivery bucket snapshots named in cursor properties
    buckets: frozenset[int] = frozenset()
    schemas: Mapping[str, SchemaIndex] = field(default_factory=dict)
    # the namespaces this metadata's managed ledgers are read by: v2 tenant/ns and v1
    # property/cluster/ns (rules/metadata/namespaces.py)
    namespaces: frozenset[str] = frozenset()
    # tenant/ns holding a schema locator (/schemas/<t>/<ns>): a namespace of
    # non-persistent topics has schemas and no managed ledger
    schema_namespaces: frozenset[str] = frozenset()

    def reference_groups(self) -> Iterator[tuple[str, Iterable[int]]]:
        """Each record that names ledgers, as (which record, the ids it names), in the
        order ``referenced`` takes them (the first found names an id)."""
        table = self.reference_table()
        for at in range(len(table)):
            yield table.label(at), table.ids(at)

    def reference_table(self) -> GroupTable:
        """``reference_groups`` as a ``GroupTable``: each record's label made only when
        asked (``REFERENCE_LABELS``)."""
        return GroupTable(self._reference_keys(), REFERENCE_LABELS)

    def _reference_keys(self) -> Iterator[tuple[int, Any, Iterable[int] | int]]:
        for name, ids in self.listed.items():
            yield LISTED_BY, name, ids
        for name, ids in self.marked.items():
            yield MARKED_BY, name, ids
        for key, lid in self.cursors.items():
            if lid >= 0:
                yield CURSOR_OF, key, lid
        for name, lid in self.compacted.items():
            yield COMPACTED_OF, name, lid
        yield BUCKETS, (), sorted(self.buckets)
        for schema_id, index in self.schemas.items():
            yield SCHEMA_OF, schema_id, index.ledger_ids

    def referenced(self) -> dict[int, str]:
        """Every ledger id some record names -> which record (the first found). (The
        classifier keeps the same in a ``LedgerIndex``: a dict is 200 bytes a ledger.)"""
        found: dict[int, str] = {}
        for label, ids in self.reference_groups():
            for lid in ids:
                found.setdefault(lid, label)
        return found

    def high(self) -> int | None:
        """The highest ledger id any record names: ledgers above it are newer than the
        metadata read (ids only grow). (Each record's highest: no index of them all.)"""
        return max(
            (high for _, _, ids in self._reference_keys() if (high := _highest(ids)) is not None),
            default=None,
        )

    def ml_high(self, name: str) -> int | None:
        highs = [_highest(ids) for ids in (self.listed.get(name, ()), self.marked.get(name, ()))]
        return max((high for high in highs if high is not None), default=None)


class HighestIds(Mapping[str, "int | None"]):
    """Each managed ledger's highest listed or marked id, as its references answer it."""

    __slots__ = ("_refs",)

    def __init__(self, refs: PulsarReferences) -> None:
        self._refs = refs

    def __getitem__(self, name: str) -> int | None:
        if name not in self._refs.listed:
            raise KeyError(name)
        return self._refs.ml_high(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._refs.listed)

    def __len__(self) -> int:
        return len(self._refs.listed)


@dataclass(frozen=True)
class HandedOff:
    """Who named a handed-off ledger before the Pulsar-metadata source removed it: its
    owner (managed ledger or schema id) and the znode that named it."""

    owner: str
    named_by: str


@dataclass(frozen=True)
class Verdict:
    """A ledger's class, whose it is (managed ledger or schema id), and why."""

    ledger_class: str
    owner: str
    reason: str
    hold: str | None = None  # HOLD_* for bk-held
    # a bk-unreadable ledger that goes through the phases (LEDGERGC_BK_REMOVE_UNREADABLE)
    removable: bool = False

    @property
    def candidate(self) -> bool:
        """Whether the ledger is registered (and, after the phases, deleted)."""
        return self.ledger_class in BK_ORPHAN_CLASSES or self.removable

    def to_dict(self) -> dict[str, Any]:
        return {
            "class": self.ledger_class,
            "owner": self.owner,
            "reason": self.reason,
            "hold": self.hold,
        }


@dataclass(frozen=True)
class PartCut:
    """One part's own share of a classifier (``Classifier.cuts``): what is per ledger,
    cut to the part's ranges."""

    referenced: LedgerIndex
    owner_of: LedgerIndex
    handed_off: Mapping[int, HandedOff]
    offloaded_deleted: Mapping[int, str]


class Classifier:
    """``classify`` with the references' indexes built once (a million ledgers)."""

    def __init__(
        self,
        refs: PulsarReferences,
        *,
        shared: bool = False,
        horizon: bool = True,
        handed_off: Mapping[int, HandedOff] | None = None,
        remove_unreadable: bool = False,
        removed_namespaces: Iterable[str] = (),
    ) -> None:
        """``horizon=False``: ``refs`` holds only the records of one owner (the live
        re-check), so the highest id they name says nothing about what is new.
        ``handed_off``: ledger ids the Pulsar-metadata source removed the records of.
        ``remove_unreadable``: LEDGERGC_BK_REMOVE_UNREADABLE.
        ``removed_namespaces``: namespaces that source removed leftover znodes of."""
        self.refs = refs
        self.shared = shared
        self.horizon = horizon
        self.handed_off = handed_off or {}
        self.removed_namespaces = frozenset(removed_namespaces)
        self.remove_unreadable = remove_unreadable
        # ledger id -> which record names it; listed id -> its managed ledger (the
        # survey's root-mismatch evidence): 12 bytes a ledger each (``ledger_index``),
        # built when first asked (``referenced``, ``owner_of``): a survey on Spark only
        # builds each task's part of them (``within``), never the whole cluster's.
        self._referenced: LedgerIndex | None = None
        self._owner_of: LedgerIndex | None = None
        self.high = refs.high()
        # (asked of the references: a dict of them was 8 MB at 100,000 topics; only
        # ``common``, whose references carry no ids, keeps one)
        self.ml_high: Mapping[str, int | None] = HighestIds(refs)
        # A schema ledger's namespace is known by its managed ledgers or its schemas.
        self.schema_namespaces = refs.namespaces | refs.schema_namespaces
        # (the references' own: a copy of 100,000 cursors went with every classifier)
        self.cursor_ids = refs.cursors
        self._topic_keys: frozenset[tuple[str, str, str]] | None = None
        # A schema locator that does not decode names ledgers no one can read off it.
        self.unreadable_locator = next(
            (
                f"schema locator {schema_id} does not decode ({index.unreadable})"
                for schema_id, index in sorted(refs.schemas.items())
                if index.unreadable is not None
            ),
            None,
        )

    @property
    def topic_keys(self) -> frozenset[tuple[str, str, str]]:
        """Every managed ledger's ``topic_key``, made when first asked: only a ledger
        of a topic this metadata lacks asks (15 MB at 100,000 topics, which neither the
        driver of a survey on Spark nor the broadcast to its executors carries)."""
        if self._topic_keys is None:
            self._topic_keys = frozenset(
                key for name in self.refs.listed if (key := topic_key(name))
            )
        return self._topic_keys

    @property
    def referenced(self) -> LedgerIndex:
        """Ledger id -> which record names it (the first found)."""
        if self._referenced is None:
            self._referenced = LedgerIndex.build(self.refs.reference_groups())
        return self._referenced

    @property
    def owner_of(self) -> LedgerIndex:
        """Listed ledger id -> its managed ledger (an id two managed ledgers list: the
        last one's, as a dict of them all had it)."""
        if self._owner_of is None:
            self._owner_of = LedgerIndex.build(self._owner_groups())
        return self._owner_of

    def _owner_groups(self) -> Iterator[tuple[str, Iterable[int]]]:
        """Each managed ledger and its listed ids, the last first (of two that list an
        id, the last's); its name, no copy of the references' items."""
        listed = self.refs.listed
        return ((name, listed[name]) for name in reversed(list(listed)))

    def within(self, ranges: Iterable[tuple[int, int]]) -> Classifier:
        """This classifier for ledgers in ``ranges`` (``(low, high)``: ``low <= id <
        high``) only: its per-ledger indexes cut to them, the managed ledgers' listed
        ids left out (their names, highest ids and the horizon stay whole). What a
        Spark task classifying some directories is sent: bounded by its part of the
        cluster, not by the cluster. Indexes not built yet are built for the ranges
        alone, from the references (the driver of a survey on Spark never holds the
        whole cluster's)."""
        return next(self.parts([ranges]))

    def parts(self, ranges: Sequence[Iterable[tuple[int, int]]]) -> Iterator[Classifier]:
        """``within`` each of several parts' ranges, in turn (one a Spark task): the
        classifier common to all with each part's cut (``common``, ``cuts``,
        ``with_cut``)."""
        common = self.common()
        for cut in self.cuts(ranges):
            yield common.with_cut(cut)

    def common(self) -> Classifier:
        """What every part's classifier has whole, and nothing per ledger: the managed
        ledgers' names (not their listed ids), their highest ids, the cursors, schemas
        and namespaces. Sent once to every executor (a Spark broadcast), not with each
        task: at 100,000 topics, 16 MB pickled, which forty tasks each carried. Its
        per-topic maps are views of the references' own (``ByName``), which an
        executor unpickles into dicts: the driver makes no copy of them."""
        part = copy.copy(self)
        part._referenced = part._owner_of = part._topic_keys = None
        part.ml_high = ByName(self.ml_high)
        part.handed_off = {}
        part.refs = replace(
            self.refs,
            listed=ByName(self.refs.listed, same=LedgerIds()),
            marked={},
            offloaded_deleted={},
            offload_copies={},
            cursors=ByName(self.refs.cursors, pairs=True),
        )
        part.cursor_ids = part.refs.cursors
        return part

    def cuts(self, ranges: Sequence[Iterable[tuple[int, int]]]) -> Iterator[PartCut]:
        """Each part's own: the per-ledger indexes and maps cut to its ranges, made
        from the references a part at a time, numpy reading the records' ids
        (``GroupTable.index_pairs``)."""
        merged = [_merged(mine) for mine in ranges]
        pairs: Iterator[tuple[LedgerIndex, LedgerIndex]]
        if self._referenced is not None and self._owner_of is not None:
            whole, owners = self._referenced, self._owner_of
            pairs = ((whole.within(spans), owners.within(spans)) for spans in merged)
        else:
            # (the owners are the listed ids' last listers: one pick of the references
            # makes both, each topic's ids read once a pass, from the spill)
            pairs = self.refs.reference_table().index_pairs(merged, owner_kind=LISTED_BY)
        # (no name here, nor a ``zip``'s kept tuple, holds a part's indexes while the
        # next part's are made: two parts' at the driver's peak)
        for spans in merged:
            yield self._cut(spans, *next(pairs))

    def _cut(
        self, spans: list[tuple[int, int]], referenced: LedgerIndex, owners: LedgerIndex
    ) -> PartCut:
        return PartCut(
            referenced,
            owners,
            {lid: h for lid, h in self.handed_off.items() if _in(lid, spans)},
            {lid: n for lid, n in self.refs.offloaded_deleted.items() if _in(lid, spans)},
        )

    def with_cut(self, cut: PartCut) -> Classifier:
        """This (``common``) classifier for one part's ledgers."""
        part = copy.copy(self)
        part._referenced, part._owner_of = cut.referenced, cut.owner_of
        part.handed_off = cut.handed_off
        part.refs = replace(self.refs, offloaded_deleted=cut.offloaded_deleted)
        return part

    def classify(self, ledger: BkLedger) -> Verdict:
        lid = ledger.ledger_id
        tags = ledger.tags
        owner = tags.owner()
        if ledger.error is not None or ledger.state is None:
            return self._unreadable(lid, owner, ledger.error or "no record")
        why_foreign = _why_foreign(tags)
        if why_foreign is not None:
            if lid in self.referenced:
                return Verdict(BK_LIVE, owner, self.referenced[lid])
            return Verdict(BK_FOREIGN, owner, why_foreign)
        copy_of = self.refs.offloaded_deleted.get(lid)
        if copy_of is not None:
            if tags.component == MANAGED_LEDGER_COMPONENT and tags.ml_name == copy_of:
                return Verdict(
                    BK_OFFLOADED_COPY,
                    copy_of,
                    f"listed by {copy_of} as offloaded (complete, bookkeeperDeleted=true)",
                )
            return self._held(
                owner,
                HOLD_OFFLOAD_MISMATCH,
                f"{copy_of} lists it as offloaded with bookkeeperDeleted=true, but its tags "
                f"name {owner or 'nothing'}",
            )
        named_by = self.referenced.get(lid)  # (one lookup: every ledger comes here)
        if named_by is not None:
            return Verdict(BK_LIVE, owner, named_by)
        return self._unreferenced(ledger, owner)

    def _unreadable(self, lid: int, owner: str, error: str) -> Verdict:
        """An empty or undecodable record: removable only when asked, unnamed by any
        Pulsar record, not newer than the records read, and not in a shared BookKeeper
        (whose other clusters' records ledger-gc does not read), nor while a schema
        locator does not decode (it names ledgers unknown, and an unreadable record has
        no tags to tell whether it is one of them)."""
        if lid in self.referenced:
            why = f"{self.referenced[lid]}: never deleted"
        elif not self.remove_unreadable:
            why = f"{UNREADABLE_HARM}; LEDGERGC_BK_REMOVE_UNREADABLE=true would remove it"
        elif self.shared:
            why = "LEDGERGC_BK_SHARED=true: another cluster's records may name it; kept"
        elif self.unreadable_locator is not None:
            why = f"{self.unreadable_locator}: it may name this ledger; kept"
        elif self.horizon and (self.high is None or lid > self.high):
            why = "newer than every ledger the Pulsar metadata read names; judged later"
        else:
            return Verdict(
                BK_UNREADABLE,
                owner,
                f"{error}; no Pulsar record names it (LEDGERGC_BK_REMOVE_UNREADABLE=true)",
                removable=True,
            )
        return Verdict(BK_UNREADABLE, owner, f"{error}; {why}")

    def _held(self, owner: str, hold: str, reason: str) -> Verdict:
        return Verdict(BK_HELD, owner, reason, hold)

    def _unreferenced(self, ledger: BkLedger, owner: str) -> Verdict:
        """A Pulsar ledger no record names: which orphan class, or why it is held."""
        lid = ledger.ledger_id
        tags = ledger.tags
        handed = self.handed_off.get(lid)
        if handed is not None and not _same_owner(tags, handed.owner):
            handed = None  # not the ledger that record named: judged as any other
        if handed is None and self.horizon and (self.high is None or lid > self.high):
            known = "no ledger" if self.high is None else f"ledgers only up to {self.high}"
            return self._held(
                owner,
                HOLD_NEWER,
                f"newer than every ledger the Pulsar metadata read names ({known}): created "
                "since, and not yet referenced; judged by a later cycle",
            )
        ml_name = ml_of(tags)
        namespace = namespace_of(owner) if owner else None
        if ml_name is None and is_v1_ml_name(owner):
            return Verdict(
                BK_FOREIGN,
                owner,
                "a v1 topic's (property/cluster/namespace) ledger that no record names: "
                "ledger-gc does not judge v1 names",
            )
        if ml_name is None or namespace is None:
            return Verdict(BK_FOREIGN, owner, "Pulsar tags without a valid topic or schema name")
        schema = tags.component == SCHEMA_COMPONENT
        namespaces = self.schema_namespaces if schema else self.refs.namespaces
        # Not in this metadata, and not named by a record that was: another cluster's,
        # unless this cluster's Pulsar-metadata source removed that namespace.
        unknown = handed is None and namespace not in namespaces
        if unknown and namespace not in self.removed_namespaces:
            return self._held(
                owner,
                HOLD_OTHER_CLUSTER,
                f"namespace {namespace} is not in this metadata: another Pulsar cluster "
                "sharing this BookKeeper may own it",
            )
        verdict = self._orphan_class(ledger, ml_name)
        if handed is not None and verdict.ledger_class in BK_ORPHAN_CLASSES:
            verdict = Verdict(
                verdict.ledger_class,
                verdict.owner,
                f"{verdict.reason}; named by {handed.named_by} until the Pulsar-metadata "
                "source removed it",
            )
        elif unknown and verdict.ledger_class in BK_ORPHAN_CLASSES:
            verdict = Verdict(
                verdict.ledger_class,
                verdict.owner,
                f"{verdict.reason}; namespace {namespace} was this cluster's (its "
                "Pulsar-metadata source removed its leftover znodes)",
            )
        if verdict.ledger_class in BK_NAME_JUDGED and self.shared:
            return self._held(
                owner,
                HOLD_SHARED,
                f"{EXPLANATIONS[verdict.ledger_class]}, but LEDGERGC_BK_SHARED=true: another "
                "cluster may use the same name",
            )
        return verdict

    def _orphan_class(self, ledger: BkLedger, ml_name: str) -> Verdict:
        lid = ledger.ledger_id
        tags = ledger.tags
        if tags.component == SCHEMA_COMPONENT:
            assert tags.schema_id is not None
            return self._schema_class(tags.schema_id)
        exists = ml_name in self.refs.listed
        if not exists and topic_key(ml_name) in self.topic_keys:
            # The same topic under another spelling of its name (an encoding ledger-gc
            # does not reproduce exactly): never judged gone.
            return self._held(
                ml_name,
                HOLD_NAME_SPELLING,
                f"{ml_name} is not a managed ledger by that spelling, but a managed ledger "
                "of the same topic name exists",
            )
        if tags.component == COMPACTED_COMPONENT:
            if exists:
                return self._held(
                    ml_name,
                    HOLD_LIVE_COMPACTED,
                    f"compacted ledger of live topic {ml_name}: the __compaction cursor's "
                    "ZooKeeper copy may lag the broker's, so it is never judged",
                )
            return Verdict(BK_ORPHAN_COMPACTED_LEDGER, ml_name, f"topic {ml_name} is gone")
        if tags.cursor is not None:
            current = self.cursor_ids.get((ml_name, tags.cursor))
            if current is None:
                gone = "its managed ledger is gone" if not exists else "the cursor is gone"
                return Verdict(BK_ORPHAN_CURSOR_LEDGER, ml_name, f"cursor {tags.cursor}: {gone}")
            if current < 0:
                return self._znode_cursor_class(lid, ml_name, tags.cursor)
            if current < lid:
                return self._held(
                    ml_name,
                    HOLD_CURSOR_SWITCH,
                    f"newer than cursor {tags.cursor}'s ledger {current}: a cursor-ledger "
                    "switch in flight",
                )
            return Verdict(
                BK_ORPHAN_CURSOR_LEDGER, ml_name, f"cursor {tags.cursor} uses ledger {current} now"
            )
        if not exists:
            return Verdict(BK_ORPHAN_PARTITION, ml_name, f"managed ledger {ml_name} is gone")
        high = self.ml_high.get(ml_name)
        if high is None or lid > high:
            state = "open " if ledger.state == OPEN else ""
            return self._held(
                ml_name,
                HOLD_ROLLOVER,
                f"an {state}ledger newer than {ml_name}'s last listed ledger "
                f"({high if high is not None else 'none'}): a rollover in flight",
            )
        return Verdict(
            BK_ORPHAN_LEDGER, ml_name, f"{ml_name} exists and neither lists nor marks it"
        )

    def _schema_class(self, schema_id: str) -> Verdict:
        """A schema ledger no index names, judged by its schema's locator alone: a
        partitioned topic's schema is kept under its base name and a non-persistent
        topic's too, and neither has a managed ledger (``TopicName.getSchemaName``)."""
        index = self.refs.schemas.get(schema_id)
        if index is not None and index.unreadable is not None:
            return self._held(
                schema_id,
                HOLD_SCHEMA_INDEX,
                f"the schema index of {schema_id} does not decode "
                f"({index.unreadable}): which ledgers it names is unknown",
            )
        if index is not None and index.lowest_version not in (None, 0):
            return self._held(
                schema_id,
                HOLD_SCHEMA_INDEX,
                f"the schema index of {schema_id} starts at version "
                f"{index.lowest_version}, not 0: it may not name every ledger it uses",
            )
        where = "no schema index" if index is None else "its schema index does not name it"
        return Verdict(BK_ORPHAN_SCHEMA_LEDGER, schema_id, where)

    def _znode_cursor_class(self, lid: int, ml_name: str, cursor: str) -> Verdict:
        """A ledger of a cursor whose position is in its znode (``cursorsLedgerId`` -1).

        Pulsar's ManagedCursorImpl goes to -1 on a close (it writes the position into
        the znode, then deletes its cursor ledger; a failed delete leaves that ledger),
        and leaves -1 by creating a new cursor ledger and only then writing its id
        (``switchToNewLedger``): in between, the new ledger is a switch in flight. A
        topic reopened after the close first creates a new managed-ledger ledger, and a
        cursor ledger only after it: so a cursor ledger older than the managed ledger's
        newest ledger predates the reopening and was left by the close; a newer one may
        be the switch (or a close's leftover while the topic stays unloaded: held until
        a reopening rolls the managed ledger past it)."""
        high = self.ml_high.get(ml_name)
        if high is None or lid > high:
            newest = "none" if high is None else str(high)
            return self._held(
                ml_name,
                HOLD_CURSOR_SWITCH,
                f"cursor {cursor} keeps its position in its znode (-1), and this ledger is "
                f"newer than the newest ledger of {ml_name} ({newest}): it may be the "
                "cursor's first ledger, a switch in flight",
            )
        return Verdict(
            BK_ORPHAN_CURSOR_LEDGER,
            ml_name,
            f"cursor {cursor} keeps its position in its znode (-1, as a close leaves it), and "
            f"this ledger is older than the newest ledger of {ml_name} ({high}): left by a "
            "close",
        )

    def gone_topic(self, tags: PulsarTags) -> str | None:
        """The topic name a ledger counts toward as one this metadata lacks (the
        shared-BookKeeper rule, ``bookkeeper.source.live_elsewhere``), None when it has
        it. A schema is judged by its locator: one whose locator exists is this
        cluster's, whether or not a managed ledger has the name (a partitioned or a
        non-persistent topic's schema never has one)."""
        name = ml_of(tags)
        if name is None or name in self.refs.listed:
            return None
        if tags.component == SCHEMA_COMPONENT and tags.schema_id in self.refs.schemas:
            return None
        return name


def _highest(ids: Iterable[int] | int) -> int | None:
    if isinstance(ids, int):
        return ids
    return ids.high if isinstance(ids, LedgerIds) else max(ids, default=None)


def _merged(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Ranges sorted, those that overlap or touch merged."""
    spans: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if spans and low <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], high))
        else:
            spans.append((low, high))
    return spans


def _in(ledger_id: int, spans: list[tuple[int, int]]) -> bool:
    at = bisect_right(spans, (ledger_id, _ABOVE_EVERY_ID)) - 1
    return at >= 0 and spans[at][0] <= ledger_id < spans[at][1]


_ABOVE_EVERY_ID = 2**63


def _same_owner(tags: PulsarTags, owner: str) -> bool:
    """Whether a ledger's tags name ``owner`` (a hand-off's managed ledger or schema id),
    by that spelling or as the same topic."""
    if tags.owner() == owner:
        return True
    mine = ml_of(tags)
    key = topic_key(mine) if mine else None
    return key is not None and key == topic_key(owner)


def _why_foreign(tags: PulsarTags) -> str | None:
    """None for a ledger of a Pulsar component ledger-gc judges, else why not."""
    if tags.application is None:
        return "untagged (no application in its custom metadata)"
    if tags.application != PULSAR:
        return f"another application's ({tags.application})"
    if tags.component == MANAGED_LEDGER_COMPONENT:
        return None if tags.ml_name else "a managed-ledger ledger without pulsar/managed-ledger"
    if tags.component == SCHEMA_COMPONENT:
        return None if tags.schema_id else "a schema ledger without pulsar/schemaId"
    if tags.component == COMPACTED_COMPONENT:
        return None if tags.compacted_topic else "a compacted ledger without its topic"
    return f"Pulsar component {tags.component or '(none)'}, which ledger-gc does not judge"


def ml_of(tags: PulsarTags) -> str | None:
    """The managed ledger (topic) a tagged ledger belongs to."""
    if tags.component == SCHEMA_COMPONENT:
        return schema_ml_name(tags.schema_id or "")
    if tags.component == COMPACTED_COMPONENT:
        return compacted_ml_name(tags.compacted_topic or "")
    name = tags.ml_name or ""
    return name if is_topic_ml_name(name) else None


def topic_of(ledger_class: str, owner: str) -> str:
    """The topic (managed ledger) a classified ledger belongs to: a schema ledger's
    owner is its schema id (``t/ns/topic``), every other's its managed ledger."""
    if ledger_class == BK_ORPHAN_SCHEMA_LEDGER:
        return schema_ml_name(owner) or owner
    return owner


def classify_all(
    ledgers: Iterable[BkLedger], refs: PulsarReferences, *, shared: bool = False
) -> list[tuple[BkLedger, Verdict]]:
    """The reference classification (tests, the demo); the scan uses ``Classifier``."""
    classifier = Classifier(refs, shared=shared)
    return [(ledger, classifier.classify(ledger)) for ledger in ledgers]
