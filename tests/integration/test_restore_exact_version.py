"""``ledgergc restore`` brings back exactly the version the run deleted (issue 35, item 3).

The run's write-ahead audit (``deleting`` records) names, per key, the GCS generation or
Azure ETag the delete was conditioned on. A restore must put back that version, not
merely the newest one the bucket keeps of the key in the run's time window: a broker
that offloaded the key again, or someone else who deleted a later write, leaves a newer
deleted version there too. When the audited version is not kept any more, nothing is
restored for that key and the report says why.

GCS runs for real on fake-gcs-server's memory backend (the one with object versioning):
the run's delete, the other writer, the noncurrent generations and the restore are all
the server's. Azurite keeps no previous versions (``test_object_store_emulators``): the
Azure case injects, at the client, the listing Azure would answer with versioning on,
as ``test_azure_container`` does, and Azurite does the rest (the delete, the copy back).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_azure_container import KeepsDeleted, Service, kept_blob, store_for

from ledger_gc import audit as audit_module
from ledger_gc.audit import AuditLog
from ledger_gc.commands.restore import print_text
from ledger_gc.config.edge import resolve
from ledger_gc.config.settings import Settings
from ledger_gc.restore.restoring import restore_run
from ledger_gc.rules.orphans import outcomes
from ledger_gc.rules.orphans.classify import segment_target
from ledger_gc.rules.orphans.phases import RegistryEntry
from ledger_gc.rules.storage.offload_keys import segment_keys
from ledger_gc.s3_orphans import deleting
from ledger_gc.storage import offload_buckets
from ledger_gc.storage.azure_container import AzureContainer
from local_stack.azurite import AzuriteBlobServer
from local_stack.fake_gcs import FakeGcsServer

GONE = "acme/prod/persistent/deleted-topic"
DAY_MS = 86_400_000

RUN = b"the bytes the run deleted"
OTHER = b"a later write someone else deleted"


@pytest.fixture(scope="module")
def versioning_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcsServer]:
    """fake-gcs-server with the memory backend: its filesystem backend has no versioning."""
    server = FakeGcsServer(tmp_path_factory.mktemp("fake-gcs-versions"), backend="memory")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def on_gcs(settings: Settings, versioning_gcs: FakeGcsServer) -> tuple[Settings, Any]:
    """Tiered storage on a versioned GCS bucket, as ledger-gc opens it from its settings
    (``LEDGERGC_OFFLOAD_DRIVER=google-cloud-storage``), eager: deletion on, no grace, no
    retention. Returns the settings and the bucket as the SDK sees it (the other writer)."""
    client = versioning_gcs.client()
    new = client.bucket(f"exact-{uuid.uuid4().hex[:12]}")
    new.versioning_enabled = True
    raw = client.create_bucket(new)
    tiered = settings.with_overrides(
        offload_driver="google-cloud-storage",
        offload_endpoint=versioning_gcs.endpoint,
        offload_bucket=raw.name,
        offload_prefix="",
        delete_enabled=True,
        grace_seconds=0,
        retention_seconds=0,
    )
    return tiered, raw


def _entry(bucket: str, key: str, ledger_id: int, newest: int) -> RegistryEntry:
    """A registered orphan segment (a deleted topic's), as the phases hand it over."""
    return RegistryEntry(
        prefix=segment_target(bucket, key),
        target_class="orphan-segment",
        ml_name=GONE,
        ledger_id=ledger_id,
        first_seen_ms=0,
        last_seen_ms=0,
        first_scan=1,
        last_scan=2,
        scans_seen=2,
        objects=2,
        bytes=len(RUN) + 10,
        newest_ms=newest,
    )


def _delete_as_the_run(settings: Settings, data: str, newest: int, run_id: str) -> None:
    bucket = resolve(settings).offload.bucket
    [result] = deleting.recheck_and_delete(
        resolve(settings),
        [_entry(bucket, data, 7, newest)],
        run_id=run_id,
        now_ms=newest + 2 * DAY_MS,
        deleting=True,
    )
    assert result.action == outcomes.DELETED and result.recoverable is True, result


def _gcs_segment(raw: Any) -> tuple[str, str, int, str]:
    """A segment written by the offloader: its keys, newest write (ms), data generation."""
    data, index = segment_keys("", str(uuid.uuid4()), 7)
    raw.blob(data).upload_from_string(RUN)
    raw.blob(index).upload_from_string(b"its index")
    blobs = [raw.get_blob(data), raw.get_blob(index)]
    newest = max(int(b.updated.timestamp() * 1000) for b in blobs)
    return data, index, newest, str(blobs[0].generation)


def _written_and_deleted_again(raw: Any, key: str) -> str:
    """Someone else writes ``key`` again and deletes that write: a newer noncurrent
    generation in the run's window. Returns its generation."""
    raw.blob(key).upload_from_string(OTHER)
    generation = str(raw.get_blob(key).generation)
    raw.blob(key).delete()
    return generation


def _audited(settings: Settings, run_id: str) -> dict[str, str]:
    [ahead] = [r for r in AuditLog(settings).read(run_id=run_id) if r["status"] == "deleting"]
    return dict(ahead["versions"])


def test_gcs_restore_brings_back_the_audited_generation_not_a_newer_one(
    on_gcs: tuple[Settings, Any],
) -> None:
    settings, raw = on_gcs
    data, index, newest, generation = _gcs_segment(raw)
    _delete_as_the_run(settings, data, newest, "orphans-exact-1")
    assert _audited(settings, "orphans-exact-1")[data] == generation
    other = _written_and_deleted_again(raw, data)
    assert other != generation

    report = restore_run(resolve(settings), "orphans-exact-1").to_dict()

    assert raw.blob(data).download_as_bytes() == RUN, report
    assert raw.blob(index).download_as_bytes() == b"its index"
    assert report["objects_restored"] == 2 and report["exit_code"] == 0, report
    [item] = report["prefixes"]
    assert item["unrestorable"] == [] and item["chosen_by"] == "audited version"
    [done] = [r for r in AuditLog(settings).read() if r.get("status") == "restored"]
    assert done["versions"][data].endswith(f":{generation}")


class _Behind:
    """A host clock 10 s behind the store's."""

    @staticmethod
    def time() -> float:
        return time.time() - 10.0


def test_gcs_an_audited_generation_comes_back_whatever_the_hosts_clock_said(
    on_gcs: tuple[Settings, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's window is the host's clock and the delete times the store's: with the
    generation named, a host 10 s behind the store must not make it "no longer kept"."""
    settings, raw = on_gcs
    data, _, newest, generation = _gcs_segment(raw)
    monkeypatch.setattr(audit_module, "time", _Behind)  # the audit's clock only
    _delete_as_the_run(settings, data, newest, "orphans-behind-1")
    monkeypatch.undo()
    assert _audited(settings, "orphans-behind-1")[data] == generation

    report = restore_run(resolve(settings), "orphans-behind-1").to_dict()

    assert (report["objects_restored"], report["unrestorable"]) == (2, 0), report
    assert raw.blob(data).download_as_bytes() == RUN


def test_gcs_an_audited_generation_no_longer_kept_is_not_restored_and_said_so(
    on_gcs: tuple[Settings, Any], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """fake-gcs-server 1.54.0 answers 404 to a delete of a noncurrent generation (its
    memory backend deletes only the live object), so the run's generation gone for good
    (a lifecycle rule's delete, the soft delete retention over) is injected at the
    bucket's listing of what it keeps; the rest is the server's."""
    settings, raw = on_gcs
    data, index, newest, generation = _gcs_segment(raw)
    _delete_as_the_run(settings, data, newest, "orphans-exact-2")
    other = _written_and_deleted_again(raw, data)
    real_factory = offload_buckets.offload_bucket

    def without_the_runs_generation(store: Any, client: Any = None) -> Any:
        bucket = real_factory(store, client)
        listed = bucket._blobs  # type: ignore[attr-defined]

        def blobs(*args: Any, **kwargs: Any) -> Iterator[Any]:
            return (b for b in listed(*args, **kwargs) if str(b.generation) != generation)

        bucket._blobs = blobs  # type: ignore[attr-defined]
        return bucket

    monkeypatch.setattr(offload_buckets, "offload_bucket", without_the_runs_generation)
    kept = offload_buckets.offload_bucket(resolve(settings).offload).deleted_versions(
        data, 0, 2**62
    )
    assert [k.version for k in kept] == [other]

    done = restore_run(resolve(settings), "orphans-exact-2")
    report = done.to_dict()

    assert done.exit_code == 1 and report["exit_code"] == 1, report
    [item] = report["prefixes"]
    assert raw.get_blob(data) is None  # the other write's bytes were not put there
    assert raw.blob(index).download_as_bytes() == b"its index"
    assert item["objects_restored"] == 1 and item["error"] is None, item
    [line] = item["unrestorable"]
    assert data in line and generation in line and "not restored" in line
    assert "\n" not in line
    assert report["unrestorable"] == 1
    print_text(report)
    shown = capsys.readouterr().out.splitlines()
    assert any(data in row and "not restored" in row for row in shown), shown


# --- Azure: the audited ETag among what Azure keeps (injected: Azurite keeps nothing) -----


@dataclass
class AzureRun:
    """A segment the run deleted from Azurite, and the container client whose listing of
    what Azure keeps (soft-deleted blobs, previous versions) the test fills in."""

    settings: Settings
    raw: Any
    container: KeepsDeleted
    data: str
    index: str
    etags: dict[str, str]  # key -> the ETag the run's delete was conditioned on


@pytest.fixture
def azure_run(
    settings: Settings, azurite: AzuriteBlobServer, monkeypatch: pytest.MonkeyPatch
) -> AzureRun:
    service = azurite.client()
    raw = service.create_container(f"exact-{uuid.uuid4().hex[:12]}")
    tiered = settings.with_overrides(
        offload_driver="azureblob",
        offload_endpoint=azurite.account_url,
        offload_bucket=raw.container_name,
        offload_prefix="",
        delete_enabled=True,
        grace_seconds=0,
        retention_seconds=0,
    )
    data, index = segment_keys("", str(uuid.uuid4()), 7)
    raw.upload_blob(data, RUN)
    raw.upload_blob(index, b"its index")
    heads = {k: raw.get_blob_client(k).get_blob_properties() for k in (data, index)}
    newest = max(int(h.last_modified.timestamp() * 1000) for h in heads.values())
    # Versioning is on: a blob elsewhere in the container lists with a version id.
    elsewhere = kept_blob("elsewhere/report", 1, version_id="2026-01-01T00:00:00.0000000Z")
    elsewhere.is_current_version = True
    container = KeepsDeleted(raw, [(elsewhere, b"")], {})
    bucket = AzureContainer(
        store_for(azurite, raw.container_name), client=Service(service, container)
    )
    monkeypatch.setattr(offload_buckets, "offload_bucket", lambda store, client=None: bucket)
    etags = {k: str(h.etag).strip('"') for k, h in heads.items()}
    _delete_as_the_run(tiered, data, newest, "orphans-exact-az")
    assert _audited(tiered, "orphans-exact-az") == etags
    return AzureRun(tiered, raw, container, data, index, etags)


def _version(run: AzureRun, key: str, data: bytes, etag: str, version_id: str, age_s: int):
    """A previous version of ``key`` as Azure lists it, and what its ?versionid= URL reads
    (Azurite has no versions: a blob of its own)."""
    store = f"version-store/{uuid.uuid4().hex}"
    run.raw.upload_blob(store, data)
    run.container.versions[version_id] = store
    found = kept_blob(
        key, len(data), version_id=version_id, created=datetime.now(UTC) - timedelta(seconds=age_s)
    )
    found.etag = f'"{etag}"'
    run.container.kept.append((found, data))


def test_azure_restore_copies_back_the_previous_version_with_the_audited_etag(
    azure_run: AzureRun,
) -> None:
    run = azure_run
    # After the run's delete, another write of the data key deleted since: both are
    # previous versions, the other one newer.
    _version(run, run.data, RUN, run.etags[run.data], "2026-11-29T10:00:00.0000000Z", 2)
    _version(run, run.data, OTHER, "0x8DDOTHERWRITE", "2026-11-29T10:00:01.0000000Z", 1)
    _version(run, run.index, b"its index", run.etags[run.index], "2026-11-29T09:59:59.0Z", 2)

    report = restore_run(resolve(run.settings), "orphans-exact-az").to_dict()

    assert run.raw.download_blob(run.data).readall() == RUN, report
    assert run.raw.download_blob(run.index).readall() == b"its index"
    assert report["exit_code"] == 0 and report["prefixes"][0]["unrestorable"] == [], report
    assert report["prefixes"][0]["chosen_by"] == "audited version"


def test_azure_a_soft_deleted_blob_of_another_write_is_not_undeleted(
    azure_run: AzureRun,
) -> None:
    run = azure_run
    # Soft delete only: another write of the data key, deleted since, is the soft-deleted
    # blob Undelete Blob would bring back; the run's own write is not kept any more.
    other = kept_blob(run.data, len(OTHER), deleted_at=datetime.now(UTC))
    other.etag = '"0x8DDOTHERWRITE"'
    index = kept_blob(run.index, 9, deleted_at=datetime.now(UTC))
    index.etag = f'"{run.etags[run.index]}"'
    run.container.kept += [(other, OTHER), (index, b"its index")]

    report = restore_run(resolve(run.settings), "orphans-exact-az").to_dict()

    assert report["exit_code"] == 1, report
    [item] = report["prefixes"]
    assert run.container.undeleted == [run.index]
    assert not run.raw.get_blob_client(run.data).exists()
    assert run.raw.download_blob(run.index).readall() == b"its index"
    [line] = item["unrestorable"]
    assert run.data in line and run.etags[run.data] in line and "0x8DDOTHERWRITE" in line
    assert "ETag" in line and "not restored" in line
