"""The large-batch recipe of aiperf-rules-1.6 (issue 48, part 5): LARS and MLPerf's ResNet reference
schedule (aiperf/train/lars.py), the ruleset that closes them for the imagenet profiles, and the
runs recorded under 1.4-1.5, still judged by their own recipe. One optimizer step, a schedule at a
few steps and configs: nothing trains, no run starts."""

from __future__ import annotations

import numpy as np
import pytest

from aiperf.config import available_profiles, load_config
from aiperf.errors import UserError
from aiperf.results.division import CLOSED, OPEN, classify, flatten
from aiperf.rules import load_ruleset
from aiperf.train import lars, recipe

V14, V15, V16 = "aiperf-rules-1.4", "aiperf-rules-1.5", "aiperf-rules-1.6"
IMAGENETS = ("imagenet", "imagenet-shaped")
PLACEHOLDER_SOURCE = {"data.source": "/data"}  # imagenet needs one to load; never read here


def _imagenet(profile: str = "imagenet", **overrides):
    extra = PLACEHOLDER_SOURCE if profile == "imagenet" else {}
    return load_config(profile, workers=1, overrides={**extra, **overrides}, runs_here=False)


def _rate(schedule, step: int) -> float:
    import keras

    return float(keras.ops.convert_to_numpy(schedule(step)))


# --- the optimizer -----------------------------------------------------------------------------------


def test_one_lars_step_is_the_references_update_by_hand():
    """A kernel: v = -rate x trust x (g + wd w) with trust = eta |w| / (|g| + wd |w|); w += v.
    A bias (1-D): plain momentum SGD, no decay and no trust ratio. Then a second step, through the
    momentum."""
    import keras

    rate, momentum, decay = 2.0, 0.9, 0.01
    kernel = keras.Variable(np.array([[3.0, 0.0], [0.0, 4.0]], dtype="float32"))  # |w| = 5
    bias = keras.Variable(np.array([1.0, -1.0], dtype="float32"))
    g_kernel = np.array([[0.0, 0.6], [0.8, 0.0]], dtype="float32")  # |g| = 1
    g_bias = np.array([0.5, 0.25], dtype="float32")
    optimizer = recipe.optimizer("lars", rate, momentum=momentum, weight_decay=decay)
    w0 = np.array([[3.0, 0.0], [0.0, 4.0]])
    trust = lars.ETA * 5.0 / (1.0 + decay * 5.0)
    v1 = -rate * trust * (g_kernel + decay * w0)
    b_v1 = -rate * g_bias
    optimizer.apply_gradients([(g_kernel, kernel), (g_bias, bias)])
    np.testing.assert_allclose(kernel.numpy(), w0 + v1, rtol=1e-6)
    np.testing.assert_allclose(bias.numpy(), np.array([1.0, -1.0]) + b_v1, rtol=1e-6)

    w1 = w0 + v1
    w1_norm = float(np.linalg.norm(w1))
    trust = lars.ETA * w1_norm / (1.0 + decay * w1_norm)
    v2 = momentum * v1 - rate * trust * (g_kernel + decay * w1)
    optimizer.apply_gradients([(g_kernel, kernel), (g_bias, bias)])
    np.testing.assert_allclose(kernel.numpy(), w1 + v2, rtol=1e-5)
    np.testing.assert_allclose(
        bias.numpy(), np.array([1.0, -1.0]) + b_v1 + (momentum * b_v1 - rate * g_bias), rtol=1e-6
    )


def test_a_zero_gradient_or_weight_gets_a_trust_ratio_of_one():
    """Where |w| or |g| is 0 the reference's trust ratio is 1 (never a division by 0): a kernel
    at zero moves by the plain rate on its gradient."""
    import keras

    kernel = keras.Variable(np.zeros((2, 2), dtype="float32"))
    gradient = np.full((2, 2), 0.5, dtype="float32")
    recipe.optimizer("lars", 0.1, momentum=0.9, weight_decay=1e-4).apply_gradients(
        [(gradient, kernel)]
    )
    np.testing.assert_allclose(kernel.numpy(), -0.1 * gradient, rtol=1e-6)
    assert np.isfinite(kernel.numpy()).all()


def test_lars_has_no_decoupled_decay_and_other_optimizers_are_unchanged():
    optimizer = recipe.optimizer("lars", 1.0, momentum=0.9, weight_decay=5e-5)
    assert optimizer.weight_decay is None, "the decay is the reference's, inside the update"
    assert (optimizer.weight_decay_rate, optimizer.eta, optimizer.epsilon) == (5e-5, 0.001, 0.0)
    assert type(recipe.optimizer("sgd", 0.1, momentum=0.9)).__name__ == "SGD"
    assert type(recipe.optimizer("sgd", 0.1, momentum=0.9, weight_decay=1e-4)).__name__ == (
        "SGDWithL2"
    )


# --- the schedule ------------------------------------------------------------------------------------


def test_polynomial_warms_up_from_zero_then_decays_with_power_two():
    """10 epochs of 10 steps, 2 of warm-up, at a rate of 10: the reference's shape."""
    schedule = recipe.learning_rate(
        10.0, "polynomial", epochs=10, steps_per_epoch=10, warmup_epochs=2
    )
    assert _rate(schedule, 0) == pytest.approx(10.0 / 20)
    assert _rate(schedule, 9) == pytest.approx(10.0 * 10 / 20)
    assert _rate(schedule, 19) == pytest.approx(10.0)
    assert _rate(schedule, 20) == pytest.approx(10.0), "the decay starts at the rate"
    end = lars.POLY_END_RATE
    assert _rate(schedule, 60) == pytest.approx((10.0 - end) * 0.5**2 + end), "power 2"
    assert _rate(schedule, 100) == pytest.approx(end) and _rate(schedule, 500) == (
        pytest.approx(end)
    ), "it ends at 1e-4 and stays there"


def test_polynomial_without_warmup_starts_at_the_rate_and_never_ends_above_it():
    schedule = recipe.learning_rate(5e-5, "polynomial", epochs=2, steps_per_epoch=5)
    assert _rate(schedule, 0) == pytest.approx(5e-5)
    assert _rate(schedule, 10) == pytest.approx(5e-5), "a rate under 1e-4 ends where it began"


def test_polynomial_is_a_setting_value_and_a_bad_one_names_all_three():
    assert load_config("quick", workers=1, overrides={"train.lr_schedule": "polynomial"})
    with pytest.raises(UserError) as error:
        load_config("quick", workers=1, overrides={"train.lr_schedule": "step"})
    assert "'constant', 'cosine' or 'polynomial'" in str(error.value)
    with pytest.raises(UserError) as error:
        load_config("quick", workers=1, overrides={"train.optimizer": "lamb"})
    assert "'sgd', 'adam', 'adamw' or 'lars'" in str(error.value)


# --- the ruleset -------------------------------------------------------------------------------------


def test_1_6_keeps_1_5s_figures_and_states_the_recipe_of_the_imagenet_profiles():
    old, new = load_ruleset(V15), load_ruleset(V16)
    assert (new.settable, new.choices, new.series) == (old.settable, old.choices, old.series)
    for profile, rules in new.profiles.items():
        same = old.profiles[profile]
        assert (rules.min_budget_s, rules.accuracy_floor, rules.data) == (
            same.min_budget_s,
            same.accuracy_floor,
            same.data,
        ), profile
        assert not same.recipe and bool(rules.recipe) == (profile in IMAGENETS), profile
    recipe_16 = new.for_profile("imagenet").recipe
    assert recipe_16["train.optimizer"] == "lars"
    assert recipe_16["train.lr_schedule"] == "polynomial"
    assert recipe_16["train.lr_reference_batch"] is None


@pytest.mark.parametrize("profile", IMAGENETS)
def test_the_imagenet_profiles_name_1_6_and_train_with_its_recipe(profile):
    config = _imagenet(profile)
    assert config.ruleset == V16
    flat = flatten(config.model_dump(mode="json"))
    wanted = load_ruleset(V16).for_profile(profile).recipe
    assert {k: flat[k] for k in wanted} == wanted, "the profile sets what the ruleset closes"
    assert (config.train.momentum, config.train.label_smoothing) == (0.9, 0.1)
    division = classify(config)
    assert (division.name, division.ruleset, division.deviations) == (CLOSED, V16, ())


def test_sgd_in_a_1_6_imagenet_run_is_open():
    division = classify(_imagenet(**{"train.optimizer": "sgd"}))
    assert division.name == OPEN
    assert division.deviations == ("train.optimizer: 'lars' -> 'sgd'",)


def test_the_other_profiles_keep_their_rulesets_and_recipes():
    for profile in available_profiles():
        if profile in IMAGENETS:
            continue
        config = load_config(profile, workers=1, runs_here=False)
        assert config.ruleset in ("aiperf-rules-1.3", "aiperf-rules-1.8"), (
            profile
        )  # lm: 1.8, enwik8: 1.8
        assert config.train.optimizer != "lars" and config.train.lr_schedule != "polynomial"


@pytest.mark.parametrize("ruleset", [V14, V15])
def test_a_run_recorded_under_1_4_or_1_5_is_judged_by_its_own_recipe(ruleset):
    """An imagenet run as 1.4 made it (SGD, the rate scaled with the batch, weight decay 1e-4,
    its learning-rate range) stays closed under the version it recorded; LARS under that version
    is open; and the two never share a workload hash."""
    before = load_ruleset(V16).for_profile("imagenet").recipe_before
    as_then = _imagenet(**before).model_copy(update={"ruleset": ruleset})
    then = classify(as_then)
    assert (then.name, then.ruleset, then.deviations) == (CLOSED, ruleset, ())
    lars_then = classify(_imagenet().model_copy(update={"ruleset": ruleset}))
    assert lars_then.name == OPEN
    assert "train.optimizer: 'sgd' -> 'lars'" in lars_then.deviations
    assert then.config_hash != classify(_imagenet()).config_hash
