"""``CursorLedgers``: every cursor's ``cursorsLedgerId`` as the references hold it for a
whole survey (issue 36: a dict of (topic, cursor) tuples was 100 bytes a cursor, 10 MiB
at 100,000 topics, in the driver from the references' read to the report)."""

from __future__ import annotations

import pickle
import sys
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_gc.rules.bookkeeper.cursor_ledgers import CursorLedgers

names = st.text(st.characters(codec="utf-8", exclude_characters="/"), max_size=4)


@settings(max_examples=300, deadline=None)
@given(
    cursors=st.dictionaries(st.tuples(names, names), st.integers(-(2**63), 2**63 - 1)),
    probes=st.lists(st.tuples(names, names), max_size=8),
)
def test_cursor_ledgers_answer_as_the_dict_they_stand_for(
    cursors: dict[tuple[str, str], int], probes: list[tuple[str, str]]
) -> None:
    table = CursorLedgers(cursors.items())
    assert table == cursors and len(table) == len(cursors)
    assert list(table) == sorted(cursors)
    assert list(table.items()) == sorted(cursors.items())
    assert list(table.values()) == [cursors[key] for key in sorted(cursors)]
    for key in [*cursors, *probes]:
        assert table.get(key) == cursors.get(key)
        assert (key in table) == (key in cursors)
    assert table.get("not a pair") is None and ("a",) not in table
    assert pickle.loads(pickle.dumps(table)) == cursors


def test_a_cursor_costs_three_references_not_a_tuple_and_a_dict_entry() -> None:
    topics = [sys.intern(f"t/ns/persistent/topic-{k:06d}") for k in range(20_000)]
    sub = sys.intern("sub")
    tracemalloc.start()
    try:  # (each pair made as it is read: a dict kept them, 64 bytes each)
        table = CursorLedgers(((topic, sub), -1) for topic in topics)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert held / len(topics) < 32, held / len(topics)
    assert table[topics[7], sub] == -1 and (topics[7], "other") not in table
