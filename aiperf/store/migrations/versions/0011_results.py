"""The results list: one row per run imported from a verified result package (`aiperf results
import`), so runs recorded in other databases, on other machines, are ranked in one list.

The event log's sha256 is unique (a constraint, not only a query before inserting): a package is
imported once, even by two imports at the same moment. The row keeps what the list shows and groups
by (system, nodes, accelerators, OPS, regulated score, MFU, division, ruleset, profile and workload
hash, series), the rules an invalid run breaks (why the list does not rank it) and the system
description, read from the verified event log.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "results",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("events_sha256", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("system_name", sa.String(length=255), nullable=False),
        sa.Column("submitter", sa.String(length=255), nullable=True),
        sa.Column("status", sa.String(length=64), nullable=True),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("accelerator_model", sa.String(length=255), nullable=True),
        sa.Column("accelerators", sa.Integer(), nullable=False),
        sa.Column("cores", sa.Integer(), nullable=True),
        sa.Column("workers", sa.Integer(), nullable=False),
        sa.Column("ops", sa.Float(), nullable=False),
        sa.Column("regulated_score", sa.Float(), nullable=False),
        sa.Column("mfu", sa.Float(), nullable=True),
        sa.Column("best_val_accuracy", sa.Float(), nullable=True),
        sa.Column("valid", sa.Boolean(), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=True),
        sa.Column("verified", sa.Boolean(), nullable=False),
        sa.Column("division", sa.String(length=8), nullable=True),
        sa.Column("ruleset", sa.String(length=64), nullable=True),
        sa.Column("profile", sa.String(length=64), nullable=False),
        sa.Column("workload_hash", sa.String(length=64), nullable=True),
        sa.Column("run_date", sa.DateTime(timezone=True), nullable=False),
        sa.Column("series", sa.String(length=36), nullable=True),
        sa.Column("series_index", sa.Integer(), nullable=True),
        sa.Column("package", sa.Text(), nullable=False),
        sa.Column("imported_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("system_description", sa.JSON(), nullable=True),
        sa.UniqueConstraint("events_sha256", name="result_event_log_unique"),
        sa.CheckConstraint("accelerators >= 0", name="result_accelerators_nonnegative"),
        sa.CheckConstraint("nodes >= 1", name="result_nodes_positive"),
        sa.CheckConstraint("division IN ('closed', 'open')", name="result_division_known"),
    )


def downgrade() -> None:
    op.drop_table("results")
