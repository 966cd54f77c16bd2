"""Alembic's migrations of the state store (``ledger_gc.state.store`` runs them)."""
