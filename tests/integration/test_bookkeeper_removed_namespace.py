"""Leaked ledgers of a namespace the Pulsar-metadata source removed (real ZooKeeper;
DESIGN.md "Pulsar's own metadata", "BookKeeper ledgers").

A deleted namespace's managed ledger still lists one ledger; beside it lie ledgers of the
same topic that no record names any more (a trim whose delete failed, a cursor's old
ledger, a schema ledger whose locator is gone): while the namespace's managed-ledger tree
exists the BookKeeper source classes them ``bk-orphan-*``. Then the Pulsar-metadata
source removes the namespace's leftover znodes: the listed ledger is handed off by id,
and the namespace is recorded as removed (``state.handoff.record_removed_namespaces``).
Without that record the leaks' namespace is unknown to this metadata and they are held
as another cluster's forever; with it they are this cluster's orphans again, under
their own grace, the horizon and the shared-BookKeeper rules unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.rules.bookkeeper import classify as bk
from ledger_gc.state.handoff import HandOff, hand_off, record_removed_namespaces
from pulsar_cluster import PulsarCluster, cursor_tags, ml_tags, schema_tags

pytestmark = pytest.mark.spark

LIVE_NS = "public/default"
LIVE = f"{LIVE_NS}/persistent/orders"
GONE_NS = "acme/gone"
GONE = f"{GONE_NS}/persistent/clicks"
GONE_SCHEMA = f"{GONE_NS}/clicks"
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
def cluster(zk_client: Any) -> PulsarCluster:
    return PulsarCluster(zk_client).init()


@dataclass
class Planted:
    listed: int  # named by the managed ledger the Pulsar-metadata source removed
    leaks: dict[int, str]  # named by nothing -> the class each must get
    late: int  # created after every ledger the metadata names: above the horizon

    @property
    def orphans(self) -> dict[int, str]:
        return {self.listed: bk.BK_ORPHAN_PARTITION, **self.leaks}


def plant(
    pulsar: Settings, c: PulsarCluster, *, recorded: bool, open_leak: bool = False
) -> Planted:
    """The deleted namespace with its listed ledger and its leaks, a live namespace with
    newer ledgers, then a ledger of the deleted topic newer than all of them; then the
    deleted namespace's znodes removed as the Pulsar-metadata source removes them, its
    listed ledger handed off, and (``recorded``) the namespace recorded as removed."""
    c.namespace(GONE_NS)
    listed = c.ledger(ml_tags(GONE))
    leaks = {
        c.ledger(ml_tags(GONE), closed=not open_leak): bk.BK_ORPHAN_PARTITION,
        c.ledger(cursor_tags(GONE, "old-sub")): bk.BK_ORPHAN_CURSOR_LEDGER,
        c.ledger(schema_tags(GONE_SCHEMA)): bk.BK_ORPHAN_SCHEMA_LEDGER,
    }
    c.managed_ledger(GONE, [listed])
    c.namespace(LIVE_NS)
    c.managed_ledger(LIVE, [c.ledger(ml_tags(LIVE)) for _ in range(2)])
    late = c.ledger(ml_tags(GONE))
    for path in ("/managed-ledgers/acme", f"/admin/policies/{GONE_NS}"):
        c.client.delete(path, recursive=True)
    state = resolve(pulsar).state
    named_by = f"/managed-ledgers/{GONE}"
    hand_off(state, "pm-run", {listed: HandOff(GONE_NS, GONE, named_by, 1)})
    if recorded:
        record_removed_namespaces(state, "pm-run", [GONE_NS], 1)
    return Planted(listed, leaks, late)


def held(report: dict[str, Any]) -> dict[int, str]:
    return {s["ledger_id"]: s["hold"] for s in report["bookkeeper"]["samples"].get("bk-held", [])}


def exists(c: PulsarCluster, lid: int) -> bool:
    return c.client.exists(c.path(lid)) is not None


def test_without_the_record_the_leaks_are_held_as_an_unknown_namespace(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    planted = plant(pulsar, cluster, recorded=False)
    first = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0)).to_dict()
    holds = held(first)
    assert {lid: holds.get(lid) for lid in planted.leaks} == dict.fromkeys(
        planted.leaks, bk.HOLD_OTHER_CLUSTER
    )
    registered = {e.ledger_id: e.target_class for e in OrphanRegistry(pulsar).entries().values()}
    assert registered == {planted.listed: bk.BK_ORPHAN_PARTITION}
    second = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
    assert {d["ledger_id"] for d in second["deleted"]} == {planted.listed}
    assert all(exists(cluster, lid) for lid in planted.leaks)


def test_with_the_record_the_leaks_are_orphans_deleted_after_grace(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    planted = plant(pulsar, cluster, recorded=True)
    first = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0)).to_dict()
    registered = {e.ledger_id: e.target_class for e in OrphanRegistry(pulsar).entries().values()}
    assert registered == planted.orphans, first["bookkeeper"]["samples"]
    assert first["deleted"] == []
    # Created after every ledger the metadata read names: the horizon holds it.
    assert held(first).get(planted.late) == bk.HOLD_NEWER

    second = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
    assert {d["ledger_id"] for d in second["deleted"]} == set(planted.orphans)
    assert not any(exists(cluster, lid) for lid in planted.orphans)
    assert exists(cluster, planted.late)
    assert held(second).get(planted.late) == bk.HOLD_NEWER


def test_a_shared_bookkeeper_holds_the_leaks_of_a_removed_namespace(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    shared = pulsar.with_overrides(bk_shared=True)
    planted = plant(shared, cluster, recorded=True)
    first = run_orphan_cycle(resolve(shared), spark=spark, **later(0)).to_dict()
    holds = held(first)
    assert {lid: holds.get(lid) for lid in planted.orphans} == dict.fromkeys(
        planted.orphans, bk.HOLD_SHARED
    )
    second = run_orphan_cycle(resolve(shared), spark=spark, **later(DAY_H + 1)).to_dict()
    assert second["deleted"] == []
    assert all(exists(cluster, lid) for lid in planted.orphans)


def test_an_open_ledger_of_the_removed_namespace_holds_its_topic(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """A topic of the removed namespace with an open ledger has a writer (someone
    writes that namespace again): every ledger of it (its cursor's and schema's too) is
    held, its handed-off one as well."""
    planted = plant(pulsar, cluster, recorded=True, open_leak=True)
    first = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0)).to_dict()
    holds = held(first)
    mine = planted.orphans
    assert {lid: holds.get(lid) for lid in mine} == dict.fromkeys(mine, bk.HOLD_OPEN_WRITER)
    second = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
    assert second["deleted"] == []
    assert all(exists(cluster, lid) for lid in mine)


def test_on_spark_executors_the_removed_namespaces_give_the_same_classes(
    pulsar: Settings, zk_client: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several leaf directories are read and classified on executors: the removed
    namespaces go to them with the references."""
    from ledger_gc.bookkeeper.survey import survey

    monkeypatch.setattr("ledger_gc.bookkeeper.survey.SPARK_OVER_SECONDS", 0.0)
    c = PulsarCluster(zk_client).init(idgen=False)
    c.namespace(LIVE_NS)
    c.managed_ledger(LIVE, [c.ledger(ml_tags(LIVE), ledger_id=lid) for lid in (5, 40_005)])
    gone = [c.ledger(ml_tags(GONE), ledger_id=lid) for lid in (10_005, 20_005)]
    other = c.ledger(ml_tags("other/ns/persistent/x"), ledger_id=30_005)
    record_removed_namespaces(resolve(pulsar).state, "pm-run", [GONE_NS], 1)
    local = survey(resolve(pulsar))
    distributed = survey(resolve(pulsar), spark=spark)
    assert local is not None and distributed is not None
    for found in (local, distributed):
        classes = {c["ledger_id"]: c["target_class"] for c in found.candidates}
        assert classes == dict.fromkeys(gone, bk.BK_ORPHAN_PARTITION)
        assert found.held_reasons == {bk.HOLD_OTHER_CLUSTER: 1}, other


def test_a_ledger_written_after_the_references_read_is_held_and_a_growing_topic_is_someones(
    pulsar: Settings,
    cluster: PulsarCluster,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Someone writes the removed namespace's topic again: a ledger created just after
    the survey read the references is held by the horizon; one more between cycles is
    the topic growing, and every ledger of it is held from then on."""
    from ledger_gc.bookkeeper import references

    planted = plant(pulsar, cluster, recorded=True)
    real = references.read_references
    written: list[int] = []

    def and_write(store: Any, **kwargs: Any) -> Any:
        refs = real(store, **kwargs)
        if not written:
            written.append(cluster.ledger(ml_tags(GONE)))
        return refs

    monkeypatch.setattr(references, "read_references", and_write)
    first = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0)).to_dict()
    registered = {e.ledger_id: e.target_class for e in OrphanRegistry(pulsar).entries().values()}
    assert registered == planted.orphans
    assert held(first).get(written[0]) == bk.HOLD_NEWER

    written.append(cluster.ledger(ml_tags(GONE)))  # the topic rolls over: someone's
    second = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
    assert second["deleted"] == []
    assert all(exists(cluster, lid) for lid in (*planted.orphans, *written))
    growing = second["bookkeeper"]["held_reasons"].get(bk.HOLD_GROWING_ELSEWHERE)
    assert growing == len(planted.orphans), second["bookkeeper"]["held_reasons"]
