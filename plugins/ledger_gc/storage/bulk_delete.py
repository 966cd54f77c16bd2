"""S3 bulk delete: DeleteObjects in batches of up to 1000 keys, bounded retries, and a
result that says which keys are gone, which failed and which were refused.

Every delete of the store's data passes through ``BulkDelete.delete_keys``
(``LedgerStorage.delete_keys`` is it, for the store's blocks or the offload bucket's
segments), so its rules hold for all of them:

* **Only keys the store owns are sent.** ``owns`` says why a key is not this store's
  (a foreign key); such a key is refused, reported, and never sent.
* **Partial failure is reported, not raised.** DeleteObjects answers 200 with per-key
  errors; those keys land in ``failed`` (the caller keeps its marker or registry entry
  and retries next run). A key already gone counts as deleted (S3's semantics), so
  running a delete again is harmless.
* **Two levels of retry, on purpose.** botocore retries each call a few times (a dropped
  connection, a throttle); the loop here retries what botocore never sees: per-key
  errors inside a 200, with exponential backoff and full jitter so that concurrent
  deleters do not retry in lock-step (what S3's SlowDown asks for).
* **Only what no retry can fix is raised** (a missing bucket, no credentials).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from ledger_gc.errors import DeleteFailedError

log = logging.getLogger(__name__)

#: DeleteObjects accepts at most this many keys per request (an S3 limit).
MAX_KEYS_PER_DELETE = 1000

# Whole-request errors worth another try: throttling and the server's transient faults.
RETRYABLE_CODES = frozenset(
    {
        "SlowDown",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "OperationAborted",
    }
)
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})
# Transport failures: the request may not have reached S3 at all.
TRANSPORT_ERRORS = (BotoConnectionError, HTTPClientError)


@dataclass(frozen=True)
class DeleteResult:
    """What a bulk delete did.

    * ``deleted``: keys confirmed gone (deleted now, or already absent).
    * ``failed``: key -> reason, for keys still present as far as we know (retries ran
      out, or a permanent error such as AccessDenied). Retry them later.
    * ``refused``: key -> reason, for keys that are not blocks of this store (foreign
      keys); they were never sent to S3 and never will be.
    * ``requests``: DeleteObjects calls made, retries included.
    """

    deleted: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    requests: int = 0

    @property
    def ok(self) -> bool:
        """True when every key asked for is gone and none was refused."""
        return not self.failed and not self.refused

    def merge(self, other: DeleteResult) -> DeleteResult:
        """The combined result of two deletes."""
        return DeleteResult(
            deleted=self.deleted + other.deleted,
            failed={**self.failed, **other.failed},
            refused={**self.refused, **other.refused},
            requests=self.requests + other.requests,
        )

    def raise_for_failures(self) -> None:
        """Raise ``DeleteFailedError`` if any key failed (refused keys are not failures)."""
        if self.failed:
            sample = ", ".join(sorted(self.failed)[:3])
            raise DeleteFailedError(
                f"{len(self.failed)} key(s) not deleted (e.g. {sample}); they are still "
                "registered for deletion and will be retried on the next run",
                dict(self.failed),
            )


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with full jitter: the delay before retry ``n`` is
    uniform in ``[0, min(max_delay, base_delay * 2**(n-1))]``."""

    max_attempts: int = 6
    base_delay: float = 0.2
    max_delay: float = 10.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")

    def delay(self, retry_number: int, rng: random.Random) -> float:
        """The sleep before retry ``retry_number`` (1 for the first retry)."""
        return rng.uniform(0.0, min(self.max_delay, self.base_delay * 2 ** (retry_number - 1)))


def error_details(exc: ClientError) -> tuple[str, int | None, str]:
    """(error code, HTTP status, message) of a ClientError."""
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return str(error.get("Code", "")), status, str(error.get("Message", ""))


def gave_up(reason: str, attempts: int) -> str:
    return f"{reason} (gave up after {attempts} attempt{'s' if attempts != 1 else ''})"


def is_retryable(code: str, status: int | None) -> bool:
    return code in RETRYABLE_CODES or status in RETRYABLE_STATUS


class BulkDelete:
    """Deletes keys of one bucket through one client.

    ``owns(key)`` is None for a key of the store, else why it is not (never sent).
    ``fatal(exc, what)`` turns an error no retry can fix (a missing bucket, bad
    credentials) into the exception to raise. ``endpoint`` names the server in reasons.
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        *,
        owns: Callable[[str], str | None],
        fatal: Callable[[Exception, str], Exception],
        endpoint: str,
        retry: RetryPolicy,
        sleep: Callable[[float], None],
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.bucket = bucket
        self.owns = owns
        self.fatal = fatal
        self.endpoint = endpoint
        self.retry = retry
        self._sleep = sleep
        self._rng = rng or random.Random()

    def delete_keys(self, keys: Iterable[str], *, max_workers: int = 1) -> DeleteResult:
        """Delete ``keys`` (de-duplicated, order kept) in DeleteObjects requests of at most
        1000 (Quiet mode), ``max_workers`` requests at a time."""
        batches, refused = self.batches(keys)
        if refused:
            log.warning(
                "refusing to delete %d foreign key(s), e.g. %s", len(refused), next(iter(refused))
            )
        if max_workers > 1 and len(batches) > 1:
            with ThreadPoolExecutor(
                max_workers=max_workers, thread_name_prefix="ledgergc-delete"
            ) as pool:
                outcomes = list(pool.map(self.delete_batch, batches))
        else:
            outcomes = [self.delete_batch(batch) for batch in batches]
        result = DeleteResult(refused=refused)
        for outcome in outcomes:
            result = result.merge(outcome)
        return result

    def batches(self, keys: Iterable[str]) -> tuple[list[list[str]], dict[str, str]]:
        """The owned keys in batches of at most ``MAX_KEYS_PER_DELETE``, and the refused."""
        batches: list[list[str]] = []
        batch: list[str] = []
        refused: dict[str, str] = {}
        for key in dict.fromkeys(keys):
            why_not = self.owns(key)
            if why_not is not None:
                refused[key] = why_not
                continue
            batch.append(key)
            if len(batch) == MAX_KEYS_PER_DELETE:
                batches.append(batch)
                batch = []
        if batch:
            batches.append(batch)
        return batches, refused

    def delete_batch(self, batch: list[str]) -> DeleteResult:
        """One batch (<= 1000 keys) through the bounded retry loop."""
        pending = list(batch)
        deleted = 0
        failed: dict[str, str] = {}
        requests = 0
        for attempt in range(1, self.retry.max_attempts + 1):
            last_attempt = attempt == self.retry.max_attempts
            requests += 1
            try:
                response = self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": key} for key in pending], "Quiet": True},
                )
            except ClientError as exc:
                code, status, message = error_details(exc)
                if code == "NoSuchBucket":
                    raise self.fatal(exc, "deleting objects") from exc
                reason = f"{code} (HTTP {status}): {message}"
                retryable = is_retryable(code, status)
                if retryable and not last_attempt:
                    log.info(
                        "DeleteObjects attempt %d: %s; retrying %d key(s)",
                        attempt,
                        reason,
                        len(pending),
                    )
                    self._backoff(attempt)
                    continue
                why = gave_up(reason, attempt) if retryable else reason
                failed.update(dict.fromkeys(pending, why))
                break
            except TRANSPORT_ERRORS as exc:
                reason = f"S3 endpoint {self.endpoint} unreachable: {exc}"
                if not last_attempt:
                    self._backoff(attempt)
                    continue
                failed.update(dict.fromkeys(pending, gave_up(reason, attempt)))
                break
            except BotoCoreError as exc:  # credentials, parameters: no retry will help
                raise self.fatal(exc, "deleting objects") from exc
            retry_next, failed_now = self._per_key_errors(response, pending, attempt, failed)
            deleted += len(pending) - len(retry_next) - failed_now
            pending = retry_next
            if not pending:
                break
            log.info(
                "DeleteObjects attempt %d: %d key(s) failed transiently; retrying",
                attempt,
                len(pending),
            )
            self._backoff(attempt)
        return DeleteResult(deleted=deleted, failed=failed, requests=requests)

    def _per_key_errors(
        self, response: dict[str, Any], pending: list[str], attempt: int, failed: dict[str, str]
    ) -> tuple[list[str], int]:
        """The keys to try again, and how many failed for good (added to ``failed``)."""
        last_attempt = attempt == self.retry.max_attempts
        retry_next: list[str] = []
        asked = set(pending)
        failed_now = 0
        for error in response.get("Errors", ()):
            key = error.get("Key")
            if key not in asked:
                continue
            code = error.get("Code", "")
            if code == "NoSuchKey":  # already gone: what we wanted (idempotent delete)
                continue
            reason = f"{code}: {error.get('Message', '')}".rstrip(": ")
            if code in RETRYABLE_CODES and not last_attempt:
                retry_next.append(key)
            else:
                failed[key] = gave_up(reason, attempt) if code in RETRYABLE_CODES else reason
                failed_now += 1
            asked.discard(key)  # a key reported twice counts once
        return retry_next, failed_now

    def _backoff(self, attempt: int) -> None:
        self._sleep(self.retry.delay(attempt, self._rng))
