"""One bucket of the store as an S3 client sees it: the client, its errors, its listing.

Shared by what the managed ledger writes with (``ledger_blocks``) and what the GC lists
and deletes with (``gc_bucket``). One rule shapes it: **a failed read is an exception,
never an empty answer.** A listing that fails half way raises; it does not return the half
it got. A GC that mistook "could not list" for "nothing there" would delete live data
elsewhere or miss data it should keep.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    PartialCredentialsError,
)

from ledger_gc.config.endpoints import ObjectStore
from ledger_gc.errors import BucketNotFoundError, ConfigError, StorageError
from ledger_gc.storage import list_pages
from ledger_gc.storage.bulk_delete import TRANSPORT_ERRORS, error_details

#: botocore's attempts per call, the first try included (its total_max_attempts).
BOTOCORE_MAX_ATTEMPTS = 3
CONNECT_TIMEOUT_SECONDS = 5.0
READ_TIMEOUT_SECONDS = 30.0
MAX_POOL_CONNECTIONS = 32

_ACCESS_DENIED_CODES = frozenset(
    {"AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AllAccessDisabled"}
)


#: The user metadata a listing keeps (lower-case keys): the two names Pulsar's offloader
#: writes into every object that the tiered-storage diff reads (``segments.CLUSTER_METADATA``,
#: ``cluster_tags.ML_NAME_METADATA``); the rest is left out to keep the scan's rows small.
LISTED_METADATA = frozenset({"managedledgername", "pulsarclustername"})

#: An object's user metadata as listed: (lower-case key, value) pairs, sorted.
ListedMetadata = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ObjectInfo:
    """One listed object: its key, size in bytes and last-modified time (epoch ms), and
    its version where a delete can be conditioned on it (a GCS generation, an Azure ETag;
    None in S3's listings: ``offload_bucket``).

    ``metadata``: the ``LISTED_METADATA`` of the object where the listing returns user
    metadata (GCS, Azure); ``()`` when it has none of them; None when the listing carries
    no metadata at all (S3, an S3 Inventory): only a HEAD can tell."""

    key: str
    size: int
    last_modified: int
    version: str | None = None
    metadata: ListedMetadata | None = None


def listed_metadata(raw: Any) -> ListedMetadata:
    """The ``LISTED_METADATA`` of a listed object's user metadata (a mapping, or None
    when it has none), keys lower-cased as a HEAD's are."""
    found = {str(k).lower(): str(v) for k, v in (raw or {}).items()}
    return tuple(sorted((k, v) for k, v in found.items() if k in LISTED_METADATA))


def build_client(
    store: ObjectStore,
    *,
    max_attempts: int = BOTOCORE_MAX_ATTEMPTS,
    retry_mode: str = "standard",
) -> Any:
    """A boto3 S3 client for the store's endpoint and region.

    Credentials are the store's (boto3's variables, or the ``ledgergc_s3`` connection,
    as the edge resolved them), else boto3's usual chain (profile, instance role). A
    new session per client, because boto3's default session is not safe to share
    between threads while clients are being created. Path-style addressing for a custom endpoint
    (SeaweedFS, MinIO, Ceph): such endpoints rarely resolve ``<bucket>.<host>`` names.
    """
    config = Config(
        region_name=store.region,
        retries={"mode": retry_mode, "total_max_attempts": max_attempts},
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        read_timeout=READ_TIMEOUT_SECONDS,
        max_pool_connections=MAX_POOL_CONNECTIONS,
        s3={"addressing_style": "path"} if store.endpoint else {},
    )
    core = botocore.session.Session()
    core.register_component("data_loader", _shared_loader())
    session = boto3.session.Session(
        aws_access_key_id=store.access_key_id,
        aws_secret_access_key=store.secret_access_key,
        aws_session_token=store.session_token,
        botocore_session=core,
    )
    return session.client("s3", endpoint_url=store.endpoint or None, config=config)


@functools.cache
def _shared_loader() -> botocore.loaders.Loader:
    """botocore's loader of its service models, one per process for every client's session.

    Each new session would otherwise parse S3's model files again (about 0.1 s of CPU
    per client, five times what the rest of a client costs); a cycle builds several
    clients, and each Spark task its own. The loader only reads and caches those files
    (from the path a default session would search, ``AWS_DATA_PATH`` included), so it
    holds nothing of any one session: no credentials, no settings.
    """
    return botocore.loaders.create_loader(
        botocore.session.Session().get_config_variable("data_path")
    )


class S3Bucket:
    """The store's bucket (``store.bucket`` under ``store.prefix``) and its client.

    ``client`` may be given (tests, a client with a custom retry setting); otherwise one
    is built from ``store``. Thread-safe: boto3 clients are.
    """

    def __init__(self, store: ObjectStore, client: Any = None) -> None:
        if not store.bucket:
            raise ConfigError(
                "LEDGERGC_BUCKET is empty: the S3 block store is off (a Pulsar cluster's "
                "data is in BookKeeper), so there are no ledger blocks to read, write, trim "
                "or delete; set LEDGERGC_BUCKET to the bucket that holds the store's blocks"
            )
        self.store = store
        self.bucket = store.bucket
        self.prefix = store.prefix
        self.client = client if client is not None else build_client(store)
        # Every listing of the store parses its pages fast (list_pages; once per client).
        list_pages.install(self.client)

    # --- connection -------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """The endpoint the client talks to, for error messages."""
        return str(self.client.meta.endpoint_url)

    def check_bucket(self) -> None:
        """Fail early and clearly if the bucket is missing, forbidden or unreachable."""
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code, status, _ = error_details(exc)
            if status == 404 or code in ("404", "NoSuchBucket", "NotFound"):
                raise self._bucket_not_found() from exc
            raise self._error(exc, f"checking bucket '{self.bucket}'") from exc
        except BotoCoreError as exc:
            raise self._error(exc, f"checking bucket '{self.bucket}'") from exc

    # --- listing ----------------------------------------------------------------------

    def iter_objects(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix`` (a full key prefix; "" is the
        whole bucket), in the store's order, a ListObjectsV2 page at a time.

        Raises StorageError if any page fails: a partial listing is never returned as if
        it were complete.
        """
        for objects, _more in self._object_pages(prefix):
            yield from objects

    def _object_pages(
        self, prefix: str, start_after: str | None = None
    ) -> Iterator[tuple[list[ObjectInfo], bool]]:
        """The pages of one listing as (objects, more pages follow), the objects read
        without botocore's per-key parse (``list_pages``); ``start_after`` is sent as
        ``StartAfter`` with every page, as boto3's paginator does. A truncated page
        without a new continuation token raises: it would loop, or end the listing early."""
        token: str | None = None
        seen: set[str] = set()
        while True:
            request: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix}
            if start_after:
                request["StartAfter"] = start_after
            if token:
                request["ContinuationToken"] = token
            try:
                with list_pages.parsing_here():
                    page = self.client.list_objects_v2(**request)
            except (ClientError, BotoCoreError) as exc:
                after = f" after '{start_after}'" if start_after else ""
                raise self._error(exc, f"listing '{prefix}'{after}") from exc
            objects = [ObjectInfo(*row) for row in list_pages.objects_of(page)]
            if not page.get("IsTruncated"):
                yield objects, False
                return
            token = page.get("NextContinuationToken")
            if not token or token in seen:
                raise StorageError(
                    f"listing '{prefix}' in bucket '{self.bucket}' at {self.endpoint}: a "
                    "truncated page came without a new continuation token; the listing is "
                    "not used"
                )
            seen.add(token)
            yield objects, True

    # --- errors -----------------------------------------------------------------------

    def _bucket_not_found(self) -> BucketNotFoundError:
        return BucketNotFoundError(
            f"bucket '{self.bucket}' not found at {self.endpoint}; create it or set LEDGERGC_BUCKET"
        )

    def _error(self, exc: Exception, what: str) -> StorageError:
        """Turn a boto error into a StorageError that names the endpoint and the fix."""
        if isinstance(exc, ClientError):
            code, status, message = error_details(exc)
            if code == "NoSuchBucket":
                return self._bucket_not_found()
            if code in _ACCESS_DENIED_CODES or status == 403:
                return StorageError(
                    f"{what}: access denied to bucket '{self.bucket}' at {self.endpoint} "
                    f"({code}); check the AWS credentials (AWS_ACCESS_KEY_ID / AWS_PROFILE) "
                    "and the bucket policy"
                )
            return StorageError(
                f"{what}: S3 at {self.endpoint} answered {code} (HTTP {status}): {message}"
            )
        if isinstance(exc, NoCredentialsError | PartialCredentialsError):
            return StorageError(
                f"{what}: no AWS credentials for S3 at {self.endpoint}; set "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
            )
        if isinstance(exc, TRANSPORT_ERRORS):
            return StorageError(
                f"{what}: S3 endpoint {self.endpoint} unreachable ({exc}); check "
                "LEDGERGC_S3_ENDPOINT and that the server is running. Nothing was deleted "
                "on the strength of this failure."
            )
        return StorageError(f"{what}: S3 at {self.endpoint} failed: {exc}")
