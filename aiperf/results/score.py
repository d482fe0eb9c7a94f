"""Scores: operations per second, the accuracy-regulated score, and the validity verdict.

Pure arithmetic over what the database holds (samples per epoch, operations per sample per
trial, the timed window), so anyone can recompute a published score from SQL alone.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

from aiperf import quality
from aiperf.config import ValidityConfig
from aiperf.results import uncertainty
from aiperf.store.reads import RunWork
from aiperf.store.records import CheckRecord, ScoreResult
from aiperf.store.records import EpochWork as EpochWork  # callers import it from here


def capped_accuracy(accuracy: float, val_samples: int) -> float:
    """n validation samples cannot show an error below 1/n: cap there so ln(1 - a) stays finite."""
    return min(accuracy, 1.0 - 1.0 / val_samples)


def regulated_score(ops: float, best_val_accuracy: float | None, val_samples: int) -> float:
    """AIPerf's regulated score: OPS * |ln(1 - accuracy)|; 0 when nothing was evaluated."""
    if best_val_accuracy is None or val_samples <= 0:
        return 0.0
    return ops * abs(math.log(1.0 - capped_accuracy(best_val_accuracy, val_samples)))


def judged_by_loss(rules: ValidityConfig) -> bool:
    """Whether the profile's quality is validation loss (the LM track's: its ruleset gives a loss
    ceiling) rather than accuracy (aiperf.quality)."""
    return rules.loss_ceiling is not None


def regulated(
    ops: float,
    rules: ValidityConfig,
    *,
    best_val_accuracy: float | None,
    val_samples: int,
    best_val_loss: float | None = None,
    vocab_size: int = 0,
) -> float:
    """The regulated score of `ops` by the track's own quality: the one rule the headline, the score
    over time and the report's figures all take. A profile judged by loss (the LM track) is
    regulated by its best loss's excess over the data's entropy floor where its ruleset gives one
    (1.7 on: aiperf.quality.loss_factor), else by its loss under its vocabulary (1.5-1.6:
    loss_gain); the CNN track by AIPerf's |ln(1 - accuracy)|."""
    if judged_by_loss(rules):
        if rules.entropy_floor is not None:  # rulesets from 1.7
            return ops * quality.loss_factor(best_val_loss, vocab_size, rules.entropy_floor)
        return ops * quality.loss_gain(best_val_loss, vocab_size)
    return regulated_score(ops, best_val_accuracy, val_samples)


def model_flops_utilisation(tensor_ops_per_s: float, peak_flops: float | None) -> float | None:
    """MFU: achieved tensor-convention FLOP/s over the sum of the workers' measured peaks; None when
    no peak was measured (the simulated trainer, runs recorded before peaks were)."""
    if peak_flops is None or peak_flops <= 0:
        return None
    return tensor_ops_per_s / peak_flops


def window_utilisation(
    stepping_s: Iterable[float] | None, workers: int, window_s: float
) -> float | None:
    """The share of the window the workers spent in training and evaluation steps: the sum over
    trials of their train and evaluate seconds / (workers x window seconds). None when no trial
    recorded where its time went (runs recorded before trial phases were)."""
    if stepping_s is None:
        return None
    seconds = list(stepping_s)
    if not seconds or workers < 1 or window_s <= 0:
        return None
    return sum(seconds) / (workers * window_s)


RECOVERED = "recovered after a crash: scored from what it recorded before its deadline"


def verdict(
    *,
    budget_s: float,
    best_val_accuracy: float | None,
    trials_completed: int,
    rules: ValidityConfig,
    simulated: bool = False,
    recovered: bool = False,
    best_val_loss: float | None = None,
) -> list[str]:
    """Every rule the result breaks, named; an empty list means valid. A recovered run (scored while
    interrupted: it never reached its deadline) is never valid, whatever it recorded. A profile
    judged by loss (the LM track) checks `best_val_loss` against its ceiling instead of accuracy."""
    broken = [RECOVERED] if recovered else []
    if simulated:
        broken.append("simulated trainer: trials were modelled, no model was trained")
    if budget_s < rules.min_budget_s:
        broken.append(
            f"too short: budget {budget_s:g} s is under the profile's minimum {rules.min_budget_s:g} s"
        )
    if trials_completed == 0:
        broken.append("no trial completed all its epochs")
    if rules.loss_ceiling is not None:
        if best_val_loss is None:
            broken.append("no validation loss was measured")
        elif not best_val_loss <= rules.loss_ceiling:  # a NaN loss is over it too
            broken.append(
                f"loss over the ceiling: best val loss {best_val_loss:.4f} nats/token "
                f"> {rules.loss_ceiling:g}"
            )
    elif best_val_accuracy is None:
        broken.append("no validation accuracy was measured")
    elif best_val_accuracy < rules.accuracy_floor:
        broken.append(
            f"accuracy under the floor: best val accuracy {best_val_accuracy:.4f} "
            f"< {rules.accuracy_floor:g}"
        )
    return broken


def known_in_advance(*, budget_s: float, rules: ValidityConfig, simulated: bool) -> list[str]:
    """The rules a result breaks whatever its trials measure (a budget under the minimum, a
    simulated trainer): a run says them before it stages anything, so nobody waits for an invalid
    result unawares. It still runs: a smoke test of seconds is a short run on purpose."""
    return verdict(
        budget_s=budget_s,
        best_val_accuracy=rules.accuracy_floor,
        best_val_loss=rules.loss_ceiling,
        trials_completed=1,
        rules=rules,
        simulated=simulated,
    )


# A result is valid only when every check of its verification passes: a failed verification adds
# this reason to the stored verdict, naming the checks. The validity rules alone never give it, so
# `aiperf verify` compares the stored verdict with the rules' after setting it aside (rules_reasons).
VERIFICATION_FAILED = "verification failed: "


def is_verification_reason(reason: str) -> bool:
    """Whether a verdict's reason is the one a failed verification adds (not a validity rule)."""
    return reason.startswith(VERIFICATION_FAILED)


def rules_reasons(reasons: Iterable[str]) -> list[str]:
    """A stored verdict's reasons without the verification's: what the validity rules gave."""
    return [r for r in reasons if not is_verification_reason(r)]


def verified_score(score: ScoreResult, checks: Sequence[CheckRecord]) -> ScoreResult:
    """The score as its verification leaves it: unchanged when every check passed; else invalid,
    with the reason naming the checks that failed (replacing any earlier one), so a score whose
    records disagree with it is never shown, compared or packaged as valid."""
    failed = [c.check for c in checks if not c.passed]
    if not failed:
        return score
    reasons = [*rules_reasons(score.reasons), VERIFICATION_FAILED + ", ".join(failed)]
    return dataclasses.replace(score, valid=False, reasons=reasons)


def validity_label(valid: bool, verified: bool | None, review: bool = False) -> str:
    """One word for a table's `valid` column: yes only for a valid result whose every check passed;
    no for an invalid one or a failed verification; unverified for a valid one never verified
    (it stopped before its verification, or was recorded before runs verified themselves);
    review for a valid, verified closed result whose workers ran something to look at
    (aiperf.system.provenance.review_reasons: `aiperf show` says what)."""
    if not valid or verified is False:
        return "no"
    if not verified:
        return "unverified"
    return "review" if review else "yes"


def compute_score(
    work: RunWork,
    *,
    rules: ValidityConfig,
    simulated: bool = False,
    recovered: bool = False,
) -> ScoreResult:
    """The score of what a run recorded (`work`: its epochs' work, its window's seconds, its best
    quality and the figures its verdict reads). `work.peak_flops`: the sum of the workers' measured
    peaks (MFU's divisor); `work.stepping_s`: each trial's seconds in training and evaluation steps
    (window utilisation's numerator), over `work.workers` x `work.elapsed_s`. A profile judged by
    loss (the LM track) is regulated by `best_val_loss` over its `vocab_size`
    (aiperf.quality.loss_gain), not by accuracy."""
    elapsed_s = work.elapsed_s
    if elapsed_s <= 0:
        raise ValueError(f"elapsed time must be positive, got {elapsed_s}")
    epochs = list(work.epochs)
    total = sum(e.ops for e in epochs)
    tensor_total = sum(e.tensor_ops for e in epochs)
    ops = total / elapsed_s
    broken = verdict(
        budget_s=work.budget_s,
        best_val_accuracy=work.best_val_accuracy,
        trials_completed=work.trials_completed,
        rules=rules,
        simulated=simulated,
        recovered=recovered,
        best_val_loss=work.best_val_loss,
    )
    regulated_ops = regulated(
        ops,
        rules,
        best_val_accuracy=work.best_val_accuracy,
        val_samples=work.val_samples,
        best_val_loss=work.best_val_loss,
        vocab_size=work.vocab_size,
    )
    bounds = intervals(epochs, ops, regulated_ops, rules, work)
    return ScoreResult(
        elapsed_s=elapsed_s,
        total_ops=total,
        ops=ops,
        tensor_ops=tensor_total / elapsed_s,
        best_val_accuracy=work.best_val_accuracy,
        val_samples=work.val_samples,
        regulated_score=regulated_ops,
        best_val_loss=work.best_val_loss if judged_by_loss(rules) else None,
        trials_completed=work.trials_completed,
        samples_trained=sum(e.samples_trained for e in epochs),
        samples_evaluated=sum(e.samples_evaluated for e in epochs),
        valid=not broken,
        reasons=broken,
        mfu=model_flops_utilisation(tensor_total / elapsed_s, work.peak_flops),
        utilisation=window_utilisation(work.stepping_s, work.workers, elapsed_s),
        **bounds,
    )


def intervals(
    epochs: Sequence[EpochWork],
    ops: float,
    regulated_ops: float,
    rules: ValidityConfig,
    work: RunWork,
) -> dict[str, float | None]:
    """The 95% intervals of OPS and of the regulated score, as ScoreResult's fields: from the spread
    of the trials' rates, and the best accuracy's over its validation samples (the CNN track)."""
    rates = uncertainty.trial_rates((e.trial, e.ops, e.seconds) for e in epochs)
    around = uncertainty.ops_interval(ops, rates)

    def factor_of(accuracy: float) -> float:
        return regulated_score(1.0, accuracy, work.val_samples)

    regulated_bounds = uncertainty.regulated_interval(
        around,
        regulated_ops,
        ops,
        None if judged_by_loss(rules) else factor_of,
        work.best_val_accuracy,
        work.val_samples,
    )
    return {
        "ops_low": None if around is None else around.low,
        "ops_high": None if around is None else around.high,
        "regulated_low": None if regulated_bounds is None else regulated_bounds.low,
        "regulated_high": None if regulated_bounds is None else regulated_bounds.high,
    }
