"""One real trial on tiny data: every epoch is reported as it ends, and the deadline cuts it."""

import time
from pathlib import Path

import pytest
from conftest import TINY

from aiperf.config import load_config
from aiperf.data.staging_npz import stage_synthetic
from aiperf.search.space import architecture
from aiperf.train.messages import EpochReport, TrialBuilt, TrialRequest
from aiperf.train.trial import run_trial


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    config = load_config("quick", workers=1, overrides=TINY)
    return config, stage_synthetic(config.data, 0, Path(tmp_path_factory.mktemp("data")))


def _request(staged, deadline: float, epochs: int = 2) -> TrialRequest:
    config, manifest = staged
    arch = architecture(
        {"stages": 1, "blocks_per_stage": 1, "base_filters": 4, "kernel_size": 3},
        manifest.image_shape,
        manifest.classes,
    )
    return TrialRequest(
        run_id=1,
        trial_key="t0",
        architecture=arch.to_dict(),
        learning_rate=0.05,
        batch_size=32,
        epochs=epochs,
        deadline=deadline,
        data_path=manifest.path,
        seed=1,
    )


def test_reports_placement_then_each_epoch(staged):
    reports = []
    result = run_trial(_request(staged, time.time() + 300), reports.append)
    assert result.status == "completed", result.message
    assert isinstance(reports[0], TrialBuilt) and reports[0].train_ops > reports[0].eval_ops > 0
    epochs = [r for r in reports if isinstance(r, EpochReport)]
    assert [e.epoch for e in epochs] == [0, 1]
    assert all(
        e.complete and e.samples_trained == 384 and e.samples_evaluated == 128 for e in epochs
    )
    assert all(e.val_accuracy is not None and e.ended_at >= e.started_at for e in epochs)
    assert result.epochs == epochs


def test_deadline_already_passed_trains_nothing(staged):
    result = run_trial(_request(staged, time.time() - 1), lambda _m: None)
    assert result.status == "stopped" and result.epochs == []


def test_deadline_mid_training_keeps_the_partial_epoch(tmp_path):
    # Epochs of about a second: the deadline lands inside one, not in the instant between two.
    config = load_config("quick", workers=1, overrides={**TINY, "data.train_samples": 6000})
    staged = (config, stage_synthetic(config.data, 0, tmp_path))
    request = _request(staged, time.time() + 8, epochs=50)
    result = run_trial(request, lambda _m: None)
    assert result.status == "stopped"
    last = result.epochs[-1]
    assert not last.complete and last.val_accuracy is None
    assert 0 < last.samples_trained <= config.data.train_samples
    assert last.samples_trained % 32 == 0  # every batch begun finished and counts
    # Stopped by the timer within the batch it was in (milliseconds here), not an epoch later.
    assert last.ended_at - request.deadline < 3.0


def test_no_callback_of_a_steady_epoch_makes_a_step_wait_for_the_host():
    """Keras 3 dispatches batch-end hooks on its own thread only if every callback overriding one
    says async_safe (keras.callbacks.CallbackList): the deadline, NaN and phase watches of every
    call after a trial's first of its kind must all pass that rule."""
    import keras

    from aiperf.train.phases import PhaseClock
    from aiperf.train.watch import deadline_watch, nan_watch

    clock = PhaseClock()
    callbacks, seen = [], set()
    for kind in ("train", "train", "evaluate", "evaluate"):
        with clock.steps(kind):
            made = [deadline_watch(time.time() + 60), clock.callback(), nan_watch()]
        if kind in seen:  # the first call of a kind is timed batch by batch on purpose
            callbacks.extend(made)
        seen.add(kind)
    assert len(callbacks) == 6
    hooks = ("on_batch_end", "on_train_batch_end", "on_test_batch_end")
    for callback in callbacks:
        overridden = [
            h
            for h in hooks
            if getattr(type(callback), h) is not getattr(keras.callbacks.Callback, h)
        ]
        assert getattr(callback, "async_safe", False) or not overridden, (callback, overridden)


def test_a_diverging_trial_stops_at_once_and_keeps_its_samples(staged):
    from dataclasses import replace

    from aiperf.status import TrialStatus

    request = replace(_request(staged, time.time() + 300, epochs=3), learning_rate=1e12)
    result = run_trial(request, lambda _m: None)
    assert result.status == TrialStatus.DIVERGED, result.message
    assert "loss became" in result.message
    (epoch,) = result.epochs  # stopped in its first epoch: no evaluation, no further epochs
    assert not epoch.complete and epoch.val_accuracy is None and epoch.samples_evaluated == 0
    assert 0 < epoch.samples_trained <= 384 and epoch.samples_trained % 32 == 0


def test_step_state_is_built_before_fit_so_the_train_step_is_traced_once(staged):
    """Variables created inside the first trace make tf.function trace the train step twice."""
    import keras
    import numpy as np

    from aiperf.arch import build_model, network_from_dict
    from aiperf.data.feed import array_dataset
    from aiperf.train.fit import build_step_state

    request = _request(staged, time.time() + 300)
    model = build_model(network_from_dict(request.architecture))
    model.compile(
        optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    build_step_state(model)
    traces = []
    step = model.train_step
    model.train_step = lambda data: traces.append(1) or step(data)
    rng = np.random.default_rng(0)
    x = rng.random((64, *request.architecture["input_shape"]), dtype=np.float32)
    y = rng.integers(0, 10, 64)
    model.fit(array_dataset(x, y, 32, shuffle_seed=0), epochs=1, verbose=0, shuffle=False)
    assert len(traces) == 1
    # The zero batch that built the metrics is not counted: fit reset them before its first step.
    counts = [v for v in model.metrics_variables if v.name == "count"]
    assert counts and all(int(keras.ops.convert_to_numpy(v)) == 64 for v in counts), counts


def test_a_trial_trains_all_its_epochs_in_one_fit(staged, monkeypatch):
    """The training iterator lives across epochs: one `fit` (the real one, counted) for the trial's
    epochs, each still reported as it ends, with its exact samples."""
    import keras

    calls = []
    fit = keras.Model.fit

    def counted(model, *args, **kwargs):
        calls.append(kwargs.get("epochs"))
        return fit(model, *args, **kwargs)

    monkeypatch.setattr(keras.Model, "fit", counted)
    reports = []
    result = run_trial(_request(staged, time.time() + 300, epochs=3), reports.append)
    assert result.status == "completed", result.message
    assert calls == [3]
    epochs = [r for r in reports if isinstance(r, EpochReport)]
    assert [(e.epoch, e.samples_trained, e.samples_evaluated) for e in epochs] == [
        (0, 384, 128),
        (1, 384, 128),
        (2, 384, 128),
    ]
