"""Pulsar's offload bucket on Google Cloud Storage: ``OffloadBucket`` for ``driver=gcs``.

Pulsar's jclouds offloader writes ``<uuid>-ledger-<id>[-index]`` at the root of the
bucket, and, for a multipart upload, parts ``<uuid>_<8 digits>`` that it composes (a
broker stopped mid-upload leaves them). Both are this store's; anything else is foreign.

What GCS gives that S3 does not, and how it is used:

* an object's **generation** (listed, decimal text in ``ObjectInfo.version``) names the
  bytes listed; each delete is sent ``ifGenerationMatch`` it, so an object written again
  since (a new generation) is refused by GCS (412) and kept (``gcs_batch``);
* **soft delete** and **noncurrent generations** keep deleted data (``gcs_versioning``);
  a restore never writes over an object that exists now (``ifGenerationMatch=0``).

fake-gcs-server, the suite's GCS, lists versions only for a lower-case ``versions=true``
(the client sends ``True``): the listing sends the text, which GCS accepts as well.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import requests
from google.api_core import exceptions as api
from google.auth import exceptions as auth
from google.cloud import storage
from google.cloud.storage.retry import DEFAULT_RETRY

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import BucketNotFoundError, ConfigError, StorageError
from ledger_gc.rules.storage import offload_keys
from ledger_gc.storage import gcs_batch
from ledger_gc.storage.bulk_delete import DeleteResult
from ledger_gc.storage.gcs_versioning import GcsVersioning, gcs_versioning
from ledger_gc.storage.offload_bucket import GCS, GCS_BATCH, DeletedVersion, ObjectHead
from ledger_gc.storage.s3_bucket import ObjectInfo, listed_metadata
from ledger_gc.storage.versioning import OFF, UNKNOWN

GCS_API = "https://storage.googleapis.com"
#: (connect, read) seconds per HTTP call.
TIMEOUT = (5.0, 30.0)
#: A batch's calls answered 429 or 5xx (or the whole batch lost) are sent again this often.
BATCH_ATTEMPTS = 3
BATCH_BACKOFF_SECONDS = 0.5
#: The fields a listing uses (GCS sends the whole object resource otherwise), user
#: metadata included: the diff reads Pulsar's cluster name from it instead of a HEAD.
_LISTED_FIELDS = "items(name,size,updated,generation,metadata),nextPageToken"
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
#: Where GCS credentials come from, for an error's fix.
_IDENTITIES = (
    "the google_cloud_default connection's key or identity, LEDGERGC_OFFLOAD_GCS_KEY_FILE "
    "(broker.conf's gcsManagedLedgerOffloadServiceAccountKeyFile)"
)


def credentials_named(store: ObjectStore) -> str:
    """What ``store`` is reached with, for an error's fix: its access token, none at all
    (an endpoint without a token is reached anonymously: an emulator's way, and wrong
    for a private endpoint of Google's), or application default credentials."""
    if store.gcs_token:
        return (
            "LEDGERGC_OFFLOAD_GCS_TOKEN (an access token lasts an hour; one minted from "
            f"{_IDENTITIES} is minted anew by the next run)"
        )
    if store.endpoint:
        return (
            "the credentials: none were given, so LEDGERGC_OFFLOAD_ENDPOINT is reached "
            f"anonymously; set {_IDENTITIES}, or LEDGERGC_OFFLOAD_GCS_TOKEN"
        )
    return (
        "the application default credentials (GOOGLE_APPLICATION_CREDENTIALS, the "
        f"workload identity or metadata server), or set {_IDENTITIES}"
    )


_TRANSPORT = (requests.exceptions.ConnectionError, requests.exceptions.Timeout, auth.TransportError)


def build_client(store: ObjectStore) -> Any:
    """A ``storage.Client`` for the store: its endpoint (an emulator: anonymous unless a
    token is given), its access token (minted at the edge), else application default
    credentials. Raises ConfigError when there are no credentials at all."""
    from google.auth.credentials import AnonymousCredentials
    from google.oauth2.credentials import Credentials

    credentials: Any = None
    if store.gcs_token:
        credentials = Credentials(store.gcs_token)  # type: ignore[no-untyped-call]
    elif store.endpoint:
        credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
    try:
        return storage.Client(
            project=store.gcs_project,
            credentials=credentials,
            client_options={"api_endpoint": store.endpoint} if store.endpoint else None,
        )
    except auth.DefaultCredentialsError as exc:
        raise ConfigError(
            f"no GCS credentials for bucket '{store.bucket}' ({type(exc).__name__}); set "
            f"{credentials_named(store)}"
        ) from exc


class GcsBucket:
    """The offload bucket ``store.bucket`` on GCS (or an emulator at ``store.endpoint``).

    ``client`` may be given (a test's); otherwise one is built from ``store``. Batch
    deletes go through ``batch_session``, the client's authorized HTTP session.
    """

    #: Objects per listing page (GCS's most).
    page_size = 1000
    #: How long a call failing in transport or with 429/5xx is retried (the client's
    #: default is two minutes: too long for an endpoint that is wrong).
    retry_seconds = 10.0

    def __init__(self, store: ObjectStore, client: Any = None) -> None:
        if not store.bucket:
            raise ConfigError(
                "LEDGERGC_OFFLOAD_BUCKET is empty: tiered storage is off; set it to the "
                "GCS bucket Pulsar offloads to (broker.conf gcsManagedLedgerOffloadBucket)"
            )
        self.store = store
        self.bucket = store.bucket
        self.prefix = store.prefix
        self.client = client if client is not None else build_client(store)
        self.batch_session: Any = self.client._http
        self._gcs = self.client.bucket(self.bucket)
        self._versioning: GcsVersioning | None = None
        self._versioning_lock = threading.Lock()

    @property
    def _retry(self) -> Any:
        return DEFAULT_RETRY.with_timeout(self.retry_seconds)

    @property
    def endpoint(self) -> str:
        return str(self.client.api_endpoint or GCS_API)

    @property
    def driver(self) -> str:
        return GCS

    def check_bucket(self) -> None:
        try:
            self.client.get_bucket(self.bucket, timeout=TIMEOUT, retry=self._retry)
        except Exception as exc:
            raise self._error(exc, f"checking bucket '{self.bucket}'", of_bucket=True) from exc

    def owns(self, key: str) -> str | None:
        if offload_keys.parse_segment_key(self.prefix, key) is not None:
            return None
        if offload_keys.parse_upload_part(self.prefix, key) is not None:
            return None
        return (
            "not an offloaded-ledger segment (<uuid>-ledger-<id>[-index]) nor a GCS upload "
            "part (<uuid>_<8 digits>); never deleted"
        )

    # --- listing ----------------------------------------------------------------------

    def iter_objects(
        self, prefix: str = "", *, start: str | None = None, end: str | None = None
    ) -> Iterator[ObjectInfo]:
        """GCS's ``startOffset`` (inclusive) and ``endOffset`` (exclusive) are the shard's
        bounds. One page is held at a time: the client's iterator fetches the next when
        this one is consumed. ``last_modified`` is ``updated``, never before the
        generation's creation: an age read from it errs young, toward keeping."""
        listing = self._blobs(
            f"listing '{prefix}'", prefix=prefix, start=start, end=end, fields=_LISTED_FIELDS
        )
        for blob in listing:
            if blob.updated is None:
                # Read as 0 (1970), it would be past any retention: never judged.
                raise StorageError(
                    f"listing '{prefix}' in bucket '{self.bucket}' at {self.endpoint}: "
                    f"{blob.name} came with no updated time; an object of unknown age is "
                    "never judged against retention, so the listing is not used"
                )
            yield ObjectInfo(
                blob.name,
                int(blob.size or 0),
                _ms(blob.updated),
                str(blob.generation),
                listed_metadata(blob.metadata),
            )

    def list_prefixes(
        self, prefixes: Sequence[str], *, workers: int = 8
    ) -> dict[str, list[ObjectInfo]]:
        wanted = sorted(set(prefixes))
        with ThreadPoolExecutor(max(1, min(workers, len(wanted)))) as pool:
            listed = pool.map(lambda p: list(self.iter_objects(p)), wanted)
            return dict(zip(wanted, listed, strict=True))

    def _blobs(
        self, what: str, *, prefix: str, start: str | None = None, end: str | None = None, **kw: Any
    ) -> Iterator[Any]:
        pages = self.client.list_blobs(
            self.bucket,
            prefix=prefix or None,
            start_offset=start,
            end_offset=end,
            page_size=self.page_size,
            timeout=TIMEOUT,
            retry=self._retry,
            **kw,
        )
        try:
            yield from pages
        except Exception as exc:
            raise self._error(exc, what, of_bucket=True) from exc

    # --- reading ----------------------------------------------------------------------

    def head(self, key: str) -> ObjectHead | None:
        try:
            blob = self._gcs.get_blob(key, timeout=TIMEOUT, retry=self._retry)
        except Exception as exc:
            raise self._error(exc, f"reading {key}") from exc
        if blob is None:
            return None
        metadata = {str(k).lower(): str(v) for k, v in (blob.metadata or {}).items()}
        return ObjectHead(
            key, int(blob.size or 0), _ms(blob.updated), str(blob.generation), metadata
        )

    def read_range(self, key: str, start: int, count: int) -> bytes:
        if count <= 0:
            return b""
        try:
            return bytes(
                self._gcs.blob(key).download_as_bytes(
                    start=start, end=start + count - 1, timeout=TIMEOUT, retry=self._retry
                )
            )
        except Exception as exc:
            raise self._error(exc, f"reading {key}") from exc

    # --- delete -----------------------------------------------------------------------

    def delete_listed(self, objects: Sequence[ObjectInfo]) -> DeleteResult:
        """Batches of ``GCS_BATCH``, each call ``ifGenerationMatch`` the listed generation:
        412 = moved (kept, in ``failed``), 404 = already gone (deleted). Raises only what
        no retry fixes: the whole batch refused for credentials."""
        refused: dict[str, str] = {}
        failed: dict[str, str] = {}
        sendable: list[ObjectInfo] = []
        for obj in objects:
            why = self.owns(obj.key)
            if why is not None:
                refused[obj.key] = why
            elif not obj.version:
                failed[obj.key] = (
                    "listed without a generation: a delete cannot be conditioned on it; not sent"
                )
            else:
                sendable.append(obj)
        deleted = requests_made = 0
        for first in range(0, len(sendable), GCS_BATCH):
            batch = sendable[first : first + GCS_BATCH]
            gone, lost, made = self._delete_batch(batch)
            deleted, requests_made = deleted + gone, requests_made + made
            failed.update(lost)
        return DeleteResult(deleted, failed, refused, requests_made)

    def _delete_batch(self, batch: list[ObjectInfo]) -> tuple[int, dict[str, str], int]:
        """(deleted, failed key -> reason, requests) for one batch. Calls answered 429 or
        5xx, or with no answer, and a batch lost in transport are sent again, up to
        ``BATCH_ATTEMPTS`` times: a conditional delete is safe to repeat."""
        pending = {obj.key: obj for obj in batch}
        failed: dict[str, str] = {}
        deleted = requests_made = 0
        for attempt in range(BATCH_ATTEMPTS):
            if attempt:
                # Full jitter, so that concurrent deleters do not retry in step.
                time.sleep(random.uniform(0, BATCH_BACKOFF_SECONDS * 2**attempt))
            calls = list(pending.values())
            requests_made += 1
            try:
                found = self._send_batch(calls)
            except _BatchLost as exc:
                failed.update({obj.key: str(exc) for obj in calls})
                continue
            for n, obj in enumerate(calls):
                answer = found.get(n, gcs_batch.Answer(0, "no answer for it in the batch"))
                if answer.status in _RETRY_STATUS or answer.status == 0:
                    failed[obj.key] = f"GCS answered HTTP {answer.status}: {answer.message}"
                    continue
                del pending[obj.key]
                failed.pop(obj.key, None)
                if 200 <= answer.status < 300 or answer.status == 404:
                    deleted += 1  # 404: already gone, as the delete wanted
                elif answer.status == 412:
                    failed[obj.key] = (
                        f"moved since it was listed (generation {obj.version} is no longer "
                        "the object's): kept"
                    )
                else:
                    failed[obj.key] = f"GCS answered HTTP {answer.status}: {answer.message}"
            if not pending:
                break
        return deleted, failed, requests_made

    def _send_batch(self, calls: list[ObjectInfo]) -> dict[int, gcs_batch.Answer]:
        """Each call's answer by index. Raises ``_BatchLost`` for what another try may
        fix, StorageError (credentials) for what it cannot."""
        content_type, body = gcs_batch.delete_body(
            self.endpoint, self.bucket, [(o.key, str(o.version)) for o in calls]
        )
        what = f"deleting {len(calls)} objects in bucket '{self.bucket}'"
        try:
            answer = self.batch_session.request(
                "POST",
                f"{self.endpoint.rstrip('/')}/batch/storage/v1",
                data=body,
                headers={"Content-Type": content_type},
                timeout=TIMEOUT,
            )
        except _TRANSPORT as exc:
            raise _BatchLost(str(self._error(exc, what))) from exc
        if not 200 <= answer.status_code < 300:
            error = api.from_http_response(answer)
            if answer.status_code in _RETRY_STATUS:
                raise _BatchLost(str(self._error(error, what)))
            raise self._error(error, what)
        try:
            return gcs_batch.answers(
                answer.headers.get("Content-Type", ""), answer.content, len(calls)
            )
        except ValueError as exc:
            raise _BatchLost(f"{what}: {exc}; nothing counted as deleted") from exc

    # --- what a delete keeps, and restore ---------------------------------------------

    def versioning(self) -> GcsVersioning:
        """Read once, then cached; a refused or failed read is "unknown", never an error."""
        with self._versioning_lock:
            if self._versioning is None:
                try:
                    got = self.client.get_bucket(self.bucket, timeout=TIMEOUT, retry=self._retry)
                    policy = got.soft_delete_policy
                    self._versioning = gcs_versioning(
                        self.bucket,
                        bool(got.versioning_enabled),
                        policy.retention_duration_seconds if policy is not None else None,
                        list(got.lifecycle_rules),
                        self.store.key_prefix,
                    )
                except (api.GoogleAPICallError, api.RetryError, auth.GoogleAuthError, *_TRANSPORT):
                    self._versioning = GcsVersioning(self.bucket, UNKNOWN)
            return self._versioning

    def deleted_versions(self, key: str, earliest: int, latest: int) -> list[DeletedVersion]:
        """Soft-deleted generations of ``key`` and its noncurrent ones, deleted between
        ``earliest`` and ``latest``, newest first. Only the ways the bucket keeps data
        are asked (both when that is unknown)."""
        kept = self.versioning()
        found: list[DeletedVersion] = []
        if kept.retention_days or kept.versioning == UNKNOWN:
            for blob in self._blobs(f"listing deleted {key}", prefix=key, soft_deleted=True):
                # Only a soft-deleted object has a soft_delete_time (an emulator that
                # ignores the flag lists live objects here: they are skipped).
                if blob.name == key and blob.soft_delete_time is not None:
                    found.append(self._found(blob, blob.soft_delete_time, "soft-delete"))
        if kept.versioning != OFF:
            for blob in self._blobs(f"listing versions of {key}", prefix=key, versions="true"):
                if blob.name == key and blob.time_deleted is not None:  # noncurrent
                    found.append(self._found(blob, blob.time_deleted, "noncurrent-version"))
        found = [f for f in found if earliest <= f.deleted_at <= latest]
        return sorted(found, key=lambda f: f.deleted_at, reverse=True)

    @staticmethod
    def _found(blob: Any, deleted: datetime, how: str) -> DeletedVersion:
        generation = str(blob.generation)  # what it was listed with, and what comes back
        return DeletedVersion(
            blob.name, generation, int(blob.size or 0), _ms(deleted), how, generation
        )

    def restore(self, found: DeletedVersion) -> None:
        """Bring ``found`` back, only if no object has ``found.key`` now
        (``ifGenerationMatch=0``): a soft-deleted generation through GCS's restore, a
        noncurrent one rewritten over its own name (a rewrite, not a copy: GCS may need
        several calls for a large object, each carrying the same condition)."""
        what = f"restoring {found.key} (generation {found.version})"
        if found.how not in ("soft-delete", "noncurrent-version"):
            raise StorageError(f"{what}: '{found.how}' is not something GCS keeps")
        try:
            if found.how == "soft-delete":
                self._gcs.restore_blob(
                    found.key,
                    generation=int(found.version),
                    if_generation_match=0,
                    timeout=TIMEOUT,
                    retry=self._retry,
                )
                return
            source = self._gcs.blob(found.key, generation=int(found.version))
            target = self._gcs.blob(found.key)
            token = None
            while True:
                token, _, _ = target.rewrite(
                    source, token=token, if_generation_match=0, timeout=TIMEOUT, retry=self._retry
                )
                if token is None:
                    return
        except api.PreconditionFailed as exc:
            raise StorageError(
                f"{what}: {found.key} exists now (written since the delete): left alone, "
                "not restored over"
            ) from exc
        except Exception as exc:
            raise self._error(exc, what) from exc

    # --- errors -----------------------------------------------------------------------

    def _error(self, exc: Exception, what: str, *, of_bucket: bool = False) -> StorageError:
        """One line that names the bucket, the endpoint and the setting to fix.
        ``of_bucket``: a 404 means the bucket (a listing, a check), not an object."""
        if isinstance(exc, api.RetryError) and exc.cause is not None:
            exc = exc.cause  # type: ignore[assignment]
        where = f"bucket '{self.bucket}' at {self.endpoint}"
        if of_bucket and isinstance(exc, api.NotFound):
            return BucketNotFoundError(
                f"GCS {where} not found; create it or set LEDGERGC_OFFLOAD_BUCKET"
            )
        if isinstance(
            exc, api.Unauthorized | api.Forbidden | auth.RefreshError | auth.DefaultCredentialsError
        ):
            status = getattr(exc, "code", None)
            return StorageError(
                f"{what}: access to {where} refused ({type(exc).__name__}"
                f"{f', HTTP {status}' if status else ''}); check {credentials_named(self.store)} "
                "and the "
                "bucket's IAM"
            )
        if isinstance(exc, _TRANSPORT):
            return StorageError(
                f"{what}: GCS endpoint {self.endpoint} unreachable ({type(exc).__name__}); "
                "check LEDGERGC_OFFLOAD_ENDPOINT and that the server is running. Nothing "
                "was deleted on the strength of this failure."
            )
        if isinstance(exc, api.GoogleAPICallError):
            return StorageError(
                f"{what}: GCS at {self.endpoint} answered HTTP {exc.code}: {_line(exc.message)}"
            )
        return StorageError(f"{what}: GCS at {self.endpoint} failed: {_line(str(exc))}")


class _BatchLost(StorageError):
    """A batch that another try may get through (transport, 429/5xx, an unreadable
    answer): its calls stay pending."""


def _ms(when: datetime | None) -> int:
    return int(when.timestamp() * 1000) if when is not None else 0


def _line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else f"{flat[: limit - 1]}…"
