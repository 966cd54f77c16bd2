"""The pure parts of the Azure offload container: which name prefix lists a shard, what
the report says a delete there leaves, and the settings a client cannot be built without."""

from __future__ import annotations

import sys

import pytest

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import ConfigError
from ledger_gc.storage.azure_container import (
    NONE,
    SOFT_DELETE,
    VERSIONS,
    AzureContainer,
    AzureVersioning,
    listing_plan,
    listing_prefix,
    service_client,
)
from ledger_gc.storage.versioning import ENABLED, OFF, UNKNOWN


@pytest.mark.parametrize(
    ("prefix", "start", "end", "expected"),
    [
        ("", "3", "4", "3"),  # a uuid-digit shard: exactly one name prefix
        ("off/", "off/a", "off/b", "off/a"),
        ("", None, None, ""),
        ("off/", "off/g", None, "off/"),  # a start alone narrows nothing
        ("", None, "0", ""),
        ("", ":", "a", ""),  # outside the shards: filtered
        ("", "ab1", "ab7", "ab"),  # the bounds' common prefix
        ("off/", "x", "y", "off/"),  # bounds outside the prefix: the prefix, filtered
    ],
)
def test_listing_prefix(prefix: str, start: str | None, end: str | None, expected: str) -> None:
    assert listing_prefix(prefix, start, end) == expected


def test_every_offload_shard_is_listed_by_its_own_name_prefix() -> None:
    # The offload scan's shards: the uuid's first hex digit below the prefix.
    for digit, after in zip("0123456789abcdef", "123456789:bcdefg", strict=True):
        assert listing_prefix("ledgers/", f"ledgers/{digit}", f"ledgers/{after}") == (
            f"ledgers/{digit}"
        )


def test_what_a_delete_leaves_reads_for_each_setting() -> None:
    freed = AzureVersioning("c", OFF, how=NONE)
    soft = AzureVersioning("c", SOFT_DELETE, "expires", 7, how=SOFT_DELETE, retention_days=7)
    versions = AzureVersioning("c", ENABLED, UNKNOWN, how=VERSIONS)
    unknown = AzureVersioning("c", UNKNOWN, UNKNOWN, how=UNKNOWN)

    assert [v.keeps_deleted_data for v in (freed, soft, versions, unknown)] == [
        False, True, True, True,
    ]  # fmt: skip
    assert "cannot be undone" in freed.note
    assert "7 days" in soft.note and "restore" in soft.note
    assert "previous version" in versions.note and "lifecycle" in versions.note
    assert "unknown" in unknown.note and "cannot be undone" in unknown.note
    assert soft.to_dict()["how"] == SOFT_DELETE
    assert soft.to_dict()["noncurrent_expiration_days"] == 7
    assert all("\n" not in v.note for v in (freed, soft, versions, unknown))


def test_a_client_needs_an_account_and_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "azure.identity", None)  # not installed
    with pytest.raises(ConfigError, match="AZURE_STORAGE_ACCOUNT"):
        service_client(ObjectStore("c", driver="azure"))
    with pytest.raises(ConfigError, match="AZURE_STORAGE_ACCOUNT"):
        service_client(ObjectStore("c", driver="azure", endpoint="http://h/a", azure_key="k"))
    # No key, SAS or connection string, and no azure-identity to find a login with.
    with pytest.raises(ConfigError, match="wasb_default") as raised:
        service_client(ObjectStore("c", driver="azure", azure_account="acct"))
    assert "AZURE_STORAGE_ACCESS_KEY" in str(raised.value)


def test_an_empty_container_name_names_the_setting() -> None:
    with pytest.raises(ConfigError, match="LEDGERGC_OFFLOAD_BUCKET"):
        AzureContainer(ObjectStore("", driver="azure", azure_account="acct", azure_key="a2V5"))


def test_the_endpoint_shown_carries_no_sas() -> None:
    store = ObjectStore("c", driver="azure", azure_account="acct", azure_sas="?sv=2025&sig=c2Vj")
    bucket = AzureContainer(store)
    assert bucket.endpoint == "https://acct.blob.core.windows.net"


@pytest.mark.parametrize(
    ("prefix", "start", "end", "expected"),
    [
        ("", "3", "4", ["3"]),  # a uuid shard: one name prefix
        ("", None, "0", [""]),  # open at the start: read up to "0" and stop
        ("", ":", "a", [chr(c) for c in range(ord(":"), ord("a"))]),  # not "a" itself
        ("", "g", None, [chr(c) for c in range(ord("g"), 0x7F)]),
        ("", "g", "zq", [chr(c) for c in range(ord("g"), ord("z") + 1)]),  # "z" < "zq"
        ("p/", "p/:", "p/a", [f"p/{chr(c)}" for c in range(ord(":"), ord("a"))]),
        (
            "",
            "1",
            "b\u00e9",
            ["1", "2", "3", "4", "5", "6", "7", "8", "9"]
            + [chr(c) for c in range(ord(":"), ord("b") + 1)],
        ),
        ("", "\u00e9", None, [""]),  # not printable ASCII: one filtered listing
    ],
)
def test_listing_plan(prefix: str, start: str | None, end: str | None, expected: list[str]) -> None:
    assert listing_plan(prefix, start, end) == expected
