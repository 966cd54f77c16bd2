"""Whether a ``bk-offloaded-copy``'s tiered-storage copy is there to read (pure).

A listed ledger offloaded with ``complete`` and ``bookkeeperDeleted`` is read by Pulsar
from tiered storage; its BookKeeper copy is one Pulsar meant to delete. Deleting it is
only safe while the offloaded copy exists: a lifecycle rule, a wrong bucket or an upload
marked complete that never finished leave the BookKeeper copy as the last one. So before
it goes, both objects Pulsar's blob-store offloader (``BlobStoreManagedLedgerOffloader``)
wrote for that attempt are read (HEAD) in ``LEDGERGC_OFFLOAD_BUCKET``:

* ``<uuid>-ledger-<id>``, the data: a multipart upload of the ledger's blocks, whose
  total length the offloader counts as it uploads (``dataObjectLength``);
* ``<uuid>-ledger-<id>-index``, written only after the data upload completed, whose
  header carries that ``dataObjectLength`` (``OffloadIndexBlockImpl``: int magic
  ``0xDE47DE47``, int index length, long data object length, long data header length,
  ...; big-endian, as Java's ``DataOutputStream`` writes).

"The size the offload wrote" is that ``dataObjectLength``: the data object's length
must equal it (an object truncated, replaced or of another attempt does not), and be at
least the ledger's own size in ``LedgerInfo.size`` (every entry is in it, with its
framing). The data object's user metadata holds no size, and the ledger's size counts
entries only, so neither alone can confirm the object.

Held, with why, when any of it cannot be confirmed: tiered storage off
(``LEDGERGC_OFFLOAD_BUCKET`` empty), a copy whose driver is of another family of store
than the one configured (``LEDGERGC_OFFLOAD_DRIVER``: S3's API, Google Cloud Storage,
Azure Blob Storage; ``rules.storage.offload_drivers``) or no object store at all (a
filesystem offloader), a copy recorded in another bucket or container than the one
configured, an object missing or of another length, an index ledger-gc cannot read.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ledger_gc.rules.storage import offload_drivers

#: The offload drivers (``offloadContext.driverMetadata.name``, jclouds' provider ids as
#: Pulsar's ``JCloudBlobStoreProvider`` names them) that speak S3's API.
S3_DRIVERS = frozenset(
    name for name, kind in offload_drivers.DRIVERS.items() if kind == offload_drivers.S3
)
#: ``OffloadIndexBlockImpl.INDEX_MAGIC_WORD``: the index the blob-store offloader writes.
INDEX_MAGIC = 0xDE47DE47
#: magic, index block length (ints), data object length (long).
INDEX_HEADER_BYTES = 16
_HEADER = struct.Struct(">IIq")
#: The driver-metadata property that names the offload bucket.
BUCKET_PROPERTY = offload_drivers.BUCKET_PROPERTY
#: How each family's messages name a bucket.
_BUCKET_WORD = {offload_drivers.AZURE: "container"}


@dataclass(frozen=True)
class OffloadedCopy:
    """What a listed ledger's ``offloadContext`` says of its offloaded copy."""

    uuid: str  # the attempt's uuid (uidMsb, uidLsb) as Java prints it
    driver: str | None = None  # driverMetadata.name (None: not recorded)
    bucket: str | None = None  # driverMetadata's "bucket" property (None: not recorded)
    ledger_size: int = 0  # LedgerInfo.size: the ledger's bytes


@dataclass(frozen=True)
class ObjectsRead:
    """What the HEADs (and the index's first bytes) found; None: the object is missing."""

    data_length: int | None
    index_length: int | None
    index_header: bytes | None = None


def why_unverifiable(
    copy: OffloadedCopy | None, offload_bucket: str, *, family: str = offload_drivers.S3
) -> str | None:
    """Why the offloaded copy cannot be looked at here (None: it can). ``family``: the
    configured store's (``ObjectStore.driver``); the copy's driver must be of it, and
    its bucket (where recorded) the configured one."""
    if not offload_bucket:
        return (
            "LEDGERGC_OFFLOAD_BUCKET is empty (tiered storage off): its offloaded copy "
            "cannot be checked, and this BookKeeper copy may be the last one; held"
        )
    if copy is None:
        return "its offloadContext names no offloaded copy (no uuid); held"
    named = copy.driver or "not recorded"
    copy_family = offload_drivers.family(copy.driver)
    if copy_family is None:
        return (
            f"its offload driver ({named}) is no object store ledger-gc reads: its "
            "offloaded copy cannot be checked; held"
        )
    if copy_family != family:
        return (
            f"it was offloaded with driver {named} ({copy_family}), not to the "
            f"{family} store LEDGERGC_OFFLOAD_DRIVER names: its copy is not where "
            "ledger-gc can check it; held"
        )
    if copy.bucket and copy.bucket != offload_bucket:
        word = _BUCKET_WORD.get(family, "bucket")
        return (
            f"it was offloaded to {word} {copy.bucket}, not LEDGERGC_OFFLOAD_BUCKET="
            f"{offload_bucket}: its copy is not where ledger-gc can check it; held"
        )
    return None


def data_object_length(header: bytes) -> int | None:
    """The ``dataObjectLength`` an offload index's header records (None: not an index
    of the blob-store offloader's format)."""
    if len(header) < INDEX_HEADER_BYTES:
        return None
    magic, _, length = _HEADER.unpack_from(header)
    return length if magic == INDEX_MAGIC else None


def why_not_confirmed(copy: OffloadedCopy, keys: tuple[str, str], read: ObjectsRead) -> str | None:
    """Why the objects read do not confirm the offloaded copy (None: they do)."""
    data_key, index_key = keys
    if read.data_length is None:
        return f"its offloaded data object {data_key} does not exist: this copy may be the last"
    if read.index_length is None:
        return f"its offloaded index {index_key} does not exist: the offload never finished"
    wrote = data_object_length(read.index_header or b"")
    if wrote is None:
        return f"{index_key} is not an offload index ledger-gc reads: the size cannot be checked"
    if read.data_length != wrote or wrote <= 0:
        return (
            f"{data_key} holds {read.data_length} bytes, but the offload wrote {wrote} "
            "(its index says): not the copy Pulsar reads"
        )
    if read.data_length < copy.ledger_size:
        return (
            f"{data_key} holds {read.data_length} bytes, fewer than the ledger's "
            f"{copy.ledger_size}: not a whole copy"
        )
    return None
