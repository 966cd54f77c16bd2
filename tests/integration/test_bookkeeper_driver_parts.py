"""A survey classified on the driver alone (no Spark session, or too little work for
one) classifies a part of about ``PART_LEDGERS`` ledgers at a time, as Spark's tasks
do (issue 36; real ZooKeeper): with the whole cluster's indexes, the steady state's
driver at 1M ledgers peaked at 181 MiB, above the first survey's on Spark (124)."""

from __future__ import annotations

from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.bookkeeper import record_cache
from ledger_gc.bookkeeper import survey as bk_survey
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.rules.bookkeeper import classify
from pulsar_cluster import PulsarCluster, cursor_tags, ml_tags

NS = "public/default"


def _cluster(zk_client: KazooClient) -> dict[str, Any]:
    """Three topics whose ledgers lie in three leaf directories, each with orphans."""
    c = PulsarCluster(zk_client).init(idgen=False)
    c.namespace(NS)
    planted: dict[str, Any] = {"live": [], "orphans": []}
    for t, base in enumerate((0, 10_000, 20_000)):
        topic = f"{NS}/persistent/t{t}"
        ids = [c.ledger(ml_tags(topic), ledger_id=base + i) for i in range(1, 9)]
        cursor = c.ledger(cursor_tags(topic, "sub"), ledger_id=base + 20)
        c.managed_ledger(topic, ids[2:])
        c.cursor(topic, "sub", cursor)
        planted["live"] += [*ids[2:], cursor]
        planted["orphans"] += ids[:2]
    return planted


def _outcome(found: Any) -> tuple[Any, ...]:
    """What a survey found: its ledgers, its classes and its candidates, whole."""
    return (
        found.ledgers,
        {name: totals.to_dict() for name, totals in found.classes.items()},
        sorted((c["ledger_id"], c["target_class"], c["ml_name"]) for c in found.candidates),
        sorted(found.found),
    )


def test_the_driver_alone_classifies_a_part_at_a_time(
    settings: Settings, zk_client: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    planted = _cluster(zk_client)
    # (each survey reads every record: the second's are not the cache's)
    endpoints = resolve(settings.with_overrides(bucket="", bk_full_read_every=1))
    whole = bk_survey.survey(endpoints)
    assert whole is not None
    built_whole = []
    monkeypatch.setattr(
        classify.Classifier,
        "_owner_groups",
        lambda self: built_whole.append(self) or iter(()),
    )
    parts: list[int] = []
    cuts = classify.Classifier.cuts

    def counted(self: classify.Classifier, ranges: Any) -> Any:
        parts.append(len(ranges))
        return cuts(self, ranges)

    monkeypatch.setattr(classify.Classifier, "cuts", counted)
    monkeypatch.setattr(bk_survey, "PART_LEDGERS", 8)
    in_parts = bk_survey.survey(endpoints)
    assert in_parts is not None
    assert parts == [3] and built_whole == []  # (a part a directory; no whole index)
    assert _outcome(in_parts) == _outcome(whole)
    assert sorted(lid for lid, _, _ in _outcome(in_parts)[2]) == sorted(planted["orphans"])
    for found in (whole, in_parts):
        by_step = found.cost.reads_by_step
        assert by_step["ledgers"] == 27 and by_step["cache_save"] == 0, by_step


def test_the_parts_cached_rows_are_loaded_before_the_caches_save_begins(
    settings: Settings, zk_client: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A part's cached rows read while the cache's save is open wait on its write lock
    (SQLite's, once the save's pages spill: the survey then fails after 60 s), and the
    lock would be held through ZooKeeper's reads: every part is classified first."""
    planted = _cluster(zk_client)
    endpoints = resolve(settings.with_overrides(bucket=""))
    monkeypatch.setattr(bk_survey, "PART_LEDGERS", 8)
    saving: list[bool] = []
    loaded_while_saving: list[bool] = []
    real_save, real_load = record_cache.save, record_cache.load_rows

    def save(*args: Any, **kwargs: Any) -> Any:
        saving.append(True)
        try:
            return real_save(*args, **kwargs)
        finally:
            saving.pop()

    def load_rows(*args: Any, **kwargs: Any) -> Any:
        loaded_while_saving.append(bool(saving))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(record_cache, "save", save)
    monkeypatch.setattr(record_cache, "load_rows", load_rows)
    first = bk_survey.survey(endpoints)
    second = bk_survey.survey(endpoints)  # (its records the cache's, loaded a part at a time)
    assert first is not None and second is not None
    assert second.cost.records_cached == 27 and second.cost.records_read == 0
    assert loaded_while_saving and not any(loaded_while_saving)
    assert _outcome(second) == _outcome(first)
    assert sorted(lid for lid, _, _ in _outcome(second)[2]) == sorted(planted["orphans"])
