"""What a grown trial inherited: the parent's epoch whose kept weights its model grew from (the LM
track's search.inherit: a child continues its parent, aiperf.train.kept.inherited_lm). With the
trial's parent (parent_trial_id) it names the weights exactly, even when the parent kept a better
epoch later.

Nullable: a seed, a child that started fresh, and every trial recorded before this revision have
none.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("trials", sa.Column("inherited_epoch", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("trials", "inherited_epoch")
