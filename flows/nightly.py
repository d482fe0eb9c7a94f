"""The `aiperf-nightly-regression` flow: run the nightly profile, then hold its score against the
baseline of this system.

    benchmark (the nightly profile, as a subflow: its trials, logs and artifacts show in the UI)
    -> compare with the median of the last valid runs of the same system and profile
    -> a markdown artifact with the comparison
    -> Completed, or Failed with both figures in the message when OPS or the regulated score fell
       more than its threshold

The first valid run on a system has nothing to compare with: it passes and sets the baseline.
The comparison itself is aiperf.history.regression (no Prefect), so it is tested on its own. The config
is validated once, here, and the benchmark subflow takes it as it is.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.states import Completed, Failed, State

from aiperf.config import BenchmarkConfig, load_config
from aiperf.errors import UserError
from aiperf.history.regression import (
    DEFAULT_THRESHOLDS,
    DEFAULT_WINDOW,
    RegressionVerdict,
    Thresholds,
    check_run,
)
from aiperf.lifecycle.parameters import (
    FlowProfile,
    Seed,
    Workers,
    check_parameters,
    flow_request,
)
from aiperf.lifecycle.run import ResultNotValid
from aiperf.store import Store
from aiperf_flows.benchmark import benchmark_config, refused


@task(name="compare_with_baseline", cache_policy=NO_CACHE)
def compare_with_baseline(
    db: str, run_id: int, thresholds: Thresholds, window: int
) -> RegressionVerdict:
    """The run against the median of the last `window` valid runs of its system and profile."""
    with Store.open_existing(db) as store:
        verdict = check_run(store, run_id, thresholds=thresholds, window=window)
    create_markdown_artifact(
        markdown=verdict.markdown(),
        key="aiperf-regression",
        description=f"aiperf nightly regression check of run {run_id}",
    )
    get_run_logger().info(verdict.message())
    return verdict


@flow(name="aiperf-nightly-regression", log_prints=True)
def nightly(
    profile: FlowProfile = "nightly",
    budget: str = "",
    workers: Workers = 0,
    db: str = "",
    seed: Seed = -1,
    out: str = "",
    overrides: dict[str, Any] = {},  # noqa: B006 (Prefect's form shows a JSON editor; never mutated)
    ops_threshold: float = DEFAULT_THRESHOLDS.ops,
    regulated_threshold: float = DEFAULT_THRESHOLDS.regulated_score,
    baseline_runs: int = DEFAULT_WINDOW,
):
    """Run the nightly profile and fail when its score fell below this system's baseline.

    The baseline is the median of the last `baseline_runs` valid runs of this system and profile.
    Parameters never carry a database password or a job setting (aiperf.lifecycle.parameters);
    "empty" ones keep the profile's value, as in the benchmark flow.

    Args:
        profile: A packaged profile, or NAME for NAME.yaml in the worker's AIPERF_PROFILE_DIR
            when the deployment was made; never a path.
        budget: Wall-clock budget of the timed search, e.g. 90s, 3m; empty: the profile's.
        workers: Dask workers, one trial each at a time; 0: the profile's (one per core, or per
            GPU).
        db: Database URL without a password; empty: the worker's AIPERF_DB_URL, else the
            profile's, else sqlite:///aiperf.db.
        seed: Seed of the data, the search and the weights; -1: the profile's.
        out: Folder for staged data, the run's files and its report; empty: the profile's.
        overrides: Profile settings by dotted name, as `aiperf run --set` takes them, e.g.
            {"train.epochs": [2, 4]}; job settings come from the profile only.
        ops_threshold: The share OPS may fall below the baseline before the night fails.
        regulated_threshold: The share the regulated score may fall before the night fails.
        baseline_runs: How many of the last valid runs make the baseline (their median).
    """
    try:
        check_parameters(db, overrides)
        thresholds = _thresholds(ops_threshold, regulated_threshold, baseline_runs)
        config = load_config(
            flow_request(profile, budget, workers, db, seed, out, "profile", overrides)
        )
        result = _night(config)
    except UserError as mistake:  # a bad parameter: its one line, no traceback
        return refused(mistake)
    verdict = compare_with_baseline(config.db, result["run_id"], thresholds, baseline_runs)
    return _ended(verdict)


def _thresholds(
    ops_threshold: float, regulated_threshold: float, baseline_runs: int
) -> Thresholds:
    """The night's thresholds and baseline size, checked: a bad one is the user's mistake."""
    try:
        thresholds = Thresholds(ops=ops_threshold, regulated_score=regulated_threshold)
    except ValueError as error:
        raise UserError(str(error)) from None
    if baseline_runs < 1:
        raise UserError(f"baseline_runs must be at least 1, got {baseline_runs}")
    return thresholds


def _night(config: BenchmarkConfig) -> dict[str, Any]:
    """The benchmark subflow's outcome, named for the night in the UI; an invalid result's too: its
    regression check says so, as for any invalid run."""
    night = f"nightly-{datetime.now(tz=UTC):%Y-%m-%d}"  # the subflow run's name, in the UI
    try:
        return benchmark_config.with_options(flow_run_name=night)(config=config)
    except ResultNotValid as not_valid:
        return not_valid.outcome


def _ended(verdict: RegressionVerdict) -> State:
    """Completed with the night's summary, or Failed carrying it when the score fell (or the result
    is not valid)."""
    summary = {
        "run_id": verdict.run_id,
        "ops": verdict.ops,
        "regulated_score": verdict.regulated_score,
        "baseline_ops": verdict.baseline.ops if verdict.baseline else None,
        "baseline_regulated_score": verdict.baseline.regulated_score if verdict.baseline else None,
        "regressions": verdict.regressions,
        "valid": verdict.valid,
    }
    if verdict.passed:
        return Completed(message=verdict.message(), data=summary)
    # A failed state's data must be an exception (Prefect raises it to a caller); this one carries
    # the summary, as a completed night's result does.
    return Failed(message=verdict.message(), data=Regressed(verdict.message(), summary))


class Regressed(Exception):
    """A night whose score fell below its baseline (or whose result is not valid): the flow run
    ends Failed with its message, and a caller gets the summary with it."""

    def __init__(self, message: str, summary: dict[str, Any]) -> None:
        super().__init__(message, summary)  # both in args: it pickles with its summary
        self.message, self.summary = message, summary

    def __str__(self) -> str:
        return self.message
