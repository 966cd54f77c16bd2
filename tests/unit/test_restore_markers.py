"""Which delete markers a restore removes: only the run's, on top, over data (pure)."""

from __future__ import annotations

from ledger_gc.storage.gc_bucket import ObjectVersion
from ledger_gc.storage.gc_bucket import run_markers as _run_markers

KEY = "ledgers/t/ns/persistent/x/ledgers/00000000000000000001/00000000000000000000.blk"


def data(version: str, at: int, latest: bool = False) -> ObjectVersion:
    return ObjectVersion(KEY, version, latest, at, 100, delete_marker=False)


def marker(version: str, at: int, latest: bool = False) -> ObjectVersion:
    return ObjectVersion(KEY, version, latest, at, 0, delete_marker=True)


def test_the_runs_marker_over_data_is_removed():
    assert _run_markers([data("d", 10), marker("m", 50, True)], 40, 60) == (
        [marker("m", 50, True)],
        data("d", 10),
    )


def test_markers_stacked_by_a_retried_delete_all_go():
    found = _run_markers([data("d", 10), marker("m1", 45), marker("m2", 55, True)], 40, 60)
    assert found is not None and [m.version_id for m in found[0]] == ["m2", "m1"]


def test_a_key_written_again_or_deleted_later_is_left_alone():
    assert _run_markers([data("d", 10), marker("m", 50), data("d2", 70, True)], 40, 60) is None
    assert _run_markers([data("d", 10), marker("m", 50), marker("later", 90, True)], 40, 60) is None
    assert _run_markers([marker("m", 50, True)], 40, 60) is None  # nothing under it
