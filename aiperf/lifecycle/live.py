"""The run's live figures and where they go: one snapshot type (LiveFigures) that the orchestrator
makes, the CLI's display and a flow's progress artifacts read, and the display slot. The CLI
installs a display (a Rich live line); a flow run from a deployment has none and reports through
its Prefect logs instead. Kept apart from the search loop so that whoever shows the figures
depends on them alone, not on the loop that makes them."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from aiperf import quality
from aiperf.units import ops_rate

# The run's progress (on_progress: in a flow, Prefect artifacts) is published as each trial ends, and
# whenever another tenth of the budget is used, so it moves even while no trial ends; each
# publication is a call to the Prefect API, so not every turn of the loop.
PROGRESS_STEP = 0.1


@dataclass(frozen=True)
class LiveFigures:
    """A snapshot for live displays: what the run has done so far (a resumed run: its segment)."""

    elapsed_s: float
    budget_s: float
    trials_done: int
    trials_running: int
    total_ops: int
    best_quality: float | None  # the best val accuracy, or on the LM track val loss (`quality`)
    best_trial: str | None = None  # the trial whose complete epoch reached best_quality
    quality: str = quality.ACCURACY  # search.objective: which figure best_quality is

    @property
    def ops_per_s(self) -> float:
        return self.total_ops / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def budget_used(self) -> float:
        """The share of the budget used, 0 to 1 (past the deadline, stopping trials: 1)."""
        return min(1.0, self.elapsed_s / self.budget_s) if self.budget_s > 0 else 1.0

    def milestone(self) -> tuple[str | None, int, bool]:
        """What a new version of the best-so-far table marks: a new best trial, another
        PROGRESS_STEP of the budget, or the search's end (no trial left running past the deadline).
        A trial's end alone moves the progress bar only, so a run of many trials does not fill its
        artifacts with versions."""
        step = math.floor(self.budget_used / PROGRESS_STEP + 1e-9)
        return self.best_trial, step, self.budget_used >= 1.0 and self.trials_running == 0

    def markdown(self, run_id: int) -> str:
        """The best figures so far as a markdown table, for a person following the run."""
        best = (
            "-"
            if self.best_quality is None
            else f"{self.best_quality:.4f} (trial {self.best_trial})"
        )
        rows = [
            (
                "budget used",
                f"{self.elapsed_s:.0f} s of {self.budget_s:.0f} s ({100 * self.budget_used:.0f}%)",
            ),
            ("trials ended", f"{self.trials_done} ({self.trials_running} running)"),
            (f"best {quality.label(self.quality)}", best),
            ("OPS so far", ops_rate(self.ops_per_s)),
        ]
        lines = [f"## aiperf run {run_id}: progress", "", "| | |", "|---|---|"]
        return "\n".join(lines + [f"| {name} | {value} |" for name, value in rows]) + "\n"


Display = Callable[[LiveFigures], None]

_display: Display | None = None


def set_display(display: Display | None) -> None:
    global _display
    _display = display


def show(figures: LiveFigures) -> None:
    if _display is not None:
        _display(figures)
