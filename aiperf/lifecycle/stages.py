"""How the steps of a run execute: the `Stages` strategy the story (aiperf.lifecycle.run) calls,
and its default, which runs them plainly, with trials as Dask tasks on the run's workers
(dask_trials). The benchmark flow (flows/benchmark.py) subclasses it so every stage and trial is a
Prefect task. Kept apart from the steps so both the story and the flow see one small interface.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiperf.cluster import trial_resources
from aiperf.config import BenchmarkConfig
from aiperf.data.staging import Manifest
from aiperf.lifecycle.live import LiveFigures
from aiperf.lifecycle.scoring import score_run, verify_and_record, write_report
from aiperf.lifecycle.staging import scheduler_client, stage_dataset
from aiperf.results.evidence import Evaluator
from aiperf.results.score import ScoreResult
from aiperf.store import CheckRecord, RunClaim
from aiperf.train.worker import train_on_worker

if TYPE_CHECKING:  # the search (keras-tuner, so Keras) is the head's; a worker imports this module
    from aiperf.lifecycle.admission import Launcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrialRunner:
    """Where trials go: a Dask client (for events and warm-up) and how to launch one trial."""

    client: Any  # distributed.Client
    launch: Launcher


@contextmanager
def dask_trials(
    config: BenchmarkConfig, scheduler_address: str, security: Any = None
) -> Iterator[TrialRunner]:
    """Trials as plain Dask tasks, each asking for its worker's trial slot (and GPU, if any)."""
    resources = trial_resources(config)
    with scheduler_client(scheduler_address, security) as client:

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
