"""Repeated runs as a series (aiperf run --repeat): the series columns' migration, the summary's
figures, the ruleset's series rule."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import uuid

import pytest
import sqlalchemy as sa
from conftest import TINY_SIMULATED
from typer.testing import CliRunner

from aiperf import paths
from aiperf.cli.exit_codes import EXIT_INVALID
from aiperf.cli.main import app
from aiperf.report.series_package import SERIES_FILE
from aiperf.results import mllog
from aiperf.results.series import SeriesRule, SeriesSummary, enough_runs, summarise
from aiperf.store import RunStart, Store, database

# --- the migration ---------------------------------------------------------------------------------


def _series_columns(engine: sa.Engine) -> set[str]:
    return {c["name"] for c in sa.inspect(engine).get_columns("runs")} & {"series", "series_index"}


def test_series_columns_go_down_and_up_again(db_url):
    engine = database.open_engine(db_url)
    try:
        database.upgrade(engine)
        assert _series_columns(engine) == {"series", "series_index"}
        assert "ix_runs_series" in {i["name"] for i in sa.inspect(engine).get_indexes("runs")}
        database.downgrade(engine, "0009")
        assert _series_columns(engine) == set()
        database.upgrade(engine)
        assert _series_columns(engine) == {"series", "series_index"}
    finally:
        engine.dispose()


def test_the_store_records_and_reads_a_series(db_url):
    series = uuid.uuid4().hex
    with Store.open(db_url) as store:
        system = store.upsert_system(_SYSTEM)
        ids = [
            store.create_run(
                RunStart(
                    profile="quick",
                    config={},
                    seed=1,
                    budget_s=60.0,
                    workers=1,
                    series=series,
                    series_index=index,
                ),
                system_id=system,
            ).run_id
            for index in (2, 1, 3)
        ]
        alone = store.create_run(
            RunStart(profile="quick", config={}, seed=1, budget_s=60.0, workers=1),
            system_id=system,
        ).run_id
        runs = store.series_runs(series)
        assert [(r.id, r.series, r.series_index) for r in runs] == [
            (ids[1], series, 1),
            (ids[0], series, 2),
            (ids[2], series, 3),
        ]
        assert store.get_run(alone).series is None and store.get_run(alone).series_index is None
        assert store.series_runs(uuid.uuid4().hex) == []
        with pytest.raises(ValueError, match="index from 1"):
            store.create_run(
                RunStart(
                    profile="quick",
                    config={},
                    seed=1,
                    budget_s=60.0,
                    workers=1,
                    series=series,
                    series_index=0,
                ),
                system_id=system,
            )


_SYSTEM = {
    "fingerprint": "s" * 64,
    "hostname": "h",
    "cpu_model": "c",
    "cpu_cores": 2,
    "memory_bytes": 1 << 30,
    "gpus": {"count": 0, "models": []},
    "platform": "linux",
    "python_version": "3.11",
    "tensorflow_version": None,
    "keras_version": "3",
    "keras_backend": "tensorflow",
}


# --- the summary -----------------------------------------------------------------------------------


def test_summarise_known_values():
    values = [10.0, 12.0, 11.0, 30.0, 9.0]
    summary = summarise(values)
    assert summary == SeriesSummary(
        runs=5,
        median=11.0,
        minimum=9.0,
        maximum=30.0,
        cv=pytest.approx(statistics.stdev(values) / 14.4),
        ranked=11.0,  # no rule: the median
        # the mean's 95% interval: 14.4 +- t(4 freedoms) 2.776 x sqrt(77.3 / 5)
        low=pytest.approx(14.4 - 2.776 * (77.3 / 5) ** 0.5),
        high=pytest.approx(14.4 + 2.776 * (77.3 / 5) ** 0.5),
    )
    # squared deviations from 14.4 sum to 309.2; / (5 - 1) = 77.3
    assert summary.cv == pytest.approx(77.3**0.5 / 14.4)


def test_the_rule_drops_the_extremes_and_takes_the_mean_of_the_rest():
    values = [10.0, 12.0, 11.0, 30.0, 9.0]
    assert summarise(values, SeriesRule(runs=5, drop=1, statistic="mean")).ranked == 11.0
    assert summarise([1.0, 2.0, 4.0, 8.0], SeriesRule(runs=4, drop=1)).ranked == 3.0
    assert summarise([1.0, 2.0, 4.0, 8.0], SeriesRule(runs=3, drop=0)).ranked == 3.75
    assert (
        summarise([1.0, 2.0, 4.0, 8.0, 9.0], SeriesRule(runs=5, statistic="median")).ranked == 4.0
    )
    # Too few runs to drop any: all of them count (and the result is not a ranked one).
    assert summarise([1.0, 3.0], SeriesRule(runs=5, drop=1)).ranked == 2.0
    assert not enough_runs(2, SeriesRule(runs=5, drop=1))
    assert enough_runs(5, SeriesRule(runs=5, drop=1))
    assert enough_runs(1, None)


def test_one_run_has_no_spread_and_bad_figures_are_refused():
    assert summarise([7.0]) == SeriesSummary(1, 7.0, 7.0, 7.0, 0.0, 7.0)
    assert summarise([0.0, 0.0]).cv == 0.0
    with pytest.raises(ValueError, match="at least one"):
        summarise([])
    with pytest.raises(ValueError, match="finite"):
        summarise([1.0, float("nan")])
    with pytest.raises(ValueError, match="more runs than it drops"):
        SeriesRule(runs=2, drop=1)
    with pytest.raises(ValueError, match="mean or median"):
        SeriesRule(runs=3, statistic="mode")


# --- the command line: refusals (fast) ---------------------------------------------------------------


def test_repeat_with_resume_is_refused_in_one_line(tmp_path):
    db = f"sqlite:///{tmp_path / 'a.db'}"
    result = CliRunner().invoke(app, ["run", "--resume", "1", "--repeat", "2", "--db", db])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "--repeat" in lines[0] and "--resume" in lines[0], lines
    assert not (tmp_path / "a.db").exists(), "nothing recorded"


def test_repeat_below_one_is_refused():
    result = CliRunner().invoke(app, ["run", "--repeat", "0", "--budget", "5s"])
    assert result.exit_code == 2 and "--repeat" in result.output


def test_package_takes_a_run_or_a_series_and_an_unknown_series_is_one_line(tmp_path):
    db = f"sqlite:///{tmp_path / 'a.db'}"
    Store.open(db).close()
    both = CliRunner().invoke(app, ["package", "1", "--series", "x", "--to", str(tmp_path / "p")])
    assert both.exit_code == 2 and "RUN_ID" in both.output and "--series" in both.output
    unknown = CliRunner().invoke(
        app, ["package", "--series", "f" * 32, "--to", str(tmp_path / "p"), "--db", db]
    )
    assert unknown.exit_code == 2, unknown.output
    assert unknown.output.strip().count("\n") == 0 and "no run of series" in unknown.output
    assert not (tmp_path / "p").exists()


# --- a real series: aiperf run --repeat 3, packaged and verified (slow) ---------------------------------

# What these tests ask of a series (its records, summary, package, verification, and where a crash
# stops it) is the same whatever its trials train: its runs use the simulated trainer
# (tests/test_benchmark_flow.py trains Keras through the same flow).


@pytest.fixture(scope="module")
def repeated(prefect_api, tmp_path_factory):
    """`aiperf run --repeat 3` of a tiny config with a budget of seconds (so each run is invalid,
    too short: exit status 3), through the CLI and the real flow, from the folder it is run in."""
    folder = tmp_path_factory.mktemp("series")
    db = f"sqlite:///{folder / 'aiperf.db'}"
    settings = [f"--set={key}={json.dumps(value)}" for key, value in TINY_SIMULATED.items()]
    args = ["run", "--repeat", "3", "--budget", "3s", "--workers", "1", "--seed", "3"]
    args += ["--db", db, "--out", str(folder / "out"), *settings]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    return folder, db, result


@pytest.mark.slow
def test_repeat_records_a_series_and_prints_its_summary(repeated):
    _folder, db, result = repeated
    assert result.exit_code == EXIT_INVALID, result.output  # every run too short: invalid
    with Store.open_existing(db) as store:
        runs = store.list_runs()
    assert len(runs) == 3 and len({r.series for r in runs}) == 1
    series = runs[0].series
    assert series is not None and len(series) == 32 and int(series, 16) >= 0  # a uuid4 hex
    assert sorted(r.series_index for r in runs) == [1, 2, 3]
    output = " ".join(result.output.split())  # the console may wrap a long line anywhere
    assert f"series {series}" in output
    assert all(word in output for word in ("median", "minimum", "maximum", "CV")), output
    scores = [r.score for r in runs if r.score is not None]
    assert len(scores) == 3
    ops = summarise([s.ops for s in scores])
    assert f"{100 * ops.cv:.1f}%" in output, "the CV of OPS is printed"
    assert "a ranked closed result is 5 runs" in output
    assert "this series has 0 valid of 3 (too few to rank)" in output
    assert result.output.rstrip().splitlines()[-1].endswith("(exit status 3)")


@pytest.mark.slow
def test_the_series_round_trips_through_the_event_log_and_a_package(repeated, tmp_path):
    folder, db, _result = repeated
    with Store.open_existing(db) as store:
        runs = sorted(store.list_runs(), key=lambda r: r.series_index or 0)
    series = runs[0].series
    assert series is not None
    for record in runs:
        logged = mllog.read_run(paths.event_log_path(str(folder / "out"), db, record.id))
        assert (logged.run.series, logged.run.series_index) == (series, record.series_index)

    to = tmp_path / "package"
    packaged = CliRunner().invoke(
        app, ["package", "--series", series, "--to", str(to), "--db", db], env={"COLUMNS": "200"}
    )
    assert packaged.exit_code == 0, packaged.output
    assert sorted(p.name for p in to.iterdir()) == sorted(
        [SERIES_FILE, *(f"run-{r.id}" for r in runs)]
    )
    document = json.loads((to / SERIES_FILE).read_text())
    assert document["series"] == series and document["ruleset"] == "aiperf-rules-1.3"
    assert [(r["run_id"], r["index"]) for r in document["runs"]] == [
        (r.id, r.series_index) for r in runs
    ]
    assert document["rule"] == {"runs": 5, "drop": 1, "statistic": "mean"}
    assert document["enough_runs"] is False
    assert document["summary"]["ops"] == summarise([r.score.ops for r in runs]).to_dict() | {
        "ranked": summarise([r.score.ops for r in runs], SeriesRule(runs=5)).ranked
    }

    checked = CliRunner().invoke(app, ["verify", "--package", str(to), "--json"])
    assert checked.exit_code == 0, checked.output
    verdict = json.loads(checked.output)
    assert verdict["verified"] and verdict["series"] == series and len(verdict["runs"]) == 3
    assert {c["check"] for c in verdict["series_checks"]} == {
        "series_runs",
        "series_membership",
        "series_summary",
    }

    # A summary edited in series.json fails its check, by name; the runs still verify.
    document["summary"]["ops"]["median"] *= 1.1
    (to / SERIES_FILE).write_text(json.dumps(document))
    edited = CliRunner().invoke(app, ["verify", "--package", str(to), "--json"])
    assert edited.exit_code == 1
    assert json.loads(edited.output)["failed"] == ["series_summary"]
    # A run's package removed: the series is incomplete.
    shutil.rmtree(to / f"run-{runs[1].id}")
    document["summary"]["ops"]["median"] /= 1.1
    (to / SERIES_FILE).write_text(json.dumps(document))
    missing = CliRunner().invoke(app, ["verify", "--package", str(to)], env={"COLUMNS": "200"})
    assert missing.exit_code == 1 and "series_runs" in missing.output


# `aiperf run` whose second search crashes, in its own process as a user runs it (a crash's Prefect
# log lines and the CLI's own stay apart from the test session's streams).
CRASHING_AIPERF = """
from aiperf.cli.main import main
from aiperf.lifecycle import run

searched = run.search_until_deadline
calls = []


def search_then_crash(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
        raise RuntimeError("the disk is on fire")
    return searched(*args, **kwargs)


run.search_until_deadline = search_then_crash
main()
"""


@pytest.mark.slow
def test_a_run_that_crashes_stops_the_series_with_one_line(prefect_api, tmp_path):
    """The second run's search crashes: the series stops there, exit status 1, with one line naming
    where and why; the first run stays recorded and no third run starts."""
    from prefect.settings import PREFECT_API_URL

    db = f"sqlite:///{tmp_path / 'aiperf.db'}"
    settings = [f"--set={key}={json.dumps(value)}" for key, value in TINY_SIMULATED.items()]
    args = ["run", "--repeat", "3", "--budget", "2s", "--workers", "1", "--seed", "3"]
    args += ["--db", db, "--out", str(tmp_path / "out"), *settings]
    result = subprocess.run(
        [sys.executable, "-c", CRASHING_AIPERF, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "250", "PREFECT_API_URL": str(PREFECT_API_URL.value())},
    )
    assert result.returncode == 1, result.stdout + result.stderr
    (said,) = [
        line
        for line in result.stderr.splitlines()
        if line.startswith("series ") and "stopped:" in line
    ]
    assert "run 2 of 3 crashed (RuntimeError: the disk is on fire)" in said, said
    with Store.open_existing(db) as store:
        runs = sorted(store.list_runs(), key=lambda r: r.id)
    assert [(r.series_index, str(r.status)) for r in runs] == [(1, "completed"), (2, "failed")]
    assert f"runs finished before it: {runs[0].id} " in said
