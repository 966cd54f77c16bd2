"""The BookKeeper ledgers handed from the Pulsar-metadata source to the BookKeeper
source (state/handoff.py): the ids a removed managed ledger, cursor or schema named.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledgergc_bk_handoff",
        sa.Column("ledger_id", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("namespace", sa.Text, nullable=False),
        sa.Column("owner", sa.Text, nullable=False),
        sa.Column("named_by", sa.Text, nullable=False),
        sa.Column("at_ms", sa.BigInteger, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("recorded_ms", sa.BigInteger, nullable=False),
    )
