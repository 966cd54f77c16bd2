"""Plant real storage leaks in a store, for the demo and the orphan tests.

Three kinds, each made the way it happens in production:

* **orphan ledgers**, as a legacy delete leaves them: ledger ids allocated from the
  store's id generator and their blocks written under an existing managed ledger, which
  neither lists nor marks them (a broker that dropped ledgers from the list and then
  failed to delete their data, before mark-then-delete existed);
* **an orphan partition**, as Pulsar's own topic delete leaves it when its data deletes
  fail: a managed ledger is created and written, then only its znodes are removed;
* **a foreign file** under the prefix (an operator's note): reported, never deleted.

``plant_leaks(settings)`` returns what it planted, with the key prefixes the orphan
cycle will report.
"""

from __future__ import annotations

import uuid
from typing import Any

from ledger_gc.ledger.ids import LedgerIdAllocator
from ledger_gc.ledger.managed_ledger import ManagedLedger
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.settings import Settings
from ledger_gc.storage.keys import ledger_dir, ml_dir
from ledger_gc.storage.s3 import LedgerStorage

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
    for cursor in store.list_cursors(ml_name):
        store.delete_cursor(ml_name, cursor)
    store.delete_managed_ledger_node(ml_name, store.get_managed_ledger(ml_name).version)
    blocks = list(storage.iter_objects(ml_dir(settings.prefix, ml_name)))
    return {
        "ml_name": ml_name,
        "prefix": ml_dir(settings.prefix, ml_name),
        "objects": len(blocks),
        "bytes": sum(obj.size for obj in blocks),
    }


def plant_leaks(
    settings: Settings,
    *,
    ml_name: str | None = None,
    orphan_ledgers: int = 2,
    entries: int = 5,
) -> dict[str, Any]:
    """Plant orphan ledgers, a deleted topic's data and a foreign file; return them.

    ``ml_name`` is the managed ledger that gets the orphan ledgers: by default the first
    existing one, or ``LEGACY_ML`` (created and written) when the store has none.
    """
    storage = LedgerStorage(settings)
    with MetadataStore.open(settings) as store:
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
    }
