"""What an engine decides by, resolved at the edge with the endpoints (``edge.policy``).

The settings that are neither a place nor a credential: how long an orphan waits, how
old it must be, whether anything is deleted, the guards' bounds, BookKeeper's sharing.
The engines, the sources and the Spark tasks receive this frozen value (pickled with a
task as it is), never the ``Settings`` it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ledger_gc.rules.trim.eligibility import TrimRetention


@dataclass(frozen=True)
class Policy:
    """An orphan cycle's and a trim's decisions, as the settings of their run say."""

    #: ``LEDGERGC_DELETE_ENABLED``: without it a cycle registers and reports only.
    delete_enabled: bool = False
    #: ``LEDGERGC_GRACE_SECONDS``: how long an orphan stays registered before it can go.
    grace_seconds: int = 0
    #: ``LEDGERGC_RETENTION_SECONDS``: how old (on the servers' clocks) it must be.
    retention_seconds: int = 0
    #: ``LEDGERGC_ORPHAN_MAX_FRACTION``: the byte-fraction guard.
    orphan_max_fraction: float = 1.0
    #: ``LEDGERGC_ORPHAN_LOCK_WAIT_SECONDS``: how long a cycle waits for the delete lock.
    orphan_lock_wait_seconds: float = 0.0
    #: ``LEDGERGC_ORPHAN_DELETE_SPARK_OVER``: more due entries than this go to executors.
    orphan_delete_spark_over: int = 0
    #: ``LEDGERGC_BK_SHARED``: other Pulsar clusters write to this BookKeeper.
    bk_shared: bool = False
    #: ``LEDGERGC_BK_RECORD_CACHE`` and ``LEDGERGC_BK_FULL_READ_EVERY``.
    bk_record_cache: bool = True
    bk_full_read_every: int = 7
    #: ``LEDGERGC_BK_RECORD_CACHE_KEEP_DAYS``: rows no cycle used for so long are dropped.
    bk_record_cache_keep_days: int = 30
    #: ``LEDGERGC_BK_REMOVE_UNREADABLE``: an unreferenced ``bk-unreadable`` ledger goes
    #: under the three phases (Pulsar 13480: it stops BookKeeper's auditor).
    bk_remove_unreadable: bool = False
    #: ``LEDGERGC_PULSAR_CLUSTER``: the clusters whose segments are ours (empty: learned).
    pulsar_clusters: tuple[str, ...] = ()
    #: ``LEDGERGC_METADATA_READ_ONLY``: ``auto``, ``true`` or ``false``.
    metadata_read_only: str = "auto"
    #: ``LEDGERGC_TRIM_RETENTION_*`` and its overrides by namespace (the trim's).
    trim_retention: TrimRetention = field(default_factory=TrimRetention)
    trim_retention_overrides: Mapping[str, TrimRetention] = field(default_factory=dict)

    def retention_for(self, ml_name: str) -> TrimRetention:
        """The trim retention of a managed ledger: its namespace's override, or the default."""
        namespace = "/".join(ml_name.split("/")[:2])
        return self.trim_retention_overrides.get(namespace, self.trim_retention)
