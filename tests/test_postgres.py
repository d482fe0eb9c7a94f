"""`--db postgresql+psycopg://...` works as SQLite does: a real benchmark run through the Prefect
flow records into a real PostgreSQL server, and the CLI reads it back (show, history, compare, report)."""

from __future__ import annotations

import pytest
from conftest import TINY_SIMULATED, scored
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from aiperf.cli.main import app


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "220"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.slow
def test_benchmark_run_on_postgresql(prefect_api, postgres_db, tmp_path, monkeypatch):
    from aiperf_flows.benchmark import benchmark

    # As on a deployment's worker: the URL, password included, comes from the environment, never from a
    # flow parameter (Prefect stores those). Its trials are simulated: what is tested is what the run
    # records on PostgreSQL and reads back (a run that trains Keras on PostgreSQL is
    # tests/test_log_conformance.py's).
    monkeypatch.setenv("AIPERF_DB_URL", postgres_db)
    first = scored(
        benchmark,
        profile="quick",
        budget="8s",
        workers=1,
        seed=1,
        out=str(tmp_path / "out"),
        overrides=TINY_SIMULATED,
    )
    second = scored(
        benchmark,
        profile="quick",
        budget="8s",
        workers=1,
        seed=1,
        out=str(tmp_path / "out"),
        overrides=TINY_SIMULATED,
    )
    engine = create_engine(postgres_db)
    try:
        with engine.connect() as sql:
            status = sql.execute(text("SELECT status FROM runs ORDER BY id")).scalars().all()
            recomputed = sql.execute(
                text("""
                SELECT SUM(e.samples_trained * t.train_ops_per_sample + e.samples_evaluated * t.eval_ops_per_sample)
                       / EXTRACT(EPOCH FROM (r.search_ended_at - r.search_started_at))
                FROM runs r JOIN trials t ON t.run_id = r.id JOIN epochs e ON e.trial_id = t.id
                WHERE r.id = :run GROUP BY r.id, r.search_ended_at, r.search_started_at"""),
                {"run": first["run_id"]},
            ).scalar_one()
            view = sql.execute(
                text("SELECT run_id, ops, previous_ops FROM run_scores ORDER BY run_id")
            ).all()
    finally:
        engine.dispose()
    assert status == ["completed", "completed"]
    assert float(recomputed) == pytest.approx(first["ops"], rel=1e-6)
    assert [(r[0], r[1]) for r in view] == [
        (first["run_id"], pytest.approx(first["ops"])),
        (second["run_id"], pytest.approx(second["ops"])),
    ]
    assert view[1][2] == pytest.approx(first["ops"])

    assert "regulated score" in cli("show", str(first["run_id"]), "--db", postgres_db)
    assert "trend of OPS" in cli("history", "--db", postgres_db, "--profile", "quick")
    assert "difference" in cli(
        "compare", str(first["run_id"]), str(second["run_id"]), "--db", postgres_db
    )
    page = tmp_path / "report.html"
    cli("report", str(second["run_id"]), "--db", postgres_db, "--to", str(page))
    assert 'id="plot-history"' in page.read_text()
