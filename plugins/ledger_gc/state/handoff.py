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

The namespaces whose leftover znodes that source removed are recorded too
(``record_removed_namespaces``): a ledger of such a namespace that no removed record
named (a leak from before, e.g. a trim whose delete failed) would otherwise be held as
another cluster's once the namespace's last znodes are gone, though this cluster's own
metadata had the namespace. The BookKeeper source counts them as this cluster's for that
hold only (``Classifier(removed_namespaces=...)``); the horizon and the shared-BookKeeper
rules still apply. A namespace's first record is kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ledger_gc.clock import now_ms
from ledger_gc.state import schema
from ledger_gc.state.batching import batches
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
        for batch in batches(sorted(ledgers), _BATCH):
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
        for page in batches(rows, _BATCH):
            conn.execute(table.insert(), page)


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
        for batch in batches(ids, _BATCH):
            gone += conn.execute(table.delete().where(table.c.ledger_id.in_(batch))).rowcount
    return gone


def record_removed_namespaces(
    state: StateEndpoint, run_id: str, namespaces: Iterable[str], at_ms: int
) -> None:
    """Record that run ``run_id`` removed leftover znodes of ``namespaces`` (``tenant/ns``,
    v1 ``property/cluster/ns``) at ``at_ms``, in one transaction. A namespace recorded
    before keeps its first record (idempotent). A name that is no namespace raises
    ``ValueError`` before anything is written."""
    names = sorted(set(namespaces))
    for name in names:
        if not _is_namespace(name):
            raise ValueError(
                f"{name!r} is not a namespace name (tenant/ns, or v1 property/cluster/ns): "
                "record the namespace whose znodes were removed, not a tenant or topic"
            )
    if not names:
        return
    table = schema.removed_namespaces
    recorded = now_ms()
    with open_store(state).write() as conn:
        known: set[str] = set()
        for batch in batches(names, _BATCH):
            known.update(
                str(name)
                for (name,) in conn.execute(
                    table.select()
                    .with_only_columns(table.c.namespace)
                    .where(table.c.namespace.in_(batch))
                )
            )
        rows = [
            {"namespace": name, "at_ms": int(at_ms), "run_id": run_id, "recorded_ms": recorded}
            for name in names
            if name not in known
        ]
        for page in batches(rows, _BATCH):
            conn.execute(table.insert(), page)


def removed_namespaces(state: StateEndpoint) -> frozenset[str]:
    """Every namespace the Pulsar-metadata source recorded as removed."""
    table = schema.removed_namespaces
    with open_store(state).read() as conn:
        return frozenset(
            str(name)
            for (name,) in conn.execute(table.select().with_only_columns(table.c.namespace))
        )


def _is_namespace(name: str) -> bool:
    parts = name.split("/")
    return len(parts) in (2, 3) and all(parts)
