"""Where a ledger's offload went (its driverMetadata), GCS upload parts and the offload
listing's shards (pure): a segment is live only in the bucket its ledger names, a
ledger offloaded to another driver or bucket makes its segment neither live nor orphan
here, and a GCS bucket's ``<uuid>_<8 digits>`` parts are orphans under the phases."""

from __future__ import annotations

from ledger_gc.rules.orphans import segments
from ledger_gc.rules.orphans.classify import DiffResult, StoredObject
from ledger_gc.rules.storage import offload_keys
from ledger_gc.s3_orphans.reading import LISTED_ROW, MARKED_ROW, ML_ROW, snapshot_from_rows

U = {n: f"{n:x}0000000-0000-4000-8000-{n:012d}" for n in range(1, 10)}
ML = "t/ns/persistent/a"


def test_a_driver_name_and_bucket_are_a_place_and_only_the_same_place_is_here() -> None:
    assert segments.offload_place("aws-s3", "b1") == "s3/b1"
    assert segments.offload_place("S3", "b1") == "s3/b1"
    assert segments.offload_place("aliyun-oss", "b1") == "s3/b1"
    assert segments.offload_place("google-cloud-storage", "g") == "gcs/g"
    assert segments.offload_place("azureblob", None) == "azure/"
    assert segments.offload_place(None, None) is None  # not recorded: taken to be here
    assert segments.is_here("s3/b1", ("s3", "b1"))
    assert segments.is_here("azure/", ("azure", "c"))  # the driver only: it agrees
    assert segments.is_here(None, ("gcs", "g"))
    assert not segments.is_here("s3/b1", ("gcs", "b1"))  # same name, other store
    assert not segments.is_here("gcs/other", ("gcs", "g"))
    assert not segments.is_here("filesystem/", ("s3", "b1"))


def test_a_segment_whose_ledger_went_elsewhere_is_neither_live_nor_orphan() -> None:
    snapshot = snapshot_from_rows(
        [
            (ML_ROW, ML, None, None, None),
            (LISTED_ROW, ML, 1, U[1], "s3/b1"),  # here
            (LISTED_ROW, ML, 2, U[2], "gcs/b1"),  # offloaded to GCS
            (LISTED_ROW, ML, 3, U[3], "s3/other"),  # another S3 bucket
            (MARKED_ROW, ML, 4, U[4], None),  # not recorded: here
            (LISTED_ROW, ML, 5, U[5], None),  # an older snapshot row: here
        ]
    )
    objects = [
        StoredObject(f"{U[n]}-ledger-{n}{suffix}", 10, 1)
        for n in (1, 2, 3, 4, 5, 6)
        for suffix in ("", "-index")
    ]
    result = DiffResult(managed_ledgers=1)
    segments.diff_segments(result, "b1", "", objects, snapshot, here=("s3", "b1"))

    assert result.classes["live-segment"].units == 3  # 1, 4, 5
    assert result.classes["other-bucket-segment"].units == 2  # 2, 3: kept, reported
    assert [c.ledger_id for c in result.candidates] == [6]  # only the true orphan
    assert result.orphan_bytes == 20
    reasons = {s["prefix"]: s["reason"] for s in result.other_bucket_samples}
    assert "gcs/b1" in reasons[f"offload:b1/{U[2]}-ledger-2"]
    assert "s3/other" in reasons[f"offload:b1/{U[3]}-ledger-3"]


def test_upload_parts_are_orphans_in_a_gcs_bucket_and_foreign_elsewhere() -> None:
    part = offload_keys.parse_upload_part("p", f"p/{U[1]}_00000003")
    assert part is not None and part.uuid == U[1] and part.number == 3
    for key in (f"p/{U[1]}_3", f"p/{U[1]}_000000031", f"{U[1]}_00000003", f"p/{U[1]}-ledger-1"):
        assert offload_keys.parse_upload_part("p", key) is None, key
    snapshot = snapshot_from_rows([(ML_ROW, ML, None, None, None)])
    objects = [StoredObject(f"p/{U[1]}_00000001", 5, 7), StoredObject("p/notes", 1, 1)]
    gcs = DiffResult(managed_ledgers=1)
    segments.diff_segments(gcs, "g", "p", objects, snapshot, here=("gcs", "g"))
    [candidate] = gcs.candidates
    assert candidate.target_class == "orphan-upload-part" and candidate.ledger_id is None
    assert candidate.prefix("") == f"offload:g/p/{U[1]}_00000001"
    assert candidate.newest_ms == 7 and gcs.classes["offload-foreign"].objects == 1
    s3 = DiffResult(managed_ledgers=1)
    segments.diff_segments(s3, "b", "p", objects, snapshot, here=("s3", "b"))
    assert s3.candidates == [] and s3.classes["offload-foreign"].objects == 2


def test_the_sixteen_shards_and_the_ranges_outside_them_cover_every_key_once() -> None:
    shards = offload_keys.shard_prefixes("p")
    ranges = offload_keys.outside_shards("p")
    keys = ["p/", "p/ ", "p/.x", "p/0", "p/09", "p/9z", "p/:", "p/A", "p/`", "p/a", "p/f",
            "p/fz", "p/g", "p/zz/z", "p/\u00e9", "p/\U0001f600"]  # fmt: skip
    for key in keys:
        hits = sum(key.startswith(s) for s in shards) + sum(
            (start is None or key >= start) and (end is None or key < end) for start, end in ranges
        )
        assert hits == 1, key
