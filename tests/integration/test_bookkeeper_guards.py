"""The BookKeeper source refuses, holds or skips what it cannot judge (real ZooKeeper).

Each test sets up a misconfiguration or a race a real cluster can show (a wrong root,
another cluster's BookKeeper, a stale copy of the metadata, a topic created or a ledger
deleted during the scan, records that do not decode, odd layouts and ids) and shows that
nothing that must stay is registered or deleted.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from ledger_gc.bookkeeper import references, scan
from ledger_gc.config.edge import resolve, zk_endpoint
from ledger_gc.config.settings import Settings
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.rules.bookkeeper import classify as bk
from ledger_gc.rules.bookkeeper import ledger_paths
from pulsar_cluster import PulsarCluster, cursor_tags, ml_tags

pytestmark = pytest.mark.spark

NS = "public/default"
TOPIC = f"{NS}/persistent/orders"
GONE = f"{NS}/persistent/deleted"
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


def live_topic(c: PulsarCluster, ledgers: int = 3) -> list[int]:
    c.namespace(NS)
    ids = [c.ledger(ml_tags(TOPIC)) for _ in range(ledgers)]
    c.managed_ledger(TOPIC, ids)
    return ids


def all_znodes(client: KazooClient, root: str) -> set[str]:
    found, level = set(), [root]
    while level:
        nxt = []
        for path in level:
            for child in client.get_children(path):
                nxt.append(f"{path}/{child}")
        found.update(nxt)
        level = nxt
    return found


def guards_of(report: Any) -> set[str]:
    return {r["guard"] for r in report.to_dict()["refusals"]}


def test_a_root_that_lacks_the_listed_ledgers_is_refused(
    pulsar: Settings, zk_client: KazooClient, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """LEDGERGC_BK_LEDGERS_ROOT at another cluster's BookKeeper, whose ledgers of the same
    namespace look like leaks of ours."""
    live_topic(PulsarCluster(zk_client).init())
    other = PulsarCluster(zk_client, root="/other-bk").init()
    for _ in range(5):
        other.ledger(ml_tags(GONE))
    before = all_znodes(zk_client, "/other-bk")
    wrong = pulsar.with_overrides(bk_ledgers_root="/other-bk", grace_seconds=0)
    report = run_orphan_cycle(resolve(wrong), spark=spark, **later(DAY_H))
    assert report.status == "refused"
    assert "bookkeeper-root-mismatch" in guards_of(report), report.to_dict()["refusals"]
    assert OrphanRegistry(wrong).entries() == {}
    assert all_znodes(zk_client, "/other-bk") == before


def test_no_topics_beside_pulsar_ledgers_is_refused(
    pulsar: Settings, zk_client: KazooClient, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    c = PulsarCluster(zk_client).init()
    c.namespace(NS)
    for _ in range(4):
        c.ledger(ml_tags(GONE))
    report = run_orphan_cycle(
        resolve(pulsar.with_overrides(grace_seconds=0)), spark=spark, **later(DAY_H)
    )
    assert "bookkeeper-zero-managed-ledgers" in guards_of(report)
    assert report.status == "refused"


def test_pulsar_metadata_older_than_bookkeeper_is_refused(
    pulsar: Settings, zk_client: KazooClient, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """BookKeeper in its own chroot, live; LEDGERGC_ZK_HOSTS at an old copy of Pulsar's
    metadata, whose id counter is far behind the ledgers BookKeeper holds."""
    zk_client.ensure_path("/bk")
    bk_settings = pulsar.with_overrides(zk_address=pulsar.zk_hosts + "/bk")
    from ledger_gc.metadata.zk_client import session

    with session(zk_endpoint(bk_settings)) as bk_client:
        live = PulsarCluster(bk_client).init()
        for _ in range(20):
            live.next_id()  # the live cluster went on creating ledgers
        ids = [live.ledger(ml_tags(TOPIC)) for _ in range(3)]
        gone = live.ledger(ml_tags(GONE))  # a topic created after the copy was taken
    copy = PulsarCluster(zk_client)
    zk_client.ensure_path("/ledgers/idgen")
    copy.next_id()  # the copy's counter: 1
    copy.namespace(NS)
    copy.managed_ledger(TOPIC, ids)
    stale = pulsar.with_overrides(bk_zk_address=bk_settings.zk_hosts, grace_seconds=0)
    report = run_orphan_cycle(resolve(stale), spark=spark, **later(DAY_H))
    assert "bookkeeper-stale-metadata" in guards_of(report)
    assert OrphanRegistry(stale).entries() == {}
    with session(zk_endpoint(bk_settings)) as bk_client:
        assert bk_client.exists(PulsarCluster(bk_client).path(gone))


def test_bookkeeper_true_without_a_layout_exits_2_in_one_line(
    pulsar: Settings, tmp_path: Any
) -> None:
    env = {
        **{k: v for k, v in pulsar.to_env().items()},
        "LEDGERGC_BOOKKEEPER": "true",
        "LEDGERGC_BK_LEDGERS_ROOT": "/no-such-root",
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [sys.executable, "-m", "ledger_gc.cli", "orphans", "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "LAYOUT" in lines[0] and "Oxia" in lines[0], done.stderr


def test_a_ledger_created_during_the_scan_is_never_registered(
    pulsar: Settings,
    zk_client: KazooClient,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A topic created after Pulsar's records were read and before BookKeeper was listed:
    its ledger looks like a deleted topic's, but its id is above every id the records name."""
    c = PulsarCluster(zk_client).init()
    live_topic(c)
    made: list[int] = []
    real = references.read_references

    def then_create(store: Any, policies: Any = None, **listed: Any) -> Any:
        refs = real(store, policies=policies, **listed)  # (what the cycle listed)
        made.append(c.ledger(ml_tags(GONE)))
        made.append(c.ledger(cursor_tags(GONE, "sub")))
        return refs

    monkeypatch.setattr(references, "read_references", then_create)
    report = run_orphan_cycle(
        resolve(pulsar.with_overrides(grace_seconds=0)), spark=spark, **later(DAY_H)
    )
    assert OrphanRegistry(pulsar).entries() == {}
    held = {s["ledger_id"]: s["hold"] for s in report.to_dict()["bookkeeper"]["samples"]["bk-held"]}
    assert held == {lid: bk.HOLD_NEWER for lid in made}
    assert all(c.client.exists(c.path(lid)) for lid in made)


def test_a_ledger_deleted_while_listing_and_unreadable_records_are_handled(
    pulsar: Settings,
    zk_client: KazooClient,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    c = PulsarCluster(zk_client).init()
    ids = live_topic(c)
    empty = c.next_id()
    zk_client.create(c.path(empty), b"", makepath=True)
    garbage = c.next_id()
    zk_client.create(c.path(garbage), b"BookieMetadataFormatVersion\t3\n\xff\xff", makepath=True)
    doomed = c.ledger(ml_tags(GONE))
    real = scan.list_leaves

    def then_delete(*args: Any) -> Any:
        listing = real(*args)
        zk_client.delete(c.path(doomed))  # Pulsar deletes it between listing and read
        return listing

    monkeypatch.setattr(scan, "list_leaves", then_delete)
    report = run_orphan_cycle(
        resolve(pulsar.with_overrides(grace_seconds=0)), spark=spark, **later(DAY_H)
    )
    survey = report.to_dict()["bookkeeper"]
    unreadable = {s["ledger_id"] for s in survey["samples"]["bk-unreadable"]}
    assert unreadable == {empty, garbage}
    assert survey["ledgers"] == len(ids) + 2
    assert OrphanRegistry(pulsar).entries() == {}
    assert zk_client.exists(c.path(empty)) and zk_client.exists(c.path(garbage))


def test_flat_layout_and_long_ids_delete_exactly_the_leaf(
    pulsar: Settings, zk_client: KazooClient, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """A flat-layout root, and a hierarchical one with ids past 2^31 beside short ones."""
    flat = PulsarCluster(zk_client, root="/flat", layout=ledger_paths.FLAT).init(idgen=False)
    hier = PulsarCluster(zk_client).init(idgen=False)
    flat.namespace(NS)
    long_ids = [2**31 - 1, 2**32 + 5, 2**40 + 7]
    for c, orphan_ids in ((flat, [3, 9]), (hier, long_ids[:2])):
        live = [c.ledger(ml_tags(TOPIC), ledger_id=lid) for lid in (1, 2, 2**45)]
        for lid in orphan_ids:
            c.ledger(ml_tags(TOPIC), ledger_id=lid)
        c.managed_ledger(TOPIC, live)
        settings = pulsar.with_overrides(bk_ledgers_root=c.root)
        run_orphan_cycle(resolve(settings), spark=spark, **later(0))
        before = all_znodes(zk_client, c.root)
        report = run_orphan_cycle(resolve(settings), spark=spark, **later(DAY_H + 1)).to_dict()
        assert {d["ledger_id"] for d in report["deleted"]} == set(orphan_ids), report["bookkeeper"]
        gone = {c.path(lid) for lid in orphan_ids}
        assert all_znodes(zk_client, c.root) == before - gone  # no parent removed
        zk_client.delete("/managed-ledgers", recursive=True)
        OrphanRegistry(settings).reset(0)


def test_a_full_leaf_of_ten_thousand_ledgers(
    pulsar: Settings, zk_client: KazooClient, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    c = PulsarCluster(zk_client).init(idgen=False)
    c.namespace(NS)
    record = bytes(__import__("pulsar_cluster").ledger_record(ml_tags(TOPIC)))
    zk_client.ensure_path(c.path(0).rsplit("/", 1)[0])
    pending = [zk_client.create_async(c.path(lid), record) for lid in range(10_000)]
    for op in pending:
        op.get(timeout=30)
    orphans = {17, 4_242, 9_999}  # 9999 is above every listed id: a rollover, held
    c.managed_ledger(TOPIC, [lid for lid in range(10_000) if lid not in orphans])
    report = run_orphan_cycle(
        resolve(pulsar.with_overrides(grace_seconds=0)), spark=spark, **later(DAY_H)
    )
    survey = report.to_dict()["bookkeeper"]
    assert survey["ledgers"] == 10_000
    assert survey["classes"]["bk-live"]["ledgers"] == 10_000 - len(orphans)
    # No grace: registered and deleted in the same cycle, the rest of the leaf untouched.
    assert {d["ledger_id"] for d in report.to_dict()["deleted"]} == {17, 4_242}
    assert len(zk_client.get_children(c.path(0).rsplit("/", 1)[0])) == 10_000 - 2
    assert survey["held_reasons"] == {bk.HOLD_NEWER: 1}


def test_another_clusters_topic_in_an_undeclared_shared_bookkeeper_is_held(
    pulsar: Settings, zk_client: KazooClient, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """Another cluster writes a topic of a namespace this metadata has: its ledgers look
    like a deleted topic's until it rolls over to a new ledger, and then every ledger of
    that name is held, now and in later cycles."""
    c = PulsarCluster(zk_client).init()
    c.namespace(NS)
    theirs = [c.ledger(ml_tags(GONE)) for _ in range(2)]
    live_topic(c)  # created after: the highest listed id is above theirs
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    assert {e.ledger_id for e in OrphanRegistry(pulsar).entries().values()} == set(theirs)
    theirs.append(c.ledger(ml_tags(TOPIC)))  # our topic rolls over: ids move on
    c.managed_ledger(TOPIC, [*live_ids(c), theirs[-1]])
    theirs[-1] = c.ledger(ml_tags(GONE))  # their topic rolls over too
    for hours in (DAY_H + 1, 2 * DAY_H + 2, 3 * DAY_H + 3):
        report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(hours)).to_dict()
        assert report["deleted"] == []
        assert all(c.client.exists(c.path(lid)) for lid in theirs)
    shared = report["bookkeeper"]["live_elsewhere"]
    assert GONE in shared and "LEDGERGC_BK_SHARED" in shared[GONE]
    # Held, so counted as held: not in the orphan class the survey first gave them.
    classes = report["bookkeeper"]["classes"]
    assert classes[bk.BK_ORPHAN_PARTITION] == {"ledgers": 0, "bytes": 0}, classes
    assert classes[bk.BK_HELD]["ledgers"] >= len(theirs)
    # (their newest is above every id this metadata names: held as newer, by the survey)
    assert report["bookkeeper"]["held_reasons"][bk.HOLD_GROWING_ELSEWHERE] == len(theirs) - 1
    assert report["bookkeeper"]["orphan_bytes"] == 0
    held = {s["ledger_id"] for s in report["bookkeeper"]["samples"]["bk-held"]}
    assert set(theirs) <= held


def live_ids(c: PulsarCluster) -> list[int]:
    from ledger_gc.formats.records import decode_managed_ledger_info

    data, _ = c.client.get(f"/managed-ledgers/{TOPIC}")
    return [li.ledgerId for li in decode_managed_ledger_info(data).ledgerInfo]


def test_an_idle_topic_of_another_cluster_with_an_open_ledger_is_never_registered(
    pulsar: Settings, zk_client: KazooClient, spark: Any, later: Callable[[float], dict[str, Any]]
) -> None:
    """Another cluster's idle topic in a namespace both clusters have (public/default):
    it gains no ledger, but its current ledger is open, so a writer has it."""
    c = PulsarCluster(zk_client).init()
    c.namespace(NS)
    theirs = [c.ledger(ml_tags(GONE)) for _ in range(3)]
    theirs.append(c.ledger(ml_tags(GONE), closed=False))  # its current ledger
    live_topic(c)
    for hours in (0.0, DAY_H + 1):
        report = run_orphan_cycle(resolve(pulsar), spark=spark, **later(hours)).to_dict()
        assert report["deleted"] == []
    assert OrphanRegistry(pulsar).entries() == {}
    assert report["bookkeeper"]["held_reasons"][bk.HOLD_OPEN_WRITER] == len(theirs)
    held = {s["ledger_id"] for s in report["bookkeeper"]["samples"]["bk-held"]}
    assert set(theirs) <= held
    assert all(c.client.exists(c.path(lid)) for lid in theirs)


def test_a_delete_whose_answer_is_lost_is_reported_and_can_be_restored(
    pulsar: Settings,
    zk_client: KazooClient,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The znode delete is applied, its answer lost (a connection loss): the step fails
    saying the delete may have been applied, and restore works from the record written
    ahead of it."""
    from kazoo.client import TransactionRequest
    from kazoo.exceptions import ConnectionLoss

    from ledger_gc.orphans.cycle import OrphanCycleError
    from ledger_gc.restore.restoring import restore_run

    c = PulsarCluster(zk_client).init()
    c.namespace(NS)
    leaked = c.ledger(ml_tags(TOPIC))
    live_topic(c)
    record = zk_client.get(c.path(leaked))[0]
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    real_commit = TransactionRequest.commit

    def applied_then_lost(self: TransactionRequest) -> Any:
        result = real_commit(self)
        if any("/ledgers/" in op.path for op in self.operations):
            raise ConnectionLoss()
        return result

    monkeypatch.setattr(TransactionRequest, "commit", applied_then_lost)
    with pytest.raises(OrphanCycleError) as failed:
        run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1))
    monkeypatch.undo()
    assert not zk_client.exists(c.path(leaked))
    assert "may have been applied" in str(failed.value.report.to_dict()["error"])
    restored = restore_run(resolve(pulsar), failed.value.report.run_id).to_dict()
    assert restored["objects_restored"] == 1, restored
    assert zk_client.get(c.path(leaked))[0] == record


def test_a_restored_znode_gets_the_acl_it_had_not_ledger_gcs(
    pulsar: Settings,
    zk_client: KazooClient,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
) -> None:
    """ledger-gc with digest auth (LEDGERGC_ZK_DIGEST) creates its own znodes with its own
    ACL; a restored ledger must keep BookKeeper's, or bookies and brokers cannot read it."""
    from ledger_gc.restore.restoring import restore_run

    c = PulsarCluster(zk_client).init()
    c.namespace(NS)
    leaked = c.ledger(ml_tags(TOPIC))
    live_topic(c)
    before = zk_client.get_acls(c.path(leaked))[0]
    with_digest = pulsar.with_overrides(zk_digest="ledgergc:secret")
    run_orphan_cycle(resolve(with_digest), spark=spark, **later(0))
    run = run_orphan_cycle(resolve(with_digest), spark=spark, **later(DAY_H + 1)).run_id
    assert not zk_client.exists(c.path(leaked))
    assert restore_run(resolve(with_digest), run).to_dict()["objects_restored"] == 1
    assert zk_client.get_acls(c.path(leaked))[0] == before


def test_the_scan_on_spark_executors_finds_what_the_driver_finds(
    pulsar: Settings, zk_client: KazooClient, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tree of several shards (leaf directories of 10,000 ids, and the long tree) is
    read and classified on executors; the survey must be the same as the driver's."""
    from ledger_gc.bookkeeper.survey import survey

    monkeypatch.setattr("ledger_gc.bookkeeper.survey.SPARK_OVER_SECONDS", 0.0)

    c = PulsarCluster(zk_client).init(idgen=False)
    c.namespace(NS)
    ids = [5, 10_005, 20_005, 35_000, 2**31 + 5, 2**33]
    live = [c.ledger(ml_tags(TOPIC), ledger_id=lid) for lid in ids[::2]]
    orphans = [c.ledger(ml_tags(TOPIC), ledger_id=lid) for lid in ids[1::2][:2]]
    gone = c.ledger(ml_tags(GONE), ledger_id=50_001)
    c.ledger({}, ledger_id=60_001)  # foreign
    c.managed_ledger(TOPIC, [*live, 2**40])
    c.ledger(ml_tags(TOPIC), ledger_id=2**40)
    local = survey(resolve(pulsar))
    distributed = survey(resolve(pulsar), spark=spark)
    assert local is not None and distributed is not None
    # The same findings; what each cost ZooKeeper differs (the second reuses records).
    assert _findings(distributed.to_manifest()) == _findings(local.to_manifest())
    assert sorted(c["ledger_id"] for c in distributed.candidates) == sorted([*orphans, gone])
    assert distributed.ledgers == len(ids) - 1 + 3


def _findings(manifest: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in manifest.items() if key != "cost"}
