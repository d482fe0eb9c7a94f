"""The event log tells the same run as the database, fact by fact (aiperf.results.mllog.conformance;
issue 34: each fact recorded once, its event logged with it).

One quick run through the CLI and the flow (tiny config, a budget of seconds: invalid, too short)
per database engine: on SQLite with real Keras trials, so that every fact a real run records is in
it (the kept weights, the recount); on PostgreSQL with the simulated trainer's, since what differs
there is the engine that stores the facts, not what trains. Its log, rebuilt alone, must match the
database on every fact; and with any one fact's events dropped from a copy of the log, the check
must say which fact is missing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from conftest import TINY, TINY_SIMULATED, _fresh_postgres_database
from typer.testing import CliRunner

from aiperf import paths
from aiperf.cli.exit_codes import EXIT_INVALID
from aiperf.cli.main import app
from aiperf.results import mllog
from aiperf.results.mllog.conformance import check
from aiperf.store import Store
from aiperf.store.records import DatasetRecord, RunRecord

pytestmark = pytest.mark.slow  # a run per engine


class QuickRun:
    """A finished run: its database record, its dataset and its event log's path."""

    def __init__(self, record: RunRecord, dataset: DatasetRecord | None, log: Path) -> None:
        self.record, self.dataset, self.log = record, dataset, log


# The run's budget: the first of these in which it evaluates an epoch (the facts of an evaluation
# are values only then; a run cut before one logs eval_accuracy as null, which a log without it
# rebuilds just as well). 12 s is enough with every process held to 1.2 CPUs and TensorFlow's
# oneDNN off (a 2-vCPU Zen 3's speed and kernels), where 3 s was not; a slower machine gets a
# longer window, so the test waits for the work, not for what a fast machine does in seconds.
BUDGETS = ("12s", "40s")


def _quick_run(new_db: Callable[[], str], folder: Path, tiny: dict = TINY) -> QuickRun:
    settings = [f"--set={key}={json.dumps(value)}" for key, value in tiny.items()]
    for attempt, budget in enumerate(BUDGETS):
        db, out = new_db(), folder / f"out-{attempt}"
        args = ["run", "--budget", budget, "--workers", "1", "--seed", "3", "--db", db]
        args += ["--out", str(out), *settings]
        result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == EXIT_INVALID, result.output  # too short: scored, invalid
        with Store.open_existing(db) as store:
            (listed,) = store.list_runs()
            record = store.get_run(listed.id)
            dataset = store.run_dataset(listed.id)
        assert record.trials and any(t.epochs for t in record.trials), "the run trained"
        if any(e.val_accuracy is not None for t in record.trials for e in t.epochs):
            return QuickRun(record, dataset, paths.event_log_path(str(out), db, record.id))
    pytest.fail(f"no epoch was evaluated in a window of {BUDGETS[-1]}")


@pytest.fixture(scope="module")
def quick_run(prefect_api, tmp_path_factory) -> QuickRun:
    folder = tmp_path_factory.mktemp("conformance-sqlite")
    files = iter(range(len(BUDGETS)))
    return _quick_run(lambda: f"sqlite:///{folder / f'aiperf-{next(files)}.db'}", folder)


@pytest.fixture(scope="module")
def postgres_quick_run(prefect_api, tmp_path_factory):
    """The same run, its trials simulated, on the test PostgreSQL server (infra/with-services.sh; skipped without it,
    except in CI, as conftest's postgres_db): each attempt in a new database, all dropped after."""
    server = os.environ.get("AIPERF_TEST_POSTGRES_URL")
    if not server:
        message = "AIPERF_TEST_POSTGRES_URL is not set; run under infra/with-services.sh"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message)
        pytest.skip(message)
    with ExitStack() as databases:

        def new_db() -> str:
            return databases.enter_context(contextmanager(_fresh_postgres_database)(server))

        yield _quick_run(new_db, tmp_path_factory.mktemp("conformance-postgresql"), TINY_SIMULATED)


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_the_log_alone_rebuilds_every_fact_the_database_holds(engine, request):
    run: QuickRun = request.getfixturevalue(
        "quick_run" if engine == "sqlite" else "postgres_quick_run"
    )
    mismatches = check(run.record, run.dataset, mllog.read_events(run.log))
    assert [str(m) for m in mismatches] == []
    # The comparison saw the whole run: its trials, their epochs, its window and its score.
    logged = mllog.read_run(run.log)
    assert [t.trial_key for t in logged.run.trials] == [t.trial_key for t in run.record.trials]
    assert sum(len(t.epochs) for t in logged.run.trials) >= 1
    assert len(logged.run.windows) == 1 and logged.run.score is not None
    assert logged.dataset is not None and logged.run.verification is not None


# For each key that carries a fact of the database: the fact the check must report when the log has
# none of that key's events. "log": the log cannot be rebuilt at all without it (it carries the
# run's identity, a trial's or an epoch's), and the reason names the key.
FACT_OF_KEY = {
    mllog.RUN_START: "log",
    mllog.RUN_STOP: "run.stored_status",
    mllog.SUBMISSION_DIVISION: "log",
    mllog.RULESET: "log",
    mllog.SEED: "run.seed",
    mllog.CONFIG: "log",
    mllog.SYSTEM_FINGERPRINT: "log",
    mllog.SYSTEM_DESCRIPTION: "run.system_description",
    mllog.PROVENANCE: "run.provenance",
    mllog.RUN_RESOURCES: "run.precision",
    mllog.DATASET: "dataset",
    mllog.STAGING_STOP: "run.staging_s",
    mllog.SEARCH_START: "log",
    mllog.SEARCH_STOP: "window.ended_at",
    mllog.TRIAL_START: "log",
    mllog.TRIAL_PLACEMENT: "trial.worker",
    mllog.OPS_PER_SAMPLE: "trial.train_ops_per_sample",
    mllog.TRIAL_STOP: "trial.ended_at",
    mllog.TRIAL_PHASES: "trial.phases",
    mllog.EPOCH_START: "log",
    mllog.TRAIN_SAMPLES: "log",
    mllog.EVAL_SAMPLES: "log",
    mllog.EVAL_ACCURACY: "epoch.val_accuracy",
    mllog.EPOCH_STOP: "log",
    mllog.SCORE: "score",
    mllog.BEST_WEIGHTS: "run.best_weights",
    mllog.VERIFICATION: "run.verification",
}
# Keys whose events carry no fact the database holds, or none in this run.
NO_DATABASE_FACT = {
    mllog.SUBMISSION_BENCHMARK: "aiperf's version: not a column of the database",
    mllog.STAGING_START: "the staging's start: the database keeps its seconds (staging_stop)",
    mllog.SERIES: "only a run of a series (--repeat) has one; test_series checks its round trip",
}


def test_every_key_is_either_a_fact_or_says_why_not():
    assert set(FACT_OF_KEY) | set(NO_DATABASE_FACT) == set(mllog.KEYS)
    assert not set(FACT_OF_KEY) & set(NO_DATABASE_FACT)


@pytest.mark.parametrize("key", list(FACT_OF_KEY))
def test_the_check_reports_a_fact_whose_events_are_missing(key, quick_run, tmp_path):
    copy = tmp_path / "events.log"
    copy.write_text(quick_run.log.read_text())
    events = mllog.read_events(copy)
    kept = [e for e in events if e.key != key]
    assert len(kept) < len(events), f"the quick run logged no {key} event"
    mismatches = check(quick_run.record, quick_run.dataset, kept)
    fact = FACT_OF_KEY[key]
    reported = [m for m in mismatches if m.fact == fact]
    assert reported, f"without {key}: {[str(m) for m in mismatches]}"
    if fact == "log":
        assert key in str(reported[0].log), reported[0]
