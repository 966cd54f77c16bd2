"""Ledgers handed off by the Pulsar-metadata source become the BookKeeper source's
orphans (real ZooKeeper; DESIGN.md "Pulsar's own metadata").

A namespace is deleted half way: its managed ledger, cursor and schema still name their
ledgers; then its records and its namespace are removed, as the Pulsar-metadata source's
delete does, and the ids those records named are handed off (``state.handoff``). From
the next survey on the BookKeeper source classes them ``bk-orphan-*`` and deletes them
after their grace window; without the hand-off the same ledgers look like another
cluster's (their namespace is unknown) and are held.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans import cycle
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.rules.bookkeeper import classify as bk
from ledger_gc.state.handoff import HandOff, hand_off, handed_off
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


def plant(c: PulsarCluster) -> dict[int, str]:
    """A namespace whose topic has two data ledgers, a cursor ledger and a schema ledger,
    beside a live namespace with newer ledgers; then the first namespace's records and
    nodes removed as the Pulsar-metadata source removes them. Returns each of its ledger
    ids -> the class it must get."""
    c.namespace(GONE_NS)
    data = [c.ledger(ml_tags(GONE)) for _ in range(2)]
    sub = c.ledger(cursor_tags(GONE, "sub"))
    schema = c.ledger(schema_tags(GONE_SCHEMA))
    c.managed_ledger(GONE, data)
    c.cursor(GONE, "sub", sub)
    c.schema(GONE_SCHEMA, [(0, schema)])
    c.namespace(LIVE_NS)
    live = [c.ledger(ml_tags(LIVE)) for _ in range(2)]
    c.managed_ledger(LIVE, live)
    for path in ("/managed-ledgers/acme", "/schemas/acme", f"/admin/policies/{GONE_NS}"):
        c.client.delete(path, recursive=True)
    return {
        **{lid: bk.BK_ORPHAN_PARTITION for lid in data},
        sub: bk.BK_ORPHAN_CURSOR_LEDGER,
        schema: bk.BK_ORPHAN_SCHEMA_LEDGER,
    }


def hand_off_all(pulsar: Settings, c: PulsarCluster, ledgers: dict[int, str]) -> None:
    """What the Pulsar-metadata source's delete records for the records it removed."""
    given = {}
    for lid, cls in ledgers.items():
        if cls == bk.BK_ORPHAN_SCHEMA_LEDGER:
            given[lid] = HandOff(GONE_NS, GONE_SCHEMA, f"/schemas/{GONE_SCHEMA}", 1)
        elif cls == bk.BK_ORPHAN_CURSOR_LEDGER:
            given[lid] = HandOff(GONE_NS, GONE, f"/managed-ledgers/{GONE}/sub", 1)
        else:
            given[lid] = HandOff(GONE_NS, GONE, f"/managed-ledgers/{GONE}", 1)
    hand_off(resolve(pulsar).state, "pm-run", given)


def exists(c: PulsarCluster, lid: int) -> bool:
    return c.client.exists(c.path(lid)) is not None


def test_handed_off_ledgers_of_a_removed_namespace_are_deleted_after_grace(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    gone = plant(cluster)
    hand_off_all(pulsar, cluster, gone)

    first = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    registered = {e.ledger_id: e.target_class for e in OrphanRegistry(pulsar).entries().values()}
    assert registered == gone, first.to_dict()["bookkeeper"]["samples"]
    assert first.to_dict()["deleted"] == []

    second = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
    assert {d["ledger_id"] for d in second["deleted"]} == set(gone)
    assert not any(exists(cluster, lid) for lid in gone)
    assert handed_off(resolve(pulsar).state)  # still there: the survey came before

    # The next survey finds them gone from BookKeeper: their hand-offs are forgotten.
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 2))
    assert handed_off(resolve(pulsar).state) == {}


def test_without_the_hand_off_they_stay_held_as_an_unknown_namespace(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    gone = plant(cluster)
    first = run_orphan_cycle(resolve(pulsar), spark=spark, **later(0)).to_dict()
    held = {s["ledger_id"]: s["hold"] for s in first["bookkeeper"]["samples"]["bk-held"]}
    assert {lid: held.get(lid) for lid in gone} == dict.fromkeys(gone, bk.HOLD_OTHER_CLUSTER)
    assert OrphanRegistry(pulsar).entries() == {}
    second = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1)).to_dict()
    assert second["deleted"] == []
    assert all(exists(cluster, lid) for lid in gone)


def test_a_namespace_recreated_before_the_delete_keeps_its_handed_off_ledgers(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """The live re-check reads the records again: the topic re-created (restored) and
    listing its ledgers again corrects them away, the hand-off notwithstanding."""
    gone = plant(cluster)
    hand_off_all(pulsar, cluster, gone)
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    world = later(DAY_H + 1)
    run_id = "bk-handoff-recheck"
    cycle.step_survey(resolve(pulsar), run_id, spark, **world)
    cycle.step_phases(resolve(pulsar), run_id, clock=world["clock"])
    data = [lid for lid, cls in gone.items() if cls == bk.BK_ORPHAN_PARTITION]
    cluster.namespace(GONE_NS)
    cluster.managed_ledger(GONE, data)
    result = cycle.step_delete(resolve(pulsar), run_id, **world)
    actions = {r.ledger_id: r.action for r in result.results}
    assert {actions[lid] for lid in data} == {"corrected"}
    assert all(exists(cluster, lid) for lid in data)
    # The others (cursor and schema: still gone) went, under the same hand-off.
    assert {lid for lid, action in actions.items() if action == "deleted"} == set(gone) - set(data)


def test_a_shared_bookkeeper_holds_handed_off_ledgers(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    shared = pulsar.with_overrides(bk_shared=True)
    gone = plant(cluster)
    hand_off_all(shared, cluster, gone)
    first = run_orphan_cycle(resolve(shared), spark=spark, **later(0)).to_dict()
    held = {s["ledger_id"]: s["hold"] for s in first["bookkeeper"]["samples"]["bk-held"]}
    assert {lid: held.get(lid) for lid in gone} == dict.fromkeys(gone, bk.HOLD_SHARED)
    run_orphan_cycle(resolve(shared), spark=spark, **later(DAY_H + 1))
    assert all(exists(cluster, lid) for lid in gone)


def test_a_wrong_root_forgets_no_hand_off(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """A BookKeeper root that lacks the listed ledgers (another cluster's) finds none of
    the handed-off ledgers either: the refused survey forgets nothing."""
    gone = plant(cluster)
    hand_off_all(pulsar, cluster, gone)
    PulsarCluster(cluster.client, root="/other-ledgers").init()
    wrong = pulsar.with_overrides(bk_ledgers_root="/other-ledgers")
    report = run_orphan_cycle(resolve(wrong), spark=spark, **later(0)).to_dict()
    assert report["refusals"], report
    assert set(handed_off(resolve(pulsar).state)) == set(gone)


def test_on_spark_executors_handed_off_ledgers_get_the_same_classes(
    pulsar: Settings, zk_client: Any, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several leaf directories are read and classified on executors: the hand-offs go
    to them with the references."""
    from ledger_gc.bookkeeper.survey import survey

    monkeypatch.setattr("ledger_gc.bookkeeper.survey.SPARK_OVER_SECONDS", 0.0)
    c = PulsarCluster(zk_client).init(idgen=False)
    c.namespace(LIVE_NS)
    live = [c.ledger(ml_tags(LIVE), ledger_id=lid) for lid in (5, 40_005)]
    c.managed_ledger(LIVE, live)
    gone = [c.ledger(ml_tags(GONE), ledger_id=lid) for lid in (10_005, 20_005, 30_005)]
    hand_off(
        resolve(pulsar).state,
        "pm-run",
        {lid: HandOff(GONE_NS, GONE, f"/managed-ledgers/{GONE}", 1) for lid in gone[:2]},
    )
    local = survey(resolve(pulsar))
    distributed = survey(resolve(pulsar), spark=spark)
    assert local is not None and distributed is not None
    for found in (local, distributed):
        classes = {c["ledger_id"]: c["target_class"] for c in found.candidates}
        assert classes == dict.fromkeys(gone[:2], bk.BK_ORPHAN_PARTITION)
        assert found.held_reasons == {bk.HOLD_OTHER_CLUSTER: 1}
        assert found.to_manifest()["handed_off"] == 2
