"""The orphan cycle's step records and candidates (orphans/run_steps.py): what the tasks
of one DAG run hand each other, instead of files on one worker's disk.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledgergc_run_steps",
        sa.Column("run_id", sa.Text, primary_key=True),
        sa.Column("step", sa.Text, primary_key=True),
        sa.Column("recorded_ms", sa.BigInteger, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
    )
    op.create_table(
        "ledgergc_run_candidates",
        sa.Column("run_id", sa.Text, primary_key=True),
        sa.Column("prefix", sa.Text, primary_key=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("target_class", sa.Text, nullable=False),
        sa.Column("ml_name", sa.Text, nullable=False),
        sa.Column("ledger_id", sa.BigInteger),
        sa.Column("objects", sa.BigInteger, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("newest_ms", sa.BigInteger, nullable=False),
        sa.Column("oldest_ms", sa.BigInteger, nullable=False),
        sa.Column("max_ledger_id", sa.BigInteger),
        sa.Column("segment", sa.Text),
    )
