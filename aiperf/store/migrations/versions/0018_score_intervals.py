"""How sure a score is: the 95% intervals of OPS and of the regulated score, computed with the score
from what the run measured (aiperf.results.uncertainty), in the scores table and in the results
an import lists.

Nullable: a run with fewer than two trials measured has none, and neither has any score or result
recorded before this revision (`aiperf verify` recomputes a run's from its records).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

COLUMNS = ("ops_low", "ops_high", "regulated_low", "regulated_high")
TABLES = ("scores", "results")


def upgrade() -> None:
    for table in TABLES:
        for name in COLUMNS:
            op.add_column(table, sa.Column(name, sa.Float(), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        for name in COLUMNS:
            op.drop_column(table, name)
