"""The nightly regression check, Prefect-free: baseline = median of the last valid runs of the same
system and profile; a fall of more than its own threshold in OPS or the regulated score is a regression."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from test_history_data import plant_run, scaled_trials, system_facts

from aiperf.history.regression import DEFAULT_THRESHOLDS, Thresholds, baseline, check_run, judge
from aiperf.status import RunStatus
from aiperf.store import RunScoreRow, Store

NIGHT = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
FIVE_PERCENT = Thresholds(ops=0.05, regulated_score=0.05)


def row(
    run_id: int,
    ops: float,
    regulated: float | None = None,
    *,
    valid: bool = True,
    status: RunStatus = RunStatus.COMPLETED,
    night: int | None = None,
) -> RunScoreRow:
    return RunScoreRow(
        run_id=run_id,
        system_id=1,
        fingerprint="f" * 64,
        hostname="node",
        profile="nightly",
        division="closed",
        config_hash="c" * 64,
        ruleset="aiperf-rules-1.0",
        verified=True,
        workers=1,
        budget_s=60.0,
        seed=0,
        status=status,
        created_at=NIGHT + timedelta(days=run_id if night is None else night),
        elapsed_s=60.0,
        total_ops=60.0 * ops,
        ops=ops,
        tensor_ops=ops,
        regulated_score=ops if regulated is None else regulated,
        best_val_accuracy=0.5,
        trials_completed=1,
        valid=valid,
        precision="float32",
        backend="tensorflow",
        mfu=None,
        utilisation=None,
        previous_ops=None,
        previous_regulated_score=None,
        ops_change_pct=None,
    )


def test_baseline_is_the_median_of_the_last_five_valid_runs():
    history = [
        row(1, 1000.0),
        row(2, 100.0),
        row(3, 110.0, valid=False),
        row(4, 90.0),
        row(5, 120.0),
        row(6, 95.0),
        row(7, 105.0, status=RunStatus.FAILED),
        row(8, 101.0),
        row(9, 50.0),
    ]
    base = baseline(history, history[-1])
    assert base.run_ids == [2, 4, 5, 6, 8]  # run 1 is older than the last five valid ones
    assert base.ops == 100.0


def test_first_run_sets_the_baseline():
    verdict = judge(row(1, 100.0), baseline([row(1, 100.0)], row(1, 100.0)))
    assert verdict.baseline is None and verdict.passed
    assert "sets the baseline" in verdict.message()


@pytest.mark.parametrize(
    ("ops", "regulated", "passed"),
    [
        (95.1, 100.0, True),  # 4.9% below: within 5%
        (94.9, 100.0, False),  # 5.1% below
        (100.0, 94.0, False),  # the regulated score alone fell
        (130.0, 130.0, True),  # better is never a regression
    ],
)
def test_threshold(ops, regulated, passed):
    history = [row(1, 100.0), row(2, ops, regulated)]
    verdict = judge(history[1], baseline(history, history[1]), thresholds=FIVE_PERCENT)
    assert verdict.passed is passed
    assert bool(verdict.regressions) is not passed
    message = verdict.message()
    assert "OPS" in message and "regulated" in message and "baseline" in message


def test_message_and_artifact_give_both_figures():
    history = [row(1, 2e9, 1.5e9), row(2, 1e9, 0.9e9)]
    verdict = judge(history[1], baseline(history, history[1]), thresholds=FIVE_PERCENT)
    assert not verdict.passed
    assert verdict.regressions == ["OPS fell 50.0%", "regulated score fell 40.0%"]
    message = verdict.message()
    assert "OPS 1 GOPS" in message and "OPS 2 GOPS" in message
    assert "regulated 900 MOPS" in message and "regulated 1.5 GOPS" in message
    table = verdict.markdown()
    assert "REGRESSION" in table and "-50.00%" in table and "-40.00%" in table


def test_invalid_run_fails_and_is_never_a_baseline():
    history = [row(1, 100.0, valid=False), row(2, 100.0, valid=False)]
    verdict = judge(history[1], baseline(history, history[1]), reasons=["too short"])
    assert verdict.baseline is None and not verdict.passed
    assert "invalid (too short)" in verdict.message()


@pytest.mark.parametrize(
    ("ops", "regulated", "failed"),
    [
        (97.0, 100.0, []),  # OPS 3% down: within its 4%
        (95.0, 100.0, ["OPS fell 5.0%"]),  # ... 5% is not
        (100.0, 90.0, []),  # the regulated score 10% down: within its 11%
        (100.0, 88.0, ["regulated score fell 12.0%"]),
    ],
)
def test_each_figure_has_its_own_threshold(ops, regulated, failed):
    history = [row(1, 100.0), row(2, ops, regulated)]
    verdict = judge(
        history[1],
        baseline(history, history[1]),
        thresholds=Thresholds(ops=0.04, regulated_score=0.11),
    )
    assert verdict.regressions == failed
    assert "OPS 4%, regulated 11%" in verdict.message()
    table = verdict.markdown()
    assert "| -4% |" in table and "| -11% |" in table


@pytest.mark.parametrize("shares", [{"ops": 5}, {"regulated_score": 0}, {"ops": -0.1}])
def test_thresholds_must_be_shares(shares):
    with pytest.raises(ValueError, match="threshold must be a share between 0 and 1"):
        Thresholds(**shares)


def test_the_nightly_deployment_uses_the_default_thresholds():
    """prefect.yaml repeats the defaults for the UI's form; the two must not drift apart."""
    spec = yaml.safe_load((Path(__file__).resolve().parent.parent / "prefect.yaml").read_text())
    nightly = next(d for d in spec["deployments"] if d["name"] == "nightly-regression")
    assert nightly["parameters"]["ops_threshold"] == DEFAULT_THRESHOLDS.ops
    assert nightly["parameters"]["regulated_threshold"] == DEFAULT_THRESHOLDS.regulated_score


def test_check_run_reads_the_same_system_and_profile(db_url):
    store = Store.open(db_url)
    try:
        node = system_facts("node-a")
        for night in range(3):
            plant_run(
                store, node, started=NIGHT + timedelta(days=night), trials=scaled_trials(2.0)
            )
        plant_run(
            store,
            system_facts("other"),
            started=NIGHT + timedelta(days=3),
            trials=scaled_trials(9.0),
        )
        plant_run(
            store,
            node,
            profile="quick",
            started=NIGHT + timedelta(days=3),
            trials=scaled_trials(9.0),
        )
        slower = plant_run(store, node, started=NIGHT + timedelta(days=4))
        within = plant_run(
            store, node, started=NIGHT + timedelta(days=5), trials=scaled_trials(1.94)
        )
        verdict = check_run(store, slower, thresholds=FIVE_PERCENT)
        assert len(verdict.baseline.run_ids) == 3 and not verdict.passed
        assert verdict.ops_change == pytest.approx(-0.5)
        # The slower run is valid, so it joins the baseline: median of (2, 2, 2, 1) x.
        close = check_run(store, within, thresholds=FIVE_PERCENT)
        assert close.baseline.ops == pytest.approx(verdict.ops * 2)
        assert close.ops_change == pytest.approx(-0.03, abs=1e-4)
        assert close.passed, close.message()
        assert not check_run(
            store, within, thresholds=Thresholds(ops=0.02, regulated_score=0.5)
        ).passed
    finally:
        store.close()
