"""The simulated trainer: modelled trials that end at the deadline like real ones, the real
orchestrator driving many simulated workers, and results that are always invalid."""

from __future__ import annotations

import queue
import sqlite3
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY, scored

from aiperf.config import ValidityConfig, load_config
from aiperf.results.score import compute_score
from aiperf.store import RunWork
from aiperf.train.messages import TrialRequest
from aiperf.train.simulated import (
    SimulatedLauncher,
    SimulatedModel,
    plan_trial,
    run_simulated_trial,
)

FAST = SimulatedModel(ops_per_s=3000 * 1e7 / 0.2)  # an epoch of a 1e7-op trial lasts about 0.2 s


def _request(deadline: float, epochs: int = 3, seed: int = 1) -> TrialRequest:
    return TrialRequest(
        run_id=1,
        trial_key="000001",
        architecture={},
        learning_rate=0.01,
        batch_size=32,
        epochs=epochs,
        deadline=deadline,
        data_path="simulated",
        seed=seed,
    )


def test_plan_is_decided_by_the_seed_and_takes_the_modelled_time():
    start = 1_000_000.0
    a = plan_trial(_request(start + 1e6), start, "w", FAST)
    b = plan_trial(_request(start + 1e6), start, "w", FAST)
    c = plan_trial(_request(start + 1e6, seed=2), start, "w", FAST)
    assert a == b and a.built.train_ops != c.built.train_ops
    assert a.status == "completed" and [e.epoch for e in a.epochs] == [0, 1, 2]
    whole = FAST.train_samples // 32 * 32  # whole batches of 32 only, as the Keras trainer trains
    assert all(
        e.complete and e.samples_trained == whole and e.val_accuracy is not None for e in a.epochs
    )
    per_epoch = (
        FAST.train_samples * a.built.train_ops + FAST.val_samples * a.built.eval_ops
    ) / FAST.ops_per_s
    assert a.epochs[0].ended_at - a.epochs[0].started_at == pytest.approx(per_epoch)
    assert a.ends_at == pytest.approx(start + 3 * per_epoch)
    accuracies = [e.val_accuracy for e in a.epochs]
    assert accuracies == sorted(accuracies) and 0 < accuracies[-1] < 1


def test_deadline_cuts_an_epoch_and_keeps_its_samples():
    start = 1_000_000.0
    full = plan_trial(_request(start + 1e6), start, "w", FAST)
    epoch_s = full.epochs[0].ended_at - start
    cut = plan_trial(_request(start + 1.5 * epoch_s), start, "w", FAST)
    assert cut.status == "stopped" and len(cut.epochs) == 2
    first, last = cut.epochs
    assert first.complete and not last.complete
    assert 0 < last.samples_trained < FAST.train_samples and last.val_accuracy is None
    assert last.samples_trained % 32 == 0
    assert last.ended_at == pytest.approx(start + 1.5 * epoch_s)


def test_run_simulated_trial_reports_each_epoch_as_it_ends():
    seen = []
    result = run_simulated_trial(
        _request(time.time() + 60, epochs=2),
        lambda m: seen.append((time.time(), m)),
        worker="w0",
        model=FAST,
    )
    assert result.status == "completed" and len(result.epochs) == 2
    assert [m.KIND for _t, m in seen] == ["built", "epoch", "epoch"]
    for reported_at, message in seen[1:]:
        assert reported_at >= message.ended_at - 0.01, (
            "an epoch is reported when its modelled end comes"
        )


def test_a_simulated_result_is_always_invalid():
    score = compute_score(
        RunWork(
            epochs=[],
            elapsed_s=10.0,
            best_val_accuracy=0.9,
            val_samples=1000,
            best_val_loss=None,
            vocab_size=0,
            trials_completed=5,
            budget_s=1e6,
        ),
        rules=ValidityConfig(),
        simulated=True,
    )
    assert not score.valid and any("simulated" in r for r in score.reasons)
    real = compute_score(
        RunWork(
            epochs=[],
            elapsed_s=10.0,
            best_val_accuracy=0.9,
            val_samples=1000,
            best_val_loss=None,
            vocab_size=0,
            trials_completed=5,
            budget_s=1e6,
        ),
        rules=ValidityConfig(),
    )
    assert real.valid


def test_simulated_runs_may_use_more_workers_than_cores():
    assert (
        load_config("quick", workers=256, overrides={"train.trainer": "simulated"}).workers == 256
    )


def test_orchestrator_drives_64_simulated_workers(tmp_path):
    """The real orchestrator, oracle and store with 64 simulated workers: every worker gets trials, at
    most 64 run at once, and every modelled epoch is in the database."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from bench_simulated_scale import simulate

    point = simulate(64, 3.0, f"sqlite:///{tmp_path / 'sim.db'}", tmp_path, epoch_s=0.5, epochs=2)
    assert point.trials >= 64 and point.epochs >= 64
    with sqlite3.connect(tmp_path / "sim.db") as sql:
        workers = {w for (w,) in sql.execute("SELECT worker FROM trials")}
        statuses = {s for (s,) in sql.execute("SELECT status FROM trials")}
        concurrent = sql.execute("""
            SELECT MAX(n) FROM (SELECT (SELECT COUNT(*) FROM trials u WHERE u.started_at <= t.started_at
                                        AND u.ended_at > t.started_at) AS n FROM trials t)""").fetchone()[
            0
        ]
    assert workers == {f"sim-{i}" for i in range(64)}
    assert statuses <= {"completed", "stopped"}
    assert concurrent <= 64
    assert point.writes > point.trials and point.cpu_s > 0


def test_launcher_never_exceeds_its_workers():
    launcher = SimulatedLauncher(2, queue.Queue(), FAST)
    launcher(_request(time.time() + 60))
    launcher(_request(time.time() + 60))
    with pytest.raises(RuntimeError, match="busy"):
        launcher(_request(time.time() + 60))


@pytest.mark.slow
def test_flow_with_the_simulated_trainer_on_dask(prefect_api, tmp_path):
    """The real flow, 8 simulated workers (threads of Dask worker processes) on a 2-core machine:
    trials ran on Dask, and the result is marked invalid whatever it scored."""
    from aiperf_flows.benchmark import benchmark

    db = tmp_path / "aiperf.db"
    # The window includes each worker process importing the flow (seconds): a budget to cover it.
    result = scored(
        benchmark,
        profile="quick",
        budget="20s",
        workers=8,
        db=f"sqlite:///{db}",
        seed=2,
        out=str(tmp_path / "out"),
        overrides={**TINY, "train.trainer": "simulated"},
    )
    assert not result["valid"] and any("simulated" in r for r in result["reasons"])
    with sqlite3.connect(db) as sql:
        trials = sql.execute("SELECT COUNT(*), COUNT(DISTINCT worker) FROM trials").fetchone()
        epochs = sql.execute("SELECT COUNT(*) FROM epochs").fetchone()[0]
    assert trials[0] >= 8 and trials[1] >= 2 and epochs >= 8
    assert result["total_ops"] > 0
