"""The Pulsar records that reference BookKeeper ledgers, read from ZooKeeper.

Read *before* the BookKeeper listing (``scan``): a ledger created after this read has an
id above every id it names, and ``classify`` holds it. Everything is read over one
session, pipelined; a managed-ledger or cursor record that does not decode raises
(``MetadataFormatError``): not knowing a cursor's ledger would make it look orphaned.
A schema locator that does not decode holds that schema's ledgers instead, since a
topic's schema is not needed to judge any other ledger.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from collections.abc import Set as AbstractSet

from google.protobuf.message import DecodeError

from ledger_gc.bookkeeper.id_spill import IdSpill
from ledger_gc.formats.markers import deletable_markers, java_uuid
from ledger_gc.formats.records import decode_managed_cursor_info, decode_managed_ledger_info
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.proto import pulsar_schema_pb2
from ledger_gc.proto.mldataformats_pb2 import ManagedCursorInfo, ManagedLedgerInfo
from ledger_gc.rules.bookkeeper.classify import PulsarReferences, SchemaIndex
from ledger_gc.rules.bookkeeper.cursor_ledgers import CursorLedgers
from ledger_gc.rules.bookkeeper.ledger_index import LedgerIds
from ledger_gc.rules.bookkeeper.offloaded_copy import BUCKET_PROPERTY, OffloadedCopy
from ledger_gc.rules.metadata import paths
from ledger_gc.rules.metadata.namespaces import ManagedLedgerTree

log = logging.getLogger(__name__)
LedgerInfo = ManagedLedgerInfo.LedgerInfo

SCHEMAS_ROOT = "/schemas"
#: The compaction cursor (Pulsar's ``Compactor.COMPACTION_SUBSCRIPTION``) and the
#: mark-delete property that names the compacted ledger.
COMPACTION_CURSOR = "__compaction"
COMPACTED_LEDGER_PROPERTY = "CompactedTopicLedger"
#: Cursor properties that name a delayed-delivery bucket snapshot ledger.
BUCKET_PROPERTY_PREFIX = "#pulsar.internal.delayed.bucket"


#: ``/schemas`` as listed (``list_schemas``): tenant -> namespace -> its topics.
SchemaTree = Mapping[str, Mapping[str, list[str]]]


def read_references(
    store: MetadataStore,
    policies: MetadataStore | None = None,
    *,
    tree: ManagedLedgerTree | None = None,
    schemas: SchemaTree | None = None,
) -> PulsarReferences:
    """Every reference Pulsar's metadata in ``store``'s chroot (the local store) makes
    to a ledger. ``policies``: the configuration store, whose ``/admin/policies`` says
    what a level of ``/managed-ledgers`` is where the tree does not (None: ``store``).
    ``tree`` and ``schemas``: ``/managed-ledgers`` and ``/schemas`` as this cycle
    already listed them (``managed_ledger_tree``, ``list_schemas``; None: listed here),
    so that one cycle lists each once."""
    store.sync("/")
    if policies is not None and policies is not store:
        policies.sync("/")
    # v1 and v2 managed ledgers, each level read as the namespace it is: a v1 namespace
    # called "persistent" is not a v2 topic (rules/metadata/namespaces.py). A tree this
    # cycle listed a moment ago (``without_buckets``) is not listed again: a topic
    # created since is then one the records read below do not name, as one created just
    # after this listing would be (the horizon, the grace window and the live re-check).
    if tree is None:
        tree = store.managed_ledger_tree(policies=policies)
    # (every topic's listed ids in a file, read back a chunk at a time: id_spill.py)
    listed, marked, offloaded_deleted, copies = _managed_ledgers(store, list(tree.names), IdSpill())
    cursors, compacted, buckets = _cursor_references(store, sorted(listed))
    if schemas is None:
        schemas = list_schemas(store)
    locators, schema_namespaces = _schemas(store, schemas)
    return PulsarReferences(
        listed=listed,
        marked=marked,
        offloaded_deleted=offloaded_deleted,
        offload_copies=copies,
        cursors=cursors,
        compacted=compacted,
        buckets=frozenset(buckets),
        schemas=locators,
        # This cluster's own namespaces: its local metadata's, not /admin/policies (a
        # configuration store that geo-replicated clusters share lists theirs too).
        namespaces=tree.namespaces,
        schema_namespaces=frozenset(schema_namespaces),
    )


def read_live_references(
    store: MetadataStore,
    ml_name: str | None,
    schema_id: str | None,
    policies: MetadataStore | None = None,
) -> PulsarReferences:
    """The records that can reference a ledger of ``ml_name`` (its managed ledger, its
    cursors) or of ``schema_id`` (its locator), and whether their namespace exists, as
    ZooKeeper's leader has them now (``sync`` first): the delete step's live re-check.
    Ledger ids are unique per BookKeeper cluster and Pulsar tags each ledger with its
    owner, so no other record can reference it. ``policies``: the configuration store
    (None: ``store``), as ``read_references``."""
    store.sync("/")
    if policies is not None and policies is not store:
        policies.sync("/")
    names = [ml_name] if ml_name else []
    listed, marked, offloaded_deleted, copies = _managed_ledgers(store, names)
    cursors, compacted, buckets = _cursor_references(store, sorted(listed))
    schemas: dict[str, SchemaIndex] = {}
    schema_namespaces: set[str] = set()
    if schema_id:
        namespace = "/".join(schema_id.split("/")[:2])
        locator, folder = store.get_many_raw(
            [f"{SCHEMAS_ROOT}/{schema_id}", f"{SCHEMAS_ROOT}/{namespace}"]
        )
        if locator is not None:
            schemas[schema_id] = schema_index(locator[0])
        if folder is not None:
            schema_namespaces.add(namespace)
    # The namespace of a v2 name, as the survey reads it: a /managed-ledgers/<a>/<b> that
    # is a v1 property/cluster is no namespace of a v2 topic.
    levels = {"/".join(name.split("/")[:2]) for name in filter(None, (ml_name, schema_id))}
    shapes = store.namespace_shapes(sorted(levels), policies)
    namespaces = {level for level, shape in shapes.items() if shape.namespace}
    return PulsarReferences(
        listed=listed,
        marked=marked,
        offloaded_deleted=offloaded_deleted,
        offload_copies=copies,
        cursors=cursors,
        compacted=compacted,
        buckets=frozenset(buckets),
        schemas=schemas,
        namespaces=frozenset(namespaces),
        schema_namespaces=frozenset(schema_namespaces),
    )


def _managed_ledgers(
    store: MetadataStore, names: list[str], spill: IdSpill | None = None
) -> tuple[
    dict[str, AbstractSet[int]], dict[str, frozenset[int]], dict[int, str], dict[int, OffloadedCopy]
]:
    """Listed and marked ids of each existing managed ledger of ``names``, the listed
    ledgers offloaded (complete) with ``bookkeeperDeleted``, and where their offloaded
    copies are (checked before their BookKeeper copies go: ``offloaded_copy``).
    ``spill``: where the listed ids are kept (None: in memory)."""
    listed: dict[str, AbstractSet[int]] = {}
    marked: dict[str, frozenset[int]] = {}
    offloaded_deleted: dict[int, str] = {}
    copies: dict[int, OffloadedCopy] = {}
    # (each path made as it is read, and again for an error: no list of 100,000 paths)
    records = store.iter_many_raw(paths.managed_ledger_path(name) for name in names)
    for name, raw in zip(names, records, strict=True):
        if raw is None:
            continue  # deleted since it was listed: it references nothing now
        path = paths.managed_ledger_path(name)
        info = decode_managed_ledger_info(raw[0], path=path, allow_empty=True)
        # (interned: the survey's candidates come back from its executors with copies of
        # their topics' names, which the candidate table interns onto these)
        name = sys.intern(name)
        # (8 bytes an id: a frozenset of ints is about 60, a survey holds every one)
        ids = LedgerIds(ledger.ledgerId for ledger in info.ledgerInfo)
        listed[name] = ids if spill is None else spill.add(ids)
        # (only a topic with markers: an empty set is 216 bytes, 24 MB at 100,000 topics)
        markers = deletable_markers(info, path=path)
        if markers:
            marked[name] = frozenset(markers)
        for ledger in info.ledgerInfo:
            context = ledger.offloadContext
            if context.complete and context.bookkeeperDeleted:
                offloaded_deleted[ledger.ledgerId] = name
                copies[ledger.ledgerId] = offloaded_copy_of(ledger)
    return listed, marked, offloaded_deleted, copies


def offloaded_copy_of(ledger: LedgerInfo) -> OffloadedCopy:
    """Where a listed ledger's offload put its copy: the attempt's uuid, the driver and
    its bucket (``driverMetadata``), and the ledger's size."""
    context = ledger.offloadContext
    properties = {entry.key: entry.value for entry in context.driverMetadata.properties}
    return OffloadedCopy(
        uuid=java_uuid(context.uidMsb, context.uidLsb),
        driver=context.driverMetadata.name if context.HasField("driverMetadata") else None,
        bucket=properties.get(BUCKET_PROPERTY),
        ledger_size=ledger.size,
    )


def _cursor_references(
    store: MetadataStore, names: list[str]
) -> tuple[CursorLedgers, dict[str, int], set[int]]:
    ml_paths = [paths.managed_ledger_path(name) for name in names]
    # (a subscription's name once, however many topics have it: the pairs are the
    # references' keys for the whole survey)
    pairs = [
        (name, sys.intern(cursor))
        for name, children in zip(names, store.children_of_many(ml_paths), strict=True)
        for cursor in children
    ]
    del ml_paths
    cursors: list[tuple[tuple[str, str], int]] = []
    compacted: dict[str, int] = {}
    buckets: set[int] = set()
    records = store.iter_many_raw(paths.cursor_path(name, cursor) for name, cursor in pairs)
    for pair, raw in zip(pairs, records, strict=True):
        if raw is None:
            continue  # deleted since it was listed
        name, cursor = pair
        path = paths.cursor_path(name, cursor)
        info = decode_managed_cursor_info(raw[0], path=path)
        cursors.append((pair, info.cursorsLedgerId))
        ledger = compacted_ledger(cursor, info)
        if ledger is not None:
            compacted[name] = ledger
        buckets |= bucket_ledgers(info, path)
    return CursorLedgers(cursors), compacted, buckets


def compacted_ledger(cursor: str, info: ManagedCursorInfo) -> int | None:
    """The compacted ledger a cursor names: the ``__compaction`` cursor's
    ``CompactedTopicLedger`` property (None: not that cursor, or none yet)."""
    if cursor != COMPACTION_CURSOR:
        return None
    found = None
    for prop in info.properties:
        if prop.name == COMPACTED_LEDGER_PROPERTY and prop.value >= 0:
            found = prop.value
    return found


def bucket_ledgers(info: ManagedCursorInfo, path: str) -> set[int]:
    """The delayed-delivery bucket snapshot ledgers a cursor's properties name."""
    found: set[int] = set()
    for prop in info.cursorProperties:
        if prop.name.startswith(BUCKET_PROPERTY_PREFIX):
            try:
                found.add(int(prop.value))
            except ValueError:
                log.warning("%s: bucket property %s is not a ledger id", path, prop.name)
    return found


def list_schemas(store: MetadataStore) -> dict[str, dict[str, list[str]]]:
    """``/schemas`` level by level, pipelined: tenant -> namespace -> its topics (a
    tenant or namespace with nothing below it is there, empty)."""
    tenants = store.children_of_many([SCHEMAS_ROOT])[0]
    levels = store.children_of_many([f"{SCHEMAS_ROOT}/{t}" for t in tenants])
    pairs = [(t, ns) for t, got in zip(tenants, levels, strict=True) for ns in got]
    topics = store.children_of_many([f"{SCHEMAS_ROOT}/{t}/{ns}" for t, ns in pairs])
    found: dict[str, dict[str, list[str]]] = {tenant: {} for tenant in tenants}
    for (tenant, namespace), below in zip(pairs, topics, strict=True):
        found[tenant][namespace] = below
    return found


def _schemas(store: MetadataStore, listed: SchemaTree) -> tuple[dict[str, SchemaIndex], list[str]]:
    """Every schema locator (``/schemas/<tenant>/<ns>/<topic>``) of ``listed``
    (``list_schemas``), and the namespaces that hold one: schemas live in this cluster's
    local store like its managed ledgers, and a namespace of non-persistent topics has
    schemas but no managed ledger."""
    namespaces = [
        f"{SCHEMAS_ROOT}/{tenant}/{namespace}"
        for tenant, below in listed.items()
        for namespace in below
    ]
    topics = [
        f"{SCHEMAS_ROOT}/{tenant}/{namespace}/{topic}"
        for tenant, below in listed.items()
        for namespace, names in below.items()
        for topic in names
    ]
    schemas: dict[str, SchemaIndex] = {}
    for path, raw in zip(topics, store.iter_many_raw(topics), strict=True):
        if raw is None:
            continue
        schemas[path[len(SCHEMAS_ROOT) + 1 :]] = schema_index(raw[0])
    return schemas, [path[len(SCHEMAS_ROOT) + 1 :] for path in namespaces]


def schema_index(data: bytes) -> SchemaIndex:
    """The ledgers a schema locator names, and its lowest version."""
    locator = pulsar_schema_pb2.SchemaLocator()
    try:
        locator.ParseFromString(data)
        missing = locator.FindInitializationErrors()
    except DecodeError as exc:
        return SchemaIndex(frozenset(), None, f"does not parse: {exc}")
    if missing:
        return SchemaIndex(frozenset(), None, f"lacks {', '.join(sorted(missing))}")
    entries = [locator.info, *locator.index]
    return SchemaIndex(
        frozenset(entry.position.ledgerId for entry in entries),
        min((entry.version for entry in locator.index), default=None),
    )
