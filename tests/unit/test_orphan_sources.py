"""Which source re-checks and deletes a registered orphan: exactly one, for every class."""

from __future__ import annotations

from ledger_gc.orphans.sources import SOURCES, delete_by_source
from ledger_gc.rules.bookkeeper.classify import BK_ORPHAN_CLASSES
from ledger_gc.rules.orphans.classify import CLASSES, ORPHAN_CLASSES, TARGET_CLASSES
from ledger_gc.rules.orphans.outcomes import FAILED
from ledger_gc.rules.orphans.phases import RegistryEntry


def test_every_registered_class_has_exactly_one_source() -> None:
    for target_class in TARGET_CLASSES:
        owners = [source.name for source in SOURCES if source.owns(target_class)]
        assert len(owners) == 1, (target_class, owners)
    assert [s.name for s in SOURCES if s.owns(ORPHAN_CLASSES[0])] == ["s3"]
    assert [s.name for s in SOURCES if s.owns(BK_ORPHAN_CLASSES[0])] == ["bookkeeper"]


def test_no_source_deletes_a_class_that_is_not_an_orphan_or_unknown() -> None:
    for target_class in (*(c for c in CLASSES if c not in TARGET_CLASSES), "bk-live", "new-x"):
        assert not any(source.owns(target_class) for source in SOURCES), target_class


def test_an_entry_of_an_unknown_class_fails_and_is_deleted_by_none() -> None:
    entry = RegistryEntry(
        prefix="bookkeeper:/ledgers/00/0000/L0001",
        target_class="bk-orphan-from-the-future",
        ml_name="t/ns/persistent/x",
        ledger_id=1,
        first_seen_ms=0,
        last_seen_ms=0,
        first_scan=1,
        last_scan=1,
        scans_seen=1,
        objects=1,
        bytes=1,
        newest_ms=0,
    )
    [result] = delete_by_source(None, [entry])  # type: ignore[arg-type]
    assert result.action == FAILED and "no source" in result.reason
