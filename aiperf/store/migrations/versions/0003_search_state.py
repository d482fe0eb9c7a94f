"""Search state: the morphism behind each trial, and the oracle's state per run.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN (no table rebuild), so views over trials stay valid on SQLite.
    op.add_column("trials", sa.Column("operator", sa.Text(), nullable=True))
    op.create_table(
        "search_states",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "run_id",
            sa.Integer(),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            nullable=False,
            unique=True,
        ),
        sa.Column("oracle", sa.String(32), nullable=False),
        sa.Column("state", sa.JSON(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("search_states")
    # A plain DROP COLUMN (SQLite >= 3.35 has it): a batch rebuild of trials fails under its views.
    op.drop_column("trials", "operator")
