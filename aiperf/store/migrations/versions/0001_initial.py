"""Initial schema: systems, runs, datasets, trials, epochs, scores.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "systems",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False, unique=True),
        sa.Column("hostname", sa.String(255), nullable=False),
        sa.Column("cpu_model", sa.String(255), nullable=False),
        sa.Column("cpu_cores", sa.Integer(), nullable=False),
        sa.Column("memory_bytes", sa.BigInteger(), nullable=False),
        sa.Column("gpus", sa.JSON(), nullable=False),
        sa.Column("platform", sa.String(255), nullable=False),
        sa.Column("python_version", sa.String(32), nullable=False),
        sa.Column("tensorflow_version", sa.String(32), nullable=True),
        sa.Column("keras_version", sa.String(32), nullable=False),
        sa.Column("keras_backend", sa.String(32), nullable=False),
        sa.Column("first_seen_at", TZ, nullable=False),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("system_id", sa.Integer(), sa.ForeignKey("systems.id"), nullable=False),
        sa.Column("profile", sa.String(64), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("budget_s", sa.Float(), nullable=False),
        sa.Column("workers", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", TZ, nullable=False),
        sa.Column("search_started_at", TZ, nullable=True),
        sa.Column("deadline", TZ, nullable=True),
        sa.Column("search_ended_at", TZ, nullable=True),
        sa.Column("flow_run_id", sa.String(64), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "status IN ('running', 'completed', 'failed', 'interrupted')", name="run_status_known"
        ),
        sa.CheckConstraint("budget_s > 0", name="run_budget_positive"),
        sa.CheckConstraint("workers >= 1", name="run_workers_positive"),
    )
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "run_id",
            sa.Integer(),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            nullable=False,
            unique=True,
        ),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("train_samples", sa.Integer(), nullable=False),
        sa.Column("val_samples", sa.Integer(), nullable=False),
        sa.Column("classes", sa.Integer(), nullable=False),
        sa.Column("manifest", sa.JSON(), nullable=False),
    )
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("trial_key", sa.String(32), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("parent_trial_id", sa.Integer(), sa.ForeignKey("trials.id"), nullable=True),
        sa.Column("architecture", sa.JSON(), nullable=False),
        sa.Column("hyperparameters", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("worker", sa.String(255), nullable=True),
        sa.Column("started_at", TZ, nullable=False),
        sa.Column("ended_at", TZ, nullable=True),
        sa.Column("parameters", sa.BigInteger(), nullable=True),
        sa.Column("train_ops_per_sample", sa.BigInteger(), nullable=True),
        sa.Column("eval_ops_per_sample", sa.BigInteger(), nullable=True),
        sa.Column("tensor_train_ops_per_sample", sa.BigInteger(), nullable=True),
        sa.Column("tensor_eval_ops_per_sample", sa.BigInteger(), nullable=True),
        sa.Column("best_val_accuracy", sa.Float(), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.UniqueConstraint("run_id", "trial_key", name="trial_key_unique_in_run"),
        sa.CheckConstraint(
            "status IN ('running', 'completed', 'stopped', 'failed')", name="trial_status_known"
        ),
    )
    op.create_index("ix_trials_run_id", "trials", ["run_id"])
    op.create_table(
        "epochs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "trial_id",
            sa.Integer(),
            sa.ForeignKey("trials.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("started_at", TZ, nullable=False),
        sa.Column("ended_at", TZ, nullable=False),
        sa.Column("samples_trained", sa.BigInteger(), nullable=False),
        sa.Column("samples_evaluated", sa.BigInteger(), nullable=False),
        sa.Column("loss", sa.Float(), nullable=True),
        sa.Column("accuracy", sa.Float(), nullable=True),
        sa.Column("val_loss", sa.Float(), nullable=True),
        sa.Column("val_accuracy", sa.Float(), nullable=True),
        sa.Column("complete", sa.Boolean(), nullable=False),
        sa.UniqueConstraint("trial_id", "epoch", name="epoch_unique_in_trial"),
        sa.CheckConstraint(
            "samples_trained >= 0 AND samples_evaluated >= 0", name="epoch_samples_nonnegative"
        ),
        sa.CheckConstraint("ended_at >= started_at", name="epoch_ends_after_start"),
    )
    op.create_index("ix_epochs_trial_id", "epochs", ["trial_id"])
    op.create_table(
        "scores",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "run_id",
            sa.Integer(),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            nullable=False,
            unique=True,
        ),
        sa.Column("elapsed_s", sa.Float(), nullable=False),
        sa.Column("total_ops", sa.Float(), nullable=False),
        sa.Column("ops", sa.Float(), nullable=False),
        sa.Column("tensor_ops", sa.Float(), nullable=False),
        sa.Column("best_val_accuracy", sa.Float(), nullable=True),
        sa.Column("val_samples", sa.Integer(), nullable=False),
        sa.Column("regulated_score", sa.Float(), nullable=False),
        sa.Column("trials_completed", sa.Integer(), nullable=False),
        sa.Column("samples_trained", sa.BigInteger(), nullable=False),
        sa.Column("samples_evaluated", sa.BigInteger(), nullable=False),
        sa.Column("valid", sa.Boolean(), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("computed_at", TZ, nullable=False),
        sa.CheckConstraint("elapsed_s > 0", name="score_elapsed_positive"),
    )


def downgrade() -> None:
    for table in ("scores", "epochs", "trials", "datasets", "runs", "systems"):
        op.drop_table(table)
