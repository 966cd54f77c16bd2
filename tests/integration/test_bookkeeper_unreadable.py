"""Unreadable BookKeeper ledger records (Pulsar 13480) and ``LEDGERGC_BK_REMOVE_UNREADABLE``
(real ZooKeeper; DESIGN.md "Pulsar's own metadata").

An empty or undecodable ledger znode stops BookKeeper's auditor, and the bookies never
collect that ledger. By default ledger-gc reports it and says so; with the setting, one
that no Pulsar record names goes under the three phases (registered, a grace window, a
live re-check that it is still unreadable, still unreferenced and at the same version),
is audited with its bytes and can be restored. A referenced one is never deleted.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

from ledger_gc.audit import AuditLog
from ledger_gc.bookkeeper import references
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans import cycle
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.orphans.report import render_text
from ledger_gc.rules.bookkeeper import classify as bk
from pulsar_cluster import PulsarCluster, ledger_record, ml_tags

pytestmark = pytest.mark.spark

NS = "public/default"
TOPIC = f"{NS}/persistent/orders"
DAY_H = 24.0


@pytest.fixture
def pulsar(settings: Settings) -> Settings:
    return settings.with_overrides(
        bucket="",
        delete_enabled=True,
        grace_seconds=int(DAY_H * 3600),
        retention_seconds=0,
        orphan_max_fraction=1.0,
    )


@pytest.fixture
def remove(pulsar: Settings) -> Settings:
    return pulsar.with_overrides(bk_remove_unreadable=True)


@pytest.fixture
def cluster(zk_client: Any) -> PulsarCluster:
    return PulsarCluster(zk_client).init()


def plant(c: PulsarCluster, live: list[int] | None = None) -> dict[str, int]:
    """An empty record and a garbage one that nothing names, an empty one the live topic
    lists, and the topic's readable ledgers (newer: the horizon is above them all;
    appended to ``live``)."""
    c.namespace(NS)
    ids = {"empty": c.next_id(), "garbage": c.next_id(), "listed-empty": c.next_id()}
    c.bk.create(c.path(ids["empty"]), b"", makepath=True)
    c.bk.create(c.path(ids["garbage"]), b"BookieMetadataFormatVersion\t3\n\xff\xff", makepath=True)
    c.bk.create(c.path(ids["listed-empty"]), b"", makepath=True)
    readable = [c.ledger(ml_tags(TOPIC)) for _ in range(3)]
    c.managed_ledger(TOPIC, [ids["listed-empty"], *readable])
    if live is not None:
        live.extend(readable)
    return ids


def exists(c: PulsarCluster, lid: int) -> bool:
    return c.client.exists(c.path(lid)) is not None


def test_by_default_unreadable_records_are_reported_naming_the_auditor_and_the_setting(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    ids = plant(cluster)
    first = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    unreadable = first.to_dict()["bookkeeper"]["unreadable"]
    assert unreadable["remove"] is False and unreadable["ledgers"] == 3
    for words in ("auditor", "13480", "LEDGERGC_BK_REMOVE_UNREADABLE=true"):
        assert words in unreadable["note"], unreadable
    text = "\n".join(render_text(first))
    assert "LEDGERGC_BK_REMOVE_UNREADABLE" in text and "auditor" in text, text
    assert OrphanRegistry(pulsar).entries() == {}
    second = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
    assert second["deleted"] == []
    assert all(exists(cluster, lid) for lid in ids.values())


def test_with_the_setting_unreferenced_ones_are_deleted_after_grace_and_restorable(
    remove: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    from ledger_gc.restore.restoring import restore_run

    ids = plant(cluster)
    before = {lid: cluster.client.get(cluster.path(lid))[0] for lid in ids.values()}
    first = run_orphan_cycle(resolve(remove), spark=spark, **later(0)).to_dict()
    registered = {e.ledger_id: e.target_class for e in OrphanRegistry(remove).entries().values()}
    assert registered == {ids["empty"]: bk.BK_UNREADABLE, ids["garbage"]: bk.BK_UNREADABLE}
    assert first["bookkeeper"]["unreadable"] | {"note": ""} == {
        "remove": True,
        "ledgers": 3,
        "removable": 2,
        "note": "",
    }
    assert first["deleted"] == []

    second = run_orphan_cycle(resolve(remove), spark=spark, **later(DAY_H + 1))
    deleted = {d["ledger_id"] for d in second.to_dict()["deleted"]}
    assert deleted == {ids["empty"], ids["garbage"]}
    assert not exists(cluster, ids["empty"]) and not exists(cluster, ids["garbage"])
    assert exists(cluster, ids["listed-empty"])  # a Pulsar record names it: never deleted
    ahead = [r for r in AuditLog(remove).read(run_id=second.run_id) if r["status"] == "deleting"]
    kept = {r["ledger_id"]: base64.b64decode(r["record_base64"]) for r in ahead}
    assert kept == {lid: before[lid] for lid in (ids["empty"], ids["garbage"])}

    restored = restore_run(resolve(remove), second.run_id).to_dict()
    assert restored["objects_restored"] == 2, restored
    for lid in (ids["empty"], ids["garbage"]):
        assert cluster.client.get(cluster.path(lid))[0] == before[lid]


def test_the_live_recheck_keeps_what_was_fixed_referenced_or_rewritten(
    remove: Settings,
    cluster: PulsarCluster,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Between the survey and the delete: one record is repaired (it decodes now), one
    is named by a managed ledger; and a third, still unreadable, is rewritten after its
    re-check (its version moves): none is deleted."""
    live: list[int] = []
    ids = plant(cluster, live)
    third = cluster.next_id()
    cluster.bk.create(cluster.path(third), b"", makepath=True)
    cluster.managed_ledger(TOPIC, [ids["listed-empty"], *live, cluster.ledger(ml_tags(TOPIC))])
    run_orphan_cycle(resolve(remove), spark=spark, **later(0))
    assert {e.ledger_id for e in OrphanRegistry(remove).entries().values()} == {
        ids["empty"],
        ids["garbage"],
        third,
    }
    world = later(DAY_H + 1)
    run_id = "bk-unreadable-recheck"
    cycle.step_survey(resolve(remove), run_id, spark, **world)
    cycle.step_phases(resolve(remove), run_id, clock=world["clock"])
    cluster.bk.set(cluster.path(ids["empty"]), ledger_record(ml_tags(TOPIC)))
    cluster.managed_ledger(TOPIC, [ids["listed-empty"], ids["garbage"], *live])
    real = references.read_references

    def and_rewrite(store: Any, policies: Any = None) -> Any:
        refs = real(store, policies=policies)
        cluster.bk.set(cluster.path(third), b"still empty, another version")
        return refs

    monkeypatch.setattr(references, "read_references", and_rewrite)
    result = cycle.step_delete(resolve(remove), run_id, **world)
    actions = {r.ledger_id: r.action for r in result.results}
    reasons = {r.ledger_id: r.reason for r in result.results}
    assert actions == {ids["empty"]: "corrected", ids["garbage"]: "corrected", third: "corrected"}
    assert "decodes now" in reasons[ids["empty"]], reasons
    assert "listed by" in reasons[ids["garbage"]], reasons
    assert "version" in reasons[third], reasons
    assert all(exists(cluster, lid) for lid in (*ids.values(), third))


def test_a_shared_bookkeeper_never_registers_them(
    remove: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """Another cluster's records, which ledger-gc does not read, may name them."""
    shared = remove.with_overrides(bk_shared=True)
    ids = plant(cluster)
    run_orphan_cycle(resolve(shared), spark=spark, **later(0))
    assert OrphanRegistry(shared).entries() == {}
    run_orphan_cycle(resolve(shared), spark=spark, **later(DAY_H + 1))
    assert all(exists(cluster, lid) for lid in ids.values())


def test_a_schema_locator_that_does_not_decode_may_name_them(
    remove: Settings, cluster: PulsarCluster
) -> None:
    """An undecodable schema locator names ledgers no one can read off it (its own
    ledgers are held, ``HOLD_SCHEMA_INDEX``); an unreadable record has no tags to say
    whose it is, so "no Pulsar record names it" cannot be said while one does not
    decode: none is removable, and the report says why."""
    from ledger_gc.bookkeeper import survey as bk_survey

    ids = plant(cluster)
    cluster.client.create("/schemas/public/default/events", b"\x0a\x03\xff\xff\xff", makepath=True)
    found = bk_survey.survey(resolve(remove))
    assert found is not None
    assert found.to_manifest()["unreadable"]["removable"] == 0
    reasons = {c["ledger_id"]: c for c in found.candidates}
    assert ids["empty"] not in reasons and ids["garbage"] not in reasons
