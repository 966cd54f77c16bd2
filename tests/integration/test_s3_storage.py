"""LedgerStorage against a real S3 server (the local stack's SeaweedFS) over HTTP.

Faults a real server does not produce on demand (throttling, per-key delete errors, a lost
PUT response) are injected with botocore event hooks on the client, so everything else
still goes over the wire to a real server.

Fixtures from ``tests/conftest.py``: ``settings`` (a fresh bucket per test on the shared
SeaweedFS, ``prefix="ledgers"``) and ``s3_client`` (a plain client for that server, used
to plant and inspect objects behind LedgerStorage's back).
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from ledger_gc.config.edge import block_store
from ledger_gc.config.settings import Settings
from ledger_gc.errors import BlockFormatError, BucketNotFoundError, DeleteFailedError, StorageError
from ledger_gc.rules.storage.blocks import encode_block
from ledger_gc.rules.storage.keys import block_key, ledger_dir, ml_dir
from ledger_gc.storage import bulk_delete, ledger_blocks, s3_bucket
from ledger_gc.storage.bulk_delete import DeleteResult, RetryPolicy
from ledger_gc.storage.ledger_blocks import BlockExistsError
from ledger_gc.storage.s3 import LedgerStorage
from ledger_gc.storage.s3_bucket import build_client

ML = "public/default/persistent/orders"
FAST_RETRY = RetryPolicy(max_attempts=4, base_delay=0.001, max_delay=0.01)


# --- helpers -----------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Calls:
    """Counts botocore events and records their ``params``.

    ``before-parameter-build`` and ``before-call`` fire once per API call (the first with
    the API parameters, the second with the serialized request), ``before-send`` once per
    HTTP attempt, retries included."""

    def __init__(self) -> None:
        self.params: list[dict[str, Any]] = []

    def __call__(self, params: dict[str, Any] | None = None, **_: Any) -> None:
        self.params.append(dict(params or {}))

    def __len__(self) -> int:
        return len(self.params)


def _count(client: Any, event: str) -> _Calls:
    calls = _Calls()
    client.meta.events.register(event, calls)
    return calls


class _FakeRaw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def _fake_error(request: Any, status: int, code: str, message: str) -> AWSResponse:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        "<RequestId>fake</RequestId></Error>"
    ).encode()
    return AWSResponse(request.url, status, {"Content-Type": "application/xml"}, _FakeRaw(body))


def _fail_first_sends(
    n: int, status: int = 503, code: str = "SlowDown", message: str = "Please reduce your rate"
) -> Callable[..., AWSResponse | None]:
    """A ``before-send`` handler answering the first ``n`` sends with a fake error, without
    sending them: the fault a throttled S3 produces and a local one does not."""
    remaining = [n]

    def handler(request: Any, **_: Any) -> AWSResponse | None:
        if remaining[0] <= 0:
            return None
        remaining[0] -= 1
        return _fake_error(request, status, code, message)

    return handler


def _put_keys(client: Any, bucket: str, keys: list[str]) -> None:
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda key: client.put_object(Bucket=bucket, Key=key, Body=b"x"), keys))


def _block_keys(count: int, ml_name: str = ML) -> list[str]:
    return [block_key("ledgers", ml_name, 1 + i // 1000, i) for i in range(count)]


def _all_keys(client: Any, bucket: str) -> list[str]:
    paginator = client.get_paginator("list_objects_v2")
    pages = paginator.paginate(Bucket=bucket)
    return [item["Key"] for page in pages for item in page.get("Contents", ())]


def _storage(settings: Settings, *, botocore_attempts: int = 1, **kwargs: Any) -> LedgerStorage:
    """Storage whose only retry is our own loop (botocore's would hide the injected faults)."""
    client = build_client(block_store(settings), max_attempts=botocore_attempts)
    return LedgerStorage(
        block_store(settings), client, retry=kwargs.pop("retry", FAST_RETRY), **kwargs
    )


# --- bucket checks --------------------------------------------------------------------


def test_check_bucket_accepts_an_existing_bucket(settings: Settings) -> None:
    LedgerStorage(block_store(settings)).check_bucket()


def test_missing_bucket_is_named_with_the_fix(settings: Settings) -> None:
    missing = settings.with_overrides(bucket="lgc-no-such-bucket")
    storage = LedgerStorage(block_store(missing))
    expected = (
        f"bucket 'lgc-no-such-bucket' not found at {settings.s3_endpoint}; create it or set "
        "LEDGERGC_BUCKET"
    )
    with pytest.raises(BucketNotFoundError) as info:
        storage.check_bucket()
    assert str(info.value) == expected
    # Every other operation says the same, and a listing never comes back empty instead.
    with pytest.raises(BucketNotFoundError, match="create it or set LEDGERGC_BUCKET"):
        list(storage.iter_objects("ledgers/"))
    with pytest.raises(BucketNotFoundError):
        storage.delete_keys(_block_keys(3))
    with pytest.raises(BucketNotFoundError):
        storage.prefix_is_empty("ledgers/")


def test_unreachable_endpoint_is_named_with_the_fix(settings: Settings) -> None:
    endpoint = f"http://127.0.0.1:{_free_port()}"  # nothing listens there
    unreachable = settings.with_overrides(s3_endpoint=endpoint)
    storage = _storage(unreachable)
    with pytest.raises(StorageError, match=f"S3 endpoint {endpoint}/? unreachable") as info:
        storage.check_bucket()
    assert "check LEDGERGC_S3_ENDPOINT" in str(info.value)
    assert not isinstance(info.value, BucketNotFoundError)
    with pytest.raises(StorageError, match="unreachable"):
        list(storage.iter_objects("ledgers/"))
    with pytest.raises(StorageError, match="unreachable"):
        storage.write_block(ML, 1, 0, [b"x"])
    # A bulk delete reports instead of raising: the caller keeps its marker and retries.
    result = storage.delete_keys(_block_keys(2))
    assert result.deleted == 0
    assert set(result.failed) == set(_block_keys(2))
    assert all("unreachable" in reason for reason in result.failed.values())
    assert result.requests == FAST_RETRY.max_attempts


def test_access_denied_is_named_with_the_fix(settings: Settings) -> None:
    storage = _storage(settings)
    storage.client.meta.events.register(
        "before-send.s3.HeadBucket", _fail_first_sends(1, 403, "AccessDenied", "Forbidden")
    )
    with pytest.raises(StorageError, match="access denied to bucket") as info:
        storage.check_bucket()
    assert str(settings.s3_endpoint) in str(info.value)
    assert "check the AWS credentials" in str(info.value)
    assert not isinstance(info.value, BucketNotFoundError)


def test_retry_delays_are_bounded_full_jitter() -> None:
    policy = RetryPolicy(max_attempts=5, base_delay=0.5, max_delay=3.0)
    rng = random.Random(1)
    for retry in range(1, 10):
        delays = [policy.delay(retry, rng) for _ in range(200)]
        assert all(0 <= d <= min(3.0, 0.5 * 2 ** (retry - 1)) for d in delays)
    with pytest.raises(ValueError):
        RetryPolicy(max_attempts=0)


def test_client_is_built_from_settings(settings: Settings) -> None:
    client = LedgerStorage(block_store(settings)).client
    assert client.meta.endpoint_url == settings.s3_endpoint
    assert client.meta.region_name == settings.s3_region
    config = client.meta.config
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}
    assert config.max_pool_connections == s3_bucket.MAX_POOL_CONNECTIONS
    assert config.connect_timeout == s3_bucket.CONNECT_TIMEOUT_SECONDS


# --- blocks -----------------------------------------------------------------------------


def _write_three_blocks(storage: LedgerStorage) -> list[list[bytes]]:
    blocks = [[f"entry-{i}".encode() * (i + 1) for i in range(j, j + 5)] for j in (0, 5, 10)]
    # Written out of order on purpose: the listing must sort them by first entry.
    for first in (10, 0, 5):
        storage.write_block(ML, 7, first, blocks[first // 5])
    return blocks


def test_write_list_and_read_blocks(settings: Settings, s3_client: Any) -> None:
    storage = LedgerStorage(block_store(settings))
    before = int(time.time() * 1000) - 2000
    blocks = _write_three_blocks(storage)
    # a block of another ledger and one of another topic must not appear
    storage.write_block(ML, 70, 0, [b"other ledger"])
    storage.write_block(ML + "-2", 7, 0, [b"other topic"])

    refs = storage.list_blocks(ML, 7)
    assert [r.first_entry_id for r in refs] == [0, 5, 10]
    assert [r.key for r in refs] == [block_key("ledgers", ML, 7, f) for f in (0, 5, 10)]
    assert refs[0].key == f"ledgers/{ML}/ledgers/{7:020d}/{0:020d}.blk"
    for ref, payloads in zip(refs, blocks, strict=True):
        head = s3_client.head_object(Bucket=settings.bucket, Key=ref.key)
        assert ref.size == head["ContentLength"]
        assert ref.last_modified is not None and ref.last_modified >= before
        assert (ref.ml_name, ref.ledger_id) == (ML, 7)
        block = storage.read_block(ML, 7, ref)
        assert list(block.entries) == payloads
        assert (block.ledger_id, block.first_entry_id) == (7, ref.first_entry_id)
        assert storage.block_stats(ref) == (5, sum(len(p) for p in payloads))
    assert storage.list_blocks(ML, 8) == []


def test_ranged_read_of_a_middle_entry(settings: Settings) -> None:
    blocks = _write_three_blocks(LedgerStorage(block_store(settings)))
    reader = LedgerStorage(block_store(settings))  # a fresh reader: no index cached from the writes
    gets = _count(reader.client, "before-parameter-build.s3.GetObject")
    middle = reader.list_blocks(ML, 7)[1]  # entries 5..9

    assert reader.read_entries(ML, 7, middle, 7, 7) == [blocks[1][2]]
    # one GET for the tail (trailer + index), one for exactly entry 7's bytes
    assert len(gets) == 2
    assert all("Range" in p for p in gets.params)
    span_start, span_end = (int(x) for x in gets.params[1]["Range"][6:].split("-"))
    assert span_end - span_start + 1 == 8 + len(blocks[1][2])  # entry header + payload

    # the index is cached: the next read of this block is a single ranged GET
    assert reader.read_entries(ML, 7, middle, 5, 9) == blocks[1]
    assert len(gets) == 3
    assert reader.read_entries(ML, 7, middle, 8, 9) == blocks[1][3:]
    assert len(gets) == 4


def test_a_large_index_is_read_with_a_second_get(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    payloads = [bytes([i]) * 3 for i in range(50)]
    ref = LedgerStorage(block_store(settings)).write_block(ML, 3, 100, payloads)
    monkeypatch.setattr(ledger_blocks, "TAIL_READ_SIZE", 64)  # smaller than the 400-byte index
    reader = LedgerStorage(block_store(settings))
    gets = _count(reader.client, "before-parameter-build.s3.GetObject")
    assert reader.read_entries(ML, 3, ref, 120, 122) == payloads[20:23]
    assert len(gets) == 3


def test_read_entries_outside_the_block_is_refused(settings: Settings) -> None:
    storage = LedgerStorage(block_store(settings))
    ref = storage.write_block(ML, 3, 10, [b"a", b"b"])
    with pytest.raises(ValueError, match="not inside block"):
        storage.read_entries(ML, 3, ref, 11, 12)
    with pytest.raises(ValueError, match="not inside block"):
        storage.read_entries(ML, 3, ref, 9, 10)
    with pytest.raises(ValueError, match="not a block of ledger 4"):
        storage.read_entries(ML, 4, ref, 10, 10)


def test_a_block_is_never_overwritten(settings: Settings, s3_client: Any) -> None:
    storage = LedgerStorage(block_store(settings))
    ref = storage.write_block(ML, 5, 0, [b"first writer"])
    with pytest.raises(BlockExistsError, match=r"block .* exists in bucket .*never overwritten"):
        storage.write_block(ML, 5, 0, [b"second writer"])
    body = s3_client.get_object(Bucket=settings.bucket, Key=ref.key)["Body"].read()
    assert body == encode_block(5, 0, [b"first writer"])
    assert LedgerStorage(block_store(settings)).read_entries(ML, 5, ref, 0, 0) == [b"first writer"]


def test_a_put_whose_response_was_lost_is_not_reported_as_a_conflict(
    settings: Settings, s3_client: Any
) -> None:
    # The first attempt lands but its answer is lost (here: stored by another client, then
    # a fake 500); botocore retries and gets 412. The object is byte-identical to ours, so
    # the write succeeded. A different object under the key is still a conflict.
    storage = _storage(settings, botocore_attempts=3)
    plan: dict[str, Any] = {}

    def land_then_fail(request: Any, **_: Any) -> AWSResponse | None:
        if plan.pop("first_attempt", False):
            s3_client.put_object(Bucket=settings.bucket, Key=plan["key"], Body=plan["body"])
            return _fake_error(request, 500, "InternalError", "connection reset")
        return None

    storage.client.meta.events.register("before-send.s3.PutObject", land_then_fail)

    key = block_key("ledgers", ML, 9, 0)
    plan.update(first_attempt=True, key=key, body=encode_block(9, 0, [b"mine"]))
    assert storage.write_block(ML, 9, 0, [b"mine"]).key == key
    assert "first_attempt" not in plan

    key = block_key("ledgers", ML, 9, 1)
    plan.update(first_attempt=True, key=key, body=encode_block(9, 1, [b"theirs"]))
    with pytest.raises(StorageError, match="exists"):
        storage.write_block(ML, 9, 1, [b"mine"])


def test_list_blocks_skips_foreign_objects(settings: Settings, s3_client: Any) -> None:
    storage = LedgerStorage(block_store(settings))
    ref = storage.write_block(ML, 4, 0, [b"x"])
    directory = ledger_dir("ledgers", ML, 4)
    for name in (f"{0:020d}.blk.tmp", "notes.txt", f"{1:019d}.blk", "sub/x.blk"):
        s3_client.put_object(Bucket=settings.bucket, Key=directory + name, Body=b"?")
    assert storage.list_blocks(ML, 4) == [
        ledger_blocks.BlockRef(
            ref.key, ML, 4, 0, ref.size, storage.list_blocks(ML, 4)[0].last_modified
        )
    ]


def test_corrupt_and_missing_blocks(settings: Settings, s3_client: Any) -> None:
    storage = LedgerStorage(block_store(settings))
    key = block_key("ledgers", ML, 6, 0)
    good = encode_block(6, 0, [b"aaaa", b"bbbb"])
    s3_client.put_object(Bucket=settings.bucket, Key=key, Body=good.replace(b"bbbb", b"bbbX"))
    (ref,) = storage.list_blocks(ML, 6)
    assert storage.read_entries(ML, 6, ref, 0, 0) == [b"aaaa"]
    with pytest.raises(BlockFormatError, match="entry 1: checksum mismatch"):
        storage.read_entries(ML, 6, ref, 1, 1)
    with pytest.raises(BlockFormatError, match="checksum mismatch"):
        storage.read_block(ML, 6, ref)

    # a block of ledger 6 stored under ledger 8's key
    wrong_key = block_key("ledgers", ML, 8, 0)
    s3_client.put_object(Bucket=settings.bucket, Key=wrong_key, Body=good)
    with pytest.raises(BlockFormatError, match="header says ledger 6, its key says ledger 8"):
        storage.read_block(ML, 8, storage.list_blocks(ML, 8)[0])

    s3_client.delete_object(Bucket=settings.bucket, Key=key)
    with pytest.raises(StorageError, match="not found in bucket"):
        storage.read_block(ML, 6, ref)
    with pytest.raises(StorageError, match="not found in bucket"):
        LedgerStorage(block_store(settings)).read_entries(ML, 6, ref, 0, 0)


# --- listing ------------------------------------------------------------------------------


def test_iter_objects_paginates_and_prefix_is_empty(settings: Settings, s3_client: Any) -> None:
    storage = LedgerStorage(block_store(settings))
    keys = _block_keys(1200)
    _put_keys(s3_client, settings.bucket, [*keys, "elsewhere/readme"])
    listed = list(storage.iter_objects(ml_dir("ledgers", ML)))
    assert [o.key for o in listed] == sorted(keys)
    assert all(o.size == 1 and o.last_modified > 0 for o in listed)
    assert len(list(storage.iter_objects())) == 1201  # "" is the whole bucket
    assert not storage.prefix_is_empty("ledgers/")
    assert storage.prefix_is_empty("ledgers/nothing/")


# --- bulk delete ------------------------------------------------------------------------


def test_bulk_delete_of_2500_keys_takes_three_requests(settings: Settings, s3_client: Any) -> None:
    storage = LedgerStorage(block_store(settings))
    keys = _block_keys(2500)
    _put_keys(s3_client, settings.bucket, keys)
    calls = _count(storage.client, "before-parameter-build.s3.DeleteObjects")
    api_calls = _count(storage.client, "before-call.s3.DeleteObjects")

    result = storage.delete_keys(keys)

    assert result == DeleteResult(deleted=2500, requests=3)
    assert len(api_calls) == 3
    assert [len(p["Delete"]["Objects"]) for p in calls.params] == [1000, 1000, 500]
    assert all(p["Delete"]["Quiet"] is True for p in calls.params)
    assert _all_keys(s3_client, settings.bucket) == []
    assert storage.prefix_is_empty("ledgers/")

    # Idempotent: deleting again succeeds and counts the absent keys as deleted.
    again = storage.delete_keys(keys)
    assert again == DeleteResult(deleted=2500, requests=3)
    assert again.ok
    again.raise_for_failures()


def test_bulk_delete_with_workers(
    settings: Settings, s3_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bulk_delete, "MAX_KEYS_PER_DELETE", 10)  # 35 keys: 4 batches
    storage = LedgerStorage(block_store(settings))
    keys = _block_keys(35)
    _put_keys(s3_client, settings.bucket, keys)
    threads: set[str] = set()
    storage.client.meta.events.register(
        "before-send.s3.DeleteObjects",
        lambda **_: threads.add(threading.current_thread().name),
    )
    result = storage.delete_keys(keys + keys[:5], max_workers=4)  # duplicates: sent once
    assert result == DeleteResult(deleted=35, requests=4)
    assert all(name.startswith("ledgergc-delete") for name in threads)
    assert _all_keys(s3_client, settings.bucket) == []


def test_throttling_is_retried_with_backoff(settings: Settings, s3_client: Any) -> None:
    sleeps: list[float] = []
    storage = _storage(settings, sleep=sleeps.append)
    keys = _block_keys(50)
    _put_keys(s3_client, settings.bucket, keys)
    storage.client.meta.events.register("before-send.s3.DeleteObjects", _fail_first_sends(2))
    sends = _count(storage.client, "before-send.s3.DeleteObjects")

    result = storage.delete_keys(keys)

    assert result == DeleteResult(deleted=50, requests=3)  # 2 throttled tries, then success
    assert len(sends) == 3
    assert len(sleeps) == 2 and all(0 <= s <= FAST_RETRY.max_delay for s in sleeps)
    assert _all_keys(s3_client, settings.bucket) == []


def test_botocore_absorbs_a_single_throttle(settings: Settings, s3_client: Any) -> None:
    storage = LedgerStorage(
        block_store(settings)
    )  # the default client: botocore's standard retries
    keys = _block_keys(10)
    _put_keys(s3_client, settings.bucket, keys)
    storage.client.meta.events.register("before-send.s3.DeleteObjects", _fail_first_sends(1))
    sends = _count(storage.client, "before-send.s3.DeleteObjects")
    assert storage.delete_keys(keys) == DeleteResult(deleted=10, requests=1)
    assert len(sends) == 2


def test_throttling_that_never_ends_is_reported_not_raised(
    settings: Settings, s3_client: Any
) -> None:
    storage = _storage(settings)
    keys = _block_keys(5)
    _put_keys(s3_client, settings.bucket, keys)
    storage.client.meta.events.register("before-send.s3.DeleteObjects", _fail_first_sends(99))

    result = storage.delete_keys(keys)

    assert result.deleted == 0 and result.requests == FAST_RETRY.max_attempts
    assert set(result.failed) == set(keys)
    reason = result.failed[keys[0]]
    assert "SlowDown (HTTP 503)" in reason and "gave up after 4 attempts" in reason
    assert sorted(_all_keys(s3_client, settings.bucket)) == sorted(keys)
    with pytest.raises(DeleteFailedError, match="5 key") as info:
        result.raise_for_failures()
    assert info.value.failed == result.failed


def test_a_permanent_request_error_is_not_retried(settings: Settings, s3_client: Any) -> None:
    storage = _storage(settings)
    keys = _block_keys(3)
    _put_keys(s3_client, settings.bucket, keys)
    storage.client.meta.events.register(
        "before-send.s3.DeleteObjects", _fail_first_sends(99, 403, "AccessDenied", "Access Denied")
    )
    result = storage.delete_keys(keys)
    assert result.requests == 1 and result.deleted == 0
    assert result.failed == dict.fromkeys(keys, "AccessDenied (HTTP 403): Access Denied")


def test_per_key_errors_are_reported_and_transient_ones_retried(
    settings: Settings, s3_client: Any
) -> None:
    storage = _storage(settings)
    keys = _block_keys(20)
    _put_keys(s3_client, settings.bucket, keys)
    denied, flaky, absent = keys[3], keys[7], keys[11]
    attempts: list[list[str]] = []

    def per_key_errors(parsed: dict[str, Any], **_: Any) -> None:
        # S3 answers 200 and lists failed keys inside the body; a healthy local store never
        # does, so the parsed answer is edited. (The store did delete them; we pretend it
        # did not.)
        sent = attempts[-1]
        errors = []
        if denied in sent:
            errors.append({"Key": denied, "Code": "AccessDenied", "Message": "Access Denied"})
        if flaky in sent and len(attempts) == 1:
            errors.append({"Key": flaky, "Code": "InternalError", "Message": "try again"})
        if absent in sent:
            errors.append({"Key": absent, "Code": "NoSuchKey", "Message": "gone"})
        parsed["Errors"] = errors

    def record(params: dict[str, Any], **_: Any) -> None:
        attempts.append([o["Key"] for o in params["Delete"]["Objects"]])

    storage.client.meta.events.register("before-parameter-build.s3.DeleteObjects", record)
    storage.client.meta.events.register("after-call.s3.DeleteObjects", per_key_errors)

    result = storage.delete_keys(keys)

    assert result.failed == {denied: "AccessDenied: Access Denied"}
    assert result.deleted == 19  # the flaky key on its retry; the absent key counts as gone
    assert result.requests == 2
    assert attempts[1] == [flaky]  # a permanent error is not retried
    assert not result.ok


def test_foreign_keys_are_refused(settings: Settings, s3_client: Any) -> None:
    storage = LedgerStorage(block_store(settings))
    block = block_key("ledgers", ML, 1, 0)
    tmp = ledger_dir("ledgers", ML, 1) + "upload.tmp"
    outside = f"other/{ML}/ledgers/{1:020d}/{0:020d}.blk"
    _put_keys(s3_client, settings.bucket, [block, tmp, outside])
    calls = _count(storage.client, "before-parameter-build.s3.DeleteObjects")

    result = storage.delete_keys([block, tmp, outside])

    assert result.deleted == 1 and not result.failed
    assert set(result.refused) == {tmp, outside}
    assert "block name not recognised" in result.refused[tmp]
    assert "outside prefix" in result.refused[outside]
    assert [o["Key"] for p in calls.params for o in p["Delete"]["Objects"]] == [block]
    assert sorted(_all_keys(s3_client, settings.bucket)) == sorted([tmp, outside])
    assert storage.delete_keys([tmp]).requests == 0


def test_delete_prefix_data(settings: Settings, s3_client: Any) -> None:
    storage = LedgerStorage(block_store(settings))
    for first in range(0, 30, 10):
        storage.write_block(ML, 2, first, [b"x"] * 10)
    storage.write_block(ML, 3, 0, [b"keep"])
    stray = ledger_dir("ledgers", ML, 2) + "stray.tmp"
    s3_client.put_object(Bucket=settings.bucket, Key=stray, Body=b"?")
    directory = ledger_dir("ledgers", ML, 2)

    result = storage.delete_prefix_data(directory)

    assert result.deleted == 3 and not result.failed and list(result.refused) == [stray]
    assert storage.list_blocks(ML, 2) == []
    assert not storage.prefix_is_empty(directory)  # the foreign object is still there
    assert storage.prefix_is_empty(directory, blocks_only=True)
    assert len(storage.list_blocks(ML, 3)) == 1  # ledger 3 untouched

    for bad in ("", "/", ledger_dir("ledgers", ML, 2).rstrip("/"), "other/x/"):
        with pytest.raises(ValueError):
            storage.delete_prefix_data(bad)
