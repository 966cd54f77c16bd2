"""A small but real managed-ledger store for the demo: topics, ledgers, consumers.

Each topic is written through the library's ManagedLedger (so the metadata is what a
Pulsar broker would write) with small ledgers, and its consumers ack part of it: some by
mark-delete, some individually. That gives the trim real consumed ledgers to reclaim and
real unconsumed ones it must keep.

With tiered storage on (``LEDGERGC_OFFLOAD_BUCKET``), the ``archive`` topic's older
ledgers are offloaded as Pulsar's blob-store offloader does it: the ledger's
``offloadContext`` gets a fresh uuid (complete = false) before anything is uploaded,
then the ``<uuid>-ledger-<id>`` data object (user metadata ``ManagedLedgerName``) and
its ``-index`` object are written, then the context is marked complete.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from ledger_gc.config.edge import block_store, offload_store, zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.formats.markers import java_uuid
from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.proto.mldataformats_pb2 import ManagedLedgerInfo
from ledger_gc.rules.storage.offload_keys import segment_keys
from ledger_gc.storage.s3 import LedgerStorage, OffloadStorage


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
    Topic("acme/prod/persistent/archive", 100, 512, {"audit": 0.4}),
)
#: The topic whose older ledgers are offloaded to tiered storage (when it is on).
OFFLOADED_TOPIC = "acme/prod/persistent/archive"
OFFLOADED_LEDGERS = 4
ENTRIES_PER_LEDGER = 20


def write_demo_store(settings: Settings) -> list[str]:
    """Write the demo topics; return their managed-ledger names."""
    storage = LedgerStorage(block_store(settings))
    config = ManagedLedgerConfig(max_entries_per_ledger=ENTRIES_PER_LEDGER)
    with MetadataStore.open(zk_endpoint(settings)) as store:
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
    if settings.offload_bucket:
        offload_ledgers(settings, OFFLOADED_TOPIC, OFFLOADED_LEDGERS)
    return [topic.name for topic in TOPICS]


def java_halves(value: uuid.UUID) -> tuple[int, int]:
    """A UUID as Java's (mostSigBits, leastSigBits): two signed longs."""
    msb, lsb = value.int >> 64, value.int & (2**64 - 1)
    return tuple(h - 2**64 if h >= 2**63 else h for h in (msb, lsb))  # type: ignore[return-value]


def put_segment(
    offload: OffloadStorage,
    name: str,
    offload_uuid: str,
    ledger_id: int,
    size: int,
    *,
    data: bool = True,
    index: bool = True,
) -> list[str]:
    """Write an offloaded ledger's objects as BlobStoreManagedLedgerOffloader does."""
    written = []
    for wanted, key, role, length in zip(
        (data, index),
        segment_keys(offload.prefix, offload_uuid, ledger_id),
        ("data", "index"),
        (size, 64),
        strict=True,
    ):
        if wanted:
            offload.client.put_object(
                Bucket=offload.bucket,
                Key=key,
                Body=b"o" * length,
                Metadata={"role": role, "ManagedLedgerName": name},
            )
            written.append(key)
    return written


def offload_ledgers(settings: Settings, name: str, count: int) -> dict[int, str]:
    """Offload the first ``count`` ledgers of ``name``; return ledger id -> uuid."""
    offload = OffloadStorage(offload_store(settings))
    done: dict[int, str] = {}
    with MetadataStore.open(zk_endpoint(settings)) as store:
        ledgers = list(store.get_managed_ledger(name).value.ledgerInfo)[:count]
        for ledger in ledgers:
            value = uuid.uuid4()
            msb, lsb = java_halves(value)

            def prepare(
                info: ManagedLedgerInfo,
                lid: int = ledger.ledgerId,
                msb: int = msb,
                lsb: int = lsb,
            ) -> bool:
                for li in info.ledgerInfo:
                    if li.ledgerId == lid:
                        context = li.offloadContext
                        context.uidMsb, context.uidLsb, context.complete = msb, lsb, False
                        context.driverMetadata.name = "aws-s3"
                        context.driverMetadata.properties.add(key="bucket", value=offload.bucket)
                return True

            def complete(info: ManagedLedgerInfo, lid: int = ledger.ledgerId) -> bool:
                for li in info.ledgerInfo:
                    if li.ledgerId == lid:
                        li.offloadContext.complete = True
                return True

            # The uuid is in the metadata before any object exists (ManagedLedgerImpl).
            store.update_managed_ledger(name, prepare)
            offload_uuid = java_uuid(msb, lsb)
            put_segment(offload, name, offload_uuid, ledger.ledgerId, ledger.size)
            store.update_managed_ledger(name, complete)
            done[ledger.ledgerId] = offload_uuid
    return done
