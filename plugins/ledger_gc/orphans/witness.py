"""Reading the servers' clocks and ZooKeeper's sequence: what a cycle's time rests on.

``ServerClocks.observe`` creates (and at once deletes) a persistent-sequential znode
under ``/ledger-gc/ticks`` below the chroot: its sequence number orders the runs of a
store whatever the hosts' clocks say (every worker reaches ZooKeeper), and its ``ctime``
is ZooKeeper's time. S3's time is the ``Date`` header of a ``HeadBucket``. See
``timekeeping.py`` for how they are used. ``offset_ms`` is for tests only: a world in
which every server's clock is that much later (time has passed).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

from kazoo.exceptions import NoNodeError

from ledger_gc.config.endpoints import ObjectStore, ZkEndpoint
from ledger_gc.errors import MetadataAccessError
from ledger_gc.metadata import zk_access
from ledger_gc.metadata.own_znodes import reclaim
from ledger_gc.metadata.zk_client import guarded, session
from ledger_gc.rules.orphans import timekeeping
from ledger_gc.rules.orphans.timekeeping import Instant
from ledger_gc.storage.s3 import LedgerStorage

log = logging.getLogger(__name__)

TICKS_PATH = "/ledger-gc/ticks"


@dataclass(frozen=True)
class Observation:
    sequence: int  # ZooKeeper's: increases with every observation of the store
    instant: Instant


@dataclass(frozen=True)
class ServerClocks:
    """The clocks of the servers a cycle talks to (and a test's shift of them)."""

    offset_ms: int = 0

    def observe(
        self,
        zk: ZkEndpoint,
        clock: Callable[[], int],
        blocks: ObjectStore | None = None,
    ) -> Observation:
        """ZooKeeper's sequence and time (a session to ``zk``), this host's, and S3's
        (the block store's; none configured: ZooKeeper's clock alone)."""
        with session(zk) as client:
            reclaim(client, zk.hosts, TICKS_PATH)  # an older version's open ACL

            def tick() -> tuple[str, int]:
                path, stat = client.create(
                    f"{TICKS_PATH}/t-", b"", sequence=True, makepath=True, include_data=True
                )
                with contextlib.suppress(NoNodeError):
                    client.delete(path)
                return path, int(stat.ctime)

            def refused() -> MetadataAccessError:
                return zk_access.own_refusal(
                    client,
                    zk.hosts,
                    what=f"reading ZooKeeper's clock (a tick under {TICKS_PATH})",
                    znode=TICKS_PATH,
                    names=zk.names,
                )

            path, zk_ms = guarded("reading ZooKeeper's clock", zk.hosts, tick, refused=refused)
        host_ms = clock()
        s3_ms = _s3_time(blocks) if blocks is not None and blocks.configured else None
        return Observation(
            int(path.rsplit("-", 1)[1]),
            Instant(
                host_ms,
                zk_ms + self.offset_ms,
                None if s3_ms is None else s3_ms + self.offset_ms,
            ),
        )


def _s3_time(blocks: ObjectStore) -> int | None:
    """S3's clock (the ``Date`` header, second precision); None if it sends none."""
    storage = LedgerStorage(blocks)
    try:
        response = storage.client.head_bucket(Bucket=blocks.bucket)
        header = response["ResponseMetadata"]["HTTPHeaders"].get("date")
        return int(parsedate_to_datetime(header).timestamp() * 1000) if header else None
    except Exception as exc:  # no S3 time is no evidence, never a guess
        log.warning("could not read S3's clock (Date header): %s", exc)
        return None


def observe(
    zk: ZkEndpoint,
    blocks: ObjectStore | None,
    run_id: str,
    witness: ServerClocks | None,
    clock: Callable[[], int],
) -> tuple[int, Instant, list[str]]:
    """The servers' clocks and ZooKeeper's sequence now, and warnings about this host's
    (logged: a clock that is off is an operator's to fix, the cycle goes on by theirs).
    ``blocks``: the block store, whose clock S3's is (none configured: BookKeeper's
    ages are ZooKeeper's too)."""
    seen = (witness or ServerClocks()).observe(zk, clock, blocks)
    warnings = timekeeping.clock_warnings(seen.instant)
    for warning in warnings:
        log.warning("orphan cycle %s: %s", run_id, warning)
    return seen.sequence, seen.instant, warnings
