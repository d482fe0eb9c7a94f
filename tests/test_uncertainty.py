"""How sure a figure is (aiperf.results.uncertainty): each interval's arithmetic against textbook
values, its coverage on draws of a known rate, and the score's and the ranking's use of it."""

from __future__ import annotations

import random

import pytest

from aiperf.config import ValidityConfig
from aiperf.results import uncertainty
from aiperf.results.score import EpochWork, compute_score
from aiperf.results.uncertainty import Interval, ops_interval, ranks, series_interval, wilson
from aiperf.store import RunWork


def test_students_t_matches_the_tables_and_beyond_them():
    scipy_stats = pytest.importorskip("scipy.stats")
    for draws in (2, 3, 5, 11, 31, 32, 60, 500):
        exact = scipy_stats.t.ppf(0.975, draws - 1)
        assert uncertainty.t_quantile(draws) == pytest.approx(exact, rel=2e-4), draws
    # A fractional number of draws rounds down: the wider interval.
    assert uncertainty.t_quantile(5.9) == uncertainty.t_quantile(5)


def test_wilsons_interval_of_a_proportion():
    low, high = wilson(0.5, 100)
    assert (low, high) == (pytest.approx(0.4038, abs=1e-4), pytest.approx(0.5962, abs=1e-4))
    low, high = wilson(1.0, 50)  # all right: the interval still reaches below
    assert 0.92 < low < 1.0 and high == 1.0


def test_a_runs_interval_widens_with_its_trials_spread_and_narrows_with_their_number():
    even = [(100.0, 1.0)] * 4
    assert ops_interval(100.0, even) == Interval(100.0, 100.0)  # every trial's rate the same
    assert ops_interval(100.0, [(100.0, 1.0)]) is None  # one trial measures no spread
    assert ops_interval(0.0, even) is None
    spread = [(90.0, 1.0), (110.0, 1.0)]
    narrow, wide = (
        ops_interval(100.0, spread * 4),
        ops_interval(100.0, [(80.0, 1.0), (120.0, 1.0)]),
    )
    assert narrow and wide and wide.low < narrow.low < 100.0 < narrow.high < wide.high
    # A trial that ran a tenth of a second weighs a tenth as much as one that ran a second.
    steady = [(100.0, 1.0), (100.0, 1.0), (110.0, 1.0), (110.0, 1.0)]
    brief = ops_interval(105.0, [*steady, (30.0, 0.1)])  # 300 operations/s for 0.1 s
    long = ops_interval(105.0, [*steady, (300.0, 1.0)])
    assert brief and long and brief.high - brief.low < long.high - long.low


def test_a_runs_interval_covers_the_true_rate_about_95_times_in_100():
    """Trials whose rates are drawn around a machine's true rate: the interval around each run's
    seconds-weighted OPS takes in the true rate in close to 95% of 2,000 runs."""
    rng = random.Random(7)
    true_rate, covered, runs = 1e9, 0, 2000
    for _ in range(runs):
        trials = [
            (rng.gauss(true_rate, 0.15 * true_rate) * seconds, seconds)
            for seconds in (rng.uniform(5, 15) for _ in range(8))
        ]
        ops = sum(o for o, _ in trials) / sum(s for _, s in trials)
        interval = ops_interval(ops, trials)
        assert interval is not None
        covered += interval.low <= true_rate <= interval.high
    assert 0.93 <= covered / runs <= 0.975, covered / runs


def test_a_series_interval_is_its_mean_plus_or_minus_t_standard_errors():
    interval = series_interval([10.0, 12.0, 14.0])
    assert interval is not None
    assert (interval.low + interval.high) / 2 == pytest.approx(12.0)
    assert interval.high - 12.0 == pytest.approx(4.303 * 2.0 / 3**0.5, rel=1e-4)
    assert series_interval([10.0]) is None


def test_ranks_tie_overlapping_intervals_and_order_disjoint_ones():
    a, b = Interval(10.0, 12.0), Interval(11.0, 13.0)  # overlap: tied
    c, d = Interval(5.0, 6.0), Interval(1.0, 2.0)  # below both, and below each other
    assert ranks([b, a, c, d]) == [1, 1, 3, 4]
    assert ranks([Interval(3.0, 3.0), Interval(3.0, 3.0), Interval(1.0, 1.0)]) == [1, 1, 3]


def _work(epochs: list[EpochWork], accuracy: float = 0.8) -> RunWork:
    return RunWork(
        epochs=epochs,
        elapsed_s=20.0,
        best_val_accuracy=accuracy,
        val_samples=500,
        best_val_loss=None,
        vocab_size=0,
        trials_completed=2,
        budget_s=100,
    )


def test_a_score_carries_the_intervals_of_its_ops_and_its_regulated_score():
    rules = ValidityConfig(min_budget_s=60, accuracy_floor=0.1)
    epochs = [
        EpochWork(100, 50, 30, 10, 20, 7, trial=1, seconds=4.0),
        EpochWork(100, 50, 30, 10, 20, 7, trial=1, seconds=4.2),
        EpochWork(120, 50, 30, 10, 20, 7, trial=2, seconds=4.5),
        EpochWork(80, 50, 30, 10, 20, 7, trial=3, seconds=3.6),
        EpochWork(100, 50, 30, 10, 20, 7, trial=4, seconds=4.0),
    ]
    score = compute_score(_work(epochs), rules=rules)
    assert score.ops_low is not None and score.ops_high is not None
    assert score.ops_low < score.ops < score.ops_high
    assert score.regulated_low is not None and score.regulated_high is not None
    # The accuracy's own interval (500 validation samples) widens the regulated score's beyond
    # the OPS interval scaled by the point factor.
    factor = score.regulated_score / score.ops
    assert score.regulated_low < score.ops_low * factor
    assert score.regulated_high > score.ops_high * factor
    # One trial: no interval, and the score is otherwise the same.
    alone = compute_score(
        _work([EpochWork(100, 50, 30, 10, 20, 7, trial=1, seconds=4.0)]), rules=rules
    )
    assert (alone.ops_low, alone.ops_high, alone.regulated_low, alone.regulated_high) == (
        None,
    ) * 4


def test_the_lm_tracks_regulated_interval_is_its_ops_interval_times_its_factor():
    rules = ValidityConfig(min_budget_s=60, loss_ceiling=3.0, entropy_floor=1.0)
    epochs = [
        EpochWork(100, 50, 30, 10, 20, 7, trial=t, seconds=s)
        for t, s in ((1, 4.0), (2, 5.0), (3, 3.5))
    ]
    work = RunWork(**{**vars(_work(epochs)), "best_val_loss": 1.5, "vocab_size": 256})
    score = compute_score(work, rules=rules)
    factor = score.regulated_score / score.ops
    assert factor > 0 and score.ops_low is not None and score.ops_high is not None
    assert score.regulated_low == pytest.approx(score.ops_low * factor)
    assert score.regulated_high == pytest.approx(score.ops_high * factor)
