"""The listing's fast page parse (``storage.list_pages``) against SeaweedFS: it must list
exactly what botocore lists (keys, sizes, times, order), and touch nothing else."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from ledger_gc.config.edge import block_store
from ledger_gc.config.settings import Settings
from ledger_gc.errors import StorageError
from ledger_gc.storage import list_pages
from ledger_gc.storage.s3 import LedgerStorage

# Every character a Pulsar name may hold in a key (test_s3_engine), and some it may not.
ODD = "ledgers/te-n=a:n.t_1/n_s.=:-2/persistent/my+topic%2Fwith%20*odd.-_chars é&<>'\""


def plain_listing(client: Any, bucket: str, prefix: str) -> list[tuple[str, int, int]]:
    """What botocore's own paginator lists, as (key, size, epoch ms)."""
    return [
        (item["Key"], int(item["Size"]), list_pages.epoch_ms(item["LastModified"]))
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for item in page.get("Contents", ())
    ]


def test_the_fast_parse_lists_exactly_what_botocore_lists(
    settings: Settings, s3_client: Any
) -> None:
    keys = [f"{ODD}/ledgers/{i // 10:020d}/{i % 10:020d}.blk" for i in range(2300)]
    keys += [f"ledgers/t/ns/persistent/plain/ledgers/{i:020d}/{0:020d}.blk" for i in range(50)]
    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda k: s3_client.put_object(
                    Bucket=settings.bucket, Key=k, Body=b"x" * (len(k) % 7)
                ),
                keys,
            )
        )
    storage = LedgerStorage(block_store(settings))

    for prefix in ("", "ledgers/", f"{ODD}/", "ledgers/t/"):
        fast = [(o.key, o.size, o.last_modified) for o in storage.iter_objects(prefix)]
        assert fast == plain_listing(s3_client, settings.bucket, prefix), prefix
    assert len(list(storage.iter_objects(""))) == len(keys)
    # A bounded listing of a parent (the trim's): all of it, or None past its pages.
    assert storage._list_bounded(f"{ODD}/", max_pages=3) is not None
    assert storage._list_bounded(f"{ODD}/", max_pages=2) is None


def test_the_hook_acts_only_inside_parsing_here(settings: Settings, local_stack: Any) -> None:
    client = boto3.client(
        "s3",
        endpoint_url=local_stack.s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(s3={"addressing_style": "path"}),
    )
    client.put_object(Bucket=settings.bucket, Key="a/b.blk", Body=b"abc")
    list_pages.install(client)
    list_pages.install(client)  # once per client, however often

    outside = client.list_objects_v2(Bucket=settings.bucket)
    with list_pages.parsing_here():
        inside = client.list_objects_v2(Bucket=settings.bucket)

    assert [item["Key"] for item in outside["Contents"]] == ["a/b.blk"]
    assert list_pages.OBJECTS not in outside
    assert "Contents" not in inside and inside["KeyCount"] == 1
    [(key, size, _)] = inside[list_pages.OBJECTS]
    assert (key, size) == ("a/b.blk", 3)
    assert list_pages.objects_of(inside) == list_pages.objects_of(outside)


def test_a_truncated_page_without_a_new_token_fails_the_listing(settings: Settings) -> None:
    storage = LedgerStorage(block_store(settings))
    page = {"IsTruncated": True, "KeyCount": 0, "Contents": []}
    with Stubber(storage.client) as stub:
        stub.add_response("list_objects_v2", page)
        with pytest.raises(StorageError, match="continuation token"):
            list(storage.iter_objects("ledgers/"))
        stub.add_response("list_objects_v2", {**page, "NextContinuationToken": "t1"})
        stub.add_response("list_objects_v2", {**page, "NextContinuationToken": "t1"})
        with pytest.raises(StorageError, match="continuation token"):
            list(storage.iter_objects("ledgers/"))


def test_the_store_lists_with_the_fast_parse(
    settings: Settings, s3_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ``LedgerStorage`` installs the parse on its client (the storage split once
    dropped the install: the same results, at botocore's speed)."""
    s3_client.put_object(Bucket=settings.bucket, Key="ledgers/a/b.blk", Body=b"abc")
    parsed: list[int] = []
    real = list_pages._take_contents

    def counting(
        response_dict: dict[str, Any], customized_response_dict: dict[str, Any], **kw: Any
    ) -> None:
        real(response_dict, customized_response_dict, **kw)
        parsed.append(len(customized_response_dict.get(list_pages.OBJECTS, ())))

    monkeypatch.setattr(list_pages, "_take_contents", counting)
    storage = LedgerStorage(block_store(settings))
    assert [o.key for o in storage.iter_objects("ledgers/")] == ["ledgers/a/b.blk"]
    assert parsed == [1]
