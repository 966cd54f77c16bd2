"""The GCS offload bucket's pure parts (what a bucket keeps, the batch's wire format) and
what fake-gcs-server cannot show: soft delete (it has none), refused credentials."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest
from google.api_core import exceptions as api

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import ConfigError, StorageError
from ledger_gc.storage import gcs_batch
from ledger_gc.storage.gcs_bucket import GcsBucket
from ledger_gc.storage.gcs_versioning import gcs_versioning, noncurrent_delete_days
from ledger_gc.storage.offload_bucket import DeletedVersion
from ledger_gc.storage.versioning import UNKNOWN

DAY = 86400
KEY = "3f2a0c1e-7d4b-4a51-9a0e-0123456789ab-ledger-42"

# --- what a delete keeps --------------------------------------------------------------------


def test_a_bucket_with_neither_soft_delete_nor_versions_says_deletes_cannot_be_undone() -> None:
    found = gcs_versioning("offload", False, None, [], "")

    assert not found.keeps_deleted_data
    assert found.to_dict()["how"] == "none"
    assert "cannot be undone" in found.note and "'offload'" in found.note
    assert gcs_versioning("offload", False, 0, [], "").how == "none"  # a policy of 0 is off


def test_soft_delete_keeps_deleted_objects_for_its_retention() -> None:
    found = gcs_versioning("offload", False, 7 * DAY, [], "")

    assert found.keeps_deleted_data and found.how == "soft-delete"
    assert (found.retention_days, found.noncurrent_expiration_days) == (7, 7)
    assert "7 days" in found.note and "restored" in found.note
    assert found.to_dict()["retention_days"] == 7


def test_versions_kept_until_a_lifecycle_rule_then_soft_delete() -> None:
    rule = {"action": {"type": "Delete"}, "condition": {"daysSinceNoncurrentTime": 30}}

    found = gcs_versioning("offload", True, 7 * DAY, [rule], "")

    assert found.how == "versions" and found.lifecycle == "expires"
    assert found.noncurrent_expiration_days == 37
    assert "daysSinceNoncurrentTime=30" in found.note and "7 days more" in found.note


def test_versions_without_a_rule_stay_billed_forever() -> None:
    found = gcs_versioning("offload", True, None, [], "")

    assert found.keeps_deleted_data and found.noncurrent_expiration_days is None
    assert "billed forever" in found.note


def test_unknown_counts_as_keeping() -> None:
    from ledger_gc.storage.gcs_versioning import GcsVersioning

    found = GcsVersioning("offload", UNKNOWN)

    assert found.keeps_deleted_data and "unknown" in found.note


def test_only_a_rule_over_every_noncurrent_object_of_the_prefix_counts() -> None:
    def rule(**condition: Any) -> dict[str, Any]:
        return {"action": {"type": "Delete"}, "condition": condition}

    narrowed = [
        rule(daysSinceNoncurrentTime=1, matchesSuffix=["-index"]),
        rule(daysSinceNoncurrentTime=2, matchesPrefix=["other/"]),
        rule(daysSinceNoncurrentTime=3, isLive=True),
        {"action": {"type": "SetStorageClass"}, "condition": {"daysSinceNoncurrentTime": 4}},
        rule(age=5),
    ]
    assert noncurrent_delete_days(narrowed, "pulsar/") is None
    covering = [*narrowed, rule(daysSinceNoncurrentTime=9, matchesPrefix=["pul"], isLive=False)]
    assert noncurrent_delete_days(covering, "pulsar/") == (9, "Delete daysSinceNoncurrentTime=9")


# --- the batch's wire format ----------------------------------------------------------------


def test_each_batch_part_has_a_content_id_and_its_generation_condition() -> None:
    content_type, body = gcs_batch.delete_body(
        "http://127.0.0.1:1/", "my-bucket", [("a/b c", "11"), (KEY, "12")]
    )

    boundary = content_type.split("boundary=")[1]
    parts = body.split(f"--{boundary}")[1:-1]
    assert [p.count("Content-ID: <item-") for p in parts] == [1, 1]
    assert (
        "DELETE http://127.0.0.1:1/storage/v1/b/my-bucket/o/a%2Fb%20c?ifGenerationMatch=11"
        in parts[0]
    )
    assert f"/o/{KEY}?ifGenerationMatch=12 HTTP/1.1" in parts[1]
    assert all(p.endswith("\r\n\r\n\r\n") for p in parts)  # the boundary's CRLF is its own
    assert body.endswith(f"--{boundary}--\r\n")
    with pytest.raises(ValueError, match="1 to 100"):
        gcs_batch.delete_body("http://x", "b", [("k", "1")] * 101)


def test_answers_are_matched_by_content_id_never_by_position() -> None:
    def part(content_id: str, status: str, body: str = "") -> str:
        return (
            f"--B\r\nContent-Type: application/http\r\nContent-ID: <{content_id}>\r\n\r\n"
            f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n\r\n{body}\r\n"
        )

    content = (
        part("response-item-2", "412 Precondition Failed", '{"error":{"message":"no\\nmatch"}}')
        + part("response-item-0", "204 No Content")
        + part("response-item-7", "204 No Content")  # no such call: ignored
        + "--B--\r\n"
    )

    found = gcs_batch.answers("multipart/mixed; boundary=B", content.encode(), 3)

    assert found == {0: gcs_batch.Answer(204, "No Content"), 2: gcs_batch.Answer(412, "no match")}
    with pytest.raises(ValueError, match="not multipart"):
        gcs_batch.answers("application/json", b"{}", 3)


# --- soft delete, credentials: what fake-gcs-server cannot show --------------------------------


class FakeClient:
    """A ``storage.Client`` as far as GcsBucket uses it, for a bucket with soft delete
    (fake-gcs-server has none) or one that refuses (403)."""

    api_endpoint = "https://storage.googleapis.com"

    def __init__(self, *, soft_deleted: list[Any] = (), refuse: bool = False) -> None:  # type: ignore[assignment]
        self._http = object()
        self.soft_deleted = list(soft_deleted)
        self.refuse = refuse
        self.restored: list[dict[str, Any]] = []

    def bucket(self, name: str) -> Any:
        client = self

        class Bucket:
            def restore_blob(self, key: str, **kw: Any) -> None:
                if kw.get("if_generation_match") == 0 and key == "written-since":
                    raise api.PreconditionFailed("At least one of the pre-conditions did not hold")
                kw.pop("timeout"), kw.pop("retry")
                client.restored.append({"key": key, **kw})

        return Bucket()

    def get_bucket(self, name: str, **kw: Any) -> Any:
        if self.refuse:
            raise api.Forbidden("caller does not have storage.buckets.get access\nsecond line")
        return SimpleNamespace(
            versioning_enabled=False,
            soft_delete_policy=SimpleNamespace(retention_duration_seconds=7 * DAY),
            lifecycle_rules=[],
        )

    def list_blobs(self, bucket: str, **kw: Any) -> Any:
        if kw.get("soft_deleted"):
            return iter(self.soft_deleted)
        return iter([])


def soft(name: str, generation: int, day: int) -> Any:
    when = datetime(2026, 11, day, tzinfo=UTC)
    return SimpleNamespace(name=name, generation=generation, size=5, soft_delete_time=when)


def test_a_soft_deleted_generation_is_found_and_restored_only_if_nothing_is_there() -> None:
    client = FakeClient(
        soft_deleted=[soft(KEY, 11, 10), soft(KEY, 12, 20), soft(KEY + "-index", 13, 20)]
    )
    bucket = GcsBucket(ObjectStore(bucket="offload", driver="gcs"), client)

    found = bucket.deleted_versions(KEY, 0, 2**62)

    assert [(f.version, f.how) for f in found] == [("12", "soft-delete"), ("11", "soft-delete")]
    assert [f.listed_version for f in found] == ["12", "11"]  # what a run's audit names
    in_window = bucket.deleted_versions(KEY, 0, found[1].deleted_at)
    assert [f.version for f in in_window] == ["11"]
    bucket.restore(found[0])
    assert client.restored == [{"key": KEY, "generation": 12, "if_generation_match": 0}]
    with pytest.raises(StorageError, match="exists now"):
        bucket.restore(DeletedVersion("written-since", "5", 1, 1, "soft-delete"))


def test_a_refused_bucket_read_names_the_credentials_in_one_line() -> None:
    bucket = GcsBucket(ObjectStore(bucket="offload", driver="gcs"), FakeClient(refuse=True))

    with pytest.raises(StorageError) as caught:
        bucket.check_bucket()

    message = str(caught.value)
    assert "\n" not in message and "google_cloud_default" in message and "HTTP 403" in message
    assert bucket.versioning().how == UNKNOWN  # never an error: counted as kept


def test_no_credentials_is_one_line_naming_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/key.json")

    with pytest.raises(ConfigError) as caught:
        GcsBucket(ObjectStore(bucket="offload", driver="gcs"))

    assert "\n" not in str(caught.value) and "application default credentials" in str(caught.value)


def test_a_token_is_the_client_credential_and_never_in_its_messages() -> None:
    token = "ya29.not-a-real-token"
    bucket = GcsBucket(ObjectStore(bucket="offload", driver="gcs", gcs_token=token))

    assert bucket.client._credentials.token == token
    assert token not in repr(bucket.store) and bucket.endpoint == "https://storage.googleapis.com"


def test_an_empty_bucket_setting_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="LEDGERGC_OFFLOAD_BUCKET"):
        GcsBucket(ObjectStore(bucket="", driver="gcs"), FakeClient())
