"""Orphan classification (pure): classes, the reference diff, and the shared key regex."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_gc.rules.orphans import classify
from ledger_gc.rules.orphans.classify import (
    FOREIGN,
    LIVE,
    MARKED,
    NO_NAMESPACE,
    ORPHAN_LEDGER,
    ORPHAN_PARTITION,
    Candidate,
    ManagedLedgerRefs,
    MetadataSnapshot,
    StoredObject,
    classify_key,
    diff_objects,
)
from ledger_gc.rules.storage import keys
from ledger_gc.rules.storage.keys import block_key, ledger_dir, ml_dir

PREFIX = "ledgers"
ML = "public/default/persistent/orders"
GONE_ML = "public/other/persistent/deleted"
SNAPSHOT = MetadataSnapshot(
    {ML: ManagedLedgerRefs(listed=frozenset({10, 11}), marked=frozenset({7}))}
)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (block_key(PREFIX, ML, 10, 0), LIVE),
        (block_key(PREFIX, ML, 11, 500), LIVE),
        (block_key(PREFIX, ML, 7, 0), MARKED),
        (block_key(PREFIX, ML, 3, 0), ORPHAN_LEDGER),
        (block_key(PREFIX, GONE_ML, 10, 0), ORPHAN_PARTITION),
        (f"{PREFIX}/README", FOREIGN),
        (f"{ml_dir(PREFIX, ML)}notes.txt", FOREIGN),
        (f"{ledger_dir(PREFIX, ML, 3)}00000000000000000000.blk.tmp", FOREIGN),
        (f"{ledger_dir(PREFIX, ML, 3)}", FOREIGN),
        ("elsewhere/" + block_key("", ML, 3, 0), FOREIGN),
    ],
)
def test_every_key_gets_exactly_one_class(key: str, expected: str) -> None:
    assert classify_key(PREFIX, key, SNAPSHOT)[0] == expected


def test_a_foreign_key_is_foreign_even_inside_an_orphan_ledger_directory() -> None:
    key = f"{ledger_dir(PREFIX, ML, 3)}00000000000000000000.blk\n"
    name, parsed = classify_key(PREFIX, key, SNAPSHOT)
    assert name == FOREIGN
    assert parsed.reason is not None


def _obj(key: str, size: int = 10, modified: int = 1000) -> StoredObject:
    return StoredObject(key, size, modified)


def test_the_reference_diff_aggregates_per_target_and_namespace() -> None:
    objects = [
        _obj(block_key(PREFIX, ML, 10, 0), 100, 1),
        _obj(block_key(PREFIX, ML, 7, 0), 50, 2),
        _obj(block_key(PREFIX, ML, 3, 0), 20, 5),
        _obj(block_key(PREFIX, ML, 3, 10), 30, 9),
        _obj(block_key(PREFIX, GONE_ML, 1, 0), 40, 3),
        _obj(block_key(PREFIX, GONE_ML, 2, 0), 60, 8),
        _obj(f"{PREFIX}/README", 7, 4),
    ]

    result = diff_objects(PREFIX, objects, SNAPSHOT)

    assert result.managed_ledgers == 1
    assert (result.objects, result.bytes, result.block_objects) == (7, 307, 6)
    assert result.classes[LIVE].to_dict() == {"objects": 1, "bytes": 100, "units": 1}
    assert result.classes[MARKED].to_dict() == {"objects": 1, "bytes": 50, "units": 1}
    assert result.classes[ORPHAN_LEDGER].to_dict() == {"objects": 2, "bytes": 50, "units": 1}
    assert result.classes[ORPHAN_PARTITION].to_dict() == {"objects": 2, "bytes": 100, "units": 1}
    assert result.classes[FOREIGN].to_dict() == {"objects": 1, "bytes": 7, "units": 0}
    assert result.candidates == [
        Candidate(ORPHAN_LEDGER, ML, 3, 2, 50, 9, 5),
        Candidate(ORPHAN_PARTITION, GONE_ML, None, 2, 100, 8, 3, max_ledger_id=2),
    ]
    assert result.orphan_bytes == 150
    assert result.orphan_fraction == pytest.approx(150 / 307)
    assert set(result.namespaces) == {"public/default", "public/other", NO_NAMESPACE}
    assert result.namespaces[NO_NAMESPACE][FOREIGN].objects == 1
    assert result.foreign_samples == [{"key": f"{PREFIX}/README", "reason": keys.NOT_ML_PATH}]


def test_candidate_prefixes_are_the_ledger_or_managed_ledger_directory() -> None:
    ledger = Candidate(ORPHAN_LEDGER, ML, 3, 1, 1, 1, 1)
    partition = Candidate(ORPHAN_PARTITION, ML, None, 1, 1, 1, 1)
    assert ledger.prefix(PREFIX) == ledger_dir(PREFIX, ML, 3)
    assert partition.prefix(PREFIX) == ml_dir(PREFIX, ML)
    with pytest.raises(ValueError, match="ledger id"):
        Candidate(ORPHAN_LEDGER, ML, None, 1, 1, 1, 1)
    with pytest.raises(ValueError, match="not an orphan class"):
        Candidate(LIVE, ML, 3, 1, 1, 1, 1)


# --- the Spark regex must say exactly what parse_key says -------------------------------

# Segments in and around what Pulsar names hold: "+", "*" and "%XX" (valid only in a
# topic), "=" and ":" (valid only in a tenant or namespace), a stray "%".
_VALID_SEGMENT = st.one_of(
    st.text(alphabet="abcXYZ019%_.=:-+*", min_size=1, max_size=4),
    st.sampled_from(["a+b", "x*y", "%E4%BD%A0", "orders+%2B+refunds", "t=1:x", "%2", "%zz"]),
)
_ODD_SEGMENT = st.one_of(
    st.sampled_from(["", ".", "..", "persistent", "ledgers"]),
    st.text(alphabet="abc/é٣ \n.", min_size=0, max_size=3),
)
_VALID_ID = st.integers(min_value=0, max_value=keys.MAX_ID).map(lambda n: f"{n:020d}")
_ODD_ID = st.one_of(
    st.integers(min_value=keys.MAX_ID + 1, max_value=10**20 - 1).map(str),
    st.text(alphabet="0123456789٣", min_size=18, max_size=21),
)
_MISTAKES = [None, None, None, "segment", "domain", "dir", "id", "suffix", "extra", "short"]


@st.composite
def store_like_keys(draw: st.DrawFn) -> str:
    """A valid block key, or one with a single small mistake (about two thirds)."""
    segments = [draw(_VALID_SEGMENT) for _ in range(4)]
    segments[2] = "persistent"
    parts = [*segments, "ledgers", draw(_VALID_ID), draw(_VALID_ID) + ".blk"]
    mistake = draw(st.sampled_from(_MISTAKES))
    if mistake == "segment":
        parts[draw(st.sampled_from([0, 1, 3]))] = draw(_ODD_SEGMENT)
    elif mistake == "domain":
        parts[2] = draw(st.sampled_from(["Persistent", "non-persistent", ""]))
    elif mistake == "dir":
        parts[4] = draw(st.sampled_from(["ledger", "", "Ledgers", "ledgers."]))
    elif mistake == "id":
        parts[draw(st.sampled_from([5, 6]))] = draw(_ODD_ID) + (".blk" if parts[6] else "")
    elif mistake == "suffix":
        parts[6] = parts[6][:-4] + draw(st.sampled_from([".blk\n", ".tmp", "", ".BLK", ".blk.1"]))
    elif mistake == "extra":
        parts.append(draw(st.sampled_from(["", "x", "00000000000000000000.blk"])))
    elif mistake == "short":
        parts = parts[: draw(st.integers(4, 6))]
    return "/".join(parts)


def _regex_view(rest: str) -> tuple[bool, str | None, int | None]:
    match = re.search(classify.BLOCK_RE_PYTHON, rest)
    if match is None:
        return False, None, None
    ledger_id, entry_id = int(match.group(2)), int(match.group(3))
    if ledger_id > keys.MAX_ID or entry_id > keys.MAX_ID:
        return False, None, None
    return True, match.group(1), ledger_id


@settings(max_examples=600, deadline=None)
@given(st.one_of(store_like_keys(), st.text(max_size=80)))
def test_the_block_regex_agrees_with_parse_key(rest: str) -> None:
    parsed = keys.parse_key("", rest)
    is_block, ml_name, ledger_id = _regex_view(rest)
    assert is_block == parsed.is_block, rest
    if is_block:
        assert (ml_name, ledger_id) == (parsed.ml_name, parsed.ledger_id)
    namespace = re.search(classify.NAMESPACE_RE_PYTHON, rest)
    expected = keys.namespace_of(parsed.ml_name) if parsed.ml_name else None
    assert (namespace.group(1) if namespace else None) == expected, rest


def test_the_java_and_python_patterns_differ_only_in_the_end_anchor() -> None:
    assert classify.BLOCK_RE_JAVA.removesuffix(r"\z") == classify.BLOCK_RE_PYTHON.removesuffix(
        r"\Z"
    )
    assert classify.NAMESPACE_RE_JAVA.removesuffix(r"(?:/|\z)") == (
        classify.NAMESPACE_RE_PYTHON.removesuffix(r"(?:/|\Z)")
    )


# --- tiered storage: offloaded segments (segments.py) ---------------------------------


def test_segments_are_live_only_when_a_listed_or_marked_ledger_carries_their_uuid() -> None:
    from ledger_gc.rules.orphans import segments
    from ledger_gc.rules.orphans.classify import (
        DiffResult,
        StoredObject,
        parse_segment_target,
    )
    from ledger_gc.s3_orphans.reading import LISTED_ROW, MARKED_ROW, ML_ROW, snapshot_from_rows

    u = {n: f"00000000-0000-0000-0000-{n:012d}" for n in range(10)}
    ml = "t/ns/persistent/a"
    snapshot = snapshot_from_rows(
        [
            (ML_ROW, ml, None, None),
            (LISTED_ROW, ml, 1, u[1]),  # offloaded (or offloading: complete is not looked at)
            (LISTED_ROW, ml, 2, u[2]),  # re-offloaded under u2; u9 is its failed attempt
            (MARKED_ROW, ml, 3, u[3]),  # trim pending: the trim owns its copy
            (LISTED_ROW, ml, 4, None),  # never offloaded
        ]
    )
    keys = {
        f"p/{u[1]}-ledger-1": "live-segment",
        f"p/{u[1]}-ledger-1-index": "live-segment",
        f"p/{u[9]}-ledger-2": "orphan-segment",  # stale uuid, data only
        f"p/{u[3]}-ledger-3-index": "live-segment",
        f"p/{u[5]}-ledger-4": "orphan-segment",  # listed, never offloaded under u5
        f"p/{u[6]}-ledger-7": "orphan-segment",  # in no managed ledger (deleted topic)
        f"p/{u[6]}-ledger-7-index": "orphan-segment",
        f"p/{u[1]}-ledger-3": "orphan-segment",  # another ledger's uuid
        f"p/{u[7]}": "offload-foreign",  # the streaming offloader
        f"p/{u[7]}-index": "offload-foreign",
        f"p/{u[1]}-ledger-01": "offload-foreign",
        "p/readme": "offload-foreign",
    }
    result = DiffResult(managed_ledgers=1)
    objects = [StoredObject(k, 10, 1000 + i) for i, k in enumerate(sorted(keys))]
    segments.diff_segments(result, "bkt", "p", objects, snapshot)

    for name in ("live-segment", "orphan-segment", "offload-foreign"):
        assert result.classes[name].objects == sum(1 for c in keys.values() if c == name)
    assert result.classes["live-segment"].units == 2
    by_ledger = {c.ledger_id: c for c in result.candidates}
    assert set(by_ledger) == {2, 3, 4, 7}
    assert by_ledger[7].objects == 2 and by_ledger[7].ml_name == ""
    assert by_ledger[2].ml_name == ml  # its ledger is listed, under another uuid
    assert parse_segment_target(by_ledger[2].prefix("")) == ("bkt", f"p/{u[9]}-ledger-2")
    assert result.orphan_bytes == 50 and result.offload_bytes == 120


def _split_check(rest: str) -> bool:
    """The Spark diff's two-step block test (spark.diff._directory_groups), in Python."""
    directory = "/".join(rest.split("/")[:6])
    entry = rest.rsplit("/", 1)[-1]
    return (
        len(rest) == len(directory) + 1 + len(entry)
        and re.match(classify.ENTRY_FILE_RE_PYTHON, entry) is not None
        and re.match(classify.LEDGER_DIR_RE_PYTHON, directory) is not None
    )


_ID20 = st.sampled_from(["00000000000000000003", "0000000000000000003", "0000000000000000000a"])
_PART = st.sampled_from(
    ["t1", "ns", "persistent", "my%20topic", "a b", ".", "..", "...", "", "ledgers", "x/y"]
)


@given(
    st.lists(_PART, min_size=4, max_size=5),
    st.sampled_from(["ledgers", "ledger"]),
    _ID20,
    _ID20,
    st.sampled_from([".blk", ".BLK", ".blk\n", ".blk/x", ""]),
    st.booleans(),
)
@settings(max_examples=600)
def test_the_spark_diffs_two_step_block_test_is_the_block_pattern(
    names, ledgers, ledger, entry, suffix, double_slash
):
    rest = "/".join([*names[:4], ledgers, ledger]) + ("//" if double_slash else "/") + entry
    rest += suffix
    expected = re.match(classify.BLOCK_RE_PYTHON, rest) is not None

    assert _split_check(rest) == expected, rest


def test_the_two_step_block_test_accepts_real_block_keys():
    rest = block_key("", "t1/ns/persistent/my%20topic", 3, 7).lstrip("/")
    assert re.match(classify.BLOCK_RE_PYTHON, rest) and _split_check(rest)
