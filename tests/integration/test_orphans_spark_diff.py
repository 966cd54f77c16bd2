"""The Spark diff says exactly what the reference diff (classify.diff_objects) says, from a
listing or from an S3 Inventory report (Parquet, or CSV with URL-encoded keys)."""

from __future__ import annotations

import datetime as dt
import urllib.parse
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ledger_gc.config.edge import block_store, resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans import survey_steps
from ledger_gc.orphans.layout import SCAN, SNAPSHOT, RunPaths
from ledger_gc.orphans.records import DiffRecord
from ledger_gc.orphans.run_steps import RunSteps
from ledger_gc.rules.orphans.classify import StoredObject, diff_objects
from ledger_gc.rules.storage.keys import block_key, ledger_dir
from ledger_gc.s3_orphans.reading import LISTED_ROW, MARKED_ROW, ML_ROW, snapshot_from_rows
from ledger_gc.spark.inventory import read_inventory
from ledger_gc.spark.scan import OBJECT_SCHEMA
from ledger_gc.spark.session import configure_session
from ledger_gc.spark.snapshot import SNAPSHOT_SCHEMA

pytestmark = pytest.mark.spark

PREFIX = "ledgers"
LIVE = "t1/ns1/persistent/orders"
ENCODED = "t1/ns2/persistent/my%20topic"
GONE = "t2/ns1/persistent/deleted"
# (entry type, managed ledger, ledger id, offload uuid, offload place)
SNAPSHOT_ROWS = [
    (ML_ROW, LIVE, None, None, None),
    (LISTED_ROW, LIVE, 10, None, None),
    (MARKED_ROW, LIVE, 7, None, None),
    (ML_ROW, ENCODED, None, None, None),
    (LISTED_ROW, ENCODED, 20, None, None),
    (ML_ROW, "t3/ns/persistent/empty", None, None, None),
]
BLOCKS = [
    block_key(PREFIX, LIVE, 10, 0),
    block_key(PREFIX, LIVE, 10, 100),
    block_key(PREFIX, LIVE, 7, 0),
    block_key(PREFIX, LIVE, 3, 0),
    block_key(PREFIX, LIVE, 3, 5),
    block_key(PREFIX, LIVE, 4, 0),
    block_key(PREFIX, ENCODED, 20, 0),
    block_key(PREFIX, ENCODED, 21, 0),
    block_key(PREFIX, GONE, 1, 0),
    block_key(PREFIX, GONE, 2, 0),
    block_key(PREFIX, "t2/ns1/persistent/...", 2, 0),
    block_key(PREFIX, LIVE, 2**63 - 1, 2**63 - 1),
]
FOREIGN = [
    f"{PREFIX}/README",
    f"{PREFIX}/t1/README",
    f"{PREFIX}/t1/ns1/persistent/orders",
    f"{PREFIX}/t1/ns1/persistent/orders/notes.txt",
    f"{ledger_dir(PREFIX, LIVE, 3)}",
    f"{ledger_dir(PREFIX, LIVE, 3)}00000000000000000000.blk\n",
    f"{ledger_dir(PREFIX, LIVE, 3)}00000000000000000000.BLK",
    f"{ledger_dir(PREFIX, LIVE, 3)}x/00000000000000000000.blk",
    f"{PREFIX}/t1/ns1/persistent/orders/ledgers/0000000000000000003/00000000000000000000.blk",
    f"{PREFIX}/t1/ns1/persistent/orders/ledgers/99999999999999999999/00000000000000000000.blk",
    f"{PREFIX}/t1/ns1/persistent/orders/ledgers/0000000000000000000٣/00000000000000000000.blk",
    f"{PREFIX}/t1/./persistent/x/ledgers/00000000000000000001/00000000000000000000.blk",
    f"{PREFIX}/t1/ns1/other/x/ledgers/00000000000000000001/00000000000000000000.blk",
    f"{PREFIX}/t1/ns1/persistent/a b/ledgers/00000000000000000001/00000000000000000000.blk",
    # Shapes the diff's two-step test (a ledger directory, then its entry file) must refuse.
    f"{ledger_dir(PREFIX, LIVE, 3)}00000000000000000000.blk/00000000000000000000.blk",
    f"{PREFIX}/t1/ns1/persistent/orders/ledgers/00000000000000000003//00000000000000000000.blk",
    f"{ledger_dir(PREFIX, LIVE, 3)}0000000000000000000a.blk",
    f"{PREFIX}/t1/ns1/persistent/orders/ledgers/00000000000000000003/99999999999999999999.blk",
    f"{PREFIX}/t9/ns9/persistent/t/ledgers/00000000000000000003",
]
BASE_MS = 1_780_000_000_000
OBJECTS = [StoredObject(key, 100 + i, BASE_MS + i * 1000) for i, key in enumerate(BLOCKS + FOREIGN)]


def _prepare_run(spark: Any, settings: Settings, run_id: str, listed: bool) -> RunPaths:
    run = RunPaths(settings.state_dir, run_id)
    survey_steps.hold(run, SNAPSHOT, spark.createDataFrame(SNAPSHOT_ROWS, SNAPSHOT_SCHEMA))
    steps = RunSteps(settings, run_id)
    steps.write_manifest(SNAPSHOT, {"started_ms": 1, "managed_ledgers": 3})
    if listed:
        rows = [(o.key, o.size, o.last_modified) for o in OBJECTS]
        survey_steps.hold(run, SCAN, spark.createDataFrame(rows, OBJECT_SCHEMA))
        steps.write_manifest(SCAN, {"started_ms": 2, "source": "listing"})
    return run


def _assert_same_as_reference(record: DiffRecord, settings: Settings, run_id: str) -> None:
    """The diff's record and candidates, as the state store keeps them, against the
    reference's."""
    expected = diff_objects(PREFIX, OBJECTS, snapshot_from_rows(SNAPSHOT_ROWS))
    assert len(expected.candidates) == 6  # 4 orphan ledgers, 2 orphan partitions
    assert expected.classes["foreign"].objects == len(FOREIGN)
    assert RunSteps(settings, run_id).read_candidates() == expected.candidates
    wanted = expected.to_manifest()
    got = record.to_dict()
    samples = wanted.pop("foreign_samples")
    assert {name: got[name] for name in wanted} == wanted
    assert sorted(map(str, record.foreign_samples)) == sorted(map(str, samples))


@pytest.fixture
def prefixed(settings: Settings) -> Settings:
    return settings.with_overrides(prefix=PREFIX)


def test_the_spark_diff_of_a_listing_matches_the_reference(prefixed: Settings, spark: Any) -> None:
    run = _prepare_run(spark, prefixed, "listing", listed=True)

    record = survey_steps.step_diff(resolve(prefixed), run.run_id, spark)

    _assert_same_as_reference(record, prefixed, run.run_id)


def _inventory_rows(settings: Settings) -> list[dict[str, Any]]:
    rows = [
        {
            "bucket": settings.bucket,
            "key": o.key,
            "size": o.size,
            "last_modified_date": dt.datetime.fromtimestamp(o.last_modified / 1000, dt.UTC),
        }
        for o in OBJECTS
    ]
    when = dt.datetime.fromtimestamp(BASE_MS / 1000, dt.UTC)
    rows.append({"bucket": "another", "key": BLOCKS[3], "size": 1, "last_modified_date": when})
    rows.append(
        {"bucket": settings.bucket, "key": "elsewhere/x", "size": 1, "last_modified_date": when}
    )
    return rows


def test_an_inventory_in_parquet_gives_the_same_diff(
    prefixed: Settings, spark: Any, tmp_path: Path
) -> None:
    path = tmp_path / "inventory" / "data.parquet"
    path.parent.mkdir()
    pq.write_table(pa.Table.from_pylist(_inventory_rows(prefixed)), path)
    (path.parent / "manifest.json").write_text('{"fileFormat": "Parquet"}')  # as S3 writes
    run = _prepare_run(spark, prefixed, "parquet-inventory", listed=False)

    scan = survey_steps.step_scan(resolve(prefixed), run.run_id, spark, inventory=str(path.parent))
    record = survey_steps.step_diff(resolve(prefixed), run.run_id, spark)

    assert (scan.source, scan.inventory_format) == ("inventory", "parquet")
    assert scan.objects == len(OBJECTS)
    _assert_same_as_reference(record, prefixed, run.run_id)


def test_an_s3_inventory_csv_with_url_encoded_keys_gives_the_same_diff(
    prefixed: Settings, spark: Any, tmp_path: Path
) -> None:
    lines = []
    for row in _inventory_rows(prefixed):
        key = urllib.parse.quote_plus(row["key"], safe="/")
        stamp = row["last_modified_date"].strftime("%Y-%m-%dT%H:%M:%S.000Z")
        lines.append(f'"{row["bucket"]}","{key}","{row["size"]}","{stamp}"')
    path = tmp_path / "inventory.csv"
    path.write_text("\n".join(lines) + "\n")
    run = _prepare_run(spark, prefixed, "csv-inventory", listed=False)

    scan = survey_steps.step_scan(resolve(prefixed), run.run_id, spark, inventory=str(path))
    record = survey_steps.step_diff(resolve(prefixed), run.run_id, spark)

    assert scan.inventory_format == "csv"
    _assert_same_as_reference(record, prefixed, run.run_id)


def test_a_zone_less_inventory_time_is_utc_whatever_zone_the_session_started_in(
    prefixed: Settings, spark: Any, tmp_path: Path
) -> None:
    """A worker whose local zone is New York starts its Spark session in that zone. S3's
    times are UTC: read as New York time, every object would look five hours older than
    it is, and retention would pass five hours early. ``configure_session`` (every
    cycle's session, the apps' included) reads them as UTC."""
    utc = dt.datetime(2026, 11, 23, 12, 0, 0, tzinfo=dt.UTC)
    path = tmp_path / "inventory.csv"
    path.write_text(f'"{prefixed.bucket}","{BLOCKS[0]}","10","2026-11-23T12:00:00.000"\n')
    saved = {
        name: spark.conf.get(name)
        for name in ("spark.sql.session.timeZone", "spark.sql.shuffle.partitions")
    }
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        configure_session(spark)
        frame, _, _ = read_inventory(spark, block_store(prefixed), str(path))
        [row] = frame.collect()
        partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    finally:
        for name, value in saved.items():
            spark.conf.set(name, value)

    assert row["last_modified"] == int(utc.timestamp() * 1000)
    assert partitions == max(8, 2 * spark.sparkContext.defaultParallelism)
