"""History views: run_scores (one row per scored run, with the change from the previous run of
the same system and profile) and trial_summary (one row per trial with its epochs added up).

Users query these instead of re-deriving joins; `aiperf history`, `aiperf compare` and the
regression check read them too, so the figures a user gets from SQL and from the CLI are the same.
The only engine-specific part is turning two timestamps into seconds.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def _seconds_between(start: str, end: str) -> str:
    """SQL for (end - start) in seconds, as a float, on the connected engine."""
    if op.get_bind().dialect.name == "postgresql":
        return f"EXTRACT(EPOCH FROM ({end} - {start}))::double precision"

    # SQLite stores UTC timestamps as text, 'YYYY-MM-DD HH:MM:SS.ffffff'. julianday() would lose
    # tens of microseconds (a day count near 2.5 million in a double), so whole seconds and
    # microseconds are read separately and the answer matches PostgreSQL's exactly.
    def whole(ts: str) -> str:
        return f"CAST(strftime('%s', substr({ts}, 1, 19)) AS INTEGER)"

    def micro(ts: str) -> str:
        return f"CAST(substr({ts}, 21, 6) AS INTEGER)"

    return f"(({whole(end)} - {whole(start)}) + ({micro(end)} - {micro(start)}) / 1000000.0)"


def _run_scores() -> str:
    window = "PARTITION BY r.system_id, r.profile ORDER BY r.created_at, r.id"
    return f"""
CREATE VIEW run_scores AS
SELECT r.id AS run_id,
       r.system_id AS system_id,
       sy.fingerprint AS fingerprint,
       sy.hostname AS hostname,
       r.profile AS profile,
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
       LAG(s.ops) OVER ({window}) AS previous_ops,
       LAG(s.regulated_score) OVER ({window}) AS previous_regulated_score,
       100.0 * (s.ops - LAG(s.ops) OVER ({window})) / NULLIF(LAG(s.ops) OVER ({window}), 0)
         AS ops_change_pct
FROM runs r
JOIN systems sy ON sy.id = r.system_id
JOIN scores s ON s.run_id = r.id
"""


def _trial_summary() -> str:
    return f"""
CREATE VIEW trial_summary AS
SELECT t.run_id AS run_id,
       t.id AS trial_id,
       t.trial_key AS trial_key,
       t.number AS number,
       t.status AS status,
       t.worker AS worker,
       t.started_at AS started_at,
       t.ended_at AS ended_at,
       {_seconds_between("t.started_at", "t.ended_at")} AS duration_s,
       t.parameters AS parameters,
       t.train_ops_per_sample AS train_ops_per_sample,
       t.eval_ops_per_sample AS eval_ops_per_sample,
       t.best_val_accuracy AS best_val_accuracy,
       COUNT(e.id) AS epochs,
       CAST(COALESCE(SUM(CASE WHEN e.complete THEN 1 ELSE 0 END), 0) AS BIGINT) AS complete_epochs,
       CAST(COALESCE(SUM(e.samples_trained), 0) AS BIGINT) AS samples_trained,
       CAST(COALESCE(SUM(e.samples_evaluated), 0) AS BIGINT) AS samples_evaluated,
       COALESCE(SUM(CAST(e.samples_trained AS DOUBLE PRECISION) * t.train_ops_per_sample
                    + CAST(e.samples_evaluated AS DOUBLE PRECISION) * t.eval_ops_per_sample), 0)
         AS total_ops
FROM trials t
LEFT JOIN epochs e ON e.trial_id = t.id
GROUP BY t.id
"""


def upgrade() -> None:
    op.execute(_run_scores())
    op.execute(_trial_summary())


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS trial_summary")
    op.execute("DROP VIEW IF EXISTS run_scores")
