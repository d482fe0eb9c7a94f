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
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from aiperf import paths, settings
from aiperf.cluster import start_cluster, trial_resources
from aiperf.cluster.broadcast import on_every_worker
from aiperf.config import AUTO, BenchmarkConfig, batch_problem
from aiperf.data.staging import Manifest, OnProgress, stage
from aiperf.errors import UserError, disk_full
from aiperf.lifecycle import live, liveness
from aiperf.lifecycle.feedcheck import measure_feed
from aiperf.lifecycle.orchestrator import Launcher, LiveFigures, Orchestrator
from aiperf.lifecycle.preflight import check_before_recording
from aiperf.lifecycle.recorder import RunRecorder
from aiperf.lifecycle.reference import measure_reference
from aiperf.results.data_checks import refuse_unpinned
from aiperf.results.division import classify
from aiperf.results.evidence import Evaluator
from aiperf.results.remeasure import keep_best_weights, on_a_worker
from aiperf.results.score import (
    ScoreResult,
    compute_score,
    is_verification_reason,
    known_in_advance,
    verified_score,
)
from aiperf.search.oracles import make_oracle
from aiperf.status import RunStatus
from aiperf.store import (
    CheckRecord,
    RecordNotFound,
    RunClaim,
    RunRecord,
    RunTakenOver,
    Store,
    window_seconds,
)
from aiperf.system.fingerprint import fingerprint
from aiperf.train.accelerators import refuse_unused_gpus
from aiperf.train.trial import warm_up
from aiperf.train.worker import received, train_on_worker
from aiperf.units import format_ops
from aiperf.urls import safe_url

T = TypeVar("T")
log = logging.getLogger("aiperf.lifecycle.run")


@dataclass(frozen=True)
class TrialRunner:
    """Where trials go: a Dask client (for events and warm-up) and how to launch one trial."""

    client: Any  # distributed.Client
    launch: Launcher


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


# --- the steps, as plain functions ---------------------------------------------------------------


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
    return RunRecorder.new_run(
        store,
        config,
        system=fingerprint(
            backend=config.train.backend
        ),  # the workers' backend: they start with it
        ruleset=division.ruleset,
        division=division.name,
        deviations=division.deviations,
        config_hash=division.config_hash,
        owner=liveness.new_owner(),
        flow_run_id=flow_run_id,
        series=series,
        series_index=series_index,
    )


def _client(scheduler_address: str, security: Any) -> Any:
    """A client of the run's scheduler, presenting the cluster's TLS credentials (StartedCluster.security)."""
    from distributed import Client

    return Client(scheduler_address, security=security, set_as_default=False)


def stage_dataset(
    config: BenchmarkConfig,
    claim: RunClaim,
    scheduler_address: str | None,
    security: Any = None,
    on_progress: OnProgress | None = None,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> Manifest:
    """Generate or convert the profile's data where every worker reads it and record its manifest.
    Shard work runs on the cluster's workers; node-local copies (data.stage_to) are made once per
    node. The staging's wall time is recorded with the run (runs.staging_s) and in its event log:
    it comes before the timed window and is not in it, and MLPerf HPC reports it beside the score.
    `claim`: the run's, handed to this step (a task of its own in the flow)."""
    with RunRecorder.opened(config, claim) as recorder:
        return _stage(config, recorder, scheduler_address, security, on_progress, logger)


def _stage(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    scheduler_address: str | None,
    security: Any,
    on_progress: OnProgress | None,
    logger: logging.Logger | logging.LoggerAdapter,
) -> Manifest:
    client = _client(scheduler_address, security) if scheduler_address else None
    started = time.time()
    began = time.perf_counter()
    try:
        manifest = stage(
            config.data,
            config.seed,
            Path(config.out) / "data",
            client=client,
            on_progress=on_progress,
        )
    except OSError as exc:  # a full disk is the folder's, named in one line: no traceback
        full = disk_full(exc, *_staging_folder(config, exc))
        if full is None:
            raise
        raise full from None
    finally:
        if client is not None:
            client.close()
    seconds = time.perf_counter() - began
    recorder.staging(started, time.time(), seconds)
    record_manifest(recorder, manifest)
    # Recorded first, then judged: a closed run on data other than its ruleset's pin (or with an
    # image in both splits, or a class missing from one) stops here, before its search.
    refuse_unpinned(config, manifest.to_dict())
    logger.info(
        "run %d: data staged in %.1f s, before the timed window (not counted in it)",
        recorder.run_id,
        seconds,
    )
    return manifest


def _staging_folder(config: BenchmarkConfig, exc: OSError) -> tuple[str, str]:
    """The folder a staging write failed in and the setting that chose it: node-local copies go to
    data.stage_to (where the failed file is there), everything else under --out."""
    stage_to = config.data.stage_to
    if stage_to and str(exc.filename or "").startswith(str(Path(stage_to).expanduser())):
        return stage_to, "data.stage_to"
    return config.out, "--out"


def refuse_batch_beyond_data(config: BenchmarkConfig, manifest: Manifest) -> None:
    """A trial's global batch against the train images staging counted, for a batch the devices
    resolved (search.space.batch_per_gib): for tfrecord and folder data the config holds no count
    (aiperf.config.FILE_COUNTED), and that batch is only known once the workers' peaks are, so
    this is the first place both are. A batch the profile lists is checked against the same count
    by each trial's feed (aiperf.data.feed), which fails the trial in one line, and the run after
    its first trials fail in a row."""
    problem = batch_problem(config, manifest.train_samples, "the staged dataset's train images")
    if problem:
        raise UserError(
            f"{problem}; stage more data, or use smaller batches (search.space.batch_size, "
            "batch_per_gib or batch_cap) or fewer devices per trial"
        )


def record_manifest(recorder: RunRecorder, manifest: Manifest) -> None:
    """Record the run's dataset; a resumed run must find the very data it started on."""
    recorded = recorder.store.run_dataset(recorder.run_id)
    if recorded is not None and recorded.sha256 != manifest.sha256:
        raise UserError(
            f"run {recorder.run_id} trained on dataset {recorded.name} (sha256 {recorded.sha256[:12]}), but "
            f"staging now gives sha256 {manifest.sha256[:12]}: restore that data to resume it"
        )
    recorder.dataset(manifest.to_dict())


@contextmanager
def dask_trials(
    config: BenchmarkConfig, scheduler_address: str, security: Any = None
) -> Iterator[TrialRunner]:
    """Trials as plain Dask tasks, each asking for its worker's trial slot (and GPU, if any)."""
    resources = trial_resources(config)
    with _client(scheduler_address, security) as client:

        def launch(request):  # a distributed.Future is a TrialHandle: done(), result(), cancel()
            return client.submit(
                train_on_worker,
                request,
                config.train.trainer,
                resources=resources,
                key=f"trial-{request.run_id}-{request.trial_key}",
                pure=False,
            )

        yield TrialRunner(client, launch)


def score_run(config: BenchmarkConfig, claim: RunClaim, recovered: bool = False) -> ScoreResult:
    """OPS and the regulated score, computed from the records alone, then stored. `recovered`: the
    run is scored after a crash or a stop (aiperf recover), so it is never valid."""
    run_id = claim.run_id
    with RunRecorder.opened(config, claim) as recorder:
        work = recorder.store.run_work(run_id)
        score = compute_score(
            work.epochs,
            elapsed_s=work.elapsed_s,
            best_val_accuracy=work.best_val_accuracy,
            val_samples=work.val_samples,
            trials_completed=work.trials_completed,
            budget_s=work.budget_s,
            rules=config.validity,
            simulated=config.train.trainer == "simulated",
            recovered=recovered,
            peak_flops=work.peak_flops,
            stepping_s=work.stepping_s,
            workers=work.workers,
        )
        recorder.score(score, classify(config).ruleset)
        record = recorder.store.get_run(run_id)
        # Only the best trial's weights stay, for verify to evaluate again (issue 25 item 2).
        recorder.best_weights(
            keep_best_weights(record, paths.run_folder(config.out, config.db, run_id))
        )
    return score


def verify_and_record(
    config: BenchmarkConfig, claim: RunClaim, evaluator: Evaluator | None = None
) -> list[CheckRecord]:
    """Every check of `aiperf verify`, stored with the score: the run's verdict on itself. A result
    is valid only when every check passes: when one fails, the stored score is made invalid with the
    reason naming the failed checks (aiperf.results.score.verified_score), before the checks are
    stored, so no reader ever sees a failed verification beside a valid verdict; and the event log
    gets the score again with that verdict after the checks (its last score is the one that
    stands). `evaluator`: where the kept weights are evaluated again (the run's: on a worker)."""
    from aiperf.results.verify import verify_run

    with RunRecorder.opened(config, claim) as recorder:
        checks = verify_run(recorder.store, claim.run_id, evaluator=evaluator)
        stored = recorder.store.get_run(claim.run_id).score
        assert stored is not None  # verify_run refuses a run without a score
        score = verified_score(stored, checks)
        recorder.verification(
            checks, rescored=None if score is stored else score, ruleset=classify(config).ruleset
        )
    return checks


def write_report(config: BenchmarkConfig, run_id: int) -> tuple[Path, str]:
    """The run's HTML report under <out>/reports, and its score over time as markdown."""
    from aiperf.report.html import markdown_summary
    from aiperf.report.html import write_report as write_page

    page = paths.report_path(config.out, config.db, run_id)
    page.parent.mkdir(parents=True, exist_ok=True)
    with Store.open_existing(config.db) as store:
        page = write_page(store, run_id, page).resolve()
        return page, markdown_summary(store, run_id, page)


CLOSABLE = (RunStatus.LOST, RunStatus.INTERRUPTED)


def closable_run(store: Store, run_id: int, db: str, what: str) -> RunRecord:
    """The run, if it is lost or interrupted; else a one-line error naming what it is."""
    try:
        record = store.get_run(run_id)
    except RecordNotFound:
        raise UserError(
            f"run {run_id} is not in {safe_url(db)}; list runs with "
            f"`aiperf runs --db {safe_url(db)}`"
        ) from None
    if record.status not in CLOSABLE:
        raise UserError(
            f"run {run_id} is {record.status}: only a lost or interrupted run can be {what} "
            f"(a running one is lost once its heartbeat is older than ${settings.HEARTBEAT_TIMEOUT.name} s)"
        )
    return record


def used_seconds(record: RunRecord) -> float:
    """Seconds of its budget the run used in its closed segments (0 before its search started)."""
    closed = [w for w in record.windows if w.ended_at is not None]
    return window_seconds(closed) if closed else 0.0


class Stages:
    """How the steps of a run execute. Plainly here; flows/benchmark.py makes them Prefect tasks."""

    def prefect_api_url(self) -> str | None:
        """The Prefect API that workers report task runs to (None: they report to none)."""
        return None

    def recorded(self, config: BenchmarkConfig, run_id: int, event_log: Path) -> None:
        """The run is recorded (or resumed) and its event log is being written at `event_log`."""
        log.info("run %d: event log %s", run_id, event_log)

    def progress(self, run_id: int, figures: LiveFigures) -> None:
        """The search's figures as it starts, as each trial ends, at each tenth of the budget and
        as it ends (Orchestrator.on_progress). Plainly, nothing: the CLI shows a live line."""

    def stage_dataset(
        self,
        config: BenchmarkConfig,
        claim: RunClaim,
        scheduler_address: str,
        security: Any = None,
    ) -> Manifest:
        return stage_dataset(config, claim, scheduler_address, security)

    def trials(
        self, config: BenchmarkConfig, scheduler_address: str, security: Any = None
    ) -> AbstractContextManager[TrialRunner]:
        return dask_trials(config, scheduler_address, security)

    def score(self, config: BenchmarkConfig, claim: RunClaim) -> ScoreResult:
        return score_run(config, claim)

    def verify(
        self, config: BenchmarkConfig, claim: RunClaim, evaluator: Evaluator | None = None
    ) -> list[CheckRecord]:
        return verify_and_record(config, claim, evaluator)

    def publish(self, config: BenchmarkConfig, run_id: int, score: ScoreResult) -> None:
        page, _ = write_report(config, run_id)
        log.info("HTML report: %s", page)


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
        with recorder.failed_on_error():
            stages.recorded(
                config, run_id, paths.event_log_path(config.out, config.db, run_id).resolve()
            )
        # The heartbeat shows the run alive; SIGTERM and SIGINT end it interrupted, not failed.
        with liveness.heartbeat(recorder), liveness.stop_on_signals():
            try:
                scored = search_until_deadline(
                    config,
                    recorder,
                    stages,
                    logger,
                    resumed=resume is not None,
                    then=partial(score_and_verify, config, recorder.claim, stages),
                )
                assert scored is not None  # `then` ran, with the workers up
                score, checks = scored
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
                    logger.warning("run %d: its event log was not closed: %s", run_id, log_error)
                raise
            recorder.run_stopped(RunStatus.COMPLETED)
        score = verified_score(score, checks)  # as verify_and_record stored it
    log_outcome(run_id, score, checks, logger)
    try:  # the run is scored and completed: a report that fails to publish does not undo that
        stages.publish(config, run_id, score)
    except Exception as exc:
        logger.warning(
            "run %d is scored, but its report was not published: %s: %s",
            run_id,
            type(exc).__name__,
            exc,
        )
    return RunOutcome(run_id, score, all(c.passed for c in checks))


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


def reopen_run(store: Store, config: BenchmarkConfig, run_id: int) -> RunRecorder:
    """Continue a lost or interrupted run: the same row, running again, with a fresh heartbeat,
    once this process took it over (liveness.take_over: refused while its process still beats);
    its recorder, with this process's claim."""
    claim = liveness.take_over(store, closable_run(store, run_id, config.db, "resumed"), "resumed")
    recorder = RunRecorder.of_run(store, claim, config)
    recorder.run_resumed()
    return recorder


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
        # Warm-up and peaks come before anything reads what the profile leaves to the devices
        # (train.precision auto, search.space.batch_per_gib): the system description, the oracle
        # and the trials see the settings the run resolved from them.
        listed = config.search.space.batch_size
        config = prepare_workers(config, recorder, trials.client, logger, resumed=resumed)
        if config.search.space.batch_size != listed:  # the devices resolved it (batch_per_gib)
            refuse_batch_beyond_data(config, manifest)
        measure_feed(config, recorder, trials.client, manifest, logger)  # feed-bound?
        measure_reference(config, recorder, trials.client, manifest, logger)  # bare Keras
        describe_workers(config, recorder, trials.client, logger)
        record_provenance(config, recorder, trials.client, logger)
        trials.client.subscribe_topic(topic, _into(events))
        oracle = make_oracle(config, manifest.image_shape, manifest.classes)
        orchestrator = Orchestrator(
            config=config,
            recorder=recorder,
            oracle=oracle,
            data_path=manifest.path,
            image_shape=manifest.image_shape,
            num_classes=manifest.classes,
            launch=trials.launch,
            events=events,
            events_topic=topic,
            on_figures=live.show,
            on_progress=partial(stages.progress, run_id),
            dataset_samples=(manifest.train_samples, manifest.val_samples),
            logger=logger,
        )
        budget_s = resume_search(config, recorder, orchestrator) if resumed else config.budget_s
        # The timed window opens once the workers are up and warm (prepare_workers): the budget
        # measures training, not start-up.
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
        return None if then is None else then(trials)


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


def describe_workers(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    client: Any,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> dict[str, Any] | None:
    """The compute nodes as the workers describe them (aiperf.system.description), not the
    submitting host: stored with the run, written as system_description.json in its folder and
    logged. A description that fails costs the run its description, never the run."""
    import json

    from aiperf.system import description as system_description

    run_id = recorder.run_id
    try:
        description = system_description.describe_system(
            system_description.collect(client, config.out),
            division=classify(config).name,
            precision=config.train.precision,
        )
    except Exception as exc:
        logger.warning(
            "run %d: the workers did not describe their nodes: %s: %s",
            run_id,
            type(exc).__name__,
            exc,
        )
        return None
    recorder.system_description(description)
    folder = paths.run_folder(config.out, config.db, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / system_description.FILE_NAME).write_text(
        json.dumps(description, indent=2) + "\n", encoding="utf-8"
    )
    logger.info(
        "system: %d node(s): %s",
        description["number_of_nodes"],
        description.get("system_name", ""),
    )
    return description


def record_provenance(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    client: Any,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> dict[str, Any]:
    """What ran (aiperf.system.provenance): the jobs' prologue, how the workers were started, and
    each worker's aiperf-relevant environment and code digest beside this host's; stored, logged
    and flagged where a closed result needs a person to look. Unlike the description, a run
    whose workers cannot say what they run has no provenance to show, so a failure here fails it."""
    from aiperf.cluster.plan import user_prologue
    from aiperf.system import provenance as what_ran

    run_id = recorder.run_id
    recorded = what_ran.run_provenance(
        user_prologue(config),
        config.cluster.kind,
        on_every_worker(client, what_ran.describe_process),
    )
    recorder.provenance(recorded)
    if classify(config).closed:
        for reason in what_ran.review_reasons(recorded):
            logger.warning("run %d: for review: %s", run_id, reason)
    return recorded


def prepare_workers(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    client: Any,
    logger: logging.Logger | logging.LoggerAdapter = log,
    *,
    resumed: bool = False,
) -> BenchmarkConfig:
    """Warm the workers up and probe their peaks (real trials only), resolve what the profile
    leaves to the devices, and store the peaks in the resolved precision. Returns the config the
    trials run with. Settings are resolved once, before the first trial: a resumed run whose trials
    trained keeps the ones they trained with."""
    peaks = None
    if config.train.trainer == "keras":
        on_every_worker(client, warm_up)
        peaks = probe_peaks(config, recorder.run_id, client, logger)
        refuse_unused_gpus(config, peaks)  # a GPU run whose framework shows none: one line
    if not resumed or not recorder.store.get_run(recorder.run_id).trials:
        config = resolve_settings(config, recorder, peaks, logger)
    if peaks is not None:
        record_peaks(config, recorder, peaks, logger)
    return config


def probe_peaks(
    config: BenchmarkConfig,
    run_id: int,
    client: Any,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> list[dict[str, Any]] | None:
    """Every worker's peak record (aiperf.train.worker.peak_on_worker), measured at once before the
    timed window: in the run's precision, or with train.precision auto in each closed precision
    its device supports. A probe that fails costs the run its MFU (and auto its choice: float32),
    never the run."""
    from aiperf.train.auto import allowed_precisions
    from aiperf.train.peak import compute_dtype, peak_seconds
    from aiperf.train.worker import peak_on_worker

    auto = config.train.precision == AUTO
    dtype = compute_dtype("float32" if auto else config.train.precision)
    candidates = list(allowed_precisions(config)) if auto else None
    try:
        found = on_every_worker(
            client, peak_on_worker, dtype, peak_seconds(), candidates=candidates
        )
    except Exception as exc:
        logger.warning(
            "run %d: the workers' peak was not measured, so it has no MFU: %s: %s",
            run_id,
            type(exc).__name__,
            exc,
        )
        return None
    return sorted(found.values(), key=lambda p: p["worker"])


def resolve_settings(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    peaks: list[dict[str, Any]] | None,
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> BenchmarkConfig:
    """The config with train.precision auto and search.space.batch_per_gib resolved from the
    workers' peak records (aiperf.train.auto), stored with the run in place of the one recorded,
    with the precision, division and workload hash judged from it again (in the database and the
    event log, whose latest config and division stand)."""
    from pydantic import ValidationError

    from aiperf.train.auto import resolved_settings

    resolved = resolved_settings(config, peaks)
    if not resolved:
        return config
    raw = config.model_dump()
    for dotted, value in resolved.items():
        *parents, leaf = dotted.split(".")
        node = raw
        for part in parents:
            node = node[part]
        node[leaf] = value
    shown = ", ".join(f"{dotted} {value}" for dotted, value in resolved.items())
    try:
        settled = BenchmarkConfig.model_validate(raw)
    except ValidationError as exc:
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise UserError(
            f"this run's devices give {shown}, which is not valid: {message}; set "
            "search.space.batch_per_gib, search.space.batch_cap or train.precision to values "
            "that fit"
        ) from None
    division = classify(settled)
    stored = settled.model_dump(mode="json")
    recorder.resolved_settings(
        config=stored,
        precision=settled.train.precision,
        division=division.name,
        deviations=division.deviations,
        config_hash=division.config_hash,
    )
    logger.info("run %d: for its devices: %s (%s)", recorder.run_id, shown, division.name)
    return settled


def record_peaks(
    config: BenchmarkConfig,
    recorder: RunRecorder,
    peaks: list[dict[str, Any]],
    logger: logging.Logger | logging.LoggerAdapter = log,
) -> float:
    """The workers' peaks in the run's precision, stored with the run: MFU's divisor is their sum."""
    from aiperf.train.peak import compute_dtype, in_precision

    peaks = [in_precision(peak, config.train.precision) for peak in peaks]
    recorder.peaks(peaks)
    total = sum(p["flops"] for p in peaks)
    logger.info(
        "measured peak: %sFLOP/s in %s over %d workers (%s)",
        format_ops(total),
        compute_dtype(config.train.precision),
        len(peaks),
        ", ".join(sorted({p["device"] for p in peaks})),
    )
    return total


def resume_search(
    config: BenchmarkConfig, recorder: RunRecorder, orchestrator: Orchestrator
) -> float:
    """Bring a resumed run's search back where it stopped: the oracle from its stored state and the
    trials' records (it proposes what it would have proposed next), the interrupted trials queued
    to train again. Returns the seconds of budget left."""
    from aiperf.search.resume import restore

    record = recorder.store.get_run(recorder.run_id)
    state = recorder.store.search_state(recorder.run_id)
    if (
        state is not None
    ):  # None: it stopped before its first proposal, so a fresh oracle is the same
        restore(orchestrator.oracle, state, record.trials, config.search.objective)
    orchestrator.resume_from(list(record.trials))
    return max(1.0, config.budget_s - used_seconds(record))


def _into(events: queue.Queue) -> Callable[[tuple[float, dict[str, Any]]], None]:
    """A Dask topic handler that queues each worker report for the orchestrator's loop."""
    return lambda event: events.put(received(event))
