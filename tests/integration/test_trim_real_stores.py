"""The trim against records and operators as a real Pulsar deployment has them.

Each test here reproduces a way the first version deleted live data, leaked data while
reporting it deleted, or got stuck (issue "Trim safety on real stores"), against the real
ZooKeeper and S3 of the test stack.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pulsar_records import (
    Ledger,
    ledgers_with_data,
    listed_and_marked,
    read_record,
    record,
    store_of,
    write_cursor,
    write_data,
    write_record,
    writer,
)
from state_faults import block_audit, unblock_audit

from ledger_gc import deletion
from ledger_gc.audit import AuditLog
from ledger_gc.config.edge import block_store, resolve, zk_endpoint
from ledger_gc.formats.framing import Framing
from ledger_gc.formats.markers import deletable_markers, java_uuid
from ledger_gc.formats.records import (
    ManagedCursorInfo,
    encode_managed_cursor_info,
    encode_managed_ledger_info,
)
from ledger_gc.ledger.cursor import mark_delete_of
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.proto.mldataformats_pb2 import CompressionType
from ledger_gc.rules.metadata import paths
from ledger_gc.rules.positions import Position
from ledger_gc.rules.trim.eligibility import TrimRetention
from ledger_gc.storage.bulk_delete import DeleteResult
from ledger_gc.storage.s3 import LedgerStorage
from ledger_gc.termination import stop_on_signals
from ledger_gc.trim.run import run_trim

ML = "acme/prod/persistent/orders"


def run_just_before_the_mark(store, action):
    """Run ``action`` once, between the trim's read and its mark (its multi)."""
    real = store.commit_trim
    done = []

    def commit(*args, **kwargs):
        if not done:
            done.append(True)
            action()
        return real(*args, **kwargs)

    store.commit_trim = commit


# --- 1. cursors reset while the trim decides -----------------------------------------


@pytest.mark.parametrize("reset_by", ["library", "admin-tool"])
def test_a_cursor_reset_back_between_the_read_and_the_mark_is_honoured(
    reset_by, store, storage, settings, zk_client
):
    ml, ids = writer(store, storage)
    cursor = ml.open_cursor("sub", "earliest")
    cursor.mark_delete(Position(ids[2], 1))  # ledgers 0..2 consumed

    def reset() -> None:
        if reset_by == "library":
            cursor.reset(Position(ids[0], 0))
        else:  # a tool that writes the cursor znode itself
            write_cursor(zk_client, ML, "sub", ids[0], -1)

    with MetadataStore.open(zk_endpoint(settings)) as trim_store:
        run_just_before_the_mark(trim_store, reset)
        report = run_trim(resolve(settings), store=trim_store)

    [result] = report.managed_ledgers
    assert result.marked == [] and result.deleted == [], "the reset data must stay"
    assert ledgers_with_data(storage, ML) >= set(ids[:4])
    assert mark_delete_of(store.get_cursor(ML, "sub").value) == Position(ids[0], -1)
    assert listed_and_marked(store) == (ids, {})
    ml.close()


def test_a_new_subscription_at_earliest_during_the_trim_keeps_its_data(store, storage, settings):
    ml, ids = writer(store, storage)
    ml.open_cursor("sub", "earliest").mark_delete(Position(ids[2], 1))
    with MetadataStore.open(zk_endpoint(settings)) as trim_store:
        run_just_before_the_mark(trim_store, lambda: ml.open_cursor("late", "earliest"))
        report = run_trim(resolve(settings), store=trim_store)

    [result] = report.managed_ledgers
    assert result.marked == [] and result.deleted == []
    assert mark_delete_of(store.get_cursor(ML, "late").value) == Position(ids[0], -1)
    assert ledgers_with_data(storage, ML) >= set(ids[:4])
    ml.close()


def test_a_reset_into_marked_data_puts_it_back_and_keeps_the_cursor_where_it_is(
    store, storage, settings, zk_client
):
    ml, ids = writer(store, storage)
    ml.open_cursor("sub", "earliest").mark_delete(Position(ids[2], 1))
    with MetadataStore.open(zk_endpoint(settings)) as trim_store:
        real = trim_store.commit_trim

        def mark_then_reset_by_hand(*args, **kwargs):
            written = real(*args, **kwargs)
            # An admin tool writing the cursor znode directly, not through the library.
            write_cursor(zk_client, ML, "sub", ids[0], 0)
            return written

        trim_store.commit_trim = mark_then_reset_by_hand
        report = run_trim(resolve(settings), store=trim_store)

    [result] = report.managed_ledgers
    assert result.marked == ids[:3] and result.deleted == []
    # The cursor needs them and their data is whole: back in the list, readable again.
    assert result.restored == ids[:3] and result.pending == []
    assert listed_and_marked(store) == (ids, {})
    assert ledgers_with_data(storage, ML) >= set(ids[:3])
    # The next trims neither move the cursor forward (undoing the reset) nor delete.
    for _ in range(2):
        again = run_trim(resolve(settings))
        assert again.exit_code == 0 and again.managed_ledgers[0].marked == []
    assert mark_delete_of(store.get_cursor(ML, "sub").value) == Position(ids[0], 0)
    assert ledgers_with_data(storage, ML) >= set(ids[:3])
    ml.close()


def test_a_cursor_whose_position_is_in_a_cursor_ledger_stops_the_trim_of_its_ledger(
    zk_client, storage, store, settings
):
    store_of(zk_client, storage, ML, [Ledger(1), Ledger(2), Ledger(3, entries=0)])
    info = ManagedCursorInfo(cursorsLedgerId=77, markDeleteLedgerId=3, markDeleteEntryId=-1)
    zk_client.create(paths.cursor_path(ML, "sub"), encode_managed_cursor_info(info))

    report = run_trim(resolve(settings))

    [result] = report.managed_ledgers
    assert "cursor ledger 77" in result.error and result.marked == []
    assert ledgers_with_data(storage, ML) == {1, 2}


# --- 2. an unsorted ledger list ------------------------------------------------------


def test_an_unsorted_ledger_list_is_trimmed_in_ledger_id_order(store, storage, zk_client, settings):
    # Stored as [3, 1, 5, 7]; the cursor has read ledger 1 to its end, nothing of 3.
    ledgers = [Ledger(3), Ledger(1), Ledger(5), Ledger(7, entries=0)]
    store_of(zk_client, storage, ML, ledgers, cursors={"sub": (1, 1)})

    report = run_trim(resolve(settings))

    [result] = report.managed_ledgers
    assert result.marked == [1] and [d.ledger_id for d in result.deleted] == [1]
    assert ledgers_with_data(storage, ML) == {3, 5}
    assert listed_and_marked(store) == ([3, 5, 7], {})
    assert mark_delete_of(store.get_cursor(ML, "sub").value) == Position(3, -1)


# --- 3. Pulsar's retention semantics ------------------------------------------------


def test_a_ledger_without_timestamp_is_kept_by_time_retention(zk_client, storage, settings):
    store_of(zk_client, storage, ML, [Ledger(1, timestamp=0), Ledger(2, entries=0)])
    keep_an_hour = settings.with_overrides(trim_retention=TrimRetention(3600, -1))

    report = run_trim(resolve(keep_an_hour))

    assert report.managed_ledgers[0].marked == []
    assert ledgers_with_data(storage, ML) == {1}


def test_size_retention_counts_the_open_ledgers_bytes(zk_client, storage, settings):
    # Ledger 1: 100 bytes, consumed. The open ledger 2 has 120 bytes in S3 already (its
    # record says 0 until it is closed). Pulsar keeps 100 bytes: 120 remain without 1.
    store_of(zk_client, storage, ML, [Ledger(1, entries=2, payload=50), Ledger(2, entries=0)])
    write_data(storage, ML, [Ledger(2, entries=2, payload=60)])
    keep_100_bytes = settings.with_overrides(trim_retention=TrimRetention(-1, 100))

    report = run_trim(resolve(keep_100_bytes))

    assert report.managed_ledgers[0].marked == [1]
    assert ledgers_with_data(storage, ML) == {2}


# --- 4. names Pulsar produces; one failing managed ledger ------------------------------

PULSAR_NAMES = [
    "public/default/persistent/orders+%2B+refunds",
    "t=1:x/ns.2/persistent/a+b*c",
    "acme/prod/persistent/%E4%BD%A0%E5%A5%BD",
    "acme/prod/persistent/my-topic-partition-0",
]


def test_every_name_pulsar_produces_is_trimmed_and_reported(zk_client, storage, settings):
    for name in PULSAR_NAMES:
        store_of(zk_client, storage, name, [Ledger(1), Ledger(2), Ledger(3, entries=0)])

    report = run_trim(resolve(settings))

    assert report.exit_code == 0, report.to_dict()
    assert {r.name: r.marked for r in report.managed_ledgers} == {n: [1, 2] for n in PULSAR_NAMES}
    for name in PULSAR_NAMES:
        assert ledgers_with_data(storage, name) == set()
    status = run_cli(settings, "status", "--json")
    assert status.returncode == 0, status.stderr
    names = {ml["name"] for ml in json.loads(status.stdout)["managed_ledgers"]}
    assert names == set(PULSAR_NAMES)
    metrics = run_cli(settings, "status", "--metrics")
    assert metrics.returncode == 0, metrics.stderr


def test_one_failing_managed_ledger_never_stops_the_others(zk_client, storage, settings):
    good = "zeta/prod/persistent/events"
    store_of(zk_client, storage, good, [Ledger(1), Ledger(2, entries=0)])
    # Sorted before the good one: a corrupt record, and a name no Pulsar produces.
    zk_client.create(
        paths.managed_ledger_path("aaa/ns/persistent/corrupt"), b"\xff\x00", makepath=True
    )
    write_record(zk_client, "aab/ns/persistent/bad name", record([Ledger(1), Ledger(2)]))

    report = run_trim(resolve(settings))

    by_name = {r.name: r for r in report.managed_ledgers}
    assert by_name[good].marked == [1] and [d.ledger_id for d in by_name[good].deleted] == [1]
    assert by_name["aaa/ns/persistent/corrupt"].error
    assert "bad name" in by_name["aab/ns/persistent/bad name"].error
    assert report.exit_code == 2 and report.totals()["errors"] == 2
    status = run_cli(settings, "status", "--json", "--metadata-only")
    assert status.returncode == 0, status.stderr
    shown = {ml["name"]: ml for ml in json.loads(status.stdout)["managed_ledgers"]}
    assert shown["aaa/ns/persistent/corrupt"]["error"] and not shown[good]["error"]


# --- 5. big and compressed records ---------------------------------------------------


@pytest.mark.parametrize(
    "codec",
    [CompressionType.LZ4, CompressionType.ZLIB, CompressionType.ZSTD, CompressionType.SNAPPY],
)
def test_a_compressed_record_is_written_back_with_its_own_codec(
    codec, zk_client, storage, store, settings
):
    framing = Framing(codec, framed=True)
    ledgers = [Ledger(i) for i in range(1, 40)] + [Ledger(40, entries=0)]
    store_of(zk_client, storage, ML, ledgers, framing=framing)
    write_cursor(zk_client, ML, "sub", 20, 0)  # ledger 20 is half read

    report = run_trim(resolve(settings))

    assert report.managed_ledgers[0].marked == list(range(1, 20))
    info, written, raw = read_record(zk_client, ML)
    assert written == framing and raw[:2] == b"\x47\x78"
    assert sorted(li.ledgerId for li in info.ledgerInfo) == list(range(20, 41))
    assert deletable_markers(info) == {}


def max_write_sizes(store) -> list[int]:
    """Record the size of every write request the store's kazoo client sends."""
    sizes: list[int] = []
    client = store.client
    real_set, real_transaction = client.set, client.transaction

    def set_(path, value, version=-1):
        sizes.append(len(value))
        return real_set(path, value, version)

    def transaction():
        request = real_transaction()
        real_commit = request.commit

        def commit():
            sizes.append(sum(len(getattr(op, "data", b"") or b"") for op in request.operations))
            return real_commit()

        request.commit = commit
        return request

    client.set, client.transaction = set_, transaction
    return sizes


@pytest.mark.parametrize("compression", ["available", "missing"])
def test_ten_thousand_consumed_ledgers_are_trimmed_in_one_run(
    compression, zk_client, storage, settings, monkeypatch
):
    count = 10_000
    ledgers = [
        Ledger(i, entries=1, payload=10, timestamp=1_600_000_000_000 + i)
        for i in range(1, count + 1)
    ]
    write_record(zk_client, ML, record([*ledgers, Ledger(count + 1, entries=0)]))
    write_data(storage, ML, ledgers[::500])  # some data, so the store is verified
    if compression == "missing":
        # With no codec to shrink it, 10,000 markers (about 1 MB) cannot go in one write
        # under this limit: the mark must go in rounds, oldest ledgers first.
        monkeypatch.setattr("ledger_gc.formats.records.PREFERRED_COMPRESSION", ())
        settings = settings.with_overrides(zk_max_record_bytes=400_000)

    with MetadataStore.open(zk_endpoint(settings)) as trim_store:
        sizes = max_write_sizes(trim_store)
        report = run_trim(resolve(settings), store=trim_store)

    [result] = report.managed_ledgers
    assert report.error is None and result.error is None, result.error
    assert result.marked == list(range(1, count + 1))
    assert sorted([d.ledger_id for d in result.deleted] + result.cleared) == result.marked
    assert ledgers_with_data(storage, ML) == set()
    info, _, _ = read_record(zk_client, ML)
    assert [li.ledgerId for li in info.ledgerInfo] == [count + 1]
    assert deletable_markers(info) == {}
    assert max(sizes) <= settings.zk_max_record_bytes
    if compression == "missing":
        assert len(sizes) > 2, "the mark had to be split into rounds"


def test_a_raw_record_that_would_not_fit_is_written_compressed(zk_client, storage, settings):
    ledgers = [Ledger(i, entries=1, payload=10) for i in range(1, 1500)]
    write_record(zk_client, ML, record([*ledgers, Ledger(1500, entries=0)]))
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda ledger: write_data(storage, ML, [ledger]), ledgers))
    small = settings.with_overrides(zk_max_record_bytes=60_000)
    # Every delete fails, so all 1,499 markers stay in the record: it must grow.
    failing = LedgerStorage(block_store(small))
    failing.delete_keys = lambda keys: DeleteResult(failed=dict.fromkeys(keys, "S3 down"))

    report = run_trim(resolve(small), storage=failing)

    info, framing, raw = read_record(zk_client, ML)
    assert framing.framed and framing.compression in (CompressionType.ZSTD, CompressionType.ZLIB)
    assert len(raw) <= 60_000 < len(encode_managed_ledger_info(info))
    assert len(deletable_markers(info)) == 1499
    assert report.managed_ledgers[0].error is None and report.exit_code == 1


# --- 6. a wrong prefix or bucket -----------------------------------------------------


def test_a_wrong_prefix_refuses_before_marking_and_names_the_setting(
    zk_client, storage, store, settings
):
    store_of(zk_client, storage, ML, [Ledger(1), Ledger(2), Ledger(3, entries=0)])
    typo = settings.with_overrides(prefix="ledgerz")

    result = run_cli(typo, "trim")

    assert result.returncode == 2
    [line] = error_lines(result)
    assert "LEDGERGC_PREFIX" in line
    assert listed_and_marked(store) == ([1, 2, 3], {})
    assert ledgers_with_data(storage, ML) == {1, 2}


def test_markers_whose_data_cannot_be_located_are_kept_not_reported_deleted(
    zk_client, storage, store, settings
):
    # An earlier run marked ledgers 1 and 2 and crashed; the current ledger is empty.
    info = record([Ledger(1), Ledger(2), Ledger(3, entries=0)])
    from ledger_gc.marking import mark_deletable

    mark_deletable(info, [1, 2], 1)
    write_record(zk_client, ML, info)
    write_data(storage, ML, [Ledger(1), Ledger(2)])

    typo = run_trim(resolve(settings.with_overrides(prefix="ledgerz")))

    [result] = typo.managed_ledgers
    assert result.deleted == [] and result.cleared == []
    assert typo.totals()["bytes_reclaimed"] == 0 and typo.exit_code == 1
    assert all("LEDGERGC_PREFIX" in p.last_error for p in result.pending)
    assert sorted(listed_and_marked(store)[1]) == [1, 2]

    right = run_trim(resolve(settings))
    assert sorted(d.ledger_id for d in right.managed_ledgers[0].deleted) == [1, 2]
    assert ledgers_with_data(storage, ML) == set()


# --- 7. bad settings; the audit before the delete ------------------------------------


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    """The command's error lines (progress logs aside); never a traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    return [line for line in result.stderr.splitlines() if line.startswith("ledgergc: error")]


def run_cli(settings, *args, extra_env=None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERGC_")}
    env.update(settings.to_env())
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-m", "ledger_gc.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LEDGERGC_ZK_HOSTS", "127.0.0.1:abc"),
        ("LEDGERGC_S3_ENDPOINT", "127.0.0.1:9000"),
        ("LEDGERGC_S3_REGION", "us east 1"),
        ("LEDGERGC_ZK_MAX_RECORD_BYTES", "lots"),
        ("LEDGERGC_METADATA_READ_ONLY", "maybe"),
        ("LEDGERGC_TRIM_RETENTION_BYTES", "-5"),
    ],
)
def test_a_bad_setting_is_one_line_and_exit_2(variable, value, settings):
    result = run_cli(settings, "trim", extra_env={variable: value})
    assert result.returncode == 2, result.stderr
    [line] = error_lines(result)
    assert variable in line


def test_a_state_dir_that_is_a_file_stops_the_trim_before_it_marks(
    zk_client, storage, store, settings, tmp_path
):
    store_of(zk_client, storage, ML, [Ledger(1), Ledger(2, entries=0)])
    a_file = tmp_path / "state-file"
    a_file.write_text("not a directory")

    result = run_cli(settings.with_overrides(state_dir=a_file), "trim")

    assert result.returncode == 2
    [line] = error_lines(result)
    assert "LEDGERGC_STATE_DIR" in line
    assert listed_and_marked(store) == ([1, 2], {})
    assert ledgers_with_data(storage, ML) == {1}


@pytest.mark.state_backends
def test_a_deletion_that_cannot_be_audited_is_not_made(zk_client, storage, store, settings):
    store_of(zk_client, storage, ML, [Ledger(1), Ledger(2, entries=0)])
    block_audit(settings)  # the store answers, but refuses every audit record

    report = run_trim(resolve(settings))

    assert report.error and "audit log" in report.error
    assert ledgers_with_data(storage, ML) == {1}, "deleted without an audit record"
    assert sorted(listed_and_marked(store)[1]) == [1], "the marker stays for the next run"
    unblock_audit(settings)
    again = run_trim(resolve(settings))
    assert [d.ledger_id for d in again.managed_ledgers[0].deleted] == [1]
    statuses = [r["status"] for r in AuditLog(settings).read()]
    assert statuses == ["deleting", "deleted"]


# --- 8. offloaded ledgers keep what deleting their tiered copy needs ------------------


def test_a_marked_offloaded_ledger_keeps_its_offload_context(zk_client, storage, store, settings):
    info = record([Ledger(1), Ledger(2), Ledger(3, entries=0)])
    context = info.ledgerInfo[0].offloadContext
    context.uidMsb, context.uidLsb, context.complete = -7_000_000_000_000_000_000, 42, True
    context.driverMetadata.name = "aws-s3"
    for key, value in {
        "bucket": "offload",
        "region": "us-east-1",
        "serviceEndpoint": "http://127.0.0.1:1",
    }.items():
        context.driverMetadata.properties.add(key=key, value=value)
    write_record(zk_client, ML, info)
    write_data(storage, ML, [Ledger(1), Ledger(2)])

    report = run_trim(resolve(settings))

    [result] = report.managed_ledgers
    assert result.marked == [1, 2] and ledgers_with_data(storage, ML) == set()
    marker = listed_and_marked(store)[1][1]
    assert marker["offloadUuid"] == java_uuid(-7_000_000_000_000_000_000, 42)
    assert marker["offloadDriverName"] == "aws-s3"
    assert marker["offloadDriverMetadata"] == {
        "bucket": "offload",
        "region": "us-east-1",
        "serviceEndpoint": "http://127.0.0.1:1",
    }
    assert [p.ledger_id for p in result.pending] == [1] and report.exit_code == 1
    assert 2 not in listed_and_marked(store)[1]


def test_every_write_keeps_the_offload_context_of_the_ledgers_it_leaves_listed(
    zk_client, storage, store, settings
):
    """Issue 14 item 1: a listed ledger's offloadContext (uuid, complete,
    bookkeeperDeleted, timestamp, driver name and metadata, and fields this proto does
    not declare, e.g. Pulsar's offloadSegment = 7) is byte-for-byte what Pulsar wrote
    after the trim's mark, its cursor moves and its unmark."""
    info = record([Ledger(1), Ledger(2), Ledger(3), Ledger(4, entries=0)])
    for ledger, (msb, lsb) in zip(info.ledgerInfo[:3], [(1, -1), (2, -2), (3, -3)], strict=True):
        context = ledger.offloadContext
        context.uidMsb, context.uidLsb, context.complete = msb, lsb, True
        context.bookkeeperDeleted, context.timestamp = ledger.ledgerId == 2, 1_700_000_000_000
        context.driverMetadata.name = "aws-s3"
        context.driverMetadata.properties.add(key="bucket", value="offload")
        # offloadSegment {assignedTimestamp=1: 5, endEntryId=6: 77}, unknown to our proto
        context.MergeFromString(b"\x3a\x04\x08\x05\x30\x4d")
    before = {li.ledgerId: li.SerializeToString() for li in info.ledgerInfo}
    write_record(zk_client, ML, info)
    write_cursor(zk_client, ML, "sub", 1, 1)  # ledger 1 consumed: marked, the rest listed
    write_data(storage, ML, [Ledger(1), Ledger(2), Ledger(3)])

    run_trim(resolve(settings))

    after, _, _ = read_record(zk_client, ML)
    kept = {li.ledgerId: li.SerializeToString() for li in after.ledgerInfo}
    assert sorted(kept) == [2, 3, 4]
    assert all(kept[lid] == before[lid] for lid in kept)
    assert b"\x3a\x04\x08\x05\x30\x4d" in kept[3]


def test_sigterm_mid_delete_finishes_the_batch_audits_it_and_stops(
    zk_client, storage, settings, monkeypatch
):
    # 8 managed ledgers of 40 consumed ledgers each (one block a ledger), deleted in
    # batches of 100 keys; the signal arrives while the first batch is under way.
    monkeypatch.setattr(deletion, "MAX_KEYS_PER_DELETE", 100)
    names = [f"acme/big/persistent/t-{i:02d}" for i in range(8)]
    for name in names:
        store_of(
            zk_client, storage, name, [*(Ledger(i) for i in range(1, 41)), Ledger(41, entries=0)]
        )
    signalled = LedgerStorage(block_store(settings))
    real_delete = signalled.delete_keys
    batches = []

    def delete_then_signal(keys):
        batches.append(len(keys))
        if len(batches) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # a real signal, mid-batch
        return real_delete(keys)

    signalled.delete_keys = delete_then_signal
    with stop_on_signals() as stop:
        report = run_trim(resolve(settings), storage=signalled, should_stop=stop)

    assert stop() and "stopped on request" in (report.error or "")
    assert len(batches) == 1, "nothing new started after the signal"
    records = AuditLog(settings).read()
    announced = {(r["ml_name"], r["ledger_id"]) for r in records if r["status"] == "deleting"}
    deleted = {(r["ml_name"], r["ledger_id"]) for r in records if r["status"] == "deleted"}
    assert announced == deleted and len(deleted) == batches[0]
    for name in names:
        gone = {i for i in range(1, 41)} - ledgers_with_data(storage, name)
        assert gone == {ledger for ml, ledger in deleted if ml == name}, "audited = deleted"
    left = sum(len(r.pending) for r in report.managed_ledgers)
    assert left == 8 * 40 - len(deleted) and report.exit_code == 2

    finished = run_trim(resolve(settings))
    assert finished.exit_code == 0
    assert all(ledgers_with_data(storage, name) == set() for name in names)


# --- tiered storage: the trim deletes both copies --------------------------------------


def offloaded_store(
    zk_client, storage, s3_client, settings, *, driver_bucket=None, driver="aws-s3"
):
    """Ledgers 1 and 2 consumed; ledger 1 offloaded (complete) with its two objects in an
    offload bucket, beside another ledger's segment and a foreign key."""
    offload_bucket = f"{settings.bucket}-offload"
    s3_client.create_bucket(Bucket=offload_bucket)
    info = record([Ledger(1), Ledger(2), Ledger(3, entries=0)])
    context = info.ledgerInfo[0].offloadContext
    context.uidMsb, context.uidLsb, context.complete = 0x1234, 0x5678, True
    context.driverMetadata.name = driver
    context.driverMetadata.properties.add(key="bucket", value=driver_bucket or offload_bucket)
    write_record(zk_client, ML, info)
    write_data(storage, ML, [Ledger(1), Ledger(2)])
    uuid = java_uuid(0x1234, 0x5678)
    keys = [
        f"tiered/{uuid}-ledger-1",
        f"tiered/{uuid}-ledger-1-index",
        f"tiered/{uuid}-ledger-10",
        f"tiered/{uuid}-ledger-10-index",
        f"tiered/{uuid}-ledger-1.tmp",
        "tiered/notes.txt",
    ]
    for key in keys:
        s3_client.put_object(Bucket=offload_bucket, Key=key, Body=b"offloaded")
    tiered = settings.with_overrides(offload_bucket=offload_bucket, offload_prefix="tiered")
    return tiered, offload_bucket, uuid


def bucket_keys(s3_client, bucket) -> set[str]:
    return {o["Key"] for o in s3_client.list_objects_v2(Bucket=bucket).get("Contents", [])}


def test_the_trim_deletes_an_offloaded_ledgers_tiered_copy_with_its_data(
    zk_client, storage, store, s3_client, settings
):
    tiered, bucket, uuid = offloaded_store(zk_client, storage, s3_client, settings)

    report = run_trim(resolve(tiered))

    [result] = report.managed_ledgers
    assert report.exit_code == 0, result.pending
    assert [d.ledger_id for d in result.offloaded_deleted] == [1]
    assert result.offloaded_deleted[0].objects == 2
    assert bucket_keys(s3_client, bucket) == {
        f"tiered/{uuid}-ledger-10",
        f"tiered/{uuid}-ledger-10-index",
        f"tiered/{uuid}-ledger-1.tmp",
        "tiered/notes.txt",
    }, "only ledger 1's two segment objects go; other ledgers' and foreign keys stay"
    assert ledgers_with_data(storage, ML) == set()
    assert listed_and_marked(store) == ([3], {})
    copies = [r for r in AuditLog(settings).read() if r["target_class"] == "offloaded-ledger"]
    assert [r["status"] for r in copies] == ["deleting", "deleted"]


def test_an_offloaded_copy_in_another_bucket_is_reported_and_kept(
    zk_client, storage, store, s3_client, settings
):
    tiered, bucket, uuid = offloaded_store(
        zk_client, storage, s3_client, settings, driver_bucket="some-other-bucket"
    )

    report = run_trim(resolve(tiered))

    [result] = report.managed_ledgers
    assert [p.ledger_id for p in result.pending] == [1]
    assert "some-other-bucket" in result.pending[0].last_error
    assert f"tiered/{uuid}-ledger-1" in bucket_keys(s3_client, bucket)
    assert listed_and_marked(store)[1][1]["offloadUuid"] == uuid


@pytest.mark.parametrize("driver", ["google-cloud-storage", "azureblob", "filesystem"])
def test_an_offloaded_copy_of_another_driver_is_not_deleted_from_a_bucket_of_its_name(
    zk_client, storage, store, s3_client, settings, driver
):
    """The ledger went to a GCS bucket (or an Azure container, or a filesystem) that has
    the S3 offload bucket's name: the S3 objects at its keys (a copy made there, say for
    a migration) are not the copy Pulsar reads, and the marker, the only pointer to that
    copy, stays. As the orphan scan holds such a segment (other-bucket-segment)."""
    tiered, bucket, uuid = offloaded_store(zk_client, storage, s3_client, settings, driver=driver)

    report = run_trim(resolve(tiered))

    [result] = report.managed_ledgers
    assert [p.ledger_id for p in result.pending] == [1]
    assert driver in result.pending[0].last_error
    assert {f"tiered/{uuid}-ledger-1", f"tiered/{uuid}-ledger-1-index"} <= bucket_keys(
        s3_client, bucket
    )
    assert listed_and_marked(store)[1][1]["offloadUuid"] == uuid


def test_an_offloaded_copy_not_found_keeps_the_marker(
    zk_client, storage, store, s3_client, settings
):
    tiered, bucket, uuid = offloaded_store(zk_client, storage, s3_client, settings)

    report = run_trim(resolve(tiered.with_overrides(offload_prefix="tierd")))  # a typo

    [result] = report.managed_ledgers
    assert [p.ledger_id for p in result.pending] == [1]
    assert "LEDGERGC_OFFLOAD_PREFIX" in result.pending[0].last_error
    assert listed_and_marked(store)[1][1]["offloadUuid"] == uuid
    assert f"tiered/{uuid}-ledger-1" in bucket_keys(s3_client, bucket)
    again = run_trim(resolve(tiered))
    assert [d.ledger_id for d in again.managed_ledgers[0].offloaded_deleted] == [1]
    assert listed_and_marked(store)[1] == {}
