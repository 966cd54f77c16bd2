"""What the phases step needs of a survey's snapshot, which stays in the survey's Spark
application (``s3_source.SnapshotFacts`` reads the record back): small, because it covers
only the source's registered targets (the rows that say why one is no orphan any more) and the
highest ledger id the metadata lists or marks.

The registered targets are filters (``isin``: a hash set in the JVM), not joins with a
DataFrame made on the driver: that costs a Python worker and two jobs per lookup.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ledger_gc.errors import LedgerGcError
from ledger_gc.rules.orphans.classify import (
    OFFLOAD_ORPHAN_CLASSES,
    ORPHAN_CLASSES,
    ORPHAN_SEGMENT,
)
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.s3_orphans import reading
from ledger_gc.spark.session import job_error

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_ROW_COLUMNS = ("entry_type", "ml_name", "ledger_id", "offload_uuid", "offload_place")


def registered_facts(snapshot: DataFrame, registered: Iterable[RegistryEntry]) -> dict[str, Any]:
    """``ml_rows``: the snapshot rows of the managed ledgers of registered orphan ledgers
    and partitions (their ML rows, and the rows of the registered ledger ids);
    ``ledger_rows``: every row that references the ledger id of a registered orphan
    segment. One pass over the snapshot, none with nothing registered. ``registered``
    (streamed) is read once, and only the names and ids of this source's targets are
    kept (which entries the survey saw is the engine's mark, not a list here)."""
    from pyspark.sql import functions as F

    names: set[str] = set()
    pairs: set[tuple[str, int]] = set()
    ids: set[int] = set()
    for e in registered:
        # Facts of this source's targets only: another source's (BookKeeper's ledgers)
        # are its own to explain, and tens of thousands in an ``isin`` cost seconds.
        if e.target_class not in ORPHAN_CLASSES:
            continue
        if e.target_class not in OFFLOAD_ORPHAN_CLASSES:
            names.add(e.ml_name)
            if e.ledger_id is not None:
                pairs.add((e.ml_name, e.ledger_id))
        elif e.target_class == ORPHAN_SEGMENT and e.ledger_id is not None:
            ids.add(e.ledger_id)
    ml_names, segment_ids = sorted(names), sorted(ids)
    is_ml = F.col("entry_type") == reading.ML_ROW
    wanted = []
    if ml_names:
        wanted.append(is_ml & F.col("ml_name").isin(ml_names))
    if pairs:
        wanted.append(
            ~is_ml
            & F.col("ml_name").isin(sorted({name for name, _ in pairs}))
            & F.col("ledger_id").isin(sorted({ledger for _, ledger in pairs}))
        )
    if segment_ids:
        wanted.append(~is_ml & F.col("ledger_id").isin(segment_ids))
    rows: list[list[Any]] = []
    if wanted:
        condition = wanted[0]
        for more in wanted[1:]:
            condition = condition | more
        try:
            found = snapshot.where(condition).select(*_ROW_COLUMNS).collect()
        except Exception as exc:
            raise job_error("the diff", exc) from exc
        rows = [list(row) for row in found]
    return {
        "ml_rows": [
            row
            for row in rows
            if (row[0] == reading.ML_ROW and row[1] in names)
            or (row[0] != reading.ML_ROW and (row[1], row[2]) in pairs)
        ],
        "ledger_rows": [row for row in rows if row[0] != reading.ML_ROW and row[2] in ids],
    }


def metadata_max_ledger_id(snapshot: DataFrame) -> int | None:
    """The highest ledger id any managed ledger lists or marks (None: no ledger at all)."""
    from pyspark.sql import functions as F

    try:
        row = snapshot.where(F.col("entry_type") != reading.ML_ROW).agg(F.max("ledger_id")).first()
    except LedgerGcError:
        raise
    except Exception as exc:
        raise job_error("the diff", exc) from exc
    return None if row is None or row[0] is None else int(row[0])
