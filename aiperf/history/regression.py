"""Nightly regression check: a run's score against the baseline of the same system and profile.

The baseline is the median of the last few valid, completed runs (5 by default) of the same
system fingerprint and profile, so one lucky or unlucky night does not move it much. A run is a
regression when its OPS or its regulated score falls below the baseline by more than that figure's
threshold. Each figure has its own, because they are not equally noisy: OPS is the machine's speed,
while the regulated score also carries which trials happened to finish inside the window. The first
run on a system has no baseline: it passes and becomes the baseline. An invalid run is never a
baseline, and a nightly run that is invalid fails the check; so does one whose verification failed
(it is invalid: aiperf.results.score.verified_score).

Prefect-free: the nightly flow calls check_run() and turns the verdict into a flow state and a
markdown artifact.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from aiperf.results.score import is_verification_reason
from aiperf.status import RunStatus
from aiperf.store import RunReads, RunScoreRow
from aiperf.units import format_ops

DEFAULT_WINDOW = 5


@dataclass(frozen=True)
class Thresholds:
    """How far each figure may fall below its baseline, as a share (0.08 = 8%), before a night fails.

    The defaults are three coefficients of variation of each figure, rounded up to a whole percent,
    from the noisier of benchmarks/bench_stability.py's series on a quiet machine whose host held
    its speed (docs/performance.md, "Nightly stability", gives every series with its machine,
    including one where the host itself slowed). At a normal spread a healthy
    night falls that far below the median of five about once in a few hundred nights; the noise is
    the machine's, so measure yours and pass your own."""

    ops: float = 0.08
    regulated_score: float = 0.11

    def __post_init__(self) -> None:
        for name, value in (
            ("ops_threshold", self.ops),
            ("regulated_threshold", self.regulated_score),
        ):
            if not 0 < value < 1:
                raise ValueError(
                    f"{name} must be a share between 0 and 1 (0.05 = 5%), got {value}"
                )

    def describe(self) -> str:
        return f"thresholds: OPS {self.ops:.0%}, regulated {self.regulated_score:.0%}"


DEFAULT_THRESHOLDS = Thresholds()


@dataclass(frozen=True)
class Baseline:
    run_ids: list[int]
    ops: float
    regulated_score: float


@dataclass(frozen=True)
class RegressionVerdict:
    run_id: int
    profile: str
    system_id: int
    ops: float
    regulated_score: float
    valid: bool
    reasons: list[str]
    baseline: Baseline | None
    thresholds: Thresholds
    regressions: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.valid and not self.regressions

    @property
    def ops_change(self) -> float | None:
        return None if self.baseline is None else _change(self.baseline.ops, self.ops)

    @property
    def regulated_change(self) -> float | None:
        return (
            None
            if self.baseline is None
            else _change(self.baseline.regulated_score, self.regulated_score)
        )

    def message(self) -> str:
        """One line for the flow run's state: both figures, and what happened."""
        figures = f"OPS {format_ops(self.ops)}OPS, regulated {format_ops(self.regulated_score)}OPS"
        if not self.valid:
            return f"run {self.run_id} is invalid ({'; '.join(self.reasons)}): {figures}"
        if self.baseline is None:
            return (
                f"run {self.run_id} is the first valid {self.profile} run on this system "
                f"and sets the baseline: {figures}"
            )
        base = (
            f"baseline (median of runs {', '.join(map(str, self.baseline.run_ids))}) "
            f"OPS {format_ops(self.baseline.ops)}OPS, regulated {format_ops(self.baseline.regulated_score)}OPS"
        )
        changes = f"OPS {self.ops_change:+.1%}, regulated {self.regulated_change:+.1%}"
        if self.regressions:
            return (
                f"regression in run {self.run_id}: {'; '.join(self.regressions)} "
                f"({self.thresholds.describe()}): {figures} vs {base}"
            )
        return (
            f"run {self.run_id} within its thresholds of the baseline ({changes}; {self.thresholds.describe()}): "
            f"{figures} vs {base}"
        )

    def markdown(self) -> str:
        """The comparison as a markdown artifact."""
        head = "PASSED" if self.passed else "REGRESSION" if self.regressions else "FAILED"
        lines = [f"# aiperf nightly regression: {head}", "", self.message(), ""]
        lines += [
            "| figure | this run | baseline | change | threshold |",
            "| --- | --- | --- | --- | --- |",
        ]
        for name, value, base, change, threshold in (
            (
                "OPS",
                self.ops,
                None if self.baseline is None else self.baseline.ops,
                self.ops_change,
                self.thresholds.ops,
            ),
            (
                "regulated score",
                self.regulated_score,
                None if self.baseline is None else self.baseline.regulated_score,
                self.regulated_change,
                self.thresholds.regulated_score,
            ),
        ):
            lines.append(
                f"| {name} | {format_ops(value)}OPS | "
                f"{'-' if base is None else format_ops(base) + 'OPS'} | "
                f"{'-' if change is None else f'{change:+.2%}'} | -{threshold:.0%} |"
            )
        lines += [
            "",
            f"run {self.run_id}, profile {self.profile}, system {self.system_id}; valid: "
            + ("yes" if self.valid else "no: " + "; ".join(self.reasons)),
        ]
        if self.baseline is not None:
            lines.append(f"baseline runs: {', '.join(map(str, self.baseline.run_ids))}")
        return "\n".join(lines) + "\n"


def _change(before: float, after: float) -> float | None:
    return None if before == 0 else (after - before) / before


def baseline(
    history: list[RunScoreRow], run: RunScoreRow, window: int = DEFAULT_WINDOW
) -> Baseline | None:
    """Median of the last `window` valid, completed and not unverified runs before `run` of the same
    division and workload (config hash); rows of run_scores, oldest first."""
    earlier = [
        r
        for r in history
        if r.run_id != run.run_id
        and r.valid
        and r.status == RunStatus.COMPLETED
        and r.verified is not False
        and (r.division, r.config_hash) == (run.division, run.config_hash)
        and (r.created_at, r.run_id) < (run.created_at, run.run_id)
    ]
    chosen = earlier[-window:]
    if not chosen:
        return None
    return Baseline(
        run_ids=[r.run_id for r in chosen],
        ops=statistics.median(r.ops for r in chosen),
        regulated_score=statistics.median(r.regulated_score for r in chosen),
    )


def judge(
    run: RunScoreRow,
    base: Baseline | None,
    *,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    reasons: list[str] | None = None,
) -> RegressionVerdict:
    """Compare one run_scores row with a baseline: which figures fell more than their thresholds."""
    ops, regulated = run.ops, run.regulated_score
    regressions = []
    if base is not None:
        for name, value, reference, threshold in (
            ("OPS", ops, base.ops, thresholds.ops),
            ("regulated score", regulated, base.regulated_score, thresholds.regulated_score),
        ):
            change = _change(reference, value)
            if change is not None and change < -threshold:
                regressions.append(f"{name} fell {-change:.1%}")
    return RegressionVerdict(
        run_id=run.run_id,
        profile=run.profile,
        system_id=run.system_id,
        ops=ops,
        regulated_score=regulated,
        valid=run.valid and run.verified is not False,
        reasons=list(reasons or []),
        baseline=base,
        thresholds=thresholds,
        regressions=regressions,
    )


def check_run(
    store: RunReads,
    run_id: int,
    *,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    window: int = DEFAULT_WINDOW,
) -> RegressionVerdict:
    """The verdict for a scored run against its system's and profile's baseline."""
    rows = store.run_scores(run_ids=[run_id])
    if not rows:
        raise ValueError(f"run {run_id} has no score to compare")
    run = rows[0]
    history = store.run_scores(system_id=run.system_id, profile=run.profile)
    score = store.get_run(run_id).score
    reasons = list(score.reasons) if score else []
    if run.verified is False and not any(is_verification_reason(r) for r in reasons):
        reasons.append("verification failed")  # a run verified before failures made it invalid
    return judge(run, baseline(history, run, window), thresholds=thresholds, reasons=reasons)
