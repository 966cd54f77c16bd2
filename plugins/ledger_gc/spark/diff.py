"""The diff job: every object of the scan classified against the snapshot by
classify.py's rules (``classify.diff_objects`` is the reference), in Spark SQL with no
Python UDF, aggregated per class and namespace, with the orphan candidates.

Scale rule (issue 6: a 10M-object inventory diff in minutes with a small driver): the
object list is never collected to the driver. Only the orphan candidates, the totals
per namespace and class and a few sample foreign keys come back.

Where the time goes (``docs/BENCHMARKS.md``, figure 1): reading and grouping every key;
each further Spark job and shuffle is fixed cost. So the snapshot's references join the
objects *inside* the one aggregation that groups the keys by ledger directory (a union,
not a join: one shuffle, and no million-row broadcast), and one action returns the
totals and the candidates together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import LedgerGcError
from ledger_gc.rules.orphans import classify
from ledger_gc.rules.orphans.classify import (
    FOREIGN,
    LIVE,
    MARKED,
    NO_NAMESPACE,
    ORPHAN_LEDGER,
    ORPHAN_PARTITION,
    Candidate,
    DiffResult,
)
from ledger_gc.rules.storage import keys
from ledger_gc.s3_orphans import reading
from ledger_gc.spark.session import job_error

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Foreign keys quoted in the report (the first ones met; all are counted).
MAX_FOREIGN_SAMPLES = 50

# The largest ledger or entry id (a Java long) as the 20 digits of a key: for ids of
# exactly 20 digits, string order is numeric order, so no decimal cast per row is needed.
_MAX_ID_TEXT = f"{keys.MAX_ID:0{keys.ID_WIDTH}d}"

# How a snapshot row references its ledger (listed wins over marked, should both appear).
_LISTED_REF = 2
_MARKED_REF = 1


@dataclass(frozen=True)
class BlockDiff:
    """The diff of the store's blocks, and for each managed ledger with an orphan-ledger
    candidate the highest ledger id it lists or marks (None: none; the horizon)."""

    result: DiffResult
    ml_high: dict[str, int | None]


def diff_blocks(
    snapshot: DataFrame,
    objects: DataFrame,
    store: ObjectStore,
    *,
    managed_ledgers: int,
    max_foreign_samples: int = MAX_FOREIGN_SAMPLES,
) -> BlockDiff:
    """Classify ``objects`` (the scan's ``key, size, last_modified``) against
    ``snapshot`` (``entry_type, ml_name, ledger_id, ...``) under ``store.prefix``;
    ``managed_ledgers`` is the snapshot's count (the report's)."""
    try:
        summary = _summary(_classified(snapshot, objects, store.key_prefix)).collect()
        diff = _result(summary, managed_ledgers)
        diff.result.foreign_samples = _foreign_samples(
            objects, store, diff.result.classes[FOREIGN].objects, max_foreign_samples
        )
    except LedgerGcError:
        raise
    except Exception as exc:
        raise job_error("the diff", exc) from exc
    return diff


def _directory_groups(snapshot: DataFrame, objects: DataFrame, base: str) -> DataFrame:
    """One pass over the objects: a row per ledger directory (for foreign keys: per the
    six first segments of the key) with its objects, bytes, newest and oldest object and
    how the snapshot references it (``ref``: listed, marked or null).

    Per key only cheap work: the first six ``/``-separated segments (the ledger
    directory, the group key) and a check of the last one (``ENTRY_FILE_RE_JAVA``, 24
    characters); the long pattern is matched once per group (``_typed``), ~10x fewer.
    The snapshot's references enter the same aggregation as rows keyed by their ledger
    directory (``ledger_dir``'s form), with no object: a directory with no object is
    dropped after it, so the result is the left join of the objects' groups with the
    references, for one shuffle instead of three.
    """
    from pyspark.sql import functions as F

    key = F.col("key")
    # The key up to its ledger directory, the prefix included (cut once per group), and
    # its last segment; byte lengths (no character count) tell that nothing lies between.
    prefixed_directory = F.substring_index(key, "/", 6 + base.count("/"))
    entry = F.substring_index(key, "/", -1)
    entry_ok = (
        # Exactly seven segments after the prefix: the directory's six, then the entry.
        (F.octet_length(key) == F.octet_length(prefixed_directory) + 1 + F.octet_length(entry))
        & entry.rlike(classify.ENTRY_FILE_RE_JAVA)
        & (F.substring(entry, 1, keys.ID_WIDTH) <= _MAX_ID_TEXT)
    )
    in_prefix = key.startswith(base) if base else F.lit(True)
    no_long = F.lit(None).cast("long")
    stored = objects.select(
        F.when(in_prefix, prefixed_directory).alias("prefixed"),
        F.coalesce(in_prefix & entry_ok, F.lit(False)).alias("entry_ok"),
        F.lit(1).alias("object"),
        "size",
        "last_modified",
        F.lit(None).cast("int").alias("ref"),
    )
    entry_type = F.col("entry_type")
    referenced = snapshot.where(entry_type != reading.ML_ROW).select(
        # ledger_dir(base, ml_name, ledger_id) without its trailing "/": a block's group.
        F.concat(
            F.lit(base),
            F.col("ml_name"),
            F.lit(f"/{keys.LEDGERS_DIR}/"),
            F.lpad(F.col("ledger_id").cast("string"), keys.ID_WIDTH, "0"),
        ).alias("prefixed"),
        F.lit(True).alias("entry_ok"),
        F.lit(None).cast("int").alias("object"),
        no_long.alias("size"),
        no_long.alias("last_modified"),
        F.when(entry_type == reading.LISTED_ROW, _LISTED_REF).otherwise(_MARKED_REF).alias("ref"),
    )
    return (
        stored.unionByName(referenced)
        .groupBy("prefixed", "entry_ok")
        .agg(
            F.count("object").alias("objects"),
            F.sum("size").alias("bytes"),
            F.max("last_modified").alias("newest_ms"),
            F.min("last_modified").alias("oldest_ms"),
            F.max("ref").alias("ref"),
        )
        .where(F.col("objects") > 0)
        .withColumn("directory", F.col("prefixed").substr(len(base) + 1, 1 << 30))
    )


def _typed(groups: DataFrame) -> DataFrame:
    """Each group's block test, namespace, managed ledger and ledger id (once per group)."""
    from pyspark.sql import functions as F

    directory = F.col("directory")
    ledger_text = F.substring_index(directory, "/", -1)
    # A column of its own, which the expressions below read: written into each of them,
    # the long pattern would be matched once per use (Spark keeps an expensive column
    # referenced several times in a projection of its own rather than repeat it).
    typed = groups.withColumn(
        "is_block",
        F.coalesce(
            F.col("entry_ok")
            & directory.rlike(classify.LEDGER_DIR_RE_JAVA)
            & (ledger_text <= _MAX_ID_TEXT),
            F.lit(False),
        ),
    )
    is_block = F.col("is_block")
    # A foreign key's namespace: the pattern needs only its first four segments, which
    # its directory (its first six) holds.
    ns_hint = F.regexp_extract(directory, classify.NAMESPACE_RE_JAVA, 1)
    return typed.select(
        is_block,
        F.when(is_block, F.substring_index(directory, "/", 2))
        .when(directory.isNotNull() & (ns_hint != ""), ns_hint)
        .otherwise(NO_NAMESPACE)
        .alias("namespace"),
        F.when(is_block, F.substring_index(directory, "/", 4)).otherwise("").alias("ml_name"),
        F.when(is_block, ledger_text.cast("long")).alias("ledger_id"),
        "objects",
        "bytes",
        "newest_ms",
        "oldest_ms",
        "ref",
    )


def _managed_ledgers(snapshot: DataFrame) -> DataFrame:
    """Per managed ledger of the snapshot: that it exists (its znode was read) and the
    highest ledger id it lists or marks (``high``)."""
    from pyspark.sql import functions as F

    is_ml = F.col("entry_type") == reading.ML_ROW
    return snapshot.groupBy("ml_name").agg(
        F.max(is_ml).alias("ml_exists"),
        F.max(F.when(~is_ml, F.col("ledger_id"))).alias("high"),
    )


def _classified(snapshot: DataFrame, objects: DataFrame, base: str) -> DataFrame:
    """Every group with its class (classify.py's rules)."""
    from pyspark.sql import functions as F

    typed = _typed(_directory_groups(snapshot, objects, base))
    return typed.join(_managed_ledgers(snapshot), "ml_name", "left").withColumn(
        "class",
        F.when(~F.col("is_block"), FOREIGN)
        .when(F.col("ref") == _LISTED_REF, LIVE)
        .when(F.col("ref") == _MARKED_REF, MARKED)
        .when(F.col("ml_exists"), ORPHAN_LEDGER)
        .otherwise(ORPHAN_PARTITION),
    )


def _summary(classified: DataFrame) -> DataFrame:
    """One row per namespace and class, except the orphans: one row per orphan ledger
    directory (the candidates), with its managed ledger's ``high``. Few rows: one action
    brings the totals and the candidates back."""
    from pyspark.sql import functions as F

    orphan = F.col("class").isin(ORPHAN_LEDGER, ORPHAN_PARTITION)
    return classified.groupBy(
        "namespace",
        "class",
        F.when(orphan, F.col("ml_name")).alias("orphan_ml"),
        F.when(orphan, F.col("ledger_id")).alias("orphan_ledger"),
    ).agg(
        F.count("*").alias("units"),
        F.sum("objects").alias("objects"),
        F.sum("bytes").alias("bytes"),
        F.max("newest_ms").alias("newest_ms"),
        F.min("oldest_ms").alias("oldest_ms"),
        F.max("high").alias("high"),
    )


def _result(summary: list[Any], managed_ledgers: int) -> BlockDiff:
    """The ``DiffResult`` of the summary rows (``_summary``)."""
    result = DiffResult(managed_ledgers=managed_ledgers)
    ml_high: dict[str, int | None] = {}
    orphan_totals: dict[tuple[str, str], list[int]] = {}
    partitions: dict[str, list[int]] = {}
    for row in summary:
        name, namespace = row["class"], row["namespace"]
        objects, size = int(row["objects"]), int(row["bytes"] or 0)
        if name == FOREIGN:
            result.add(namespace, FOREIGN, objects, size, 0)
            continue
        result.block_objects += objects
        if name not in (ORPHAN_LEDGER, ORPHAN_PARTITION):
            result.add(namespace, name, objects, size, int(row["units"]))
            continue
        total = orphan_totals.setdefault((namespace, name), [0, 0, 0])
        total[0] += objects
        total[1] += size
        total[2] += int(row["units"])
        ml_name, ledger_id = row["orphan_ml"], int(row["orphan_ledger"])
        newest, oldest = int(row["newest_ms"]), int(row["oldest_ms"])
        if name == ORPHAN_LEDGER:
            result.candidates.append(
                Candidate(ORPHAN_LEDGER, ml_name, ledger_id, objects, size, newest, oldest)
            )
            ml_high[ml_name] = None if row["high"] is None else int(row["high"])
        else:
            part = partitions.setdefault(ml_name, [0, 0, 0, 2**63, 0])
            part[0] += objects
            part[1] += size
            part[2] = max(part[2], newest)
            part[3] = min(part[3], oldest)
            part[4] = max(part[4], ledger_id)
    for ml_name, (count, size, newest, oldest, top) in partitions.items():
        result.candidates.append(
            Candidate(ORPHAN_PARTITION, ml_name, None, count, size, newest, oldest, top)
        )
    result.candidates.sort(key=lambda c: (c.target_class, c.ml_name, c.ledger_id or -1))
    for (namespace, name), (objects, size, units) in orphan_totals.items():
        if name == ORPHAN_PARTITION:
            # A partition's unit is its managed ledger, not each ledger directory in it.
            units = sum(
                1 for c in result.candidates if c.ledger_id is None and c.namespace == namespace
            )
        result.add(namespace, name, objects, size, units)
    result.objects = sum(t.objects for t in result.classes.values())
    result.bytes = sum(t.bytes for t in result.classes.values())
    return BlockDiff(result, ml_high)


def _is_block_key(base: str) -> Column:
    """Whether a key is a block of the store (``BLOCK_RE_JAVA`` in one match; ids
    compared as 20-digit strings): the per-key form of the two-step test above."""
    from pyspark.sql import functions as F

    in_prefix = F.col("key").startswith(base) if base else F.lit(True)
    rest = F.col("key").substr(len(base) + 1, 1 << 30)
    parts = F.split(rest, "/", 8)
    # tenant/ns/persistent/topic/ledgers/<ledger id>/<entry id>.blk
    ledger_text = parts.getItem(5)
    entry_text = F.substring(parts.getItem(6), 1, keys.ID_WIDTH)
    shaped = in_prefix & rest.rlike(classify.BLOCK_RE_JAVA)
    return F.coalesce(
        shaped & (ledger_text <= _MAX_ID_TEXT) & (entry_text <= _MAX_ID_TEXT), F.lit(False)
    )


def _foreign_samples(
    objects: DataFrame, store: ObjectStore, foreign_objects: int, limit: int
) -> list[dict[str, str]]:
    """A few foreign keys with the reason they are foreign (for the report): the first
    ones the scan meets, so only the start of it is read again."""
    if not foreign_objects or limit <= 0:
        return []
    rows = objects.where(~_is_block_key(store.key_prefix)).select("key").limit(limit).collect()
    samples = []
    for row in sorted(rows, key=lambda r: r["key"]):
        parsed_key = keys.parse_key(store.prefix, row["key"])
        samples.append({"key": row["key"], "reason": parsed_key.reason or "not a block"})
    return samples
