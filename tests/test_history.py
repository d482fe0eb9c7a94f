"""`aiperf history` and `aiperf compare`: the figures of the run_scores view, and the same answers
on SQLite and PostgreSQL for the same records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from test_history_data import plant_run, scaled_trials, system_facts
from typer.testing import CliRunner

from aiperf.cli.main import app
from aiperf.errors import UserError
from aiperf.history.query import compare, history, sparkline
from aiperf.store import Store

NIGHT = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)


def seed(url: str) -> dict[str, int]:
    """Two systems, two profiles, runs a night apart; node-a gets faster then slower."""
    store = Store.open(url)
    try:
        a, b = system_facts("node-a"), system_facts("node-b")
        ids = {}
        for night, factor in enumerate([1.0, 1.2, 0.9]):
            ids[f"a{night}"] = plant_run(
                store, a, started=NIGHT + timedelta(days=night), trials=scaled_trials(factor)
            )
        ids["a-quick"] = plant_run(
            store, a, profile="quick", started=NIGHT + timedelta(days=3, hours=1)
        )
        ids["b0"] = plant_run(
            store, b, started=NIGHT + timedelta(days=3), trials=scaled_trials(2.0), valid=False
        )
        return ids
    finally:
        store.close()


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "220"})
    assert result.exit_code == 0, result.output
    return result.output


def test_history_trend_per_system_and_profile(db_url):
    ids = seed(db_url)
    store = Store.open(db_url)
    try:
        rows = history(store, system="node-a", profile="nightly")
        everything = history(store)
    finally:
        store.close()
    assert [r.run_id for r in rows] == [ids["a0"], ids["a1"], ids["a2"]]
    assert rows[0].ops_change_pct is None
    assert rows[1].ops_change_pct == pytest.approx(20.0, rel=1e-3)
    assert rows[2].ops_change_pct == pytest.approx(-25.0, rel=1e-3)
    assert len(everything) == 5
    assert [r.valid for r in everything if r.hostname == "node-b"] == [False]
    # The quick-profile run on node-a does not count as node-a's nightly history.
    assert [r.ops_change_pct for r in everything if r.profile == "quick"] == [None]


def test_system_by_id_or_fingerprint_prefix(db_url):
    seed(db_url)
    store = Store.open(db_url)
    try:
        by_name = [r.run_id for r in history(store, system="node-b")]
        fingerprint = system_facts("node-b")["fingerprint"]
        assert [r.run_id for r in history(store, system=fingerprint[:10])] == by_name
        system_id = history(store, system="node-b")[0].system_id
        assert [r.run_id for r in history(store, system=str(system_id))] == by_name
        with pytest.raises(UserError, match="matches no system"):
            history(store, system="no-such-host")
    finally:
        store.close()


def test_compare_gives_percent_differences(db_url):
    ids = seed(db_url)
    store = Store.open(db_url)
    try:
        pair = compare(store, ids["a0"], ids["a1"])
        with pytest.raises(UserError, match="run 999 has no score"):
            compare(store, ids["a0"], 999)
    finally:
        store.close()
    figures = {f.figure: f for f in pair.figures}
    assert figures["OPS"].change_pct == pytest.approx(20.0, rel=1e-3)
    assert figures["regulated score"].change_pct == pytest.approx(20.0, rel=1e-3)
    assert figures["best val accuracy"].change_pct == pytest.approx(0.0)
    assert figures["elapsed"].a == pytest.approx(60.0)


def test_cli_history_and_compare(db_url):
    ids = seed(db_url)
    out = cli("history", "--db", db_url, "--system", "node-a", "--profile", "nightly")
    assert "+20.0%" in out and "-25.0%" in out and "trend of OPS" in out
    assert "node-b" not in out
    shown = cli("compare", str(ids["a0"]), str(ids["a2"]), "--db", db_url)
    assert "-10.0%" in shown and f"run {ids['a0']} vs run {ids['a2']}" in shown
    missing = CliRunner().invoke(app, ["compare", str(ids["a0"]), "12345", "--db", db_url])
    assert missing.exit_code == 2 and "run 12345 has no score" in missing.output
    unknown = CliRunner().invoke(app, ["history", "--db", db_url, "--system", "nowhere"])
    assert unknown.exit_code == 2 and "matches no system" in unknown.output


def test_same_answers_on_sqlite_and_postgresql(tmp_path, postgres_db):
    sqlite_url = f"sqlite:///{tmp_path / 'aiperf.db'}"
    ids_sqlite, ids_postgres = seed(sqlite_url), seed(postgres_db)
    assert ids_sqlite == ids_postgres
    outputs = {}
    for name, url in (("sqlite", sqlite_url), ("postgresql", postgres_db)):
        store = Store.open(url)
        try:
            data = [r.__dict__ for r in history(store)]
            pair = compare(store, ids_sqlite["a0"], ids_sqlite["b0"])
            trials = store.trial_summary(ids_sqlite["a1"])
        finally:
            store.close()
        outputs[name] = {
            "history": data,
            "compare": [(f.figure, f.a, f.b, f.change_pct) for f in pair.figures],
            "trials": trials,
            "history_cli": cli("history", "--db", url),
            "history_cli_filtered": cli(
                "history", "--db", url, "--system", "node-a", "--profile", "nightly"
            ),
            "compare_cli": cli(
                "compare", str(ids_sqlite["a0"]), str(ids_sqlite["b0"]), "--db", url
            ),
        }
    for key in outputs["sqlite"]:
        assert outputs["sqlite"][key] == outputs["postgresql"][key], key


def test_sparkline():
    assert sparkline([1, 2, 3]) == "▁▅█"
    assert sparkline([2, 2]) == "▅▅"
    assert sparkline([]) == ""
