"""The namespaces the Pulsar-metadata source removed (state/handoff.py): the BookKeeper
source counts them as this cluster's, so their leaked ledgers that no removed record
named are not held as another cluster's.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ledgergc_removed_namespaces",
        sa.Column("namespace", sa.Text, primary_key=True),
        sa.Column("at_ms", sa.BigInteger, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("recorded_ms", sa.BigInteger, nullable=False),
    )
