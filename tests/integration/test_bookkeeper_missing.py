"""``bk-missing``: Pulsar records that name BookKeeper ledgers BookKeeper does not have
(real ZooKeeper; DESIGN.md "Pulsar's own metadata").

A managed ledger that lists a ledger (not offloaded with ``bookkeeperDeleted``), a
cursor whose ``cursorsLedgerId`` or a schema index that names one: that topic cannot be
read (Pulsar's "No such ledger"). The BookKeeper survey reports each topic and ledger,
read again live (a trim or cursor switch in between is not counted), never registers
them, and a refusal of a wrong root names them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.bookkeeper import references
from ledger_gc.bookkeeper.survey import survey
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.orphans.report import render_text
from pulsar_cluster import PulsarCluster, ml_tags, schema_tags

NS = "public/default"
TOPIC = f"{NS}/persistent/orders"
SCHEMA = f"{NS}/orders"
DAY_H = 24.0


@pytest.fixture
def pulsar(settings: Settings) -> Settings:
    return settings.with_overrides(
        bucket="",
        delete_enabled=True,
        grace_seconds=0,
        retention_seconds=0,
        orphan_max_fraction=1.0,
    )


def plant(c: PulsarCluster) -> dict[str, int]:
    """A topic with a dozen ledgers in BookKeeper, and one id of each kind its records
    name that BookKeeper lacks; an offloaded ledger whose BookKeeper copy Pulsar deleted
    on purpose is no such case."""
    c.namespace(NS)
    present = [c.ledger(ml_tags(TOPIC)) for _ in range(12)]
    schema_ok = c.ledger(schema_tags(SCHEMA))
    lost = {"listed": c.next_id(), "cursor": c.next_id(), "schema": c.next_id()}
    offloaded = c.next_id()
    c.managed_ledger(TOPIC, [*present, lost["listed"], offloaded], offloaded_deleted=[offloaded])
    c.cursor(TOPIC, "sub", lost["cursor"])
    c.schema(SCHEMA, [(0, schema_ok), (1, lost["schema"])])
    return {**lost, "present": present[-1], "schema-ok": schema_ok, "offloaded": offloaded}


def expected(ids: dict[str, int]) -> list[dict[str, Any]]:
    return sorted(
        [
            {
                "topic": f"persistent://{NS}/orders",
                "ledger_id": ids["listed"],
                "named_by": f"/managed-ledgers/{TOPIC}",
            },
            {
                "topic": f"persistent://{NS}/orders",
                "ledger_id": ids["cursor"],
                "named_by": f"/managed-ledgers/{TOPIC}/sub",
            },
            {"topic": SCHEMA, "ledger_id": ids["schema"], "named_by": f"/schemas/{SCHEMA}"},
        ],
        key=lambda item: (item["topic"], item["ledger_id"]),
    )


def test_the_survey_reports_each_topic_and_ledger_bookkeeper_lacks(
    pulsar: Settings, zk_client: KazooClient
) -> None:
    ids = plant(PulsarCluster(zk_client).init())
    found = survey(resolve(pulsar))
    assert found is not None
    manifest = found.to_manifest()
    assert manifest["bk_missing"] == {"count": 3, "samples": expected(ids)}
    # The wrong-root evidence is as it was: the listed ledger only.
    assert manifest["missing_listed"] == [{"ml_name": TOPIC, "ledger_id": ids["listed"]}]


def test_records_that_stop_naming_the_ledger_before_the_check_are_not_counted(
    pulsar: Settings, zk_client: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trim, a cursor switch and a schema rewrite between the references' read and the
    check: the records read again live no longer name the missing ledgers."""
    c = PulsarCluster(zk_client).init()
    ids = plant(c)
    real = references.read_references

    def and_then_trim(store: Any, policies: Any = None, **listed: Any) -> Any:
        refs = real(store, policies=policies, **listed)  # (what the cycle listed)
        c.managed_ledger(TOPIC, [ids["present"]])
        c.cursor(TOPIC, "sub", ids["present"])
        c.schema(SCHEMA, [(0, ids["schema-ok"])])
        return refs

    monkeypatch.setattr(references, "read_references", and_then_trim)
    found = survey(resolve(pulsar))
    assert found is not None
    assert found.to_manifest()["bk_missing"] == {"count": 0, "samples": []}


@pytest.mark.spark
def test_bk_missing_is_never_registered_and_a_wrong_root_refusal_names_them(
    pulsar: Settings, zk_client: KazooClient, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    ids = plant(PulsarCluster(zk_client).init())
    cycle_report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H))
    report = cycle_report.to_dict()
    assert report["bookkeeper"]["bk_missing"]["count"] == 3
    text = "\n".join(render_text(cycle_report))
    assert "bk-missing: 3 ledgers" in text and f"ledger {ids['cursor']}" in text, text
    registered = {e.ledger_id for e in OrphanRegistry(pulsar).entries().values()}
    assert not registered & {ids["listed"], ids["cursor"], ids["schema"]}

    PulsarCluster(zk_client, root="/other-bk").init().ledger(ml_tags(TOPIC))
    wrong = pulsar.with_overrides(bk_ledgers_root="/other-bk")
    refused = run_orphan_cycle(resolve(wrong), spark=spark, **later(DAY_H)).to_dict()
    reasons = [r["reason"] for r in refused["refusals"] if r["guard"] == "bookkeeper-root-mismatch"]
    assert reasons, refused["refusals"]
    assert f"persistent://{NS}/orders: ledgers " in reasons[0], reasons[0]
    # (the other root lacks the schema's present ledger too)
    assert f"{SCHEMA}: ledgers {ids['schema-ok']}, {ids['schema']}" in reasons[0], reasons[0]
