"""Bring back what one run deleted in a versioned bucket, by removing its delete markers.

In a versioned bucket a delete frees nothing: each block key gets a *delete marker* as
its latest version and the data stays as the version before it (``storage.versioning``).
The audit log's ``deleted`` records of such a run say ``recoverable``. For each, this
lists the versions under the record's prefix (ListObjectVersions) and removes (DeleteObject
with the VersionId) every delete marker that

* is the key's latest version (a key written or deleted again since is left alone),
* was created during that run's delete: between its ``deleting`` record (written before
  the DeleteObjects) and its ``deleted`` record (written after), widened by
  ``CLOCK_SKEW_MS`` each way because S3's clock is not ours, and
* hides a data version (a marker with nothing under it would bring nothing back),

which makes the version before it current again: GET works, listings show it.

An offloaded segment (or GCS upload part) comes back through its bucket's own keeping
(``OffloadBucket.deleted_versions``/``restore``: S3 delete markers, GCS soft-deleted or
noncurrent generations, Azure soft-deleted blobs or previous versions). There the version
brought back is the one the run's write-ahead record names for the key (the GCS generation
or Azure ETag its delete was conditioned on), not merely the newest deleted in the run's
window: another write of the key deleted in that window is kept there too. When that
version is no longer kept, nothing is restored for the key and the report says why (exit
status 1). Where the record names none (S3's listings carry no version; records of before
that field), the newest in the window is restored and the report says it was chosen by
time.

The restore is audited ahead like a delete: a ``restoring`` record (operation
``restore``) per prefix before any of its markers is removed, a ``restored`` record with
what came back after. A restore that cannot be audited is not made.

**Data only.** A trimmed ledger left its managed ledger's ledger list when it was marked,
and its marker went once its data was gone. Restoring its blocks does not re-create that
entry: the ledger is an *orphan ledger* again, which the orphan cycle registers and
protects through its grace window (``LEDGERGC_GRACE_SECONDS``), and would delete after it,
until an operator lists it again in the managed ledger's metadata. A restored orphan is
an orphan again, under the same three phases.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from ledger_gc.audit import (
    DELETED,
    DELETING,
    NOT_DELETED,
    RESTORE,
    RESTORED,
    RESTORING,
    AuditLog,
    AuditRecord,
)
from ledger_gc.clock import now_ms
from ledger_gc.config.endpoints import Endpoints
from ledger_gc.deletion import OFFLOAD_TARGETS, SEGMENT_TARGETS
from ledger_gc.errors import AuditUnavailableError, SafetyRefusalError
from ledger_gc.pulsar_metadata import restore as pm_restore
from ledger_gc.rules.bookkeeper.classify import BK_TARGET_CLASSES
from ledger_gc.rules.pulsar_metadata.classes import PM_ORPHAN_CLASSES
from ledger_gc.storage import offload_buckets
from ledger_gc.storage.gc_bucket import ObjectVersion, run_markers
from ledger_gc.storage.offload_bucket import AZURE, GCS, DeletedVersion, OffloadBucket
from ledger_gc.storage.s3 import LedgerStorage

log = logging.getLogger(__name__)

#: How far S3's clock may be from ours when matching delete markers to the run's records.
CLOCK_SKEW_MS = 5_000

NOTE = (
    "restored data only: a restored trimmed ledger's metadata entry is not re-created, so "
    "the orphan cycle sees it as an orphan ledger (its grace window, LEDGERGC_GRACE_SECONDS, "
    "protects it; after that it is deleted again) until an operator lists it again in its "
    "managed ledger's ledger list; a restored orphan is an orphan again"
)


@dataclass
class RestoredPrefix:
    """One audited target of the run: the delete markers found and removed under it."""

    prefix: str
    target_class: str
    ml_name: str
    ledger_id: int | None
    markers: int = 0  # keys hidden by this run's delete markers (what would come back)
    objects_restored: int = 0
    bytes_restored: int = 0
    skipped: int = 0  # keys whose latest version is not this run's delete marker
    # An offload-bucket key whose version the run's audit names (a GCS generation, an
    # Azure ETag) but the bucket no longer keeps: one line each, why it was not restored.
    unrestorable: list[str] = field(default_factory=list)
    # How the offload-bucket versions to restore were chosen: "audited version" (the
    # generation/ETag the run's write-ahead record names), "time" (the newest kept in the
    # run's window: the audit names none, as on S3 or in records of before that field).
    chosen_by: str | None = None
    already: int = 0  # restored before (a BookKeeper znode that holds the audited record)
    error: str | None = None
    bucket: str | None = None  # where it was restored (the record's bucket)
    # A Pulsar-metadata znode: its store (local, config) and path; None otherwise.
    store: str | None = None
    znode: str | None = None


@dataclass
class RestoreReport:
    """What ``restore_run`` found and did; ``to_dict`` is ``ledgergc restore --json``."""

    run_id: str
    restores_run: str
    dry_run: bool
    bucket: dict[str, Any]
    prefixes: list[RestoredPrefix] = field(default_factory=list)
    note: str = ""

    @property
    def exit_code(self) -> int:
        return 1 if any(p.error or p.unrestorable for p in self.prefixes) else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "restores_run": self.restores_run,
            "dry_run": self.dry_run,
            "bucket": self.bucket,
            "prefixes": [asdict(p) for p in self.prefixes],
            "markers_found": sum(p.markers for p in self.prefixes),
            "objects_restored": sum(p.objects_restored for p in self.prefixes),
            "already_restored": sum(p.already for p in self.prefixes),
            "bytes_restored": sum(p.bytes_restored for p in self.prefixes),
            "errors": sum(1 for p in self.prefixes if p.error),
            "unrestorable": sum(len(p.unrestorable) for p in self.prefixes),
            "exit_code": self.exit_code,
            "note": self.note or NOTE,
        }


def new_restore_id(clock: Callable[[], int] = now_ms) -> str:
    stamp = datetime.fromtimestamp(clock() / 1000, tz=UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"restore-{stamp}-{secrets.token_hex(3)}"


def restore_run(
    endpoints: Endpoints,
    run_id: str,
    *,
    dry_run: bool = False,
    storage: LedgerStorage | None = None,
    audit: AuditLog | None = None,
    clock: Callable[[], int] = now_ms,
) -> RestoreReport:
    """Remove the delete markers that run ``run_id`` left in a versioned bucket.

    Raises SafetyRefusalError (nothing changed) for a bucket known to be unversioned, a
    run id with no ``deleted`` records in the audit log, or a run that deleted nothing
    recoverable. ``endpoints``: what the edge (``ledgergc restore``) resolved its
    settings to.
    """
    audit = audit or AuditLog(endpoints.state)
    records = [r for r in audit.read() if r.get("run_id") == run_id]
    # BookKeeper ledgers come back by re-creating their znodes (bookkeeper/restore.py),
    # from the record written ahead of each delete: one whose answer was lost (no
    # ``deleted`` record) may have been applied too, one ZooKeeper refused (closed by a
    # ``not-deleted`` record) was not, and a znode that exists is never replaced. The
    # rest of the run, if any of it is recoverable, from the bucket.
    # Pulsar's own metadata likewise (pulsar_metadata/restore.py): a run that removed
    # only metadata is restorable too.
    in_zookeeper: list[RestoreReport] = []
    if _bookkeeper_records(records) is not None:
        in_zookeeper.append(_restore_bookkeeper(endpoints, audit, run_id, dry_run, clock))
        records = [r for r in records if r.get("target_class") not in BK_TARGET_CLASSES]
    if pm_restore.records_to_restore(records) is not None:
        in_zookeeper.append(_restore_pulsar_metadata(endpoints, audit, run_id, dry_run, clock))
        records = [r for r in records if r.get("target_class") not in PM_ORPHAN_CLASSES]
    if in_zookeeper and not any(r.get("recoverable") for r in records):
        first = in_zookeeper[0]
        for other in in_zookeeper[1:]:
            first.prefixes += other.prefixes
            first.note = f"{first.note}; {other.note}"
        return first
    deleted = [
        r for r in records if r.get("status", DELETED) == DELETED and r.get("operation") != RESTORE
    ]
    if not deleted and records:
        raise SafetyRefusalError(
            f"run {run_id!r} announced deletes but recorded none as done in {audit.path} "
            "(killed mid-batch?); nothing restored: list the versions of its prefixes by hand"
        )
    if not deleted:
        raise SafetyRefusalError(
            f"run {run_id!r} deleted nothing according to the audit log {audit.path}; check "
            "the run id (the audit log's run_id, e.g. in ledgergc status --json)"
        )
    # Each record is restored in the bucket it was deleted from: a segment's prefix is a
    # bare key of the offload bucket, never one of the ledger bucket.
    storages = _Storages(endpoints, storage)
    where = {id(r): storages.of(r) for r in deleted}
    usable = {s.bucket: s for s in where.values() if not isinstance(s, str)}
    if not usable:
        raise SafetyRefusalError(f"run {run_id!r}: {next(iter(where.values()))}")
    versioned: dict[str, Any] = {}
    for name, store in usable.items():
        store.check_bucket()  # a missing bucket is its own clear error, not "unknown"
        versioned[name] = store.versioning()
    if versioned and all(not v.keeps_deleted_data for v in versioned.values()):
        raise SafetyRefusalError(
            f"bucket {', '.join(repr(n) for n in sorted(versioned))} keeps no deleted data "
            f"({'; '.join(v.note for v in versioned.values())}): its deletes freed the data "
            "and nothing can be restored"
        )
    recoverable = [r for r in deleted if r.get("recoverable")]
    if not recoverable:
        raise SafetyRefusalError(
            f"run {run_id!r} deleted from an unversioned bucket (no recoverable records in "
            f"{audit.path}); nothing can be restored"
        )
    # The earliest write-ahead record of each prefix: its delete came after it. And what
    # those records name of each object the delete was conditioned on (its version).
    announced: dict[str, int] = {}
    audited: dict[str, dict[str, set[str]]] = {}
    for record in records:
        if record.get("status") == DELETING:
            prefix = str(record["prefix"])
            announced[prefix] = min(announced.get(prefix, record["time_ms"]), record["time_ms"])
            named = audited.setdefault(prefix, {})
            for key, version in (record.get("versions") or {}).items():
                named.setdefault(str(key), set()).add(str(version))
    first = next(v for v in versioned.values() if v.keeps_deleted_data)
    report = RestoreReport(new_restore_id(clock), run_id, dry_run, first.to_dict())
    for record in recoverable:
        prefix = str(record["prefix"])
        ended = int(record["time_ms"])
        started = announced.get(prefix, ended)
        item = RestoredPrefix(
            prefix, str(record["target_class"]), str(record["ml_name"]), record.get("ledger_id")
        )
        report.prefixes.append(item)
        target = where[id(record)]
        if isinstance(target, str):
            item.error = target
            continue
        item.bucket = target.bucket
        if not versioned[target.bucket].keeps_deleted_data:
            item.error = f"bucket {target.bucket!r} keeps no deleted data: nothing to restore"
            continue
        try:
            if isinstance(target, OffloadBucket):
                versions = audited.get(prefix, {})
                _restore_offload(target, audit, report, item, (started, ended), versions, dry_run)
            else:
                _restore_prefix(target, audit, report, item, started, ended, dry_run)
        except AuditUnavailableError:
            raise  # no restore without its record: stop here
        except Exception as exc:  # one prefix must not stop the others; reported
            item.error = str(exc)
            log.warning("restore of %s failed: %s", prefix, exc)
    report.prefixes[:0] = [p for restored in in_zookeeper for p in restored.prefixes]
    return report


def _bookkeeper_records(records: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The record to restore each BookKeeper ledger of a run from: the last one of its
    deletes (an Airflow retry of the delete task runs them again, same run) decides. A
    ``deleted`` record, or a ``deleting`` one left open (its answer was lost: it may have
    been applied), names it; a ``not-deleted`` one (ZooKeeper refused it) does not.
    None: the run has no BookKeeper records at all."""
    mine = [
        r
        for r in records
        if r.get("target_class") in BK_TARGET_CLASSES and r.get("operation") != RESTORE
    ]
    if not mine:
        return None
    last: dict[str, dict[str, Any]] = {}
    for record in mine:  # oldest first: the log's order
        last[str(record["prefix"])] = record
    return [r for r in last.values() if r.get("status", DELETED) != NOT_DELETED]


def _restore_bookkeeper(
    endpoints: Endpoints,
    audit: AuditLog,
    run_id: str,
    dry_run: bool,
    clock: Callable[[], int],
) -> RestoreReport:
    """Re-create the run's deleted ledger znodes. Under the orphan cycles' delete lock,
    fenced by it like their deletes, and the run's records are read again once it is
    held: a cycle still deleting (or retrying) that run has closed what it refused."""
    from ledger_gc.bookkeeper.restore import WARNING, restore_ledgers
    from ledger_gc.orphans.delete_lock import DeleteLockBusy, delete_lock

    bookkeeper = endpoints.bookkeeper
    where = bookkeeper.where
    report = RestoreReport(
        new_restore_id(clock), run_id, dry_run, {"bucket": where, "versioning": "bookkeeper"}
    )
    report.note = f"{WARNING}; {NOTE}"
    with ExitStack() as stack:
        fence = None
        if not dry_run:
            try:
                lock = stack.enter_context(
                    delete_lock(
                        endpoints.zk,
                        report.run_id,
                        endpoints.policy.orphan_lock_wait_seconds,
                        bookkeeper=bookkeeper.zk,
                        what="run the restore again at once: the bookies drop a deleted "
                        "ledger's data at their next garbage collection",
                    )
                )
            except DeleteLockBusy as exc:
                raise SafetyRefusalError(str(exc)) from None
            fence = lock.fence_for(bookkeeper.zk)
        records = _bookkeeper_records(audit.read(run_id=run_id)) or []
        results = restore_ledgers(
            bookkeeper, audit, report.run_id, records, dry_run=dry_run, fence=fence
        )
    for result in results:
        item = RestoredPrefix(
            result["prefix"], result["target_class"], result["ml_name"], result["ledger_id"]
        )
        item.markers = 1
        item.objects_restored = 1 if result["restored"] else 0
        item.bytes_restored = result["bytes"] if result["restored"] else 0
        item.already = 1 if result["already"] else 0
        item.error = result["error"]
        item.bucket = where
        report.prefixes.append(item)
    return report


def _restore_pulsar_metadata(
    endpoints: Endpoints,
    audit: AuditLog,
    run_id: str,
    dry_run: bool,
    clock: Callable[[], int],
) -> RestoreReport:
    """Re-create the run's removed Pulsar-metadata znodes, under the orphan cycles'
    delete lock (the configuration store's too when it is another ensemble), fenced by
    it like their deletes; the run's records are read again once it is held."""
    from ledger_gc.orphans.delete_lock import DeleteLockBusy, delete_lock

    report = RestoreReport(
        new_restore_id(clock),
        run_id,
        dry_run,
        {"bucket": endpoints.zk.hosts, "versioning": "pulsar-metadata"},
    )
    report.note = pm_restore.NOTE
    with ExitStack() as stack:
        fence_for = None
        if not dry_run:
            try:
                lock = stack.enter_context(
                    delete_lock(
                        endpoints.zk,
                        report.run_id,
                        endpoints.policy.orphan_lock_wait_seconds,
                        config_store=endpoints.configuration,
                        what="run the restore again",
                    )
                )
            except DeleteLockBusy as exc:
                raise SafetyRefusalError(str(exc)) from None
            fence_for = lock.fence_for
        records = pm_restore.records_to_restore(audit.read(run_id=run_id)) or []
        results = pm_restore.restore_znodes(
            endpoints, audit, report.run_id, records, dry_run=dry_run, fence_for=fence_for
        )
    for result in results:
        item = RestoredPrefix(result["prefix"], result["target_class"], result["ml_name"], None)
        item.markers = 1
        item.objects_restored = 1 if result["restored"] else 0
        item.bytes_restored = result["bytes"] if result["restored"] else 0
        item.already = 1 if result["already"] else 0
        item.error = result["error"]
        item.bucket = f"{result['hosts']}{result['znode']}"
        item.store, item.znode = result["store"], result["znode"]
        report.prefixes.append(item)
    return report


def _restore_prefix(
    storage: LedgerStorage,
    audit: AuditLog,
    report: RestoreReport,
    item: RestoredPrefix,
    started: int,
    ended: int,
    dry_run: bool,
) -> None:
    # A segment is exactly its data and index keys (another ledger's data key may start
    # with this one's: ``<uuid>-ledger-7`` and ``<uuid>-ledger-70``).
    exact = {item.prefix, f"{item.prefix}-index"} if item.target_class in SEGMENT_TARGETS else None
    by_key: dict[str, list[ObjectVersion]] = {}
    for version in storage.iter_versions(item.prefix):
        if exact is not None and version.key not in exact:
            continue
        if storage.owns(version.key) is None:  # only the store's blocks
            by_key.setdefault(version.key, []).append(version)
    # Per key: the delete markers to remove (newest first) and the version they uncover.
    markers: list[tuple[list[ObjectVersion], ObjectVersion]] = []
    for versions in by_key.values():
        uncovered = run_markers(versions, started - CLOCK_SKEW_MS, ended + CLOCK_SKEW_MS)
        if uncovered is None:
            item.skipped += 1
        else:
            markers.append(uncovered)
    item.markers = len(markers)
    if dry_run or not markers:
        return
    size = sum(data.size for _, data in markers)
    audit.append([_record(report, item, len(markers), size, RESTORING)])
    for found, data in markers:
        try:
            for marker in found:
                storage.remove_delete_marker(marker.key, marker.version_id)
        except Exception as exc:
            item.error = str(exc)
            break
        item.objects_restored += 1
        item.bytes_restored += data.size
    if item.objects_restored:
        audit.append([_record(report, item, item.objects_restored, item.bytes_restored, RESTORED)])


def _restore_offload(
    storage: OffloadBucket,
    audit: AuditLog,
    report: RestoreReport,
    item: RestoredPrefix,
    window: tuple[int, int],
    audited: dict[str, set[str]],
    dry_run: bool,
) -> None:
    """Bring back an offload-bucket target (a segment's data and index keys, an upload
    part's key) through the bucket's own keeping: what ``deleted_versions`` finds of each
    key deleted during the run's delete (S3 delete markers, GCS soft-deleted or
    noncurrent generations, Azure soft-deleted blobs or versions), made current by
    ``restore``, which never overwrites an object written since.

    Which one: the version the run's write-ahead record names for the key (``audited``:
    the GCS generation or Azure ETag its delete was conditioned on), since another
    write of the key deleted in the same window (a broker that offloaded it again,
    someone else's delete, a clock skew that widens the window) is kept there too and
    is not the run's to bring back; none of them when that version is no longer kept
    (``unrestorable``). Where the audit names none (S3; records of before that field),
    the newest kept in the window, and the report says it was chosen by time."""
    wanted = (
        [item.prefix, f"{item.prefix}-index"]
        if item.target_class in SEGMENT_TARGETS
        else [item.prefix]
    )
    started, ended = window
    found, by_time = [], False
    for key in wanted:
        if storage.owns(key) is not None:
            continue
        named = audited.get(key)
        # A named version is the run's whenever it was deleted: the window is the
        # host's clock, the delete times the store's, and a host behind by more than the
        # skew would otherwise call a version the bucket keeps "no longer kept".
        earliest, latest = (0, _EVER) if named else (started, ended)
        kept = storage.deleted_versions(key, earliest - CLOCK_SKEW_MS, latest + CLOCK_SKEW_MS)
        # The audited version, else (none named) the newest: what the delete removed, by time.
        chosen = [v for v in kept if v.listed_version in named] if named else kept
        if chosen:
            found.append(chosen[0])
            by_time = by_time or not named
        elif storage.head(key) is not None:
            item.skipped += 1  # written again since: not the run's to undo
        elif named:
            item.unrestorable.append(_not_kept(storage.driver, key, named, kept))
    item.markers = len(found)
    if found:
        item.chosen_by = "time" if by_time else "audited version"
    if dry_run or not found:
        return
    size = sum(version.size for version in found)
    audit.append([_record(report, item, len(found), size, RESTORING, found)])
    done = []
    for version in found:
        try:
            storage.restore(version)
        except Exception as exc:
            item.error = str(exc)
            break
        done.append(version)
        item.objects_restored += 1
        item.bytes_restored += version.size
    if done:
        audit.append(
            [_record(report, item, item.objects_restored, item.bytes_restored, RESTORED, done)]
        )


#: Later than any delete time (epoch ms): a version named by the audit is looked for
#: among all the bucket keeps.
_EVER = 2**62

#: What names an object's version in each store family, for the report.
_VERSION_NAME = {GCS: "generation", AZURE: "ETag"}


def _not_kept(driver: str, key: str, named: set[str], kept: list[DeletedVersion]) -> str:
    """One line: the version the run deleted is not kept, and what is kept instead."""
    what = _VERSION_NAME.get(driver, "version")
    if kept:
        others = ", ".join(f"{v.how} {what} {v.listed_version or '(not named)'}" for v in kept)
        instead = f"the bucket keeps only {others}: other writes' bytes"
    else:
        instead = (
            "the bucket keeps nothing of it: its soft delete retention or a lifecycle rule "
            "may have removed it"
        )
    return (
        f"{key}: {what} {' or '.join(sorted(named))} that the run deleted is no longer kept "
        f"({instead}); not restored"
    )


def _record(
    report: RestoreReport,
    item: RestoredPrefix,
    objects: int,
    size: int,
    status: str,
    versions: list[DeletedVersion] | None = None,
) -> AuditRecord:
    return AuditRecord(
        operation=RESTORE,
        target_class=item.target_class,
        ml_name=item.ml_name,
        ledger_id=item.ledger_id,
        prefix=item.prefix,
        objects=objects,
        bytes=size,
        reason=f"restore of run {report.restores_run}: its delete markers removed",
        run_id=report.run_id,
        status=status,
        versioning=str(report.bucket.get("versioning")),
        bucket=item.bucket,
        extra={"versions": {v.key: f"{v.how}:{v.version}" for v in versions}} if versions else None,
    )


class _Storages:
    """The storage a recoverable record's prefix is in, from the record's ``bucket``
    (records of before that field: a segment's is the offload bucket, else the ledger
    bucket), or why it cannot be restored (a bucket the endpoints do not name)."""

    def __init__(self, endpoints: Endpoints, ledger: LedgerStorage | None) -> None:
        self.endpoints = endpoints
        self.ledger = ledger
        self.offload: OffloadBucket | None = None

    def of(self, record: dict[str, Any]) -> LedgerStorage | OffloadBucket | str:
        segment = record.get("target_class") in OFFLOAD_TARGETS
        wanted = self.endpoints.offload.bucket if segment else self.endpoints.blocks.bucket
        bucket = record.get("bucket") or wanted
        if not bucket or bucket != wanted:
            setting = "LEDGERGC_OFFLOAD_BUCKET" if segment else "LEDGERGC_BUCKET"
            return (
                f"deleted from bucket {bucket or '(unknown)'}, but {setting} is "
                f"{wanted or 'unset'}: not restored (run the restore with the settings of "
                "that run)"
            )
        if segment:
            self.offload = self.offload or offload_buckets.offload_bucket(self.endpoints.offload)
            return self.offload
        self.ledger = self.ledger or LedgerStorage(self.endpoints.blocks)
        return self.ledger
