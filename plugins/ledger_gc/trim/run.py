"""``run_trim``: one trim run over a scope of managed ledgers, as the CLI, the DAG tasks
and the demo call it.

It opens the store and the bucket from the run's endpoints (or takes them, for tests and
benchmarks), resolves the scope to managed-ledger names, trims them
(``trimmer.ManagedLedgerTrimmer``) and returns a ``TrimReport``. Unless told not to, it
appends the run's summary to the state store's run log (``run_log``).
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime

from ledger_gc import run_log
from ledger_gc.audit import AuditLog
from ledger_gc.clock import now_ms
from ledger_gc.config.endpoints import Endpoints
from ledger_gc.config.policy import Policy
from ledger_gc.deletion import Deleter
from ledger_gc.errors import (
    AuditUnavailableError,
    ConfigError,
    MetadataUnavailableError,
    SafetyRefusalError,
    StoppedError,
)
from ledger_gc.metadata.config_store import configuration_store
from ledger_gc.metadata.read_only import metadata_is_read_only
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.rules.storage.keys import validate_ml_name
from ledger_gc.storage import offload_buckets
from ledger_gc.storage.s3 import LedgerStorage
from ledger_gc.termination import NEVER
from ledger_gc.trim.clocks import trim_clocks
from ledger_gc.trim.lock import TRIM_LOCK_WAIT_SECONDS, TrimLockBusy, trim_lock
from ledger_gc.trim.report import ManagedLedgerTrim, TrimReport, run_summary
from ledger_gc.trim.trimmer import ManagedLedgerTrimmer

log = logging.getLogger(__name__)
# Shards of one run trimmed at once (see ``_trim_in_shards``), each at least this big.
CONCURRENT_SHARDS = 2
SHARD_MIN_SIZE = 512
_EXAMPLE = "acme/prod/persistent/orders"


@dataclass(frozen=True)
class TrimScope:
    """Which managed ledgers a run trims: all, one namespace, or given names."""

    ml_names: tuple[str, ...] | None = None
    namespace: str | None = None

    def __post_init__(self) -> None:
        if self.ml_names is not None and self.namespace is not None:
            raise ConfigError("a trim scope is managed-ledger names or a namespace, not both")
        if self.namespace is not None:
            parts = self.namespace.strip("/").split("/")
            if len(parts) != 2 or not all(parts):
                raise ConfigError(
                    f"namespace {self.namespace!r} is not tenant/namespace (e.g. acme/prod)"
                )
            object.__setattr__(self, "namespace", "/".join(parts))
        if self.ml_names is not None:
            try:
                names = tuple(dict.fromkeys(validate_ml_name(n) for n in self.ml_names))
            except ValueError as exc:
                raise ConfigError(f"{exc}; managed ledgers are named like {_EXAMPLE}") from exc
            object.__setattr__(self, "ml_names", names)

    @classmethod
    def all(cls) -> TrimScope:
        return cls()

    @classmethod
    def of(cls, names: Iterable[str]) -> TrimScope:
        return cls(ml_names=tuple(names))

    @classmethod
    def parse(cls, text: str | None) -> TrimScope:
        """``""``/``"all"``: everything; ``tenant/ns``: a namespace; a full name: that
        managed ledger (what the DAG's namespace param and the demo pass)."""
        text = (text or "").strip().strip("/")
        if text in ("", "all"):
            return cls()
        if text.count("/") == 1:
            return cls(namespace=text)
        return cls(ml_names=(text,))

    def describe(self) -> str:
        if self.namespace is not None:
            return f"namespace {self.namespace}"
        if self.ml_names is not None:
            if len(self.ml_names) == 1:
                return f"managed ledger {self.ml_names[0]}"
            return f"{len(self.ml_names)} managed ledgers"
        return "all"

    def resolve(self, store: MetadataStore, policies: MetadataStore | None = None) -> list[str]:
        """The managed-ledger names in scope (given names are kept even if missing: the
        report then says so); ``policies``: the configuration store (None: ``store``)."""
        if self.ml_names is not None:
            return list(self.ml_names)
        names = store.list_managed_ledgers(policies=policies)
        if self.namespace is not None:
            names = [n for n in names if n.startswith(self.namespace + "/")]
        return names


def _trim_in_shards(
    names: list[str],
    report: TrimReport,
    store: MetadataStore,
    deleter: Deleter,
    offload: Deleter | None,
    policy: Policy,
    *,
    dry_run: bool,
    clock: Callable[[], int],
    stamp_clock: Callable[[], int],
    should_stop: Callable[[], bool],
) -> None:
    """Trim ``names`` in up to ``CONCURRENT_SHARDS`` contiguous shards at once, each a
    trimmer of its own over the same store, storage and audit log.

    Why: one shard alternates between waiting on ZooKeeper (reads, marks, unmarks) and
    waiting on S3 (listings, DeleteObjects); two shards overlap one's ZooKeeper phase
    with the other's S3 phase. Every safety step is a shard's own, per batch, as before.
    The first shard to hit a run-stopping error (ZooKeeper or the audit log gone, a
    refusal, a stop request) makes the others stop after their batch under way; that
    error is raised. Results are appended to the report in the order of ``names``.
    """
    count = max(1, min(CONCURRENT_SHARDS, -(-len(names) // SHARD_MIN_SIZE)))
    size = -(-len(names) // count) if names else 0
    shards = [names[i : i + size] for i in range(0, len(names), size)] if names else [[]]
    failed = threading.Event()

    def stop() -> bool:
        return failed.is_set() or should_stop()

    def run(shard: list[str], results: list[ManagedLedgerTrim]) -> None:
        shard_deleter = Deleter(
            deleter.storage, deleter.audit, deleter.run_id, dry_run=dry_run, should_stop=stop
        )
        trimmer = ManagedLedgerTrimmer(
            store,
            shard_deleter,
            policy,
            dry_run=dry_run,
            clock=clock,
            offload=offload,
            stamp_clock=stamp_clock,
        )
        try:
            trimmer.trim(shard, results)
        except BaseException:
            failed.set()
            raise

    outputs: list[list[ManagedLedgerTrim]] = [[] for _ in shards]
    errors: list[BaseException | None] = [None] * len(shards)
    if len(shards) == 1:
        try:
            run(shards[0], outputs[0])
        finally:
            report.managed_ledgers.extend(outputs[0])
        return
    with ThreadPoolExecutor(len(shards), thread_name_prefix="ledgergc-shard") as pool:
        futures = [pool.submit(run, shard, out) for shard, out in zip(shards, outputs, strict=True)]
        for index, future in enumerate(futures):
            errors[index] = future.exception()
    for out in outputs:
        report.managed_ledgers.extend(out)
    # The cause, not the stops it caused in the other shards.
    real = [e for e in errors if e is not None and not isinstance(e, StoppedError)]
    first = real[0] if real else next((e for e in errors if e is not None), None)
    if first is not None:
        raise first


def new_run_id(clock: Callable[[], int] = now_ms) -> str:
    stamp = datetime.fromtimestamp(clock() / 1000, tz=UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"trim-{stamp}-{secrets.token_hex(3)}"


def run_trim(
    endpoints: Endpoints,
    *,
    scope: TrimScope | str | None = None,
    dry_run: bool = False,
    run_id: str | None = None,
    store: MetadataStore | None = None,
    storage: LedgerStorage | None = None,
    clock: Callable[[], int] = now_ms,
    record_run: bool = True,
    source: str = "library",
    should_stop: Callable[[], bool] = NEVER,
    lock_wait_seconds: float = TRIM_LOCK_WAIT_SECONDS,
) -> TrimReport:
    """Trim the managed ledgers in ``scope`` (default: all) and report what happened.

    A dry run reads metadata only: it reports what would be marked and what is marked
    already, and writes and deletes nothing. Otherwise: mark, move cursors, delete (see
    ``trimmer``). Per-managed-ledger failures are in the report (``outcome`` "error");
    losing ZooKeeper mid-run stops the run and is the report's ``error``. Raises only if
    nothing could be started (ZooKeeper or the bucket unreachable at the start).
    """
    if not isinstance(scope, TrimScope):
        scope = TrimScope.parse(scope)
    run_id = run_id or new_run_id(clock)
    report = TrimReport(run_id=run_id, dry_run=dry_run, scope=scope.describe(), started_at=clock())
    policy = endpoints.policy
    endpoints.state.check_dir()
    AuditLog(endpoints.state).check()  # the audit log must be writable before the first mark
    with ExitStack() as stack:
        if store is None:
            store = stack.enter_context(MetadataStore.open(endpoints.zk))
        if storage is None:
            storage = LedgerStorage(endpoints.blocks)
        if not dry_run:
            read_only, why = metadata_is_read_only(store, policy.metadata_read_only)
            if read_only:
                raise SafetyRefusalError(
                    f"the trim writes metadata and the metadata is read-only ({why}); nothing "
                    "was marked or deleted. Orphan removal still runs; set "
                    "LEDGERGC_METADATA_READ_ONLY=false only when no broker owns these topics"
                )
            # Fail before marking anything if the bucket is wrong: markers would pile up.
            storage.check_bucket()
        with configuration_store(store, endpoints.config_store) as config:
            names = scope.resolve(store, config)
        log.info(
            "trim %s%s: %d managed ledgers in scope (%s), default retention %ss / %s bytes",
            run_id,
            " (dry run)" if dry_run else "",
            len(names),
            scope.describe(),
            policy.trim_retention.seconds,
            policy.trim_retention.bytes,
        )
        deleter = Deleter(
            storage,
            AuditLog(endpoints.state),
            run_id,
            dry_run=dry_run,
            should_stop=should_stop,
        )
        offload = (
            Deleter(
                offload_buckets.offload_bucket(endpoints.offload),
                deleter.audit,
                run_id,
                dry_run=dry_run,
                should_stop=should_stop,
            )
            if endpoints.offload.configured
            else None
        )
        if not dry_run:
            # Asked once per run (cached by the storage); never raises ("unknown").
            report.bucket = storage.versioning().to_dict()
        # Retention by the earlier of this host's and S3's clocks (trim/clocks.py).
        clocks = trim_clocks(clock, storage.client, storage.bucket)
        try:
            with ExitStack() as locked:
                if not dry_run:  # one writing trim at a time (trim/lock.py)
                    locked.enter_context(
                        trim_lock(store.client, store.hosts, run_id, lock_wait_seconds)
                    )
                _trim_in_shards(
                    names,
                    report,
                    store,
                    deleter,
                    offload,
                    policy,
                    dry_run=dry_run,
                    clock=clocks.decide,
                    stamp_clock=clocks.stamp,
                    should_stop=should_stop,
                )
        except TrimLockBusy as exc:
            report.error = str(exc)
            log.warning("trim %s: %s", run_id, exc)
        except SafetyRefusalError as exc:
            if not report.managed_ledgers:
                raise  # refused before anything was done: the error is the whole answer
            report.error = f"{exc}; the run stopped, markers already written stay for next run"
            log.error("trim %s stopped: %s", run_id, exc)
        except (MetadataUnavailableError, AuditUnavailableError, StoppedError) as exc:
            report.error = f"{exc}; the run stopped, markers already written stay for next run"
            log.error("trim %s stopped: %s", run_id, exc)
    report.finished_at = clock()
    totals = report.totals()
    log.info(
        "trim %s %s: %d marked, %d deleted (%d bytes reclaimed, %d recoverable), %d markers "
        "pending, %d errors",
        run_id,
        report.outcome,
        totals["ledgers_marked"],
        totals["ledgers_deleted"],
        totals["bytes_reclaimed"],
        totals["bytes_recoverable"],
        totals["markers_pending"],
        totals["errors"],
    )
    if record_run:
        run_log.append_run(
            endpoints.state,
            run_log.TRIM,
            run_summary(
                [report.to_dict(include_idle=False)],
                run_id=run_id,
                source=source,
                dry_run=dry_run,
                scope=report.scope,
                started_at=report.started_at,
                finished_at=report.finished_at,
            ),
        )
    return report
