"""BookKeeper ledgers handed from the Pulsar-metadata source to the BookKeeper source.

When the Pulsar-metadata source removes a record that names BookKeeper ledgers (a
managed ledger's list, a cursor's ``cursorsLedgerId``, a schema locator), it does not
delete those ledgers in the same cycle: it hands their ids over here, with the namespace
and owner (managed ledger or schema id) and the znode that named them (DESIGN.md
"Pulsar's own metadata"). From the next survey on, the BookKeeper source classes them
``bk-orphan-*`` under its own grace window; the unknown-namespace hold does not apply to
them, since this cluster's own metadata named them before removing them.

A hand-off of an id is kept as first recorded (a second one, from a retried delete or a
restore removed again, changes nothing: the grace window and the record that named it
stay). A row goes once BookKeeper no longer has its ledger (``forget``: the BookKeeper
survey calls it for the ids it did not find).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ledger_gc.clock import now_ms
from ledger_gc.state import schema
from ledger_gc.state.stores import open_store

if TYPE_CHECKING:
    from ledger_gc.config.endpoints import StateEndpoint

#: Ids per statement: well below SQLite's and PostgreSQL's limits on bound parameters.
_BATCH = 500


@dataclass(frozen=True)
class HandOff:
    """Who named a handed-off ledger: its namespace (``tenant/ns``, v1
    ``property/cluster/ns``), its owner (the managed ledger's name or the schema id), the
    znode path that named it, and when it was handed off (ms since the epoch)."""

    namespace: str
    owner: str
    named_by: str
    at_ms: int


def hand_off(state: StateEndpoint, run_id: str, ledgers: Mapping[int, HandOff]) -> None:
    """Record ``ledgers`` as handed off by run ``run_id``, in one transaction. An id
    handed off before keeps its first record (idempotent)."""
    if not ledgers:
        return
    table = schema.bk_handoff
    recorded = now_ms()
    with open_store(state).write() as conn:
        known: set[int] = set()
        for batch in _batches(sorted(ledgers)):
            known.update(
                int(lid)
                for (lid,) in conn.execute(
                    table.select()
                    .with_only_columns(table.c.ledger_id)
                    .where(table.c.ledger_id.in_(batch))
                )
            )
        rows = [
            {
                "ledger_id": int(lid),
                "namespace": given.namespace,
                "owner": given.owner,
                "named_by": given.named_by,
                "at_ms": int(given.at_ms),
                "run_id": run_id,
                "recorded_ms": recorded,
            }
            for lid, given in sorted(ledgers.items())
            if int(lid) not in known
        ]
        for batch in _batches(rows):
            conn.execute(table.insert(), batch)


def handed_off(state: StateEndpoint) -> dict[int, HandOff]:
    """Every ledger id handed off and not forgotten, with who named it."""
    table = schema.bk_handoff
    with open_store(state).read() as conn:
        return {
            int(row.ledger_id): HandOff(row.namespace, row.owner, row.named_by, int(row.at_ms))
            for row in conn.execute(table.select().order_by(table.c.ledger_id))
        }


def forget(state: StateEndpoint, ledger_ids: Iterable[int]) -> int:
    """Drop the hand-offs of ``ledger_ids`` (BookKeeper no longer has those ledgers:
    deleted, by ledger-gc or anyone). Ids only grow, so a forgotten id never comes back
    as another ledger. Returns how many rows went."""
    ids = sorted({int(lid) for lid in ledger_ids})
    if not ids:
        return 0
    table = schema.bk_handoff
    gone = 0
    with open_store(state).write() as conn:
        for batch in _batches(ids):
            gone += conn.execute(table.delete().where(table.c.ledger_id.in_(batch))).rowcount
    return gone


def _batches(items: list[Any]) -> Iterator[list[Any]]:
    for start in range(0, len(items), _BATCH):
        yield items[start : start + _BATCH]
