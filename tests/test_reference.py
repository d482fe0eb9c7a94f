"""Bare Keras on every run's nodes (issue 33 item 2): the clean process's environment, the
comparison of a run's seed trials against it (aiperf.results.overhead). A real run measures it on
its worker and shows its trials against it in tests/test_run_exit.py (one real CLI run for both)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from claims import claim_of
from records import T0, run_record

from aiperf import settings
from aiperf.results.overhead import BELOW, overhead
from aiperf.status import TrialStatus
from aiperf.store import EpochRecord, RunRecord, Store, TrialRecord
from aiperf.store.records import TrialPhases
from aiperf.train.bare_reference import clean_environment

# --- the clean process's environment -------------------------------------------------------------


def test_the_clean_environment_drops_what_the_nanny_and_dask_set_and_keeps_keras_backend():
    worker = {
        "MALLOC_TRIM_THRESHOLD_": "65536",  # Dask's nanny, in every worker it spawns
        "OMP_NUM_THREADS": "1",  # the nanny's too
        "MKL_NUM_THREADS": "1",
        "DASK_DISTRIBUTED__WORKER__DAEMON": "False",
        "DASK_INTERNAL_INHERIT_CONFIG": "e30=",
        "KERAS_BACKEND": "tensorflow",
        "PATH": "/usr/bin",
        settings.WORKER_CORES.name: "2",
    }
    clean = clean_environment(worker, 2)
    assert "MALLOC_TRIM_THRESHOLD_" not in clean and "MKL_NUM_THREADS" not in clean
    assert not [k for k in clean if k.startswith("DASK_")]
    assert clean["KERAS_BACKEND"] == "tensorflow" and clean["PATH"] == "/usr/bin"
    assert clean[settings.WORKER_CORES.name] == "2"
    # The thread counts a user on 2 cores sets, not the nanny's 1.
    assert clean["OMP_NUM_THREADS"] == clean["TF_NUM_INTRAOP_THREADS"] == "2"
    assert clean["TF_NUM_INTEROP_THREADS"] == "1"
    # Cores unknown: no thread count of anyone's, the framework's own choice.
    assert "OMP_NUM_THREADS" not in clean_environment(worker, None)


# --- the comparison ------------------------------------------------------------------------------


def _trial(
    number: int, operator: str, samples: int, train_s: float, ops: int = 1000, batch: int = 32
):
    return TrialRecord(
        id=number,
        run_id=1,
        trial_key=f"{number:02d}",
        number=number,
        parent_trial_id=None if operator == "seed" else 0,
        operator=operator,
        architecture={},
        hyperparameters={"batch_size": batch},
        status=TrialStatus.COMPLETED,
        worker=f"w{number % 2}",
        started_at=T0,
        ended_at=T0 + timedelta(seconds=10),
        parameters=10,
        train_ops_per_sample=ops,
        eval_ops_per_sample=ops // 3,
        tensor_train_ops_per_sample=ops,
        tensor_eval_ops_per_sample=ops // 3,
        best_val_accuracy=0.5,
        message=None,
        epochs=(EpochRecord(1, T0, T0, samples, 0, None, None, None, None, True),),
        phases=TrialPhases(compile_s=5.0, train_s=train_s, evaluate_s=1.0),
    )


def _run(trials=(), reference=()) -> RunRecord:
    return run_record(trials, workers=2, reference_rates=tuple(reference))


def _measured(worker: str, ops_per_s: float, batch: int = 32, devices: int | None = None) -> dict:
    rate = {
        "worker": worker,
        "samples_per_s": ops_per_s / 1000,
        "ops_per_s": ops_per_s,
        "batch": batch,
    }
    return rate if devices is None else {**rate, "devices": devices}


def test_seed_trials_are_compared_with_the_mean_per_worker_reference():
    run = _run(
        [
            _trial(0, "seed", samples=4000, train_s=2.0),  # 2.0 MOPS in training steps
            _trial(1, "seed", samples=2000, train_s=2.0),  # 1.0 MOPS
            _trial(2, "widen stage 1", samples=100, train_s=10.0),  # not the seed: left out
        ],
        [_measured("w0", 1.4e6), _measured("w1", 1.6e6)],
    )
    found = overhead(run)
    # 6,000 samples x 1,000 operations over 4 s in training steps (compile and evaluate left out).
    assert found.seed_ops_per_s == pytest.approx(1.5e6) and found.seed_trials == 2
    assert found.reference_ops_per_s == pytest.approx(1.5e6) and found.reference_workers == 2
    assert found.ratio == pytest.approx(1.0) and not found.below
    assert found.line() == (
        "seed trials trained at 1.5 MOPS, bare Keras 1.5 MOPS per worker on the same nodes: 1.00"
    )


def test_seed_trials_at_the_references_batch_are_compared_when_there_are_any():
    at_32 = _trial(0, "seed", samples=4000, train_s=4.0, batch=32)  # 1.0 MOPS
    at_64 = _trial(1, "seed", samples=6000, train_s=2.0, batch=64)  # 3.0 MOPS: another batch
    both = overhead(_run([at_32, at_64], [_measured("w0", 1.0e6, batch=32)]))
    assert both.seed_trials == 1 and both.ratio == pytest.approx(1.0) and not both.other_batch
    only_64 = overhead(_run([at_64], [_measured("w0", 1.0e6, batch=32)]))
    assert only_64.ratio == pytest.approx(3.0) and only_64.other_batch
    assert only_64.line().endswith(
        "(no seed trial at bare Keras's batch: compared at other batches)"
    ), only_64.line()


def test_a_two_device_reference_is_compared_per_device():
    """The reference trains its global batch across the worker's devices; a trial records its
    batch per device: 32 per device on 2 devices is the trial at batch_size 32."""
    at_32 = _trial(0, "seed", samples=4000, train_s=4.0, batch=32)
    at_64 = _trial(1, "seed", samples=6000, train_s=2.0, batch=64)
    found = overhead(_run([at_32, at_64], [_measured("w0", 1.0e6, batch=64, devices=2)]))
    assert found.seed_trials == 1 and found.ratio == pytest.approx(1.0) and not found.other_batch


def _bursts(worker: str, *rates: float) -> dict:
    """A worker's reference with its bursts' rates (aiperf.train.bare_reference.burst_rates)."""
    return {**_measured(worker, sum(rates) / len(rates)), "burst_ops_per_s": list(rates)}


def test_a_ratio_below_090_is_a_verdict_on_the_benchmark_when_its_interval_is_under_it_too():
    seeds = [
        _trial(0, "seed", samples=2000, train_s=4.0),  # 500 kOPS
        _trial(1, "seed", samples=2100, train_s=4.0),  # 525 kOPS
    ]
    found = overhead(_run(seeds, [_bursts("w0", 1.0e6, 1.02e6, 0.99e6, 1.01e6)]))
    assert found.ratio == pytest.approx(0.5125 / 1.005, rel=1e-3) and found.below
    assert found.interval is not None and found.interval.high < BELOW
    assert found.line().startswith(
        "seed trials trained at 512 kOPS, bare Keras 1 MOPS per worker on the same nodes: "
        "0.51 (95% interval "
    ), found.line()
    assert "- BELOW 0.90: the benchmark's own cost" in found.line()
    assert found.to_dict()["below"] is True and found.to_dict()["interval"][1] < BELOW


def test_a_ratio_below_090_within_its_spread_or_without_one_gets_no_verdict():
    """Two seed trials 50% apart, or one seed trial (no spread to judge by): a ratio of about
    0.6 is said with its interval, or that it has none, and is not called BELOW."""
    apart = [
        _trial(0, "seed", samples=2000, train_s=4.0),  # 500 kOPS
        _trial(1, "seed", samples=4000, train_s=4.0),  # 1 MOPS
    ]
    wide = overhead(_run(apart, [_bursts("w0", 1.0e6, 1.02e6, 0.99e6, 1.01e6)]))
    assert wide.ratio is not None and wide.ratio < BELOW and not wide.below
    assert wide.interval is not None and wide.interval.high > BELOW
    assert "BELOW" not in wide.line() and "(95% interval " in wide.line(), wide.line()
    one = overhead(_run(apart[:1], [_bursts("w0", 1.0e6, 1.02e6, 0.99e6, 1.01e6)]))
    assert one.ratio == pytest.approx(0.5 / 1.005, rel=1e-3) and one.interval is None
    assert not one.below and one.line().endswith(
        "(no interval: too few seed trials or reference bursts to tell it from noise)"
    )
    no_bursts = overhead(_run(apart, [_measured("w0", 1.0e6)]))  # recorded before bursts were
    assert no_bursts.interval is None and not no_bursts.below


def test_a_references_bursts_are_its_timed_steps_in_consecutive_runs():
    from aiperf.train.bare_reference import burst_rates

    # Eight steps of 32 samples: 0.1 s each, then the last four 0.2 s each.
    marks = [0.0, 0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0, 1.2]
    assert burst_rates(marks, 32) == pytest.approx([320.0, 320.0, 160.0, 160.0])
    assert burst_rates(marks[:4], 32) == []  # three steps: fewer than the four bursts


def test_without_a_seed_trial_that_trained_there_is_no_ratio():
    run = _run(
        [_trial(0, "seed", samples=0, train_s=0.0), _trial(1, "deepen", samples=500, train_s=1)],
        [_measured("w0", 1.0e6)],
    )
    found = overhead(run)
    assert found.ratio is None and found.seed_trials == 0
    assert found.line() == (
        "no comparison: no seed trial trained (none recorded its samples and training seconds)"
    )


def test_a_skipped_reference_says_why_and_gives_no_ratio():
    trials = [_trial(0, "seed", samples=2000, train_s=2.0)]
    skipped = {"worker": "w0", "skipped": "GPU worker: its process holds the devices"}
    found = overhead(_run(trials, [skipped]))
    assert found.ratio is None and found.seed_ops_per_s == pytest.approx(1.0e6)
    assert found.line() == (
        "no comparison: bare Keras not measured (GPU worker: its process holds the devices)"
    )
    assert overhead(_run(trials)).line() == "no comparison: bare Keras not measured (not recorded)"


def test_the_reference_is_stored_and_read_back(sqlite_url):
    """runs.reference_rates through the Alembic migrations and the Store's own method; a resumed
    run's measurement replaces the first."""
    from test_store import new_run

    with Store.open(sqlite_url) as store:
        run_id = new_run(store)
        assert store.get_run(run_id).reference_rates == ()
        store.record_reference(claim_of(store, run_id), [_measured("w0", 2.0e6)])
        store.record_reference(
            claim_of(store, run_id), [_measured("w0", 3.0e6), _measured("w1", 1.0e6)]
        )
        assert store.get_run(run_id).reference_rates == (
            _measured("w0", 3.0e6),
            _measured("w1", 1.0e6),
        )


# --- the clean process on real shards --------------------------------------------------------------


def _on_shards(folder_data, **kwargs):
    from aiperf.train.bare_reference import reference_on_worker
    from aiperf.train.seed import SeedModel

    seed = SeedModel(
        input_shape=folder_data.image_shape,
        classes=folder_data.classes,
        seed_architecture="resnet-mini",
        devices=1,
        precision="float32",
        jit_compile=False,
    )
    return reference_on_worker(folder_data.path, seed, batch=8, seconds=0.3, **kwargs)


def test_the_clean_process_times_the_seed_model_on_the_staged_shards(folder_data):
    """JPEG shards through the real pipeline (uint8 pixels, scaled on the device), in a process of
    its own: the rate of whole timed steps, in the score's operations."""
    measured = _on_shards(folder_data)
    assert measured["worker"] == "local" and measured["batch"] == 8
    assert measured["steps"] >= 2 and measured["seconds"] >= 0.3
    assert measured["samples_per_s"] == pytest.approx(8 * measured["steps"] / measured["seconds"])
    assert measured["ops_per_s"] == pytest.approx(
        measured["samples_per_s"] * measured["train_ops_per_sample"]
    )


def test_a_first_step_slower_than_the_limit_skips_the_reference_with_its_reason(folder_data):
    skipped = _on_shards(folder_data, slow_step_s=0.0)
    assert "samples_per_s" not in skipped and skipped["worker"] == "local"
    assert skipped["skipped"].startswith("its first step took "), skipped
    assert (
        overhead(_run(reference=[skipped]))
        .line()
        .startswith("no comparison: bare Keras not measured (its first step took ")
    )


# --- the run's side: what it records when nothing is measured --------------------------------------


def test_turned_off_or_simulated_the_run_records_why_and_broadcasts_nothing(
    sqlite_url, monkeypatch
):
    """No client is given: a run that turns the reference off, or trains nothing, never asks its
    workers; it records the reason, which `show` then gives."""
    from test_store import new_run

    from aiperf.config import load_config
    from aiperf.lifecycle.recorder import RunRecorder
    from aiperf.lifecycle.reference import measure_reference
    from aiperf.results.mllog import EventLog

    simulated = load_config("quick", overrides={"train.trainer": "simulated"})
    with Store.open(sqlite_url) as store:
        run_id = new_run(store)
        recorder = RunRecorder(store, claim_of(store, run_id), EventLog(None))
        monkeypatch.setenv(settings.REFERENCE_SECONDS.name, "0")
        measure_reference(simulated, recorder, client=None, manifest=None)
        off = store.get_run(run_id).reference_rates
        monkeypatch.setenv(settings.REFERENCE_SECONDS.name, "4")
        measure_reference(simulated, recorder, client=None, manifest=None)
        skipped = store.get_run(run_id)
    assert off == ({"worker": None, "skipped": "turned off: AIPERF_REFERENCE_SECONDS=0"},)
    assert skipped.reference_rates == (
        {"worker": None, "skipped": "the simulated trainer trains no model to compare"},
    )
    assert overhead(skipped).line() == (
        "no comparison: bare Keras not measured (the simulated trainer trains no model to compare)"
    )


def test_a_bad_reference_seconds_is_one_line_naming_the_fix_before_the_run_is_recorded(
    tmp_path, monkeypatch
):
    from aiperf.config import load_config
    from aiperf.errors import UserError
    from aiperf.lifecycle.preflight import check_before_recording

    config = load_config("quick", out=str(tmp_path))
    monkeypatch.setenv(settings.REFERENCE_SECONDS.name, "soon")
    with pytest.raises(UserError, match=r"^AIPERF_REFERENCE_SECONDS='soon' is not a number 0 or"):
        check_before_recording(config)
    monkeypatch.setenv(settings.REFERENCE_SECONDS.name, "0")
    check_before_recording(config)  # 0 is a value: no reference
