"""Trials on staged shards: the tf.data pipeline feeds model.fit, per-epoch sample counts stay
exact (they multiply into the score), the deadline still cuts an epoch, and a small model learns
the real digits well above chance."""

from __future__ import annotations

import time

import pytest

from aiperf.config import DataConfig
from aiperf.data.staging import stage
from aiperf.search.space import architecture
from aiperf.train.messages import EpochReport, TrialRequest
from aiperf.train.trial import run_trial


def _request(
    manifest,
    deadline: float,
    *,
    epochs: int = 2,
    batch: int = 8,
    filters: int = 4,
    stages: int = 1,
    lr: float = 0.05,
) -> TrialRequest:
    arch = architecture(
        {"stages": stages, "blocks_per_stage": 1, "base_filters": filters, "kernel_size": 3},
        manifest.image_shape,
        manifest.classes,
    )
    return TrialRequest(
        run_id=1,
        trial_key="t0",
        architecture=arch.to_dict(),
        learning_rate=lr,
        batch_size=batch,
        epochs=epochs,
        deadline=deadline,
        data_path=manifest.path,
        seed=1,
    )


def test_exact_sample_counts_on_shards(folder_data):
    reports = []
    result = run_trial(_request(folder_data, time.time() + 300), reports.append)
    assert result.status == "completed", result.message
    epochs = [r for r in reports if isinstance(r, EpochReport)]
    # 30 images in batches of 8: three full batches train (the partial one is dropped), all 12 evaluate.
    assert [(e.samples_trained, e.samples_evaluated) for e in epochs] == [(24, 12), (24, 12)]
    assert all(e.complete and e.val_accuracy is not None for e in epochs)


def test_deadline_cuts_an_epoch_on_shards(folder_data):
    result = run_trial(_request(folder_data, time.time() - 1), lambda _m: None)
    assert result.status == "stopped" and result.epochs == []


def test_a_batch_larger_than_the_data_fails_the_trial_clearly(folder_data):
    result = run_trial(_request(folder_data, time.time() + 60, batch=64), lambda _m: None)
    assert result.status == "failed"
    assert "batch size 64 is larger than the 30 training images" in result.message


@pytest.mark.slow
def test_digits_learned_well_above_chance(tmp_path):
    config = DataConfig(
        kind="digits", image_size=16, channels=1, train_samples=1437, val_samples=360
    )
    manifest = stage(config, 0, tmp_path)
    result = run_trial(
        _request(manifest, time.time() + 300, epochs=8, batch=16, filters=8, stages=2, lr=0.05),
        lambda _m: None,
    )
    assert result.status == "completed", result.message
    assert all(
        e.samples_trained == 1437 // 16 * 16 and e.samples_evaluated == 360 for e in result.epochs
    )
    best = max(e.val_accuracy for e in result.epochs)
    assert best >= 0.8, f"best val accuracy {best:.3f} on digits"


def test_kept_weights_evaluate_again_on_pixels_to_the_trials_accuracy(folder_data, tmp_path):
    """The trial trains its model behind the device-side scaling of uint8 pixels but keeps the
    counted model's weights; `verify`'s evaluation (aiperf.results.remeasure) scales the same way
    and gets the accuracy the trial recorded for its best epoch."""
    from dataclasses import replace
    from pathlib import Path
    from types import SimpleNamespace

    from aiperf.results.remeasure import evaluate_weights

    weights = tmp_path / "trial.weights.h5"
    request = replace(_request(folder_data, time.time() + 300), weights_path=str(weights))
    result = run_trial(request, lambda _m: None)
    assert result.status == "completed", result.message
    best = max(e.val_accuracy for e in result.epochs)
    record = SimpleNamespace(
        hyperparameters={"batch_size": 8}, devices=1, architecture=request.architecture
    )
    accuracy, samples = evaluate_weights(record, Path(weights), folder_data.path)  # type: ignore[arg-type]
    assert samples == 12 and accuracy == pytest.approx(best, abs=1e-6)
