"""The LM track's quality (validation loss, lower is better) and its regulated score, beside the CNN
track's accuracy: aiperf.quality and the verdict and score that use it."""

from __future__ import annotations

import dataclasses
import math

import pytest

from aiperf import quality
from aiperf.config import ValidityConfig, load_config
from aiperf.results.score import compute_score, known_in_advance, verdict
from aiperf.store import RunWork
from aiperf.store.records import EpochWork

LM_RULES = ValidityConfig(min_budget_s=60.0, accuracy_floor=0.0, loss_ceiling=3.0)
CNN_RULES = ValidityConfig(min_budget_s=60.0, accuracy_floor=0.2)


def test_better_and_best_follow_the_metric_direction():
    assert quality.better(quality.LOSS, 1.0, 2.0) and not quality.better(quality.LOSS, 2.0, 1.0)
    assert quality.better(quality.ACCURACY, 0.6, 0.5)
    assert not quality.better(quality.ACCURACY, 0.4, 0.5)
    assert quality.better(quality.LOSS, 5.0, None)
    assert quality.best(quality.LOSS, [2.5, None, 1.5, 3.0]) == 1.5
    assert quality.best(quality.ACCURACY, [0.2, None, 0.7]) == 0.7
    assert quality.best(quality.LOSS, [None]) is None
    # A diverged epoch's NaN loss is never the best, nor better than anything.
    assert quality.best(quality.LOSS, [float("nan"), 2.0, float("inf")]) == 2.0
    assert not quality.better(quality.LOSS, float("nan"), None)
    assert (
        quality.direction(quality.LOSS) == "min" and quality.direction(quality.ACCURACY) == "max"
    )
    with pytest.raises(ValueError, match="unknown quality"):
        quality.better("val_perplexity", 1.0, 2.0)


def test_loss_gain_is_what_was_learned_beyond_a_uniform_guess():
    assert quality.loss_gain(math.log(256), 256) == 0.0
    assert quality.loss_gain(9.0, 256) == 0.0  # worse than uniform: nothing learned
    assert quality.loss_gain(1.0, 256) == pytest.approx(math.log(256) - 1.0)
    assert quality.loss_gain(float("nan"), 256) == 0.0
    assert quality.loss_gain(None, 256) == 0.0
    # monotone: a lower loss gains more
    assert quality.loss_gain(1.0, 256) > quality.loss_gain(2.0, 256)


def test_an_lm_result_is_judged_by_its_loss_ceiling_not_by_accuracy():
    common = {"budget_s": 120.0, "trials_completed": 2}
    assert verdict(best_val_accuracy=0.01, best_val_loss=2.4, rules=LM_RULES, **common) == []
    over = verdict(best_val_accuracy=0.9, best_val_loss=3.2, rules=LM_RULES, **common)
    assert over == ["loss over the ceiling: best val loss 3.2000 nats/token > 3"]
    nan = verdict(best_val_accuracy=0.9, best_val_loss=float("nan"), rules=LM_RULES, **common)
    assert len(nan) == 1 and nan[0].startswith("loss over the ceiling")
    assert verdict(best_val_accuracy=0.9, best_val_loss=None, rules=LM_RULES, **common) == [
        "no validation loss was measured"
    ]
    # The CNN track ignores a loss: its floor is on accuracy.
    assert verdict(best_val_accuracy=0.5, best_val_loss=9.0, rules=CNN_RULES, **common) == []
    assert known_in_advance(budget_s=120.0, rules=LM_RULES, simulated=False) == []


def test_an_lm_score_is_regulated_by_its_loss_and_vocabulary():
    work = [EpochWork(100, 50, 10, 5, 30, 10)]
    score = compute_score(
        RunWork(
            epochs=work,
            elapsed_s=10.0,
            best_val_accuracy=0.4,
            val_samples=50,
            best_val_loss=2.0,
            vocab_size=256,
            trials_completed=1,
            budget_s=60.0,
        ),
        rules=LM_RULES,
    )
    assert score.valid and score.best_val_loss == 2.0
    assert score.regulated_score == pytest.approx(score.ops * (math.log(256) - 2.0))
    cnn = compute_score(
        RunWork(
            epochs=work,
            elapsed_s=10.0,
            best_val_accuracy=0.4,
            val_samples=50,
            best_val_loss=2.0,
            vocab_size=256,
            trials_completed=1,
            budget_s=60.0,
        ),
        rules=CNN_RULES,
    )
    assert cnn.best_val_loss is None
    assert cnn.regulated_score == pytest.approx(cnn.ops * abs(math.log(1 - 0.4)))


def test_the_lm_profiles_are_closed_and_judged_by_loss():
    from aiperf.results.division import classify

    for profile in ("lm-quick", "lm"):
        config = load_config(profile, workers=1, runs_here=False)
        judged = classify(config)
        assert judged.closed and judged.ruleset == "aiperf-rules-1.8", profile  # 1.7's figures
        assert config.search.objective == quality.LOSS
        assert config.validity.loss_ceiling == {"lm-quick": 2.25, "lm": 1.0}[profile]
        assert config.validity.entropy_floor is not None
    quick = classify(load_config("quick", workers=1, runs_here=False))
    assert quick.config_hash != classify(load_config("lm-quick", workers=1)).config_hash


def test_aiperf_rules_says_what_a_closed_lm_result_needs():
    from typer.testing import CliRunner

    from aiperf.cli.main import app

    shown = CliRunner().invoke(app, ["rules", "lm-quick", "--json"])
    assert shown.exit_code == 0, shown.output
    required = __import__("json").loads(shown.output)
    assert required["loss_ceiling"] == 2.25 and required["ruleset"] == "aiperf-rules-1.8"
    assert required["entropy_floor"] == 0.5972
    assert required["batch_size"]["tokens"] == [1024, 2048]
    assert required["choices"]["data.feed"] == ["auto", "tf.data", "dali"]
    text = CliRunner().invoke(app, ["rules", "lm-quick"]).output
    assert "loss ceiling       2.25 nats/token" in text and "accuracy floor" not in text
    assert "entropy floor      0.5972 nats/token" in text
    assert "4095 train and 511" in text and "windows" in text


def test_a_run_is_judged_by_one_track_s_rules():
    """Token data is judged by a loss ceiling and images by an accuracy floor: the other track's
    rule is refused in one line before anything runs."""
    from aiperf.errors import UserError

    with pytest.raises(UserError, match="validity.loss_ceiling is not set"):
        load_config("lm-quick", workers=1, overrides={"validity": {"loss_ceiling": None}})
    with pytest.raises(UserError, match="applies to token data"):
        load_config("quick", workers=1, overrides={"validity": {"loss_ceiling": 3.0}})
    with pytest.raises(UserError, match="set search.objective=val_accuracy"):
        load_config("quick", workers=1, overrides={"search": {"objective": "val_loss"}})
    with pytest.raises(UserError, match="search.inherit applies to the LM track"):
        load_config("quick", workers=1, overrides={"search": {"inherit": True}})


# --- the LM track's regulation from aiperf-rules-1.7 (issue 49) --------------------------------

FLOOR = 0.5972  # lm-quick's, aiperf-rules-1.7


def test_loss_factor_keeps_rewarding_every_tenfold_cut_in_the_excess_over_the_floor():
    ln_v = math.log(256)
    assert quality.loss_factor(ln_v, 256, FLOOR) == pytest.approx(0.0, abs=1e-12)
    assert quality.loss_factor(9.0, 256, FLOOR) == 0.0  # worse than uniform: nothing learned
    losses = [5.0, 3.0, 2.3, 1.5, 1.1, 0.8, 0.65, FLOOR + 0.02]
    factors = [quality.loss_factor(loss, 256, FLOOR) for loss in losses]
    assert factors == sorted(factors) and len(set(factors)) == len(factors)  # monotone
    # Each tenfold cut in loss - H adds ln 10, as AIPerf's |ln(1 - accuracy)| does per error.
    one, tenth = (quality.loss_factor(FLOOR + d, 256, FLOOR) for d in (1.0, 0.1))
    assert tenth - one == pytest.approx(math.log(10))
    # Finite at and below the floor: the excess is credited at least MIN_EXCESS.
    top = math.log((ln_v - FLOOR) / quality.MIN_EXCESS)
    for loss in (FLOOR, FLOOR - 0.05, 0.0):
        assert quality.loss_factor(loss, 256, FLOOR) == pytest.approx(top)
    assert quality.loss_factor(float("nan"), 256, FLOOR) == 0.0
    assert quality.loss_factor(None, 256, FLOOR) == 0.0


def test_an_lm_score_is_regulated_by_its_own_rulesets_rule():
    """1.7's profiles carry an entropy floor and take loss_factor; a run judged by 1.5 or 1.6
    (no floor) keeps ln V - loss, exactly as it was recorded."""
    from aiperf.results.score import regulated
    from aiperf.rules import load_ruleset

    for version in ("1.5", "1.6"):
        rules = ValidityConfig(
            **load_ruleset(f"aiperf-rules-{version}").for_profile("lm-quick").validity()
        )
        assert rules.entropy_floor is None and rules.loss_ceiling == 3.0
        old = regulated(
            10.0, rules, best_val_accuracy=0.1, val_samples=511, best_val_loss=2.0, vocab_size=256
        )
        assert old == pytest.approx(10.0 * (math.log(256) - 2.0))
    new_rules = ValidityConfig(
        **load_ruleset("aiperf-rules-1.7").for_profile("lm-quick").validity()
    )
    assert new_rules.entropy_floor == FLOOR
    new = regulated(
        10.0, new_rules, best_val_accuracy=0.1, val_samples=511, best_val_loss=2.0, vocab_size=256
    )
    assert new == pytest.approx(10.0 * math.log((math.log(256) - FLOOR) / (2.0 - FLOOR)))


def test_1_7_changes_only_the_lm_tracks_ceilings_and_floors():
    from aiperf.rules import load_ruleset

    old, new = load_ruleset("aiperf-rules-1.6"), load_ruleset("aiperf-rules-1.7")
    for profile, rules in new.profiles.items():
        before = old.profiles[profile]
        if profile.startswith("lm"):
            assert rules.entropy_floor is not None and rules.loss_ceiling is not None
            before = dataclasses.replace(
                before, entropy_floor=rules.entropy_floor, loss_ceiling=rules.loss_ceiling
            )
        assert rules == before, profile
    assert dataclasses.replace(new, version=old.version, profiles=old.profiles) == old


def test_the_lm_profiles_floors_are_what_the_generator_gives():
    """1.7's entropy floors are H of the profiles' validation splits, computed exactly from the
    generator (aiperf/data/text_entropy.py: 0.02 s for lm-quick's split, 0.2 s for lm's)."""
    from aiperf.data.text_entropy import entropy
    from aiperf.rules import load_ruleset

    ruleset = load_ruleset("aiperf-rules-1.7")
    for profile in ("lm-quick", "lm"):
        config = load_config(profile, workers=1, runs_here=False)
        floor, counted = entropy(config.seed, "validation", config.data.val_tokens)
        assert counted > 0.99 * config.data.val_tokens  # all but the last, cut-short document
        assert ruleset.for_profile(profile).entropy_floor == round(floor, 4), profile
    # The floor lies far below the counted models (the bigram: 2.3 nats per token) and ln V.
    assert 0.5 < floor < 0.7
