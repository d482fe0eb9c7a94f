import math

import pytest

from aiperf.config import ValidityConfig
from aiperf.results.score import (
    EpochWork,
    capped_accuracy,
    compute_score,
    regulated_score,
    rules_reasons,
    validity_label,
    verified_score,
)
from aiperf.store import CheckRecord, RunWork


def test_ops_is_every_counted_sample_over_elapsed():
    work = [EpochWork(100, 50, 30, 10, 20, 7), EpochWork(40, 0, 30, 10, 20, 7)]
    score = compute_score(
        RunWork(
            epochs=work,
            elapsed_s=10.0,
            best_val_accuracy=0.5,
            val_samples=50,
            best_val_loss=None,
            vocab_size=0,
            trials_completed=1,
            budget_s=100,
        ),
        rules=ValidityConfig(min_budget_s=60, accuracy_floor=0.1),
    )
    assert score.total_ops == 100 * 30 + 50 * 10 + 40 * 30
    assert score.ops == pytest.approx(score.total_ops / 10.0)
    assert score.tensor_ops == pytest.approx((100 * 20 + 50 * 7 + 40 * 20) / 10.0)
    assert score.regulated_score == pytest.approx(score.ops * math.log(2))
    assert score.valid and score.reasons == []


def test_accuracy_is_capped_by_the_validation_set_size():
    assert capped_accuracy(1.0, 100) == pytest.approx(0.99)
    assert math.isfinite(regulated_score(1e9, 1.0, 100))
    assert regulated_score(1e9, None, 100) == 0.0


def test_verdict_names_every_broken_rule():
    score = compute_score(
        RunWork(
            epochs=[],
            elapsed_s=5,
            best_val_accuracy=0.05,
            val_samples=10,
            best_val_loss=None,
            vocab_size=0,
            trials_completed=0,
            budget_s=5,
        ),
        rules=ValidityConfig(min_budget_s=60, accuracy_floor=0.2),
    )
    assert not score.valid
    assert any("too short" in r for r in score.reasons)
    assert any("no trial completed" in r for r in score.reasons)
    assert any("under the floor" in r for r in score.reasons)


def _valid_score():
    return compute_score(
        RunWork(
            epochs=[EpochWork(100, 50, 30, 10, 20, 7)],
            elapsed_s=10.0,
            best_val_accuracy=0.5,
            val_samples=50,
            best_val_loss=None,
            vocab_size=0,
            trials_completed=1,
            budget_s=100,
        ),
        rules=ValidityConfig(min_budget_s=60, accuracy_floor=0.1),
    )


def test_a_failed_check_makes_a_valid_score_invalid_naming_the_checks():
    score = _valid_score()
    passed = [CheckRecord("total_operations", True, "ok"), CheckRecord("division", True, "ok")]
    assert verified_score(score, passed) is score, "every check passed: the verdict stands"
    failed = [CheckRecord("total_operations", False, "off"), CheckRecord("division", False, "x")]
    judged = verified_score(score, failed)
    assert not judged.valid
    assert judged.reasons == ["verification failed: total_operations, division"]
    assert judged.ops == score.ops, "only the verdict changes"
    again = verified_score(judged, failed[:1])
    assert again.reasons == ["verification failed: total_operations"], "replaced, not added"
    assert rules_reasons(["too short", *judged.reasons]) == ["too short"]


@pytest.mark.parametrize(
    "valid, verified, label",
    [
        (True, True, "yes"),
        (False, True, "no"),
        (True, False, "no"),
        (False, False, "no"),
        (True, None, "unverified"),
        (False, None, "no"),
    ],
)
def test_valid_means_valid_and_verified(valid, verified, label):
    assert validity_label(valid, verified) == label
