"""The ``bk-offloaded-copy`` check reads through the ``OffloadBucket`` protocol (``head``,
``read_range``), whichever store: the copy's objects as a GCS or Azure bucket answers
them. A protocol-shaped bucket in memory stands in for the store here; the GCS and
Azure classes are tested against their emulators by their own suites."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import pytest

from ledger_gc.bookkeeper import offloaded_copy
from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import StorageError
from ledger_gc.rules.bookkeeper.offloaded_copy import INDEX_MAGIC, OffloadedCopy
from ledger_gc.storage.offload_bucket import AZURE, GCS, ObjectHead

UUID = "6f1c2b7a-0000-4000-8000-0123456789ab"
LEDGER = 42
DATA_KEY = f"{UUID}-ledger-{LEDGER}"
INDEX_KEY = f"{DATA_KEY}-index"


def index_bytes(data_length: int) -> bytes:
    return struct.pack(">IIqq", INDEX_MAGIC, 40, data_length, 128) + b"\0" * 24


@dataclass
class MemoryBucket:
    """What ``offloaded_copy`` asks of a bucket: ``head`` (None: no such object; a
    failure raises) and ``read_range``."""

    objects: dict[str, bytes]
    bucket: str = "offload"
    prefix: str = ""
    failing: set[str] = field(default_factory=set)
    reads: list[tuple[str, int, int]] = field(default_factory=list)

    def head(self, key: str) -> ObjectHead | None:
        if key in self.failing:
            raise StorageError(f"GCS at http://127.0.0.1:1: 403 on {key}")
        data = self.objects.get(key)
        return None if data is None else ObjectHead(key, len(data), 0, "1")

    def read_range(self, key: str, start: int, count: int) -> bytes:
        self.reads.append((key, start, count))
        return self.objects[key][start : start + count]


def _reason(driver: str, family: str, bucket: MemoryBucket) -> str | None:
    store = ObjectStore("offload", driver=family)
    copy = OffloadedCopy(UUID, driver=driver, bucket="offload", ledger_size=1000)
    return offloaded_copy.hold_reason(store, LEDGER, copy, bucket)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("driver", "family"), [("google-cloud-storage", GCS), ("azureblob", AZURE)]
)
def test_a_whole_copy_on_gcs_or_azure_is_confirmed(driver: str, family: str) -> None:
    bucket = MemoryBucket({DATA_KEY: b"d" * 4096, INDEX_KEY: index_bytes(4096)})
    assert _reason(driver, family, bucket) is None
    assert bucket.reads == [(INDEX_KEY, 0, 16)]  # the index's header only


@pytest.mark.parametrize(
    ("objects", "failing", "expected"),
    [
        ({DATA_KEY: b"d" * 100, INDEX_KEY: index_bytes(4096)}, set(), "the offload wrote 4096"),
        ({DATA_KEY: b"d" * 4096}, set(), "never finished"),
        ({INDEX_KEY: index_bytes(4096)}, set(), "does not exist"),
        ({DATA_KEY: b"d" * 4096, INDEX_KEY: index_bytes(4096)}, {DATA_KEY}, "cannot be read"),
    ],
    ids=["truncated", "index-missing", "data-missing", "refused"],
)
def test_a_copy_that_is_not_whole_on_gcs_is_held(
    objects: dict[str, bytes], failing: set[str], expected: str
) -> None:
    bucket = MemoryBucket(objects, failing=failing)
    why = _reason("google-cloud-storage", GCS, bucket)
    assert why is not None and expected in why and why.endswith("held"), why


def test_a_gcs_copy_while_configured_for_azure_is_held_unread() -> None:
    bucket = MemoryBucket({DATA_KEY: b"d" * 4096, INDEX_KEY: index_bytes(4096)})
    why = _reason("google-cloud-storage", AZURE, bucket)
    assert why is not None and "google-cloud-storage (gcs)" in why
    assert bucket.reads == []
