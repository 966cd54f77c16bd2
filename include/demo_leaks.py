"""Plant real storage leaks in a store, for the demo and the orphan tests.

Three kinds, each made the way it happens in production:

* **orphan ledgers**, as a legacy delete leaves them: ledger ids allocated from the
  store's id generator and their blocks written under an existing managed ledger, which
  neither lists nor marks them (a broker that dropped ledgers from the list and then
  failed to delete their data, before mark-then-delete existed);
* **an orphan partition**, as Pulsar's own topic delete leaves it when its data deletes
  fail: a managed ledger is created and written, then only its znodes are removed;
* **a foreign file** under the prefix (an operator's note): reported, never deleted.

With tiered storage on, two more, as Pulsar leaks them in its offload bucket:

* **a deleted topic's offloaded segments** (apache/pulsar issues 9962, 16687): the
  deleted topic above had its ledgers offloaded first; the topic delete leaves them;
* **a failed offload's stale uuid**: a retried offload writes a new uuid into the
  ledger's context and tries once to delete the old attempt's objects; here that delete
  failed, so a live ledger carries uuid B while the objects of uuid A remain;

and the streaming offloader's ``<uuid>``/``<uuid>-index`` objects beside them, which
are not segments of a ledger: foreign, never deleted.

``plant_leaks(settings)`` returns what it planted, with the key prefixes the orphan
cycle will report.
"""

from __future__ import annotations

import uuid
from typing import Any

from ledger_gc.config.edge import block_store, offload_store, zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.ledger.ids import LedgerIdAllocator
from ledger_gc.ledger.managed_ledger import ManagedLedger
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.storage.keys import ledger_dir, ml_dir
from ledger_gc.storage.s3 import LedgerStorage, OffloadStorage

LEGACY_ML = "public/default/persistent/legacy-leaks"
DELETED_TOPIC = "public/default/persistent/deleted-topic-{suffix}"
FOREIGN_KEY = "_operator-notes/README.txt"


def _payloads(count: int, tag: str) -> list[bytes]:
    return [f"{tag}-entry-{i}".encode() * 8 for i in range(count)]


def plant_orphan_ledgers(
    settings: Settings,
    store: MetadataStore,
    storage: LedgerStorage,
    ml_name: str,
    count: int,
    entries: int,
) -> list[dict[str, Any]]:
    """Write ``count`` ledgers under ``ml_name`` that its metadata never lists."""
    allocator = LedgerIdAllocator(store.client, store.hosts)
    planted = []
    for _ in range(count):
        ledger_id = allocator.next_id()
        block = storage.write_block(ml_name, ledger_id, 0, _payloads(entries, f"l{ledger_id}"))
        planted.append(
            {
                "ml_name": ml_name,
                "ledger_id": ledger_id,
                "prefix": ledger_dir(settings.prefix, ml_name, ledger_id),
                "objects": 1,
                "bytes": block.size,
            }
        )
    return planted


def plant_deleted_topic(
    settings: Settings,
    store: MetadataStore,
    storage: LedgerStorage,
    ml_name: str,
    entries: int,
) -> dict[str, Any]:
    """Create and write a managed ledger, then remove only its znodes."""
    ml = ManagedLedger.open(ml_name, store, storage)
    try:
        ml.add_entries(_payloads(entries, "deleted"))
    finally:
        ml.close()
    segments: list[str] = []
    if settings.offload_bucket:
        # Offloaded before the topic was deleted (its ledger id is store-allocated).
        from demo_store import put_segment

        offload = OffloadStorage(offload_store(settings))
        for ledger in store.get_managed_ledger(ml_name).value.ledgerInfo:
            segments += put_segment(
                offload, ml_name, str(uuid.uuid4()), ledger.ledgerId, max(ledger.size, 512)
            )
    for cursor in store.list_cursors(ml_name):
        store.delete_cursor(ml_name, cursor)
    store.delete_managed_ledger_node(ml_name, store.get_managed_ledger(ml_name).version)
    blocks = list(storage.iter_objects(ml_dir(settings.prefix, ml_name)))
    return {
        "ml_name": ml_name,
        "prefix": ml_dir(settings.prefix, ml_name),
        "objects": len(blocks),
        "bytes": sum(obj.size for obj in blocks),
        "offloaded_segments": segments,
    }


def plant_stale_offload(settings: Settings, store: MetadataStore, ml_name: str) -> dict[str, Any]:
    """A failed offload's objects: uuid A left behind by the newest offloaded ledger of
    ``ml_name``, which carries uuid B (its first ledger if none is offloaded); plus two
    streaming-offloader objects."""
    from demo_store import put_segment

    offload = OffloadStorage(offload_store(settings))
    listed = list(store.get_managed_ledger(ml_name).value.ledgerInfo)
    offloaded = [li for li in listed if li.HasField("offloadContext")]
    ledger = (offloaded or listed)[-1]
    stale = str(uuid.uuid4())
    keys = put_segment(offload, ml_name, stale, ledger.ledgerId, max(ledger.size, 512))
    streaming = str(uuid.uuid4())
    foreign = [
        f"{offload.store.key_prefix}{streaming}",
        f"{offload.store.key_prefix}{streaming}-index",
    ]
    for key in foreign:
        offload.client.put_object(Bucket=offload.bucket, Key=key, Body=b"streaming offload")
    return {
        "ml_name": ml_name,
        "ledger_id": ledger.ledgerId,
        "stale_uuid": stale,
        "keys": keys,
        "foreign_keys": foreign,
    }


def plant_leaks(
    settings: Settings,
    *,
    ml_name: str | None = None,
    orphan_ledgers: int = 2,
    entries: int = 5,
    offloaded_topic: str | None = None,
) -> dict[str, Any]:
    """Plant orphan ledgers, a deleted topic's data and a foreign file; return them.

    ``ml_name`` is the managed ledger that gets the orphan ledgers: by default the first
    existing one, or ``LEGACY_ML`` (created and written) when the store has none.
    """
    storage = LedgerStorage(block_store(settings))
    with MetadataStore.open(zk_endpoint(settings)) as store:
        if ml_name is None:
            existing = store.list_managed_ledgers()
            ml_name = existing[0] if existing else LEGACY_ML
        if not store.managed_ledger_exists(ml_name):
            ml = ManagedLedger.open(ml_name, store, storage)
            try:
                ml.add_entries(_payloads(entries, "live"))
            finally:
                ml.close()
        ledgers = plant_orphan_ledgers(settings, store, storage, ml_name, orphan_ledgers, entries)
        topic = DELETED_TOPIC.format(suffix=uuid.uuid4().hex[:6])
        partition = plant_deleted_topic(settings, store, storage, topic, entries)
        stale = (
            plant_stale_offload(settings, store, offloaded_topic or ml_name)
            if settings.offload_bucket
            else None
        )
    foreign_key = settings.key_prefix + FOREIGN_KEY
    storage.client.put_object(
        Bucket=settings.bucket,
        Key=foreign_key,
        Body=b"Operator notes: not ledger data. ledger-gc reports this and never deletes it.\n",
    )
    return {
        "orphan_ledgers": ledgers,
        "orphan_partitions": [partition],
        "foreign_keys": [foreign_key],
        "stale_offload": stale,
    }
