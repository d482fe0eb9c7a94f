"""The LM track's optimiser recipe (issue 49, part 4; aiperf-rules-1.8): AdamW with decoupled weight
decay on the matrices only, beta_2 0.95, global-norm gradient clipping, a warm-up then cosine. One
optimizer step on hand-made variables, config validation, the ruleset and the division; nothing
trains (tests/test_lm_run.py's run trains with it, tests/test_train_recipe.py's JAX script takes a
step under jax.jit)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import numpy as np
import pytest

from aiperf.config import ValidityConfig, load_config
from aiperf.results.division import CLOSED, OPEN, classify, flatten
from aiperf.rules import load_ruleset
from aiperf.train import recipe
from aiperf.train.messages import TrialRequest

V17, V18 = "aiperf-rules-1.7", "aiperf-rules-1.8"
LM = ("lm-quick", "lm")
# aiperf-rules-1.7.yaml as published: LM runs recorded under it are judged by it
V17_SHA256 = "4cf1363e706fb6715403b3d4016b4792eff7b4aebb4ecef02314c5d2cda28e14"
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
    from aiperf.train.fit import StepRecipe

    seed_step = StepRecipe.of_train(load_config("lm-quick", workers=1, runs_here=False).train)
    assert (seed_step.optimizer, seed_step.beta_2, seed_step.clip_norm) == ("adamw", 0.95, 1.0)


def _validity(version: str, profile: str) -> ValidityConfig:
    """The validity section a run of `profile` recorded under `version`."""
    return ValidityConfig(**load_ruleset(version).for_profile(profile).validity())


# --- the ruleset -------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", LM)
def test_the_lm_profiles_name_1_8_and_train_with_its_recipe(profile):
    config = load_config(profile, workers=1, runs_here=False)
    assert config.ruleset == V18
    wanted = load_ruleset(V18).for_profile(profile).recipe
    assert wanted["train.optimizer"] == "adamw" and wanted["train.clip_norm"] == 1.0
    flat = flatten(config.model_dump(mode="json"))
    assert {k: flat[k] for k in wanted} == wanted, "the profile sets what the ruleset closes"
    train = config.train
    assert (train.beta_2, train.lr_schedule, train.weight_decay) == (0.95, "cosine", 0.1)
    assert min(config.search.space.warmup_epochs or [0.0]) > 0, "every trial warms up"
    division = classify(config)
    assert (division.name, division.ruleset, division.deviations) == (CLOSED, V18, ())


def test_1_7_stays_as_published_and_1_8_keeps_its_figures():
    text = (
        Path(__file__).resolve().parent.parent / "aiperf" / "rules" / f"{V17}.yaml"
    ).read_bytes()
    assert hashlib.sha256(text).hexdigest() == V17_SHA256, "a published ruleset is never edited"
    old, new = load_ruleset(V17), load_ruleset(V18)
    assert (new.settable, new.choices, new.series, new.fit) == (
        old.settable,
        old.choices,
        old.series,
        old.fit,
    )
    for profile, rules in old.profiles.items():
        same = new.profiles[profile]
        assert (same.validity(), same.data, same.seed_architecture) == (
            rules.validity(),
            rules.data,
            rules.seed_architecture,
        ), profile
        if profile not in LM:
            assert (same.recipe, same.recipe_before) == (rules.recipe, rules.recipe_before)


@pytest.mark.parametrize("profile", LM)
@pytest.mark.parametrize("version", ["aiperf-rules-1.5", "aiperf-rules-1.6", V17])
def test_a_run_recorded_before_1_8_is_judged_by_its_own_recipe(profile, version):
    """An LM run as 1.5-1.7 made it (Adam, weight decay an L2 term) stays closed under the version
    it recorded; AdamW under that version is open; the two never share a workload hash."""
    before = load_ruleset(V18).for_profile(profile).recipe_before
    assert before["train.optimizer"] == "adam" and before["train.clip_norm"] is None
    recorded = {"ruleset": version, "validity": _validity(version, profile)}
    then = load_config(profile, workers=1, overrides=before, runs_here=False)
    then = then.model_copy(update=recorded)
    judged = classify(then)
    assert (judged.name, judged.ruleset, judged.deviations) == (CLOSED, version, ())
    now = load_config(profile, workers=1, runs_here=False)
    adamw_then = classify(now.model_copy(update=recorded))
    assert adamw_then.name == OPEN
    assert "train.optimizer: 'adam' -> 'adamw'" in adamw_then.deviations
    assert judged.config_hash != classify(now).config_hash
