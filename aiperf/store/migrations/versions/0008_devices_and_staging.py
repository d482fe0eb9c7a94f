"""What a trial ran on and how long the data took to stage: each trial's device count and the
devices it used (a trial may train data-parallel across several of its worker's devices), and the
run's staging time, timed apart from the window as MLPerf HPC times it.

Every new column is nullable: runs recorded before this revision did not record them (a trial of
one of them ran on one device).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("trials", sa.Column("devices", sa.Integer(), nullable=True))
    op.add_column("trials", sa.Column("placement", sa.JSON(), nullable=True))
    op.add_column("runs", sa.Column("staging_s", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "staging_s")
    op.drop_column("trials", "placement")
    op.drop_column("trials", "devices")
