"""How the trim runs a step of one managed ledger: its failure is its own, except those
that stop the run; and many such steps at once on a pool.

Both phases of the trim (the mark and the purge) run a step per managed ledger, several
at once: one managed ledger that fails (an undecodable record, a name the store cannot
hold) must never stop the others, but losing ZooKeeper or the audit log, or a broker
registering mid-run, leaves nothing that can be done safely.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any

from ledger_gc.errors import (
    AuditUnavailableError,
    LedgerGcError,
    ManagedLedgerNotFoundError,
    MetadataUnavailableError,
    SafetyRefusalError,
)
from ledger_gc.metadata.store import MetadataStore
from ledger_gc.trim.report import ManagedLedgerTrim

log = logging.getLogger(__name__)


class BrokerRegisteredError(SafetyRefusalError):
    """A broker registered during the run: no managed ledger is marked after it (the
    run stops; what was marked before stays marked, and the next run purges it)."""


def run_guarded(store: MetadataStore, result: ManagedLedgerTrim, step: Callable[[], None]) -> None:
    """Run a step for one managed ledger; its failure is its own (reported), except
    losing ZooKeeper or the audit log, which stops the run."""
    writes_before = store.thread_writes()
    try:
        step()
    except (MetadataUnavailableError, AuditUnavailableError, BrokerRegisteredError):
        raise
    except ManagedLedgerNotFoundError:
        result.missing = True  # deleted while we worked on it: nothing left to trim
    except Exception as exc:  # one managed ledger must never stop the others
        result.error = str(exc) if isinstance(exc, LedgerGcError) else f"{exc!r}"
        log.error(
            "%s: trim failed, nothing more done to it this run: %s",
            result.name,
            exc,
            exc_info=not isinstance(exc, LedgerGcError),
        )
    finally:
        result.zk_writes += store.thread_writes() - writes_before


def each(
    pool: Executor, step: Callable[[Any], Any], items: Sequence[Any]
) -> tuple[list[Any], Exception | None]:
    """Run ``step`` over ``items`` on the pool; each result, or None where the step raised,
    and the first exception raised (``run_guarded`` lets only run-stopping ones through)."""
    futures = [pool.submit(step, item) for item in items]
    results: list[Any] = []
    first: Exception | None = None
    for future in futures:
        try:
            results.append(future.result())
        except Exception as exc:
            results.append(None)
            first = first or exc
    return results, first
