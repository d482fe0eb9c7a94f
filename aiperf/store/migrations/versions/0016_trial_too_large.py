"""Trials that end `too_large`: their training step, compiled before they trained, needs more of a
device's memory than the device has (XLA's memory analysis against the ruleset's fit rule), so they
were never trained (aiperf.train.fit). A status of its own: such a proposal cost a compile, not an
out-of-memory after one, and is told apart from a trial whose device ran out while it trained.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-05
"""

import importlib.util
from pathlib import Path

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

TRIAL_STATUSES_BEFORE = (
    "status IN ('running', 'completed', 'stopped', 'failed', 'diverged', 'interrupted', "
    "'out_of_memory')"
)
TRIAL_STATUSES = (
    "status IN ('running', 'completed', 'stopped', 'failed', 'diverged', 'interrupted', "
    "'out_of_memory', 'too_large')"
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
    """The views as 0015 left them (0015's run_scores, 0002's trial_summary)."""
    op.execute(_revision("0015", "loss_quality")._run_scores())
    op.execute(_revision("0002", "history_views")._trial_summary())


def upgrade() -> None:
    _drop_views()
    with op.batch_alter_table("trials") as batch:
        batch.drop_constraint("trial_status_known", type_="check")
        batch.create_check_constraint("trial_status_known", TRIAL_STATUSES)
    _create_views()


def downgrade() -> None:
    _drop_views()
    op.execute("UPDATE trials SET status = 'failed' WHERE status = 'too_large'")
    with op.batch_alter_table("trials") as batch:
        batch.drop_constraint("trial_status_known", type_="check")
        batch.create_check_constraint("trial_status_known", TRIAL_STATUSES_BEFORE)
    _create_views()
