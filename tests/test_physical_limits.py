"""Physical limits checked by verify (issue 25 item 3; aiperf.results.physical).

A real run's records forged in each limit's way (PHYSICAL_TAMPERS) are caught by name: they join
tests/test_verify.py's TAMPERS, so they run on the real run that module trains once, and honest
runs pass there (test_a_real_run_passes_and_its_verdict_is_stored). Here: the same forgeries fail
their check and no other physical one, and the limits' edges on records laid out by hand."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from aiperf.config import load_config
from aiperf.results import physical
from aiperf.store import EpochRecord

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _fewer_workers(sql: sqlite3.Connection) -> None:
    """The run claims one worker, and its two workers' epochs ran at the same time."""
    sql.execute("UPDATE runs SET workers = 1")


def _faster_than_its_peak(sql: sqlite3.Connection) -> None:
    """Worker 0's epochs claim a millisecond each: the same operations, far above its peak. Its
    epochs still lie in the window and on no other epoch, and its trials' phases are untouched."""
    sql.execute(
        "UPDATE epochs SET ended_at = strftime('%Y-%m-%d %H:%M:%f', started_at, '+0.001 seconds') "
        "WHERE trial_id IN (SELECT id FROM trials WHERE worker = '0')"
    )


def _worker_not_described(sql: sqlite3.Connection) -> None:
    """A worker the trials name is dropped from the system description."""
    (description,) = sql.execute("SELECT system_description FROM runs WHERE id = 1").fetchone()
    described = json.loads(description)
    for node in described["nodes"]:
        node["worker_names"] = [name for name in node["worker_names"] if name != "0"]
    sql.execute("UPDATE runs SET system_description = ?", (json.dumps(described),))


PHYSICAL_TAMPERS = {
    physical.EPOCHS_WITHIN_DEVICES: _fewer_workers,
    physical.WORKER_MFU_WITHIN_PEAK: _faster_than_its_peak,
    physical.WORKERS_IN_SYSTEM: _worker_not_described,
}


def test_every_physical_check_has_a_forgery():
    assert set(PHYSICAL_TAMPERS) == set(physical.CHECKS)


# --- the limits' edges, on records laid out by hand --------------------------------------------------


def _epoch(start_s: float, end_s: float, trained: int = 100, evaluated: int = 0) -> EpochRecord:
    return EpochRecord(
        epoch=0,
        started_at=T0 + timedelta(seconds=start_s),
        ended_at=T0 + timedelta(seconds=end_s),
        samples_trained=trained,
        samples_evaluated=evaluated,
        loss=None,
        accuracy=None,
        val_loss=None,
        val_accuracy=None,
        complete=True,
    )


def _trial(tid: int, worker: str, *epochs: EpochRecord, devices: int = 1) -> SimpleNamespace:
    return SimpleNamespace(
        id=tid, trial_key=f"k{tid}", worker=worker, devices=devices, epochs=epochs
    )


def _evidence(trials, *, workers=2, peaks=None, description=None, settings=None):
    """What the physical checks read of verify's Evidence: the run's records, its config, and
    each trial's recounted operations per sample (1000 tensor FLOPs per trained sample here)."""
    # Recorded elsewhere: verify judges a stored config without this machine's cores.
    config = load_config("quick", workers=workers, overrides=settings or {}, runs_here=False)
    run = SimpleNamespace(
        trials=trials,
        workers=workers,
        worker_peaks=peaks if peaks is not None else [],
        system_description=description,
    )
    return SimpleNamespace(run=run, config=config, counts={t.id: (0, 0, 1000, 0) for t in trials})


def test_epochs_that_touch_are_not_in_flight_together():
    one_after_another = [
        _trial(1, "0", _epoch(0, 10)),
        _trial(2, "1", _epoch(0, 10)),
        _trial(3, "0", _epoch(10, 20)),
    ]
    assert physical.check_epochs_within_devices(_evidence(one_after_another)).passed
    a_third = [*one_after_another, _trial(4, "2", _epoch(5, 6))]
    check = physical.check_epochs_within_devices(_evidence(a_third))
    assert not check.passed and "3 devices' worth of epochs in flight" in check.detail


def test_a_trial_counts_every_device_it_holds():
    settings = {"cluster.devices_per_trial": 2}
    two_each = [_trial(1, "0", _epoch(0, 10), devices=2), _trial(2, "1", _epoch(0, 10), devices=2)]
    assert physical.check_epochs_within_devices(_evidence(two_each, settings=settings)).passed
    more = [_trial(1, "0", _epoch(0, 10), devices=3)]
    check = physical.check_epochs_within_devices(_evidence(more, settings=settings))
    assert not check.passed and "records 3 devices" in check.detail


def test_a_worker_at_its_peak_passes_and_above_it_fails():
    peaks = [{"worker": "0", "flops": 1e4}]
    at_peak = [_trial(1, "0", _epoch(0, 10, trained=100))]  # 1e5 FLOPs in 10 s at 1e4 FLOP/s
    assert physical.check_worker_mfu_within_peak(_evidence(at_peak, peaks=peaks)).passed
    above = [_trial(1, "0", _epoch(0, 9, trained=100))]
    check = physical.check_worker_mfu_within_peak(_evidence(above, peaks=peaks))
    assert not check.passed and "worker 0 ran at 1.11 times its measured peak" in check.detail


def test_a_worker_that_trained_without_a_peak_fails_where_others_have_one():
    peaks = [{"worker": "1", "flops": 1e9}]
    check = physical.check_worker_mfu_within_peak(
        _evidence([_trial(1, "0", _epoch(0, 10))], peaks=peaks)
    )
    assert not check.passed and "worker 0 trained, and has no measured peak" in check.detail


def test_without_any_peak_an_open_run_passes_and_a_closed_one_fails():
    trials = [_trial(1, "0", _epoch(0, 10))]
    assert physical.check_worker_mfu_within_peak(
        _evidence(trials, settings={"train.epochs": 1})
    ).passed
    closed = _evidence(trials, workers=1)  # the quick profile as packaged: closed
    check = physical.check_worker_mfu_within_peak(closed)
    assert not check.passed and "a closed result" in check.detail


def test_every_trial_worker_is_in_the_system_description():
    trials = [_trial(1, "0", _epoch(0, 1)), _trial(2, "1@job7", _epoch(0, 1))]
    described = {"nodes": [{"worker_names": ["0"]}, {"worker_names": ["1@job7"]}]}
    assert physical.check_workers_in_system(_evidence(trials, description=described)).passed
    one_missing = {"nodes": [{"worker_names": ["0"]}]}
    check = physical.check_workers_in_system(_evidence(trials, description=one_missing))
    assert not check.passed and "1@job7" in check.detail
    for nameless in (None, {"nodes": [{"workers": ["tcp://a:1"]}]}):
        check = physical.check_workers_in_system(_evidence(trials, description=nameless))
        assert not check.passed and "names no workers" in check.detail


def test_the_system_description_names_its_workers_as_their_trials_do():
    from aiperf.system.description import describe_node, describe_system

    node = describe_node(SimpleNamespace(name=0))  # Client.run passes each worker as dask_worker
    assert node["worker"] == "0"
    described = describe_system({"tcp://a:1": node, "tcp://a:2": {**node, "worker": "1"}})
    assert physical.described_workers(described) == {"0", "1"}
    assert "worker" not in described["nodes"][0], "a node lists its workers, it is not one"


def test_a_batch_job_resubmitted_under_its_name_is_the_same_worker():
    """The keeper resubmits an ended job under the same worker name: its trials (NAME@NEW_JOB) are
    judged by the peak and description of NAME's first job; a name that is not the run's is not."""
    later = [_trial(1, "w0@job1", _epoch(0, 10)), _trial(2, "w0@job9", _epoch(10, 20))]
    peaks = [{"worker": "w0@job1", "flops": 1e4}]
    described = {"nodes": [{"worker_names": ["w0@job1"]}]}
    ev = _evidence(later, peaks=peaks, description=described)
    assert physical.check_worker_mfu_within_peak(ev).passed
    assert physical.check_workers_in_system(ev).passed
    stranger = _evidence(
        [*later, _trial(3, "w7@job9", _epoch(0, 1)), _trial(4, "w0", _epoch(20, 21))],
        peaks=peaks,
        description=described,
    )
    check = physical.check_workers_in_system(stranger)
    assert not check.passed and "w7@job9" in check.detail and "trials ran on w0," in check.detail
    assert "worker w7@job9 trained, and has no measured peak" in (
        physical.check_worker_mfu_within_peak(stranger).detail
    )
