"""What a delete frees: versioning and the lifecycle rule, read without ever raising."""

from __future__ import annotations

from botocore.exceptions import ClientError

from ledger_gc.storage.versioning import noncurrent_expiration, read_bucket_versioning


def denied(operation: str) -> ClientError:
    return ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, operation)


class Client:
    def __init__(self, versioning=None, lifecycle=None) -> None:
        self.versioning, self.lifecycle = versioning, lifecycle

    def get_bucket_versioning(self, Bucket):
        if isinstance(self.versioning, Exception):
            raise self.versioning
        return {"Status": self.versioning} if self.versioning else {}

    def get_bucket_lifecycle_configuration(self, Bucket):
        if isinstance(self.lifecycle, Exception):
            raise self.lifecycle
        if self.lifecycle is None:
            raise ClientError({"Error": {"Code": "NoSuchLifecycleConfiguration"}}, "Get")
        return {"Rules": self.lifecycle}


def rule(days, prefix="", status="Enabled", **extra):
    return {
        "ID": f"r{days}",
        "Status": status,
        "Filter": {"Prefix": prefix, **extra},
        "NoncurrentVersionExpiration": {"NoncurrentDays": days},
    }


def test_an_unversioned_bucket_frees_what_it_deletes():
    found = read_bucket_versioning(Client(), "b", "ledgers/")
    assert found.versioning == "Off" and not found.keeps_deleted_data


def test_suspended_versioning_still_keeps_the_old_versions():
    found = read_bucket_versioning(Client("Suspended"), "b", "ledgers/")
    assert found.keeps_deleted_data and found.lifecycle == "none"
    assert "billed" in found.note


def test_access_denied_is_unknown_and_counts_as_not_freed():
    found = read_bucket_versioning(Client(denied("GetBucketVersioning")), "b", "ledgers/")
    assert found.versioning == "unknown" and found.keeps_deleted_data
    lifecycle = read_bucket_versioning(
        Client("Enabled", denied("GetBucketLifecycleConfiguration")), "b", "ledgers/"
    )
    assert lifecycle.lifecycle == "unknown" and lifecycle.noncurrent_expiration_days is None


def test_the_soonest_rule_covering_the_store_prefix_counts():
    rules = [
        rule(30),
        rule(3, prefix="other/"),
        rule(1, status="Disabled"),
        rule(7, "led"),
        rule(2, "", Tag={"Key": "k", "Value": "v"}),
    ]
    assert noncurrent_expiration(rules, "ledgers/") == (7, "r7")
    found = read_bucket_versioning(Client("Enabled", rules), "b", "ledgers/")
    assert found.noncurrent_expiration_days == 7 and "7 days" in found.note
