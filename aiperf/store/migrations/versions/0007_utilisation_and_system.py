"""Where a trial's time goes and how much of the hardware a run used: each trial's phases (build,
count, compile and trace, train, evaluate, report), the run's precision, backend and XLA setting,
its workers' measured peaks, the system description read on the compute nodes, and the score's
model FLOPs utilisation (MFU) and window utilisation. run_scores shows the new figures.

Every new column is nullable: runs recorded before this revision did not measure them.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

import importlib.util
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TRIAL_PHASES = ("build_s", "count_s", "compile_s", "train_s", "evaluate_s", "report_s")


def _revision(number: str, name: str):
    """An earlier revision's module, for the views it defines."""
    path = Path(__file__).with_name(f"{number}_{name}.py")
    spec = importlib.util.spec_from_file_location(f"aiperf_migration_{number}", path)
    # A .py file's location always has a spec, with a source loader.
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_scores() -> str:
    """0005's run_scores with the run's precision and backend and the score's MFU and utilisation."""
    view = _revision("0005", "rules_and_verification")._run_scores()
    return view.replace(
        "       s.verified AS verified,\n",
        "       s.verified AS verified,\n"
        "       r.precision AS precision,\n"
        "       r.backend AS backend,\n"
        "       s.mfu AS mfu,\n"
        "       s.utilisation AS utilisation,\n",
    )


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS run_scores")
    for column in TRIAL_PHASES:
        op.add_column("trials", sa.Column(column, sa.Float(), nullable=True))
    op.add_column("runs", sa.Column("precision", sa.String(32), nullable=True))
    op.add_column("runs", sa.Column("backend", sa.String(32), nullable=True))
    op.add_column("runs", sa.Column("jit_compile", sa.Boolean(), nullable=True))
    op.add_column("runs", sa.Column("peak_flops", sa.Float(), nullable=True))
    op.add_column("runs", sa.Column("worker_peaks", sa.JSON(), nullable=True))
    op.add_column("runs", sa.Column("system_description", sa.JSON(), nullable=True))
    op.add_column("scores", sa.Column("mfu", sa.Float(), nullable=True))
    op.add_column("scores", sa.Column("utilisation", sa.Float(), nullable=True))
    op.execute(_run_scores())


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS run_scores")
    for column in ("utilisation", "mfu"):
        op.drop_column("scores", column)
    for column in (
        "system_description",
        "worker_peaks",
        "peak_flops",
        "jit_compile",
        "backend",
        "precision",
    ):
        op.drop_column("runs", column)
    for column in reversed(TRIAL_PHASES):
        op.drop_column("trials", column)
    op.execute(_revision("0005", "rules_and_verification")._run_scores())
