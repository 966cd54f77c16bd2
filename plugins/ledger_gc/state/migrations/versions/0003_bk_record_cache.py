"""The BookKeeper record cache (bookkeeper/record_cache.py): CLOSED ledgers' records
kept between cycles, by BookKeeper instance and ledger directory, and each
BookKeeper's cycles since its last full read.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledgergc_bk_records",
        sa.Column("instance_id", sa.Text, primary_key=True),
        sa.Column("location", sa.Text, primary_key=True),
        sa.Column("first_ledger_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("directory", sa.Text, nullable=False),
        sa.Column("dir_czxid", sa.BigInteger, nullable=False),
        sa.Column("dir_cversion", sa.BigInteger, nullable=False),
        sa.Column("dir_pzxid", sa.BigInteger, nullable=False),
        sa.Column("cversion_proven", sa.Boolean, nullable=False),
        sa.Column("listed_ms", sa.BigInteger, nullable=False),
        sa.Column("ledgers", sa.Integer, nullable=False),
        sa.Column("records", sa.Integer, nullable=False),
        sa.Column("listed", sa.LargeBinary, nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=False),
    )
    op.create_table(
        "ledgergc_bk_record_cycles",
        sa.Column("instance_id", sa.Text, primary_key=True),
        sa.Column("location", sa.Text, primary_key=True),
        sa.Column("format", sa.Integer, nullable=False),
        sa.Column("cycles_since_full", sa.Integer, nullable=False),
        sa.Column("high_ledger_id", sa.BigInteger),
        sa.Column("id_counters", sa.Text, nullable=False),
        sa.Column("updated_ms", sa.BigInteger, nullable=False),
        sa.Column("full_read_ms", sa.BigInteger, nullable=False),
    )
