"""The namespaces the Pulsar-metadata source removed (``ledger_gc.state.handoff``), on
SQLite and PostgreSQL: recorded, read back, kept as first recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ledger_gc.config.endpoints import StateEndpoint
from ledger_gc.state import schema
from ledger_gc.state.handoff import record_removed_namespaces, removed_namespaces
from ledger_gc.state.stores import open_store


def endpoint(location: Any, tmp_path: Path) -> StateEndpoint:
    if isinstance(location, Path):
        return StateEndpoint(location)
    return StateEndpoint(tmp_path / "state", location)


@pytest.mark.state_backends
def test_removed_namespaces_read_back_as_recorded(state_location: Any, tmp_path: Path) -> None:
    state = endpoint(state_location, tmp_path)
    assert removed_namespaces(state) == frozenset()
    record_removed_namespaces(
        state, "run-1", ["acme/gone", "acme/us-east/legacy", "pulsar/broker-1:8080"], 1000
    )
    assert removed_namespaces(state) == {
        "acme/gone",
        "acme/us-east/legacy",
        "pulsar/broker-1:8080",
    }
    with open_store(state).read() as conn:
        rows = set(
            conn.execute(
                select(schema.removed_namespaces.c.run_id, schema.removed_namespaces.c.at_ms)
            )
        )
    assert rows == {("run-1", 1000)}


@pytest.mark.state_backends
def test_recording_a_namespace_again_keeps_the_first_record(
    state_location: Any, tmp_path: Path
) -> None:
    """A retried delete, or the namespace's next leftover znode removed by a later cycle,
    records it again: idempotent, the first record stays."""
    state = endpoint(state_location, tmp_path)
    record_removed_namespaces(state, "run-1", ["acme/gone"], 1000)
    record_removed_namespaces(state, "run-2", ["acme/gone", "acme/gone", "acme/other"], 2000)
    record_removed_namespaces(state, "run-3", [], 3000)  # nothing to record
    assert removed_namespaces(state) == {"acme/gone", "acme/other"}
    table = schema.removed_namespaces
    with open_store(state).read() as conn:
        rows = {name: run for name, run in conn.execute(select(table.c.namespace, table.c.run_id))}
    assert rows == {"acme/gone": "run-1", "acme/other": "run-2"}


@pytest.mark.state_backends
def test_many_namespaces_at_once(state_location: Any, tmp_path: Path) -> None:
    state = endpoint(state_location, tmp_path)
    many = [f"t/ns-{i}" for i in range(1200)]  # more than one statement's batch
    record_removed_namespaces(state, "run-1", many[:700], 1)
    record_removed_namespaces(state, "run-2", many, 2)
    assert removed_namespaces(state) == frozenset(many)


def test_a_namespace_that_is_no_namespace_name_is_refused(tmp_path: Path) -> None:
    """Only ``tenant/ns`` (v1 ``property/cluster/ns``) names: a tenant alone or a topic
    would match no ledger's namespace, or the wrong ones."""
    state = StateEndpoint(tmp_path / "state")
    for wrong in ("acme", "", "acme/", "a/b/c/d", "/acme/gone"):
        with pytest.raises(ValueError, match="namespace"):
            record_removed_namespaces(state, "run-1", [wrong], 1)
    assert removed_namespaces(state) == frozenset()
