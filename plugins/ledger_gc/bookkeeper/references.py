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

from google.protobuf.message import DecodeError

from ledger_gc.formats.markers import deletable_markers
from ledger_gc.formats.records import decode_managed_cursor_info, decode_managed_ledger_info
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.proto import pulsar_schema_pb2
from ledger_gc.rules.bookkeeper.classify import PulsarReferences, SchemaIndex
from ledger_gc.rules.metadata import paths

log = logging.getLogger(__name__)

SCHEMAS_ROOT = "/schemas"
#: The compaction cursor (Pulsar's ``Compactor.COMPACTION_SUBSCRIPTION``) and the
#: mark-delete property that names the compacted ledger.
COMPACTION_CURSOR = "__compaction"
COMPACTED_LEDGER_PROPERTY = "CompactedTopicLedger"
#: Cursor properties that name a delayed-delivery bucket snapshot ledger.
BUCKET_PROPERTY_PREFIX = "#pulsar.internal.delayed.bucket"


def read_references(store: MetadataStore) -> PulsarReferences:
    """Every reference Pulsar's metadata in ``store``'s chroot makes to a ledger."""
    store.sync("/")
    names = store.list_managed_ledgers()
    listed, marked, offloaded_deleted = _managed_ledgers(store, names)
    cursors, compacted, buckets = _cursor_references(store, sorted(listed))
    return PulsarReferences(
        listed=listed,
        marked=marked,
        offloaded_deleted=offloaded_deleted,
        cursors=cursors,
        compacted=compacted,
        buckets=frozenset(buckets),
        schemas=_schemas(store),
        # This cluster's own namespaces: its local metadata's, not /admin/policies (a
        # configuration store that geo-replicated clusters share lists theirs too).
        namespaces=frozenset(_namespaces(store, paths.MANAGED_LEDGERS_ROOT)),
    )


def read_live_references(
    store: MetadataStore, ml_name: str | None, schema_id: str | None
) -> PulsarReferences:
    """The records that can reference a ledger of ``ml_name`` (its managed ledger, its
    cursors) or of ``schema_id`` (its locator), and whether their namespace exists, as
    ZooKeeper's leader has them now (``sync`` first): the delete step's live re-check.
    Ledger ids are unique per BookKeeper cluster and Pulsar tags each ledger with its
    owner, so no other record can reference it."""
    store.sync("/")
    names = [ml_name] if ml_name else []
    listed, marked, offloaded_deleted = _managed_ledgers(store, names)
    cursors, compacted, buckets = _cursor_references(store, sorted(listed))
    schemas: dict[str, SchemaIndex] = {}
    if schema_id:
        raw = store.get_many_raw([f"{SCHEMAS_ROOT}/{schema_id}"])[0]
        if raw is not None:
            schemas[schema_id] = schema_index(raw[0])
    namespaces: set[str] = set()
    for name in filter(None, (ml_name, schema_id)):
        namespace = "/".join(name.split("/")[:2])
        where = f"{paths.MANAGED_LEDGERS_ROOT}/{namespace}"
        if store.get_many_raw([where])[0] is not None:
            namespaces.add(namespace)
    return PulsarReferences(
        listed=listed,
        marked=marked,
        offloaded_deleted=offloaded_deleted,
        cursors=cursors,
        compacted=compacted,
        buckets=frozenset(buckets),
        schemas=schemas,
        namespaces=frozenset(namespaces),
    )


def _managed_ledgers(
    store: MetadataStore, names: list[str]
) -> tuple[dict[str, frozenset[int]], dict[str, frozenset[int]], dict[int, str]]:
    """Listed and marked ids of each existing managed ledger of ``names``, and the listed
    ledgers offloaded (complete) with ``bookkeeperDeleted``."""
    ml_paths = [paths.managed_ledger_path(name) for name in names]
    listed: dict[str, frozenset[int]] = {}
    marked: dict[str, frozenset[int]] = {}
    offloaded_deleted: dict[int, str] = {}
    for name, path, raw in zip(names, ml_paths, store.get_many_raw(ml_paths), strict=True):
        if raw is None:
            continue  # deleted since it was listed: it references nothing now
        info = decode_managed_ledger_info(raw[0], path=path, allow_empty=True)
        listed[name] = frozenset(ledger.ledgerId for ledger in info.ledgerInfo)
        marked[name] = frozenset(deletable_markers(info, path=path))
        for ledger in info.ledgerInfo:
            context = ledger.offloadContext
            if context.complete and context.bookkeeperDeleted:
                offloaded_deleted[ledger.ledgerId] = name
    return listed, marked, offloaded_deleted


def _cursor_references(
    store: MetadataStore, names: list[str]
) -> tuple[dict[tuple[str, str], int], dict[str, int], set[int]]:
    ml_paths = [paths.managed_ledger_path(name) for name in names]
    pairs = [
        (name, cursor)
        for name, children in zip(names, store.children_of_many(ml_paths), strict=True)
        for cursor in children
    ]
    cursor_paths = [paths.cursor_path(name, cursor) for name, cursor in pairs]
    cursors: dict[tuple[str, str], int] = {}
    compacted: dict[str, int] = {}
    buckets: set[int] = set()
    for (name, cursor), path, raw in zip(
        pairs, cursor_paths, store.get_many_raw(cursor_paths), strict=True
    ):
        if raw is None:
            continue  # deleted since it was listed
        info = decode_managed_cursor_info(raw[0], path=path)
        cursors[(name, cursor)] = info.cursorsLedgerId
        if cursor == COMPACTION_CURSOR:
            for prop in info.properties:
                if prop.name == COMPACTED_LEDGER_PROPERTY and prop.value >= 0:
                    compacted[name] = prop.value
        for string_prop in info.cursorProperties:
            if string_prop.name.startswith(BUCKET_PROPERTY_PREFIX):
                try:
                    buckets.add(int(string_prop.value))
                except ValueError:
                    log.warning("%s: bucket property %s is not a ledger id", path, string_prop.name)
    return cursors, compacted, buckets


def _children(store: MetadataStore, parents: list[str]) -> list[str]:
    return [
        f"{parent}/{child}"
        for parent, children in zip(parents, store.children_of_many(parents), strict=True)
        for child in children
    ]


def _namespaces(store: MetadataStore, root: str) -> list[str]:
    """``tenant/ns`` of every namespace znode under ``root`` (``root/<t>/<ns>``)."""
    level = _children(store, [root])
    return [path[len(root) + 1 :] for path in _children(store, level)]


def _schemas(store: MetadataStore) -> dict[str, SchemaIndex]:
    topics = _children(store, _children(store, _children(store, [SCHEMAS_ROOT])))
    schemas: dict[str, SchemaIndex] = {}
    for path, raw in zip(topics, store.get_many_raw(topics), strict=True):
        if raw is None:
            continue
        schemas[path[len(SCHEMAS_ROOT) + 1 :]] = schema_index(raw[0])
    return schemas


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
