"""The LM track's quality (validation loss, lower is better) and its regulated score, beside the CNN
track's accuracy: aiperf.quality and the verdict and score that use it."""

from __future__ import annotations

import math

import pytest

from aiperf import quality
from aiperf.config import ValidityConfig, load_config
from aiperf.results.score import compute_score, known_in_advance, verdict
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
        work,
        elapsed_s=10.0,
        best_val_accuracy=0.4,
        val_samples=50,
        trials_completed=1,
        budget_s=60.0,
        rules=LM_RULES,
        best_val_loss=2.0,
        vocab_size=256,
    )
    assert score.valid and score.best_val_loss == 2.0
    assert score.regulated_score == pytest.approx(score.ops * (math.log(256) - 2.0))
    cnn = compute_score(
        work,
        elapsed_s=10.0,
        best_val_accuracy=0.4,
        val_samples=50,
        trials_completed=1,
        budget_s=60.0,
        rules=CNN_RULES,
        best_val_loss=2.0,
        vocab_size=256,
    )
    assert cnn.best_val_loss is None
    assert cnn.regulated_score == pytest.approx(cnn.ops * abs(math.log(1 - 0.4)))


def test_the_lm_profiles_are_closed_and_judged_by_loss():
    from aiperf.results.division import classify

    for profile in ("lm-quick", "lm"):
        config = load_config(profile, workers=1, runs_here=False)
        judged = classify(config)
        assert judged.closed and judged.ruleset == "aiperf-rules-1.5", profile
        assert config.search.objective == quality.LOSS
        assert config.validity.loss_ceiling == 3.0
    quick = classify(load_config("quick", workers=1, runs_here=False))
    assert quick.config_hash != classify(load_config("lm-quick", workers=1)).config_hash


def test_aiperf_rules_says_what_a_closed_lm_result_needs():
    from typer.testing import CliRunner

    from aiperf.cli.main import app

    shown = CliRunner().invoke(app, ["rules", "lm-quick", "--json"])
    assert shown.exit_code == 0, shown.output
    required = __import__("json").loads(shown.output)
    assert required["loss_ceiling"] == 3.0 and required["ruleset"] == "aiperf-rules-1.5"
    assert required["batch_size"]["tokens"] == [1024, 2048]
    assert required["choices"]["data.feed"] == ["auto", "tf.data", "dali"]
    text = CliRunner().invoke(app, ["rules", "lm-quick"]).output
    assert "loss ceiling       3 nats/token" in text and "accuracy floor" not in text
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
