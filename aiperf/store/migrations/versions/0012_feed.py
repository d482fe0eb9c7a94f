"""The feed of a run: which input pipeline fed its trials (`data.feed`: "tf.data" here, "dali"
where a GPU-side decode is chosen), and each worker's feed rate against its devices' rate on
synthetic batches, both measured before the timed window (aiperf.train.feedrate): whether the
run was feed-bound, and by how much.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("data_feed", sa.String(length=32), nullable=True))
    op.add_column("runs", sa.Column("feed_rates", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "feed_rates")
    op.drop_column("runs", "data_feed")
