"""Bare Keras on every run's nodes: each worker's rate training the run's seed model in a clean
process before the timed window (aiperf.train.bare_reference), or why it was skipped, so that a
run shows its seed trials' rate against it (aiperf.results.overhead).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("reference_rates", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "reference_rates")
