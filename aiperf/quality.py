"""The quality a result is judged by, which of two figures is better, and how quality regulates the
score: the one home of that policy for both tracks.

- The CNN track (search.objective val_accuracy): the best validation accuracy of a complete epoch,
  higher is better; the regulated score is AIPerf's OPS x |ln(1 - accuracy)|
  (aiperf.results.score.regulated_score).
- The LM track (search.objective val_loss): the best validation loss of a complete epoch, in nats per
  token (mean cross-entropy of the next token), lower is better; the regulated score is
  OPS x ln((ln V - H) / (loss - H)), H the validation split's entropy floor (rulesets from 1.7,
  `loss_factor`), and OPS x max(0, ln V - loss) under 1.5 and 1.6 (`loss_gain`), V the
  vocabulary's size.

Why 1.7 left ln V - loss (docs/rules.md, "The LM track's regulation"): it is bounded by ln V - H,
and on a language whose floor is far below ln V nearly all of that is learned by any model that
counts a few bytes back (a 6-gram earns about 90% of the most any model can), so the ranking is the
OPS alone. AIPerf's |ln(1 - accuracy)| pays as much for each tenfold cut in the error as for the
last; `loss_factor` does the same for the loss's excess over the floor.

Why ln V - loss (1.5, 1.6): a model that has learned nothing predicts every token uniformly over the
vocabulary, a loss of ln V nats; ln V - loss is what the model has learned, in nats per token: the
log of how many times smaller its perplexity is than the vocabulary (ln(V / perplexity)). It is
dimensionless (nats are), 0 for a model that learned nothing, grows as the loss falls (monotone in
quality) and is bounded by ln V, as AIPerf's |ln(1 - accuracy)| is the log of how many times
smaller the error is than 1 and is bounded by the validation set's size. The two tracks' scores are
never ranked together (different workloads, different hashes); docs/rules.md says so.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

ACCURACY = "val_accuracy"
LOSS = "val_loss"
METRICS = (ACCURACY, LOSS)


def lower_is_better(metric: str) -> bool:
    if metric not in METRICS:
        raise ValueError(f"unknown quality {metric!r}; known: {', '.join(METRICS)}")
    return metric == LOSS


def direction(metric: str) -> str:
    """keras-tuner's name for which way the metric improves: "min" for a loss, "max" else."""
    return "min" if lower_is_better(metric) else "max"


def better(metric: str, value: float, than: float | None) -> bool:
    """Whether `value` beats `than` (None: nothing yet, so any finite value does). A value that is
    not finite (a diverged epoch's NaN loss) is never better."""
    if not math.isfinite(value):
        return False
    if than is None:
        return True
    return value < than if lower_is_better(metric) else value > than


def best(metric: str, values: Iterable[float | None]) -> float | None:
    """The best of `values` (None and values that are not finite ignored), or None when there is
    none: the one rule the records, the event log and verify each take a best by."""
    present = [v for v in values if v is not None and math.isfinite(v)]
    if not present:
        return None
    return min(present) if lower_is_better(metric) else max(present)


def of(report: Any, metric: str) -> float | None:
    """The quality an epoch's report or record measured (its val_accuracy or val_loss)."""
    lower_is_better(metric)  # refuses an unknown metric
    value = getattr(report, metric)
    return None if value is None else float(value)


def loss_gain(loss: float | None, vocab_size: int) -> float:
    """The LM track's regulation: ln V - loss nats per token, at least 0 (module docstring)."""
    if loss is None or vocab_size < 2 or not math.isfinite(loss):
        return 0.0
    return max(0.0, math.log(vocab_size) - loss)


# The least excess over the floor a loss is credited with: 0.01 nats per token. It keeps the factor
# finite at and below the floor (a loss measured on a finite split can fall a little under the
# expectation H), as AIPerf caps accuracy at 1 - 1/n (aiperf.results.score.capped_accuracy): at most
# ln((ln V - H) / 0.01), 6.2 for lm-quick.
MIN_EXCESS = 0.01


def loss_factor(loss: float | None, vocab_size: int, floor: float) -> float:
    """The LM track's regulation from aiperf-rules-1.7: ln((ln V - H) / (loss - H)), at least 0.

    H (`floor`) is the fewest nats per token any model can expect on the split (the data's entropy,
    aiperf/data/text_entropy.py); loss - H is what a model has still to learn, ln V - H what a model
    that learned nothing has. The factor is the log of how many times smaller the first is than the
    second: 0 for the uniform model (loss = ln V), ln 10 more for every tenfold cut in the excess,
    as AIPerf's |ln(1 - accuracy)| grows by ln 10 for every tenfold cut in the error. Monotone in
    the loss; the excess is credited at least MIN_EXCESS, so it is finite at and below H."""
    if loss is None or vocab_size < 2 or not math.isfinite(loss):
        return 0.0
    span = math.log(vocab_size) - floor
    if span <= MIN_EXCESS:
        raise ValueError(
            f"an entropy floor of {floor:g} leaves nothing to learn over {vocab_size}"
        )
    return max(0.0, math.log(span / max(loss - floor, MIN_EXCESS)))


def label(metric: str) -> str:
    """How a person reads the metric: 'val accuracy' or 'val loss (nats/token)'."""
    return "val loss (nats/token)" if lower_is_better(metric) else "val accuracy"


def shown(best_val_accuracy: float | None, best_val_loss: float | None) -> str:
    """A result's quality for a table cell: its best loss where it was judged by one (the LM
    track's, 'loss 2.4123'), else its best accuracy ('0.4123'), else '-'."""
    if best_val_loss is not None:
        return f"loss {best_val_loss:.4f}"
    return "-" if best_val_accuracy is None else f"{best_val_accuracy:.4f}"


def phrase(best_val_accuracy: float | None, best_val_loss: float | None) -> str:
    """A trial's or result's quality in words: 'val loss 2.4123' (the LM track) or 'val acc 0.4123'."""
    if best_val_loss is not None:
        return f"val loss {best_val_loss:.4f}"
    return "val acc " + ("-" if best_val_accuracy is None else f"{best_val_accuracy:.4f}")
