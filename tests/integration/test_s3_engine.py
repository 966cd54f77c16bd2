"""The S3 behaviour ledger-gc relies on, checked against the local store (SeaweedFS).

Each test names one behaviour of S3 that a rule of ledger-gc stands on, and checks it over
the wire with a plain boto3 client, without the library in between: if the store under
the tests changes (another SeaweedFS version, MinIO, real S3), this module says first
what no longer holds.

Where SeaweedFS 4.48 answers differently from AWS S3, a test named ``test_differs_...``
pins down what it does, and its docstring says why ledger-gc is not affected (or what it
means for it). Such a test failing means the store changed: read the docstring, then
update the note or the code that depends on it.
"""

from __future__ import annotations

import email.utils
import hashlib
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from ledger_gc.config.settings import Settings


def _error(call: Callable[[], Any]) -> tuple[str, int]:
    """(error code, HTTP status) of a call that must fail."""
    with pytest.raises(ClientError) as info:
        call()
    response = info.value.response
    return str(response["Error"].get("Code")), int(response["ResponseMetadata"]["HTTPStatusCode"])


def _put_many(client: Any, bucket: str, keys: list[str], body: bytes = b"x") -> None:
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda key: client.put_object(Bucket=bucket, Key=key, Body=body), keys))


def _list_pages(client: Any, **params: Any) -> list[dict[str, Any]]:
    """Every ListObjectsV2 page, following continuation tokens by hand."""
    pages = []
    token = None
    while True:
        page = client.list_objects_v2(**params, **({"ContinuationToken": token} if token else {}))
        pages.append(page)
        if not page.get("IsTruncated"):
            return pages
        token = page["NextContinuationToken"]
        assert token, "a truncated page without NextContinuationToken"


def _keys(pages: list[dict[str, Any]]) -> list[str]:
    return [item["Key"] for page in pages for item in page.get("Contents", ())]


# --- conditional create: blocks are immutable ------------------------------------------------


def test_if_none_match_refuses_an_existing_key(settings: Settings, s3_client: Any) -> None:
    """LedgerStorage.write_block sends ``If-None-Match: *``: a second writer of a block
    (a fenced broker, a retried task) must get 412 and leave the first block intact."""
    bucket, key = settings.bucket, "ledgers/t/ns/persistent/a/ledgers/1/0.blk"
    s3_client.put_object(Bucket=bucket, Key=key, Body=b"first", IfNoneMatch="*")

    code, status = _error(
        lambda: s3_client.put_object(Bucket=bucket, Key=key, Body=b"second", IfNoneMatch="*")
    )

    assert (code, status) == ("PreconditionFailed", 412)
    assert s3_client.get_object(Bucket=bucket, Key=key)["Body"].read() == b"first"


def test_if_none_match_race_has_exactly_one_winner(settings: Settings, s3_client: Any) -> None:
    """Writers racing for one key: one wins, every other is refused (412, or 409 while
    the winner's write is in flight), and the object is the winner's."""
    bucket, key = settings.bucket, "race/block"
    start = threading.Barrier(16)

    def attempt(writer: int) -> tuple[int, str]:
        start.wait()
        try:
            s3_client.put_object(
                Bucket=bucket, Key=key, Body=f"writer-{writer}".encode(), IfNoneMatch="*"
            )
        except ClientError as exc:
            return writer, str(exc.response["Error"]["Code"])
        return writer, "ok"

    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(attempt, range(16)))

    winners = [writer for writer, outcome in outcomes if outcome == "ok"]
    assert len(winners) == 1, outcomes
    assert {outcome for _, outcome in outcomes if outcome != "ok"} <= {
        "PreconditionFailed",
        "ConditionalRequestConflict",
    }
    body = s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert body == f"writer-{winners[0]}".encode()


def test_etag_of_a_single_put_is_the_md5(settings: Settings, s3_client: Any) -> None:
    """A PUT whose answer was lost is recognised as ours by ETag == MD5 of our bytes."""
    body = b"block bytes" * 100
    response = s3_client.put_object(Bucket=settings.bucket, Key="etag", Body=body)
    expected = hashlib.md5(body, usedforsecurity=False).hexdigest()
    assert response["ETag"].strip('"') == expected
    head = s3_client.head_object(Bucket=settings.bucket, Key="etag")
    assert head["ETag"].strip('"') == expected
    assert head["ContentLength"] == len(body)


# --- bulk delete ---------------------------------------------------------------------------


def test_delete_objects_deletes_1000_keys_in_one_request(
    settings: Settings, s3_client: Any
) -> None:
    """The one delete path sends DeleteObjects of up to 1,000 keys; each must be deleted,
    and (verbose mode) listed back as Deleted, with no Errors."""
    bucket = settings.bucket
    keys = [f"bulk/{i:05d}" for i in range(1000)]
    _put_many(s3_client, bucket, [*keys, "bulk-keep"])

    response = s3_client.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": False}
    )

    assert response["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert not response.get("Errors")
    assert sorted(item["Key"] for item in response["Deleted"]) == keys
    # read-after-delete: the listing no longer shows them, at once
    assert _keys(_list_pages(s3_client, Bucket=bucket)) == ["bulk-keep"]


def test_delete_objects_quiet_and_idempotent(settings: Settings, s3_client: Any) -> None:
    """Quiet mode answers only errors; keys already gone are deleted, not errors (S3
    semantics), which is what makes re-running a trim harmless."""
    bucket = settings.bucket
    keys = [f"quiet/{i}" for i in range(20)]
    _put_many(s3_client, bucket, keys[:10])  # the other 10 never existed

    quiet = s3_client.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
    )
    assert not quiet.get("Errors")
    assert not quiet.get("Deleted")
    assert s3_client.list_objects_v2(Bucket=bucket)["KeyCount"] == 0

    again = s3_client.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": False}
    )
    assert not again.get("Errors")
    assert sorted(item["Key"] for item in again["Deleted"]) == sorted(keys)


def test_delete_objects_refuses_more_than_1000_keys(settings: Settings, s3_client: Any) -> None:
    """S3's limit, which is why the delete path batches by 1,000. (AWS says MalformedXML,
    SeaweedFS InvalidArgument: both 400, and nothing is deleted.)"""
    s3_client.put_object(Bucket=settings.bucket, Key="limit/0", Body=b"x")
    objects = [{"Key": f"limit/{i}"} for i in range(1001)]

    code, status = _error(
        lambda: s3_client.delete_objects(Bucket=settings.bucket, Delete={"Objects": objects})
    )

    assert status == 400, code
    assert s3_client.list_objects_v2(Bucket=settings.bucket)["KeyCount"] == 1


# --- listing -------------------------------------------------------------------------------


def test_list_objects_v2_paginates_past_1000_keys(settings: Settings, s3_client: Any) -> None:
    """The scan and the trim's "is anything left?" check page through ListObjectsV2 with
    continuation tokens: 1,000 keys a page, each key exactly once, the prefix respected."""
    bucket = settings.bucket
    keys = [
        f"ledgers/t/ns/persistent/big/ledgers/{i // 1000:020d}/{i:020d}.blk" for i in range(2500)
    ]
    _put_many(s3_client, bucket, [*keys, "ledgers/t/ns/persistent/other/x", "outside"])

    pages = _list_pages(s3_client, Bucket=bucket, Prefix="ledgers/t/ns/persistent/big/")

    assert [page["KeyCount"] for page in pages] == [1000, 1000, 500]
    assert [page["IsTruncated"] for page in pages] == [True, True, False]
    assert _keys(pages) == keys  # same-shaped keys: in byte order on every store
    assert all(item["Size"] == 1 for page in pages for item in page["Contents"])

    small = _list_pages(s3_client, Bucket=bucket, Prefix="ledgers/t/ns/persistent/", MaxKeys=7)
    assert len(small) == 358  # 2,501 keys, 7 a page
    assert sorted(_keys(small)) == sorted([*keys, "ledgers/t/ns/persistent/other/x"])
    assert len(set(_keys(small))) == 2501

    empty = s3_client.list_objects_v2(Bucket=bucket, Prefix="ledgers/t/ns/persistent/none/")
    assert empty["KeyCount"] == 0 and not empty.get("Contents") and not empty["IsTruncated"]


def test_list_with_prefix_and_delimiter(settings: Settings, s3_client: Any) -> None:
    """The orphan scan finds its shards (tenants, then namespaces) with ``Delimiter="/"``:
    one level's sub-prefixes as CommonPrefixes, its own objects as Contents, paginated."""
    bucket = settings.bucket
    namespaces = [
        f"ledgers/tenant/ns-{i:04d}/persistent/t/ledgers/{1:020d}/0.blk" for i in range(1100)
    ]
    loose = ["ledgers/tenant/readme", "ledgers/tenant/zz"]
    _put_many(s3_client, bucket, [*namespaces, *loose, "ledgers/other/x"])

    pages = _list_pages(s3_client, Bucket=bucket, Prefix="ledgers/tenant/", Delimiter="/")

    prefixes = [p["Prefix"] for page in pages for p in page.get("CommonPrefixes", ())]
    assert sorted(prefixes) == [f"ledgers/tenant/ns-{i:04d}/" for i in range(1100)]
    assert len(pages) == 2  # 1,102 entries: prefixes and objects share the 1,000 per page
    assert sorted(_keys(pages)) == loose

    top = s3_client.list_objects_v2(Bucket=bucket, Prefix="ledgers/", Delimiter="/")
    assert sorted(p["Prefix"] for p in top["CommonPrefixes"]) == [
        "ledgers/other/",
        "ledgers/tenant/",
    ]
    assert top["KeyCount"] == 2 and not top.get("Contents")


def test_keys_with_every_pulsar_name_character_round_trip(
    settings: Settings, s3_client: Any
) -> None:
    """Tenant and namespace hold ``-=:._``, the topic segment is URL-encoded (``.-*_``,
    ``+`` for a space, ``%XX``): such keys are stored, listed, read and deleted verbatim."""
    bucket = settings.bucket
    name = "ledgers/te-n=a:n.t_1/n_s.=:-2/persistent/my+topic%2Fwith%20*odd.-_chars"
    keys = [f"{name}/ledgers/{7:020d}/{i:020d}.blk" for i in range(3)]
    _put_many(s3_client, bucket, keys, body=b"payload")

    assert _keys(_list_pages(s3_client, Bucket=bucket, Prefix=f"{name}/")) == keys
    assert s3_client.get_object(Bucket=bucket, Key=keys[1])["Body"].read() == b"payload"
    response = s3_client.delete_objects(
        Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": False}
    )
    assert sorted(item["Key"] for item in response["Deleted"]) == keys
    assert s3_client.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_last_modified_is_present_and_agrees_with_the_server_clock(
    settings: Settings, s3_client: Any
) -> None:
    """Orphan retention compares each object's LastModified with now: it must be there,
    in UTC, and agree with the server's own ``Date`` (and roughly with ours)."""
    bucket = settings.bucket
    put = s3_client.put_object(Bucket=bucket, Key="clock", Body=b"x")
    server_date = email.utils.parsedate_to_datetime(put["ResponseMetadata"]["HTTPHeaders"]["date"])

    (listed,) = s3_client.list_objects_v2(Bucket=bucket, Prefix="clock")["Contents"]
    head = s3_client.head_object(Bucket=bucket, Key="clock")

    for stamp in (listed["LastModified"], head["LastModified"]):
        assert stamp.utcoffset() == timedelta(0)
        # HTTP dates have whole seconds: allow one each side
        assert abs(stamp - server_date) <= timedelta(seconds=2), (stamp, server_date)
        assert abs(stamp - datetime.now(UTC)) < timedelta(minutes=1)
    assert abs(listed["LastModified"] - head["LastModified"]) < timedelta(seconds=1)


# --- reads ---------------------------------------------------------------------------------


def test_ranged_get(settings: Settings, s3_client: Any) -> None:
    """A block's index and entries are read with ``Range: bytes=a-b``: exactly those bytes
    (206 and Content-Range), a range running past the end is cut at the end, and a range
    that starts past the end is 416 InvalidRange (LedgerStorage calls that corruption)."""
    bucket = settings.bucket
    data = bytes(range(256)) * 4
    s3_client.put_object(Bucket=bucket, Key="ranged", Body=data)

    part = s3_client.get_object(Bucket=bucket, Key="ranged", Range="bytes=100-163")
    assert part["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert part["ContentRange"] == f"bytes 100-163/{len(data)}"
    assert part["Body"].read() == data[100:164]

    tail = s3_client.get_object(Bucket=bucket, Key="ranged", Range=f"bytes={len(data) - 10}-5000")
    assert tail["ContentRange"] == f"bytes {len(data) - 10}-{len(data) - 1}/{len(data)}"
    assert tail["Body"].read() == data[-10:]

    code, status = _error(
        lambda: s3_client.get_object(Bucket=bucket, Key="ranged", Range=f"bytes={len(data)}-")
    )
    assert (code, status) == ("InvalidRange", 416)


def test_missing_bucket_and_missing_key(settings: Settings, s3_client: Any) -> None:
    """A wrong LEDGERGC_BUCKET must be "bucket not found", never an empty listing: HEAD is
    a bare 404, every other call NoSuchBucket. A PUT does not create the bucket (SeaweedFS
    would, unless started with ``-s3.autoCreateBucket=false``: the local stack does)."""
    missing = "lgc-no-such-bucket"
    assert _error(lambda: s3_client.head_bucket(Bucket=missing))[1] == 404
    for call in (
        lambda: s3_client.list_objects_v2(Bucket=missing),
        lambda: s3_client.delete_objects(Bucket=missing, Delete={"Objects": [{"Key": "a"}]}),
        lambda: s3_client.get_object(Bucket=missing, Key="a"),
        lambda: s3_client.put_object(Bucket=missing, Key="a", Body=b"x"),
    ):
        assert _error(call) == ("NoSuchBucket", 404)
    assert _error(lambda: s3_client.head_bucket(Bucket=missing))[1] == 404  # still missing

    assert _error(lambda: s3_client.get_object(Bucket=settings.bucket, Key="nope")) == (
        "NoSuchKey",
        404,
    )
    assert _error(lambda: s3_client.head_object(Bucket=settings.bucket, Key="nope"))[1] == 404


# --- where SeaweedFS differs from S3 --------------------------------------------------------


def test_differs_listing_order_is_tree_order(settings: Settings, s3_client: Any) -> None:
    """S3 lists keys in UTF-8 byte order; SeaweedFS keeps keys as a directory tree and
    lists a "directory" whole where its name sorts, so ``x/a`` comes before ``x-b``
    ('-' and '.' sort before '/').

    ledger-gc does not depend on the order across directories: blocks of one ledger are
    same-shaped keys in one directory (byte order and tree order agree; ``list_blocks``
    sorts them anyway), and the orphan diff is a join. The docstring of
    ``LedgerStorage.iter_objects`` ("in key order") holds within such a directory only.
    """
    keys = ["o/x", "o/x-b", "o/x.c", "o/x/a", "o/x0"]  # byte order
    _put_many(s3_client, settings.bucket, keys)

    listed = _keys(_list_pages(s3_client, Bucket=settings.bucket, Prefix="o/"))
    paged = _keys(_list_pages(s3_client, Bucket=settings.bucket, Prefix="o/", MaxKeys=1))

    assert listed == paged == ["o/x", "o/x/a", "o/x-b", "o/x.c", "o/x0"]
    assert sorted(listed) == keys


def test_differs_emptied_prefix_stays_a_common_prefix(settings: Settings, s3_client: Any) -> None:
    """On S3 a prefix exists only while an object has it. SeaweedFS keeps the "directory"
    after its last object is deleted, and a delimiter listing still shows it as a
    CommonPrefix (with nothing under it).

    For ledger-gc this is harmless: the scan's shard discovery may list a namespace that
    is empty, and finds nothing in it; emptiness checks (``prefix_is_empty``, the trim's
    "no block left") list without a delimiter, and those see nothing.
    """
    bucket = settings.bucket
    s3_client.put_object(Bucket=bucket, Key="e/ns/gone/block", Body=b"x")
    s3_client.put_object(Bucket=bucket, Key="e/ns/keep", Body=b"x")
    s3_client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "e/ns/gone/block"}]})

    assert _keys(_list_pages(s3_client, Bucket=bucket, Prefix="e/")) == ["e/ns/keep"]
    assert s3_client.list_objects_v2(Bucket=bucket, Prefix="e/ns/gone/", MaxKeys=1)["KeyCount"] == 0
    level = s3_client.list_objects_v2(Bucket=bucket, Prefix="e/ns/", Delimiter="/")
    assert [p["Prefix"] for p in level.get("CommonPrefixes", ())] == ["e/ns/gone/"]


def test_differs_keys_that_are_not_file_paths(settings: Settings, s3_client: Any) -> None:
    """S3 keys are opaque strings; SeaweedFS maps them onto file paths, so:

    * a ``.`` or ``..`` path segment is refused (400 InvalidRequest). Pulsar's name rules
      would allow a tenant, namespace or topic named ``.`` or ``..``; on SeaweedFS the
      writer's PUT fails loudly, nothing is lost silently.
    * ``a//b`` is stored as ``a/b`` (and listed so), and a key ending in ``/`` is a
      directory: it reads back empty. ledger-gc never writes such keys (every segment of
      a block key is non-empty); a *foreign* key of that shape would be reported under
      its normalised name, and foreign keys are never deleted.
    """
    bucket = settings.bucket
    for key in ("d/./x", "d/../x", "d/x/.."):
        assert _error(lambda key=key: s3_client.put_object(Bucket=bucket, Key=key, Body=b"x")) == (
            "InvalidRequest",
            400,
        )
    s3_client.put_object(Bucket=bucket, Key="d/.hidden..name./x", Body=b"x")  # dots are fine

    s3_client.put_object(Bucket=bucket, Key="d/a//b", Body=b"double")
    s3_client.put_object(Bucket=bucket, Key="d/dir/", Body=b"not kept")

    assert s3_client.get_object(Bucket=bucket, Key="d/a//b")["Body"].read() == b"double"
    assert s3_client.get_object(Bucket=bucket, Key="d/dir/")["Body"].read() == b""
    assert _keys(_list_pages(s3_client, Bucket=bucket, Prefix="d/")) == [
        "d/.hidden..name./x",
        "d/a/b",
        "d/dir/",
    ]


def test_store_under_test_is_seaweedfs(settings: Settings, s3_client: Any) -> None:
    """The notes above are about SeaweedFS 4.48; say so if the local stack runs another."""
    response = s3_client.list_objects_v2(Bucket=settings.bucket)
    server = response["ResponseMetadata"]["HTTPHeaders"].get("server", "")
    assert server.startswith("SeaweedFS") and " 4.48" in server, server
