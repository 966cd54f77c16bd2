"""Which source surveys, holds, re-checks and deletes an orphan: exactly one, for every
class; and how the engine puts the sources' findings together."""

from __future__ import annotations

import weakref
from types import SimpleNamespace
from typing import Any

import pytest

from ledger_gc.orphan_source import Findings
from ledger_gc.orphans import sources
from ledger_gc.orphans.records import DiffRecord, RecordVersionError
from ledger_gc.orphans.sources import SOURCES, delete_by_source
from ledger_gc.rules.bookkeeper.classify import BK_ORPHAN_CLASSES
from ledger_gc.rules.orphans.classify import (
    CLASSES,
    ORPHAN_CLASSES,
    ORPHAN_LEDGER,
    TARGET_CLASSES,
    Candidate,
)
from ledger_gc.rules.orphans.outcomes import FAILED
from ledger_gc.rules.orphans.phases import RegistryEntry


def _entry(prefix: str, target_class: str, ml_name: str, ledger_id: int) -> RegistryEntry:
    """A registry entry first seen by scan 1, of one object of one byte."""
    return RegistryEntry(
        prefix=prefix,
        target_class=target_class,
        ml_name=ml_name,
        ledger_id=ledger_id,
        first_seen_ms=0,
        last_seen_ms=0,
        first_scan=1,
        last_scan=1,
        scans_seen=1,
        objects=1,
        bytes=1,
        newest_ms=0,
    )


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
    entry = _entry(
        "bookkeeper:/ledgers/00/0000/L0001", "bk-orphan-from-the-future", "t/ns/persistent/x", 1
    )
    [result] = delete_by_source(None, [entry])  # type: ignore[arg-type]
    assert result.action == FAILED and "no source" in result.reason


def _request() -> Any:
    """A survey's request as far as the engine reads it itself (its sources take the
    rest)."""
    return SimpleNamespace(shared={})


class _Fills:
    """A source whose survey fills the given fields of the diff's record."""

    def __init__(self, name: str, record: dict[str, Any], candidates: list[Candidate]) -> None:
        self.name = name
        self.found = Findings(record, candidates)

    def survey(self, request: Any) -> Findings:
        return self.found


def test_every_sources_findings_make_one_record_and_a_field_filled_twice_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    block = Candidate(ORPHAN_LEDGER, "t/ns/persistent/a", 7, 1, 10, 4, 4)
    ledger = Candidate(
        BK_ORPHAN_CLASSES[0], "t/ns/persistent/b", 9, 1, 10, 4, 4, segment="/ledgers/L9"
    )
    guard_inputs = {"bytes": 100, "block_objects": 4, "orphan_fraction": 0.1}
    s3 = _Fills("s3", {"managed_ledgers": 3, "orphan_bytes": 10, **guard_inputs}, [block])
    bk = _Fills("bookkeeper", {"bookkeeper": {"ledgers": 5}}, [ledger])
    monkeypatch.setattr(sources, "SOURCES", (s3, bk))

    diff, candidates = sources.survey_sources(_request())

    assert list(candidates) == [block, ledger] and len(candidates) == 2
    assert (diff.managed_ledgers, diff.orphan_bytes, diff.candidates) == (3, 10, 2)
    assert diff.bookkeeper == {"ledgers": 5}
    monkeypatch.setattr(sources, "SOURCES", (s3, _Fills("other", {"orphan_bytes": 1}, [])))
    with pytest.raises(ValueError, match="orphan_bytes"):
        sources.survey_sources(_request())
    # A field the record lacks would be dropped, and a guard could miss its input.
    monkeypatch.setattr(sources, "SOURCES", (s3, _Fills("other", {"orphan_byts": 1}, [])))
    with pytest.raises(ValueError, match="orphan_byts"):
        sources.survey_sources(_request())


class _Hands(_Fills):
    """A source that hands the later ones of its survey what it read (``shared``)."""

    def __init__(self, name: str, handed: object) -> None:
        required = {"managed_ledgers": 3, "bytes": 100, "block_objects": 4}
        super().__init__(name, {**required, "orphan_bytes": 0, "orphan_fraction": 0.0}, [])
        self.handed = handed

    def survey(self, request: Any) -> Findings:
        request.shared["read once"], self.handed = self.handed, None  # (read once)
        return self.found


class _Read:
    """What one source read for the others (at 10M ledgers, Pulsar's references)."""


class _Fails(_Fills):
    """A source whose survey fails."""

    def __init__(self) -> None:
        super().__init__("bookkeeper", {}, [])

    def survey(self, request: Any) -> Findings:
        raise RuntimeError("ZooKeeper went away")


def test_what_the_sources_hand_each_other_is_let_go_when_the_last_has_surveyed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The diff's write, after the survey, holds every candidate: the references the
    # sources shared (at 100,000 topics, tens of MB) must not be held beside them.
    read = _Read()
    kept = weakref.ref(read)
    monkeypatch.setattr(sources, "SOURCES", (_Hands("pulsar-metadata", read),))
    request = _request()
    del read

    sources.survey_sources(request)

    assert request.shared == {} and kept() is None
    # (and when a source fails, too: the error's traceback does not keep them)
    monkeypatch.setattr(sources, "SOURCES", (_Hands("pulsar-metadata", _Read()), _Fails()))
    with pytest.raises(RuntimeError):
        sources.survey_sources(request)
    assert request.shared == {}


def test_a_stored_diff_without_a_guards_input_is_refused_not_defaulted() -> None:
    whole = DiffRecord(managed_ledgers=0, bytes=9, block_objects=3, orphan_bytes=9).to_dict()
    assert DiffRecord.from_dict(whole).managed_ledgers == 0
    for name in DiffRecord.REQUIRED:
        with pytest.raises(RecordVersionError, match=name):
            DiffRecord.from_dict({k: v for k, v in whole.items() if k != name})


def test_each_source_holds_and_explains_only_its_own() -> None:
    """The S3 source's horizon holds a block ledger above the id counter; a BookKeeper
    ledger (judged by BookKeeper's own horizon in its survey) goes through whatever the
    block store's counter says."""
    block = Candidate(ORPHAN_LEDGER, "t/ns/persistent/a", 70, 1, 10, 4, 4)
    ledger = Candidate(
        BK_ORPHAN_CLASSES[0], "t/ns/persistent/b", 90, 1, 10, 4, 4, segment="/ledgers/L90"
    )
    found = {"ledgers/a/70": block, "bookkeeper:/ledgers/90": ledger}
    diff = DiffRecord(id_counter=10, metadata_max_ledger_id=10, bookkeeper={"ledgers": 1})

    usable, held = sources.hold_by_source(found, diff)

    assert usable == {"bookkeeper:/ledgers/90": ledger}
    assert [h.prefix for h in held] == ["ledgers/a/70"]


def test_a_distributed_delete_asked_to_stop_sends_no_job() -> None:
    """Executors cannot ask the driver's delete lock: the driver asks it before the job."""
    from ledger_gc.orphan_source import DeleteRequest
    from ledger_gc.rules.orphans.outcomes import SKIPPED
    from ledger_gc.spark.delete import distributed_delete

    entry = _entry(
        "ledgers/t/ns/persistent/x/ledgers/00000000000000000001/",
        ORPHAN_LEDGER,
        "t/ns/persistent/x",
        1,
    )
    request = DeleteRequest(
        endpoints=None,  # type: ignore[arg-type]
        run_id="r",
        now_ms=0,
        deleting=True,
        should_stop=lambda: True,
    )
    [result] = distributed_delete(None, request, [entry])  # type: ignore[arg-type]
    assert result.action == SKIPPED


def test_a_gone_topic_whose_ledgers_still_grow_is_held_by_the_bookkeeper_source_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Across two scans: the topic gained ledger 7 after the last scan saw 5, so another
    cluster sharing BookKeeper writes it; its candidate and its registered ledger are
    held, the S3 source's candidate of the same name is not, and the next scan's record
    remembers the topic and its newest ledger."""
    from ledger_gc.orphans.records import PhasesRecord
    from ledger_gc.rules.bookkeeper.classify import BK_ORPHAN_PARTITION

    topic = "t/ns/persistent/gone"
    ledger = Candidate(BK_ORPHAN_PARTITION, topic, 7, 1, 10, 4, 4, segment="/ledgers/L7")
    block = Candidate(ORPHAN_LEDGER, topic, 3, 1, 10, 4, 4)
    registered = _entry("bookkeeper:/ledgers/L6", BK_ORPHAN_PARTITION, topic, 6)
    found = {"bookkeeper:/ledgers/L7": ledger, "ledgers/t/ns/persistent/gone/3": block}
    before = PhasesRecord(bookkeeper_gone_topic_high={topic: 5})
    diff = DiffRecord(bookkeeper={"gone_topic_high": {topic: 7}})

    compared = sources.compare_by_source(found, {registered.prefix: registered}, diff, before, 2)

    assert set(compared.held) == {"bookkeeper:/ledgers/L7", "bookkeeper:/ledgers/L6"}
    assert "gained ledger 7" in compared.held["bookkeeper:/ledgers/L7"]
    assert compared.record == {
        "bookkeeper_live_elsewhere": {topic: compared.held["bookkeeper:/ledgers/L7"]},
        "bookkeeper_gone_topic_high": {topic: 7},
    }
    # Without growth: nothing held, the newest remembered.
    quiet = sources.compare_by_source(found, {}, diff, PhasesRecord(), 2)
    assert quiet.held == {} and quiet.record["bookkeeper_gone_topic_high"] == {topic: 7}
