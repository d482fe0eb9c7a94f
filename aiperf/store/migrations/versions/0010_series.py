"""Repeated runs as a series: `aiperf run --repeat N` runs one config N times back to back, and a
ranking summarises the N results (the ruleset's series rule) rather than trusting one run, whose
OPS on a shared machine moves by a few percent from run to run.

runs.series is the series' id (a uuid4 hex, shared by its runs; indexed, since a series is read by
it) and runs.series_index its run's place in it, 1..N. Both are nullable: a run recorded before
this revision, or run on its own, belongs to no series.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("series", sa.String(length=36), nullable=True))
    op.add_column("runs", sa.Column("series_index", sa.Integer(), nullable=True))
    op.create_index("ix_runs_series", "runs", ["series"])


def downgrade() -> None:
    op.drop_index("ix_runs_series", table_name="runs")
    op.drop_column("runs", "series_index")
    op.drop_column("runs", "series")
