"""The state store's first version: registry (orphans, scans, history), audit log, runs,
and the record of imported state-dir files.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledgergc_orphans",
        sa.Column("prefix", sa.Text, primary_key=True),
        sa.Column("target_class", sa.Text, nullable=False),
        sa.Column("ml_name", sa.Text, nullable=False),
        sa.Column("ledger_id", sa.BigInteger),
        sa.Column("first_seen_ms", sa.BigInteger, nullable=False),
        sa.Column("last_seen_ms", sa.BigInteger, nullable=False),
        sa.Column("first_scan", sa.Integer, nullable=False),
        sa.Column("last_scan", sa.Integer, nullable=False),
        sa.Column("scans_seen", sa.Integer, nullable=False),
        sa.Column("objects", sa.BigInteger, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("newest_ms", sa.BigInteger, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text),
    )
    op.create_table(
        "ledgergc_scans",
        sa.Column("number", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("run_id", sa.Text, nullable=False, unique=True),
        sa.Column("recorded_ms", sa.BigInteger, nullable=False),
        sa.Column("result", sa.Text, nullable=False),
    )
    op.create_table(
        "ledgergc_history",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time_ms", sa.BigInteger, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("scan", sa.Integer),
        sa.Column("prefix", sa.Text, nullable=False),
        sa.Column("target_class", sa.Text, nullable=False),
        sa.Column("ml_name", sa.Text, nullable=False),
        sa.Column("ledger_id", sa.BigInteger),
        sa.Column("event", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("objects", sa.BigInteger, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
    )
    op.create_index("ledgergc_history_run", "ledgergc_history", ["run_id"])
    op.create_index("ledgergc_history_prefix", "ledgergc_history", ["prefix"])
    op.create_table(
        "ledgergc_audit",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("time_ms", sa.BigInteger, nullable=False),
        sa.Column("operation", sa.Text, nullable=False),
        sa.Column("target_class", sa.Text, nullable=False),
        sa.Column("ml_name", sa.Text, nullable=False),
        sa.Column("ledger_id", sa.BigInteger),
        sa.Column("prefix", sa.Text, nullable=False),
        sa.Column("objects", sa.BigInteger, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("recoverable", sa.Boolean, nullable=False, server_default="0"),
        sa.Column("versioning", sa.Text),
        sa.Column("noncurrent_expiration_days", sa.Integer),
        sa.Column("bucket", sa.Text),
        sa.Column("extra", sa.Text),
    )
    op.create_index("ledgergc_audit_run", "ledgergc_audit", ["run_id"])
    op.create_index("ledgergc_audit_time", "ledgergc_audit", ["time_ms"])
    op.create_table(
        "ledgergc_runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text),
        sa.Column("recorded_ms", sa.BigInteger, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
    )
    op.create_index("ledgergc_runs_kind", "ledgergc_runs", ["kind", "id"])
    op.create_table(
        "ledgergc_imports",
        sa.Column("source", sa.Text, primary_key=True),
        sa.Column("imported_ms", sa.BigInteger, nullable=False),
        sa.Column("rows", sa.Integer, nullable=False),
        sa.Column("note", sa.Text),
    )
