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

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from test_azure_container import KeepsDeleted, Service, kept_blob, store_for

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


# --- Azure: the audited ETag among previous versions (injected: Azurite keeps none) ------


def test_azure_restore_copies_back_the_previous_version_with_the_audited_etag(
    settings: Settings, azurite: AzuriteBlobServer, monkeypatch: pytest.MonkeyPatch
) -> None:
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
    # What Azure with versioning on would list after the run's delete and another write
    # deleted since: both writes of the data key as previous versions, each with the ETag
    # it had; and what each version's ?versionid= URL reads (Azurite has no versions).
    raw.upload_blob("version-store/run", RUN)
    raw.upload_blob("version-store/other", OTHER)
    raw.upload_blob("version-store/index", b"its index")
    created = datetime.now(UTC) - timedelta(seconds=1)
    first, later = "2026-11-29T10:00:00.0000000Z", "2026-11-29T10:00:01.0000000Z"
    run_version = kept_blob(data, len(RUN), version_id=first, created=created)
    run_version.etag = heads[data].etag
    other_version = kept_blob(data, len(OTHER), version_id=later, created=datetime.now(UTC))
    other_version.etag = '"0x8DDOTHERWRITE"'
    index_first = "2026-11-29T09:59:59.0000000Z"
    index_version = kept_blob(index, 9, version_id=index_first, created=created)
    index_version.etag = heads[index].etag
    # Versioning is on: a blob elsewhere in the container lists with a version id.
    elsewhere = kept_blob("elsewhere/report", 1, version_id=first, created=created)
    elsewhere.is_current_version = True
    container = KeepsDeleted(raw, [(elsewhere, b"")], {})
    client = Service(service, container)
    bucket = AzureContainer(store_for(azurite, raw.container_name), client=client)
    monkeypatch.setattr(offload_buckets, "offload_bucket", lambda store, client=None: bucket)

    _delete_as_the_run(tiered, data, newest, "orphans-exact-3")
    assert _audited(tiered, "orphans-exact-3")[data] == heads[data].etag.strip('"')
    container.kept += [(run_version, b""), (other_version, b""), (index_version, b"")]
    container.versions = {
        first: "version-store/run",
        later: "version-store/other",
        index_first: "version-store/index",
    }

    report = restore_run(resolve(tiered), "orphans-exact-3").to_dict()

    assert raw.download_blob(data).readall() == RUN, report
    assert report["exit_code"] == 0 and report["prefixes"][0]["unrestorable"] == [], report
