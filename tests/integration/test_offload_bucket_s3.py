"""The S3 offload bucket (``storage.s3.OffloadStorage``) as an ``OffloadBucket``, against
SeaweedFS: listing ranges (the offload scan's shards), HEAD with user metadata, a byte
range, the delete that refuses foreign keys, and a restore of a delete marker."""

from __future__ import annotations

import time
from typing import Any

from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.rules.storage import offload_keys
from ledger_gc.storage.offload_bucket import S3, OffloadBucket
from ledger_gc.storage.offload_buckets import offload_bucket

U1 = "0a1b2c3d-0000-4000-8000-000000000001"
U9 = "9a1b2c3d-0000-4000-8000-000000000009"
UF = "fa1b2c3d-0000-4000-8000-00000000000f"


def _bucket(settings: Settings, s3_client: Any, name: str, *, versioned: bool = False) -> Any:
    bucket = f"{settings.bucket}-{name}"
    s3_client.create_bucket(Bucket=bucket)
    if versioned:
        s3_client.put_bucket_versioning(
            Bucket=bucket, VersioningConfiguration={"Status": "Enabled"}
        )
    tiered = settings.with_overrides(offload_bucket=bucket, offload_prefix="t")
    return offload_bucket(resolve(tiered).offload)


def test_the_s3_offload_bucket_lists_every_key_once_across_the_shards(
    settings: Settings, s3_client: Any
) -> None:
    offload = _bucket(settings, s3_client, "shards")
    assert isinstance(offload, OffloadBucket) and offload.driver == S3
    keys = [
        f"t/{U1}-ledger-1",
        f"t/{U1}-ledger-1-index",
        f"t/{U9}-ledger-9",
        f"t/{UF}-ledger-15",
        "t/.hidden",
        "t/0",  # a shard's bare prefix
        "t/:colon",
        "t/UPPER",
        "t/g",  # exactly a range's start
        "t/zzz/nested",
        "t/\u00e9t\u00e9",
    ]
    for key in keys:
        s3_client.put_object(Bucket=offload.bucket, Key=key, Body=b"x")

    def every_shard() -> list[str]:
        listed: list[str] = []
        for shard in offload_keys.shard_prefixes("t"):
            listed += [o.key for o in offload.iter_objects(shard)]
        for start, end in offload_keys.outside_shards("t"):
            listed += [o.key for o in offload.iter_objects("t/", start=start, end=end)]
        return sorted(listed)

    assert every_shard() == sorted(keys)  # each once, none lost at a boundary
    # Again in pages of two keys: a range's later pages keep their start.
    whole_pages = offload.client.list_objects_v2
    pages = []

    def in_twos(**request: Any) -> Any:
        pages.append(request.get("ContinuationToken"))
        return whole_pages(**request, MaxKeys=2)

    offload.client.list_objects_v2 = in_twos
    assert every_shard() == sorted(keys)
    assert any(pages)  # some listing went past its first page


def test_head_read_range_and_a_delete_that_refuses_foreign_keys(
    settings: Settings, s3_client: Any
) -> None:
    offload = _bucket(settings, s3_client, "head")
    data = f"t/{U1}-ledger-1"
    s3_client.put_object(
        Bucket=offload.bucket, Key=data, Body=b"0123456789", Metadata={"pulsarClusterName": "c1"}
    )
    s3_client.put_object(Bucket=offload.bucket, Key="t/notes.txt", Body=b"mine")
    head = offload.head(data)
    assert head is not None and head.size == 10 and head.metadata["pulsarclustername"] == "c1"
    assert offload.head(f"t/{U1}-ledger-2") is None
    assert offload.read_range(data, 2, 3) == b"234"
    listed = list(offload.iter_objects("t/"))
    result = offload.delete_listed(listed)
    assert result.deleted == 1 and set(result.refused) == {"t/notes.txt"}
    assert [o.key for o in offload.iter_objects("t/")] == ["t/notes.txt"]


def test_a_deleted_segment_comes_back_through_deleted_versions_and_restore(
    settings: Settings, s3_client: Any
) -> None:
    offload = _bucket(settings, s3_client, "restore", versioned=True)
    data = f"t/{U1}-ledger-1"
    s3_client.put_object(Bucket=offload.bucket, Key=data, Body=b"0123456789")
    before = int(time.time() * 1000) - 5_000
    assert offload.delete_listed(list(offload.iter_objects("t/"))).ok
    after = int(time.time() * 1000) + 5_000
    assert offload.head(data) is None
    found = offload.deleted_versions(data, before, after)
    assert [(f.key, f.size, f.how) for f in found] == [(data, 10, "delete-marker")]
    offload.restore(found[0])
    assert offload.read_range(data, 0, 10) == b"0123456789"
    assert offload.deleted_versions(data, before, after) == []  # nothing hidden now
