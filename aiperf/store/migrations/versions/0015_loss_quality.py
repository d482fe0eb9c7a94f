"""The LM track's quality: each trial's best validation loss of a complete epoch (nats per token),
kept as its best accuracy is, and the score's, which regulates an LM result's score
(aiperf.results.quality). Both stay NULL for the CNN track's runs.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("trials", sa.Column("best_val_loss", sa.Float(), nullable=True))
    op.add_column("scores", sa.Column("best_val_loss", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("scores", "best_val_loss")
    op.drop_column("trials", "best_val_loss")
