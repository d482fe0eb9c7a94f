"""The LM track's optimiser recipe (issue 49, part 4): AdamW with decoupled weight decay on the
matrices only, Adam's beta_2 and global-norm gradient clipping as settings. One optimizer step on
hand-made variables, config validation and the workload hash; nothing trains
(tests/test_train_recipe.py's JAX script takes a step under jax.jit)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from aiperf.config import load_config
from aiperf.errors import UserError
from aiperf.results.division import OPEN, classify
from aiperf.train import recipe
from aiperf.train.messages import TrialRequest

RATE, DECAY = 0.01, 0.1


def _variables():
    """A kernel, a bias and a LayerNorm scale, each filled with 2.0."""
    import keras

    return [
        keras.Variable(np.full(shape, 2.0, dtype="float32"), name=name)
        for shape, name in (((3, 4), "kernel"), ((4,), "bias"), ((4,), "gamma"))
    ]


def _values(variables) -> list[np.ndarray]:
    import keras

    return [keras.ops.convert_to_numpy(v) for v in variables]


def _adamw(**options):
    settings = {"weight_decay": DECAY, "beta_2": 0.95, "clip_norm": None, **options}
    return recipe.optimizer("adamw", RATE, momentum=0.9, **settings)


# --- the optimizer -----------------------------------------------------------------------------------


def test_adamw_is_keras_adamw_with_the_settings_beta_2_and_clip():
    import keras

    optimizer = _adamw(clip_norm=1.0)
    assert isinstance(optimizer, keras.optimizers.AdamW)
    assert (optimizer.beta_1, optimizer.beta_2) == (0.9, 0.95)
    assert (optimizer.weight_decay, optimizer.global_clipnorm) == (DECAY, 1.0)
    assert not hasattr(optimizer, "l2"), "no L2 term on the gradient as well"
    adam = recipe.optimizer("adam", RATE, momentum=0.9, beta_2=0.95, clip_norm=2.0)
    assert type(adam) is keras.optimizers.Adam and (adam.beta_2, adam.global_clipnorm) == (
        0.95,
        2.0,
    )
    plain = recipe.optimizer("adam", RATE, momentum=0.9)
    assert (plain.beta_2, plain.global_clipnorm) == (0.999, None), "Keras' Adam, as before"


def test_a_zero_gradient_shrinks_a_matrix_by_rate_times_decay_and_nothing_else():
    """Decoupled: w -= rate * decay * w, outside Adam's update (which a zero gradient leaves at 0),
    on the kernel only; the bias and the norm's scale are not decayed."""
    kernel, bias, gamma = variables = _variables()
    _adamw().apply([np.zeros(v.shape, "float32") for v in variables], variables)
    assert _values([kernel])[0] == pytest.approx(np.full((3, 4), 2.0 * (1 - RATE * DECAY)))
    assert _values([bias, gamma]) == [pytest.approx(np.full(4, 2.0))] * 2


def test_the_decay_is_the_same_whatever_the_gradients_scale():
    """Adam's first step is rate * g / (|g| + eps) per element: about the rate for any scale. The
    decoupled decay comes on top, rate * decay * w, for a gradient of 1e-3 as for 1e3; an L2 term
    (the `adam` recipe) would go through Adam's normalisation and vanish under the large one."""
    moved = []
    for scale in (1e-3, 1e3):
        variables = _variables()
        _adamw().apply([np.full(v.shape, scale, "float32") for v in variables], variables)
        moved.append(_values(variables))
    for small, large in zip(*moved, strict=True):
        assert small == pytest.approx(large, abs=1e-5)
    kernel, bias = moved[0][0], moved[0][1]
    assert kernel == pytest.approx(bias[0] - 2.0 * RATE * DECAY, abs=1e-6)


def test_clipping_a_gradient_of_norm_10_to_1_is_the_step_of_that_gradient_over_10():
    """global_clipnorm: every variable's gradient scaled by clip / global norm where that is
    larger. Two steps (Adam's first alone is scale-free): the first at global norm 10, then a
    small one; with clip 1 the weights and both moments are those of the first over 10."""
    rng = np.random.default_rng(0)
    shapes = [v.shape for v in _variables()]
    first = [rng.standard_normal(s).astype("float32") for s in shapes]
    norm = np.sqrt(sum(float(np.sum(g**2)) for g in first))
    first = [g * (10.0 / norm) for g in first]
    second = [0.01 * rng.standard_normal(s).astype("float32") for s in shapes]

    def trained(clip_norm, scale):
        optimizer, variables = _adamw(clip_norm=clip_norm), _variables()
        optimizer.apply([g * scale for g in first], variables)
        optimizer.apply(second, variables)
        return _values(variables) + _values(optimizer.variables[1:])  # weights, then m and v

    clipped, reference, unclipped = trained(1.0, 1.0), trained(None, 0.1), trained(None, 1.0)
    for a, b in zip(clipped, reference, strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-7)
    assert not np.allclose(clipped[0], unclipped[0], rtol=1e-4), "clipping changed the step"


# --- settings ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("train.beta_2", 1.0, "less than 1"),
        ("train.beta_2", 0.0, "greater than 0"),
        ("train.clip_norm", 0.0, "greater than 0"),
        ("train.clip_norm", -1.0, "greater than 0"),
        ("train.optimizer", "lamb", "'sgd', 'adam', 'adamw' or 'lars'"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_setting(key, value, says):
    with pytest.raises(UserError) as error:
        load_config("quick", workers=1, overrides={key: value})
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"invalid setting {key}:"), message
    assert says in message, message


def test_at_their_defaults_they_leave_a_workload_as_it_was():
    """Keras' beta_2 and no clipping: out of the hash, as every earlier run trained; away from them
    a packaged profile's run is open and another workload."""
    config = load_config("quick", workers=1, runs_here=False)
    assert (config.train.beta_2, config.train.clip_norm) == (0.999, None)
    base = classify(config)
    stored = config.model_dump(mode="json")
    del stored["train"]["beta_2"], stored["train"]["clip_norm"]
    from aiperf.config import BenchmarkConfig

    assert classify(BenchmarkConfig.model_validate(stored)).config_hash == base.config_hash
    changed = classify(
        load_config("quick", workers=1, overrides={"train.clip_norm": 1.0}, runs_here=False)
    )
    assert changed.name == OPEN and changed.config_hash != base.config_hash
    assert changed.deviations == ("train.clip_norm: None -> 1.0",)


def test_the_request_and_the_step_carry_them():
    request = TrialRequest(
        run_id=1,
        trial_key="t",
        architecture={},
        learning_rate=1e-3,
        batch_size=16,
        epochs=1,
        deadline=time.time(),
        data_path="/nowhere",
        seed=0,
        optimizer="adamw",
        beta_2=0.95,
        clip_norm=1.0,
    )
    step = request.step_recipe(language=True)
    assert (step.optimizer, step.beta_2, step.clip_norm) == ("adamw", 0.95, 1.0)
