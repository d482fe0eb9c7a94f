"""Datasets staged by `aiperf stage` on their own: run_id may be empty; when each was staged.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("datasets", sa.Column("staged_at", sa.DateTime(timezone=True), nullable=True))
    # No view reads datasets, so SQLite may rebuild it to relax the NOT NULL.
    with op.batch_alter_table("datasets") as batch:
        batch.alter_column("run_id", existing_type=sa.Integer(), nullable=True)


def downgrade() -> None:
    op.execute("DELETE FROM datasets WHERE run_id IS NULL")
    with op.batch_alter_table("datasets") as batch:
        batch.alter_column("run_id", existing_type=sa.Integer(), nullable=False)
    op.drop_column("datasets", "staged_at")
