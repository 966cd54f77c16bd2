"""The S3 key layout: building keys, and the strict parser that decides what is foreign."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger_gc.rules.storage import keys
from ledger_gc.rules.storage.keys import (
    MAX_ID,
    ParsedKey,
    block_key,
    block_name,
    ledger_dir,
    ml_dir,
    namespace_of,
    parse_key,
    validate_ml_name,
)

ML = "public/default/persistent/orders"
ID_1 = "0" * 19 + "1"
BLOCK_0 = "0" * 20 + ".blk"


# --- building keys ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "ledger_id", "first_entry_id", "expected"),
    [
        ("ledgers", 1, 0, f"ledgers/{ML}/ledgers/{ID_1}/{BLOCK_0}"),
        ("", 1, 0, f"{ML}/ledgers/{ID_1}/{BLOCK_0}"),
        ("/", 1, 0, f"{ML}/ledgers/{ID_1}/{BLOCK_0}"),
        ("/ledgers/", 1, 0, f"ledgers/{ML}/ledgers/{ID_1}/{BLOCK_0}"),
        ("a/b", 1, 0, f"a/b/{ML}/ledgers/{ID_1}/{BLOCK_0}"),
        ("p", 0, 42, f"p/{ML}/ledgers/{'0' * 20}/{'0' * 18}42.blk"),
        ("p", MAX_ID, MAX_ID, f"p/{ML}/ledgers/0{MAX_ID}/0{MAX_ID}.blk"),
    ],
)
def test_block_key(prefix: str, ledger_id: int, first_entry_id: int, expected: str) -> None:
    assert block_key(prefix, ML, ledger_id, first_entry_id) == expected


def test_directories_end_with_slash() -> None:
    assert ml_dir("ledgers", ML) == f"ledgers/{ML}/"
    assert ml_dir("", ML) == f"{ML}/"
    assert ledger_dir("ledgers", ML, 1) == f"ledgers/{ML}/ledgers/{ID_1}/"
    assert ledger_dir("", ML, 7).startswith(ml_dir("", ML))


def test_block_names_sort_in_entry_order() -> None:
    ids = [0, 9, 10, 99, 100, 12345, MAX_ID]
    assert sorted(block_name(i) for i in ids) == [block_name(i) for i in ids]


def test_ledger_dirs_are_never_prefixes_of_each_other() -> None:
    # Why the padding and the trailing slash matter: listing ledger 1 must not list 10.
    assert not ledger_dir("p", ML, 10).startswith(ledger_dir("p", ML, 1))
    assert not ml_dir("p", ML + "-2").startswith(ml_dir("p", ML))


@pytest.mark.parametrize(
    ("ledger_id", "first_entry_id"),
    [(-1, 0), (0, -1), (MAX_ID + 1, 0), (0, MAX_ID + 1), (True, 0), ("1", 0), (1.0, 0)],
)
def test_bad_ids_are_refused(ledger_id: object, first_entry_id: object) -> None:
    with pytest.raises(ValueError):
        block_key("p", ML, ledger_id, first_entry_id)  # type: ignore[arg-type]


# --- managed-ledger names ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        ML,
        "t/ns/persistent/my-topic-partition-0",
        "t-1/ns_2/persistent/a.b%3Dc%3Ad",
        "t=1:x/ns.2/persistent/a+b*c",  # '+' is a space, '*' is kept by Java's URLEncoder
        "public/default/persistent/orders+%2B+refunds",
        "tenant/ns/persistent/topic%2Fwith%2Fslashes",
        "T/N/persistent/%E4%BD%A0%E5%A5%BD",
    ],
)
def test_valid_ml_names(name: str) -> None:
    assert validate_ml_name(name) == name


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("public/default/orders", "has 3 segment(s)"),
        ("public/default/persistent/orders/extra", "has 5 segment(s)"),
        ("public/default/non-persistent/orders", "expected 'persistent'"),
        ("public//persistent/orders", "empty namespace"),
        ("/default/persistent/orders", "empty tenant"),
        ("public/default/persistent/", "empty topic"),
        ("public/default/persistent/or ders", "not a URL-encoded name"),
        ("public/default/persistent/orders?", "not a URL-encoded name"),
        ("public/default/persistent/ördérs", "not a URL-encoded name"),
        ("public/default/persistent/100%", "not a URL-encoded name"),
        ("public/default/persistent/a=b", "not a URL-encoded name"),
        ("pub+lic/default/persistent/x", "characters other than"),
        ("public/def%20ault/persistent/x", "characters other than"),
        ("public/default/persistent/..", "may not be '..'"),
        ("public/./persistent/x", "may not be '.'"),
        ("", "has 1 segment(s)"),
    ],
)
def test_invalid_ml_names(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        validate_ml_name(name)


def test_ml_name_must_be_a_string() -> None:
    with pytest.raises(ValueError, match="must be a string"):
        validate_ml_name(None)  # type: ignore[arg-type]


def test_namespace_of() -> None:
    assert namespace_of(ML) == "public/default"
    with pytest.raises(ValueError):
        namespace_of("public/default")


def test_building_a_key_validates_the_ml_name() -> None:
    with pytest.raises(ValueError, match="segment"):
        block_key("p", "public/default/orders", 1, 0)


# --- parsing keys ---------------------------------------------------------------------------


def test_parse_a_block_key() -> None:
    parsed = parse_key("ledgers", f"ledgers/{ML}/ledgers/{ID_1}/{'0' * 18}42.blk")
    assert parsed == ParsedKey(
        key=f"ledgers/{ML}/ledgers/{ID_1}/{'0' * 18}42.blk",
        kind="block",
        ml_name=ML,
        ledger_id=1,
        block=f"{'0' * 18}42.blk",
        first_entry_id=42,
    )
    assert parsed.is_block and not parsed.is_foreign


@pytest.mark.parametrize(
    ("prefix", "key"),
    [
        ("", f"{ML}/ledgers/{ID_1}/{BLOCK_0}"),
        ("/", f"{ML}/ledgers/{ID_1}/{BLOCK_0}"),
        ("ledgers/", f"ledgers/{ML}/ledgers/{ID_1}/{BLOCK_0}"),
        ("a/b", f"a/b/{ML}/ledgers/{ID_1}/{BLOCK_0}"),
        # a topic called "ledgers" is just a topic
        ("ledgers", f"ledgers/t/ns/persistent/ledgers/ledgers/{ID_1}/{BLOCK_0}"),
    ],
)
def test_block_keys_under_various_prefixes(prefix: str, key: str) -> None:
    assert parse_key(prefix, key).is_block


P = "ledgers"
BASE = f"{P}/{ML}"


@pytest.mark.parametrize(
    ("key", "reason", "ml_name", "ledger_id"),
    [
        # outside the prefix
        (f"other/{ML}/ledgers/{ID_1}/{BLOCK_0}", keys.OUTSIDE_PREFIX, None, None),
        (f"ledgersX/{ML}/ledgers/{ID_1}/{BLOCK_0}", keys.OUTSIDE_PREFIX, None, None),
        ("ledgers", keys.OUTSIDE_PREFIX, None, None),
        (f"/{BASE}/ledgers/{ID_1}/{BLOCK_0}", keys.OUTSIDE_PREFIX, None, None),
        ("", keys.OUTSIDE_PREFIX, None, None),
        # not a managed-ledger path
        (f"{P}/", keys.NOT_ML_PATH, None, None),
        (f"{P}/readme.txt", keys.NOT_ML_PATH, None, None),
        (f"{P}/public/default/orders", keys.NOT_ML_PATH, None, None),
        (
            f"{P}/public/default/non-persistent/orders/ledgers/{ID_1}/{BLOCK_0}",
            keys.NOT_ML_PATH,
            None,
            None,
        ),
        (f"{P}/public//persistent/orders/ledgers/{ID_1}/{BLOCK_0}", keys.NOT_ML_PATH, None, None),
        (
            f"{P}//public/default/persistent/orders/ledgers/{ID_1}/{BLOCK_0}",
            keys.NOT_ML_PATH,
            None,
            None,
        ),
        (
            f"{P}/public/default/persistent/or ders/ledgers/{ID_1}/{BLOCK_0}",
            keys.NOT_ML_PATH,
            None,
            None,
        ),
        (
            f"{P}/public/default/persistent/../ledgers/{ID_1}/{BLOCK_0}",
            keys.NOT_ML_PATH,
            None,
            None,
        ),
        # inside a managed ledger, but not ledger data
        (BASE, keys.NOT_LEDGER_DATA, ML, None),
        (f"{BASE}/", keys.NOT_LEDGER_DATA, ML, None),
        (f"{BASE}/cursors/c1", keys.NOT_LEDGER_DATA, ML, None),
        (f"{BASE}/Ledgers/{ID_1}/{BLOCK_0}", keys.NOT_LEDGER_DATA, ML, None),
        (f"{BASE}/ledgers", keys.NO_LEDGER_ID, ML, None),
        (f"{BASE}/ledgers/", keys.NO_LEDGER_ID, ML, None),
        (f"{BASE}/ledgers//{BLOCK_0}", keys.NO_LEDGER_ID, ML, None),
        # ledger id
        (f"{BASE}/ledgers/{'0' * 18}1/{BLOCK_0}", keys.LEDGER_ID_NOT_20_DIGITS, ML, None),
        (f"{BASE}/ledgers/0{ID_1}/{BLOCK_0}", keys.LEDGER_ID_NOT_20_DIGITS, ML, None),
        (f"{BASE}/ledgers/1/{BLOCK_0}", keys.LEDGER_ID_NOT_20_DIGITS, ML, None),
        (f"{BASE}/ledgers/{'0' * 19}a/{BLOCK_0}", keys.LEDGER_ID_NOT_20_DIGITS, ML, None),
        (f"{BASE}/ledgers/+{'0' * 18}1/{BLOCK_0}", keys.LEDGER_ID_NOT_20_DIGITS, ML, None),
        (f"{BASE}/ledgers/-{'0' * 18}1/{BLOCK_0}", keys.LEDGER_ID_NOT_20_DIGITS, ML, None),
        (f"{BASE}/ledgers/{'0' * 19}\u0663/{BLOCK_0}", keys.LEDGER_ID_NOT_20_DIGITS, ML, None),
        (f"{BASE}/ledgers/{'9' * 20}/{BLOCK_0}", keys.LEDGER_ID_OUT_OF_RANGE, ML, None),
        # no block
        (f"{BASE}/ledgers/{ID_1}", keys.NO_BLOCK_NAME, ML, 1),
        (f"{BASE}/ledgers/{ID_1}/", keys.NO_BLOCK_NAME, ML, 1),
        # extra path levels
        (f"{BASE}/ledgers/{ID_1}/{BLOCK_0}/x", keys.EXTRA_PATH_LEVEL, ML, 1),
        (f"{BASE}/ledgers/{ID_1}/sub/{BLOCK_0}", keys.EXTRA_PATH_LEVEL, ML, 1),
        (f"{BASE}/ledgers/{ID_1}//{BLOCK_0}", keys.EXTRA_PATH_LEVEL, ML, 1),
        (f"{BASE}/ledgers/{ID_1}/{BLOCK_0}/", keys.EXTRA_PATH_LEVEL, ML, 1),
        # block names
        (f"{BASE}/ledgers/{ID_1}/{BLOCK_0}.tmp", keys.BLOCK_NAME_NOT_RECOGNISED, ML, 1),
        (f"{BASE}/ledgers/{ID_1}/{'0' * 20}.BLK", keys.BLOCK_NAME_NOT_RECOGNISED, ML, 1),
        (f"{BASE}/ledgers/{ID_1}/{'0' * 19}.blk", keys.BLOCK_NAME_NOT_RECOGNISED, ML, 1),
        (f"{BASE}/ledgers/{ID_1}/{'0' * 21}.blk", keys.BLOCK_NAME_NOT_RECOGNISED, ML, 1),
        (f"{BASE}/ledgers/{ID_1}/{'0' * 20}", keys.BLOCK_NAME_NOT_RECOGNISED, ML, 1),
        (f"{BASE}/ledgers/{ID_1}/.{'0' * 20}.blk", keys.BLOCK_NAME_NOT_RECOGNISED, ML, 1),
        (f"{BASE}/ledgers/{ID_1}/index.json", keys.BLOCK_NAME_NOT_RECOGNISED, ML, 1),
        (f"{BASE}/ledgers/{ID_1}/{'0' * 20}.blk ", keys.BLOCK_NAME_NOT_RECOGNISED, ML, 1),
        (f"{BASE}/ledgers/{ID_1}/{'0' * 20}.blk\n", keys.BLOCK_NAME_NOT_RECOGNISED, ML, 1),
        (f"{BASE}/ledgers/{ID_1}/{'9' * 20}.blk", keys.ENTRY_ID_OUT_OF_RANGE, ML, 1),
    ],
)
def test_foreign_keys(key: str, reason: str, ml_name: str | None, ledger_id: int | None) -> None:
    parsed = parse_key(P, key)
    assert parsed.kind == "foreign", parsed
    assert parsed.reason == reason
    assert parsed.ml_name == ml_name
    assert parsed.ledger_id == ledger_id
    assert parsed.block is None and parsed.first_entry_id is None
    assert parsed.key == key


def test_with_empty_prefix_a_leading_slash_is_foreign() -> None:
    parsed = parse_key("", f"/{ML}/ledgers/{ID_1}/{BLOCK_0}")
    assert parsed.reason == keys.NOT_ML_PATH


def test_with_empty_prefix_a_prefixed_key_is_foreign() -> None:
    # "ledgers/public/default/persistent/..." read with no prefix has 5 name segments
    # before "ledgers": the topic would be "default" and the domain "default": foreign.
    assert parse_key("", f"ledgers/{ML}/ledgers/{ID_1}/{BLOCK_0}").is_foreign


# --- property: build then parse gives back the parts --------------------------------------

_segment = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.=:",
    min_size=1,
    max_size=30,
).filter(lambda s: s not in (".", ".."))
_prefix = st.lists(_segment, max_size=3).map("/".join)


def java_url_encode(text: str) -> str:
    """Java's URLEncoder.encode(text, UTF-8), as Pulsar encodes a topic's local name."""
    out = []
    for char in text:
        if char.isascii() and (char.isalnum() or char in ".-*_"):
            out.append(char)
        elif char == " ":
            out.append("+")
        else:
            out.extend(f"%{byte:02X}" for byte in char.encode())
    return "".join(out)


_topic = (
    st.text(min_size=1, max_size=20).map(java_url_encode).filter(lambda s: s not in (".", ".."))
)
_ids = st.integers(min_value=0, max_value=MAX_ID)


@given(
    prefix=_prefix,
    tenant=_segment,
    namespace=_segment,
    topic=_topic,
    ledger_id=_ids,
    first_entry_id=_ids,
)
def test_round_trip(
    prefix: str, tenant: str, namespace: str, topic: str, ledger_id: int, first_entry_id: int
) -> None:
    ml_name = f"{tenant}/{namespace}/persistent/{topic}"
    key = block_key(prefix, ml_name, ledger_id, first_entry_id)
    parsed = parse_key(prefix, key)
    assert parsed.kind == "block"
    assert parsed.ml_name == ml_name
    assert parsed.ledger_id == ledger_id
    assert parsed.first_entry_id == first_entry_id
    assert parsed.block == block_name(first_entry_id)
    assert key.startswith(ledger_dir(prefix, ml_name, ledger_id))
    assert not key.startswith("/")


@given(prefix=_prefix, key=st.text(max_size=120))
def test_parse_never_raises_and_blocks_rebuild_exactly(prefix: str, key: str) -> None:
    parsed = parse_key(prefix, key)
    if parsed.is_block:
        assert parsed.ml_name is not None and parsed.ledger_id is not None
        assert parsed.first_entry_id is not None
        assert block_key(prefix, parsed.ml_name, parsed.ledger_id, parsed.first_entry_id) == key
    else:
        assert parsed.reason


@given(
    prefix=_prefix,
    tenant=_segment,
    namespace=_segment,
    topic=_topic,
    ledger_id=_ids,
    first_entry_id=_ids,
    suffix=st.sampled_from(["/x", ".tmp", "/", "~"]),
)
def test_anything_appended_to_a_block_key_is_foreign(
    prefix: str,
    tenant: str,
    namespace: str,
    topic: str,
    ledger_id: int,
    first_entry_id: int,
    suffix: str,
) -> None:
    key = block_key(prefix, f"{tenant}/{namespace}/persistent/{topic}", ledger_id, first_entry_id)
    assert parse_key(prefix, key + suffix).is_foreign
