"""A result's energy, as its package's event log says it (aiperf.results.energy): the window's
joules, operations per joule and the measurement's level, and the meter kinds they came from, so
the results list can rank by efficiency, never across levels or meters (`--by ops-per-watt`).

Nullable: a run without a metered window has none, nor has any result imported before.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

COLUMNS = (
    ("energy_joules", sa.Float()),
    ("ops_per_watt", sa.Float()),
    ("energy_level", sa.String(16)),
    ("energy_meters", sa.String(64)),
)


def upgrade() -> None:
    for name, kind in COLUMNS:
        op.add_column("results", sa.Column(name, kind, nullable=True))


def downgrade() -> None:
    for name, _kind in COLUMNS:
        op.drop_column("results", name)
