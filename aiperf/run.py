"""One run of the benchmark, top to bottom:

    record   the system's fingerprint and the run (the database is created and migrated first)
    start    the workers: a Dask cluster on this machine or batch jobs, framework warmed up
    stage    the dataset where every worker reads it, and its manifest recorded
    search   every worker kept busy with trials until the deadline: the timed window
    score    OPS and the regulated score, from the records alone
    finish   the run marked completed (or failed, or interrupted), then its report published

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
from pathlib import Path
from typing import Any

from aiperf import live
from aiperf.cluster import start_cluster, trial_resources
from aiperf.config import BenchmarkConfig
from aiperf.data.staging import Manifest, OnProgress, preflight, stage
from aiperf.orchestrator import Launcher, Orchestrator
from aiperf.score import ScoreResult, compute_score
from aiperf.search.oracles import make_oracle
from aiperf.status import RunStatus
from aiperf.store import Store
from aiperf.store.database import safe_url
from aiperf.system import fingerprint
from aiperf.train.trial import warm_up
from aiperf.train.worker import received, train_on_worker

log = logging.getLogger("aiperf.run")


@dataclass(frozen=True)
class TrialRunner:
    """Where trials go: a Dask client (for events and warm-up) and how to launch one trial."""

    client: Any  # distributed.Client
    launch: Launcher


@dataclass(frozen=True)
class RunOutcome:
    run_id: int
    score: ScoreResult


# --- the steps, as plain functions ---------------------------------------------------------------

def record_run(store: Store, config: BenchmarkConfig, flow_run_id: str | None = None) -> int:
    """The system under test and the run, before any worker starts."""
    system_id = store.upsert_system(fingerprint())
    return store.create_run(system_id=system_id, profile=config.profile, config=config.model_dump(mode="json"),
                            seed=config.seed, budget_s=config.budget_s, workers=config.workers,
                            flow_run_id=flow_run_id)


def stage_dataset(config: BenchmarkConfig, run_id: int, scheduler_address: str | None,
                  on_progress: OnProgress | None = None) -> Manifest:
    """Generate or convert the profile's data where every worker reads it and record its manifest.
    Shard work runs on the cluster's workers; node-local copies (data.stage_to) are made on each."""
    from distributed import Client

    client = Client(scheduler_address, set_as_default=False) if scheduler_address else None
    try:
        manifest = stage(config.data, config.seed, Path(config.out) / "data", client=client,
                         on_progress=on_progress)
    finally:
        if client is not None:
            client.close()
    with Store.open(config.db, migrate=False) as store:
        store.record_dataset(run_id, manifest.to_dict())
    return manifest


@contextmanager
def dask_trials(config: BenchmarkConfig, scheduler_address: str) -> Iterator[TrialRunner]:
    """Trials as plain Dask tasks, each asking for its worker's trial slot (and GPU, if any)."""
    from distributed import Client

    resources = trial_resources(config)
    with Client(scheduler_address, set_as_default=False) as client:
        def launch(request):  # a distributed.Future is a TrialHandle: done(), result(), cancel()
            return client.submit(train_on_worker, request, config.train.trainer, resources=resources,
                                 key=f"trial-{request.run_id}-{request.trial_key}", pure=False)

        yield TrialRunner(client, launch)


def score_run(config: BenchmarkConfig, run_id: int) -> ScoreResult:
    """OPS and the regulated score, computed from the records alone, then stored."""
    with Store.open(config.db, migrate=False) as store:
        work = store.run_work(run_id)
        score = compute_score(work.epochs, elapsed_s=work.elapsed_s, best_val_accuracy=work.best_val_accuracy,
                              val_samples=work.val_samples, trials_completed=work.trials_completed,
                              budget_s=work.budget_s, rules=config.validity,
                              simulated=config.train.trainer == "simulated")
        store.save_score(run_id, score)
    return score


def write_report(config: BenchmarkConfig, run_id: int) -> tuple[Path, str]:
    """The run's HTML report under <out>/reports, and its score over time as markdown."""
    from aiperf.report.html import markdown_summary
    from aiperf.report.html import write_report as write_page

    folder = Path(config.out) / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    with Store.open_existing(config.db) as store:
        page = write_page(store, run_id, folder / f"aiperf-report-{run_id}.html").resolve()
        return page, markdown_summary(store, run_id, page)


class Stages:
    """How the steps of a run execute. Plainly here; flows/benchmark.py makes them Prefect tasks."""

    def prefect_api_url(self) -> str | None:
        """The Prefect API that workers report task runs to (None: they report to none)."""
        return None

    def stage_dataset(self, config: BenchmarkConfig, run_id: int, scheduler_address: str) -> Manifest:
        return stage_dataset(config, run_id, scheduler_address)

    def trials(self, config: BenchmarkConfig, scheduler_address: str) -> AbstractContextManager[TrialRunner]:
        return dask_trials(config, scheduler_address)

    def score(self, config: BenchmarkConfig, run_id: int) -> ScoreResult:
        return score_run(config, run_id)

    def publish(self, config: BenchmarkConfig, run_id: int, score: ScoreResult) -> None:
        page, _ = write_report(config, run_id)
        log.info("HTML report: %s", page)


# --- the story ------------------------------------------------------------------------------------

def run_benchmark(config: BenchmarkConfig, stages: Stages | None = None, *, flow_run_id: str | None = None,
                  logger: logging.Logger | logging.LoggerAdapter = log) -> RunOutcome:
    """Run the benchmark for the config's budget and return its score."""
    stages = stages or Stages()
    with Store.open(config.db) as store:
        run_id = record_run(store, config, flow_run_id)
        logger.info("run %d recorded in %s", run_id, safe_url(config.db))
        try:
            search_until_deadline(config, store, run_id, stages, logger)
            score = stages.score(config, run_id)
        except BaseException as exc:
            ended = RunStatus.INTERRUPTED if isinstance(exc, (KeyboardInterrupt, SystemExit)) else RunStatus.FAILED
            store.finish_run(run_id, status=ended, message=f"{type(exc).__name__}: {exc}")
            raise
        store.finish_run(run_id, status=RunStatus.COMPLETED)
    try:  # the run is scored and completed: a report that fails to publish does not undo that
        stages.publish(config, run_id, score)
    except Exception as exc:
        logger.warning("run %d is scored, but its report was not published: %s: %s", run_id,
                       type(exc).__name__, exc)
    return RunOutcome(run_id, score)


def search_until_deadline(config: BenchmarkConfig, store: Store, run_id: int, stages: Stages,
                          logger: logging.Logger | logging.LoggerAdapter = log) -> None:
    """Start the workers, stage the data on them, then keep them busy with trials until the deadline."""
    preflight(config.data)  # a missing folder or an empty class fails here, before any worker starts
    topic = f"aiperf-run-{run_id}-epochs"
    events: queue.Queue = queue.Queue()
    with start_cluster(config, prefect_api_url=stages.prefect_api_url()) as cluster, \
            stages.trials(config, cluster.scheduler_address) as trials:
        manifest = stages.stage_dataset(config, run_id, cluster.scheduler_address)
        trials.client.subscribe_topic(topic, _into(events))
        oracle = make_oracle(config, Path(config.out) / f"run-{run_id}", manifest.image_shape, manifest.classes)
        orchestrator = Orchestrator(
            config=config, store=store, run_id=run_id, oracle=oracle, data_path=manifest.path,
            image_shape=manifest.image_shape, num_classes=manifest.classes, launch=trials.launch,
            events=events, events_topic=topic, on_figures=live.show)
        # The timed window opens once the workers are up and warm: the budget measures training,
        # not start-up.
        if config.train.trainer == "keras":
            trials.client.run(warm_up)
        started = time.time()
        deadline = started + config.budget_s
        store.start_search(run_id, started, deadline)
        logger.info("search started on %d workers, budget %g s", config.workers, config.budget_s)
        summary = orchestrator.run(started, deadline)
        store.finish_search(run_id, summary.ended_at)
        logger.info("search ended: %d trials (%d completed, %d stopped, %d failed)", summary.trials,
                    summary.completed, summary.stopped, summary.failed)


def _into(events: queue.Queue) -> Callable[[tuple[float, dict[str, Any]]], None]:
    """A Dask topic handler that queues each worker report for the orchestrator's loop."""
    return lambda event: events.put(received(event))
