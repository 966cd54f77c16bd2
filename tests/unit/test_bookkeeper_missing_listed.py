"""The survey's check of every listed ledger against the ids found (``missing_listed``,
``listed_in_bookkeeper``) asks each managed ledger's ids at once (``FoundIds.lacking``,
issue 36): the same suspects and the same count as asking them one at a time, offloaded
ledgers whose BookKeeper copy is deleted counted neither way."""

from __future__ import annotations

from array import array
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ledger_gc.bookkeeper.survey import _missing_listed
from ledger_gc.formats.records import ManagedLedgerInfo, encode_managed_ledger_info
from ledger_gc.rules.bookkeeper.classify import PulsarReferences
from ledger_gc.rules.bookkeeper.ledger_index import FoundIds, LedgerIds


class _Unchanged:
    """A Pulsar store whose managed ledgers still list what the references read: the
    live re-read confirms every suspect, so ``missing_listed`` is all of them."""

    def __init__(self, refs: PulsarReferences) -> None:
        self.refs = refs
        self.asked: list[str] = []

    def sync(self, path: str) -> None:
        pass

    def get_many_raw(self, paths: list[str]) -> list[Any]:
        self.asked += paths
        out = []
        for path in paths:
            info = ManagedLedgerInfo()
            for lid in self.refs.listed[path.removeprefix("/managed-ledgers/")]:
                info.ledgerInfo.add(ledgerId=lid)
            out.append((encode_managed_ledger_info(info), None))
        return out


ids = st.lists(st.integers(0, 80), max_size=12)


@settings(max_examples=200, deadline=None)
@given(
    listed=st.dictionaries(st.sampled_from("abcde"), ids, max_size=5),
    found=st.lists(ids, max_size=4),
    gone=st.frozensets(st.integers(0, 80), max_size=6),
    offloaded=st.frozensets(st.integers(0, 80), max_size=6),
)
def test_each_managed_ledger_asked_at_once_finds_what_one_at_a_time_did(
    listed: dict[str, list[int]],
    found: list[list[int]],
    gone: frozenset[int],
    offloaded: frozenset[int],
) -> None:
    refs = PulsarReferences(
        listed={f"t/ns/persistent/{n}": LedgerIds(v) for n, v in listed.items()},
        offloaded_deleted={lid: "t/ns/persistent/x" for lid in offloaded},
    )
    runs = [array("q", sorted({d * 100 + i for i in run})) for d, run in enumerate(found)]
    found_ids = FoundIds(runs, gone)
    want_suspects: dict[str, set[int]] = {}
    want_present = 0
    for name, listed_ids in refs.listed.items():
        for lid in listed_ids:
            if lid in offloaded:
                continue
            if lid in found_ids:
                want_present += 1
            else:
                want_suspects.setdefault(name, set()).add(lid)
    store = _Unchanged(refs)
    missing, present = _missing_listed(store, refs, found_ids)  # type: ignore[arg-type]
    assert present == want_present
    assert missing == [
        {"ml_name": name, "ledger_id": lid}
        for name in sorted(want_suspects)
        for lid in sorted(want_suspects[name])
    ]
    assert store.asked == [f"/managed-ledgers/{name}" for name in sorted(want_suspects)]
