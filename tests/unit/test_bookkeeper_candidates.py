"""A BookKeeper candidate is built once, where its ledger is classified (issue 36: not a
dict on the executor and a ``Candidate`` again in the driver), and is the ``Candidate``
the cycle registers: equal to one of the same fields, and read by field name as the
dict it replaces; a topic's candidates share its name, in a task's result too."""

from __future__ import annotations

import pickle
from dataclasses import asdict, replace

import pytest

from ledger_gc.bookkeeper.candidate_table import BkCandidate, CandidateTable
from ledger_gc.rules.bookkeeper import classify, ledger_paths
from ledger_gc.rules.bookkeeper.classify import BkLedger, PulsarTags, Verdict
from ledger_gc.rules.orphans.classify import Candidate

TOPIC = "public/default/persistent/orders"


def _ledger(lid: int) -> BkLedger:
    tags = PulsarTags(classify.PULSAR, classify.MANAGED_LEDGER_COMPONENT, TOPIC)
    return BkLedger(lid, 0, 1_700_000_000_000 + lid, "CLOSED", 4096, 3, tags)


def _verdict() -> Verdict:
    # (a new string each time, as each ledger's record decodes its own)
    owner = "".join(["public/default/", "persistent/orders"])
    return Verdict(classify.BK_ORPHAN_LEDGER, owner, "neither lists nor marks it")


def _candidate(root: str, layout: str, ledger: BkLedger, verdict: Verdict) -> BkCandidate:
    table = CandidateTable(root, layout)
    table.add(ledger, verdict)
    (candidate,) = table
    return candidate


def test_a_candidate_is_the_cycles_candidate_read_by_name_as_the_dict_was() -> None:
    got = _candidate("/ledgers", ledger_paths.HIERARCHICAL, _ledger(7), _verdict())
    want = Candidate(
        target_class=classify.BK_ORPHAN_LEDGER,
        ml_name=TOPIC,
        ledger_id=7,
        objects=1,
        bytes=4096,
        newest_ms=1_700_000_000_007,
        oldest_ms=1_700_000_000_007,
        max_ledger_id=7,
        segment="/ledgers/00/0000/L0007",
    )
    assert isinstance(got, Candidate)
    assert got == want and want == got and hash(got) == hash(want)
    assert got != replace(want, bytes=1) and replace(want, bytes=1) != got
    assert {name: got[name] for name in asdict(want)} == asdict(want)
    assert got["ledger_id"] == 7 and got.bk_ledger_id == 7
    with pytest.raises(KeyError):
        got["prefix"]
    assert got.prefix("") == want.prefix("")


def test_a_tasks_candidates_share_their_topics_name_once_collected() -> None:
    part = CandidateTable("/ledgers", ledger_paths.HIERARCHICAL)
    for lid in range(1, 200):
        part.add(_ledger(lid), _verdict())
    back = list(pickle.loads(pickle.dumps(part)))
    assert back == list(part) and all(type(c) is BkCandidate for c in back)
    assert not hasattr(back[0], "__dict__")  # (slots, as Candidate's)
    assert len({id(c.ml_name) for c in back}) == 1
