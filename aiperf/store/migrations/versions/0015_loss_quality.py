"""The LM track's quality: each trial's best validation loss of a complete epoch (nats per token),
kept as its best accuracy is, and the score's, which regulates an LM result's score
(aiperf.quality). Both stay NULL for the CNN track's runs. run_scores shows the score's, so
`aiperf history` and `compare` line up LM results by their quality.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-04
"""

import importlib.util
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def _revision(number: str, name: str):
    """An earlier revision's module, for the views it defines."""
    path = Path(__file__).with_name(f"{number}_{name}.py")
    spec = importlib.util.spec_from_file_location(f"aiperf_migration_{number}", path)
    # A .py file's location always has a spec, with a source loader.
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_scores_before() -> str:
    return _revision("0007", "utilisation_and_system")._run_scores()


def _run_scores() -> str:
    """0007's run_scores (as 0013 left it) with the score's best validation loss."""
    return _run_scores_before().replace(
        "       s.utilisation AS utilisation,\n",
        "       s.utilisation AS utilisation,\n       s.best_val_loss AS best_val_loss,\n",
    )


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS run_scores")
    op.add_column("trials", sa.Column("best_val_loss", sa.Float(), nullable=True))
    op.add_column("scores", sa.Column("best_val_loss", sa.Float(), nullable=True))
    op.execute(_run_scores())


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS run_scores")
    op.drop_column("scores", "best_val_loss")
    op.drop_column("trials", "best_val_loss")
    op.execute(_run_scores_before())
