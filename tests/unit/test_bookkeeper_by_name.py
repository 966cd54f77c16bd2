"""``ByName``: a topic-keyed mapping read as it is, pickled as a string of its names and
an array of its values, unpickled into the dict it stands for (issue 36: the common
classifier's dicts and the pickler's memo of every name were 23 MiB of the driver's
peak at 100,000 topics)."""

from __future__ import annotations

import pickle
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_gc.rules.bookkeeper.by_name import ByName

names = st.text(st.characters(codec="utf-8"), max_size=6)  # (NUL and "" among them)
ids = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))


@settings(max_examples=300, deadline=None)
@given(
    source=st.dictionaries(names, ids, max_size=40),
    pairs=st.dictionaries(st.tuples(names, names), st.integers(-(2**63), 2**63 - 1), max_size=40),
    many=st.booleans(),
)
def test_a_view_pickles_into_the_dict_it_stands_for(
    source: dict[str, int | None], pairs: dict[tuple[str, str], int], many: bool
) -> None:
    if many:  # (more than one chunk of names)
        source |= {f"topic-{k}": k for k in range(9_000)}
    for view, want in (
        (ByName(source), source),
        (ByName(pairs, pairs=True), pairs),
        (ByName(source, same="x"), dict.fromkeys(source, "x")),
    ):
        assert dict(view) == want and len(view) == len(want)
        assert all(key in view for key in want)
        back = pickle.loads(pickle.dumps(view, pickle.HIGHEST_PROTOCOL))
        assert type(back) is dict
        assert back == want and list(back) == list(want)


def test_a_name_with_the_separator_is_pickled_as_a_plain_dict() -> None:
    source = {"a": 1, "b\0c": None, "": 3}
    assert pickle.loads(pickle.dumps(ByName(source))) == source
    assert pickle.loads(pickle.dumps(ByName({}))) == {}
    assert pickle.loads(pickle.dumps(ByName({"": 5}))) == {"": 5}


def test_an_executor_holds_each_name_once_across_the_common_maps() -> None:
    # The common classifier's maps (the topics, their highest ids, the cursors) name the
    # references' own strings: pickled as dicts, the pickler's memo wrote each once, and
    # an executor's task held one string a topic and one a subscription name. Packed as
    # a string each, they came back as a copy a map and a cursor: at 100,000 topics of a
    # cursor each, the unpickled common grew from 28.5 to 50.2 MiB in every task.
    names = [sys.intern(f"t/ns/persistent/topic-{t:06d}") for t in range(5_000)]
    sub = sys.intern("subscription")
    listed = {name: t for t, name in enumerate(names)}
    cursors = {(name, sub): -1 for name in names}
    views = (ByName(listed), ByName(listed, same=0), ByName(cursors, pairs=True))
    highs, topics, cursor_map = pickle.loads(pickle.dumps(views, pickle.HIGHEST_PROTOCOL))
    assert list(highs) == list(topics) == [topic for topic, _ in cursor_map] == names
    assert all(a is b for a, b in zip(highs, topics, strict=True))
    assert all(a is b for a, (b, _) in zip(highs, cursor_map, strict=True))
    assert len({id(cursor) for _, cursor in cursor_map}) == 1


def test_what_cannot_be_packed_exactly_is_pickled_as_a_plain_dict() -> None:
    # (none of these come from ZooKeeper, but a view must never unpickle as another map)
    for source, pairs in (
        ({"ab": 1}, True),  # a name where a pair goes: its letters are no pair
        ({("a", "b", "c"): 1, ("d",): 2}, True),
        ({("a", 1): 2}, True),
        ({"\udc80": 1}, False),  # a lone surrogate: no UTF-8
        ({"a": 2**64}, False),  # beyond an int64
    ):
        assert pickle.loads(pickle.dumps(ByName(source, pairs=pairs))) == source
