import json

import pytest

from ledger_gc.errors import MetadataFormatError
from ledger_gc.formats.markers import deletable_markers, marker_key
from ledger_gc.formats.records import get_property, set_property
from ledger_gc.marking import mark_deletable, record_failures
from ledger_gc.proto.mldataformats_pb2 import ManagedLedgerInfo


def make_info(*ids: int) -> ManagedLedgerInfo:
    info = ManagedLedgerInfo()
    for ledger_id in ids:
        info.ledgerInfo.add(ledgerId=ledger_id, entries=10, size=100 * ledger_id, timestamp=7)
    set_property(info, "other", "kept")
    return info


def test_mark_moves_ledgers_from_the_list_to_markers_in_one_record():
    info = make_info(1, 2, 3)
    moved = mark_deletable(info, {1, 2}, marked_at=1000)
    assert moved == [1, 2]
    assert [li.ledgerId for li in info.ledgerInfo] == [3]
    markers = deletable_markers(info)
    assert set(markers) == {1, 2}
    assert markers[2] == {"size": 200, "entries": 10, "timestamp": 7, "markedAt": 1000}
    assert get_property(info, "other") == "kept"


def test_mark_is_idempotent_when_a_cas_is_reapplied():
    info = make_info(1, 2)
    mark_deletable(info, {1}, marked_at=1)
    again = mark_deletable(info, {1}, marked_at=2)
    assert again == []
    assert deletable_markers(info)[1]["markedAt"] == 1


def test_every_ledger_is_listed_or_marked():
    info = make_info(1, 2, 3, 4)
    mark_deletable(info, {2, 4}, marked_at=1)
    listed = {li.ledgerId for li in info.ledgerInfo}
    assert listed | set(deletable_markers(info)) == {1, 2, 3, 4}
    assert not listed & set(deletable_markers(info))


def test_failures_are_noted_on_the_marker():
    info = make_info(1)
    mark_deletable(info, {1}, marked_at=1)
    assert record_failures(info, {1: "SlowDown", 9: "no such marker"}, attempted_at=5)
    record_failures(info, {1: "SlowDown again"}, attempted_at=6)
    value = json.loads(get_property(info, marker_key(1)))
    assert value["attempts"] == 2 and value["lastError"] == "SlowDown again"


def test_a_corrupt_marker_is_an_error_not_a_missing_marker():
    info = make_info(1)
    set_property(info, marker_key(5), "{not json")
    with pytest.raises(MetadataFormatError):
        deletable_markers(info)
