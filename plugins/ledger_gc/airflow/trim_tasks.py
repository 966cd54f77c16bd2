"""The ``ledger_trim`` DAG's task callables: thin, idempotent calls into ``ledger_gc.trim``.

The DAG file only wires these together; each one builds its settings at run time
(``settings_hook.settings_for``, the same function as the orphan_removal DAG's) and
calls the library, so they can be run and tested without a scheduler. They are
idempotent, which is what lets Airflow retry any of them:

* ``list_shards``: the managed ledgers in scope, split into contiguous shards;
* ``trim_shard``: ``run_trim`` over one shard (a re-run marks nothing twice and retries
  every marker still present); returns its report, without idle managed ledgers;
* ``summarize``: adds the shards' reports up, appends the run summary to the run log
  (the state store's run log: the UI and the metrics read it) and returns it;
* ``check_outcome``: fails the run if a marker's data could not be deleted or a managed
  ledger failed, so that the run shows red in the UI (like ``ledgergc trim``'s exit code).

Heavy imports (kazoo, boto3) happen inside the functions: the DAG processor imports this
module every time it parses the DAG file.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ledger_gc.airflow.settings_hook import settings_for
from ledger_gc.config.edge import config_store_endpoint, zk_endpoint
from ledger_gc.errors import LedgerGcError

log = logging.getLogger(__name__)

DEFAULT_SCHEDULE = "*/10 * * * *"
DEFAULT_MAX_SHARDS = 8
# Fewer managed ledgers than this per shard are not worth a task of their own.
MIN_SHARD_SIZE = 25


class TrimRunFailedError(LedgerGcError):
    """A trim run left markers pending or failed on some managed ledger."""


def shard(names: Sequence[str], max_shards: int, min_size: int = MIN_SHARD_SIZE) -> list[list[str]]:
    """Split sorted names into at most ``max_shards`` contiguous, near-equal shards.

    Contiguous, so a namespace's managed ledgers stay together (one ZooKeeper subtree per
    task, and one task's log tells a namespace's story). No shard when there is no name.
    """
    names = sorted(names)
    if not names:
        return []
    count = max(1, min(max_shards, len(names) // max(min_size, 1) or 1))
    size, extra = divmod(len(names), count)
    shards, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        shards.append(names[start:end])
        start = end
    return shards


def list_shards(params: Mapping[str, Any] | None) -> list[list[str]]:
    from ledger_gc.metadata.config_store import configuration_store
    from ledger_gc.metadata.store import MetadataStore
    from ledger_gc.trim.run import TrimScope

    params = params or {}
    settings = settings_for(params)
    scope = TrimScope.parse(params.get("namespace"))
    with (
        MetadataStore.open(zk_endpoint(settings)) as store,
        configuration_store(store, config_store_endpoint(settings)) as config,
    ):
        names = scope.resolve(store, config)
    max_shards = int(params.get("max_shards") or DEFAULT_MAX_SHARDS)
    shards = shard(names, max_shards)
    log.info(
        "%d managed ledgers in scope (%s), %d shards", len(names), scope.describe(), len(shards)
    )
    return shards


def trim_shard(
    names: Sequence[str], params: Mapping[str, Any] | None, run_id: str
) -> dict[str, Any]:
    from ledger_gc.config.edge import resolve
    from ledger_gc.termination import stop_on_signals
    from ledger_gc.trim.run import TrimScope, run_trim

    params = params or {}
    # A task timeout or a worker shutdown sends SIGTERM: the delete batch under way
    # finishes and is audited, then the shard stops and fails (a retry goes on).
    with stop_on_signals() as stop:
        report = run_trim(
            resolve(settings_for(params)),  # the edge: resolved once, for the shard
            scope=TrimScope.of(names),
            dry_run=bool(params.get("dry_run")),
            run_id=run_id,
            record_run=False,  # the summary task records the whole run once
            source="airflow",
            should_stop=stop,
        )
    if report.error:
        # ZooKeeper went away mid-shard: fail the task so Airflow retries it (idempotent).
        raise TrimRunFailedError(f"trim of {len(names)} managed ledgers stopped: {report.error}")
    return report.to_dict(include_idle=False)


def summarize(
    results: Iterable[Mapping[str, Any] | None],
    shards: Sequence[Sequence[str]] | None,
    params: Mapping[str, Any] | None,
    run_id: str,
    started_at: int | None = None,
) -> dict[str, Any]:
    from ledger_gc import run_log
    from ledger_gc.trim.report import run_summary
    from ledger_gc.trim.run import TrimScope

    params = params or {}
    reports = [dict(r) for r in _values(results) if r]
    expected = len(shards or [])
    run_errors = []
    if len(reports) < expected:
        run_errors.append(
            f"{expected - len(reports)} of {expected} trim shards failed; their managed "
            "ledgers were not (all) trimmed: see the trim_shard task logs"
        )
    finished = int(time.time() * 1000)
    starts = [r["started_at"] for r in reports]
    summary = run_summary(
        reports,
        run_id=run_id,
        source="airflow",
        dry_run=bool(params.get("dry_run")),
        scope=TrimScope.parse(params.get("namespace")).describe(),
        started_at=started_at or (min(starts) if starts else finished),
        finished_at=finished,
        run_errors=run_errors,
    )
    summary["shards"] = expected
    run_log.append_run(settings_for(params), run_log.TRIM, summary)
    totals = summary["totals"]
    log.info(
        "trim run %s %s: %d managed ledgers, %d marked, %d deleted, %d bytes reclaimed, "
        "%d recoverable (kept by a versioned bucket), %d markers pending, %d errors",
        run_id,
        summary["outcome"],
        totals["managed_ledgers"],
        totals["ledgers_marked"],
        totals["ledgers_deleted"],
        totals["bytes_reclaimed"],
        totals.get("bytes_recoverable", 0),
        totals["markers_pending"],
        totals["errors"],
    )
    return summary


def _values(results: Iterable[Any]) -> list[Any]:
    """The values of a mapped task's XComs. Airflow's lazy sequence is read by index up to
    its length: iterating it probes one offset past the end, which logs a spurious error."""
    if isinstance(results, Sequence) or (
        hasattr(results, "__len__") and hasattr(results, "__getitem__")
    ):
        return [results[index] for index in range(len(results))]  # type: ignore[index, arg-type]
    return list(results)


def check_outcome(summary: Mapping[str, Any]) -> None:
    """Fail (after the summary was recorded) when the run left work undone."""
    if summary["outcome"] == "ok":
        return
    totals = summary["totals"]
    problems = [
        e["error"] if e["ml"] is None else f"{e['ml']}: {e['error']}" for e in summary["errors"]
    ]
    for marker in summary["pending"][:5]:
        problems.append(
            f"{marker['ml']} ledger {marker['ledger_id']} still marked after "
            f"{marker['attempts']} attempts: {marker['last_error']}"
        )
    raise TrimRunFailedError(
        f"trim run {summary['run_id']}: {totals['markers_pending']} markers pending, "
        f"{totals['errors']} managed ledgers failed; the next run retries them. "
        + "; ".join(problems[:10])
    )
