"""The Spark diff of the offload bucket says what the reference diff
(``segments.diff_segments``) says, with the offload's place (driverMetadata) in the
snapshot and a GCS bucket's upload parts: a segment whose ledger went to another
driver or bucket is ``other-bucket-segment`` (held), parts are ``orphan-upload-part``."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from fake_offload_bucket import FakeGcsBucket

from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.rules.orphans import segments
from ledger_gc.rules.orphans.classify import DiffResult, StoredObject
from ledger_gc.s3_orphans.reading import LISTED_ROW, MARKED_ROW, ML_ROW, snapshot_from_rows
from ledger_gc.spark.scan import OBJECT_SCHEMA
from ledger_gc.spark.segment_diff import diff_segments
from ledger_gc.spark.snapshot import SNAPSHOT_SCHEMA
from ledger_gc.storage import offload_buckets

pytestmark = pytest.mark.spark

ML = "t/ns/persistent/a"
U = {n: f"{n:x}0000000-0000-4000-8000-{n:012d}" for n in range(1, 10)}
ROWS = [
    (ML_ROW, ML, None, None, None),
    (LISTED_ROW, ML, 1, U[1], "gcs/g"),  # here
    (LISTED_ROW, ML, 2, U[2], "s3/g"),  # offloaded to S3 (a bucket of the same name)
    (LISTED_ROW, ML, 3, U[3], "gcs/other"),  # another GCS bucket
    (MARKED_ROW, ML, 4, U[4], None),  # not recorded: here
    (LISTED_ROW, ML, 5, U[5], "gcs/"),  # the driver only
]


def _objects() -> list[StoredObject]:
    found = [
        StoredObject(f"{U[n]}-ledger-{n}{suffix}", 10 * n, 1_000 + n)
        for n in (1, 2, 3, 4, 5, 6)
        for suffix in ("", "-index")
    ]
    found += [
        StoredObject(f"{U[7]}_00000001", 7, 2_000),  # upload parts
        StoredObject(f"{U[7]}_00000002", 8, 2_001),
        StoredObject(f"{U[7]}_1", 9, 2_002),  # foreign
        StoredObject("notes.txt", 1, 2_003),
    ]
    return found


def test_the_spark_segment_diff_matches_the_reference_with_places_and_parts(
    settings: Settings, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoints = resolve(settings.with_overrides(offload_bucket="g", offload_prefix=""))
    offload = dataclasses.replace(endpoints.offload, driver="gcs")
    fake = FakeGcsBucket(offload)  # the driver's HEADs (cluster names): none written
    monkeypatch.setattr(offload_buckets, "offload_bucket", lambda store, client=None: fake)
    objects = _objects()
    expected = DiffResult(managed_ledgers=1)
    data_keys = [o.key for o in objects if o.key.endswith(tuple("0123456789"))]
    segments.diff_segments(
        expected,
        "g",
        "",
        objects,
        snapshot_from_rows(ROWS),
        tags=dict.fromkeys(data_keys),
        here=("gcs", "g"),
    )
    got = DiffResult(managed_ledgers=1)

    diff_segments(
        spark.createDataFrame(ROWS, SNAPSHOT_SCHEMA),
        spark.createDataFrame([(o.key, o.size, o.last_modified) for o in objects], OBJECT_SCHEMA),
        (endpoints.blocks, offload),
        (),
        got,
        {"bucket": "g"},
    )

    assert expected.classes["live-segment"].units == 3  # 1, 4, 5
    assert expected.classes["other-bucket-segment"].units == 2  # 2, 3
    assert expected.classes["orphan-upload-part"].units == 2
    assert {n: t.to_dict() for n, t in got.classes.items()} == {
        n: t.to_dict() for n, t in expected.classes.items()
    }
    assert sorted(got.candidates, key=str) == sorted(expected.candidates, key=str)
    assert got.other_bucket_samples == expected.other_bucket_samples
    assert (got.segment_objects, got.offload_objects) == (
        expected.segment_objects,
        expected.offload_objects,
    )
