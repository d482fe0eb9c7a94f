"""Rules and verification: each run's ruleset, division, deviations and workload hash; each score's
ruleset and verification; trials may end `diverged`. run_scores gains the division, the workload
hash, the ruleset and the verification, and compares a run only with earlier runs of the same
system, profile, division and workload.

Runs recorded before this revision had no rules: they are `open`, with that as their deviation.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

import importlib.util
from pathlib import Path

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

TRIAL_STATUSES_BEFORE = "status IN ('running', 'completed', 'stopped', 'failed')"
TRIAL_STATUSES = "status IN ('running', 'completed', 'stopped', 'failed', 'diverged')"


def _views_of_0002():
    """Revision 0002's module, for its trial_summary and the views a downgrade restores."""
    path = Path(__file__).with_name("0002_history_views.py")
    spec = importlib.util.spec_from_file_location("aiperf_migration_0002", path)
    # A .py file's location always has a spec, with a source loader.
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_scores() -> str:
    window = "PARTITION BY r.system_id, r.profile, r.division, r.config_hash ORDER BY r.created_at, r.id"
    return f"""
CREATE VIEW run_scores AS
SELECT r.id AS run_id,
       r.system_id AS system_id,
       sy.fingerprint AS fingerprint,
       sy.hostname AS hostname,
       r.profile AS profile,
       r.division AS division,
       r.config_hash AS config_hash,
       s.ruleset AS ruleset,
       r.workers AS workers,
       r.budget_s AS budget_s,
       r.seed AS seed,
       r.status AS status,
       r.created_at AS created_at,
       s.elapsed_s AS elapsed_s,
       s.total_ops AS total_ops,
       s.ops AS ops,
       s.tensor_ops AS tensor_ops,
       s.regulated_score AS regulated_score,
       s.best_val_accuracy AS best_val_accuracy,
       s.trials_completed AS trials_completed,
       s.valid AS valid,
       s.verified AS verified,
       LAG(s.ops) OVER ({window}) AS previous_ops,
       LAG(s.regulated_score) OVER ({window}) AS previous_regulated_score,
       100.0 * (s.ops - LAG(s.ops) OVER ({window})) / NULLIF(LAG(s.ops) OVER ({window}), 0)
         AS ops_change_pct
FROM runs r
JOIN systems sy ON sy.id = r.system_id
JOIN scores s ON s.run_id = r.id
"""


def _drop_views() -> None:
    # SQLite cannot rebuild a table that a view reads: the views go first and come back last.
    op.execute("DROP VIEW IF EXISTS trial_summary")
    op.execute("DROP VIEW IF EXISTS run_scores")


def upgrade() -> None:
    _drop_views()
    op.add_column("runs", sa.Column("ruleset", sa.String(64), nullable=True))
    op.add_column("runs", sa.Column("division", sa.String(8), nullable=True))
    op.add_column("runs", sa.Column("deviations", sa.JSON(), nullable=True))
    op.add_column("runs", sa.Column("config_hash", sa.String(64), nullable=True))
    runs = sa.table("runs", sa.column("division", sa.String), sa.column("deviations", sa.JSON))
    op.execute(
        runs.update().values(division="open", deviations=["recorded before aiperf had rulesets"])
    )
    op.add_column("scores", sa.Column("ruleset", sa.String(64), nullable=True))
    op.add_column("scores", sa.Column("verified", sa.Boolean(), nullable=True))
    op.add_column("scores", sa.Column("verification", sa.JSON(), nullable=True))
    with op.batch_alter_table("trials") as batch:
        batch.drop_constraint("trial_status_known", type_="check")
        batch.create_check_constraint("trial_status_known", TRIAL_STATUSES)
    with op.batch_alter_table("runs") as batch:
        batch.create_check_constraint("run_division_known", "division IN ('closed', 'open')")
    op.execute(_run_scores())
    op.execute(_views_of_0002()._trial_summary())


def downgrade() -> None:
    _drop_views()
    op.execute("UPDATE trials SET status = 'failed' WHERE status = 'diverged'")
    with op.batch_alter_table("trials") as batch:
        batch.drop_constraint("trial_status_known", type_="check")
        batch.create_check_constraint("trial_status_known", TRIAL_STATUSES_BEFORE)
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint("run_division_known", type_="check")
    for column in ("verification", "verified", "ruleset"):
        op.drop_column("scores", column)
    for column in ("config_hash", "deviations", "division", "ruleset"):
        op.drop_column("runs", column)
    views = _views_of_0002()
    op.execute(views._run_scores())
    op.execute(views._trial_summary())
