"""A reference model of Apache Pulsar's trim decision, transcribed from its source.

This is a test oracle, deliberately written in the shape of the Java it models rather
than reused from ``ledger_gc.rules.trim.eligibility``, so that a property test can hold the
trim's choice to it. Sources (apache/pulsar, managed-ledger module):

* ``ManagedLedgerImpl.internalTrimLedgers``: the slowest reader's ledger, the walk over
  ``ledgers.headMap(slowestReaderLedgerId, false)`` in ascending id order, the break at
  the current ledger, ``totalSizeToDelete`` grown *before* the retention checks, and the
  break at the first ledger that neither check lets go;
* ``hasLedgerRetentionExpired``: ``retentionTimeMs >= 0 && now - ts > retentionTimeMs``;
* ``isLedgerRetentionOverSizeQuota``: ``retentionSize >= 0 && totalSize - sizeToDelete
  >= retentionSize``, with ``totalSize`` (``TOTAL_SIZE_UPDATER``) counting every entry
  added, so the open ledger's bytes too (``OpAddEntry``);
* ``MetaStoreImpl.updateMLInfoTimestamp``: a ``LedgerInfo`` without a timestamp, or 0,
  gets the time the record was loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class JavaLedgerInfo:
    ledger_id: int
    entries: int
    size: int
    timestamp: int  # 0: not set


def internal_trim_ledgers(
    stored_ledgers: Sequence[JavaLedgerInfo],
    durable_mark_deletes: Sequence[tuple[int, int]],
    retention_time_ms: int,
    retention_size_bytes: int,
    now_ms: int,
    load_time_ms: int,
    current_ledger_bytes: int,
) -> list[int]:
    """The ids ``internalTrimLedgers(isTruncate=false)`` deletes, for a broker that loaded
    ``stored_ledgers`` at ``load_time_ms`` and has written ``current_ledger_bytes`` to its
    current (last) ledger since."""
    # MetaStoreImpl: missing or zero timestamps become the load time.
    loaded = [
        JavaLedgerInfo(li.ledger_id, li.entries, li.size, li.timestamp or load_time_ms)
        for li in stored_ledgers
    ]
    # ManagedLedgerImpl.ledgers is a ConcurrentSkipListMap<Long, LedgerInfo>.
    ledgers = {li.ledger_id: li for li in loaded}
    if not ledgers:
        return []
    current_ledger_id = max(ledgers)
    total_size = sum(li.size for li in ledgers.values() if li.ledger_id != current_ledger_id)
    total_size += current_ledger_bytes

    if not durable_mark_deletes:
        slowest_reader_ledger_id = current_ledger_id + 1
    else:
        ledger_id, entry_id = min(durable_mark_deletes)  # getSlowestReaderPosition()
        li = ledgers.get(ledger_id)
        if li is not None and li.ledger_id != current_ledger_id and li.entries == entry_id + 1:
            slowest_reader_ledger_id = ledger_id + 1
        else:
            slowest_reader_ledger_id = ledger_id

    to_delete: list[int] = []
    total_size_to_delete = 0
    for key in sorted(k for k in ledgers if k < slowest_reader_ledger_id):  # headMap(.., false)
        ls = ledgers[key]
        if ls.ledger_id == current_ledger_id:
            break
        total_size_to_delete += ls.size
        over_retention_quota = (
            retention_size_bytes >= 0 and total_size - total_size_to_delete >= retention_size_bytes
        )
        expired = retention_time_ms >= 0 and now_ms - ls.timestamp > retention_time_ms
        if expired or over_retention_quota:
            to_delete.append(ls.ledger_id)
        else:
            break
    return to_delete
