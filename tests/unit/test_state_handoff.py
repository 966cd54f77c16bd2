"""The hand-off of BookKeeper ledger ids from the Pulsar-metadata source to the
BookKeeper source (``ledger_gc.state.handoff``), on SQLite and PostgreSQL: recorded,
read back, kept as first handed off, forgotten once BookKeeper lacks them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ledger_gc.config.endpoints import StateEndpoint
from ledger_gc.state import schema
from ledger_gc.state.handoff import HandOff, forget, hand_off, handed_off
from ledger_gc.state.stores import open_store

ML = "acme/gone/persistent/orders"


def endpoint(location: Any, tmp_path: Path) -> StateEndpoint:
    if isinstance(location, Path):
        return StateEndpoint(location)
    return StateEndpoint(tmp_path / "state", location)


@pytest.mark.state_backends
def test_hand_offs_read_back_as_written(state_location: Any, tmp_path: Path) -> None:
    state = endpoint(state_location, tmp_path)
    assert handed_off(state) == {}
    given = {
        7: HandOff("acme/gone", ML, f"/managed-ledgers/{ML}", 1_700_000_000_000),
        2**40: HandOff("acme/gone", ML, f"/managed-ledgers/{ML}/sub", 1_700_000_000_001),
        9: HandOff("acme/gone", "acme/gone/orders", "/schemas/acme/gone/orders", 5),
    }
    hand_off(state, "run-1", given)
    assert handed_off(state) == given
    with open_store(state).read() as conn:
        runs = set(conn.execute(select(schema.bk_handoff.c.run_id)).scalars())
    assert runs == {"run-1"}


@pytest.mark.state_backends
def test_a_second_hand_off_of_an_id_keeps_the_first(state_location: Any, tmp_path: Path) -> None:
    state = endpoint(state_location, tmp_path)
    first = HandOff("acme/gone", ML, f"/managed-ledgers/{ML}", 1000)
    hand_off(state, "run-1", {7: first})
    later = HandOff("other/ns", "other/ns/persistent/x", "/managed-ledgers/other", 2000)
    hand_off(state, "run-2", {7: later, 8: later})
    assert handed_off(state) == {7: first, 8: later}
    hand_off(state, "run-3", {})  # nothing to record: no transaction needed
    assert handed_off(state) == {7: first, 8: later}


@pytest.mark.state_backends
def test_forgotten_ids_leave_and_others_stay(state_location: Any, tmp_path: Path) -> None:
    state = endpoint(state_location, tmp_path)
    many = {lid: HandOff("acme/gone", ML, f"/managed-ledgers/{ML}", lid) for lid in range(1200)}
    hand_off(state, "run-1", many)  # more ids than one statement's batch
    assert len(handed_off(state)) == 1200
    assert forget(state, [*range(0, 1100), 5000]) == 1100
    assert sorted(handed_off(state)) == list(range(1100, 1200))
    assert forget(state, []) == 0
    # Forgotten, an id may be handed off again (a restored record removed once more).
    hand_off(state, "run-2", {3: many[3]})
    assert 3 in handed_off(state)
