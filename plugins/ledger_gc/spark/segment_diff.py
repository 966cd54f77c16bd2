"""The diff of the offload bucket (tiered storage): its objects classified against the
snapshot by ``segments.py``'s rule (``segments.diff_segments`` is the reference), as a
join, into the store's ``DiffResult``.

Whose segments (``segments.our_clusters``) needs user metadata a listing does not
carry: a few live data objects and every orphan-looking one are read with a HEAD
(``cluster_tags``) from the driver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import LedgerGcError
from ledger_gc.rules.orphans import classify, segments
from ledger_gc.rules.orphans.classify import (
    LIVE_SEGMENT,
    NO_NAMESPACE,
    OFFLOAD_FOREIGN,
    ORPHAN_SEGMENT,
    OTHER_BUCKET_SEGMENT,
    Candidate,
    DiffResult,
)
from ledger_gc.rules.storage import keys
from ledger_gc.s3_orphans import cluster_tags, reading
from ledger_gc.spark.diff import MAX_FOREIGN_SAMPLES
from ledger_gc.spark.session import job_error

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


#: A GCS multipart part below the offload prefix (``offload_keys.parse_upload_part``).
UPLOAD_PART_RE_JAVA = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}_[0-9]{8}\z"


def _other_buckets(
    snapshot: DataFrame, rows: list[Any], bucket: str, base: str, result: DiffResult
) -> None:
    """Segments whose ledgers were offloaded to another driver or bucket: counted and a
    few listed (``segments.add_other_bucket``), with the places their ledgers name."""
    from pyspark.sql import functions as F

    ids = sorted({int(row["ledger_id"]) for row in rows})
    owners: dict[int, list[segments.Owner]] = {}
    for found in (
        snapshot.where((F.col("entry_type") != reading.ML_ROW) & F.col("ledger_id").isin(ids))
        .select("ml_name", "ledger_id", "offload_uuid", "offload_place")
        .collect()
    ):
        owners.setdefault(int(found["ledger_id"]), []).append(
            segments.Owner(found["ml_name"], found["offload_uuid"], found["offload_place"])
        )
    for row in sorted(rows, key=lambda r: (r["uuid"], r["ledger_id"])):
        ledger_id = int(row["ledger_id"])
        data_key = f"{base}{row['uuid']}-ledger-{ledger_id}"
        result.segment_objects += int(row["objects"])
        segments.add_other_bucket(
            result,
            bucket,
            data_key,
            owners.get(ledger_id, []),
            row["uuid"],
            int(row["objects"]),
            int(row["bytes"]),
        )


def diff_segments(
    snapshot: DataFrame,
    objects: DataFrame,
    stores: tuple[ObjectStore, ObjectStore],
    pulsar_clusters: tuple[str, ...],
    result: DiffResult,
    offload: dict[str, Any],
    *,
    max_foreign_samples: int = MAX_FOREIGN_SAMPLES,
) -> None:
    """The offload bucket's ``objects`` (its scan) into ``result`` (``segments.py``'s
    rule as a join); ``offload`` is that scan's record (``scan.scan_offload``);
    ``stores``: the block store and tiered storage; ``pulsar_clusters``: the clusters
    named ours (``LEDGERGC_PULSAR_CLUSTER``; empty: learned from live segments).

    Live is (uuid, ledger id) carried by a listed or marked ledger anywhere in the
    snapshot; ledger ids are store-wide unique, so the join is by id, not by name.
    """
    try:
        _diff_segments(
            snapshot, objects, stores, pulsar_clusters, result, offload, max_foreign_samples
        )
    except LedgerGcError:
        raise
    except Exception as exc:
        raise job_error("the diff", exc) from exc


def _diff_segments(
    snapshot: DataFrame,
    objects: DataFrame,
    stores: tuple[ObjectStore, ObjectStore],
    pulsar_clusters: tuple[str, ...],
    result: DiffResult,
    offload: dict[str, Any],
    max_foreign_samples: int,
) -> None:
    from pyspark.sql import functions as F

    blocks, offload_store = stores
    bucket, base = offload["bucket"], offload_store.key_prefix
    if base:
        # An inventory of the whole bucket: keys outside the prefix are not ours to judge.
        objects = objects.where(F.col("key").startswith(base))
    rest = F.col("key").substr(len(base) + 1, 1 << 30)
    uuid = F.regexp_extract(rest, segments.SEGMENT_RE_JAVA, 1)
    ledger_text = F.regexp_extract(rest, segments.SEGMENT_RE_JAVA, 2)
    is_segment = (uuid != "") & (ledger_text.cast("decimal(20,0)") <= F.lit(keys.MAX_ID))
    parsed = objects.select(
        "key",
        "size",
        "last_modified",
        F.coalesce(is_segment, F.lit(False)).alias("is_segment"),
        uuid.alias("uuid"),
        ledger_text.alias("ledger_text"),
    )
    here = (offload_store.driver, offload_store.bucket)
    referenced = snapshot.where(F.col("entry_type") != reading.ML_ROW)
    # Carried here: by a ledger whose driverMetadata names this driver family and
    # bucket (or names neither); carried only elsewhere: an other-bucket segment.
    place = F.col("offload_place")
    family = F.substring_index(place, "/", 1)
    named_bucket = F.expr("substring(offload_place, instr(offload_place, '/') + 1)")
    at_here = place.isNull() | (
        ((family == "") | (family == here[0])) & ((named_bucket == "") | (named_bucket == here[1]))
    )
    carriers = (
        referenced.where(F.col("offload_uuid").isNotNull())
        .select("ledger_id", F.col("offload_uuid").alias("uuid"), at_here.alias("here"))
        .groupBy("ledger_id", "uuid")
        .agg(F.max(F.col("here").cast("int")).alias("here"))
        .withColumn("carried", F.lit(True))
    )
    carried_here = carriers.where(F.col("here") == 1).drop("here")
    owners = referenced.groupBy("ledger_id").agg(F.min("ml_name").alias("owner"))
    grouped = (
        parsed.where(F.col("is_segment"))
        .groupBy("uuid", F.col("ledger_text").cast("long").alias("ledger_id"))
        .agg(
            F.count("*").alias("objects"),
            F.sum("size").alias("bytes"),
            F.max("last_modified").alias("newest_ms"),
            F.min("last_modified").alias("oldest_ms"),
        )
        .join(carriers, ["ledger_id", "uuid"], "left")
        .join(owners, "ledger_id", "left")
        .withColumn(
            "class",
            F.when(F.col("here") == 1, LIVE_SEGMENT)
            .when(F.col("carried"), OTHER_BUCKET_SEGMENT)
            .otherwise(ORPHAN_SEGMENT),
        )
    )
    live = (
        grouped.where(F.col("class") == LIVE_SEGMENT)
        .groupBy("owner")
        .agg(
            F.count("*").alias("units"),
            F.sum("objects").alias("objects"),
            F.sum("bytes").alias("b"),
        )
    )
    for row in live.collect():
        namespace = classify.namespace_of_ml(row["owner"] or "")
        result.add(namespace, LIVE_SEGMENT, int(row["objects"]), int(row["b"]), int(row["units"]))
        result.segment_objects += int(row["objects"])
    # Whose segments (segments.our_clusters): listings carry no user metadata, so a few
    # live data objects and every orphan-looking one are read with a HEAD (cluster_tags).
    live_keys = (
        parsed.where(F.col("is_segment") & ~F.col("key").endswith("-index"))
        .withColumn("ledger_id", F.col("ledger_text").cast("long"))
        .join(carried_here, ["ledger_id", "uuid"], "inner")
        .select("key")
        .limit(segments.MAX_LIVE_SAMPLE * 8)
        .collect()
    )
    to_learn = segments.live_sample([row["key"] for row in live_keys])
    learned = cluster_tags.read_segment_tags(offload_store, to_learn)
    ours = segments.our_clusters(
        pulsar_clusters, [learned[key] for key in to_learn if key in learned]
    )
    result.our_clusters = ours
    elsewhere = grouped.where(F.col("class") == OTHER_BUCKET_SEGMENT).collect()
    if elsewhere:
        _other_buckets(snapshot, elsewhere, bucket, base, result)
    orphan_rows = grouped.where(F.col("class") == ORPHAN_SEGMENT).collect()
    data_keys = [f"{base}{row['uuid']}-ledger-{int(row['ledger_id'])}" for row in orphan_rows]
    tags = cluster_tags.read_segment_tags(offload_store, data_keys)
    for row, data_key in sorted(zip(orphan_rows, data_keys, strict=True), key=lambda p: p[1]):
        result.segment_objects += int(row["objects"])
        candidate = Candidate(
            ORPHAN_SEGMENT,
            row["owner"] or "",
            int(row["ledger_id"]),
            int(row["objects"]),
            int(row["bytes"]),
            int(row["newest_ms"]),
            int(row["oldest_ms"]),
            segment=f"{bucket}/{data_key}",
        )
        segments.add_orphan_or_other(result, candidate, data_key, bucket, tags, ours)
    foreign = parsed.where(~F.col("is_segment"))
    if segments.has_upload_parts(offload_store.driver):
        is_part = F.col("key").substr(len(base) + 1, 1 << 30).rlike(UPLOAD_PART_RE_JAVA)
        for part in foreign.where(is_part).orderBy("key").collect():
            segments.add_upload_part(
                result, bucket, part["key"], int(part["size"]), int(part["last_modified"])
            )
        foreign = foreign.where(~is_part)
    row = foreign.agg(F.count("*").alias("n"), F.sum("size").alias("b")).collect()[0]
    if row["n"]:
        result.add(NO_NAMESPACE, OFFLOAD_FOREIGN, int(row["n"]), int(row["b"] or 0), 0)
        room = max(0, max_foreign_samples - len(result.foreign_samples))
        for sample in sorted(r["key"] for r in foreign.select("key").limit(room).collect()):
            result.foreign_samples.append(
                {"key": f"{bucket}/{sample}", "reason": "not an offloaded-ledger segment"}
            )
    everything = objects.agg(F.count("*").alias("n"), F.sum("size").alias("b")).collect()[0]
    result.offload_objects = int(everything["n"])
    result.offload_bytes = int(everything["b"] or 0)
    # A bucket shared with the ledger scan: what it listed too is in the totals already.
    overlap = segments.counted_by_ledger_scan(blocks, offload_store)
    if overlap is None:
        result.objects += result.offload_objects
        result.bytes += result.offload_bytes
    else:
        own = objects.where(~F.col("key").startswith(overlap))
        counted = own.agg(F.count("*").alias("n"), F.sum("size").alias("b")).collect()[0]
        result.objects += int(counted["n"])
        result.bytes += int(counted["b"] or 0)
