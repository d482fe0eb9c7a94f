"""One run of the benchmark, top to bottom:

    record   the system's fingerprint and the run (the database is created and migrated first)
    start    the workers: a Dask cluster on this machine or batch jobs
    stage    the dataset where every worker reads it, and its manifest recorded
    prepare  framework warmed up, each worker's peak matmul rate measured (MFU's divisor), and
             what the profile leaves to the devices resolved from the probe (aiperf.train.auto:
             train.precision auto, search.space.batch_per_gib) and stored with the run
    search   every worker kept busy with trials until the deadline: the timed window
    score    OPS and the regulated score, from the records alone
    verify   the score recomputed from the records, nothing stored trusted (aiperf.results.verify);
             a result is valid only when every check passes
    finish   the run marked completed (or failed, or interrupted), then its report published

What each step records also goes, as it happens, to the run's event log (aiperf.results.mllog: MLLOG lines
in its folder, enough alone to recompute the score): the run's recorder (aiperf.lifecycle.recorder)
writes each fact's rows, as the run's owner, and its lines together. The workers describe their
nodes once they are up (aiperf.system.description).

`run_benchmark` takes a config that is already validated (aiperf.config.load_config: parsed once
per run) and knows nothing of Prefect. How the steps execute is a `Stages` object: `Stages()`
runs them plainly on Dask; the flow (flows/benchmark.py) passes a subclass whose steps are Prefect
tasks and whose trials are Prefect task runs, so the UI shows every stage and every trial.

The story is this module; each step lives in a module of its own job: aiperf.lifecycle.staging
(stage), aiperf.lifecycle.prepare (prepare), aiperf.lifecycle.orchestrator (search),
aiperf.lifecycle.scoring (score, verify, the report), aiperf.lifecycle.reopen (a resumed run), and
aiperf.lifecycle.stages (the `Stages` strategy).
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from aiperf import paths
from aiperf.cluster import start_cluster, trial_resources
from aiperf.config import BenchmarkConfig
from aiperf.data.staging import Manifest
from aiperf.lifecycle import live, liveness
from aiperf.lifecycle.admission import Admission, TrialData
from aiperf.lifecycle.feedcheck import measure_feed
from aiperf.lifecycle.fitcheck import fit_seed
from aiperf.lifecycle.metering import metered_window
from aiperf.lifecycle.orchestrator import Orchestrator
from aiperf.lifecycle.preflight import check_before_recording
from aiperf.lifecycle.prepare import describe_workers, prepare_workers, record_provenance
from aiperf.lifecycle.recorder import RunRecorder
from aiperf.lifecycle.reference import measure_reference
from aiperf.lifecycle.reopen import reopen_run, resume_search
from aiperf.lifecycle.stages import Stages, TrialRunner
from aiperf.lifecycle.staging import refuse_batch_beyond_data
from aiperf.results.division import classify
from aiperf.results.remeasure import on_a_worker
from aiperf.results.score import (
    ScoreResult,
    is_verification_reason,
    known_in_advance,
    verified_score,
)
from aiperf.search.oracles import make_oracle
from aiperf.status import RunStatus
from aiperf.store import CheckRecord, RunClaim, RunStart, RunTakenOver, Store
from aiperf.system.fingerprint import fingerprint
from aiperf.train.worker import received
from aiperf.urls import safe_url

T = TypeVar("T")
log = logging.getLogger("aiperf.lifecycle.run")


@dataclass(frozen=True)
class RunOutcome:
    run_id: int
    score: ScoreResult  # as stored after its verification: invalid when a check failed
    verified: bool  # every check of the recomputation passed

    def to_dict(self) -> dict[str, Any]:
        """What the benchmark flow returns: the run id, every stored figure, verified or not."""
        return {"run_id": self.run_id, **self.score.to_dict(), "verified": self.verified}

    def not_valid(self) -> tuple[str, str] | None:
        """(state name, one line) for a result that is not valid and verified: Unverified when a
        check failed (then not even its verdict can be trusted), else Invalid with the rules it
        breaks; None for a valid, verified result."""
        if not self.verified:
            failed = [r for r in self.score.reasons if is_verification_reason(r)]
            return UNVERIFIED, f"run {self.run_id}: {'; '.join(failed) or 'verification failed'}"
        if not self.score.valid:
            return INVALID, f"run {self.run_id}: invalid: {'; '.join(self.score.reasons)}"
        return None


# The names of the failed states a scored run ends in when its result is not valid (the flow's
# final state: a dashboard never counts such a run a success).
INVALID, UNVERIFIED = "Invalid", "Unverified"


class ResultNotValid(Exception):
    """A run that ran to its end and was scored, but whose result is not valid and verified. Not a
    crash: the flow run ends in a failed state named for it (INVALID, UNVERIFIED) with this as
    its data, and whoever called the flow gets the outcome with it."""

    def __init__(self, message: str, outcome: dict[str, Any]) -> None:
        super().__init__(message, outcome)  # both in args: it pickles with its outcome
        self.message, self.outcome = message, outcome

    def __str__(self) -> str:
        return self.message


# --- the first step: the run recorded ----------------------------------------------------------


def record_run(
    store: Store,
    config: BenchmarkConfig,
    flow_run_id: str | None = None,
    *,
    series: str | None = None,
    series_index: int | None = None,
) -> RunRecorder:
    """The system under test and the run, with its division, before any worker starts; with
    `series`, as run `series_index` of that series of repeated runs (aiperf run --repeat). Its
    recorder, which writes it as this process's until another takes it over."""
    division = classify(config)
    start = RunStart.of(
        config,
        ruleset=division.ruleset,
        division=division.name,
        deviations=tuple(division.deviations),
        config_hash=division.config_hash,
        flow_run_id=flow_run_id,
        series=series,
        series_index=series_index,
    )
    # The workers' backend: they start with it.
    system = fingerprint(backend=config.train.backend)
    return RunRecorder.new_run(store, config, start, system=system, owner=liveness.new_owner())


# --- the story ------------------------------------------------------------------------------------


def run_benchmark(
    config: BenchmarkConfig,
    stages: Stages | None = None,
    *,
    flow_run_id: str | None = None,
    logger: logging.Logger | logging.LoggerAdapter = log,
    resume: int | None = None,
    series: str | None = None,
    series_index: int | None = None,
) -> RunOutcome:
    """Run the benchmark for the config's budget and return its score. `resume`: a lost or
    interrupted run to continue instead (its own config: aiperf.lifecycle.recovery.resume_config).
    `series`, `series_index`: the series of repeated runs the new run is in, and its place."""
    stages = stages or Stages()
    check_before_recording(config)  # a user's mistake is one line, and nothing is recorded
    with Store.open(config.db) as store:
        recorder = (
            record_run(store, config, flow_run_id, series=series, series_index=series_index)
            if resume is None
            else reopen_run(store, config, resume)
        )
        run_id = recorder.run_id
        logger.info(
            "run %d %s in %s",
            run_id,
            "recorded" if resume is None else "resumed",
            safe_url(config.db),
        )
        _warn_foreseen(config, run_id, logger)
        with recorder.failed_on_error():
            stages.recorded(
                config, run_id, paths.event_log_path(config.out, config.db, run_id).resolve()
            )
        score, checks = _search_and_score(
            config, recorder, stages, logger, resumed=resume is not None
        )
        score = verified_score(score, checks)  # as verify_and_record stored it
    log_outcome(run_id, score, checks, logger)
    _publish(config, stages, run_id, score, logger)
    return RunOutcome(run_id, score, all(c.passed for c in checks))


def _warn_foreseen(
    config: BenchmarkConfig, run_id: int, logger: logging.Logger | logging.LoggerAdapter
) -> None:
    """A result the config makes INVALID whatever the run measures is said before it starts."""
    foreseen = known_in_advance(
        budget_s=config.budget_s,
        rules=config.validity,
        simulated=config.train.trainer == "simulated",
    )
    if foreseen:
        logger.warning(
            "run %d: its result will be INVALID whatever it measures: %s",
            run_id,
            "; ".join(foreseen),
        )


def _search_and_score(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    stages: Stages,
    logger: logging.Logger | logging.LoggerAdapter,
    *,
    resumed: bool,
) -> tuple[ScoreResult, list[CheckRecord]]:
    """The search, then the score and checks, with the run recorded as it ends: completed, or
    interrupted or failed by what stopped it (that error goes on up). The heartbeat shows the run
    alive; SIGTERM and SIGINT end it interrupted, not failed."""
    with liveness.heartbeat(recorder), liveness.stop_on_signals():
        try:
            scored = search_until_deadline(
                config,
                recorder,
                stages,
                logger,
                resumed=resumed,
                then=partial(score_and_verify, config, recorder.claim, stages),
            )
            assert scored is not None  # `then` ran, with the workers up
        except RunTakenOver:  # another process writes the run now: not one more record
            raise
        except BaseException as exc:
            ended = (
                RunStatus.INTERRUPTED
                if isinstance(exc, (KeyboardInterrupt, SystemExit))
                else RunStatus.FAILED
            )
            try:
                recorder.run_stopped(ended, f"{type(exc).__name__}: {exc}")
            except OSError as log_error:  # a full disk: the database has the run's end
                logger.warning(
                    "run %d: its event log was not closed: %s", recorder.run_id, log_error
                )
            raise
        recorder.run_stopped(RunStatus.COMPLETED)
    return scored


def _publish(
    config: BenchmarkConfig,
    stages: Stages,
    run_id: int,
    score: ScoreResult,
    logger: logging.Logger | logging.LoggerAdapter,
) -> None:
    """The run is scored and completed: a report that fails to publish does not undo that."""
    try:
        stages.publish(config, run_id, score)
    except Exception as exc:
        logger.warning(
            "run %d is scored, but its report was not published: %s: %s",
            run_id,
            type(exc).__name__,
            exc,
        )


def log_outcome(
    run_id: int,
    score: ScoreResult,
    checks: list[CheckRecord],
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> None:
    """Every failed check, then one line saying whether the result is valid: a run whose result is
    invalid must not read as a success in its log."""
    for check in checks:
        if not check.passed:
            logger.warning("run %d: FAIL %s: %s", run_id, check.check, check.detail)
    if score.valid:
        logger.info("run %d: result valid and verified (%d checks pass)", run_id, len(checks))
    else:
        logger.warning("run %d: result INVALID: %s", run_id, "; ".join(score.reasons))


def search_until_deadline(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    stages: Stages,
    logger: logging.Logger | logging.LoggerAdapter = log,
    resumed: bool = False,
    then: Callable[[TrialRunner], T] | None = None,
) -> T | None:
    """Start the workers, stage the data on them, then keep them busy with trials until the deadline.
    A resumed run restores its oracle, trains its interrupted trials again, and searches for what
    is left of its budget in a new segment of its window. `then`: what to do with the workers
    still up once the search has ended (score and verify: the kept weights are evaluated again on
    a worker, with its devices); its result is returned."""
    run_id = recorder.run_id
    topic = f"aiperf-run-{run_id}-epochs"
    events: queue.Queue = queue.Queue()
    with (
        start_cluster(config, prefect_api_url=stages.prefect_api_url()) as cluster,
        stages.trials(config, cluster.scheduler_address, cluster.security) as trials,
    ):
        manifest = stages.stage_dataset(
            config, recorder.claim, cluster.scheduler_address, cluster.security
        )
        config, description = _prepare(config, recorder, trials, manifest, logger, resumed=resumed)
        trials.client.subscribe_topic(topic, _into(events))
        oracle = make_oracle(config, manifest.image_shape, manifest.classes)
        admission = Admission(config, recorder, TrialData.of(manifest), trials.launch, topic)
        orchestrator = Orchestrator(
            admission,
            oracle,
            events,
            on_figures=live.show,
            on_progress=partial(stages.progress, run_id),
            logger=logger,
        )
        budget_s = resume_search(config, recorder, orchestrator) if resumed else config.budget_s
        with metered_window(trials.client, description, recorder, logger):
            _timed_search(config, recorder, orchestrator, budget_s, logger)
        return None if then is None else then(trials)


def _prepare(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    trials: TrialRunner,
    manifest: Manifest,
    logger: logging.Logger | logging.LoggerAdapter,
    *,
    resumed: bool,
) -> tuple[BenchmarkConfig, dict[str, Any] | None]:
    """The workers warmed up and measured, and what they tell recorded; the config as resolved
    from them, and the system description (None if the nodes could not be described). Warm-up
    and peaks come before anything reads what the profile leaves to the devices (train.precision
    auto, search.space.batch_per_gib): the system description, the oracle and the trials see the
    settings the run resolved from them."""
    listed = config.search.space.batch_size
    config = prepare_workers(config, recorder, trials.client, logger, resumed=resumed)
    if config.search.space.batch_size != listed:  # the devices resolved it (batch_per_gib)
        refuse_batch_beyond_data(config, manifest)
    if not resumed:  # fit before paying: the seed's step against the devices' memory
        config = fit_seed(config, recorder, trials.client, manifest, logger)
    measure_feed(config, recorder, trials.client, manifest, logger)  # feed-bound?
    measure_reference(config, recorder, trials.client, manifest, logger)  # bare Keras
    description = describe_workers(config, recorder, trials.client, logger)
    record_provenance(config, recorder, trials.client, logger)
    return config, description


def _timed_search(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    orchestrator: Orchestrator,
    budget_s: float,
    logger: logging.Logger | logging.LoggerAdapter,
) -> None:
    """The timed window, recorded as it opens and ends. It opens once the workers are up and warm
    (prepare_workers): the budget measures training, not start-up."""
    started = time.time()
    deadline = started + budget_s
    recorder.search_started(started, deadline)
    logger.info("search started on %d workers, budget %g s", config.workers, budget_s)
    try:
        summary = orchestrator.run(started, deadline)
    except KeyboardInterrupt:  # stopped: the segment ends now, every reported epoch recorded
        stopped = time.time()
        recorder.search_stopped(stopped)
        raise
    recorder.search_stopped(summary.ended_at)
    logger.info(
        "search ended: %d trials (%d completed, %d stopped, %d failed, %d diverged)",
        summary.trials,
        summary.completed,
        summary.stopped,
        summary.failed,
        summary.diverged,
    )


def score_and_verify(
    config: BenchmarkConfig, claim: RunClaim, stages: Stages, trials: TrialRunner
) -> tuple[ScoreResult, list[CheckRecord]]:
    """The run's score from its records, then its verification, whose re-evaluation of the best
    trial's kept weights runs on one of the run's workers (a trial's slot and devices), not here:
    on a cluster this process runs on a login node, without the devices."""
    score = stages.score(config, claim)
    evaluator = None
    if config.train.trainer == "keras":
        evaluator = on_a_worker(trials.client, trial_resources(config))
    return score, stages.verify(config, claim, evaluator)


def _into(events: queue.Queue) -> Callable[[tuple[float, dict[str, Any]]], None]:
    """A Dask topic handler that queues each worker report for the orchestrator's loop."""
    return lambda event: events.put(received(event))
