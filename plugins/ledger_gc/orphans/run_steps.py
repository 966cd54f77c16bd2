"""What the steps of one orphan cycle hand each other: small records in the state store.

The tasks of a DAG run land on different workers (Celery, Kubernetes, Astronomer), so
nothing a step writes to its local disk reaches the next one (DESIGN.md "State"). Each
step's result is therefore a small JSON record in ``ledgergc_run_steps`` (the snapshot's
counts and ZooKeeper sequence, the scan's totals and servers' time, the diff's classes,
guard inputs and snapshot facts, phases 1-2's and phase 3's results), and the diff's orphan
candidates are rows of ``ledgergc_run_candidates``: one per target, with its objects,
bytes and newest object. Only the survey app (snapshot, scan and diff in one Spark
application) writes Parquet, as scratch it reads back itself (``layout.RunPaths``).

A step that is re-run first forgets its earlier record (``start_step``), so a crash half
way through leaves "no output", never a half-written one that looks whole; the diff's
record and candidates are one transaction. Records of old runs are pruned
(``prune_runs``); the registry, the audit log and the run log keep what matters.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from ledger_gc.errors import LedgerGcError
from ledger_gc.rules.orphans.classify import Candidate
from ledger_gc.state import schema
from ledger_gc.state.batching import batches
from ledger_gc.state.stores import open_store

if TYPE_CHECKING:
    from ledger_gc.orphans.records import StepRecord
    from ledger_gc.state.store import StateLocation

    R = TypeVar("R", bound=StepRecord)

SNAPSHOT = "snapshot"
SCAN = "scan"
DIFF = "diff"
PHASES = "phases"
DELETE = "delete"
STEPS = (SNAPSHOT, SCAN, DIFF, PHASES, DELETE)

#: Candidates per insert, and fetched at a time when read back.
_INSERT_BATCH = 1000
_STREAM_BATCH = 2000
_CANDIDATE_COLUMNS = (
    "target_class",
    "ml_name",
    "ledger_id",
    "objects",
    "bytes",
    "newest_ms",
    "oldest_ms",
    "max_ledger_id",
    "segment",
)


class MissingStepOutputError(LedgerGcError):
    """A step needs the output of an earlier step of the same run, and it is not there."""


def _json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)


class RunSteps:
    """The records of one run's steps (``run_id``) in the store ``location`` names."""

    def __init__(self, location: StateLocation, run_id: str) -> None:
        if not run_id:
            raise ValueError("run id is empty")
        self.store = open_store(location)
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"RunSteps({self.store.display_url!r}, {self.run_id!r})"

    # --- step records --------------------------------------------------------------------

    def start_step(self, step: str) -> None:
        """Forget an earlier attempt of ``step`` in this run (the diff: its candidates too)."""
        with self.store.write() as conn:
            self._forget(conn, step)

    def write_manifest(self, step: str, manifest: dict[str, Any]) -> None:
        """Record ``step``'s result (replacing an earlier attempt's), one transaction."""
        with self.store.write() as conn:
            self._put(conn, step, manifest)

    def write_record(self, step: str, record: StepRecord) -> None:
        """Record ``step``'s typed result (``records``), one transaction."""
        self.write_manifest(step, record.to_dict())

    def read_record(self, step: str, kind: type[R], *, required: bool = True) -> R | None:
        """A step's typed record, or None / ``MissingStepOutputError`` as ``read_manifest``."""
        data = self.read_manifest(step, required=required)
        return None if data is None else kind.from_dict(data)

    def read_manifest(self, step: str, *, required: bool = True) -> dict[str, Any] | None:
        """A step's record, or None / ``MissingStepOutputError`` if it did not complete."""
        from sqlalchemy import select

        table = schema.run_steps
        with self.store.read() as conn:
            body = conn.execute(
                select(table.c.body).where(table.c.run_id == self.run_id, table.c.step == step)
            ).scalar()
        if body is not None:
            data: dict[str, Any] = json.loads(body)
            return data
        if not required:
            return None
        raise MissingStepOutputError(
            f"the {step} step of run {self.run_id} has no complete output in the state store "
            f"{self.store.display_url}; run it (again) before the steps that follow it"
        )

    # --- the diff: its record and its candidates, together ---------------------------

    def write_diff(
        self, record: StepRecord, candidates: Iterable[Candidate], store_prefix: str
    ) -> None:
        """The diff's record (``records.DiffRecord``) and its candidates in one
        transaction (all or nothing); each candidate keyed by its target prefix under
        ``store_prefix``. Rows are made a batch at a time, as the candidates are read
        (a source's may be made as they are: ``SurveyCandidates``): all at once they
        were another copy of every candidate in the driver's memory."""
        table = schema.run_candidates
        with self.store.write() as conn:
            self._forget(conn, DIFF)
            position = 0
            for batch in batches(candidates, _INSERT_BATCH):
                rows = [
                    {
                        "run_id": self.run_id,
                        "position": at,
                        "prefix": candidate.prefix(store_prefix),
                        **{name: getattr(candidate, name) for name in _CANDIDATE_COLUMNS},
                    }
                    for at, candidate in enumerate(batch, position)
                ]
                conn.execute(table.insert(), rows)
                position += len(batch)
            self._put(conn, DIFF, record.to_dict())

    def read_candidates(self) -> list[Candidate]:
        """The diff's orphan candidates, in the diff's order (requires its record)."""
        return list(self.iter_candidates())

    def iter_candidates(self) -> Iterator[Candidate]:
        """``read_candidates`` streamed from the store, for a reader that keeps them its
        own way (the phases step: by prefix), so they are not also held as a list."""
        from sqlalchemy import select

        self.read_manifest(DIFF)
        table = schema.run_candidates
        columns = [table.c[name] for name in _CANDIDATE_COLUMNS]
        query = (
            select(*columns)
            .where(table.c.run_id == self.run_id)
            .order_by(table.c.position)
            .execution_options(yield_per=_STREAM_BATCH)
        )
        with self.store.read() as conn:
            for row in conn.execute(query):
                found = dict(zip(_CANDIDATE_COLUMNS, row, strict=True))
                # (one string per class, not one per candidate)
                found["target_class"] = sys.intern(found["target_class"])
                yield Candidate(**found)

    # --- inside a write transaction ---------------------------------------------------

    def candidate_pages(self, conn: Any, size: int) -> Iterator[list[Candidate]]:
        """The diff's candidates, ``size`` at a time, by prefix, read on ``conn`` (the
        phases step's registry transaction, in the same store: no second connection
        reads beside its writer); each page its own query after the previous page's
        last prefix."""
        from sqlalchemy import select

        table = schema.run_candidates
        columns = [table.c.prefix, *(table.c[name] for name in _CANDIDATE_COLUMNS)]
        after: str | None = None
        while True:
            query = select(*columns).where(table.c.run_id == self.run_id)
            if after is not None:
                query = query.where(table.c.prefix > after)
            rows = conn.execute(query.order_by(table.c.prefix).limit(size)).all()
            if not rows:
                return
            page = []
            for _, *values in rows:
                found = dict(zip(_CANDIDATE_COLUMNS, values, strict=True))
                found["target_class"] = sys.intern(found["target_class"])
                page.append(Candidate(**found))
            yield page
            after = rows[-1][0]

    def _forget(self, conn: Any, step: str) -> None:
        from sqlalchemy import delete

        steps = schema.run_steps
        conn.execute(delete(steps).where(steps.c.run_id == self.run_id, steps.c.step == step))
        if step == DIFF:
            found = schema.run_candidates
            conn.execute(delete(found).where(found.c.run_id == self.run_id))

    def _put(self, conn: Any, step: str, manifest: dict[str, Any]) -> None:
        from sqlalchemy import delete

        steps = schema.run_steps
        body = {"run_id": self.run_id, "step": step, "complete": True, **manifest}
        conn.execute(delete(steps).where(steps.c.run_id == self.run_id, steps.c.step == step))
        conn.execute(
            steps.insert().values(
                run_id=self.run_id,
                step=step,
                recorded_ms=int(time.time() * 1000),
                body=_json(body),
            )
        )


def prune_runs(location: StateLocation, keep: int, current: str | None = None) -> int:
    """Forget the step records and candidates of all but the newest ``keep`` runs (never
    ``current``'s); returns how many runs were pruned."""
    from sqlalchemy import delete, func, select

    steps, found = schema.run_steps, schema.run_candidates
    store = open_store(location)
    with store.write() as conn:
        newest = (
            conn.execute(
                select(steps.c.run_id)
                .group_by(steps.c.run_id)
                .order_by(func.max(steps.c.recorded_ms).desc(), steps.c.run_id.desc())
            )
            .scalars()
            .all()
        )
        old = [run_id for run_id in newest[keep:] if run_id != current]
        for start in range(0, len(old), 500):
            chunk = old[start : start + 500]
            conn.execute(delete(steps).where(steps.c.run_id.in_(chunk)))
            conn.execute(delete(found).where(found.c.run_id.in_(chunk)))
    return len(old)
