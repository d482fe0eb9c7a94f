"""mixed_float16 is closed from aiperf-rules-1.1 on, on the ground that its loss is scaled dynamically.
A trial builds its model under the run's dtype policy, and Keras' `model.compile` wraps the optimizer
in a LossScaleOptimizer when that policy is mixed_float16: this checks that a trial's compiled model
gets one that scales its loss, and that float32 and bfloat16 trials keep the plain optimizer.

The trial's deadline has passed before it starts, so it builds and compiles its model and trains
nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import TINY

from aiperf.config import load_config
from aiperf.train.messages import TrialRequest


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    from aiperf.data.staging_npz import stage_synthetic

    config = load_config("quick", workers=1, overrides=TINY)
    return stage_synthetic(config.data, 0, Path(tmp_path_factory.mktemp("data")))


def compiled_model(staged, monkeypatch, precision: str):
    """The model a trial of `precision` compiles, and the trial's result."""
    import keras

    import aiperf.arch
    from aiperf.search.space import architecture
    from aiperf.train.trial import run_trial

    built = []
    build = aiperf.arch.build_model
    monkeypatch.setattr(
        aiperf.arch, "build_model", lambda *a, **k: built.append(build(*a, **k)) or built[-1]
    )
    arch = architecture(
        {"stages": 1, "blocks_per_stage": 1, "base_filters": 4, "kernel_size": 3},
        staged.image_shape,
        staged.classes,
    )
    request = TrialRequest(
        run_id=1,
        trial_key="t0",
        architecture=arch.to_dict(),
        learning_rate=0.05,
        batch_size=32,
        epochs=1,
        deadline=time.time() - 1,  # built and compiled, never trained
        data_path=staged.path,
        seed=1,
        precision=precision,
    )
    try:
        result = run_trial(request, lambda _m: None)
    finally:
        keras.mixed_precision.set_global_policy("float32")  # the process's: leave it as found
    assert result.status != "failed", result.message
    assert built and result.epochs == [], "compiled, not trained"
    return built[0]


def test_a_mixed_float16_trial_scales_its_loss(staged, monkeypatch):
    import keras

    model = compiled_model(staged, monkeypatch, "mixed_float16")
    optimizer = model.optimizer
    assert isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    assert optimizer.built, "its scale is a variable before the first step"
    scale = float(keras.ops.convert_to_numpy(optimizer.dynamic_scale))
    assert scale == optimizer.initial_scale > 1
    assert float(keras.ops.convert_to_numpy(optimizer.scale_loss(2.0))) == 2.0 * scale
    assert not isinstance(optimizer.inner_optimizer, keras.optimizers.LossScaleOptimizer)


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
def test_float32_and_bfloat16_trials_keep_the_plain_optimizer(staged, monkeypatch, precision):
    import keras

    model = compiled_model(staged, monkeypatch, precision)
    assert not isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
