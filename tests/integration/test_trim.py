"""The trim against a real ZooKeeper and S3: what it marks, moves, deletes and reports."""

from __future__ import annotations

import collections
import json

from ledger_gc import cli, run_log
from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import resolve, zk_endpoint
from ledger_gc.formats.markers import deletable_markers
from ledger_gc.ledger.cursor import mark_delete_of
from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.metadata import paths
from ledger_gc.rules.positions import Position
from ledger_gc.rules.storage.keys import ledger_dir, ml_dir
from ledger_gc.rules.trim.eligibility import TrimRetention
from ledger_gc.trim.run import TrimScope, run_trim

ML = "acme/prod/persistent/orders"
OTHER = "acme/dev/persistent/events"
START_MS = 1_700_000_000_000


class FakeClock:
    def __init__(self, now: int = START_MS) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += int(seconds * 1000)


def write_ledgers(store, storage, name=ML, ledgers=4, per_ledger=3, clock=None) -> ManagedLedger:
    """A managed ledger with ``ledgers`` full ledgers plus an empty current one."""
    kwargs = {"clock": clock} if clock is not None else {}
    ml = ManagedLedger.open(
        name, store, storage, ManagedLedgerConfig(max_entries_per_ledger=per_ledger), **kwargs
    )
    for i in range(ledgers):
        if clock is not None:
            clock.advance(60)
        ml.add_entries([f"{name}-{i}-{j}".encode() * 10 for j in range(per_ledger)])
    return ml


def listed(store, name=ML) -> list[int]:
    return [li.ledgerId for li in store.get_managed_ledger(name).value.ledgerInfo]


def markers(store, name=ML) -> dict[int, dict]:
    return deletable_markers(store.get_managed_ledger(name).value)


def ledgers_with_data(storage, name=ML) -> set[int]:
    ids = set()
    for obj in storage.iter_objects(ml_dir(storage.prefix, name)):
        ids.add(int(obj.key.split("/ledgers/")[1].split("/")[0]))
    return ids


def test_consumed_ledgers_are_marked_deleted_and_unmarked_in_two_writes(store, storage, settings):
    ml = write_ledgers(store, storage)
    ids = listed(store)
    cursor = ml.open_cursor("sub", "earliest")
    cursor.mark_delete(Position(ids[1], 2))  # ledgers 0 and 1 consumed, 2 and 3 not

    trim_store_writes = []
    with MetadataStore.open(zk_endpoint(settings)) as trim_store:
        report = run_trim(resolve(settings), store=trim_store)
        trim_store_writes.append(trim_store.writes)

    [result] = report.managed_ledgers
    assert result.marked == ids[:2]
    assert [d.ledger_id for d in result.deleted] == ids[:2]
    assert all(d.objects == 1 and d.bytes > 0 for d in result.deleted)
    assert result.pending == [] and result.error is None
    # The cursor was on the last entry of ledger 1, a ledger that is gone now: it moves
    # to the start of the first remaining ledger, the same point in the log.
    assert result.cursors_moved == ["sub"]
    assert mark_delete_of(store.get_cursor(ML, "sub").value) == Position(ids[2], -1)
    # One multi marks and moves the cursor; one CAS unmarks.
    assert result.zk_writes == 2 and trim_store_writes == [2]
    assert listed(store) == ids[2:] and markers(store) == {}
    assert ledgers_with_data(storage) == set(ids[2:4])
    assert report.exit_code == 0

    audited = AuditLog(settings).deletions()
    assert [(a["operation"], a["ledger_id"]) for a in audited] == [("trim", i) for i in ids[:2]]
    [summary] = run_log.read_runs(settings, run_log.TRIM)
    assert summary["totals"]["ledgers_deleted"] == 2 and summary["outcome"] == "ok"
    assert summary["totals"]["bytes_reclaimed"] == report.totals()["bytes_reclaimed"] > 0

    # The consumer carries on from where it was, across the trimmed boundary.
    cursor.mark_delete(Position(ids[2], 0))
    assert [e.data for e in cursor.read_entries(2)] == [
        f"{ML}-2-1".encode() * 10,
        f"{ML}-2-2".encode() * 10,
    ]
    ml.close()


def test_each_managed_ledger_costs_three_requests_on_its_record(
    store, storage, settings, monkeypatch
):
    """The czxid check, the mark's multi and the unmark's CAS; the records the unmarks
    start from are read for the whole batch after its deletes, not one get each."""
    names = [f"acme/prod/persistent/t{i}" for i in range(6)]
    for name in names:
        ml = write_ledgers(store, storage, name=name, ledgers=3)
        ml.open_cursor("sub", "latest")
        ml.close()
    records = {paths.managed_ledger_path(name) for name in names}
    requests: collections.Counter[str] = collections.Counter()
    with MetadataStore.open(zk_endpoint(settings)) as trim_store:
        submit = trim_store.client._call

        def counted(request, async_object):
            ops = getattr(request, "operations", None)
            path = ops[-1].path if ops else getattr(request, "path", "")
            batched = type(request).__name__ in ("MultiRead", "Sync")  # per batch, not ML
            if not batched and (path or "").removeprefix(trim_store.client.chroot or "") in records:
                requests[type(request).__name__] += 1
            return submit(request, async_object)

        monkeypatch.setattr(trim_store.client, "_call", counted)
        report = run_trim(resolve(settings), store=trim_store)

    assert report.totals()["ledgers_deleted"] == 3 * len(names) and report.exit_code == 0
    assert all(markers(store, name) == {} for name in names)
    assert requests == {"Exists": 6, "Transaction": 6, "SetData": 6}, requests


def test_a_second_trim_with_nothing_to_do_writes_nothing(store, storage, settings):
    ml = write_ledgers(store, storage, ledgers=2)
    ml.open_cursor("sub", "latest")
    run_trim(resolve(settings))
    with MetadataStore.open(zk_endpoint(settings)) as trim_store:
        report = run_trim(resolve(settings), store=trim_store)
        assert trim_store.writes == 0
    assert report.totals()["ledgers_marked"] == 0 and report.exit_code == 0
    ml.close()


def test_a_dry_run_reports_the_plan_and_changes_nothing(store, storage, settings):
    ml = write_ledgers(store, storage, ledgers=3)
    ids = listed(store)
    before = store.get_managed_ledger(ML)

    report = run_trim(resolve(settings), dry_run=True)

    data = report.to_dict()
    [result] = data["managed_ledgers"]
    assert [p["ledger_id"] for p in result["plan"]["to_mark"]] == ids[:3]
    assert result["slowest_reader"] is None  # no cursors: all but the current ledger
    assert result["marked"] == [] and result["deleted"] == []
    assert data["totals"]["bytes_planned"] == sum(p["size"] for p in result["plan"]["to_mark"])
    assert store.get_managed_ledger(ML).version == before.version
    assert set(ids[:3]) <= ledgers_with_data(storage)
    assert AuditLog(settings).read() == []
    ml.close()


def test_retention_time_keeps_young_ledgers(store, storage, settings):
    clock = FakeClock()
    ml = write_ledgers(store, storage, ledgers=4, clock=clock)  # created 60 s apart
    ids = listed(store)
    ml.open_cursor("sub", "latest")
    clock.advance(30)
    # Ledgers 0 and 1 are older than 150 s; 2 is 150 s old exactly (not "more than").
    kept = settings.with_overrides(trim_retention=TrimRetention(seconds=150, bytes=-1))
    assert clock.now - store.get_managed_ledger(ML).value.ledgerInfo[2].timestamp == 150_000

    report = run_trim(resolve(kept), clock=clock)

    assert report.managed_ledgers[0].marked == ids[:2]
    assert listed(store) == ids[2:]
    ml.close()


def test_namespace_overrides_and_scopes(store, storage, settings):
    a = write_ledgers(store, storage, name=ML, ledgers=2)
    b = write_ledgers(store, storage, name=OTHER, ledgers=2)
    keep_dev = settings.with_overrides(
        trim_retention_overrides={"acme/dev": TrimRetention(seconds=-1, bytes=-1)}
    )

    only_prod = run_trim(resolve(keep_dev), scope=TrimScope(namespace="acme/prod"))
    assert [ml.name for ml in only_prod.managed_ledgers] == [ML]
    everything = run_trim(resolve(keep_dev), scope="all")
    by_name = {ml.name: ml for ml in everything.managed_ledgers}
    assert by_name[OTHER].marked == [] and by_name[OTHER].stop_reason == "retention keeps the rest"
    assert by_name[OTHER].retention == TrimRetention(-1, -1)
    assert len(listed(store, ML)) == 1 and len(listed(store, OTHER)) == 3

    missing = run_trim(resolve(settings), scope=TrimScope.of(["acme/prod/persistent/nope"]))
    assert missing.managed_ledgers[0].missing and missing.exit_code == 0
    a.close()
    b.close()


def test_markers_left_by_an_earlier_run_are_deleted_by_the_next(store, storage, settings):
    ml = write_ledgers(store, storage, ledgers=2)
    ids = listed(store)

    def mark_first(info):
        from ledger_gc.marking import mark_deletable

        return bool(mark_deletable(info, [ids[0]], 1))

    store.update_managed_ledger(ML, mark_first)
    report = run_trim(resolve(settings), dry_run=True)
    [result] = report.managed_ledgers
    assert [m.ledger_id for m in result.already_marked] == [ids[0]]
    assert [p.ledger_id for p in result.to_mark] == [ids[1]]

    report = run_trim(resolve(settings))
    assert [d.ledger_id for d in report.managed_ledgers[0].deleted] == ids[:2]
    assert ledgers_with_data(storage) == set()  # the current ledger holds no entries
    assert markers(store) == {}
    ml.close()


def test_the_command_prints_json_and_sets_the_exit_code(
    store, storage, settings, monkeypatch, capsys
):
    ml = write_ledgers(store, storage, ledgers=2)
    ml.open_cursor("sub", "earliest")
    for name, value in {
        "LEDGERGC_ZK_HOSTS": settings.zk_hosts,
        "LEDGERGC_S3_ENDPOINT": settings.s3_endpoint,
        "LEDGERGC_BUCKET": settings.bucket,
        "LEDGERGC_PREFIX": settings.prefix,
        "LEDGERGC_STATE_DIR": str(settings.state_dir),
    }.items():
        monkeypatch.setenv(name, value)

    assert cli.main(["trim", "--json", "--dry-run"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["dry_run"] and dry["totals"]["ledgers_planned"] == 0  # "sub" read nothing

    assert cli.main(["trim", "--ml", "acme/prod/persistent/missing", "--json"]) == 2
    assert "not found" in json.loads(capsys.readouterr().out)["error"]
    assert cli.main(["trim", "--namespace", "not-a-namespace"]) == 2
    capsys.readouterr()

    assert cli.main(["trim", "--namespace", "acme/prod"]) == 0
    text = capsys.readouterr().out
    assert "plan: mark 0 ledgers" in text and "outcome: ok" in text
    ml.close()


def test_the_trim_leaves_foreign_keys_alone_and_still_unmarks(store, storage, settings, s3_client):
    ml = write_ledgers(store, storage, ledgers=2)
    ids = listed(store)
    foreign = ledger_dir(settings.prefix, ML, ids[0]) + "README.txt"
    s3_client.put_object(Bucket=settings.bucket, Key=foreign, Body=b"not ours")

    report = run_trim(resolve(settings))

    assert report.exit_code == 0 and markers(store) == {}
    keys = [o.key for o in storage.iter_objects(ml_dir(settings.prefix, ML))]
    assert foreign in keys
    ml.close()
