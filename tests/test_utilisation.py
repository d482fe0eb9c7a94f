"""Where a trial's time goes, window utilisation and model FLOPs utilisation (issue 13, items 1 and 3):
the phase clock's rule, a real trial's phases, the peak probe, the Store's new records on both engines,
and a real run whose MFU and utilisation are computed, stored, verified and shown."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from claims import add_phases, claim_of, end_trial
from conftest import TINY
from test_store import T0, built, epoch, new_run, new_trial
from typer.testing import CliRunner

from aiperf.cli.main import app
from aiperf.config import ValidityConfig, load_config
from aiperf.data.staging_npz import stage_synthetic
from aiperf.errors import UserError
from aiperf.report.phases import PARTS, worker_times
from aiperf.results import record_checks, verify
from aiperf.results.score import (
    EpochWork,
    compute_score,
    model_flops_utilisation,
    window_utilisation,
)
from aiperf.search.space import architecture
from aiperf.status import TrialStatus
from aiperf.store import RunWork, Store, window_seconds
from aiperf.store.records import TRIAL_PHASE_COLUMNS, TrialPhases
from aiperf.train import phases as phases_module
from aiperf.train.messages import TrialRequest
from aiperf.train.peak import compute_dtype, measure_peak, peak_seconds
from aiperf.train.phases import PhaseClock
from aiperf.train.simulated import SimulatedModel, plan_trial
from aiperf.train.trial import run_trial

# --- the phase clock's rule, on a clock that the test moves ------------------------------------------


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def fake_time(monkeypatch) -> FakeTime:
    clock = FakeTime()
    monkeypatch.setattr(phases_module.time, "perf_counter", clock.perf_counter)
    return clock


def _batches(
    fake: FakeTime, clock: PhaseClock, kind: str, seconds: list[float], gap: float = 0.0
) -> None:
    hooks = clock.callback()
    begin, end = {
        "train": (hooks.on_train_batch_begin, hooks.on_train_batch_end),
        "evaluate": (hooks.on_test_batch_begin, hooks.on_test_batch_end),
    }[kind]
    for i, spent in enumerate(seconds):
        fake.now += gap
        begin(i)
        fake.now += spent
        end(i)


def test_first_batch_excess_of_the_first_fit_and_evaluate_is_compile(fake_time):
    clock = PhaseClock()
    with clock.phase("compile"):
        fake_time.now += 0.01
    with clock.steps("train"):  # first fit: the first batch traces (5 s), later ones take 1 s
        fake_time.now += 0.5  # the fit's own start-up stays train
        _batches(fake_time, clock, "train", [5.0, 1.0, 1.0, 3.0, 1.0])
    with clock.steps("train"):  # a later fit: nothing moved, however slow its first batch
        _batches(fake_time, clock, "train", [4.0, 1.0])
    with clock.steps("evaluate"):  # first evaluate: 2 s of tracing
        _batches(fake_time, clock, "evaluate", [2.5, 0.5, 0.5])
    seconds = clock.seconds()
    assert seconds["compile_s"] == pytest.approx(0.01 + 4.0 + 2.0)
    assert seconds["train_s"] == pytest.approx(0.5 + 11.0 - 4.0 + 5.0)
    assert seconds["evaluate_s"] == pytest.approx(3.5 - 2.0)
    assert set(seconds) == set(TRIAL_PHASE_COLUMNS)


def test_one_batch_moves_nothing_and_a_fast_first_batch_moves_nothing(fake_time):
    clock = PhaseClock()
    with clock.steps("train"):
        _batches(fake_time, clock, "train", [3.0])
    with clock.steps("evaluate"):
        _batches(fake_time, clock, "evaluate", [0.5, 1.0, 1.0])
    assert clock.seconds() == pytest.approx(
        {
            "build_s": 0.0,
            "count_s": 0.0,
            "compile_s": 0.0,
            "train_s": 3.0,
            "evaluate_s": 2.5,
            "report_s": 0.0,
        }
    )


def test_evaluation_inside_fit_is_evaluate_and_reports_are_report(fake_time):
    clock = PhaseClock()
    hooks = clock.callback()
    report = clock.timed(lambda message: setattr(fake_time, "now", fake_time.now + 0.25))
    with clock.steps("train"):
        fake_time.now += 2.0
        hooks.on_test_begin()
        fake_time.now += 1.5
        hooks.on_test_end()
    report("an epoch")
    report("another")
    seconds = clock.seconds()
    assert (seconds["train_s"], seconds["evaluate_s"], seconds["report_s"]) == pytest.approx(
        (2.0, 1.5, 0.5)
    )
    with pytest.raises(ValueError, match="unknown phase"):
        with clock.phase("idle"):
            pass


# --- a real trial ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    config = load_config("quick", workers=1, overrides=TINY)
    return stage_synthetic(config.data, 0, Path(tmp_path_factory.mktemp("data")))


def test_a_real_trial_measures_every_phase_within_its_wall_time(staged):
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
        batch_size=32,
        epochs=2,
        deadline=time.time() + 300,
        data_path=staged.path,
        seed=1,
    )
    started = time.perf_counter()
    result = run_trial(request, lambda _message: None)
    wall = time.perf_counter() - started
    assert result.status == TrialStatus.COMPLETED, result.message
    phases = TrialPhases.from_seconds(result.phases)
    assert all(getattr(phases, name) > 0 for name in TRIAL_PHASE_COLUMNS), phases
    assert phases.total_s <= wall
    # Tracing the first training and evaluation steps takes far longer than model.compile alone
    # (milliseconds in Keras 3): the first batches' excess was moved to compile.
    assert phases.compile_s > 0.05, phases
    assert phases.stepping_s > 0


def test_a_simulated_trial_models_its_time_as_training_and_evaluation():
    model = SimulatedModel(ops_per_s=3000 * 1e7 / 0.2)
    request = TrialRequest(
        run_id=1,
        trial_key="000001",
        architecture={},
        learning_rate=0.01,
        batch_size=32,
        epochs=3,
        deadline=1_000_000.0 + 1e6,
        data_path="simulated",
        seed=1,
    )
    plan = plan_trial(request, 1_000_000.0, "w", model)
    phases = plan.phases()
    assert phases["train_s"] + phases["evaluate_s"] == pytest.approx(plan.ends_at - 1_000_000.0)
    assert phases["evaluate_s"] > 0 and phases["build_s"] == phases["compile_s"] == 0.0
    assert plan.phases(1)["train_s"] == pytest.approx(phases["train_s"] / 3)


def test_phases_from_a_worker_are_checked():
    assert TrialPhases.from_seconds({"train_s": 2, "evaluate_s": 1.0}).stepping_s == 3.0
    for bad in (
        {"idle_s": 1.0},
        {"train_s": -1.0},
        {"train_s": float("nan")},
        {"train_s": "soon"},
    ):
        with pytest.raises(ValueError):
            TrialPhases.from_seconds(bad)


# --- the peak probe and the figures ------------------------------------------------------------------------


def test_the_peak_probe_measures_a_positive_rate():
    peak = measure_peak(0.1, "float32", size=256, worker="w0")
    assert set(peak) == {"worker", "flops", "dtype", "device", "seconds"}
    assert (
        peak["worker"] == "w0"
        and peak["dtype"] == "float32"
        and peak["device"].startswith(("CPU", "GPU"))
    )
    assert peak["seconds"] >= 0.1 and 1e6 < peak["flops"] < 1e16


def test_precision_maps_to_a_compute_dtype_and_the_probe_length_to_the_environment(monkeypatch):
    assert [compute_dtype(p) for p in (None, "float32", "mixed_bfloat16", "mixed_float16")] == [
        "float32",
        "float32",
        "bfloat16",
        "float16",
    ]
    with pytest.raises(ValueError, match="unknown precision"):
        compute_dtype("int8")
    monkeypatch.setenv("AIPERF_PEAK_SECONDS", "0.5")
    assert peak_seconds() == 0.5
    monkeypatch.setenv("AIPERF_PEAK_SECONDS", "0")
    with pytest.raises(UserError, match="AIPERF_PEAK_SECONDS='0' is not a number more than 0"):
        peak_seconds()
    monkeypatch.delenv("AIPERF_PEAK_SECONDS")
    assert peak_seconds() == 2.0


def test_mfu_and_utilisation_are_plain_arithmetic():
    assert model_flops_utilisation(2e9, 8e9) == 0.25
    assert model_flops_utilisation(2e9, None) is None
    assert window_utilisation([3.0, 5.0], workers=2, window_s=10.0) == 0.4
    assert window_utilisation(None, workers=2, window_s=10.0) is None
    work = [EpochWork(64, 32, 300, 100, 30, 10)]
    rules = ValidityConfig(min_budget_s=0.0, accuracy_floor=0.0)
    score = compute_score(
        RunWork(
            epochs=work,
            elapsed_s=10.0,
            best_val_accuracy=0.5,
            val_samples=32,
            best_val_loss=None,
            vocab_size=0,
            trials_completed=1,
            budget_s=10.0,
            workers=2,
            peak_flops=100.0,
            stepping_s=[4.0],
        ),
        rules=rules,
    )
    assert score.mfu == pytest.approx(
        score.tensor_ops / 100.0
    ) and score.utilisation == pytest.approx(0.2)
    older = compute_score(
        RunWork(
            epochs=work,
            elapsed_s=10.0,
            best_val_accuracy=0.5,
            val_samples=32,
            best_val_loss=None,
            vocab_size=0,
            trials_completed=1,
            budget_s=10.0,
        ),
        rules=rules,
    )
    assert older.mfu is None and older.utilisation is None


# --- the Store, on SQLite and PostgreSQL ---------------------------------------------------------------------


def test_store_records_phases_peaks_and_the_new_figures(db_url):
    with Store.open(db_url) as store:
        run_id = new_run(store)
        store.record_dataset(
            claim_of(store, run_id),
            {
                "name": "d",
                "kind": "synthetic",
                "sha256": "0" * 64,
                "train_samples": 64,
                "val_samples": 32,
                "classes": 10,
            },
        )
        store.start_search(claim_of(store, run_id), T0, T0 + 60)
        timed, untimed = new_trial(store, run_id, 0), new_trial(store, run_id, 1)
        for trial_id, worker in ((timed, "w0"), (untimed, "w1")):
            built(store, trial_id, worker)
            epoch(store, trial_id, 0)
            end_trial(store, trial_id, TrialStatus.COMPLETED, T0 + 20)
        phases = TrialPhases(
            build_s=1.0, count_s=0.5, compile_s=2.0, train_s=30.0, evaluate_s=6.0, report_s=0.25
        )
        add_phases(store, timed, phases)
        add_phases(store, timed, phases)  # a retry changes nothing
        peaks = [
            {"worker": "w0", "flops": 1e11, "dtype": "float32", "device": "CPU", "seconds": 2.0},
            {"worker": "w1", "flops": 3e11, "dtype": "float32", "device": "CPU", "seconds": 2.0},
        ]
        store.record_peaks(claim_of(store, run_id), peaks)
        store.finish_search(claim_of(store, run_id), T0 + 60)
        work = store.run_work(run_id)
        assert (work.workers, work.peak_flops, work.stepping_s) == (2, 4e11, (36.0,))
        score = compute_score(
            RunWork(
                epochs=work.epochs,
                elapsed_s=work.elapsed_s,
                best_val_accuracy=work.best_val_accuracy,
                val_samples=work.val_samples,
                best_val_loss=None,
                vocab_size=0,
                trials_completed=work.trials_completed,
                budget_s=work.budget_s,
                workers=work.workers,
                peak_flops=work.peak_flops,
                stepping_s=work.stepping_s,
            ),
            rules=ValidityConfig(),
        )
        store.save_score(claim_of(store, run_id), score)
        record = store.get_run(run_id)
        (row,) = store.run_scores(run_ids=[run_id])
    assert score.utilisation == pytest.approx(36.0 / 120.0) and score.mfu == pytest.approx(
        score.tensor_ops / 4e11
    )
    assert record.score == score
    assert (row.mfu, row.utilisation) == pytest.approx((score.mfu, score.utilisation))
    assert record.peak_flops == 4e11 and list(record.worker_peaks) == peaks
    by_key = {t.trial_key: t for t in record.trials}
    assert by_key["k0"].phases == phases and by_key["k1"].phases is None, (
        "a trial without phases keeps NULLs"
    )
    times = {w.worker: w for w in worker_times(record)}
    assert times["w0"].seconds["idle"] == pytest.approx(60.0 - phases.total_s)
    assert times["w1"].seconds["idle"] == 60.0 and times["w1"].trials == 0
    assert times["w0"].utilisation == pytest.approx(36.0 / 60.0)


# --- a real run -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_run(short_real_run):
    """The session's short real run (conftest.py: Keras trials on 2 workers, no Prefect): peaks
    measured, phases recorded."""
    db = short_real_run.config.db
    with Store.open_existing(db) as store:
        record = store.get_run(short_real_run.run_id)
    return db, short_real_run.path, record


def test_a_real_run_measures_each_workers_peak_and_its_mfu(real_run):
    _db, _path, record = real_run
    assert len(record.worker_peaks) == 2 and all(
        p["flops"] > 0 and p["dtype"] == "float32" for p in record.worker_peaks
    )
    assert record.peak_flops == pytest.approx(sum(p["flops"] for p in record.worker_peaks))
    assert {p["worker"] for p in record.worker_peaks} >= {t.worker for t in record.trials}, (
        "peaks are named as the trials name their workers"
    )
    score = record.score
    assert score.mfu == pytest.approx(score.tensor_ops / record.peak_flops, rel=1e-12)
    assert 0 < score.mfu < 1


def test_a_real_run_records_its_trials_phases_and_its_window_utilisation(real_run):
    _db, path, record = real_run
    finished = [t for t in record.trials if t.epochs]
    assert finished and all(t.phases is not None and t.phases.train_s > 0 for t in finished)
    window_s = window_seconds(record.windows)
    stepping = sum(t.phases.stepping_s for t in record.trials if t.phases is not None)
    assert record.score.utilisation == pytest.approx(stepping / (2 * window_s), rel=1e-9)
    assert 0 < record.score.utilisation <= 1
    for w in worker_times(record):
        assert (
            sum(w.seconds[p] for p in PARTS) == pytest.approx(window_s) or w.seconds["idle"] == 0.0
        )
    with sqlite3.connect(path) as sql:  # what a user gets from SQL
        mfu, utilisation = sql.execute(
            "SELECT mfu, utilisation FROM run_scores WHERE run_id = ?", (record.id,)
        ).fetchone()
        timed = sql.execute(
            "SELECT COUNT(*) FROM trials WHERE train_s > 0 AND compile_s > 0"
        ).fetchone()[0]
    assert (mfu, utilisation) == pytest.approx((record.score.mfu, record.score.utilisation))
    assert timed >= 1


def test_a_run_recorded_before_peaks_and_phases_verifies_with_neither_figure(real_run, tmp_path):
    """As a run recorded before migration 0007 reads: no peaks, no phases, neither figure."""
    import shutil

    _db, path, record = real_run
    old = tmp_path / "old.db"
    shutil.copy(path, old)
    with sqlite3.connect(old) as sql:
        sql.execute("UPDATE runs SET peak_flops = NULL, worker_peaks = NULL")
        sql.execute("UPDATE trials SET " + ", ".join(f"{c} = NULL" for c in TRIAL_PHASE_COLUMNS))
        sql.execute("UPDATE scores SET mfu = NULL, utilisation = NULL")
    with Store.open_existing(f"sqlite:///{old}") as store:
        checks = verify.verify_run(store, record.id)
        again = store.get_run(record.id)
    assert [c.check for c in checks if not c.passed] == []
    assert {c.check: c.detail for c in checks}[
        record_checks.MODEL_FLOPS_UTILISATION
    ] == "no peak measured: no MFU"
    assert worker_times(again) == [] and all(t.phases is None for t in again.trials)
    # and a stored figure without its records is caught
    with sqlite3.connect(old) as sql:
        sql.execute("UPDATE scores SET mfu = 0.5, utilisation = 0.5")
    with Store.open_existing(f"sqlite:///{old}") as store:
        failed = {c.check for c in verify.verify_run(store, record.id) if not c.passed}
    assert failed == {record_checks.MODEL_FLOPS_UTILISATION, record_checks.WINDOW_UTILISATION}


@pytest.mark.parametrize(
    "tamper",
    [
        "UPDATE runs SET peak_flops = peak_flops * 2",  # the stored sum is not the workers' measurements
        "UPDATE trials SET train_s = train_s + 1000 WHERE id = (SELECT MIN(id) FROM trials WHERE train_s IS NOT NULL)",
    ],
)
def test_verify_checks_the_peaks_and_the_phases_behind_the_figures(real_run, tmp_path, tamper):
    import shutil

    _db, path, record = real_run
    copy = tmp_path / "tampered.db"
    shutil.copy(path, copy)
    with sqlite3.connect(copy) as sql:
        sql.execute(tamper)
    with Store.open_existing(f"sqlite:///{copy}") as store:
        failed = {c.check: c.detail for c in verify.verify_run(store, record.id) if not c.passed}
    expected = (
        record_checks.MODEL_FLOPS_UTILISATION
        if "peak" in tamper
        else record_checks.WINDOW_UTILISATION
    )
    assert set(failed) == {expected}, failed
    if expected == record_checks.WINDOW_UTILISATION:
        assert "of a" in failed[expected], "no worker's trials account for more than the window"


def test_show_history_and_the_report_give_the_new_figures(real_run, tmp_path):
    db, _path, record = real_run
    cli = CliRunner()
    shown = cli.invoke(app, ["show", str(record.id), "--db", db], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    mfu = f"{100 * record.score.mfu:.3g}%"
    assert "MFU" in shown.output and mfu in shown.output
    assert (
        f"{100 * record.score.utilisation:.3g}%" in shown.output
        and "window utilisation" in shown.output
    )
    assert (
        "where the time went" in shown.output
        and "compile" in shown.output
        and "idle" in shown.output
    )
    per_trial = cli.invoke(
        app, ["show", str(record.id), "--db", db, "--phases"], env={"COLUMNS": "250"}
    )
    assert per_trial.exit_code == 0 and "phases of the trials" in per_trial.output, (
        per_trial.output
    )
    history = cli.invoke(app, ["history", "--db", db], env={"COLUMNS": "250"})
    assert history.exit_code == 0 and "MFU" in history.output and mfu in history.output, (
        history.output
    )
    page = tmp_path / "report.html"
    made = cli.invoke(app, ["report", str(record.id), "--db", db, "--to", str(page)])
    assert made.exit_code == 0, made.output
    html = page.read_text()
    assert 'id="plot-worker-phases"' in html and mfu in html
    for worker in {t.worker for t in record.trials}:
        assert f'data-worker="{worker}" data-phase="train"' in html, (
            f"{worker} has its bar of training"
        )
