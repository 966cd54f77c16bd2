"""The trim under crashes and failing deletes, against a real ZooKeeper and S3.

What must hold whatever happens: a ledger with data is listed or marked, a marker goes
only once its data is confirmed gone, and the next trim finishes what a failed one left.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from ledger_gc import run_log
from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import block_store, resolve, zk_endpoint
from ledger_gc.formats.markers import deletable_markers, encode_marker_value, marker_key
from ledger_gc.formats.records import set_property
from ledger_gc.ledger.cursor import mark_delete_of
from ledger_gc.ledger.managed_ledger import ManagedLedger, ManagedLedgerConfig
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.positions import Position
from ledger_gc.rules.storage.keys import parse_key
from ledger_gc.storage.bulk_delete import RetryPolicy
from ledger_gc.storage.s3 import LedgerStorage
from ledger_gc.trim.run import run_trim

ML = "acme/prod/persistent/orders"


class Crash(BaseException):
    """Stands for the process dying at that point (nothing may catch it)."""


def populated(store, storage, ledgers: int = 4) -> tuple[ManagedLedger, list[int]]:
    """``ledgers`` full ledgers, the cursor "sub" at the end of the second-to-last one."""
    ml = ManagedLedger.open(ML, store, storage, ManagedLedgerConfig(max_entries_per_ledger=2))
    ml.add_entries([f"entry-{i}".encode() * 20 for i in range(2 * ledgers)])
    ids = [li.ledgerId for li in store.get_managed_ledger(ML).value.ledgerInfo]
    cursor = ml.open_cursor("sub", "earliest")
    cursor.mark_delete(Position(ids[ledgers - 2], 1))
    return ml, ids


def data_ledgers(storage) -> set[int]:
    ids = set()
    for obj in storage.iter_objects(storage.store.key_prefix):
        parsed = parse_key(storage.prefix, obj.key)
        assert parsed.is_block, f"unexpected key {obj.key}"
        ids.add(parsed.ledger_id)
    return ids


def listed_and_marked(store) -> tuple[set[int], dict[int, dict]]:
    info = store.get_managed_ledger(ML).value
    return {li.ledgerId for li in info.ledgerInfo}, deletable_markers(info)


def assert_nothing_leaked(store, storage) -> None:
    listed, marked = listed_and_marked(store)
    assert data_ledgers(storage) <= listed | set(marked), (
        "data of a ledger neither listed nor marked"
    )


# --- crashes ---------------------------------------------------------------------------


def crash_in_delete(store, storage):
    def boom(*args, **kwargs):
        raise Crash("died before deleting anything")

    storage.delete_keys = boom


def crash_after_mark(store, storage):
    real = store.commit_trim

    def commit_then_die(*args, **kwargs):
        real(*args, **kwargs)
        raise Crash("died right after the mark (and cursor move) committed")

    store.commit_trim = commit_then_die


def crash_before_unmark(store, storage):
    real = store.update_managed_ledger
    calls = []

    def second_write_dies(name, mutate):
        calls.append(name)
        if len(calls) == 1:  # the mark went through, the data is deleted; unmark dies
            raise Crash("died after deleting, before removing the markers")
        return real(name, mutate)

    store.update_managed_ledger = second_write_dies


@pytest.mark.parametrize("crash", [crash_in_delete, crash_after_mark, crash_before_unmark])
def test_a_crash_anywhere_after_the_mark_is_finished_by_the_next_trim(
    store, storage, settings, crash
):
    ml, ids = populated(store, storage)
    consumed = ids[:3]  # the cursor is at the end of ledger ids[2]

    with MetadataStore.open(zk_endpoint(settings)) as dying_store:
        dying_storage = LedgerStorage(block_store(settings))
        crash(dying_store, dying_storage)
        with pytest.raises(Crash):
            run_trim(resolve(settings), store=dying_store, storage=dying_storage)

    listed, marked = listed_and_marked(store)
    assert sorted(marked) == consumed and not listed & set(marked)
    assert_nothing_leaked(store, storage)

    report = run_trim(resolve(settings))

    [result] = report.managed_ledgers
    deleted = sorted(d.ledger_id for d in result.deleted)
    assert sorted(deleted + result.cleared) == consumed
    if crash is crash_before_unmark:
        # The dying run freed the data: the next one clears the markers and claims nothing.
        assert deleted == [] and report.totals()["bytes_reclaimed"] == 0
    assert report.exit_code == 0
    listed, marked = listed_and_marked(store)
    assert marked == {} and sorted(listed) == ids[3:]
    assert data_ledgers(storage) == {ids[3]}, "only the unconsumed ledger keeps data"
    assert mark_delete_of(store.get_cursor(ML, "sub").value) == Position(ids[3], -1)
    ml.close()


# --- failing deletes -------------------------------------------------------------------


class S3Fault:
    """A ``before-call.s3.DeleteObjects`` handler: while on, S3 answers every bulk delete
    with 503 SlowDown (or, ``lying``, with 200 and deletes nothing)."""

    def __init__(self, storage: LedgerStorage) -> None:
        self.on = True
        self.lying = False
        self.calls = 0
        storage.client.meta.events.register("before-call.s3.DeleteObjects", self)

    def __call__(self, **kwargs):
        if not self.on:
            return None
        self.calls += 1
        if self.lying:
            return SimpleNamespace(status_code=200, headers={}), {"Deleted": [], "Errors": []}
        error = {"Code": "SlowDown", "Message": "injected fault: please reduce your rate"}
        return (
            SimpleNamespace(status_code=503, headers={}),
            {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 503}},
        )


@pytest.fixture
def faulty_storage(settings):
    storage = LedgerStorage(
        block_store(settings), retry=RetryPolicy(max_attempts=2, base_delay=0.001)
    )
    return storage, S3Fault(storage)


def test_failing_deletes_keep_the_markers_until_s3_recovers(
    store, storage, settings, faulty_storage
):
    ml, ids = populated(store, storage)
    consumed = ids[:3]
    broken, fault = faulty_storage

    for attempt in (1, 2, 3):
        report = run_trim(resolve(settings), storage=broken)
        assert report.exit_code == 1 and report.outcome == "pending"
        [result] = report.managed_ledgers
        assert result.deleted == [] and [m.ledger_id for m in result.pending] == consumed
        assert all(m.attempts == attempt for m in result.pending)
        assert all("SlowDown" in m.last_error for m in result.pending)
        assert result.zk_writes <= 2
        _, marked = listed_and_marked(store)
        assert sorted(marked) == consumed
        assert {m["attempts"] for m in marked.values()} == {attempt}
        assert all("gave up after 2 attempts" in m["lastError"] for m in marked.values())
        assert_nothing_leaked(store, storage)
    assert fault.calls == 6  # one bulk request per run, retried once

    summaries = run_log.read_runs(settings, run_log.TRIM)
    assert [s["outcome"] for s in summaries] == ["pending"] * 3
    assert summaries[-1]["totals"]["markers_pending"] == 3
    assert summaries[-1]["pending"][0]["attempts"] == 3
    assert "SlowDown" in summaries[-1]["pending"][0]["last_error"]

    fault.on = False
    report = run_trim(resolve(settings), storage=broken)

    assert report.exit_code == 0
    assert sorted(d.ledger_id for d in report.managed_ledgers[0].deleted) == consumed
    assert listed_and_marked(store)[1] == {}
    assert data_ledgers(storage) == {ids[3]}
    ml.close()


def test_an_s3_that_claims_success_but_keeps_the_data_keeps_the_markers(
    store, storage, settings, faulty_storage
):
    ml, ids = populated(store, storage, ledgers=2)
    broken, fault = faulty_storage
    fault.lying = True

    report = run_trim(resolve(settings), storage=broken)

    [result] = report.managed_ledgers
    assert report.exit_code == 1
    assert [(m.ledger_id, m.last_error) for m in result.pending] == [(ids[0], "data still present")]
    assert ids[0] in listed_and_marked(store)[1]
    fault.on = False
    assert run_trim(resolve(settings)).exit_code == 0
    assert listed_and_marked(store)[1] == {}
    ml.close()


def test_the_command_reports_pending_markers_with_exit_code_1(
    store, storage, settings, faulty_storage, monkeypatch, capsys
):
    from ledger_gc import cli
    from ledger_gc.trim import run as trim_run

    ml, ids = populated(store, storage, ledgers=2)
    broken, _ = faulty_storage
    real_run_trim = trim_run.run_trim
    monkeypatch.setattr(
        trim_run, "run_trim", lambda s, **kw: real_run_trim(s, storage=broken, **kw)
    )
    for name, value in {
        "LEDGERGC_ZK_HOSTS": settings.zk_hosts,
        "LEDGERGC_S3_ENDPOINT": settings.s3_endpoint,
        "LEDGERGC_BUCKET": settings.bucket,
        "LEDGERGC_STATE_DIR": str(settings.state_dir),
    }.items():
        monkeypatch.setenv(name, value)

    assert cli.main(["trim", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    [pending] = data["managed_ledgers"][0]["pending"]
    assert pending["ledger_id"] == ids[0] and pending["attempts"] == 1
    assert pending["age_seconds"] >= 0 and "SlowDown" in pending["last_error"]
    assert data["totals"]["markers_pending"] == 1 and data["outcome"] == "pending"

    assert cli.main(["trim"]) == 1
    text = capsys.readouterr().out
    assert f"pending {ML} ledger {ids[0]}" in text
    assert "2 attempts, last error: 1 objects not deleted: SlowDown" in text
    ml.close()


def test_every_deletion_is_audited_once(store, storage, settings, faulty_storage):
    ml, ids = populated(store, storage, ledgers=3)
    broken, fault = faulty_storage
    run_trim(resolve(settings), storage=broken)
    fault.on = False
    run_trim(resolve(settings), storage=broken)
    run_trim(resolve(settings))
    audited = AuditLog(settings).deletions()
    assert sorted(a["ledger_id"] for a in audited) == ids[:2]
    assert all(a["operation"] == "trim" and a["bytes"] > 0 for a in audited)
    assert data_ledgers(storage) == {ids[2]}
    ml.close()


def test_a_marker_on_a_listed_ledger_is_refused_not_deleted(store, storage, settings):
    ml, ids = populated(store, storage, ledgers=2)

    def forge(info):
        set_property(
            info,
            marker_key(ids[1]),
            encode_marker_value(size=1, entries=1, timestamp=0, marked_at=0),
        )
        return True

    store.update_managed_ledger(ML, forge)  # ledger ids[1] is listed *and* marked

    report = run_trim(resolve(settings))

    [result] = report.managed_ledgers
    assert report.exit_code == 2 and "both listed and marked" in result.error
    assert ids[1] in data_ledgers(storage), "a listed ledger's data was deleted"
    ml.close()


# --- ZooKeeper unavailable ---------------------------------------------------------------


def test_zookeeper_lost_mid_run_stops_the_run_and_keeps_what_was_done(store, storage, settings):
    from ledger_gc.errors import MetadataUnavailableError

    first, _ = populated(store, storage, ledgers=2)
    first.close()
    other = ManagedLedger.open(
        "acme/prod/persistent/zz", store, storage, ManagedLedgerConfig(max_entries_per_ledger=2)
    )
    other.add_entries([b"y" * 10] * 4)
    other.close()
    with MetadataStore.open(zk_endpoint(settings)) as flaky:
        real = flaky.update_managed_ledger

        def session_lost_on_the_second_managed_ledger(name, mutate):
            if name != ML:
                raise MetadataUnavailableError("ZooKeeper at 127.0.0.1:1 unreachable (test)")
            return real(name, mutate)

        flaky.update_managed_ledger = session_lost_on_the_second_managed_ledger
        report = run_trim(resolve(settings), store=flaky)

    assert report.exit_code == 2 and "unreachable (test)" in report.error
    assert [ml.name for ml in report.managed_ledgers] == [ML]
    assert report.managed_ledgers[0].deleted  # the first one was finished
    [summary] = run_log.read_runs(settings, run_log.TRIM)
    assert summary["outcome"] == "error" and "unreachable" in summary["errors"][0]["error"]


def test_zookeeper_down_at_the_start_is_exit_2_and_touches_nothing(
    private_settings, private_zookeeper, monkeypatch, capsys
):
    from ledger_gc import cli

    storage = LedgerStorage(block_store(private_settings))
    with MetadataStore.open(zk_endpoint(private_settings)) as store:
        ml, _ = populated(store, storage, ledgers=2)
        ml.close()
    before = sorted(o.key for o in storage.iter_objects(private_settings.key_prefix))
    private_zookeeper.stop()
    for name, value in {
        "LEDGERGC_ZK_HOSTS": private_settings.zk_hosts,
        "LEDGERGC_ZK_TIMEOUT_SECONDS": "2",
        "LEDGERGC_S3_ENDPOINT": private_settings.s3_endpoint,
        "LEDGERGC_BUCKET": private_settings.bucket,
        "LEDGERGC_STATE_DIR": str(private_settings.state_dir),
    }.items():
        monkeypatch.setenv(name, value)

    assert cli.main(["trim", "--json"]) == 2

    output = capsys.readouterr()
    assert "ZooKeeper" in json.loads(output.out)["error"]
    assert sorted(o.key for o in storage.iter_objects(private_settings.key_prefix)) == before
