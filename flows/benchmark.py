"""The `aiperf-benchmark` flow: the story of one run.

    validate the config -> record the system and the run -> stage the dataset
    -> search on Dask workers until the deadline (one Prefect task per trial)
    -> score from the records -> publish the score as artifacts

The work itself lives in aiperf/; this file only puts it in order and makes each stage a Prefect
task, so the UI shows every stage and every trial with its logs.
"""

from __future__ import annotations

import queue
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import dask
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.context import get_run_context
from prefect_dask import DaskTaskRunner

from aiperf import progress
from aiperf.cluster import start_cluster, trial_resources
from aiperf.config import BenchmarkConfig, load_config
from aiperf.data.staging import Manifest, preflight, stage
from aiperf.orchestrator import Search
from aiperf.report.summary import markdown, score_rows
from aiperf.score import ScoreResult, compute_score
from aiperf.search.oracles import make_oracle
from aiperf.store import Store
from aiperf.system import fingerprint
from aiperf.train.messages import TrialRequest, TrialResult, to_event
from aiperf.train.trial import run_trial, warm_up


@task(name="stage_dataset", cache_policy=NO_CACHE)
def stage_dataset(config: BenchmarkConfig, run_id: int, scheduler_address: str | None = None) -> Manifest:
    """Generate or convert the profile's data where every worker reads it; record its manifest.
    Shard work runs on the cluster's Dask workers, and node-local copies (data.stage_to) are made
    on each of them."""
    from distributed import Client

    logger = get_run_logger()
    shown: dict[str, int] = {}

    def log_progress(done: int, total: int, what: str) -> None:  # every tenth of the work
        step = 10 * done // max(total, 1)
        if shown.get(what) != step:
            shown[what] = step
            logger.info("%s: %d of %d", what, done, total)

    client = Client(scheduler_address, set_as_default=False) if scheduler_address else None
    try:
        manifest = stage(config.data, config.seed, Path(config.out) / "data", client=client,
                         on_progress=log_progress)
    finally:
        if client is not None:
            client.close()
    store = Store.open(config.db, migrate=False)
    try:
        store.record_dataset(run_id, manifest.to_dict())
    finally:
        store.close()
    get_run_logger().info("staged %s (%d train, %d val images, sha256 %s)", manifest.name,
                          manifest.train_samples, manifest.val_samples, manifest.sha256[:12])
    return manifest


@task(name="train_trial", cache_policy=NO_CACHE, task_run_name="trial-{request.trial_key}")
def train_trial(request: TrialRequest, trainer: str = "keras") -> TrialResult:
    """Runs on a Dask worker. Reports go back to the flow as Dask events, as they happen.
    trainer "simulated" trains nothing: the trial takes a modelled time (orchestration at scale)."""
    from distributed import get_worker

    worker = get_worker()

    from aiperf.cluster import job_id, pin_gpu, worker_end

    pin_gpu(str(worker.name))  # one worker per GPU, before any framework starts
    job = job_id()
    label = f"{worker.name}@{job}" if job else str(worker.name)

    def report(message) -> None:
        if request.events_topic:
            # The scheduler overwrites an event's "worker" with the worker's address: send ours aside.
            worker.log_event(request.events_topic, {**to_event(message), "worker_label": label})
    # Walltime-aware: a trial stops at its worker's end of life as at the run's deadline.
    end = worker_end(str(worker.name))
    if end is not None and end < request.deadline:
        request = replace(request, deadline=end)
    if trainer == "simulated":
        from aiperf.train.simulated import run_simulated_trial

        result = run_simulated_trial(request, report, worker=label)
    else:
        result = run_trial(request, report, worker=label)
    if result.status == "failed":
        get_run_logger().warning("trial %s failed: %s", request.trial_key, result.message)
    return result


class _DaskTrial:
    """A trial's Prefect future as the orchestrator's TrialHandle."""

    def __init__(self, future) -> None:
        self.future = future

    def done(self) -> bool:
        return self.future.wrapped_future.done()

    def result(self) -> TrialResult:
        return self.future.result(raise_on_failure=True)

    def cancel(self) -> None:
        self.future.wrapped_future.cancel()


def _restore_label(message: dict) -> dict:
    if "worker_label" in message:
        message["worker"] = message.pop("worker_label")
    return message


def _launch(runner: DaskTaskRunner, request: TrialRequest, resources: dict[str, int],
            trainer: str) -> _DaskTrial:
    """Submit one trial, asking for its worker's resources (a trial slot, and its GPU if any)."""
    with dask.annotate(resources=resources):
        return _DaskTrial(runner.submit(train_trial, {"request": request, "trainer": trainer}))


def search(config: BenchmarkConfig, store: Store, run_id: int) -> None:
    """Start the workers, stage the data on them, then keep them busy with trials until the deadline."""
    preflight(config.data)  # a missing folder or an empty class fails here, before any worker starts
    logger = get_run_logger()
    topic = f"aiperf-run-{run_id}-epochs"
    events: queue.Queue = queue.Queue()
    with get_client(sync_client=True) as client:
        api_url = str(client.api_url)
    resources = trial_resources(config)
    with start_cluster(config, prefect_api_url=api_url) as cluster, DaskTaskRunner(address=cluster.scheduler_address) as runner:
        manifest = stage_dataset(config, run_id, cluster.scheduler_address)
        runner.client.subscribe_topic(topic, lambda event: events.put(_restore_label(event[1])))
        oracle = make_oracle(config, Path(config.out) / f"run-{run_id}", manifest.image_shape, manifest.classes)
        searcher = Search(
            config=config, store=store, run_id=run_id, oracle=oracle, data_path=manifest.path,
            image_shape=manifest.image_shape, num_classes=manifest.classes,
            launch=lambda request: _launch(runner, request, resources, config.train.trainer),
            events=events, events_topic=topic, on_progress=progress.emit)
        # The timed window opens once the workers are up and warm: the budget measures training,
        # not start-up.
        if config.train.trainer == "keras":
            runner.client.run(warm_up)
        started = time.time()
        deadline = started + config.budget_s
        store.start_search(run_id, started, deadline)
        logger.info("search started on %d workers, budget %g s", config.workers, config.budget_s)
        summary = searcher.run(started, deadline)
        store.finish_search(run_id, summary.ended_at)
        logger.info("search ended: %d trials (%d completed, %d stopped, %d failed)", summary.trials,
                    summary.completed, summary.stopped, summary.failed)


@task(name="score", cache_policy=NO_CACHE)
def score_run(config: BenchmarkConfig, run_id: int) -> ScoreResult:
    """OPS and the regulated score, computed from the records alone, then stored."""
    store = Store.open(config.db, migrate=False)
    try:
        work = store.run_work(run_id)
        score = compute_score(work.epochs, elapsed_s=work.elapsed_s, best_val_accuracy=work.best_val_accuracy,
                              val_samples=work.val_samples, trials_completed=work.trials_completed,
                              budget_s=work.budget_s, rules=config.validity,
                              simulated=config.train.trainer == "simulated")
        store.save_score(run_id, score)
        return score
    finally:
        store.close()


@task(name="report", cache_policy=NO_CACHE)
def publish(config: BenchmarkConfig, run_id: int, score: ScoreResult) -> None:
    rows = score_rows(run_id, config.profile, config.workers, config.budget_s, score)
    create_table_artifact(table=rows, key="aiperf-score", description=f"aiperf run {run_id}")
    create_markdown_artifact(markdown=markdown(rows), key="aiperf-score-summary",
                             description=f"aiperf run {run_id}")
    # The HTML report (self-contained, plots inline) next to the run's files: a link artifact to
    # it, and a markdown artifact with the score over time so the UI shows the figures directly.
    from prefect.artifacts import create_link_artifact

    from aiperf.report.html import markdown_summary, write_report

    folder = Path(config.out) / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    store = Store.open(config.db, migrate=False)
    try:
        page = write_report(store, run_id, folder / f"aiperf-report-{run_id}.html").resolve()
        create_markdown_artifact(markdown=markdown_summary(store, run_id, page), key="aiperf-report-summary",
                                 description=f"aiperf run {run_id}: score over time")
    finally:
        store.close()
    create_link_artifact(link=page.as_uri(), link_text=f"HTML report of aiperf run {run_id}", key="aiperf-report",
                         description=f"aiperf run {run_id}: {page}")
    get_run_logger().info("HTML report: %s", page)


@flow(name="aiperf-benchmark", log_prints=True)
def benchmark(profile: str = "quick", budget: str | None = None, workers: int | None = None,
              db: str | None = None, seed: int | None = None, out: str | None = None,
              cluster: str | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run the benchmark for a fixed wall-clock budget and return its score.
    `cluster` is where the workers run (local, slurm, pbs, lsf, sge); `overrides` are dotted
    profile settings, as `aiperf run --set` takes them."""
    if cluster is not None:
        overrides = {**(overrides or {}), "cluster.kind": cluster}
    config = load_config(profile, budget=budget, workers=workers, db=db, seed=seed, out=out,
                         overrides=overrides)
    store = Store.open(config.db)
    system_id = store.upsert_system(fingerprint())
    run_id = store.create_run(system_id=system_id, profile=config.profile, config=config.model_dump(mode="json"),
                              seed=config.seed, budget_s=config.budget_s, workers=config.workers,
                              flow_run_id=str(get_run_context().flow_run.id))
    get_run_logger().info("run %d recorded in %s", run_id, store.engine.url.render_as_string(hide_password=True))
    try:
        search(config, store, run_id)
        score = score_run(config, run_id)
        publish(config, run_id, score)
        store.finish_run(run_id, status="completed")
    except BaseException as exc:
        interrupted = isinstance(exc, (KeyboardInterrupt, SystemExit))
        store.finish_run(run_id, status="interrupted" if interrupted else "failed",
                         message=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        store.close()
    return {"run_id": run_id, **score.to_dict()}
