"""The timed window's energy, per segment: each metered node's meters as measured from a few idle
seconds before the window to its end (aiperf.lifecycle.metering), or why a node has none, so a
run's energy, operations per watt and measurement level come from its records
(aiperf.results.energy).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("energy_windows", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "energy_windows")
