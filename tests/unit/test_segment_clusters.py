"""Whose offloaded segment is it (segments.py, pure): Pulsar's ``pulsarClusterName``
against the clusters this store is, named by LEDGERGC_PULSAR_CLUSTER or learned from
this store's live segments."""

from __future__ import annotations

from ledger_gc.rules.orphans import segments
from ledger_gc.rules.orphans.classify import DiffResult, StoredObject
from ledger_gc.rules.orphans.segments import UNTAGGED, our_clusters, why_not_ours
from ledger_gc.s3_orphans.reading import LISTED_ROW, ML_ROW, snapshot_from_rows


def test_the_setting_when_set_is_the_whole_truth() -> None:
    ours = our_clusters(("us-east",), ["eu", None])
    assert ours.names == frozenset({"us-east"}) and not ours.untagged
    assert ours.source == "setting"
    assert why_not_ours({"us-east"}, ours) is None
    assert "pulsarClusterName=eu" in (why_not_ours({"eu"}, ours) or "")
    assert why_not_ours({None}, ours) is not None  # untagged: not said to be ours
    assert why_not_ours({None}, our_clusters(("us-east", UNTAGGED), [])) is None
    assert why_not_ours({None}, our_clusters((UNTAGGED,), ["us-east"])) is None


def test_without_the_setting_the_names_are_learned_from_live_segments() -> None:
    ours = our_clusters((), ["us-east", "us-east", None])
    assert ours.names == frozenset({"us-east"}) and ours.source == "learned"
    assert why_not_ours({"us-east"}, ours) is None
    assert "another cluster's segment (pulsarClusterName=us-west)" in (
        why_not_ours({"us-west"}, ours) or ""
    )
    # Some live segment is tagged: an untagged one may be another (older) cluster's.
    assert why_not_ours({None}, ours) is not None
    # Data and index disagree, or one is another cluster's: held.
    assert why_not_ours({"us-east", "us-west"}, ours) is not None


def test_a_store_whose_pulsar_writes_no_tags_keeps_the_old_rule() -> None:
    untagged_store = our_clusters((), [None, None])
    assert untagged_store.untagged and untagged_store.names == frozenset()
    assert why_not_ours({None}, untagged_store) is None
    assert why_not_ours(set(), untagged_store) is None  # nothing read: nothing to hold
    # A tagged segment while nothing of ours is tagged: another cluster's.
    assert why_not_ours({"us-west"}, untagged_store) is not None
    # Nothing sampled (no live segment with a data object): untagged stays ours, as before.
    nothing = our_clusters((), [])
    assert why_not_ours({None}, nothing) is None
    assert why_not_ours({"x"}, nothing) is not None


def test_our_clusters_round_trip_through_the_scan_result() -> None:
    ours = our_clusters((), ["b", "a", None])
    assert segments.OurClusters.from_dict(ours.to_dict()) == ours
    assert ours.to_dict()["names"] == ["a", "b"]


def test_the_live_sample_is_bounded_and_spread() -> None:
    keys = [f"p/k{i:03d}" for i in range(100)]
    sample = segments.live_sample(keys)
    assert len(sample) == segments.MAX_LIVE_SAMPLE and len(set(sample)) == len(sample)
    assert sample[0] == "p/k000" and sample[-1] > "p/k090"
    assert segments.live_sample(keys[:3]) == keys[:3]


def test_the_reference_diff_classifies_another_clusters_segments_apart() -> None:
    u = {n: f"00000000-0000-0000-0000-{n:012d}" for n in range(10)}
    ml = "t/ns/persistent/a"
    snapshot = snapshot_from_rows([(ML_ROW, ml, None, None), (LISTED_ROW, ml, 1, u[1])])
    objects = [
        StoredObject(f"p/{u[1]}-ledger-1", 10, 1),  # ours, live
        StoredObject(f"p/{u[1]}-ledger-1-index", 10, 1),
        StoredObject(f"p/{u[2]}-ledger-1", 100, 1),  # B's ledger 1 (ids collide)
        StoredObject(f"p/{u[2]}-ledger-1-index", 10, 1),
        StoredObject(f"p/{u[3]}-ledger-5", 7, 1),  # our orphan
        StoredObject(f"p/{u[4]}-ledger-6", 9, 1),  # tag unreadable: stays an orphan
    ]
    tags = {f"p/{u[1]}-ledger-1": "a", f"p/{u[2]}-ledger-1": "b", f"p/{u[3]}-ledger-5": "a"}
    result = DiffResult(managed_ledgers=1)
    segments.diff_segments(result, "bkt", "p", objects, snapshot, tags=tags, configured=())

    assert segments.live_data_keys(objects, snapshot, "p") == [f"p/{u[1]}-ledger-1"]
    assert result.classes["other-cluster-segment"].units == 1
    assert result.classes["other-cluster-segment"].bytes == 110
    assert {c.ledger_id for c in result.candidates} == {5, 6}
    assert result.orphan_bytes == 16
    assert result.other_clusters == {"b": 1}
    assert result.our_clusters is not None and result.our_clusters.names == frozenset({"a"})
