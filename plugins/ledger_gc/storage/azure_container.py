"""Pulsar's offload container on Azure Blob Storage: the ``OffloadBucket`` of the Azure family.

Pulsar's ``azureblob`` offloader (jclouds) writes ``<uuid>-ledger-<id>`` and ``-index``
blobs, as on S3; what differs is below the interface:

* **Version = ETag.** A listing gives each blob's ETag bare, a head quoted: both are kept
  unquoted in ``ObjectInfo.version`` / ``ObjectHead.version``, and either form works in
  an ``If-Match``.
* **Listing by name prefix only.** List Blobs has a prefix and an opaque marker, no
  "start after" (its ``startFrom`` needs service version 2026-02-06; the SDK sends
  2025-11-05). A shard ``[start, end)`` that is exactly one name prefix (the offload
  scan's ``<prefix><hex digit>`` shards: ``start="3", end="4"``) is listed by that prefix;
  a range whose bounds differ in a printable ASCII character (the scan's ranges of the
  keys outside those shards, ``[":", "a")`` and ``["g", ...)``) is listed as one name
  prefix per character in it (``listing_plan``), so no shard re-reads another's names;
  any other range is listed from the longest name prefix its bounds share and filtered,
  stopping at the first name at or past ``end`` (Azure lists in name order). A name
  whose first character past the shared prefix is not printable ASCII, in a range open
  at its end, is not listed: no offloaded object is named so, and such a name would be
  foreign (reported, never deleted), so only the foreign count can miss it.
* **Deletes that cannot hit a moved blob.** Blob Batch, 256 deletes per request, each
  ``If-Match`` the ETag listed: a blob re-written since answers 412 and is kept. Azure
  answers 412 too (Azurite does, at least) when the blob is already gone, so a 412 is
  looked at once more: absent now is "already deleted", present is "moved: kept".
* **What a delete leaves** (``versioning``): blob soft delete keeps a deleted blob for the
  account's retention days (``undelete_blob`` brings it back); blob versioning keeps it as a
  previous version, which ``restore`` copies back with ``If-None-Match: *`` so that a blob
  written at the key since is never overwritten.

Errors are one line that names the container, the endpoint and the setting to fix
(``LEDGERGC_OFFLOAD_BUCKET``, ``LEDGERGC_OFFLOAD_ENDPOINT``, the credentials); the SDK's
own error text (several lines, the request's details) never reaches them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any

from azure.core import MatchConditions
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob import BlobServiceClient, ExponentialRetry

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import BucketNotFoundError, ConfigError, StorageError
from ledger_gc.rules.storage import offload_keys
from ledger_gc.storage.bulk_delete import DeleteResult
from ledger_gc.storage.offload_bucket import AZURE, AZURE_BATCH, DeletedVersion, ObjectHead
from ledger_gc.storage.s3_bucket import ObjectInfo, listed_metadata
from ledger_gc.storage.versioning import ENABLED, OFF, UNKNOWN, BucketVersioning

CONNECT_TIMEOUT_SECONDS = 5
READ_TIMEOUT_SECONDS = 30

# The SDK logs every request and response at INFO (headers redacted, but a line each):
# a listing of millions of blobs would bury a task's log. Errors still show, and a
# logging setup that names this logger's level keeps it.
_HTTP_LOG = logging.getLogger("azure.core.pipeline.policies.http_logging_policy")
if _HTTP_LOG.level == logging.NOTSET:
    _HTTP_LOG.setLevel(logging.WARNING)
#: List Blobs' largest page.
PAGE_SIZE = 5000
#: Blobs whose listing (with versions) tells whether versioning is on (``versioning``).
VERSION_SAMPLE = 1000

#: ``DeletedVersion.how`` and ``AzureVersioning.how``.
SOFT_DELETE = "soft-delete"
NONCURRENT = "noncurrent-version"
VERSIONS = "versions"
NONE = "none"

#: The connection that fills the settings below in an Airflow task.
_CONNECTION = "or the wasb_default connection that set it"


def credentials_named(store: ObjectStore) -> str:
    """The setting of the credential ``store`` is reached with, for an error's fix: the
    one in use (a connection string wins, then the key, then a SAS), else the identity
    ``DefaultAzureCredential`` found."""
    if store.azure_connection_string:
        return f"AZURE_STORAGE_CONNECTION_STRING ({_CONNECTION})"
    if store.azure_key:
        return f"AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_ACCESS_KEY ({_CONNECTION})"
    if store.azure_sas:
        return f"LEDGERGC_OFFLOAD_AZURE_SAS, its expiry and permissions ({_CONNECTION})"
    return (
        "the worker's Azure AD identity (DefaultAzureCredential: a managed or workload "
        "identity, AZURE_CLIENT_ID/AZURE_TENANT_ID/AZURE_CLIENT_SECRET), or set "
        "AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_ACCESS_KEY"
    )


def service_client(store: ObjectStore) -> BlobServiceClient:
    """The Blob service client of ``store``: its connection string; else the account URL
    (``LEDGERGC_OFFLOAD_ENDPOINT``, or ``https://<account>.blob.core.windows.net``) with
    the account key or a SAS; else ``DefaultAzureCredential`` when azure-identity is
    installed. Bounded retries: a few seconds, not the SDK's minutes, before an error.
    The SDK's refusal of what it is given (a malformed connection string, a token login
    over plain http) is one ``ConfigError`` naming the setting, never its text."""
    options: dict[str, Any] = {
        "connection_timeout": CONNECT_TIMEOUT_SECONDS,
        "read_timeout": READ_TIMEOUT_SECONDS,
        "retry_policy": ExponentialRetry(initial_backoff=1, increment_base=2, retry_total=3),
    }
    if store.azure_connection_string:
        try:
            return BlobServiceClient.from_connection_string(
                store.azure_connection_string, **options
            )
        except ValueError as exc:
            raise ConfigError(
                f"AZURE_STORAGE_CONNECTION_STRING (container '{store.bucket}') is not a Blob "
                "Storage connection string the SDK can use (it needs AccountName with "
                "AccountKey or SharedAccessSignature, and BlobEndpoint or "
                "DefaultEndpointsProtocol); copy "
                "it again from the storage account's access keys"
            ) from exc
    if not (store.endpoint or store.azure_account):
        raise ConfigError(
            f"no Azure storage account for container '{store.bucket}': set "
            "AZURE_STORAGE_ACCOUNT (or LEDGERGC_OFFLOAD_ENDPOINT, or the wasb_default connection)"
        )
    url = store.endpoint or f"https://{store.azure_account}.blob.core.windows.net"
    credential: Any
    if store.azure_key:
        if not store.azure_account:
            raise ConfigError(
                "an Azure account key without its account name: set AZURE_STORAGE_ACCOUNT"
            )
        credential = {"account_name": store.azure_account, "account_key": store.azure_key}
    elif store.azure_sas:
        credential = store.azure_sas.lstrip("?")
    else:
        if url.lower().startswith("http://"):
            # The SDK sends no token over plain http (and says so in a ValueError).
            raise ConfigError(
                f"no Azure credentials for container '{store.bucket}' at {url} "
                "(LEDGERGC_OFFLOAD_ENDPOINT), and an Azure AD "
                "login is sent over HTTPS only; set AZURE_STORAGE_ACCOUNT and "
                "AZURE_STORAGE_ACCESS_KEY, LEDGERGC_OFFLOAD_AZURE_SAS, "
                "AZURE_STORAGE_CONNECTION_STRING or the wasb_default connection"
            )
        try:
            from azure.identity import DefaultAzureCredential
        except ImportError:
            raise ConfigError(
                f"no Azure credentials for {url}: set AZURE_STORAGE_ACCOUNT and "
                "AZURE_STORAGE_ACCESS_KEY, or the wasb_default connection (or install "
                "azure-identity for a managed or workload identity)"
            ) from None
        credential = DefaultAzureCredential()
    return BlobServiceClient(url, credential=credential, **options)


def listing_prefix(prefix: str, start: str | None, end: str | None) -> str:
    """The longest name prefix every name under ``prefix`` in ``[start, end)`` has (pure).

    ``[s+"3", s+"4")`` is exactly the names that start with ``s+"3"``; any other pair of
    bounds shares its common prefix; a bound alone narrows nothing."""
    if start is not None and end is not None:
        if start and ord(start[-1]) < 0x10FFFF and end == start[:-1] + chr(ord(start[-1]) + 1):
            shared = start
        else:
            shared = _common_start(start, end)
        if shared.startswith(prefix):
            return shared
    return prefix


#: The characters a range is split at (``listing_plan``): printable ASCII.
_FIRST_PRINTABLE, _LAST_PRINTABLE = 0x20, 0x7E


def listing_plan(prefix: str, start: str | None, end: str | None) -> list[str]:
    """The name prefixes that list ``[start, end)`` under ``prefix`` (pure): one when the
    range is one name prefix or cannot be split; else one per printable ASCII character
    at the first position past the shared prefix, from ``start``'s up to ``end``'s."""
    shared = listing_prefix(prefix, start, end)
    at = len(shared)
    if start is None or len(start) <= at or not shared.startswith(prefix):
        return [shared]
    first = ord(start[at])
    if end is None:
        last = _LAST_PRINTABLE
    elif len(end) > at and ord(end[at]) <= _LAST_PRINTABLE + 1:
        last = ord(end[at]) - 1 if end == shared + end[at] else ord(end[at])
    else:
        return [shared]
    if not _FIRST_PRINTABLE <= first <= last:
        return [shared]
    return [shared + chr(code) for code in range(first, last + 1)]


def _common_start(first: str, second: str) -> str:
    """The characters both strings begin with (a character-wise common prefix)."""
    length = 0
    for a, b in zip(first, second, strict=False):
        if a != b:
            break
        length += 1
    return first[:length]


def epoch_ms(moment: datetime | None) -> int:
    return int(moment.timestamp() * 1000) if moment is not None else 0


def _unquoted(etag: str | None) -> str | None:
    return etag.strip('"') if etag else None


@dataclass(frozen=True)
class AzureVersioning(BucketVersioning):
    """What a delete in the container does to the data: ``how`` the account keeps a
    deleted blob ("soft-delete" for ``retention_days``, "versions", "none", "unknown").

    The base fields say the same for the code that reads S3's: ``versioning`` is
    "Enabled" (versions), "soft-delete", "Off" or "unknown"; a soft-deleted blob is freed
    ``noncurrent_expiration_days`` after the delete. Previous versions last until a
    lifecycle management rule deletes them, which the Blob API cannot read
    (``lifecycle`` "unknown")."""

    how: str = NONE
    retention_days: int | None = None

    @property
    def keeps_deleted_data(self) -> bool:
        return self.how != NONE

    @property
    def note(self) -> str:
        where = f"container {self.bucket!r}"
        if self.how == NONE:
            return (
                f"{where} keeps no deleted blob (blob soft delete and versioning are off in "
                "its account): deleted bytes are freed, and deletes there cannot be undone"
            )
        if self.how == SOFT_DELETE:
            return (
                f"{where} is in an account with blob soft delete on: a deleted blob stays, "
                f"billed, for {self.retention_days} days after the delete (ledgergc restore "
                "can bring it back until then), then Azure frees it"
            )
        if self.how == VERSIONS:
            return (
                f"{where} is in an account with blob versioning on: a delete keeps each blob "
                "as a previous version, billed until a lifecycle management rule deletes "
                "previous versions (the Blob API cannot read that policy: check the "
                "account's); ledgergc restore can bring it back"
            )
        return (
            f"what {where} keeps of a deleted blob is unknown (its account's blob service "
            "properties could not be read): deleted bytes are counted as recoverable, not "
            "reclaimed; where blob soft delete and versioning are off, deletes there cannot "
            "be undone"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "how": self.how, "retention_days": self.retention_days}


class AzureContainer:
    """The offload container (``store.bucket`` under ``store.prefix``) on Azure Blob Storage.

    ``client``: a ``BlobServiceClient`` (tests, a client built elsewhere); otherwise one is
    built from ``store`` (``service_client``). Thread-safe: the SDK's clients are.
    """

    def __init__(
        self, store: ObjectStore, client: Any = None, *, page_size: int = PAGE_SIZE
    ) -> None:
        if not store.bucket:
            raise ConfigError(
                "LEDGERGC_OFFLOAD_BUCKET is empty: set it to the Azure container Pulsar "
                "offloads to (broker.conf managedLedgerOffloadBucket)"
            )
        self.store = store
        self.bucket = store.bucket
        self.prefix = store.prefix
        self.page_size = page_size
        self.service = client if client is not None else service_client(store)
        self.container = self.service.get_container_client(self.bucket)

    @property
    def endpoint(self) -> str:
        # A SAS travels in the client's URL: cut the query off.
        return str(self.service.url).split("?", 1)[0].rstrip("/")

    @property
    def driver(self) -> str:
        return AZURE

    def check_bucket(self) -> None:
        """One List Blobs page of one blob: what the GC needs first, and what a SAS scoped
        to the container allows (Get Container Properties needs more than such a SAS)."""
        try:
            next(iter(self.container.list_blobs(results_per_page=1)), None)
        except AzureError as exc:
            raise self._error(exc, f"checking container '{self.bucket}'") from exc

    def owns(self, key: str) -> str | None:
        # jclouds uploads a large blob to Azure as uncommitted blocks of the blob itself
        # (no part objects, as on GCS): only segments are ours here.
        return offload_keys.why_not_a_segment(self.prefix, key)

    # --- listing ----------------------------------------------------------------------

    def iter_objects(
        self, prefix: str = "", *, start: str | None = None, end: str | None = None
    ) -> Iterator[ObjectInfo]:
        """One List Blobs page at a time (memory is one page's); see the module's doc for
        how ``[start, end)`` is listed."""
        for name_prefix in listing_plan(prefix, start, end):
            listing = self._blobs(name_prefix, f"listing '{prefix}'", include=["metadata"])
            for blob in listing:
                if end is not None and blob.name >= end:
                    break
                if (start is None or blob.name >= start) and blob.name.startswith(prefix):
                    if blob.last_modified is None:
                        # Read as 0 (1970), it would be past any retention: never judged.
                        raise StorageError(
                            f"listing '{prefix}' in container '{self.bucket}' at "
                            f"{self.endpoint}: {blob.name} came with no last-modified time; "
                            "a blob of unknown age is never judged against retention, so "
                            "the listing is not used"
                        )
                    yield ObjectInfo(
                        blob.name,
                        blob.size,
                        epoch_ms(blob.last_modified),
                        _unquoted(blob.etag),
                        listed_metadata(blob.metadata),
                    )

    def list_prefixes(
        self, prefixes: Sequence[str], *, workers: int = 8
    ) -> dict[str, list[ObjectInfo]]:
        with ThreadPoolExecutor(max(1, min(workers, len(prefixes)))) as pool:
            listed = pool.map(lambda p: list(self.iter_objects(p)), prefixes)
            return dict(zip(prefixes, listed, strict=True))

    def _blobs(self, name_prefix: str, what: str, **options: Any) -> Iterator[Any]:
        """The SDK's listing, each page's failure a ``StorageError``, never an early end."""
        try:
            yield from self.container.list_blobs(
                name_starts_with=name_prefix or None, results_per_page=self.page_size, **options
            )
        except AzureError as exc:
            raise self._error(exc, what) from exc

    # --- reading ----------------------------------------------------------------------

    def head(self, key: str) -> ObjectHead | None:
        try:
            found = self.container.get_blob_client(key).get_blob_properties()
        except ResourceNotFoundError as exc:
            if _code(exc) == "ContainerNotFound":
                raise self._error(exc, f"reading {key}") from exc
            return None
        except AzureError as exc:
            raise self._error(exc, f"reading {key}") from exc
        return ObjectHead(
            key,
            int(found.size),
            epoch_ms(found.last_modified),
            _unquoted(found.etag),
            {str(k).lower(): str(v) for k, v in (found.metadata or {}).items()},
        )

    def read_range(self, key: str, start: int, count: int) -> bytes:
        if count <= 0:
            return b""
        try:
            return bytes(self.container.download_blob(key, offset=start, length=count).readall())
        except AzureError as exc:
            raise self._error(exc, f"reading {key} bytes {start}+{count}") from exc

    # --- deleting ---------------------------------------------------------------------

    def delete_listed(self, objects: Sequence[ObjectInfo]) -> DeleteResult:
        """Blob Batch deletes of 256, each ``If-Match`` the listed ETag. A batch that
        fails whole leaves its blobs in ``failed`` (kept, tried again next run); only a
        missing container or refused credentials raise."""
        refused: dict[str, str] = {}
        failed: dict[str, str] = {}
        sendable: list[ObjectInfo] = []
        for obj in objects:
            why = self.owns(obj.key)
            if why is not None:
                refused[obj.key] = why
            elif not obj.version:
                failed[obj.key] = "listed without an ETag: a delete could not be conditioned on it"
            else:
                sendable.append(obj)
        result = DeleteResult(failed=failed, refused=refused)
        for first in range(0, len(sendable), AZURE_BATCH):
            result = result.merge(self._delete_batch(sendable[first : first + AZURE_BATCH]))
        return result

    def _delete_batch(self, batch: Sequence[ObjectInfo]) -> DeleteResult:
        requests = [
            {"name": o.key, "etag": o.version, "match_condition": MatchConditions.IfNotModified}
            for o in batch
        ]
        try:
            answers = list(self.container.delete_blobs(*requests, raise_on_any_failure=False))
        except AzureError as exc:
            error = self._error(exc, f"deleting {len(batch)} blobs")
            if isinstance(error, BucketNotFoundError) or _status(exc) in (401, 403):
                raise error from exc
            return DeleteResult(failed={o.key: str(error) for o in batch}, requests=1)
        if len(answers) != len(batch):
            why = f"the batch answered {len(answers)} parts for {len(batch)} deletes: kept"
            return DeleteResult(failed={o.key: why for o in batch}, requests=1)
        deleted, failed = 0, {}
        for obj, answer in zip(batch, answers, strict=True):
            status = answer.status_code
            code = answer.headers.get("x-ms-error-code", "")
            if status in (200, 202, 404):  # 404: already gone, as S3 counts it
                deleted += 1
            elif status == 412:
                try:
                    now = self.head(obj.key)
                except StorageError as exc:
                    # Not known to be deleted: kept, tried again next run; the batch's
                    # other answers still count.
                    failed[obj.key] = f"412, and reading it again failed ({exc}): kept"
                    continue
                if now is None:
                    deleted += 1
                else:
                    failed[obj.key] = (
                        f"moved since it was listed (ETag {obj.version}, now {now.version}): kept"
                    )
            else:
                failed[obj.key] = f"Azure answered {code or 'an error'} (HTTP {status}): kept"
        return DeleteResult(deleted=deleted, failed=failed, requests=1)

    # --- what a delete leaves ---------------------------------------------------------

    def versioning(self) -> AzureVersioning:
        """Blob soft delete from the account's blob service properties; versioning from
        the first ``VERSION_SAMPLE`` blobs listed with their versions: the Blob API has no
        versioning setting to read, but a blob written while versioning is on has a
        version id. A sample without one counts as off, so versioning turned on after
        every sampled blob was written is missed (segments are written all the time, in
        random uuid order, so a sample of 1000 rarely misses it). Soft delete unreadable
        (a SAS scoped to the container cannot read the account's properties: the
        retention read with the key when it was minted stands in, ``ObjectStore.
        azure_soft_delete_days``) or the listing refused: "unknown", which counts deleted
        bytes as recoverable."""
        soft_days = self.store.azure_soft_delete_days  # (read with the key, for a SAS)
        if soft_days is None:
            soft_days = self.soft_delete_days()
        try:
            sample = islice(
                self.container.list_blobs(
                    name_starts_with=self.store.key_prefix or None,
                    include=["versions"],
                    results_per_page=VERSION_SAMPLE,
                ),
                VERSION_SAMPLE,
            )
            versions: bool | None = any(blob.version_id for blob in sample)
        except AzureError:
            versions = None
        if versions:
            return AzureVersioning(
                self.bucket, ENABLED, UNKNOWN, how=VERSIONS, retention_days=soft_days or None
            )
        if soft_days:
            return AzureVersioning(
                self.bucket,
                SOFT_DELETE,
                "expires",
                soft_days,
                how=SOFT_DELETE,
                retention_days=soft_days,
            )
        if soft_days is None or versions is None:
            return AzureVersioning(self.bucket, UNKNOWN, UNKNOWN, how=UNKNOWN)
        return AzureVersioning(self.bucket, OFF, how=NONE)

    def soft_delete_days(self) -> int | None:
        """The account's blob soft delete retention in days (0: off; None: unreadable,
        as with a SAS scoped to the container)."""
        try:
            policy = self.service.get_service_properties()["delete_retention_policy"]
            return int(policy.days or 0) if policy.enabled else 0
        except (AzureError, KeyError, TypeError, ValueError):
            return None

    def deleted_versions(self, key: str, earliest: int, latest: int) -> list[DeletedVersion]:
        """The soft-deleted blob deleted between ``earliest`` and ``latest`` (the one
        Undelete Blob brings back), then every previous version written before ``latest``,
        newest first (Azure keeps no delete time of a version: ``deleted_at`` 0). Each
        with the ETag it had (``listed_version``), which a run's audit recorded of what
        it deleted: another write deleted in the same window is a previous version too."""
        found: list[DeletedVersion] = []
        listed = self._blobs(key, f"listing what is kept of {key}", include=["deleted", "versions"])
        kept = [b for b in listed if b.name == key and not b.snapshot]
        soft = [
            b
            for b in kept
            if b.deleted and not b.version_id and earliest <= epoch_ms(b.deleted_time) <= latest
        ]
        if soft:
            newest = max(soft, key=lambda blob: epoch_ms(blob.deleted_time))
            found.append(
                DeletedVersion(
                    key,
                    "",
                    newest.size,
                    epoch_ms(newest.deleted_time),
                    SOFT_DELETE,
                    _unquoted(newest.etag),
                )
            )
        previous = [
            b
            for b in kept
            if b.version_id
            and not b.is_current_version
            and not b.deleted
            and epoch_ms(b.last_modified) <= latest
        ]
        previous.sort(key=lambda blob: epoch_ms(blob.last_modified), reverse=True)
        found.extend(
            DeletedVersion(key, b.version_id, b.size, 0, NONCURRENT, _unquoted(b.etag))
            for b in previous
        )
        return found

    def restore(self, found: DeletedVersion) -> None:
        """Undelete a soft-deleted blob, or copy a previous version back with
        ``If-None-Match: *``. A blob at the key now is left alone. One written between
        this check and the call: the copy's own condition refuses it; Undelete Blob on a
        blob that is not soft-deleted restores only its soft-deleted snapshots, never its
        content (Azure's "Undelete Blob"), so neither replaces the newer blob."""
        key = found.key
        now = self.head(key)
        if now is not None:
            raise StorageError(self._written_since(key, now.version))
        blob = self.container.get_blob_client(key)
        try:
            if found.how == SOFT_DELETE:
                blob.undelete_blob()
            elif found.how == NONCURRENT:
                source = self.container.get_blob_client(key, version_id=found.version).url
                blob.start_copy_from_url(source, match_condition=MatchConditions.IfMissing)
            else:
                raise StorageError(f"restoring {key}: '{found.how}' is not kept by Azure")
        except (ResourceExistsError, ResourceModifiedError) as exc:
            raise StorageError(self._written_since(key, None)) from exc
        except AzureError as exc:
            raise self._error(exc, f"restoring {key}") from exc

    def _written_since(self, key: str, version: str | None) -> str:
        etag = f" (ETag {version})" if version else ""
        return (
            f"restoring {key} in container '{self.bucket}': a blob written since the delete "
            f"is there{etag}; left alone, nothing restored"
        )

    # --- errors -----------------------------------------------------------------------

    def _error(self, exc: Exception, what: str) -> StorageError:
        """One line naming the container, the endpoint and the fix; the SDK's text (the
        request, the XML body) is left out."""
        where = f"container '{self.bucket}' at {self.endpoint}"
        code, status = _code(exc), _status(exc)
        if code == "ContainerNotFound" or (status == 404 and not code):
            return BucketNotFoundError(
                f"{what}: {where} not found; create it or set LEDGERGC_OFFLOAD_BUCKET"
            )
        if isinstance(exc, ClientAuthenticationError) and status is None:
            return StorageError(
                f"{what}: no usable Azure credentials for {where}; check "
                f"{credentials_named(self.store)}"
            )
        if status in (401, 403):
            return StorageError(
                f"{what}: access denied to {where} ({code or status}); check "
                f"{credentials_named(self.store)}"
            )
        if isinstance(exc, ServiceRequestError | ServiceResponseError):
            return StorageError(
                f"{what}: Azure Blob endpoint {self.endpoint} unreachable "
                f"({type(exc).__name__}); check LEDGERGC_OFFLOAD_ENDPOINT and that the "
                "server is running. Nothing was deleted on the strength of this failure."
            )
        if isinstance(exc, HttpResponseError):
            return StorageError(f"{what}: Azure Blob at {where} answered {code} (HTTP {status})")
        return StorageError(f"{what}: Azure Blob at {where} failed ({type(exc).__name__})")


def _code(exc: Exception) -> str:
    code = getattr(exc, "error_code", None)
    return str(getattr(code, "value", code) or "")


def _status(exc: Exception) -> int | None:
    status = getattr(exc, "status_code", None)
    return int(status) if status is not None else None
