"""The event log (aiperf.results.mllog): MLPerf's line format, one vocabulary, appended as a run goes, read
back into the records aiperf.results.verify checks; and a run interrupted then resumed appends to one log
that still tells the whole run (its records rebuilt from it equal the database's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import TINY

from aiperf import paths
from aiperf.config import load_config
from aiperf.lifecycle import run
from aiperf.lifecycle.stages import Stages, TrialRunner, dask_trials
from aiperf.results import mllog
from aiperf.results.mllog.conformance import check
from aiperf.results.score import ScoreResult
from aiperf.status import RunStatus, TrialStatus
from aiperf.store import (
    CheckRecord,
    EpochReport,
    RunStart,
    Store,
    TrialBuilt,
    TrialEnd,
    TrialStart,
    WindowRecord,
)

T0 = 1_796_000_000.123456  # a Unix time with microseconds
ARCH = {"name": "tiny", "layers": []}


def logged_start(config: dict, **judged) -> RunStart:
    """A run's start as a test's log tells it: its config's fields, and how it is judged."""
    fields = {k: config[k] for k in ("profile", "seed", "budget_s", "workers")}
    return RunStart(config=config, **fields, **judged)


def write_run(path: Path, *, stop: str | None = "completed") -> mllog.EventLog:
    """A small run as the hooks write it: two trials (the second a child of the first), three epochs."""
    log = mllog.EventLog(path)
    log.run_started(
        7,
        logged_start(
            {"profile": "quick", "budget_s": 60.0, "workers": 2, "seed": 5},
            division="open",
            ruleset="aiperf-rules-1.0",
            deviations=("seed: 0 -> 5",),
            config_hash="c" * 64,
        ),
        system_id=3,
        system={
            "fingerprint": "f" * 64,
            "hostname": "h",
            "cpu_model": "cpu",
            "cpu_cores": 2,
            "memory_bytes": 2**30,
            "gpus": {"count": 0, "models": []},
            "platform": "p",
            "python_version": "3.11",
            "tensorflow_version": None,
            "keras_version": "3",
            "keras_backend": "tensorflow",
        },
    )
    log.dataset(
        {
            "name": "synthetic",
            "kind": "synthetic",
            "sha256": "s" * 64,
            "train_samples": 384,
            "val_samples": 128,
            "classes": 10,
            "path": "/data",
        }
    )
    log.search_started(T0, T0 + 60)
    log.trial_started(
        11,
        TrialStart(
            trial_key="00",
            number=0,
            started_at=T0 + 0.5,
            parent_trial_id=None,
            operator="seed",
            architecture=ARCH,
            hyperparameters={"batch_size": 32},
            epochs=2,
            seed=1,
        ),
    )
    log.trial_built(
        TrialBuilt(
            trial_key="00",
            worker="tcp://w0",
            parameters=1000,
            train_ops=30,
            eval_ops=10,
            tensor_train_ops=28,
            tensor_eval_ops=9,
        )
    )
    for n in range(2):
        log.epoch(
            EpochReport(
                "00",
                epoch=n,
                started_at=T0 + 1 + 10 * n,
                ended_at=T0 + 10 + 10 * n,
                samples_trained=384,
                samples_evaluated=128,
                loss=1.0,
                accuracy=0.4,
                val_loss=1.1,
                val_accuracy=0.3 + 0.1 * n,
                complete=True,
            )
        )
    log.trial_stopped(TrialEnd("00", TrialStatus.COMPLETED, T0 + 21, None))
    log.trial_started(
        12,
        TrialStart(
            trial_key="01",
            number=1,
            started_at=T0 + 21.5,
            parent_trial_id=11,
            operator="widen stage 1",
            architecture=ARCH,
            hyperparameters={"batch_size": 32},
            epochs=2,
            seed=2,
        ),
    )
    log.trial_built(
        TrialBuilt(
            trial_key="01",
            worker="tcp://w1",
            parameters=2000,
            train_ops=60,
            eval_ops=20,
            tensor_train_ops=56,
            tensor_eval_ops=18,
            inherited_epoch=1,  # grown from its parent's kept weights (search.inherit)
        )
    )
    log.epoch(
        EpochReport(
            "01",
            epoch=0,
            started_at=T0 + 22,
            ended_at=T0 + 60,
            samples_trained=96,
            samples_evaluated=0,
            loss=2.0,
            accuracy=0.1,
            val_loss=None,
            val_accuracy=None,
            complete=False,
        )
    )
    log.search_stopped(T0 + 60.25)
    if stop is not None:
        log.run_stopped(stop)
    return log


def test_every_line_is_an_mllog_event_in_mlperf_format(tmp_path):
    path = tmp_path / "events.log"
    write_run(path)
    lines = path.read_text().splitlines()
    assert lines and all(line.startswith(":::MLLOG {") for line in lines)
    for line in lines:
        body = json.loads(line.removeprefix(":::MLLOG "))
        assert list(body) == ["namespace", "time_ms", "event_type", "key", "value", "metadata"]
        assert isinstance(body["time_ms"], int) and body["event_type"] in mllog.EVENT_TYPES
        assert body["key"] in mllog.KEYS, f"{body['key']} is not in the one vocabulary"
    keys = [json.loads(line.removeprefix(":::MLLOG "))["key"] for line in lines]
    assert keys[0] == mllog.RUN_START and keys[-1] == mllog.RUN_STOP
    epoch_start = next(json.loads(line[9:]) for line in lines if '"epoch_start"' in line)
    assert (
        epoch_start["time_ms"] == round((T0 + 1) * 1000)
        and epoch_start["metadata"]["time_s"] == T0 + 1
    )


def test_the_vocabulary_is_one_set_of_distinct_keys():
    assert len(set(mllog.KEYS)) == len(mllog.KEYS)
    constants = {
        v for k, v in vars(mllog).items() if k.isupper() and isinstance(v, str) and v in mllog.KEYS
    }
    assert constants == set(mllog.KEYS)


def test_a_second_writer_appends(tmp_path):
    path = tmp_path / "run" / "events.log"
    mllog.EventLog(path).emit(mllog.SEED, 1)
    mllog.EventLog(path).emit(mllog.SEED, 2)
    assert [e.value for e in mllog.read_events(path)] == [1, 2]
    mllog.EventLog(None).emit(mllog.SEED, 3)  # a log without a file writes nothing


def test_the_log_rebuilds_the_records(tmp_path):
    path = tmp_path / "events.log"
    write_run(path)
    score = ScoreResult(
        elapsed_s=60.25,
        total_ops=1,
        ops=1.0,
        tensor_ops=1.0,
        best_val_accuracy=0.4,
        val_samples=128,
        regulated_score=1.0,
        trials_completed=1,
        samples_trained=864,
        samples_evaluated=256,
        valid=False,
        reasons=["too short"],
    )
    log = mllog.EventLog(path)
    log.score(score, "aiperf-rules-1.0")
    log.verification([CheckRecord("elapsed_time", True, "ok")])
    logged = mllog.read_run(path)
    record = logged.run
    assert (record.id, record.profile, record.seed, record.workers, record.budget_s) == (
        7,
        "quick",
        5,
        2,
        60.0,
    )
    assert (record.division, record.ruleset, record.deviations) == (
        "open",
        "aiperf-rules-1.0",
        ("seed: 0 -> 5",),
    )
    assert (
        record.stored_status is RunStatus.COMPLETED
        and record.system.hostname == "h"
        and record.system.id == 3
    )
    assert logged.dataset.val_samples == 128 and logged.dataset.train_samples == 384
    assert record.score == score and record.verification == (
        CheckRecord("elapsed_time", True, "ok"),
    )
    (window,) = record.windows
    assert (window.ended_at - window.started_at).total_seconds() == pytest.approx(60.25)
    first, second = record.trials
    assert (first.trial_key, first.id, first.worker, first.status) == (
        "00",
        11,
        "tcp://w0",
        TrialStatus.COMPLETED,
    )
    assert (
        first.train_ops_per_sample,
        first.eval_ops_per_sample,
        first.tensor_train_ops_per_sample,
        first.tensor_eval_ops_per_sample,
    ) == (30, 10, 28, 9)
    assert [e.val_accuracy for e in first.epochs] == [0.3, 0.4] and first.best_val_accuracy == 0.4
    assert (second.parent_trial_id, second.operator) == (11, "widen stage 1")
    assert (first.inherited_epoch, second.inherited_epoch) == (None, 1)
    assert second.status is TrialStatus.STOPPED, (
        "a trial still running when its run completed was stopped"
    )
    assert second.epochs[0].complete is False and second.best_val_accuracy is None


def test_a_trial_cut_off_by_a_resume_was_interrupted(tmp_path):
    path = tmp_path / "events.log"
    log = write_run(path, stop=None)  # lost: no run_stop
    assert mllog.read_run(path).run.trials[1].status is TrialStatus.RUNNING
    log.run_resumed(run_id=7, windows=[])
    assert mllog.read_run(path).run.trials[1].status is TrialStatus.INTERRUPTED


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("not an event", "line 3 is not an MLLOG event"),
        (':::MLLOG {"time_ms": 1', "line 3 is not valid JSON"),
        (
            ':::MLLOG {"namespace": "", "time_ms": 1, "event_type": "POINT_IN_TIME", "key": "seed"}',
            "has no value",
        ),
        (
            ':::MLLOG {"namespace": "", "time_ms": 1, "event_type": "LATER", "key": "seed", '
            '"value": 1, "metadata": {}}',
            "unknown event_type",
        ),
    ],
)
def test_a_line_that_is_not_an_event_is_named(tmp_path, line, fragment):
    path = tmp_path / "events.log"
    log = mllog.EventLog(path)
    log.emit(mllog.SEED, 1)
    log.emit(mllog.SEED, 2)
    with path.open("a") as handle:
        handle.write(line + "\n")
    with pytest.raises(mllog.EventLogError, match=fragment):
        mllog.read_events(path)


def test_an_event_that_does_not_fit_is_named(tmp_path):
    path = tmp_path / "events.log"
    write_run(path)
    text = path.read_text().replace(
        '"train_samples", "value": 384', '"train_samples", "value": "lots"', 1
    )
    path.write_text(text)
    with pytest.raises(
        mllog.EventLogError, match=r"line \d+: a train_samples event that does not fit"
    ):
        mllog.read_run(path)
    path.write_text("")
    with pytest.raises(mllog.EventLogError, match="has no run_start event"):
        mllog.read_run(path)


def test_the_kept_weights_are_read_back_and_checked_for_shape(tmp_path):
    """The best trial's weights file and its sha256 (issue 25 item 2): what `verify --package`
    evaluates again. The latest event stands; none kept is null; a malformed one is named."""
    path = tmp_path / "events.log"
    log = write_run(path)
    assert mllog.read_run(path).run.best_weights is None, "no event: none kept"
    kept = {
        "trial": 0,
        "epoch": 1,
        "file": "weights/trial-0.weights.h5",
        "sha256": "a" * 64,
        "val_accuracy": 0.5,
    }
    log.best_weights(kept)
    assert mllog.read_run(path).run.best_weights == kept
    log.best_weights(None)
    assert mllog.read_run(path).run.best_weights is None, "the latest stands"
    log.best_weights({"trial": 0, "file": "w.h5"})
    with pytest.raises(mllog.EventLogError, match="a best_weights event that does not fit"):
        mllog.read_run(path)


def test_run_resources_merge_field_by_field_and_the_latest_stands(tmp_path):
    """The recorder emits each resource as it is recorded: some fields at a time, some again."""
    path = tmp_path / "events.log"
    log = write_run(path)
    log.resources(precision="float32", backend="tensorflow", jit_compile=False)
    log.resources(peak_flops=2.0e9, worker_peaks=[{"worker": "w0", "flops": 2.0e9}])
    log.resources(precision="mixed_bfloat16", feed_rates=[{"worker": "w0", "ratio": 3.0}])
    run_record = mllog.read_run(path).run
    assert (run_record.precision, run_record.backend, run_record.jit_compile) == (
        "mixed_bfloat16",
        "tensorflow",
        False,
    )
    assert run_record.peak_flops == 2.0e9 and run_record.worker_peaks == (
        {"worker": "w0", "flops": 2.0e9},
    )
    assert run_record.feed_rates == ({"worker": "w0", "ratio": 3.0},)
    assert run_record.data_feed is None and run_record.reference_rates == (), "never logged"


def test_the_rows_own_times_and_flow_run_are_rebuilt_exactly(tmp_path):
    logged = tmp_path / "events.log"
    mllog.EventLog(logged).run_started(
        1,
        logged_start(
            {"profile": "quick", "budget_s": 60.0, "workers": 1, "seed": 0},
            division="closed",
            ruleset="aiperf-rules-1.0",
            config_hash="c" * 64,
            flow_run_id="flow-1",
        ),
        system_id=2,
        system={
            "fingerprint": "f" * 64,
            "hostname": "h",
            "cpu_model": "cpu",
            "cpu_cores": 2,
            "memory_bytes": 2**30,
            "gpus": {"count": 0, "models": []},
            "platform": "p",
            "python_version": "3.11",
            "tensorflow_version": None,
            "keras_version": "3",
            "keras_backend": "tensorflow",
        },
        created_at=T0,
        system_first_seen_at=T0 - 86400,
    )
    run_record = mllog.read_run(logged).run
    assert run_record.created_at.timestamp() == pytest.approx(T0, abs=1e-6)
    assert run_record.system.first_seen_at.timestamp() == pytest.approx(T0 - 86400, abs=1e-6)
    assert run_record.flow_run_id == "flow-1"
    # A log written before these (or without them): the run_start's own time, no flow run.
    older = tmp_path / "older.log"
    write_run(older)
    run_record = mllog.read_run(older).run
    assert run_record.flow_run_id is None
    assert run_record.system.first_seen_at == run_record.created_at


# --- a real run, interrupted and resumed: one log, appended --------------------------------------------

SIMULATED = {
    **TINY,
    "train.trainer": "simulated",
    "data.train_samples": 3000,
    "data.val_samples": 1000,
}


class _StopAfterSomeEpochs(Stages):
    """Ends the run interrupted (as Ctrl-C would) once two trials have finished."""

    def __init__(self, db: str) -> None:
        self.db = db

    def trials(self, config, scheduler_address, security=None):
        import contextlib

        @contextlib.contextmanager
        def runner():
            with dask_trials(config, scheduler_address, security) as trials:

                def launch(request):
                    with Store.open_existing(self.db) as store:
                        recorded = store.get_run(request.run_id).trials
                        done = sum(t.status != TrialStatus.RUNNING for t in recorded)
                    if done >= 2:
                        raise KeyboardInterrupt("stopped by the test")
                    return trials.launch(request)

                yield TrialRunner(trials.client, launch)

        return runner()


@pytest.mark.slow
def test_a_resumed_run_appends_to_its_log_and_the_log_tells_the_whole_run(tmp_path):
    from aiperf.lifecycle.recovery import resume_config

    db = f"sqlite:///{tmp_path / 'aiperf.db'}"
    config = load_config(
        "quick",
        budget="12s",
        workers=2,
        db=db,
        seed=3,
        out=str(tmp_path / "out"),
        overrides=SIMULATED,
    )
    with pytest.raises(KeyboardInterrupt):
        run.run_benchmark(config, _StopAfterSomeEpochs(db))
    path = paths.event_log_path(config.out, config.db, 1)
    first = mllog.read_run(path).run
    assert first.stored_status is RunStatus.INTERRUPTED and len(first.windows) == 1

    outcome = run.run_benchmark(resume_config(db, 1), resume=1)
    events = mllog.read_events(path)
    assert [e.metadata.get("resumed") for e in events if e.key == mllog.RUN_START] == [False, True]
    logged = mllog.read_run(path)
    with Store.open_existing(db) as store:
        record = store.get_run(outcome.run_id)
        dataset = store.run_dataset(outcome.run_id)
    assert len(record.windows) == 2 and logged.run.windows == record.windows
    assert all(isinstance(w, WindowRecord) for w in logged.run.windows)
    assert logged.run.score == record.score and logged.dataset == dataset
    assert logged.run.verification == record.verification
    assert logged.run.stored_status is RunStatus.COMPLETED
    assert logged.run.trials == record.trials  # those the run itself ended too
    assert logged.run.system_description == record.system_description is not None
    # Every other fact, by the conformance check, the trials the run itself ended included.
    unexpected = [str(m) for m in check(record, dataset, mllog.read_events(path))]
    assert unexpected == []
