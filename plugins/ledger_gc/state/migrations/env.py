"""Alembic's environment for the state store: always run by ``StateStore`` through
``command.upgrade`` on a connection it has already opened (and locked), never online from
an ``alembic.ini``: so a migration is part of the caller's transaction."""

from __future__ import annotations

from alembic import context

from ledger_gc.state.schema import VERSION_TABLE, metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table=VERSION_TABLE,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
