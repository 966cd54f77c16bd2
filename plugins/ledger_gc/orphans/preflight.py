"""The servers a cycle needs, reached before it starts Spark or records a run.

An orphan cycle that cannot reach ZooKeeper, or the store of a bucket it is to scan (the
block store's S3; tiered storage's S3, GCS bucket or Azure container, with the
credentials it was given), can do nothing. Found by the survey, that took a Spark
session's start (38 s on a small host) and left a failed run, which the page then
showed as the latest orphan cycle. Checked here first, it is one line and exit 2
(``cli``: a failure before anything destructive) and no run: the run log keeps what the
last real cycle did.

What a reached server says is still the cycle's to report: a chroot that does not
exist, or metadata that cannot be read, fails the cycle with its report (``METADATA_READ``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ledger_gc.bookkeeper.survey import check_layout
from ledger_gc.config.endpoints import Endpoints
from ledger_gc.errors import MetadataAccessError, MetadataError, MetadataUnavailableError
from ledger_gc.metadata.zk_client import session
from ledger_gc.pulsar_metadata.survey import check_config_store
from ledger_gc.storage.offload_buckets import offload_bucket
from ledger_gc.storage.s3 import LedgerStorage


def check_servers(endpoints: Endpoints) -> None:
    """Reach ZooKeeper (Pulsar's, and BookKeeper's when that source is on) and the
    buckets that are set; raise the one-line error of the first that fails
    (``MetadataUnavailableError``, ``StorageError``, ``BucketNotFoundError``; a
    ``ConfigError`` for an offload driver whose SDK is not installed)."""
    with _reached(), session(endpoints.zk):
        pass
    with _reached():
        # Also refuses a BookKeeper source that cannot be read (LEDGERGC_BOOKKEEPER=true
        # and no LAYOUT, a layout ledger-gc cannot read, an identity refused READ on it):
        # a setting to fix, one line.
        check_layout(endpoints)
        # A configuration store that is no Pulsar configuration store, or another
        # cluster's (the Pulsar-metadata source would judge every namespace deleted).
        check_config_store(endpoints)
    if endpoints.blocks.configured:
        LedgerStorage(endpoints.blocks).check_bucket()
    if endpoints.offload.configured:
        offload_bucket(endpoints.offload).check_bucket()


@contextmanager
def _reached() -> Iterator[None]:
    """Raise an unreachable ZooKeeper, or one that refuses ledger-gc's identity (a
    setting to fix); what else a reached one answers (a chroot that does not exist) is
    the cycle's to report."""
    try:
        yield
    except (MetadataUnavailableError, MetadataAccessError):
        raise
    except MetadataError:
        pass
