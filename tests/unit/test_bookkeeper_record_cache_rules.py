"""The record cache's rules (rules/bookkeeper/record_cache.py): when a cached record may
stand for a read, and that a cached ledger is exactly the ledger a read gives."""

from __future__ import annotations

import struct
import zlib
from array import array
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger_gc.bookkeeper import scan
from ledger_gc.bookkeeper.directories import (
    VERSION_NOT_READ,
    DirectoryWork,
    cached_ledgers,
    split_works,
)
from ledger_gc.proto.bookkeeper_metadata_pb2 import LedgerMetadataFormat
from ledger_gc.rules.bookkeeper import ledger_paths, records
from ledger_gc.rules.bookkeeper.classify import PulsarTags
from ledger_gc.rules.bookkeeper.record_cache import (
    CACHE_FORMAT,
    BodyError,
    CachedRecord,
    DirectoryRow,
    DirectoryState,
    cacheable,
    decode_ids,
    decode_packed,
    decode_records,
    encode_ids,
    encode_records,
    reusable,
)
from pulsar_cluster import cursor_tags, ledger_record, ml_tags, schema_tags

ROW = DirectoryRow("00/0001", DirectoryState(czxid=7, cversion=20, pzxid=100), True, [1, 2, 3])


def test_an_unchanged_directory_is_reused() -> None:
    assert reusable(ROW, ROW.state, [1, 2, 3], proven=True).reuse
    assert reusable(ROW, ROW.state, [1, 2, 3], proven=False).why == "unchanged"


def test_changes_the_listings_account_for_are_reused_only_when_proven() -> None:
    # 4 created, 2 deleted: cversion +2 and pzxid moved.
    moved = DirectoryState(7, 22, 130)
    assert reusable(ROW, moved, [1, 3, 4], proven=True).why == "accounted"
    assert not reusable(ROW, moved, [1, 3, 4], proven=False).reuse
    unproven_row = DirectoryRow(ROW.directory, ROW.state, False, ROW.listed)
    assert not reusable(unproven_row, moved, [1, 3, 4], proven=True).reuse


@pytest.mark.parametrize(
    ("state", "listed", "why"),
    [
        # 2 deleted and created again: cversion +2, listing the same
        (DirectoryState(7, 22, 130), [1, 2, 3], "beyond what the listings show"),
        # a ledger created and deleted in between, beside one new
        (DirectoryState(7, 23, 130), [1, 2, 3, 4], "beyond what the listings show"),
        (DirectoryState(8, 20, 100), [1, 2, 3], "created again"),
        (DirectoryState(7, 19, 100), [1, 2, 3], "went back"),
        (DirectoryState(7, 20, 99), [1, 2, 3], "went back"),
        (DirectoryState(7, 20, 100), [1, 2], "the listing changed but"),
    ],
)
def test_anything_else_is_read_again(state: DirectoryState, listed: list[int], why: str) -> None:
    decision = reusable(ROW, state, listed, proven=True)
    assert not decision.reuse and why in decision.why


def test_nothing_cached_nothing_reused() -> None:
    assert not reusable(None, ROW.state, [1], proven=True).reuse


def record(lid: int, custom: dict[str, bytes] | None = None) -> CachedRecord:
    tags = PulsarTags.of(custom or ml_tags("t/n/persistent/a"))
    return CachedRecord(lid, 1000 + lid, 5_000, None, 1024, 3, tags)


def test_only_ids_still_listed_and_not_above_the_last_high_stand() -> None:
    packed = decode_packed(encode_records([record(1), record(2), record(3), record(9)]))
    kept = packed.standing([1, 3, 9], high=8)
    assert [packed.ledger_ids[i] for i in kept] == [1, 3]
    assert packed.standing({1, 3, 9}, high=None) == [0, 2, 3]


def test_kept_rows_and_new_records_pack_together() -> None:
    """The rows of a directory that stand, with the records read now, in one body;
    each record keeps its own tags (equal tags kept once)."""
    other = ml_tags("t/n/persistent/b")
    packed = decode_packed(encode_records([record(1), record(2, other), record(3)]))
    fresh = [record(7, dict(other)), record(8, {"application": b"x"})]
    body = encode_records(fresh, packed.rows([0, 1]))
    assert decode_records(body) == [record(1), record(2, other), *fresh]
    assert len(decode_packed(body).tags) == 3


def test_a_row_keeps_each_ledgers_tags_decoded_once_a_topic() -> None:
    """A row keeps what the classification reads of a record's custom metadata, its
    Pulsar tags as text, each distinct one once: a reused ledger's tags are not decoded
    again (where a topic's ledgers lie among every other's, a map a record was JSON,
    base64 and UTF-8 again each cycle), and other keys of the map cost the row nothing."""
    big = {**ml_tags("t/n/persistent/a"), "note": b"x" * 10_000, "bad": b"\xff"}
    rows = [record(lid, big if lid % 2 else ml_tags(f"t/n/persistent/{lid}")) for lid in range(6)]
    body = encode_records(rows)
    packed = decode_packed(body)
    assert packed.tags[packed.tag_index[1]] == PulsarTags.of(big)
    assert [packed.tag_index[i] for i in (1, 3, 5)] == [packed.tag_index[1]] * 3
    assert len(packed.tags) == 4  # the three even topics' and the odd ones' shared
    assert len(body) < 1_000  # the note is not kept
    assert decode_records(body) == rows


@pytest.mark.parametrize(
    "tags",
    [
        b'[["pulsar", "managed-ledger", 7, null, null, null]]',  # a number for a name
        b'[["pulsar", "managed-ledger", ["t/n/persistent/a"], null, null, null]]',
        b'[["pulsar", "managed-ledger", "t/n/persistent/a"]]',  # fields missing
        b'{"pulsar": 1}',
        b"[[",
    ],
    ids=["a-number", "a-list", "too-few", "an-object", "cut-short"],
)
def test_tags_a_row_was_edited_to_are_refused_whole(tags: bytes) -> None:
    """A row whose tags are JSON but not each of ``PulsarTags``' fields as text or null
    (edited by hand, or written by something else) is read again: a number or a list
    must never pass for a topic's name in the classification."""
    header = struct.Struct("<4sII")
    columns = b"".join(array(code, [1]).tobytes() for code in "qqqqqi") + bytes(4)
    magic = b"LGC" + bytes([CACHE_FORMAT])
    body = zlib.compress(header.pack(magic, 1, len(tags)) + tags + columns)
    with pytest.raises(BodyError, match=r"tags (do not decode|are not|hold)"):
        decode_packed(body)


def test_a_row_of_an_earlier_format_is_refused_whole() -> None:
    """Rows outlive versions: a body of format 1 (raw maps, base64 in JSON) is read
    again, never taken for this format's (the cycle row's format sends the whole cycle
    to a full read first: ``record_cache.plan``)."""
    header = struct.Struct("<4sII")
    tags = b'[[["application", "cHVsc2Fy"]]]'
    columns = b"".join(array(code, [1]).tobytes() for code in "qqqqqii")
    old = zlib.compress(header.pack(b"LGC\x01", 1, len(tags)) + tags + columns)
    assert CACHE_FORMAT == 2
    with pytest.raises(BodyError, match="another format"):
        decode_packed(old)


def test_only_closed_decoded_records_of_the_listed_znode_are_kept() -> None:
    assert cacheable(records.CLOSED, None, czxid=50, listed_pzxid=60)
    assert cacheable(records.CLOSED, None, czxid=60, listed_pzxid=60)
    assert not cacheable(records.CLOSED, None, czxid=61, listed_pzxid=60)  # created after
    assert not cacheable(records.OPEN, None, czxid=5, listed_pzxid=60)
    assert not cacheable(records.IN_RECOVERY, None, czxid=5, listed_pzxid=60)
    assert not cacheable(None, "does not parse", czxid=5, listed_pzxid=60)


texts = st.one_of(st.none(), st.text(max_size=20))
tags_st = st.builds(PulsarTags, texts, texts, texts, texts, texts, texts)


@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**63 - 1),
            st.integers(0, 2**63 - 1),
            st.integers(0, 2**62),
            st.one_of(st.none(), st.integers(1, 2**62)),
            st.integers(0, 2**62),
            st.sampled_from([1, 2, 3]),
            tags_st,
        ),
        max_size=30,
    )
)
def test_records_round_trip(fields: list[tuple]) -> None:  # type: ignore[type-arg]
    rows = [CachedRecord(*f) for f in fields]
    assert decode_records(encode_records(rows)) == rows


#: ``PulsarTags``' fields' tags, in its order (Pulsar's ``LedgerMetadataUtils``).
TAG_NAMES = (
    "application",
    "component",
    "pulsar/managed-ledger",
    "pulsar/cursor",
    "pulsar/schemaId",
    "pulsar/compactedTopic",
)


@given(
    st.dictionaries(
        st.sampled_from(
            [*TAG_NAMES, "other", ""],
        ),
        st.binary(max_size=12) | st.text(max_size=12).map(str.encode),
        max_size=8,
    )
)
def test_tags_are_each_tag_decoded_as_utf8_or_none(custom: dict[str, bytes]) -> None:
    """``PulsarTags.of`` in one pass (a survey makes one a record) reads each tag as
    UTF-8, and a value that is not UTF-8 as absent; the record cache's rows keep the
    tags exactly."""

    def text(key: str) -> str | None:
        try:
            return custom[key].decode("utf-8") if key in custom else None
        except UnicodeDecodeError:
            return None

    want = PulsarTags(*(text(key) for key in TAG_NAMES))
    assert PulsarTags.of(custom) == want
    assert PulsarTags.of({k: bytearray(v) for k, v in custom.items()}) == want
    kept = CachedRecord(1, 1001, 5_000, None, 1024, 3, want)
    assert decode_records(encode_records([kept]))[0].tags == want


@given(st.lists(st.integers(0, 2**63 - 1), max_size=50))
def test_ids_round_trip(ids: list[int]) -> None:
    assert list(decode_ids(encode_ids(ids))) == ids


@pytest.mark.parametrize("body", [b"", b"garbage", encode_records([record(1)])[:-3]])
def test_a_damaged_body_is_refused(body: bytes) -> None:
    with pytest.raises(BodyError):
        decode_records(body)
    with pytest.raises(BodyError):
        decode_ids(body)


RECORDS = [
    ledger_record(ml_tags("t/n/persistent/a")),
    ledger_record(ml_tags("t/n/persistent/a"), ctime_ms=1_700_000_000_000),
    ledger_record(ml_tags("t/n/persistent/a"), ctime_ms=1_900_000_000_000, length=0),
    ledger_record(cursor_tags("t/n/persistent/a", "sub"), fmt=2),
    ledger_record(schema_tags("t/n/a"), length=7),
    ledger_record({}),
    ledger_record({"application": b"pulsar", "component": b"\xff\xfe"}),
    records.HEADER + b"1\n2\n3\n4096\n0\tbookie-1:3181\tbookie-2:3181\n9\tCLOSED\n",
]


@pytest.mark.parametrize("data", RECORDS)
def test_a_cached_ledger_is_the_ledger_a_read_gives(data: bytes) -> None:
    """What the cache keeps of a record is everything the classification reads: a
    ledger built from it equals a fresh read's, whatever fields a record has (a field
    that ``ledger_of`` starts reading and the cache does not keep fails here)."""
    znode_ctime, czxid = 1_800_000_000_000, 77
    read = scan.ledger_of(42, data, 3, znode_ctime)
    decoded = records.decode_record(data)
    kept = CachedRecord(
        42,
        czxid,
        znode_ctime,
        decoded.ctime_ms,
        decoded.length,
        decoded.format_version,
        PulsarTags.of(decoded.custom),
    )
    body = encode_records([kept])
    [cached] = cached_ledgers(decode_packed(body), [0])
    assert cached == read._replace(version=VERSION_NOT_READ)


def test_the_record_fields_the_cache_keeps_are_those_a_ledger_is_built_from() -> None:
    """``ledger_of_record`` reads exactly what ``CachedRecord`` has (the custom metadata
    only as ``PulsarTags``): a record with only those attributes builds the same ledger
    as the decoded record."""
    decoded = records.decode_record(ledger_record(ml_tags("t/n/persistent/a"), ctime_ms=5))
    only = SimpleNamespace(
        state=decoded.state,
        length=decoded.length,
        format_version=decoded.format_version,
        ctime_ms=decoded.ctime_ms,
        custom=decoded.custom,
    )
    assert scan.ledger_of_record(1, 2, 3, only) == scan.ledger_of_record(1, 2, 3, decoded)
    assert set(LedgerMetadataFormat.DESCRIPTOR.fields_by_name) >= {"customMetadata", "ctime"}


@given(
    st.sampled_from(["00/0000", "00/0012", "21/4748", "99/9999", "000/0000/0021/4748"]),
    st.lists(
        st.one_of(
            st.from_regex(r"L[0-9]{4}", fullmatch=True),
            st.from_regex(r"L[0-9]{1,6}", fullmatch=True),
            st.text(max_size=6),
        ),
        max_size=20,
    ),
    st.sampled_from(ledger_paths.LAYOUTS),
)
def test_leaf_ids_are_what_ledger_id_of_says(directory: str, names: list[str], layout: str) -> None:
    ids, odd = ledger_paths.leaf_ledger_ids(directory, names, layout)
    expected = [ledger_paths.ledger_id_of(f"{directory}/{n}", layout) for n in names]
    assert ids == [i for i in expected if i is not None]
    assert odd == [n for n, i in zip(names, expected, strict=True) if i is None]


def test_works_are_split_evenly_by_ledgers() -> None:
    works = [
        DirectoryWork(f"00/{i:04d}", 0, list(range(size)), None, True)
        for i, size in enumerate([10_000, 10_000, 5_000, 5_000, 10, 10])
    ]
    groups = split_works(works, 2)
    assert sorted(sum(len(w.ledger_ids) for w in g) for g in groups) == [15_010, 15_010]
    assert split_works(works[:1], 4) == [works[:1]]


def test_a_cached_million_is_classified_here_a_read_million_on_executors() -> None:
    from ledger_gc.bookkeeper.record_cache import CachePlan, RowStat
    from ledger_gc.bookkeeper.survey import _worth_executors

    works = [
        DirectoryWork(f"00/{i:04d}", 0, range(10_000), None, True)  # type: ignore[arg-type]
        for i in range(100)
    ]
    stat = RowStat(DirectoryState(1, 2, 3), proven=True)
    cached = CachePlan(True, False, "", rows={w.directory: stat for w in works})
    full = CachePlan(True, True, "", rows=cached.rows)  # (rows of a full read stand for none)
    assert _worth_executors(works, CachePlan(True, True, ""))
    assert _worth_executors(works, full)
    assert not _worth_executors(works, cached)
    assert not _worth_executors(works[:1], full)  # one directory: nothing to share


def test_a_probe_mark_gone_created_again_or_lower_is_a_history_gone_back() -> None:
    from ledger_gc.bookkeeper.record_cache import history_went_back

    assert history_went_back(None, [5, 10]) is None  # no mark left: nothing to compare
    assert history_went_back([5, 10], [5, 10]) is None
    assert history_went_back([5, 10], [5, 14]) is None  # probes since (any cycle's)
    assert "is gone" in (history_went_back([5, 10], None) or "")
    assert "created again" in (history_went_back([5, 10], [6, 12]) or "")
    assert "counts lower" in (history_went_back([5, 10], [5, 8]) or "")
