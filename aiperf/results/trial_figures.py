"""Each trial's figures an engineer reads beside the run's score: how fast it trained (samples, or an
LM's tokens, per second of its training steps), its model FLOPs utilisation and the share of its
seconds spent compiling. Only from what the trial recorded: its epochs' samples, its operations per
sample (tensor convention), its phases (aiperf.store.TrialPhases) and its worker's measured peak
(runs.worker_peaks); a figure whose facts were not recorded is None, never estimated.

- samples_per_s: the samples its epochs trained / its seconds in training steps (phases.train_s).
- tokens_per_s: samples_per_s x the transformer's sequence length (an LM trial's samples are windows
  of seq_len tokens); None for a CNN trial.
- mfu: its tensor-convention operations (trained and evaluated) / its seconds in training and
  evaluation steps (phases.stepping_s) / its worker's measured peak
  (aiperf.results.score.model_flops_utilisation, the run's MFU for one trial).
- compile_share: its compile seconds / the total of its phases (the seconds its worker measured
  for it, from its data feed being built to its last report).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from aiperf.arch.transformer import TransformerSpec, is_transformer
from aiperf.results.physical import recorded_for, worker_peaks
from aiperf.results.score import model_flops_utilisation
from aiperf.store import RunRecord, TrialRecord


@dataclass(frozen=True)
class TrialFigures:
    samples_per_s: float | None
    tokens_per_s: float | None
    mfu: float | None
    compile_share: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _tensor_ops(trial: TrialRecord) -> float | None:
    if trial.tensor_train_ops_per_sample is None:
        return None
    return float(
        sum(
            e.samples_trained * trial.tensor_train_ops_per_sample
            + e.samples_evaluated * (trial.tensor_eval_ops_per_sample or 0)
            for e in trial.epochs
        )
    )


def trial_figures(trial: TrialRecord, peaks: dict[str, float]) -> TrialFigures:
    """The trial's figures (module docstring); `peaks`: its run's, by worker
    (physical.worker_peaks)."""
    phases = trial.phases
    if phases is None:  # recorded before trial phases were, or its worker was lost
        return TrialFigures(None, None, None, None)
    trained = sum(e.samples_trained for e in trial.epochs)
    samples_per_s = trained / phases.train_s if phases.train_s > 0 else None
    tokens_per_s = None
    if samples_per_s is not None and is_transformer(trial.architecture):
        tokens_per_s = samples_per_s * TransformerSpec.from_dict(trial.architecture).seq_len
    ops = _tensor_ops(trial)
    mfu = None
    if ops is not None and phases.stepping_s > 0 and trial.worker is not None:
        mfu = model_flops_utilisation(ops / phases.stepping_s, recorded_for(trial.worker, peaks))
    total = phases.total_s
    compile_share = phases.compile_s / total if total > 0 else None
    return TrialFigures(samples_per_s, tokens_per_s, mfu, compile_share)


def run_trial_figures(run: RunRecord) -> dict[int, TrialFigures]:
    """Every trial's figures, by trial id."""
    peaks = worker_peaks(run)
    return {t.id: trial_figures(t, peaks) for t in run.trials}
