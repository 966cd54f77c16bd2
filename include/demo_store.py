"""A small but real managed-ledger store for the demo: topics, ledgers, consumers.

Each topic is written through the library's ManagedLedger (so the metadata is what a
Pulsar broker would write) with small ledgers, and its consumers ack part of it: some by
mark-delete, some individually. That gives the trim real consumed ledgers to reclaim and
real unconsumed ones it must keep.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.settings import Settings
from ledger_gc.storage.s3 import LedgerStorage


@dataclass(frozen=True)
class Topic:
    name: str
    entries: int
    entry_bytes: int
    # cursor name -> fraction of the entries it has consumed (mark-delete)
    consumers: dict[str, float]


TOPICS = (
    Topic("acme/prod/persistent/orders", 120, 512, {"billing": 0.75, "shipping": 0.5}),
    Topic("acme/prod/persistent/payments", 60, 1024, {"ledger-sync": 1.0}),
    Topic("acme/staging/persistent/clicks", 80, 256, {}),  # no consumers: all but current
    Topic("globex/analytics/persistent/events", 90, 768, {"warehouse": 0.3}),
)
ENTRIES_PER_LEDGER = 20


def write_demo_store(settings: Settings) -> list[str]:
    """Write the demo topics; return their managed-ledger names."""
    storage = LedgerStorage(settings)
    config = ManagedLedgerConfig(max_entries_per_ledger=ENTRIES_PER_LEDGER)
    with MetadataStore.open(settings) as store:
        for topic in TOPICS:
            ml = ManagedLedger.open(topic.name, store, storage, config)
            cursors = {name: ml.open_cursor(name, "earliest") for name in topic.consumers}
            positions = []
            for start in range(0, topic.entries, 10):
                batch = [
                    f"{topic.name}#{i}".encode().ljust(topic.entry_bytes, b".")
                    for i in range(start, min(start + 10, topic.entries))
                ]
                positions.extend(ml.add_entries(batch))
            for name, fraction in topic.consumers.items():
                consumed = int(len(positions) * fraction)
                if consumed:
                    cursors[name].mark_delete(positions[consumed - 1])
                # A few individual acks past the mark-delete position, as a real
                # consumer with out-of-order processing leaves them.
                for position in positions[consumed + 1 : consumed + 6 : 2]:
                    cursors[name].delete(position)
            ml.close()
    return [topic.name for topic in TOPICS]
