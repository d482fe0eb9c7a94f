"""Trials that end `out_of_memory`: the device's memory ran out (XLA's RESOURCE_EXHAUSTED,
TensorFlow's ResourceExhaustedError), a status of its own so a batch too big for the GPU is told
apart from a bug (aiperf.train.gpu_failures).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03
"""

import importlib.util
from pathlib import Path

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

TRIAL_STATUSES_BEFORE = (
    "status IN ('running', 'completed', 'stopped', 'failed', 'diverged', 'interrupted')"
)
TRIAL_STATUSES = (
    "status IN ('running', 'completed', 'stopped', 'failed', 'diverged', 'interrupted', "
    "'out_of_memory')"
)


def _revision(number: str, name: str):
    """An earlier revision's module, for the views it defines (SQLite rebuilds trials under them)."""
    path = Path(__file__).with_name(f"{number}_{name}.py")
    spec = importlib.util.spec_from_file_location(f"aiperf_migration_{number}", path)
    # A .py file's location always has a spec, with a source loader.
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _drop_views() -> None:
    # SQLite cannot rebuild a table that a view reads: the views go first and come back last.
    op.execute("DROP VIEW IF EXISTS trial_summary")
    op.execute("DROP VIEW IF EXISTS run_scores")


def _create_views() -> None:
    """The views as 0012 left them (0007's run_scores, 0002's trial_summary; 0012 adds columns
    only)."""
    op.execute(_revision("0007", "utilisation_and_system")._run_scores())
    op.execute(_revision("0002", "history_views")._trial_summary())


def upgrade() -> None:
    _drop_views()
    with op.batch_alter_table("trials") as batch:
        batch.drop_constraint("trial_status_known", type_="check")
        batch.create_check_constraint("trial_status_known", TRIAL_STATUSES)
    _create_views()


def downgrade() -> None:
    _drop_views()
    op.execute("UPDATE trials SET status = 'failed' WHERE status = 'out_of_memory'")
    with op.batch_alter_table("trials") as batch:
        batch.drop_constraint("trial_status_known", type_="check")
        batch.create_check_constraint("trial_status_known", TRIAL_STATUSES_BEFORE)
    _create_views()
