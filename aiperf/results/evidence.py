"""What verify's checkers read (Evidence): the records of one run and the figures recomputed from
them. Its own module, below aiperf.results.verify and every module of checks (data_checks,
physical, remeasure), so that verify imports its checkers and none of them imports verify back."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from aiperf.config import BenchmarkConfig
from aiperf.results.score import ScoreResult
from aiperf.store import DatasetRecord, RunRecord

# (train, eval, tensor train, tensor eval) operations per sample of an architecture
Counts = tuple[int, int, int, int]
Counter = Callable[[dict], Counts]


@dataclass(frozen=True)
class Evaluator:
    """Where the kept weights are evaluated again, and the words that say where. A run verifying
    itself evaluates on one of its workers (its devices, on a compute node: `on_a_worker`); `aiperf
    verify` after the run, whose workers have ended, evaluates in its own process and says so."""

    # evaluate_weights' arguments (aiperf.results.remeasure) -> (accuracy, samples, the device)
    evaluate: Callable[..., tuple[float, int, str]]
    where: str


@dataclass(frozen=True)
class Evidence:
    """What the checkers read: the records, and the figures recomputed from them."""

    run: RunRecord
    config: BenchmarkConfig
    dataset: DatasetRecord | None
    counts: dict[int, Counts]  # trial id -> recounted operations per sample, for every built trial
    elapsed_s: float
    recomputed: ScoreResult
    # Where the run's files are (its kept weights: aiperf.results.remeasure), and where its data
    # is staged, or staged again; None: not known, so the weights cannot be evaluated.
    folder: Path | None = None
    data_folder: Path | None = None
    # Where the kept weights are evaluated again; None: in this process.
    evaluator: Evaluator | None = None

    @property
    def stored(self) -> ScoreResult:
        """The run's stored score: there is one, as gather_records refuses a run without."""
        assert self.run.score is not None
        return self.run.score
