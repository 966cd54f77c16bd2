"""The BookKeeper record cache against a real ZooKeeper: it never makes a live ledger
look orphaned, whatever happened to a ledger's znode between two cycles.

Each test surveys once (the cache keeps the CLOSED records it read), changes the
cluster the way a broker, a bookie, an operator or ``ledgergc restore`` would, and
surveys again: the ledger must be classified by what its znode holds *now*, exactly as
a survey with the cache off classifies it. ``survey`` runs on the driver (the executors'
path is the same code, ``test_the_executors_reuse_what_the_driver_would``).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_acl

from ledger_gc.bookkeeper import directories, record_cache, scan
from ledger_gc.bookkeeper import survey as survey_module
from ledger_gc.bookkeeper.survey import BookKeeperSurvey, survey
from ledger_gc.config.edge import bookkeeper_endpoint, resolve
from ledger_gc.config.settings import Settings
from ledger_gc.orphans import cycle
from ledger_gc.orphans.cycle import run_orphan_cycle
from ledger_gc.orphans.registry import OrphanRegistry
from ledger_gc.orphans.report import CycleReport, render_text
from ledger_gc.rules.bookkeeper import classify as bk
from ledger_gc.rules.bookkeeper import record_cache as rules
from ledger_gc.state import schema
from ledger_gc.state.stores import open_store
from pulsar_cluster import PulsarCluster, ledger_record, ml_tags

# The cache's rows in SQLite and in PostgreSQL (a deployment's store) alike.
pytestmark = pytest.mark.state_backends

NS = "public/default"
ORDERS = f"{NS}/persistent/orders"
GONE = f"{NS}/persistent/deleted-topic"
OTHER = f"{NS}/persistent/other"
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
def cluster(zk_client: KazooClient) -> PulsarCluster:
    c = PulsarCluster(zk_client).init()
    c.namespace(NS)
    return c


def verdicts(found: BookKeeperSurvey | None) -> dict[int, str]:
    """Every ledger the survey found -> its class (live unless a sample or candidate says
    otherwise; the tests' clusters are far smaller than a sample)."""
    assert found is not None
    classes = {lid: bk.BK_LIVE for lid in found.found}
    for cls, sample in found.samples.items():
        for item in sample:
            classes[item["ledger_id"]] = cls
    for candidate in found.candidates:
        classes[candidate["ledger_id"]] = candidate["target_class"]
    return classes


def fresh(settings: Settings) -> dict[int, str]:
    """What a survey with the cache off finds (it neither reads nor writes the cache)."""
    return verdicts(survey(resolve(settings.with_overrides(bk_record_cache=False))))


def cached_survey(settings: Settings) -> BookKeeperSurvey:
    found = survey(resolve(settings))
    assert found is not None
    return found


def topic(c: PulsarCluster, name: str, count: int = 3) -> list[int]:
    """A live topic: ``count`` CLOSED ledgers, all listed, and an orphan beside them."""
    ids = [c.ledger(ml_tags(name)) for _ in range(count)]
    c.managed_ledger(name, ids)
    return ids


def test_the_second_cycle_reads_only_what_changed(pulsar: Settings, cluster: PulsarCluster) -> None:
    live = topic(cluster, ORDERS, 5)
    leaked = cluster.ledger(ml_tags(ORDERS))
    cluster.managed_ledger(ORDERS, [*live, cluster.ledger(ml_tags(ORDERS))])
    first = cached_survey(pulsar)
    assert first.cost.records_read == 7 and first.cost.records_cached == 0
    assert first.cost.cache["full_read"]
    new = cluster.ledger(ml_tags(ORDERS))
    cluster.managed_ledger(ORDERS, [*live, new])
    second = cached_survey(pulsar)
    assert second.cost.records_cached == 7  # the six CLOSED ledgers and the leaked one
    assert second.cost.records_read == 1  # only the new ledger
    assert verdicts(second) == fresh(pulsar)
    assert verdicts(second)[leaked] == bk.BK_ORPHAN_LEDGER


def test_a_ledger_referenced_again_is_live(pulsar: Settings, cluster: PulsarCluster) -> None:
    live = topic(cluster, ORDERS)
    leaked = cluster.ledger(ml_tags(ORDERS))
    cluster.managed_ledger(ORDERS, [*live, cluster.ledger(ml_tags(ORDERS))])
    assert verdicts(cached_survey(pulsar))[leaked] == bk.BK_ORPHAN_LEDGER
    cluster.managed_ledger(ORDERS, [*live, leaked])  # the broker lists it again
    second = cached_survey(pulsar)
    assert second.cost.records_cached >= 1 and second.cost.records_read == 0
    assert verdicts(second)[leaked] == bk.BK_LIVE
    assert verdicts(second) == fresh(pulsar)


def test_a_topic_deleted_and_created_again_by_the_same_name(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    old = topic(cluster, ORDERS)
    topic(cluster, OTHER)  # newer ledgers: the metadata's horizon is above ORDERS' ones
    assert set(verdicts(cached_survey(pulsar))[lid] for lid in old) == {bk.BK_LIVE}
    cluster.client.delete(f"/managed-ledgers/{ORDERS}")  # the topic is deleted...
    gone = cached_survey(pulsar)
    assert {verdicts(gone)[lid] for lid in old} == {bk.BK_ORPHAN_PARTITION}
    new = topic(cluster, ORDERS)  # ...and created again: new ledgers, new ids
    again = cached_survey(pulsar)
    assert again.cost.records_read == len(new)
    assert {verdicts(again)[lid] for lid in new} == {bk.BK_LIVE}
    assert {verdicts(again)[lid] for lid in old} == {bk.BK_ORPHAN_LEDGER}
    assert verdicts(again) == fresh(pulsar)


def test_a_znode_deleted_and_created_again_is_read_again(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    """Same id, new znode (a restore of another record, a tool, an id reused): the
    directory's cversion shows a create the listings do not, so it is read again."""
    victim = cluster.ledger(ml_tags(GONE))  # cached as an orphan partition
    topic(cluster, ORDERS)
    assert verdicts(cached_survey(pulsar))[victim] == bk.BK_ORPHAN_PARTITION
    cluster.client.delete(cluster.path(victim))
    cluster.client.create(cluster.path(victim), ledger_record({}))  # now untagged
    second = cached_survey(pulsar)
    assert verdicts(second)[victim] == bk.BK_FOREIGN  # never deleted
    assert second.cost.directories_reused == {
        "children created or deleted beyond what the listings show": 1
    }
    assert verdicts(second) == fresh(pulsar)


def test_a_znode_gone_before_one_listing_and_back_before_the_next(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    """Deleted before one cycle (it leaves the cache), created again before the next
    with other content: new to the listing, so read."""
    victim = cluster.ledger(ml_tags(GONE))
    topic(cluster, ORDERS)
    cached_survey(pulsar)
    data = cluster.client.get(cluster.path(victim))[0]
    cluster.client.delete(cluster.path(victim))
    assert victim not in verdicts(cached_survey(pulsar))
    cluster.client.create(cluster.path(victim), ledger_record({"application": b"other"}))
    assert data != cluster.client.get(cluster.path(victim))[0]
    third = cached_survey(pulsar)
    assert verdicts(third)[victim] == bk.BK_FOREIGN
    assert verdicts(third) == fresh(pulsar)


def test_ledgergc_restore_recreates_a_znode_that_is_read_again(
    pulsar: Settings,
    cluster: PulsarCluster,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
) -> None:
    """A ledger a cycle deleted and ``ledgergc restore`` put back: same id and bytes, a
    new znode; its age counts from the restore (its znode's ctime), not the cache's."""
    from ledger_gc.restore.restoring import restore_run

    victim = cluster.ledger(ml_tags(GONE))
    topic(cluster, ORDERS)
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    deleting = run_orphan_cycle(resolve(pulsar), spark=spark, **later(DAY_H + 1))
    assert {d["ledger_id"] for d in deleting.to_dict()["deleted"]} == {victim}
    restore_run(resolve(pulsar), deleting.run_id)
    restored_ctime = cluster.client.exists(cluster.path(victim)).ctime
    found = cached_survey(pulsar)
    candidate = next(c for c in found.candidates if c["ledger_id"] == victim)
    assert candidate["newest_ms"] == restored_ctime
    assert verdicts(found) == fresh(pulsar)


def test_an_ensemble_change_keeps_what_the_classification_reads(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    """A bookie replaced: BookKeeper rewrites the znode (its version moves), the tags,
    state, length and ctime stay; the cached record stands and classifies the same."""
    live = topic(cluster, ORDERS)
    leaked = cluster.ledger(ml_tags(ORDERS))
    cluster.managed_ledger(ORDERS, [*live, cluster.ledger(ml_tags(ORDERS))])
    cached_survey(pulsar)
    for lid in (*live, leaked):
        data, stat = cluster.client.get(cluster.path(lid))
        moved = data.replace(b"bookie-2:3181", b"bookie-9:3181")
        assert moved != data
        cluster.client.set(cluster.path(lid), moved, version=stat.version)
    second = cached_survey(pulsar)
    assert second.cost.records_read == 0
    assert verdicts(second) == fresh(pulsar)
    assert verdicts(second)[leaked] == bk.BK_ORPHAN_LEDGER


def test_open_and_recovering_ledgers_are_read_every_cycle(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    live = topic(cluster, ORDERS)
    writing = cluster.ledger(ml_tags(ORDERS), closed=False)
    cluster.managed_ledger(ORDERS, [*live, writing])
    unreadable = cluster.ledger(ml_tags(ORDERS))
    cluster.client.set(cluster.path(unreadable), b"BookieMetadataFormatVersion\t3\n\xff")
    first = cached_survey(pulsar)
    assert first.cost.records_read == 5
    second = cached_survey(pulsar)
    assert second.cost.records_read == 2  # the OPEN one and the unreadable one
    cluster.close(writing)
    cluster.client.set(cluster.path(unreadable), ledger_record({}))
    third = cached_survey(pulsar)
    assert third.cost.records_read == 2
    assert verdicts(third)[unreadable] == bk.BK_FOREIGN
    assert verdicts(third) == fresh(pulsar)
    assert cached_survey(pulsar).cost.records_read == 0  # both CLOSED and readable now


def test_another_instance_id_never_uses_the_cache(pulsar: Settings, cluster: PulsarCluster) -> None:
    """BookKeeper formatted again (a new INSTANCEID): the same paths are another
    BookKeeper's ledgers, even where a record changed in place."""
    victim = cluster.ledger(ml_tags(GONE))
    topic(cluster, ORDERS)
    assert verdicts(cached_survey(pulsar))[victim] == bk.BK_ORPHAN_PARTITION
    cluster.client.set(f"{cluster.root}/INSTANCEID", b"another-bookkeeper")
    cluster.client.set(cluster.path(victim), ledger_record({}))  # in place: same znode
    second = cached_survey(pulsar)
    assert second.cost.records_cached == 0 and second.cost.cache["full_read"]
    assert verdicts(second)[victim] == bk.BK_FOREIGN


def test_another_root_or_chroot_never_uses_the_cache(
    pulsar: Settings, cluster: PulsarCluster, zk_client: KazooClient
) -> None:
    """A copy of the cluster (the same INSTANCEID) in another chroot or under another
    root, where one ledger differs: its survey reads every ledger."""
    victim = cluster.ledger(ml_tags(GONE))
    topic(cluster, ORDERS)
    assert verdicts(cached_survey(pulsar))[victim] == bk.BK_ORPHAN_PARTITION
    copy = PulsarCluster(zk_client, root="/copy-ledgers").init()
    for lid in verdicts(survey(resolve(pulsar))):
        data = ledger_record({}) if lid == victim else zk_client.get(cluster.path(lid))[0]
        zk_client.create(copy.path(lid), data, makepath=True)
    elsewhere = cached_survey(pulsar.with_overrides(bk_ledgers_root=copy.root))
    assert elsewhere.cost.records_cached == 0
    assert verdicts(elsewhere)[victim] == bk.BK_FOREIGN


def test_a_reset_id_counter_drops_the_cache(pulsar: Settings, cluster: PulsarCluster) -> None:
    """BookKeeper's id counter created again: ids will be handed out again, so no cached
    record stands, even for a znode changed in place."""
    victim = cluster.ledger(ml_tags(GONE))
    topic(cluster, ORDERS)
    assert verdicts(cached_survey(pulsar))[victim] == bk.BK_ORPHAN_PARTITION
    cluster.client.delete(f"{cluster.root}/idgen", recursive=True)
    cluster.client.create(f"{cluster.root}/idgen")
    cluster.client.set(cluster.path(victim), ledger_record({}))
    second = cached_survey(pulsar)
    assert second.cost.records_cached == 0
    assert "id counter idgen was created again" in second.cost.cache["why"]
    assert verdicts(second)[victim] == bk.BK_FOREIGN


def test_a_full_read_every_n_cycles(pulsar: Settings, cluster: PulsarCluster) -> None:
    topic(cluster, ORDERS)
    every_3 = pulsar.with_overrides(bk_full_read_every=3)
    reads = [cached_survey(every_3).cost.records_read for _ in range(6)]
    assert reads == [3, 0, 0, 3, 0, 0]


def test_a_damaged_row_is_read_again(pulsar: Settings, cluster: PulsarCluster) -> None:
    topic(cluster, ORDERS)
    cached_survey(pulsar)
    with open_store(pulsar).write() as conn:
        conn.execute(schema.bk_records.update().values(body=b"not a body"))
    second = cached_survey(pulsar)
    assert second.cost.records_cached == 0 and second.cost.records_read == 3
    assert cached_survey(pulsar).cost.records_read == 0  # healed


def test_a_reused_ledgers_tags_are_not_decoded_again(
    pulsar: Settings, cluster: PulsarCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second cycle classifies cached ledgers from the tags their rows keep: no
    custom metadata is decoded for them (with a topic's ledgers among every other's,
    that was most of a cached ledger's time)."""
    for name in (ORDERS, OTHER):
        topic(cluster, name)
    cached_survey(pulsar)
    want = fresh(pulsar)

    def refused(custom: object) -> bk.PulsarTags:
        raise AssertionError(f"decoded again: {custom!r}")

    monkeypatch.setattr(bk.PulsarTags, "of", refused)
    monkeypatch.setattr(scan, "tags_of", refused)  # (nor remembered)
    second = cached_survey(pulsar)
    assert second.cost.records_cached == 6 and second.cost.records_read == 0
    assert verdicts(second) == want


def test_rows_of_an_earlier_format_mean_one_full_read_that_rewrites_them(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    """A state store outlives versions: the rows an earlier ledger-gc wrote (another
    format) are never decoded as this one's; the cycle reads every ledger, classifies
    as a fresh read does, and writes the rows in this format for the next."""
    topic(cluster, ORDERS)
    cached_survey(pulsar)
    with open_store(pulsar).write() as conn:
        conn.execute(schema.bk_record_cycles.update().values(format=rules.CACHE_FORMAT - 1))
    second = cached_survey(pulsar)
    assert second.cost.cache["full_read"] and second.cost.records_read == 3
    assert f"of format {rules.CACHE_FORMAT - 1}" in second.cost.cache["why"]
    assert verdicts(second) == fresh(pulsar)
    third = cached_survey(pulsar)
    assert third.cost.records_read == 0 and third.cost.records_cached == 3


@pytest.mark.parametrize(
    "id_counters",
    [
        '{"idgen": [12, 3], "idgen-lo',  # cut in half
        "[1, 2]",  # not an object
        '{"idgen": "12"}',  # a counter that is not [czxid, cversion]
        '{"idgen": [12, "3"]}',
        '{"idgen": [12, 3], "#probe": {"czxid": 1}}',  # a probe mark of the wrong shape
        '{"idgen": [true, 3]}',
    ],
    ids=["cut-in-half", "a-list", "a-string", "a-string-cversion", "a-dict-probe", "a-bool"],
)
def test_a_cycle_row_that_does_not_decode_means_a_full_read_that_rewrites_it(
    pulsar: Settings, cluster: PulsarCluster, id_counters: str, caplog: pytest.LogCaptureFixture
) -> None:
    topic(cluster, ORDERS)
    cached_survey(pulsar)
    with open_store(pulsar).write() as conn:
        conn.execute(schema.bk_record_cycles.update().values(id_counters=id_counters))
    second = cached_survey(pulsar)
    assert second.cost.records_read == 3 and second.cost.cache["full_read"]
    assert "does not decode" in second.cost.cache["why"]
    assert "bk_record_cycles" in caplog.text
    assert verdicts(second) == fresh(pulsar)
    third = cached_survey(pulsar)  # the row was rewritten: the cache works again
    assert third.cost.records_read == 0 and third.cost.records_cached == 3


@pytest.mark.spark
def test_a_cycle_row_cut_in_half_does_not_stop_the_cycle(
    pulsar: Settings,
    cluster: PulsarCluster,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
) -> None:
    """The whole cycle (BookKeeper and the other sources after it) runs, and says why
    every ledger was read."""
    topic(cluster, ORDERS)
    run_orphan_cycle(resolve(pulsar), dry_run=True, spark=spark, **later(0))
    with open_store(pulsar).write() as conn:
        conn.execute(schema.bk_record_cycles.update().values(id_counters='{"idgen": [1'))
    report = run_orphan_cycle(resolve(pulsar), dry_run=True, spark=spark, **later(0)).to_dict()
    assert report["status"] == "ok", report.get("error")
    cost = report["bookkeeper"]["cost"]
    assert cost["records_read"] == 3 and "does not decode" in cost["cache"]["why"]
    text = "\n".join(render_text(CycleReport(report["run_id"], report["status"], report)))
    assert "ledgergc_bk_record_cycles row does not decode" in text


@pytest.mark.spark
def test_a_probe_zookeeper_refuses_is_said_in_the_report(
    pulsar: Settings,
    cluster: PulsarCluster,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
) -> None:
    """An account without CREATE/DELETE at the probe's parent cannot prove how ZooKeeper
    counts child changes: the cache then reuses only unchanged directories, and the
    report (text and JSON) says so, and why."""
    topic(cluster, ORDERS)
    cluster.client.ensure_path("/ledger-gc")
    cluster.client.create(
        record_cache.PROBE_PARENT, b"", acl=[make_acl("world", "anyone", read=True)]
    )
    report = run_orphan_cycle(resolve(pulsar), dry_run=True, spark=spark, **later(0)).to_dict()
    cache = report["bookkeeper"]["cost"]["cache"]
    assert cache["cversion_proven"] is False
    cannot = cache["cannot"]
    assert "only directories with no change" in cannot
    assert record_cache.PROBE_PARENT in cannot and "CREATE and DELETE" in cannot
    assert "NoAuth" in cannot
    text = "\n".join(render_text(CycleReport(report["run_id"], report["status"], report)))
    assert cannot in text


def _copy_rows_as(pulsar: Settings, instance_id: str, location: str, used_ms: int) -> None:
    """Our rows again, as another BookKeeper's (or address's) last used at ``used_ms``."""
    with open_store(pulsar).write() as conn:
        for table in (schema.bk_records, schema.bk_record_cycles):
            rows = [dict(r._mapping) for r in conn.execute(table.select())]
            rows = [r for r in rows if r["instance_id"] == "6e9e0a2c-demo"]
            for r in rows:
                r.update(instance_id=instance_id, location=location)
                r["updated_ms" if table is schema.bk_record_cycles else "listed_ms"] = used_ms
            conn.execute(table.insert(), rows)


def test_rows_no_cycle_used_for_the_keep_days_are_dropped(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    """A state store outlives clusters: the rows of another BookKeeper (or of this one
    at another address) that no cycle used for LEDGERGC_BK_RECORD_CACHE_KEEP_DAYS go;
    those used since stay, whoever they are."""
    topic(cluster, ORDERS)
    cached_survey(pulsar)
    day_ms = 86_400_000
    now = int(time.time() * 1000)
    _copy_rows_as(pulsar, "gone-cluster", "old-host:2181|/ledgers|hierarchical", now - 31 * day_ms)
    _copy_rows_as(pulsar, "other-cluster", "zk-b:2181|/ledgers|hierarchical", now - 29 * day_ms)
    _copy_rows_as(
        pulsar, "6e9e0a2c-demo", "moved-away:2181|/ledgers|hierarchical", now - 40 * day_ms
    )
    assert cached_survey(pulsar).cost.records_read == 0  # ours are used
    with open_store(pulsar).read() as conn:
        records = {(r.instance_id, r.location) for r in conn.execute(schema.bk_records.select())}
        cycles = {
            (r.instance_id, r.location) for r in conn.execute(schema.bk_record_cycles.select())
        }
    ours = ("6e9e0a2c-demo", record_cache.location_of(bookkeeper_endpoint(pulsar), "hierarchical"))
    kept = {ours, ("other-cluster", "zk-b:2181|/ledgers|hierarchical")}
    assert records == kept and cycles == kept
    # A shorter setting drops the other one too.
    cached_survey(pulsar.with_overrides(bk_record_cache_keep_days=28))
    with open_store(pulsar).read() as conn:
        records = {(r.instance_id, r.location) for r in conn.execute(schema.bk_records.select())}
    assert records == {ours}


def test_the_cache_off_reads_everything_and_writes_nothing(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    topic(cluster, ORDERS)
    off = pulsar.with_overrides(bk_record_cache=False)
    for _ in range(2):
        found = cached_survey(off)
        assert found.cost.records_read == 3 and not found.cost.cache["enabled"]
    with open_store(pulsar).read() as conn:
        assert conn.execute(schema.bk_records.select()).first() is None


@pytest.mark.spark
def test_the_executors_reuse_what_the_driver_would(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("ledger_gc.bookkeeper.survey.SPARK_OVER_SECONDS", 0.0)
    ids = [5, 10_005, 20_005, 35_000, 2**31 + 5]
    for lid in ids:
        cluster.ledger(ml_tags(ORDERS), ledger_id=lid)
    victim = cluster.ledger(ml_tags(GONE), ledger_id=20_007)
    cluster.managed_ledger(ORDERS, ids[:-1])
    survey(resolve(pulsar), spark=spark)
    cluster.client.delete(cluster.path(victim))
    cluster.client.create(cluster.path(victim), ledger_record({}))
    second = survey(resolve(pulsar), spark=spark)
    assert second is not None
    # The re-created one's directory (20_005 and it) is read again; the rest is cached.
    assert second.cost.records_read == 2 and second.cost.records_cached == 4
    assert verdicts(second) == fresh(pulsar)
    assert verdicts(second)[victim] == bk.BK_FOREIGN


@pytest.mark.spark
def test_the_executors_send_back_only_the_records_of_directories_that_changed(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The steady state's driver gets back what changed, not the whole cache again."""
    monkeypatch.setattr("ledger_gc.bookkeeper.survey.SPARK_OVER_SECONDS", 0.0)
    ids = [5, 10_005, 20_005, 35_000]
    for lid in ids:
        cluster.ledger(ml_tags(ORDERS), ledger_id=lid)
    cluster.managed_ledger(ORDERS, ids)
    survey(resolve(pulsar), spark=spark)
    returned: list[directories.DirectoryDone] = []
    save = survey_module._save_cache

    def spy(*args: Any) -> None:
        def seen(items: Any) -> Any:
            for item in items:
                returned.append(item)
                yield item

        save(*args[:3], seen(args[3]), *args[4:])

    monkeypatch.setattr(survey_module, "_save_cache", spy)
    new = cluster.ledger(ml_tags(ORDERS), ledger_id=20_006)
    cluster.managed_ledger(ORDERS, [*ids, new])

    second = survey(resolve(pulsar), spark=spark)

    assert second is not None and second.cost.records_read == 1
    sent = {item.directory: item.records for item in returned if item.body is not None}
    assert list(sent.values()) == [2], sent  # 20_005's directory, with the new ledger
    third = survey(resolve(pulsar), spark=spark)
    assert third is not None
    assert (third.cost.records_read, third.cost.records_cached) == (0, 5)
    assert verdicts(third) == fresh(pulsar)


def _four_parts(cluster: PulsarCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Eight ledgers of one topic in four directories, surveyed on Spark in four parts."""
    monkeypatch.setattr("ledger_gc.bookkeeper.survey.SPARK_OVER_SECONDS", 0.0)
    monkeypatch.setattr("ledger_gc.bookkeeper.survey.PART_LEDGERS", 2)
    ids = [5, 6, 10_005, 10_006, 20_005, 20_006, 35_000, 35_001]
    for lid in ids:
        cluster.ledger(ml_tags(ORDERS), ledger_id=lid)
    cluster.managed_ledger(ORDERS, ids)


@pytest.mark.spark
def test_the_driver_loads_a_parts_cached_records_only_to_pack_it(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The steady state's driver held every directory's cached records and ids listed
    from the plan to the save (at 10M, 120 MiB and 80 MiB, beside the parts packed
    from them): the plan keeps each row's stat, and a part's rows are loaded to pack
    that part."""
    _four_parts(cluster, monkeypatch)
    survey(resolve(pulsar), spark=spark)
    loaded: list[list[str]] = []
    load = record_cache.load_rows

    def spy(state: Any, cache: record_cache.CachePlan, directories: Any) -> Any:
        assert all(isinstance(row, record_cache.RowStat) for row in cache.rows.values())
        asked = list(directories)
        loaded.append(asked)
        return load(state, cache, asked)

    monkeypatch.setattr(record_cache, "load_rows", spy)

    second = survey(resolve(pulsar), spark=spark)

    assert second is not None and second.cost.executor_tasks == 4
    assert sorted(len(asked) for asked in loaded) == [1, 1, 1, 1]  # a part at a time
    assert (second.cost.records_read, second.cost.records_cached) == (0, 8)
    assert verdicts(second) == fresh(pulsar)


@pytest.mark.spark
def test_a_directory_whose_records_all_stand_gets_a_row_of_this_listing(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An open ledger (read every cycle, never cached) deleted between two cycles: the
    directory's cached records all stand ("accounted"), none is read; its row is
    written again with this listing's stat, so the next cycle finds it unchanged."""
    monkeypatch.setattr("ledger_gc.bookkeeper.survey.SPARK_OVER_SECONDS", 0.0)
    ids = [5, 10_005, 20_005, 35_000]
    for lid in ids:
        cluster.ledger(ml_tags(ORDERS), ledger_id=lid)
    brief = cluster.ledger(ml_tags(ORDERS), ledger_id=20_006, closed=False)
    cluster.managed_ledger(ORDERS, [*ids, brief])
    survey(resolve(pulsar), spark=spark)
    cluster.managed_ledger(ORDERS, ids)
    cluster.client.delete(cluster.path(brief))

    second = survey(resolve(pulsar), spark=spark)
    third = survey(resolve(pulsar), spark=spark)

    assert second is not None and third is not None
    assert second.cost.directories_reused.get("accounted") == 1
    assert (second.cost.records_read, second.cost.records_cached) == (0, 4)
    assert third.cost.directories_reused == {"unchanged": 4}
    assert (third.cost.records_read, third.cost.records_cached) == (0, 4)
    assert verdicts(third) == fresh(pulsar)


def _lie_in_the_cache(pulsar: Settings, cluster: PulsarCluster, lid: int, tags: dict) -> None:
    """Rewrite the cached record of ``lid`` (its row's stat kept, so it is reused)."""
    table = schema.bk_records
    with open_store(pulsar).write() as conn:
        for row in conn.execute(table.select()).all():
            records = rules.decode_records(bytes(row.body))
            if not any(r.ledger_id == lid for r in records):
                continue
            lied = [
                r
                if r.ledger_id != lid
                else rules.CachedRecord(
                    r.ledger_id,
                    r.czxid,
                    r.znode_ctime_ms,
                    r.ctime_ms,
                    r.length,
                    3,
                    bk.PulsarTags.of(tags),
                )
                for r in records
            ]
            conn.execute(
                table.update()
                .where(table.c.first_ledger_id == row.first_ledger_id)
                .values(body=rules.encode_records(lied))
            )
            return
    raise AssertionError(f"ledger {lid} is not cached")


@pytest.mark.spark
def test_the_live_recheck_never_uses_the_cache(
    pulsar: Settings,
    cluster: PulsarCluster,
    spark: Any,
    later: Callable[[float], dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cache that lies (a foreign ledger cached as a deleted topic's) gets the ledger
    registered, but the delete step reads its znode and keeps it: it never reads the
    cache (every way into it fails the step if called)."""
    untagged = cluster.ledger({})
    topic(cluster, ORDERS)
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(0))
    _lie_in_the_cache(pulsar, cluster, untagged, ml_tags(GONE))
    run_orphan_cycle(resolve(pulsar), spark=spark, **later(1))
    registered = {e.ledger_id: e.target_class for e in OrphanRegistry(pulsar).entries().values()}
    assert registered == {untagged: bk.BK_ORPHAN_PARTITION}  # the lie, registered

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the delete step read the record cache")

    world = later(DAY_H + 2)
    run_id = "cache-lie"
    cycle.step_survey(resolve(pulsar), run_id, spark, **world)
    cycle.step_phases(resolve(pulsar), run_id, clock=world["clock"])  # the lie, seen again
    ways_in = {
        record_cache: ("plan", "save", "read_identity"),
        rules: ("decode_packed", "decode_records", "decode_ids", "reusable"),
        directories: ("classify_directories", "decode_packed"),
        survey_module: ("classify_directories",),
    }
    for module, names in ways_in.items():
        for name in names:
            monkeypatch.setattr(module, name, never)
    done = cycle.step_delete(resolve(pulsar), run_id, spark=spark, **world)
    assert cluster.client.exists(cluster.path(untagged))
    results = {r.ledger_id: r.action for r in done.results}
    assert results == {untagged: "corrected"}


def test_rows_are_keyed_by_instance_and_location(pulsar: Settings, cluster: PulsarCluster) -> None:
    topic(cluster, ORDERS)
    cached_survey(pulsar)
    with open_store(pulsar).read() as conn:
        rows = conn.execute(schema.bk_records.select()).all()
        cycles = conn.execute(schema.bk_record_cycles.select()).all()
    assert {(r.instance_id, r.location) for r in rows} == {
        ("6e9e0a2c-demo", record_cache.location_of(bookkeeper_endpoint(pulsar), "hierarchical"))
    }
    assert len(cycles) == 1 and json.loads(cycles[0].id_counters)["idgen"]


def test_many_directories_and_topics_classify_as_a_fresh_read(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    """Every record keeps its own tags across directories (a survey reusing thousands
    of records of dozens of topics finds exactly what a fresh read finds)."""
    topics = [f"{NS}/persistent/t-{i}" for i in range(6)]
    listed: dict[str, list[int]] = {t: [] for t in topics}
    for directory in range(8):
        for i in range(30):
            name = topics[(directory + i) % len(topics)]
            lid = cluster.ledger(ml_tags(name), ledger_id=directory * 10_000 + i)
            if i % 7:
                listed[name].append(lid)
    for name, ids in listed.items():
        cluster.managed_ledger(name, ids)
    first = cached_survey(pulsar)
    second = cached_survey(pulsar)
    assert second.cost.records_cached == 240 and second.cost.records_read == 0
    fresh_survey = survey(resolve(pulsar.with_overrides(bk_record_cache=False)))
    assert fresh_survey is not None
    for found in (first, second):
        assert found.to_manifest() | {"cost": None} == fresh_survey.to_manifest() | {"cost": None}
        assert found.foreign_ids == set() and found.missing_listed == []


def test_the_directories_either_side_of_the_short_id_limit_are_rows_apart(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    """The hierarchical layout's last short directory (``21/4748``: ids up to 2^31-2)
    and its first long one (``000/0000/0021/4748``: from 2^31-1) span the same ten
    thousand numbers; a cluster whose ids crossed 2^31-1 has ledgers in both, and each
    directory keeps its own row (the cycle must not fail, nor one row stand for both)."""
    short_leak, long_leak = 2**31 - 2, 2**31
    listed = [2**31 - 3, 2**31 - 1, 2**31 + 10]
    for lid in (short_leak, long_leak, *listed):
        cluster.ledger(ml_tags(ORDERS), ledger_id=lid)
    cluster.managed_ledger(ORDERS, listed)
    first = cached_survey(pulsar)
    second = cached_survey(pulsar)
    assert second.cost.records_read == 0 and second.cost.records_cached == 5
    assert verdicts(second) == verdicts(first) == fresh(pulsar)
    assert verdicts(second)[short_leak] == verdicts(second)[long_leak] == bk.BK_ORPHAN_LEDGER
    with open_store(pulsar).read() as conn:
        rows = conn.execute(schema.bk_records.select()).all()
    assert sorted(r.directory for r in rows) == ["000/0000/0021/4748", "21/4748"]


def test_a_zookeeper_restored_from_a_backup_drops_the_cache(
    private_settings: Settings,
    private_zookeeper: Any,
    state_url: str | None,
) -> None:
    """ZooKeeper restored from a backup older than the cache, then used again before the
    next cycle: BookKeeper hands the lost ids out again to new ledgers. By then the id
    counter counts higher than the cache saw it, and the directory's cversion and pzxid
    too (each create in the new history moves them as one in the lost history did), so
    neither shows the rollback; the ledgers under reused ids must still be read."""
    pulsar = private_settings.with_overrides(
        bucket="", orphan_max_fraction=1.0, **({"state_url": state_url} if state_url else {})
    )
    data = private_zookeeper.data_dir / "version-2"
    backup = private_zookeeper.data_dir.parent / "zookeeper-backup"

    def client() -> KazooClient:
        made = KazooClient(hosts=pulsar.zk_hosts, timeout=10)
        made.start(timeout=30)
        return made

    zk = client()
    c = PulsarCluster(zk).init()
    c.namespace(NS)
    listed = topic(c, ORDERS)  # ids 0-2
    zk.stop()
    zk.close()
    private_zookeeper.stop()
    shutil.copytree(data, backup)  # the backup: ids 0-2
    private_zookeeper.start()
    zk = client()
    c = PulsarCluster(zk)
    lost = [c.ledger(ml_tags(GONE)) for _ in range(2)]  # ids 3-5, lost by the restore
    lost.append(c.ledger(ml_tags(ORDERS)))
    c.managed_ledger(ORDERS, [*listed, lost[-1]])
    first = cached_survey(pulsar)
    assert [verdicts(first)[lid] for lid in lost] == [bk.BK_ORPHAN_PARTITION] * 2 + [bk.BK_LIVE]
    seen_pzxid = zk.exists(c.path(lost[0]).rsplit("/", 1)[0]).pzxid
    zk.stop()
    zk.close()
    private_zookeeper.stop()
    shutil.rmtree(data)
    shutil.copytree(backup, data)  # restored: ids 0-2
    private_zookeeper.start()
    zk = client()
    c = PulsarCluster(zk)
    # Writes elsewhere until ZooKeeper's transaction ids pass those the cache saw (an
    # ensemble's new epoch does that at once; a standalone server counts on).
    zk.ensure_path("/scratch")
    for _ in range(10_000):
        if zk.set("/scratch", b"x").mzxid > seen_pzxid:
            break
    reused = [c.ledger({}) for _ in range(3)]  # another application's, under ids 3-5
    assert reused == lost
    c.managed_ledger(ORDERS, [*listed, c.ledger(ml_tags(ORDERS))])  # id 6
    second = cached_survey(pulsar)
    assert {verdicts(second)[lid] for lid in reused} == {bk.BK_FOREIGN}
    assert verdicts(second) == fresh(pulsar)
    assert "ZooKeeper's history went back" in second.cost.cache["why"]
    assert cached_survey(pulsar).cost.records_read == 0  # the cache starts again
    zk.stop()
    zk.close()


def test_directories_that_hold_no_ledger_do_not_stop_the_cache(
    pulsar: Settings, cluster: PulsarCluster
) -> None:
    """Znodes under the root that are no ledger's (here long-layout paths of small ids,
    which the hierarchical layout never writes: a misconfigured tool's) are counted as
    not ledgers; the directories holding them have nothing to cache, and must not fail
    the cycle."""
    topic(cluster, ORDERS)
    for stray in ("000/0000/0000/0000/L0001", "000/0000/0000/0001/L0001"):
        cluster.client.create(f"{cluster.root}/{stray}", b"junk", makepath=True)
    first = cached_survey(pulsar)
    assert first.not_ledgers == 2
    second = cached_survey(pulsar)
    assert second.cost.records_read == 0 and second.cost.records_cached == 3
    assert verdicts(second) == verdicts(first) == fresh(pulsar)


@pytest.mark.spark
def test_each_part_is_handed_to_spark_as_it_is_packed(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The driver kept every task's packed part until the last was packed, to hand
    them to Spark in one ``parallelize`` (at 10M, forty parts at the driver's peak):
    each goes to the JVM as soon as it is packed, and the job is their union."""
    from pyspark import SparkContext

    _four_parts(cluster, monkeypatch)
    events: list[str] = []
    pack = survey_module.pack_part
    parallelize = SparkContext.parallelize

    def packed(part: Any) -> Any:
        events.append("pack")
        return pack(part)

    def handed(self: Any, data: Any, slices: Any = None) -> Any:
        events.append(f"hand {len(data)}")
        return parallelize(self, data, slices)

    def released() -> bool:
        events.append("release")
        return True

    monkeypatch.setattr(survey_module, "pack_part", packed)
    monkeypatch.setattr(SparkContext, "parallelize", handed)
    monkeypatch.setattr(survey_module, "release_freed", released)

    found = survey(resolve(pulsar), spark=spark)

    assert found is not None and found.cost.executor_tasks == 4
    # (the first pack: the common part; then each part handed as packed, the memory the
    # cuts took given back, and again as each task's results are merged and let go)
    assert events == ["pack"] + ["pack", "hand 1"] * 4 + ["release"] * 5
    assert verdicts(found) == fresh(pulsar)


@pytest.mark.spark
def test_a_steady_state_that_will_need_the_executors_starts_spark_before_its_listing(
    pulsar: Settings, cluster: PulsarCluster, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a full read started Spark's session early: the steady state of a tree large
    enough for the executors waited for it after the listing (3.5 to 7.5 s of a 100 s
    cycle at 10M). The cache's rows say how many ledgers the tree had: as many cached
    records are work enough, the session starts with the cycle."""
    from ledger_gc.spark import session

    ids = [5, 6, 10_005, 10_006, 20_005, 35_000]
    for lid in ids:
        cluster.ledger(ml_tags(ORDERS), ledger_id=lid)
    cluster.managed_ledger(ORDERS, ids)
    started: list[bool] = []
    monkeypatch.setattr(session, "start_early", lambda _spark: started.append(True))
    monkeypatch.setattr("ledger_gc.bookkeeper.survey.SPARK_OVER_SECONDS", 0.0)
    survey(resolve(pulsar), spark=spark)  # (a full read: started, as before)
    assert started == [True]

    second = survey(resolve(pulsar), spark=spark)
    assert second is not None and second.cost.records_cached == len(ids)
    assert started == [True, True]

    monkeypatch.setattr("ledger_gc.bookkeeper.survey.SPARK_OVER_SECONDS", 1e9)
    survey(resolve(pulsar), spark=spark)  # (the driver's own work: no session)
    assert started == [True, True]
