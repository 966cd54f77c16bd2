"""When a ``bk-offloaded-copy``'s offloaded copy confirms it may go (pure)."""

from __future__ import annotations

import struct

import pytest

from ledger_gc.rules.bookkeeper import offloaded_copy as oc
from ledger_gc.rules.bookkeeper.offloaded_copy import ObjectsRead, OffloadedCopy

BUCKET = "tiered"
COPY = OffloadedCopy("0000-uuid", driver="aws-s3", bucket=BUCKET, ledger_size=1024)
KEYS = ("p/0000-uuid-ledger-7", "p/0000-uuid-ledger-7-index")


def index_header(data_length: int, magic: int = oc.INDEX_MAGIC) -> bytes:
    """``OffloadIndexBlockImpl``'s header: magic, index length, data object length, ..."""
    return struct.pack(">IIqq", magic, 40, data_length, 128)


@pytest.mark.parametrize(
    ("copy", "bucket", "expected"),
    [
        (COPY, "", "LEDGERGC_OFFLOAD_BUCKET is empty"),
        (None, BUCKET, "no uuid"),
        (OffloadedCopy("u", driver="google-cloud-storage"), BUCKET, "not to the s3 store"),
        (OffloadedCopy("u", driver="azureblob"), BUCKET, "not to the s3 store"),
        (OffloadedCopy("u", driver=None), BUCKET, "not recorded"),
        (OffloadedCopy("u", driver="aws-s3", bucket="elsewhere"), BUCKET, "elsewhere"),
    ],
)
def test_a_copy_ledger_gc_cannot_look_at_is_held(
    copy: OffloadedCopy | None, bucket: str, expected: str
) -> None:
    why = oc.why_unverifiable(copy, bucket)
    assert why is not None and expected in why


@pytest.mark.parametrize("driver", ["aws-s3", "S3", "aliyun-oss"])
def test_s3_drivers_can_be_looked_at(driver: str) -> None:
    copy = OffloadedCopy("u", driver=driver, bucket=BUCKET)
    assert oc.why_unverifiable(copy, BUCKET) is None
    assert oc.why_unverifiable(OffloadedCopy("u", driver=driver), BUCKET) is None


def test_a_whole_copy_confirms() -> None:
    read = ObjectsRead(4096, 40, index_header(4096))
    assert oc.why_not_confirmed(COPY, KEYS, read) is None


@pytest.mark.parametrize(
    ("read", "expected"),
    [
        (ObjectsRead(None, 40, index_header(4096)), "does not exist"),
        (ObjectsRead(4096, None), "never finished"),
        (ObjectsRead(100, 40, index_header(4096)), "the offload wrote 4096"),
        (ObjectsRead(4096, 40, index_header(4096, magic=0x3D1FB0BC)), "not an offload index"),
        (ObjectsRead(4096, 8, b"\xde\x47\xde\x47\x00\x00\x00\x28"), "not an offload index"),
        (ObjectsRead(0, 40, index_header(0)), "the offload wrote 0"),
        (ObjectsRead(512, 40, index_header(512)), "fewer than the ledger's 1024"),
    ],
)
def test_objects_that_do_not_confirm_the_copy_hold_it(read: ObjectsRead, expected: str) -> None:
    why = oc.why_not_confirmed(COPY, KEYS, read)
    assert why is not None and expected in why


def test_the_index_header_is_read_big_endian() -> None:
    assert oc.data_object_length(index_header(2**40 + 3)) == 2**40 + 3
    assert oc.data_object_length(index_header(5)[:15]) is None
