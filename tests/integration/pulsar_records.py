"""Build stores as a Pulsar broker leaves them: records written straight to ZooKeeper
(any ledger order, timestamps maybe missing, Pulsar's compression framing, offload
contexts, URL-encoded names) and their ledgers' blocks in S3."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kazoo.client import KazooClient

from ledger_gc.formats.framing import RAW, Framing
from ledger_gc.formats.markers import deletable_markers, java_uuid
from ledger_gc.formats.records import (
    decode_managed_ledger_info_framed,
    encode_managed_cursor_info,
    encode_managed_ledger_info,
)
from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.proto.mldataformats_pb2 import ManagedCursorInfo, ManagedLedgerInfo
from ledger_gc.rules.metadata import paths
from ledger_gc.storage.s3 import LedgerStorage

ML = "acme/prod/persistent/orders"


def listed_and_marked(store, name: str = ML) -> tuple[list[int], dict[int, dict]]:
    """The ledger ids a managed ledger lists, and its deletable markers."""
    info = store.get_managed_ledger(name).value
    return sorted(li.ledgerId for li in info.ledgerInfo), deletable_markers(info)


def writer(store, storage, ledgers: int = 4) -> tuple[ManagedLedger, list[int]]:
    """A managed ledger ``ML`` written through the library: ``ledgers`` full ledgers of 2
    entries and an empty current one; the handle and the listed ids."""
    ml = ManagedLedger.open(ML, store, storage, ManagedLedgerConfig(max_entries_per_ledger=2))
    ml.add_entries([f"entry-{i}".encode() * 10 for i in range(2 * ledgers)])
    return ml, [li.ledgerId for li in store.get_managed_ledger(ML).value.ledgerInfo]


@dataclass(frozen=True)
class Ledger:
    ledger_id: int
    entries: int = 2
    timestamp: int = 1
    payload: int = 50  # bytes per entry

    @property
    def size(self) -> int:
        return self.entries * self.payload


def record(ledgers: Sequence[Ledger]) -> ManagedLedgerInfo:
    info = ManagedLedgerInfo()
    for ledger in ledgers:
        info.ledgerInfo.add(
            ledgerId=ledger.ledger_id,
            entries=ledger.entries,
            size=ledger.size,
            timestamp=ledger.timestamp,
        )
    return info


def write_record(
    zk: KazooClient,
    name: str,
    info: ManagedLedgerInfo,
    framing: Framing = RAW,
) -> None:
    data = encode_managed_ledger_info(info, framing)
    path = paths.managed_ledger_path(name)
    if zk.exists(path):
        zk.set(path, data)
    else:
        zk.create(path, data, makepath=True)


def write_cursor(zk: KazooClient, name: str, cursor: str, ledger_id: int, entry_id: int) -> None:
    info = ManagedCursorInfo(
        cursorsLedgerId=-1, markDeleteLedgerId=ledger_id, markDeleteEntryId=entry_id
    )
    path = paths.cursor_path(name, cursor)
    data = encode_managed_cursor_info(info)
    if zk.exists(path):
        zk.set(path, data)
    else:
        zk.create(path, data)


def write_data(storage: LedgerStorage, name: str, ledgers: Sequence[Ledger]) -> None:
    for ledger in ledgers:
        if ledger.entries:
            storage.write_block(name, ledger.ledger_id, 0, [b"x" * ledger.payload] * ledger.entries)


def store_of(
    zk: KazooClient,
    storage: LedgerStorage,
    name: str,
    ledgers: Sequence[Ledger],
    *,
    cursors: dict[str, tuple[int, int]] | None = None,
    framing: Framing = RAW,
) -> None:
    """A managed ledger with ``ledgers`` (stored in the order given), their data, and
    ``cursors`` (name -> mark-delete position)."""
    write_record(zk, name, record(ledgers), framing)
    for cursor, (ledger_id, entry_id) in (cursors or {}).items():
        write_cursor(zk, name, cursor, ledger_id, entry_id)
    write_data(storage, name, ledgers)


def ledgers_with_data(storage: LedgerStorage, name: str) -> set[int]:
    from ledger_gc.rules.storage.keys import ml_dir, parse_key

    found = set()
    for obj in storage.iter_objects(ml_dir(storage.prefix, name)):
        parsed = parse_key(storage.prefix, obj.key)
        if parsed.is_block and parsed.ledger_id is not None:
            found.add(parsed.ledger_id)
    return found


def read_record(zk: KazooClient, name: str) -> tuple[ManagedLedgerInfo, Framing, bytes]:
    data, _ = zk.get(paths.managed_ledger_path(name))
    info, framing = decode_managed_ledger_info_framed(data)
    return info, framing, data


# --- tiered storage: offload contexts and offloaded objects, as Pulsar writes them ------


def offload(
    ledger: ManagedLedgerInfo.LedgerInfo,
    msb: int,
    lsb: int,
    *,
    complete: bool = True,
    bookkeeper_deleted: bool = False,
    bucket: str = "offload",
) -> str:
    """Give a LedgerInfo the offloadContext Pulsar's ManagedLedgerImpl writes (uuid before
    the upload, complete after it, bookkeeperDeleted once the BookKeeper copy is gone);
    return the uuid as Java prints it."""
    context = ledger.offloadContext
    context.uidMsb, context.uidLsb = msb, lsb
    context.complete = complete
    context.bookkeeperDeleted = bookkeeper_deleted
    context.timestamp = 1_700_000_000_000
    context.driverMetadata.name = "aws-s3"
    context.driverMetadata.properties.add(key="bucket", value=bucket)
    context.driverMetadata.properties.add(key="region", value="us-east-1")
    return java_uuid(msb, lsb)


def put_segment(
    s3_client,
    bucket: str,
    prefix: str,
    uuid: str,
    ledger_id: int,
    *,
    ml_name: str | None = None,
    data: bool = True,
    index: bool = True,
    size: int = 4000,
    cluster: str | None = None,
) -> list[str]:
    """The objects BlobStoreManagedLedgerOffloader writes for one ledger: the data object
    (user metadata role=data, ManagedLedgerName) and, once the data is uploaded, its
    index. ``data``/``index`` False: an offload that failed half-way. ``cluster``: the
    ``pulsarClusterName`` a tagging Pulsar writes into both objects' user metadata
    (``LedgerOffloader.METADATA_PULSAR_CLUSTER_NAME``); None: a Pulsar that does not."""
    base = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
    keys = []
    for wanted, key, role in (
        (data, f"{base}{uuid}-ledger-{ledger_id}", "data"),
        (index, f"{base}{uuid}-ledger-{ledger_id}-index", "index"),
    ):
        if not wanted:
            continue
        metadata = {"role": role, "s3managedledgeroffloaderversion": "1"}
        if ml_name:
            metadata["ManagedLedgerName"] = ml_name
        if cluster is not None:
            metadata["pulsarClusterName"] = cluster
        s3_client.put_object(
            Bucket=bucket, Key=key, Body=b"o" * (size if role == "data" else 64), Metadata=metadata
        )
        keys.append(key)
    return keys
