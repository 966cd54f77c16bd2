"""Ledger ids, allocated as BookKeeper's ZooKeeper id generator does.

Creating a persistent-sequential znode under ``/ledgers/idgen`` returns a name whose
suffix is the parent's monotonically increasing counter; the znode is deleted at once.
Ids are therefore unique across every managed ledger of the store, and never reused even
after the ledger is deleted, which the orphan scan relies on: a ledger prefix in S3 can
only belong to the one managed ledger that registered its id.
"""

from __future__ import annotations

import contextlib

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from ledger_gc.metadata.zk_client import guarded
from ledger_gc.rules.metadata.paths import LEDGER_IDGEN_PATH


class LedgerIdAllocator:
    """Hands out store-wide unique ledger ids."""

    def __init__(self, client: KazooClient, hosts: str = "") -> None:
        self.client = client
        self.hosts = hosts

    def next_id(self) -> int:
        def allocate() -> int:
            path = self.client.create(f"{LEDGER_IDGEN_PATH}/ID-", b"", sequence=True, makepath=True)
            with contextlib.suppress(NoNodeError):
                self.client.delete(path)
            return int(path.rsplit("-", 1)[1])

        return guarded("allocating a ledger id", self.hosts, allocate)
