"""What makes a result checkable against the world, not only against itself: the best trial's kept
weights (its file and sha256, so verify can evaluate them again), what ran on the workers (prologue
lines, their aiperf-relevant environment, the digest of aiperf's installed files on each), and the
token of the process that owns a running run (recover and resume take it over by compare-and-set).

Every new column is nullable: runs recorded before this revision recorded none of them.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("best_weights", sa.JSON(), nullable=True))
    op.add_column("runs", sa.Column("provenance", sa.JSON(), nullable=True))
    op.add_column("runs", sa.Column("owner", sa.String(length=36), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "owner")
    op.drop_column("runs", "provenance")
    op.drop_column("runs", "best_weights")
