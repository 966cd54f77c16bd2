"""The offload bucket on Google Cloud Storage (``GcsBucket``), against fake-gcs-server.

Where fake-gcs-server 1.54.0 does not behave as GCS (asserted in tests/integration/
test_object_store_emulators.py, and in the ``test_fake_gcs_server_*`` tests here), the
test says so and puts GCS's behaviour at the client:

* it ignores ``ifGenerationMatch`` on a delete and on a rewrite, so ``RecordingSession``
  below answers 412 where GCS would, and does not forward the call; the requests
  themselves are recorded to show the condition is sent;
* its filesystem backend (the session's server) has no object versioning, so the restore
  of a noncurrent generation runs on a server of its own with the memory backend;
* it has no soft delete: that restore is a unit test (tests/unit/test_gcs_bucket_parts.py);
* it lists noncurrent generations only for ``versions=true`` in lower case, which
  ``GcsBucket`` sends (the client sends ``True``).
"""

from __future__ import annotations

import re
import threading
import tracemalloc
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import requests
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import BucketNotFoundError, StorageError
from ledger_gc.rules.storage.offload_keys import segment_keys
from ledger_gc.storage import gcs_bucket
from ledger_gc.storage.gcs_bucket import GcsBucket
from ledger_gc.storage.offload_bucket import GCS, GCS_BATCH, OffloadBucket
from ledger_gc.storage.s3_bucket import ObjectInfo
from local_stack.fake_gcs import FakeGcsServer
from local_stack.server_process import free_port

FOREIGN = "foreign/report.csv"


def segment(first_digit: str = "", ledger_id: int = 7) -> tuple[str, str]:
    """A new ledger's data and index keys, its uuid starting with ``first_digit``."""
    text = str(uuid.uuid4())
    return segment_keys("", first_digit + text[len(first_digit) :], ledger_id)


def upload_part(number: int = 1) -> str:
    return f"{uuid.uuid4()}_{number:08d}"


def put(gcs: Any, names: list[str], data: bytes = b"offloaded entries") -> None:
    """Write ``names`` with eight writers (fake-gcs-server answers each in ~2 ms)."""
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: gcs.blob(name).upload_from_string(data), names))


def store_for(server: FakeGcsServer, name: str) -> ObjectStore:
    return ObjectStore(bucket=name, endpoint=server.endpoint, driver=GCS)


@pytest.fixture
def raw(fake_gcs: FakeGcsServer) -> Any:
    """A new bucket on the session's fake-gcs-server, as the SDK sees it."""
    return fake_gcs.client().create_bucket(f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def bucket(fake_gcs: FakeGcsServer, raw: Any) -> GcsBucket:
    """The same bucket as ledger-gc opens it: from the store alone (endpoint given, no
    token: anonymous, as for an emulator)."""
    return GcsBucket(store_for(fake_gcs, raw.name))


class RecordingSession:
    """A client's HTTP session that records batch bodies and copy URLs, and answers as
    GCS does where fake-gcs-server 1.54.0 does not (``like_gcs``): it ignores
    ``ifGenerationMatch`` on a delete and on a copy, so a batch part whose generation is
    no longer the object's, and a copy ``ifGenerationMatch=0`` onto an object that
    exists, are not forwarded and get GCS's 412."""

    def __init__(self, inner: Any, raw: Any, *, like_gcs: bool = False) -> None:
        self.inner = inner
        self.raw = raw
        self.like_gcs = like_gcs
        self.batches: list[list[dict[str, str]]] = []
        self.copies: list[str] = []
        self.lock = threading.Lock()

    def request(
        self, method: str, url: str, data: Any = None, headers: Any = None, **kw: Any
    ) -> Any:
        if "/copyTo/" in url or "/rewriteTo/" in url:
            return self._copy(method, url, data, headers, **kw)
        if not url.endswith("/batch/storage/v1"):
            return self.inner.request(method, url, data=data, headers=headers, **kw)
        boundary = _boundary(headers["Content-Type"])
        parts = [p for p in data.split(f"--{boundary}") if p.strip() not in ("", "--")]
        seen = [_part_fields(p) for p in parts]
        with self.lock:
            self.batches.append(seen)
        refused = [f for f in seen if self.like_gcs and self._moved(f)]
        kept = [p for p, f in zip(parts, seen, strict=True) if f not in refused]
        body = "".join(f"--{boundary}{p}" for p in kept) + f"--{boundary}--\r\n"
        answer = self.inner.request(method, url, data=body, headers=headers, **kw)
        if refused:
            answer._content = _with_412(answer, refused)
        return answer

    def _moved(self, fields: dict[str, str]) -> bool:
        now = self.raw.get_blob(fields["name"])
        return now is not None and str(now.generation) != fields["ifGenerationMatch"]

    def _copy(self, method: str, url: str, data: Any, headers: Any, **kw: Any) -> Any:
        with self.lock:
            self.copies.append(url)
        target = unquote(url.split("?")[0].rsplit("/o/", 1)[1])
        if self.like_gcs and "ifGenerationMatch=0" in url and self.raw.get_blob(target):
            answer = requests.Response()
            answer.status_code = 412
            answer._content = b'{"error":{"code":412,"message":"Precondition Failed"}}'
            answer.headers["Content-Type"] = "application/json"
            answer.request = requests.Request(method, url).prepare()
            return answer
        return self.inner.request(method, url, data=data, headers=headers, **kw)


def _boundary(content_type: str) -> str:
    found = re.search(r'boundary="?([^";]+)', content_type)
    assert found is not None, content_type
    return found.group(1)


def _part_fields(part: str) -> dict[str, str]:
    """A batch part's Content-ID, method, object name and ifGenerationMatch."""
    content_id = re.search(r"(?im)^content-id:\s*(\S+)", part)
    line = re.search(r"(?m)^(DELETE|GET|POST|PATCH|PUT) (\S+) HTTP/1\.1", part)
    assert line is not None, part
    name = re.search(r"/o/([^?]+)", line.group(2))
    generation = re.search(r"ifGenerationMatch=(\d+)", line.group(2))
    return {
        "content_id": content_id.group(1) if content_id else "",
        "method": line.group(1),
        "name": unquote(name.group(1)) if name else "",
        "ifGenerationMatch": generation.group(1) if generation else "",
    }


def _with_412(answer: Any, refused: list[dict[str, str]]) -> bytes:
    """The emulator's multipart answer with GCS's 412 part for each refused request."""
    boundary = _boundary(answer.headers["Content-Type"])
    text = answer.content.decode()
    head, _, _ = text.rpartition(f"--{boundary}--")
    extra = "".join(
        f"--{boundary}\r\nContent-Type: application/http\r\n"
        f"Content-ID: <response-{f['content_id'].strip('<>')}>\r\n\r\n"
        "HTTP/1.1 412 Precondition Failed\r\nContent-Type: application/json\r\n\r\n"
        '{"error":{"code":412,"message":"At least one of the pre-conditions you specified '
        'did not hold."}}\r\n'
        for f in refused
    )
    return f"{head}{extra}--{boundary}--\r\n".encode()


# --- the interface ------------------------------------------------------------------------


def test_it_is_an_offload_bucket_for_gcs(bucket: GcsBucket, fake_gcs: FakeGcsServer) -> None:
    assert isinstance(bucket, OffloadBucket)
    assert bucket.driver == GCS
    assert bucket.endpoint == fake_gcs.endpoint
    bucket.check_bucket()


# --- listing ------------------------------------------------------------------------------


def test_lists_every_object_with_its_generation_and_by_shard(bucket: GcsBucket, raw: Any) -> None:
    in_a = [*segment("a"), upload_part()]
    in_a[2] = "a" + in_a[2][1:]
    elsewhere = [*segment("3"), *segment("f"), FOREIGN]
    put(raw, in_a + elsewhere)
    generations = {b.name: str(b.generation) for b in raw.client.list_blobs(raw.name)}

    listed = list(bucket.iter_objects())

    assert {o.key: o.version for o in listed} == generations
    assert all(o.size == len(b"offloaded entries") and o.last_modified > 0 for o in listed)
    assert sorted(o.key for o in bucket.iter_objects(start="a", end="b")) == sorted(in_a)
    assert [o.key for o in bucket.iter_objects("foreign/")] == [FOREIGN]
    assert bucket.list_prefixes([in_a[0], "nothing-"]) == {
        in_a[0]: [o for o in listed if o.key.startswith(in_a[0])],
        "nothing-": [],
    }


def test_an_object_listed_without_an_updated_time_fails_the_listing(
    bucket: GcsBucket, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An object of unknown age is never judged against retention: read as 0 (1970) it
    would be the oldest object of the bucket, past any retention, at the scan and again
    at the re-check. (GCS always sends ``updated``; the answer without it is injected.)"""
    put(raw, [upload_part()])
    listing = bucket.client.list_blobs

    def without_updated(*args: Any, **kwargs: Any) -> Any:
        for blob in listing(*args, **kwargs):
            blob._properties.pop("updated", None)
            yield blob

    monkeypatch.setattr(bucket.client, "list_blobs", without_updated)

    with pytest.raises(StorageError, match="no updated time"):
        list(bucket.iter_objects())


def test_listing_memory_stays_flat_in_the_number_of_objects(bucket: GcsBucket, raw: Any) -> None:
    # An iterator over pages dropped once read: listing 4x the objects peaks at about the
    # same memory (one page), not 4x.
    put(raw, [f"small/{uuid.uuid4()}-ledger-{n}" for n in range(200)], b"x")
    put(raw, [f"large/{uuid.uuid4()}-ledger-{n}" for n in range(800)], b"x")
    bucket.page_size = 50

    def peak(prefix: str, expected: int) -> int:
        tracemalloc.start()
        try:
            assert sum(1 for _ in bucket.iter_objects(prefix)) == expected
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    small, large = peak("small/", 200), peak("large/", 800)
    assert large < small * 1.5, (small, large)


# --- head and range read ------------------------------------------------------------------


def test_head_reads_size_generation_and_metadata_in_lower_case(bucket: GcsBucket, raw: Any) -> None:
    data, index = segment()
    blob = raw.blob(index)
    blob.metadata = {"PulsarClusterName": "east", "role": "Index"}
    blob.upload_from_string(b"0123456789")

    head = bucket.head(index)

    assert head is not None
    assert (head.key, head.size, head.version) == (index, 10, str(raw.get_blob(index).generation))
    assert head.metadata == {"pulsarclustername": "east", "role": "Index"}
    assert head.last_modified > 0
    assert bucket.head(data) is None
    assert bucket.read_range(index, 2, 4) == b"2345"
    with pytest.raises(StorageError, match=data):
        bucket.read_range(data, 0, 4)


# --- delete -------------------------------------------------------------------------------


def test_batch_delete_deletes_what_was_listed_in_batches_of_100(
    bucket: GcsBucket, raw: Any
) -> None:
    names = [key for n in range(100) for key in segment(ledger_id=n)] + [upload_part(3)]
    put(raw, [*names, FOREIGN])
    listed = [o for o in bucket.iter_objects() if o.key != FOREIGN]
    already_gone = listed[0]
    raw.blob(already_gone.key).delete()

    result = bucket.delete_listed(listed)

    assert (result.deleted, result.failed, result.refused) == (len(names), {}, {})
    assert result.requests == -(-len(names) // GCS_BATCH) == 3
    assert [b.name for b in raw.client.list_blobs(raw.name)] == [FOREIGN]


def test_batch_delete_sends_if_generation_match_in_parts_with_content_ids(
    bucket: GcsBucket, raw: Any
) -> None:
    names = [*segment(), upload_part()]
    put(raw, names)
    listed = list(bucket.iter_objects())
    recorder = RecordingSession(bucket.batch_session, raw)
    bucket.batch_session = recorder

    assert bucket.delete_listed(listed).deleted == 3

    (batch,) = recorder.batches
    assert {(p["method"], p["name"], p["ifGenerationMatch"]) for p in batch} == {
        ("DELETE", o.key, o.version) for o in listed
    }
    assert len({p["content_id"] for p in batch}) == 3 and all(p["content_id"] for p in batch)


def test_an_object_rewritten_since_the_listing_is_kept(bucket: GcsBucket, raw: Any) -> None:
    # fake-gcs-server deletes regardless of ifGenerationMatch; GCS answers 412 and keeps
    # the object. The session answers as GCS would (RecordingSession.like_gcs).
    data, index = segment()
    put(raw, [data, index])
    listed = list(bucket.iter_objects())
    raw.blob(index).upload_from_string(b"written again by a broker")
    bucket.batch_session = RecordingSession(bucket.batch_session, raw, like_gcs=True)

    result = bucket.delete_listed(listed)

    assert result.deleted == 1
    assert list(result.failed) == [index]
    assert "moved since it was listed" in result.failed[index]
    assert "kept" in result.failed[index]
    assert [b.name for b in raw.client.list_blobs(raw.name)] == [index]


class FlakySession:
    """GCS's transient faults, which fake-gcs-server never has: the first ``lost`` batch
    POSTs answered 503 (not forwarded), and the answer for ``unanswered`` left out of
    every batch answer (the call itself forwarded)."""

    def __init__(self, inner: Any, *, lost: int = 0, unanswered: str = "") -> None:
        self.inner = inner
        self.lost = lost
        self.unanswered = unanswered
        self.posts = 0

    def request(
        self, method: str, url: str, data: Any = None, headers: Any = None, **kw: Any
    ) -> Any:
        if not url.endswith("/batch/storage/v1"):
            return self.inner.request(method, url, data=data, headers=headers, **kw)
        self.posts += 1
        if self.posts <= self.lost:
            answer = requests.Response()
            answer.status_code = 503
            answer._content = b'{"error":{"code":503,"message":"Backend Error"}}'
            answer.request = requests.Request(method, url).prepare()
            return answer
        answer = self.inner.request(method, url, data=data, headers=headers, **kw)
        if self.unanswered:
            boundary = _boundary(headers["Content-Type"])
            ids = [
                f["content_id"].strip("<>")
                for f in map(_part_fields, data.split(f"--{boundary}")[1:-1])
                if f["name"] == self.unanswered
            ]
            answer._content = _without(answer, [f"response-{i}" for i in ids])
        return answer


def _without(answer: Any, content_ids: list[str]) -> bytes:
    boundary = _boundary(answer.headers["Content-Type"])
    parts = answer.content.decode().split(f"--{boundary}")
    kept = [p for p in parts if not any(f"<{i}>" in p for i in content_ids)]
    return f"--{boundary}".join(kept).encode()


def test_a_batch_lost_or_a_call_unanswered_is_sent_again_and_never_guessed(
    bucket: GcsBucket, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gcs_bucket, "BATCH_BACKOFF_SECONDS", 0.0)
    first, second = segment(), segment()
    put(raw, [*first, *second])
    listed = list(bucket.iter_objects())
    bucket.batch_session = FlakySession(bucket.batch_session, lost=1)

    on_retry = bucket.delete_listed([o for o in listed if o.key in first])

    assert (on_retry.deleted, on_retry.failed, on_retry.requests) == (2, {}, 2)

    silent = second[1]
    bucket.batch_session = FlakySession(bucket.batch_session.inner, unanswered=silent)
    unanswered = bucket.delete_listed([o for o in listed if o.key in second])

    # The emulator deleted it, but no answer said so: it is not counted, and the next run
    # finds it gone (a 404 then counts as deleted).
    assert unanswered.deleted == 1 and unanswered.requests == gcs_bucket.BATCH_ATTEMPTS
    assert list(unanswered.failed) == [silent] and "no answer" in unanswered.failed[silent]


def test_foreign_objects_are_refused_and_never_sent(bucket: GcsBucket, raw: Any) -> None:
    data, index = segment()
    lookalikes = [FOREIGN, f"{data}-extra", f"{uuid.uuid4()}_123", f"{uuid.uuid4()}"]
    put(raw, [data, *lookalikes])
    recorder = RecordingSession(bucket.batch_session, raw)
    bucket.batch_session = recorder

    result = bucket.delete_listed(list(bucket.iter_objects()))

    assert result.deleted == 1
    assert sorted(result.refused) == sorted(lookalikes)
    assert all("never deleted" in why for why in result.refused.values())
    assert [p["name"] for batch in recorder.batches for p in batch] == [data]
    assert sorted(b.name for b in raw.client.list_blobs(raw.name)) == sorted(lookalikes)
    assert bucket.owns(index) is None and bucket.owns(upload_part(99999999)) is None


def test_an_object_listed_without_a_generation_is_not_sent(bucket: GcsBucket, raw: Any) -> None:
    data, _ = segment()
    put(raw, [data])

    result = bucket.delete_listed([ObjectInfo(data, 17, 1)])

    assert list(result.failed) == [data] and "generation" in result.failed[data]
    assert raw.get_blob(data) is not None


# --- errors -------------------------------------------------------------------------------


def test_a_missing_bucket_is_one_line_naming_the_setting(fake_gcs: FakeGcsServer) -> None:
    bucket = GcsBucket(store_for(fake_gcs, f"missing-{uuid.uuid4().hex[:8]}"))

    with pytest.raises(BucketNotFoundError) as caught:
        bucket.check_bucket()
    message = str(caught.value)
    assert "\n" not in message and "LEDGERGC_OFFLOAD_BUCKET" in message
    assert bucket.bucket in message and fake_gcs.endpoint in message
    with pytest.raises(BucketNotFoundError):  # a listing never answers "empty" for it
        list(bucket.iter_objects())


def test_a_wrong_endpoint_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    nothing_there = f"http://127.0.0.1:{free_port()}"
    bucket = GcsBucket(ObjectStore(bucket="offload", endpoint=nothing_there, driver=GCS))
    bucket.retry_seconds = 1.0  # 10 s by default

    with pytest.raises(StorageError) as caught:
        bucket.check_bucket()
    message = str(caught.value)
    assert "\n" not in message and "LEDGERGC_OFFLOAD_ENDPOINT" in message
    assert nothing_there in message and len(message) < 400
    with pytest.raises(StorageError, match="LEDGERGC_OFFLOAD_ENDPOINT"):
        list(bucket.iter_objects())


# --- what a delete keeps, and restore ------------------------------------------------------


def test_a_bucket_that_keeps_nothing_says_deletes_cannot_be_undone(bucket: GcsBucket) -> None:
    found = bucket.versioning()

    assert not found.keeps_deleted_data
    assert "cannot be undone" in found.note and bucket.bucket in found.note
    assert found.to_dict()["how"] == "none"
    assert bucket.deleted_versions("anything", 0, 2**62) == []


@pytest.fixture(scope="module")
def versioning_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcsServer]:
    """A fake-gcs-server of this module's own with the memory backend: the one that keeps
    noncurrent generations (its filesystem backend refuses versioning)."""
    server = FakeGcsServer(tmp_path_factory.mktemp("fake-gcs-memory"), backend="memory")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def versioned(versioning_gcs: FakeGcsServer) -> Any:
    client = versioning_gcs.client()
    new = client.bucket(f"v-{uuid.uuid4().hex[:12]}")
    new.versioning_enabled = True
    return client.create_bucket(new)


def test_fake_gcs_server_lists_versions_only_for_lower_case_true(versioned: Any) -> None:
    # google-cloud-storage sends versions=True; fake-gcs-server compares with "true".
    versioned.blob("v").upload_from_string(b"1")
    versioned.blob("v").upload_from_string(b"2")

    client = versioned.client
    assert len(list(client.list_blobs(versioned.name, versions=True))) == 1
    assert len(list(client.list_blobs(versioned.name, versions="true"))) == 2


def test_fake_gcs_server_rewrite_ignores_if_generation_match(versioned: Any) -> None:
    # GCS refuses a rewrite (or copy) ifGenerationMatch=0 onto an object that exists
    # (412); fake-gcs-server 1.54.0 writes it anyway (its rewriteObject creates with no
    # conditions). A restore "never over a newer object" is shown with
    # RecordingSession.like_gcs.
    versioned.blob("a").upload_from_string(b"old")
    versioned.blob("b").upload_from_string(b"newer")

    versioned.blob("b").rewrite(versioned.blob("a"), if_generation_match=0)

    assert versioned.blob("b").download_as_bytes() == b"old"


def test_restores_a_noncurrent_generation_never_over_a_newer_object(
    versioning_gcs: FakeGcsServer, versioned: Any
) -> None:
    session = RecordingSession(requests.Session(), versioned, like_gcs=True)
    client = storage.Client(
        project="ledgergc-local",
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        client_options={"api_endpoint": versioning_gcs.endpoint},
        _http=session,
    )
    bucket = GcsBucket(store_for(versioning_gcs, versioned.name), client)
    data, index = segment()
    versioned.blob(data).upload_from_string(b"the offloaded ledger")
    versioned.blob(index).upload_from_string(b"its index")
    versioning = bucket.versioning()
    assert versioning.keeps_deleted_data and versioning.to_dict()["how"] == "versions"
    assert "noncurrent" in versioning.note

    before = {o.key: o for o in bucket.iter_objects()}
    assert bucket.delete_listed(list(before.values())).deleted == 2
    assert list(bucket.iter_objects()) == []

    found = bucket.deleted_versions(data, 0, 2**62)
    assert [(f.key, f.version, f.how) for f in found] == [
        (data, before[data].version, "noncurrent-version")
    ]
    assert found[0].size == len(b"the offloaded ledger") and found[0].deleted_at > 0
    assert found[0].listed_version == before[data].version  # as the delete's audit names it
    assert bucket.deleted_versions(data, 0, found[0].deleted_at - 1) == []

    bucket.restore(found[0])
    assert versioned.blob(data).download_as_bytes() == b"the offloaded ledger"
    (copy,) = session.copies
    assert f"/o/{data}/rewriteTo/" in copy
    assert f"sourceGeneration={before[data].version}" in copy and "ifGenerationMatch=0" in copy

    # The index was written again since its delete: its old generation is not put over it.
    versioned.blob(index).upload_from_string(b"a newer index")
    (old_index,) = bucket.deleted_versions(index, 0, 2**62)[:1]
    with pytest.raises(StorageError, match="exists now") as caught:
        bucket.restore(old_index)
    assert "\n" not in str(caught.value)
    assert versioned.blob(index).download_as_bytes() == b"a newer index"
