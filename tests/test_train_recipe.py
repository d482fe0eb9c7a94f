"""AIPerf's ImageNet recipe as settings (issue 24, item 4): a learning-rate schedule over the trial's
own steps with an optional warm-up, weight decay as an L2 term on the kernels' gradients, label
smoothing; validated in one line, out of the workload hash at their defaults, a deviation when a
packaged profile's run changes them, passed to every trial and applied there."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY

from aiperf.config import load_config
from aiperf.errors import UserError
from aiperf.results.division import CLOSED, OPEN, classify
from aiperf.train import recipe
from aiperf.train.messages import TrialRequest

RECIPE = {
    "train.lr_schedule": "cosine",
    "train.warmup_epochs": 0.5,
    "train.weight_decay": 1e-4,
    "train.label_smoothing": 0.1,
}


def _rate(schedule, step: int) -> float:
    import keras

    value = schedule(step) if callable(schedule) else schedule
    return float(keras.ops.convert_to_numpy(value))


# --- the schedule ------------------------------------------------------------------------------------


def test_constant_without_warmup_is_the_plain_rate_trials_had():
    assert recipe.learning_rate(0.05, "constant", epochs=3, steps_per_epoch=10) == 0.05


def test_cosine_decays_over_the_trials_own_steps_to_near_zero():
    schedule = recipe.learning_rate(0.1, "cosine", epochs=4, steps_per_epoch=25)
    assert _rate(schedule, 0) == pytest.approx(0.1)
    assert _rate(schedule, 50) == pytest.approx(0.05, rel=1e-5), "half-way: half the rate"
    assert 0 < _rate(schedule, 99) < 1e-4, "the last step trains at near 0"
    assert _rate(schedule, 500) == pytest.approx(0.0, abs=1e-9), "past the end it stays at 0"
    rates = [_rate(schedule, s) for s in range(100)]
    assert all(a > b for a, b in pairwise(rates)), "it only falls"


def test_warmup_ramps_linearly_from_a_tenth_then_decays():
    schedule = recipe.learning_rate(0.1, "cosine", epochs=4, steps_per_epoch=10, warmup_epochs=1)
    assert _rate(schedule, 0) == pytest.approx(0.01)
    assert _rate(schedule, 5) == pytest.approx(0.055)
    assert _rate(schedule, 10) == pytest.approx(0.1), "the trial's rate when the warm-up ends"
    assert 0 < _rate(schedule, 39) < 1e-3
    constant = recipe.learning_rate(0.1, "constant", epochs=4, steps_per_epoch=10, warmup_epochs=1)
    assert _rate(constant, 0) == pytest.approx(0.01)
    assert [_rate(constant, s) for s in (10, 25, 39, 80)] == pytest.approx([0.1] * 4)


def test_a_cosine_with_a_floor_ends_at_that_fraction_of_the_rate():
    """train.lr_floor (the LM track's 0.1, GPT-3's): after the warm-up the cosine runs from the
    trial's rate down to a tenth of it, not to nothing."""
    schedule = recipe.learning_rate(
        0.1, "cosine", epochs=4, steps_per_epoch=10, warmup_epochs=1, floor=0.1
    )
    assert _rate(schedule, 10) == pytest.approx(0.1)
    assert _rate(schedule, 10 + 15) == pytest.approx(0.055, rel=1e-5), "half-way: between both"
    assert _rate(schedule, 500) == pytest.approx(0.01, rel=1e-5), "it ends at a tenth"


def test_a_warmup_longer_than_the_trial_is_cut_to_it():
    schedule = recipe.learning_rate(0.1, "cosine", epochs=2, steps_per_epoch=10, warmup_epochs=5)
    assert _rate(schedule, 0) == pytest.approx(0.01) and _rate(schedule, 19) == pytest.approx(0.1)


# --- weight decay ------------------------------------------------------------------------------------


def test_defaults_build_keras_own_optimizers():
    import keras

    sgd = recipe.optimizer("sgd", 0.05, momentum=0.9)
    assert type(sgd) is keras.optimizers.SGD and sgd.weight_decay is None
    assert type(recipe.optimizer("adam", 0.01, momentum=0.9)) is keras.optimizers.Adam


def test_weight_decay_adds_to_the_kernels_gradient_not_to_biases():
    import keras

    kernel = keras.Variable(np.full((2, 2), 2.0, dtype="float32"))
    bias = keras.Variable(np.full((2,), 2.0, dtype="float32"))
    sgd = recipe.optimizer("sgd", 0.5, momentum=0.9, weight_decay=0.01)
    assert isinstance(sgd, keras.optimizers.SGD) and sgd.l2 == 0.01
    assert sgd.weight_decay is None, "not Keras' decoupled decay as well"
    sgd.apply([np.zeros((2, 2), "float32"), np.zeros((2,), "float32")], [kernel, bias])
    # first step, velocity 0: w - rate * (0 + l2 * w)
    assert keras.ops.convert_to_numpy(kernel) == pytest.approx(np.full((2, 2), 2.0 - 0.5 * 0.02))
    assert keras.ops.convert_to_numpy(bias) == pytest.approx(np.full((2,), 2.0))


# --- label smoothing ---------------------------------------------------------------------------------


def test_smoothing_raises_a_confident_correct_predictions_loss_as_keras_computes_it():
    import keras

    assert recipe.loss(0.0) == "sparse_categorical_crossentropy"
    labels = np.array([0, 2])
    predicted = np.array([[0.98, 0.01, 0.01], [0.01, 0.01, 0.98]], dtype="float32")
    plain = keras.losses.SparseCategoricalCrossentropy()(labels, predicted)
    smoothed = keras.ops.mean(recipe.loss(0.1)(labels, predicted))
    expected = keras.losses.CategoricalCrossentropy(label_smoothing=0.1)(
        np.eye(3)[labels], predicted
    )
    assert float(smoothed) == pytest.approx(float(expected), rel=1e-6)
    assert float(smoothed) > float(plain) + 0.1


def test_smoothing_leaves_accuracy_alone():
    import keras

    rng = np.random.default_rng(0)
    x, y = rng.random((64, 4), dtype=np.float32), rng.integers(0, 3, 64)
    results = []
    for smoothing in (0.0, 0.1):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
        model.compile(optimizer="sgd", loss=recipe.loss(smoothing), metrics=["accuracy"])
        results.append(model.evaluate(x, y, batch_size=32, verbose=0, return_dict=True))
    plain, smoothed = results
    predicted = np.argmax(keras.ops.convert_to_numpy(model(x)), axis=-1)
    assert smoothed["accuracy"] == plain["accuracy"] == pytest.approx(np.mean(predicted == y))
    assert smoothed["loss"] != plain["loss"]


# --- config, hash and division -----------------------------------------------------------------------

# quick's workload hash before these settings existed (aiperf.results.division.config_hash of
# load_config("quick") at the parent commit), when quick named aiperf-rules-1.0. The ruleset's name
# is part of the workload (results of two rulesets are never compared), so quick under 1.2 has
# another hash; judged by 1.0 again, its settings must still give this one.
QUICK_HASH = "304e168a750d1c678b704f798e932d2bd798b539da46b075391d78a9f98fe572"


def test_quick_keeps_its_workload_hash_and_the_defaults_are_plain_training():
    config = load_config("quick", workers=1)
    train = config.train
    assert (train.lr_schedule, train.warmup_epochs, train.weight_decay, train.label_smoothing) == (
        "constant",
        0.0,
        0.0,
        0.0,
    )
    assert classify(config).name == CLOSED
    as_in_1_0 = classify(config.model_copy(update={"ruleset": "aiperf-rules-1.0"}))
    assert as_in_1_0.config_hash == QUICK_HASH


def test_the_recipe_is_another_workload_and_opens_a_packaged_profile():
    base = classify(load_config("quick", workers=1)).config_hash
    division = classify(load_config("quick", workers=1, overrides=RECIPE))
    assert division.name == OPEN and division.config_hash != base
    assert division.deviations == (
        "train.label_smoothing: 0.0 -> 0.1",
        "train.lr_schedule: 'constant' -> 'cosine'",
        "train.warmup_epochs: 0.0 -> 0.5",
        "train.weight_decay: 0.0 -> 0.0001",
    )
    one = classify(load_config("quick", workers=1, overrides={"train.weight_decay": 1e-4}))
    assert one.config_hash not in (base, division.config_hash)


def test_imagenet_trains_with_aiperfs_recipe():
    config = load_config("imagenet", workers=1, overrides={"data.source": "/data"})
    train = config.train
    # MLPerf's ResNet reference at a node's batch from aiperf-rules-1.6 (tests/test_lars.py)
    assert (train.optimizer, train.momentum, train.lr_schedule) == ("lars", 0.9, "polynomial")
    assert (train.weight_decay, train.label_smoothing) == (5e-5, 0.1)
    assert train.warmup_epochs < min(train.epochs)


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("train.weight_decay", -1e-4, "greater than or equal to 0"),
        ("train.label_smoothing", 1.0, "less than 1"),
        ("train.label_smoothing", -0.1, "greater than or equal to 0"),
        ("train.lr_schedule", "step", "'constant', 'cosine' or 'polynomial'"),
        ("train.warmup_epochs", -1, "greater than or equal to 0"),
        ("train.warmup_epochs", 1, "less than every round's epochs (train.epochs' smallest is 1)"),
        # the LM track's AdamW recipe (aiperf-rules-1.8)
        ("train.beta_2", 1.0, "less than 1"),
        ("train.beta_2", 0.0, "greater than 0"),
        ("train.clip_norm", 0.0, "greater than 0"),
        ("train.clip_norm", -1.0, "greater than 0"),
        ("train.lr_floor", 1.0, "less than 1"),
        ("train.optimizer", "lamb", "'sgd', 'adam', 'adamw' or 'lars'"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_setting(key, value, says):
    with pytest.raises(UserError) as error:
        load_config("quick", workers=1, overrides={key: value})
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"invalid setting {key}:"), message
    assert says in message, message


# --- trials ------------------------------------------------------------------------------------------


def test_the_orchestrator_sends_them_with_every_trial(tmp_path):
    from conftest import FinishedTrial
    from simulated_search import simulated_orchestrator

    from aiperf.train.messages import TrialResult
    from aiperf.train.simulated import SimulatedModel, plan_trial

    sent: list[TrialRequest] = []

    def launch(request: TrialRequest) -> FinishedTrial:
        sent.append(request)
        model = SimulatedModel(ops_per_s=1e12, train_samples=384, val_samples=128)
        plan = plan_trial(request, time.time(), "w", model)
        return FinishedTrial(TrialResult(request.trial_key, plan.status, plan.built, plan.epochs))

    orchestrator = simulated_orchestrator(tmp_path, launch, overrides=RECIPE)
    with orchestrator.recorder.store:
        started = time.time()
        orchestrator.run(started, started + 0.3)
    assert sent
    assert all(
        (r.lr_schedule, r.warmup_epochs, r.weight_decay, r.label_smoothing)
        == ("cosine", 0.5, 1e-4, 0.1)
        for r in sent
    )


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    from aiperf.data.staging_npz import stage_synthetic

    config = load_config("quick", workers=1, overrides=TINY)
    return stage_synthetic(config.data, 0, Path(tmp_path_factory.mktemp("data")))


def test_a_trial_trains_with_the_schedule_the_decay_and_the_smoothing(staged, monkeypatch):
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
        batch_size=64,
        epochs=2,
        deadline=time.time() + 300,
        data_path=staged.path,
        seed=1,
        lr_schedule="cosine",
        warmup_epochs=0.5,
        weight_decay=1e-4,
        label_smoothing=0.1,
    )
    result = run_trial(request, lambda _m: None)
    assert result.status == "completed", result.message
    optimizer = built[0].optimizer
    assert optimizer.l2 == 1e-4
    steps = 384 // 64
    assert int(keras.ops.convert_to_numpy(optimizer.iterations)) == 2 * steps, (
        "one schedule across the trial's per-epoch fits"
    )
    schedule = optimizer._learning_rate  # the LearningRateSchedule the trial built
    assert isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule)
    assert _rate(schedule, 0) == pytest.approx(0.005, rel=1e-6), "warm-up: a tenth of the rate"
    assert _rate(schedule, steps // 2) == pytest.approx(0.05, rel=1e-6), "half an epoch in"
    assert _rate(schedule, 2 * steps - 1) < 0.01
    assert all(e.loss is not None and e.val_accuracy is not None for e in result.epochs)


JAX_SCRIPT = """
import json
import keras, numpy as np
from aiperf.train import recipe
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
rate = recipe.learning_rate(0.1, "cosine", epochs=3, steps_per_epoch=4, warmup_epochs=0.5)
model.compile(optimizer=recipe.optimizer("sgd", rate, momentum=0.9, weight_decay=1e-4),
              loss=recipe.loss(0.1), metrics=["accuracy"], jit_compile=True)
rng = np.random.default_rng(0)
x, y = rng.random((64, 4), dtype=np.float32), rng.integers(0, 3, 64)
history = model.fit(x, y, batch_size=16, epochs=1, verbose=0)
# aiperf-rules-1.6's recipe: LARS and the polynomial schedule, under jit too
keras.utils.set_random_seed(0)
large = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
rate = recipe.learning_rate(2.0, "polynomial", epochs=3, steps_per_epoch=4, warmup_epochs=0.5)
large.compile(optimizer=recipe.optimizer("lars", rate, momentum=0.9, weight_decay=5e-5),
              loss=recipe.loss(0.1), metrics=["accuracy"], jit_compile=True)
lars = large.fit(x, y, batch_size=16, epochs=1, verbose=0)
# aiperf-rules-1.8's LM recipe: AdamW, a zero gradient's step jitted as the JAX trainer takes it
import jax
adamw = recipe.optimizer("adamw", 0.01, momentum=0.9, weight_decay=0.1, beta_2=0.95, clip_norm=1.0)
kernel, scale = keras.Variable(np.full((3, 4), 2.0, "float32")), keras.Variable(np.full(4, 2.0, "float32"))
adamw.build([kernel, scale])
zeros = [np.zeros((3, 4), "float32"), np.zeros(4, "float32")]
step = jax.jit(lambda weights, slots: adamw.stateless_apply(slots, zeros, weights))
(kernel, scale), _ = step([kernel.value, scale.value], [v.value for v in adamw.variables])
print(json.dumps({"backend": keras.backend.backend(), "loss": history.history["loss"][-1],
                  "adamw_kernel": float(np.asarray(kernel)[0, 0]),
                  "adamw_scale": float(np.asarray(scale)[0]),
                  "steps": int(model.optimizer.iterations.numpy()),
                  "lr": float(model.optimizer.learning_rate),
                  "lars_loss": lars.history["loss"][-1],
                  "lars_steps": int(large.optimizer.iterations.numpy()),
                  "lars_lr": float(large.optimizer.learning_rate)}))
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="JAX is not installed")
def test_the_recipe_trains_under_jax_jit():
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(
        [sys.executable, "-c", JAX_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    facts = json.loads(out.strip().splitlines()[-1])
    assert facts["backend"] == "jax" and facts["steps"] == 4
    # step 4 of 12, two of them warm-up: a third of the way down the cosine
    assert np.isfinite(facts["loss"]) and facts["lr"] == pytest.approx(0.1 * 0.9045, rel=1e-3)
    # LARS: step 4 of 12, two of them warm-up, a fifth of the way down the power-2 decay to 1e-4
    assert np.isfinite(facts["lars_loss"]) and facts["lars_steps"] == 4
    assert facts["lars_lr"] == pytest.approx((2.0 - 1e-4) * 0.8**2 + 1e-4, rel=1e-5)
    # AdamW (aiperf-rules-1.8): the matrix shrinks by rate x decay, the norm's scale does not
    assert facts["adamw_kernel"] == pytest.approx(2.0 * (1 - 0.01 * 0.1), rel=1e-6)
    assert facts["adamw_scale"] == 2.0
