"""Crash recovery: each run's heartbeat, its timed window as segments (search_windows; a resumed run
adds one), and trials that end `interrupted` (running when their run crashed or was stopped).

`lost` is not stored: it is a running run whose heartbeat is older than the timeout, derived when a
run is read. Runs recorded before this revision get their one window as segment 0.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

import importlib.util
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TRIAL_STATUSES_BEFORE = "status IN ('running', 'completed', 'stopped', 'failed', 'diverged')"
TRIAL_STATUSES = (
    "status IN ('running', 'completed', 'stopped', 'failed', 'diverged', 'interrupted')"
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
    """The views exactly as 0005 left them."""
    op.execute(_revision("0005", "rules_and_verification")._run_scores())
    op.execute(_revision("0002", "history_views")._trial_summary())


def upgrade() -> None:
    _drop_views()
    op.add_column("runs", sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "search_windows",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("segment", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deadline", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("run_id", "segment", name="search_window_segment_unique"),
    )
    op.create_index("ix_search_windows_run_id", "search_windows", ["run_id"])
    op.execute(
        "INSERT INTO search_windows (run_id, segment, started_at, deadline, ended_at) "
        "SELECT id, 0, search_started_at, COALESCE(deadline, search_started_at), search_ended_at "
        "FROM runs WHERE search_started_at IS NOT NULL"
    )
    with op.batch_alter_table("trials") as batch:
        batch.drop_constraint("trial_status_known", type_="check")
        batch.create_check_constraint("trial_status_known", TRIAL_STATUSES)
    _create_views()


def downgrade() -> None:
    _drop_views()
    op.execute("UPDATE trials SET status = 'stopped' WHERE status = 'interrupted'")
    with op.batch_alter_table("trials") as batch:
        batch.drop_constraint("trial_status_known", type_="check")
        batch.create_check_constraint("trial_status_known", TRIAL_STATUSES_BEFORE)
    op.drop_index("ix_search_windows_run_id", table_name="search_windows")
    op.drop_table("search_windows")
    op.drop_column("runs", "heartbeat_at")
    _create_views()
