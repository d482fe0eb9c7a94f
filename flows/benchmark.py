"""The `aiperf-benchmark` flow: aiperf.lifecycle.run's lifecycle, its stages as Prefect tasks.

    record the system and the run -> start the workers           (plain steps, not tasks)
    -> stage_dataset -> one trial-<key> task per trial on the Dask workers until the deadline
    -> score -> verify -> report (table, summary, score over time and the HTML report as artifacts)

The story lives in aiperf/lifecycle/run.py and its steps in the modules beside it (staging,
prepare, scoring, stages); this file is wiring only, so the UI shows every stage and every trial
with its logs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import dask
from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_link_artifact,
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.context import EngineContext, get_run_context
from prefect.states import Completed, Failed, State
from prefect_dask import DaskTaskRunner

from aiperf.cluster import trial_resources
from aiperf.cluster.broadcast import on_every_worker
from aiperf.config import TOKEN_KINDS, BenchmarkConfig, load_config
from aiperf.data.staging import Manifest
from aiperf.errors import UserError
from aiperf.lifecycle import scoring, staging
from aiperf.lifecycle.live import LiveFigures
from aiperf.lifecycle.parameters import (
    FlowCluster,
    FlowProfile,
    RunId,
    Seed,
    Workers,
    check_parameters,
    check_resumed_config,
    flow_request,
)
from aiperf.lifecycle.stages import Stages, TrialRunner
from aiperf.report.served import file_link
from aiperf.report.summary import markdown, score_rows
from aiperf.results.evidence import Evaluator
from aiperf.results.score import ScoreResult
from aiperf.status import TrialStatus
from aiperf.store import CheckRecord, RunClaim, Store
from aiperf.train.messages import TrialRequest, TrialResult
from aiperf.train.worker import train_on_worker
from aiperf.urls import database_url


class _UserErrorsInOneLine(logging.Filter):
    """Prefect's task engine logs every failed task run with its traceback. A task that fails on
    a user's mistake (a broken dataset, a disk too small for --out) fails with its one line, which
    names the problem and the fix; a traceback would bury it under code that has no fault."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], UserError):
            record.exc_info = None
            record.exc_text = None
        return True


logging.getLogger("prefect.task_runs").addFilter(_UserErrorsInOneLine())


@task(name="stage_dataset", cache_policy=NO_CACHE)
def stage_dataset(
    config: BenchmarkConfig, claim: RunClaim, scheduler_address: str, security: Any = None
) -> Manifest:
    logger = get_run_logger()
    shown: dict[str, int] = {}

    def log_progress(done: int, total: int, what: str) -> None:  # every tenth of the work
        step = 10 * done // max(total, 1)
        if shown.get(what) != step:
            shown[what] = step
            logger.info("%s: %d of %d", what, done, total)

    manifest = staging.stage_dataset(
        config, claim, scheduler_address, security, on_progress=log_progress, logger=logger
    )
    logger.info(
        "staged %s (%d train, %d val %s, sha256 %s)",
        manifest.name,
        manifest.train_samples,
        manifest.val_samples,
        "windows" if config.data.kind in TOKEN_KINDS else "images",
        manifest.sha256[:12],
    )
    return manifest


@task(name="train_trial", cache_policy=NO_CACHE, task_run_name="trial-{request.trial_key}")
def train_trial(request: TrialRequest, trainer: str = "keras") -> TrialResult | State:
    """Runs on a Dask worker; its reports go back to the flow as Dask events, as they happen.

    A trial the run's deadline stopped ends in a completed state named Stopped: the UI shows it
    stopped, not as one that ran its course, yet not as a failure either (its epochs count, as
    the benchmark means them to), and its result reaches the flow as any completed trial's."""
    result = train_on_worker(request, trainer)
    if result.status == TrialStatus.FAILED:
        get_run_logger().warning("trial %s failed: %s", request.trial_key, result.message)
    if result.status == TrialStatus.STOPPED:
        epochs = sum(1 for epoch in result.epochs if epoch.complete)
        message = f"stopped by the run's deadline after {epochs} complete epoch(s)"
        return Completed(name="Stopped", message=message, data=result)
    return result


@task(name="score", cache_policy=NO_CACHE)
def score(config: BenchmarkConfig, claim: RunClaim) -> ScoreResult:
    return scoring.score_run(config, claim)


@task(name="verify", cache_policy=NO_CACHE)
def verify(
    config: BenchmarkConfig, claim: RunClaim, evaluator: Evaluator | None = None
) -> list[CheckRecord]:
    checks = scoring.verify_and_record(config, claim, evaluator)
    logger = get_run_logger()
    for check in checks:
        (logger.info if check.passed else logger.warning)(
            "%s %s: %s", "pass" if check.passed else "FAIL", check.check, check.detail
        )
    return checks


@task(name="report", cache_policy=NO_CACHE)
def report(config: BenchmarkConfig, run_id: int, result: ScoreResult) -> None:
    with Store.open_existing(config.db) as store:
        rows = score_rows(store.get_run(run_id))
    create_table_artifact(table=rows, key="aiperf-score", description=f"aiperf run {run_id}")
    create_markdown_artifact(
        markdown=markdown(rows), key="aiperf-score-summary", description=f"aiperf run {run_id}"
    )
    page, over_time = scoring.write_report(config, run_id)
    create_markdown_artifact(
        markdown=over_time,
        key="aiperf-report-summary",
        description=f"aiperf run {run_id}: score over time",
    )
    create_link_artifact(
        link=file_link(page),
        link_text=f"HTML report of aiperf run {run_id}",
        key="aiperf-report",
        description=f"aiperf run {run_id}: {page}",
    )
    get_run_logger().info("HTML report: %s", page)


def load_trial_code() -> str:
    """Runs on every worker as the run starts. Unpickling it imports this module on the worker (the
    trial task, Prefect, prefect-dask), and it imports the engine that runs a task, so a worker's
    first trial does neither inside the timed window (docs/performance.md gives the cost)."""
    import prefect.task_engine  # noqa: F401

    return __name__


class _PrefectTrial:
    """A trial's Prefect future as the orchestrator's TrialHandle."""

    def __init__(self, future) -> None:
        self.future = future

    def done(self) -> bool:
        return self.future.wrapped_future.done()

    def result(self) -> TrialResult:
        return self.future.result(raise_on_failure=True)

    def cancel(self) -> None:
        self.future.wrapped_future.cancel()

    def add_done_callback(self, fn) -> None:
        """`fn()` once the trial's task has ended: the orchestrator wakes to start the next one."""
        self.future.wrapped_future.add_done_callback(lambda _future: fn())


class PrefectStages(Stages):
    """The run's steps as Prefect tasks; trials through prefect-dask on the run's cluster."""

    progress_artifact: UUID | None = None  # the run's aiperf-progress, once created
    best_milestone: tuple | None = None  # what the last version of aiperf-best marked

    def progress(self, run_id: int, figures: LiveFigures) -> None:
        """The budget used as a progress artifact (aiperf-progress, updated in place at each call)
        and the best figures so far as a markdown one (aiperf-best, a new version at each of its
        milestones: a new best trial, another tenth of the budget, the end)."""
        percent = round(100 * figures.budget_used, 1)
        if self.progress_artifact is None:
            created = create_progress_artifact(
                percent, key="aiperf-progress", description=f"aiperf run {run_id}: budget used"
            )
            assert isinstance(created, UUID)  # called from sync code: the id, not a coroutine
            self.progress_artifact = created
        else:
            update_progress_artifact(self.progress_artifact, percent)
        if figures.milestone() == self.best_milestone:
            return
        self.best_milestone = figures.milestone()
        create_markdown_artifact(
            markdown=figures.markdown(run_id),
            key="aiperf-best",
            description=f"aiperf run {run_id}: best so far",
        )

    def prefect_api_url(self) -> str | None:
        with get_client(sync_client=True) as client:
            return str(client.api_url)

    def recorded(self, config: BenchmarkConfig, run_id: int, event_log: Path) -> None:
        """A link to the run's event log (MLLOG lines, written as the run goes), from its start."""
        create_link_artifact(
            link=file_link(event_log),
            link_text=f"event log of aiperf run {run_id}",
            key="aiperf-event-log",
            description=f"aiperf run {run_id}: {event_log}",
        )
        get_run_logger().info("event log: %s", event_log)

    def stage_dataset(
        self,
        config: BenchmarkConfig,
        claim: RunClaim,
        scheduler_address: str,
        security: Any = None,
    ) -> Manifest:
        return stage_dataset(config, claim, scheduler_address, security)

    @contextmanager
    def trials(
        self, config: BenchmarkConfig, scheduler_address: str, security: Any = None
    ) -> Iterator[TrialRunner]:
        resources = trial_resources(config)
        with DaskTaskRunner(
            address=scheduler_address, client_kwargs={"security": security}
        ) as runner:
            # before the timed window, not in each worker's first trial
            on_every_worker(runner.client, load_trial_code)

            def launch(request: TrialRequest) -> _PrefectTrial:
                with dask.annotate(resources=resources):
                    return _PrefectTrial(
                        runner.submit(
                            train_trial, {"request": request, "trainer": config.train.trainer}
                        )
                    )

            yield TrialRunner(runner.client, launch)

    def score(self, config: BenchmarkConfig, claim: RunClaim) -> ScoreResult:
        return score(config, claim)

    def verify(
        self, config: BenchmarkConfig, claim: RunClaim, evaluator: Evaluator | None = None
    ) -> list[CheckRecord]:
        return verify(config, claim, evaluator)

    def publish(self, config: BenchmarkConfig, run_id: int, result: ScoreResult) -> None:
        report(config, run_id, result)


# One typed field each in the run form (aiperf.lifecycle.parameters): "empty" (the empty text, 0, -1,
# cluster "profile") keeps the profile's value. A running scheduler needs TLS files: `aiperf run`.
@flow(name="aiperf-benchmark", log_prints=True)
def benchmark(
    profile: FlowProfile = "quick",
    budget: str = "",
    workers: Workers = 0,
    db: str = "",
    seed: Seed = -1,
    out: str = "",
    cluster: FlowCluster = "profile",
    overrides: dict[str, Any] = {},  # noqa: B006 (Prefect's form shows a JSON editor; never mutated)
    resume: RunId = 0,
) -> dict[str, Any] | State:
    """Run the aiperf benchmark for a fixed wall-clock budget on every worker and score it.

    A scored result that is not valid and verified ends the flow run in a failed state named
    Invalid or Unverified, its message saying why. The artifact aiperf-progress shows the budget
    used as the run goes, aiperf-best the best trial so far. Parameters never carry a database
    password or a job setting (aiperf.lifecycle.parameters).

    Args:
        profile: A packaged profile, or NAME for NAME.yaml in the worker's AIPERF_PROFILE_DIR
            when the deployment was made; never a path.
        budget: Wall-clock budget of the timed search, e.g. 90s, 3m, 1h; empty: the profile's.
        workers: Dask workers, one trial each at a time; 0: the profile's (one per core, or per
            GPU).
        db: Database URL without a password; empty: the worker's AIPERF_DB_URL, else the
            profile's, else sqlite:///aiperf.db.
        seed: Seed of the data, the search and the weights; -1: the profile's.
        out: Folder for staged data, the run's files and its report; empty: the profile's.
        cluster: Where the workers run: the profile's choice, this machine (local) or jobs on a
            batch queue.
        overrides: Profile settings by dotted name, as `aiperf run --set` takes them, e.g.
            {"train.epochs": [2, 4]}; job settings come from the profile only.
        resume: A lost or interrupted run's id, to continue it with its own config and remaining
            budget (only db is read with it); 0: a new run.
    """
    flow_run = _this_flow_run()
    try:
        check_parameters(db, overrides, from_deployment=flow_run.deployment_id is not None)
        if resume:
            from aiperf.lifecycle.recovery import resume_config  # the head's: see _run

            config = resume_config(database_url(db or None), resume)
            check_resumed_config(config, resume)  # the database `db` names may be anyone's
        else:
            request = flow_request(profile, budget, workers, db, seed, out, cluster, overrides)
            config = load_config(request)
        return _run(config, resume or None, str(flow_run.id))
    except UserError as mistake:
        return refused(mistake)


@flow(name="aiperf-benchmark", log_prints=True)
def benchmark_config(
    config: BenchmarkConfig,
    resume: int | None = None,
    series: str | None = None,
    series_index: int | None = None,
) -> dict[str, Any] | State:
    """The benchmark of a config already validated, for `aiperf run` and the nightly flow (its
    subflow), which check it where it is made. No deployment's entrypoint: a whole config is not
    a parameter a form should offer, and a deployment's run of it is refused.

    Args:
        config: The run's whole, validated config.
        resume: The run to continue with it (aiperf.lifecycle.recovery.resume_config).
        series: The id of the series of repeated runs this run is in (`aiperf run --repeat`).
        series_index: Its place in that series, from 1.
    """
    flow_run = _this_flow_run()
    try:
        check_parameters(config=config, from_deployment=flow_run.deployment_id is not None)
        return _run(config, resume, str(flow_run.id), series=series, series_index=series_index)
    except UserError as mistake:
        return refused(mistake)


def refused(mistake: UserError) -> State:
    """A user's mistake (a bad parameter, a broken dataset): the flow run fails with its one line
    as the message and in the log, and no traceback, which would bury the line for a mistake that
    is no fault of the code. The error is the state's data, so a caller's `.result()` raises it."""
    get_run_logger().error("%s", mistake)
    return Failed(message=str(mistake), data=mistake)


def _this_flow_run() -> Any:
    context = get_run_context()
    assert isinstance(context, EngineContext) and context.flow_run is not None  # a flow's own body
    return context.flow_run


def _run(
    config: BenchmarkConfig,
    resume: int | None,
    flow_run_id: str,
    series: str | None = None,
    series_index: int | None = None,
) -> dict[str, Any] | State:
    """The story of one run (aiperf.lifecycle.run), its stages as Prefect tasks; the score, or a
    failed state named for why the result is not valid, carrying it."""
    # Imported here, in the head, not at the top: every worker that runs one of this file's tasks
    # imports this module, and the story imports the search (keras-tuner, so Keras and its
    # framework), which a worker needs only to train, and imports then (a simulated trial never).
    from aiperf.lifecycle import run

    outcome = run.run_benchmark(
        config,
        PrefectStages(),
        flow_run_id=flow_run_id,
        logger=get_run_logger(),
        resume=resume,
        series=series,
        series_index=series_index,
    )
    not_valid = outcome.not_valid()
    if not_valid is None:
        return outcome.to_dict()
    # Scored, but no result to publish: a failed state named for why, never a green Completed.
    name, message = not_valid
    return Failed(name=name, message=message, data=run.ResultNotValid(message, outcome.to_dict()))
