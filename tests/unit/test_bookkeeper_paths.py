"""Where BookKeeper keeps a ledger's metadata znode (pure): DESIGN.md's examples, the
short/long boundary, the round trip, look-alikes, and BookKeeper's own znodes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_gc.rules.bookkeeper.ledger_paths import (
    FLAT,
    HIERARCHICAL,
    LAYOUTS,
    LONG_HIERARCHICAL,
    MAX_LEDGER_ID,
    SHORT_ID_LIMIT,
    is_special,
    ledger_id_of,
    ledger_path,
    relative_path,
)


@pytest.mark.parametrize(
    ("ledger_id", "layout", "path"),
    [
        (123456, HIERARCHICAL, "/ledgers/00/0012/L3456"),
        (1, HIERARCHICAL, "/ledgers/00/0000/L0001"),
        (0, HIERARCHICAL, "/ledgers/00/0000/L0000"),
        (4294967296, HIERARCHICAL, "/ledgers/000/0000/0042/9496/L7296"),
        (4294967296, LONG_HIERARCHICAL, "/ledgers/000/0000/0042/9496/L7296"),
        (1, LONG_HIERARCHICAL, "/ledgers/000/0000/0000/0000/L0001"),
        (123456, LONG_HIERARCHICAL, "/ledgers/000/0000/0000/0012/L3456"),
        (MAX_LEDGER_ID, HIERARCHICAL, "/ledgers/922/3372/0368/5477/L5807"),
        (1, FLAT, "/ledgers/L0000000001"),
        (123456, FLAT, "/ledgers/L0000123456"),
        (4294967296, FLAT, "/ledgers/L4294967296"),
    ],
)
def test_design_examples(ledger_id: int, layout: str, path: str) -> None:
    assert ledger_path("/ledgers", ledger_id, layout) == path
    assert ledger_path("/ledgers/", ledger_id, layout) == path
    assert ledger_id_of(path.removeprefix("/ledgers/"), layout) == ledger_id


def test_the_short_long_boundary_is_javas_integer_max_value() -> None:
    # getHybridHierarchicalLedgerPath: short when id < Integer.MAX_VALUE.
    assert SHORT_ID_LIMIT == 2**31 - 1
    assert relative_path(2147483646, HIERARCHICAL) == "21/4748/L3646"
    assert relative_path(2147483647, HIERARCHICAL) == "000/0000/0021/4748/L3647"
    assert relative_path(2147483646, LONG_HIERARCHICAL) == "000/0000/0021/4748/L3646"
    assert ledger_id_of("21/4748/L3646", HIERARCHICAL) == 2147483646
    assert ledger_id_of("21/4748/L3647", HIERARCHICAL) is None
    assert ledger_id_of("000/0000/0021/4748/L3647", HIERARCHICAL) == 2147483647
    assert ledger_id_of("000/0000/0021/4748/L3646", HIERARCHICAL) is None


@settings(max_examples=300, deadline=None)
@given(
    ledger_id=st.integers(0, MAX_LEDGER_ID) | st.integers(0, 2**32), layout=st.sampled_from(LAYOUTS)
)
def test_round_trip(ledger_id: int, layout: str) -> None:
    relative = relative_path(ledger_id, layout)
    assert ledger_id_of(relative, layout) == ledger_id
    assert not relative.startswith("/")
    assert not is_special(relative.split("/")[0])
    long_form = layout == LONG_HIERARCHICAL or (
        layout == HIERARCHICAL and ledger_id >= SHORT_ID_LIMIT
    )
    if layout != FLAT:
        assert [len(p) for p in relative.split("/")] == (
            [3, 4, 4, 4, 5] if long_form else [2, 4, 5]
        )


@pytest.mark.parametrize("ledger_id", [-1, MAX_LEDGER_ID + 1])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_ids_outside_javas_long_are_refused(ledger_id: int, layout: str) -> None:
    with pytest.raises(ValueError):
        relative_path(ledger_id, layout)


def test_an_unknown_layout_is_refused() -> None:
    with pytest.raises(ValueError):
        relative_path(1, "legacyhierarchical-ish")
    assert ledger_id_of("00/0000/L0001", "ms") is None


ARABIC_INDIC = "".join(chr(0x0660 + int(d)) for d in "3456")  # ٣٤٥٦
FULLWIDTH = "".join(chr(0xFF10 + int(d)) for d in "3456")
# fmt: off
LOOK_ALIKES = {
    HIERARCHICAL: [
        "00/0012/L345", "00/0012/L34567", "0/0012/L3456", "000/012/L3456", "00/0012/X3456",
        "00/0012/l3456", "00/0012/3456", "00/0012/L", "00/0012/L3456/extra", "00/0012/L3456/",
        "/00/0012/L3456", "00//0012/L3456", "00/0012/L+456", "00/0012/L-456", "00/001_/L3456",
        "00/0012/L 456", "00/0012/L3456 ", f"00/0012/L{ARABIC_INDIC}", f"00/0012/L{FULLWIDTH}",
        "21/4748/L3647", "99/9999/L9999",  # short-layout paths of ids >= 2^31-1
        "000/0000/0000/0012/L3456", "000/0000/0000/0000/L0001",  # long paths of small ids
        "922/3372/0368/5477/L5808", "",  # 2^63 is beyond Java's long
    ],
    LONG_HIERARCHICAL: [
        "00/0012/L3456", "999/9999/9999/9999/L9999", "000/0000/0000/0012/L3456/L0000",
        "000/0000/0000/0012",
    ],
    FLAT: [
        "L12", "L000000001", "L00000000001", "L0000000001/x", "00/0000/L0001", "ID-0000000001",
        "idgen", f"L000012{ARABIC_INDIC}", "",
    ],
}
# fmt: on


@pytest.mark.parametrize(
    ("relative", "layout"),
    [(path, layout) for layout, paths in LOOK_ALIKES.items() for path in paths],
)
def test_look_alikes_are_not_ledgers(relative: str, layout: str) -> None:
    assert ledger_id_of(relative, layout) is None


SPECIAL = "available cookies LAYOUT INSTANCEID underreplication idgen idgen-long ID-0000000001 ID-"


@pytest.mark.parametrize("name", SPECIAL.split())
def test_bookkeepers_own_znodes_are_special(name: str) -> None:
    assert is_special(name)


@pytest.mark.parametrize(
    "name", ["00", "000", "L0000000001", "layout", "Available", "id-0000000001", "x"]
)
def test_ledger_names_are_not_special(name: str) -> None:
    assert not is_special(name)
