"""One trial across several devices: cluster.devices_per_trial in the config, the workers and jobs
it makes, the pinning of each worker's GPUs, and real data-parallel trials on logical CPU devices
(the code path a node's GPUs take) on both backends that support it, recorded and verified."""

from __future__ import annotations

import json
import os

import pytest

from aiperf import settings
from aiperf.cluster.environment import HOST_DEVICES_FLAG, pin_gpu, worker_environment
from aiperf.cluster.plan import GPU_RESOURCE, job_plan, trial_resources
from aiperf.config import load_config, machine_cores, trial_devices
from aiperf.errors import UserError
from aiperf.train.messages import TrialBuilt, from_event, to_event


def _slurm(**cluster):
    return load_config(
        "quick", budget="60s", cluster={"kind": "slurm", **cluster}, runs_here=False
    )


def test_a_number_or_node_from_the_command_line():
    assert trial_devices(load_config("quick", workers=1).cluster) == 1
    config = load_config("quick", workers=1, cluster={"devices_per_trial": "2"})
    assert config.cluster.devices_per_trial == 2
    assert trial_devices(_slurm(gpus=8, devices_per_trial="node").cluster) == 8
    # Without GPUs a node's device is its CPU: `node` is one device per trial.
    assert (
        trial_devices(
            load_config("quick", workers=1, cluster={"devices_per_trial": "node"}).cluster
        )
        == 1
    )


@pytest.mark.parametrize(
    ("cluster", "backend", "expected"),
    [
        ({"devices_per_trial": 0}, "tensorflow", "devices_per_trial"),
        ({"devices_per_trial": "all"}, "tensorflow", "devices_per_trial"),
        ({"devices_per_trial": 2}, "torch", "needs train.backend jax or tensorflow"),
        (
            {"kind": "slurm", "gpus": 8, "devices_per_trial": 3},
            "jax",
            "does not divide cluster.gpus 8",
        ),
    ],
)
def test_devices_that_cannot_be_had_are_one_line(cluster, backend, expected):
    with pytest.raises(UserError, match=expected) as caught:
        load_config(
            "quick",
            workers=1,
            cluster=cluster,
            overrides={"train.backend": backend},
            runs_here=False,
        )
    assert "\n" not in str(caught.value)


def test_on_cpus_a_workers_devices_share_its_cores():
    cores = machine_cores()
    load_config("quick", workers=1, cluster={"devices_per_trial": cores})
    with pytest.raises(UserError, match="more than a worker's"):
        load_config("quick", workers=1, cluster={"devices_per_trial": cores + 1})


def test_the_global_batch_must_fit_the_data():
    with pytest.raises(UserError, match="x its 2 devices"):
        load_config(
            "quick",
            workers=1,
            cluster={"devices_per_trial": 2},
            overrides={"data.train_samples": 100, "search.space.batch_size": [64]},
        )


def test_a_job_holds_one_worker_per_trials_devices():
    plan = job_plan(_slurm(gpus=8, devices_per_trial=2, cores=8), None)
    assert (plan.workers_per_job, plan.gpus) == (4, 8)
    assert f"{GPU_RESOURCE}=2" in " ".join(plan.kwargs["worker_extra_args"])
    assert any(
        f"{settings.WORKER_DEVICES.name}=2" in line for line in plan.kwargs["job_script_prologue"]
    )
    node = _slurm(gpus=8, devices_per_trial="node", cores=8)
    assert job_plan(node, None).workers_per_job == 1
    assert trial_resources(node)[GPU_RESOURCE] == 8


def test_local_workers_auto_are_the_gpus_over_devices_per_trial():
    config = load_config("quick", cluster={"gpus": 4, "devices_per_trial": 2})
    assert config.workers == min(2, machine_cores())
    assert load_config("quick", cluster={"gpus": 4, "devices_per_trial": "node"}).workers == 1
    with pytest.raises(UserError, match="a local worker owns 2 GPUs"):
        load_config("quick", workers=3, cluster={"gpus": 4, "devices_per_trial": 2})


def test_each_worker_is_pinned_to_its_own_gpus(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv(settings.GPU_PINNED.name, raising=False)
    for key, value in worker_environment(1, gpus=8, devices=4).items():
        monkeypatch.setenv(key, value)
    assert HOST_DEVICES_FLAG not in os.environ.get("XLA_FLAGS", "")  # real GPUs, no logical CPUs
    assert pin_gpu("slurm-job-7-1") == "4,5,6,7"
    monkeypatch.delenv(settings.GPU_PINNED.name)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    assert pin_gpu("slurm-job-7-0") == "0,1,2,3"


def test_without_gpus_the_worker_gets_logical_devices(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", f"--xla_cpu_use_thunk_runtime=true {HOST_DEVICES_FLAG}=9")
    env = worker_environment(2, devices=2)
    assert env[settings.WORKER_DEVICES.name] == "2"
    assert env["XLA_FLAGS"] == f"--xla_cpu_use_thunk_runtime=true {HOST_DEVICES_FLAG}=2"
    assert settings.WORKER_DEVICES.name not in worker_environment(2)


def test_the_devices_travel_with_the_trials_reports():
    built = TrialBuilt("t", "w", 1, 2, 3, 4, 5, devices=2, placement=("cpu:0", "cpu:1"))
    event = json.loads(json.dumps(to_event(built)))  # a Dask event turns tuples into lists
    assert from_event(event) == built


@pytest.mark.slow
def test_a_run_of_two_device_trials_records_and_verifies_them(tmp_path):
    """`aiperf run --workers 1 --cluster-opt devices_per_trial=2` on this machine's cores: every
    trial that built a model trained on the worker's two devices, its epochs whole global batches,
    and the run's own verification passes (samples, operations and score recomputed). The budget
    only has to fit the first trial's build, which comes first in the window on any machine; two
    trials in one worker process are `test_two_trials_in_one_process_share_its_devices`'s, which
    waits for both rather than racing a budget. On TensorFlow (MirroredStrategy); the same run on
    JAX with jit across a worker's devices is the stand-in GPU node's (tests/test_gpu_node.py,
    8 devices a trial, recorded and verified), so it is not trained twice."""
    from conftest import TINY

    from aiperf.lifecycle import run
    from aiperf.status import TrialStatus
    from aiperf.store import Store

    config = load_config(
        "quick",
        budget="12s",
        workers=1,
        db=f"sqlite:///{tmp_path / 'devices.db'}",
        out=str(tmp_path),
        cluster={"devices_per_trial": 2},
        overrides={
            **TINY,
            "train.backend": "tensorflow",
            "train.epochs": 1,
            "search.space.batch_size": [16, 32],
        },
    )
    outcome = run.run_benchmark(config)
    assert outcome.verified, "the run's own verification passed"
    with Store.open_existing(config.db) as store:
        trials = [t for t in store.get_run(outcome.run_id).trials if t.train_ops_per_sample]
    assert trials, "the first trial built its model"
    assert not [t.message for t in trials if t.status == TrialStatus.FAILED]
    for trial in trials:
        assert trial.devices == 2 and len(set(trial.placement)) == 2, (
            trial.devices,
            trial.placement,
        )
        batch = trial.hyperparameters["batch_size"] * 2
        assert all(e.samples_trained % batch == 0 for e in trial.epochs)


TWO_TRIALS = """
import json, sys, time
from pathlib import Path
from aiperf.config import DataConfig
from aiperf.data.staging import stage
from aiperf.search.space import architecture
from aiperf.train.messages import TrialRequest
from aiperf.train.trial import configure_threads, run_trial, worker_cores

configure_threads(worker_cores())  # as a worker does first: its two logical devices
m = stage(DataConfig(kind="digits", image_size=16, channels=1, train_samples=512, val_samples=128),
          0, Path(sys.argv[1]))
results = []
for number, filters in enumerate((4, 8)):
    arch = architecture({"stages": 1, "blocks_per_stage": 1, "base_filters": filters,
                         "kernel_size": 3}, m.image_shape, 10)
    # A deadline far off: each trial trains its whole epoch, however slow the machine.
    r = run_trial(TrialRequest(run_id=1, trial_key=f"t{number}", architecture=arch.to_dict(),
                               learning_rate=0.05, batch_size=16, epochs=1, devices=2,
                               deadline=time.time() + 600, data_path=m.path, seed=number),
                  lambda _m: None)
    results.append({"status": r.status, "message": r.message,
                    "samples": [e.samples_trained for e in r.epochs]})
print(json.dumps(results))
"""


@pytest.mark.slow
def test_two_trials_in_one_process_share_its_devices(tmp_path):
    """Two data-parallel trials, one after the other, in one TensorFlow process on two logical
    devices, as a worker runs them: both complete. A second MirroredStrategy's all-reduces once met
    the first's in TensorFlow's runtime and failed every trial after the first (aiperf.train.devices
    keeps one strategy per set of devices). Each trial is given the time to finish its epoch."""
    import subprocess
    import sys
    from pathlib import Path

    env = {
        **os.environ,
        "KERAS_BACKEND": "tensorflow",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        settings.WORKER_DEVICES.name: "2",
    }
    done = subprocess.run(
        [sys.executable, "-c", TWO_TRIALS, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert [r["status"] for r in results] == ["completed", "completed"], results
    assert all(r["samples"] == [512 // 32 * 32] for r in results), results


ODD_VALIDATION = """
import json, sys, time
from pathlib import Path
from aiperf.config import DataConfig
from aiperf.data.staging import stage
from aiperf.search.space import architecture
from aiperf.train.messages import TrialRequest
from aiperf.train.trial import configure_threads, run_trial, worker_cores

configure_threads(worker_cores())
m = stage(DataConfig(kind="digits", image_size=16, channels=1, train_samples=256, val_samples=127),
          0, Path(sys.argv[1]))
arch = architecture({"stages": 1, "blocks_per_stage": 1, "base_filters": 4, "kernel_size": 3},
                    m.image_shape, 10)
r = run_trial(TrialRequest(run_id=1, trial_key="t0", architecture=arch.to_dict(),
                           learning_rate=0.05, batch_size=16, epochs=1, devices=2, jit_compile=True,
                           deadline=time.time() + 600, data_path=m.path, seed=0),
              lambda _m: None)
print(json.dumps({"status": r.status, "message": r.message,
                  "evaluated": [e.samples_evaluated for e in r.epochs]}))
"""


@pytest.mark.slow
def test_a_jax_trial_on_two_devices_evaluates_an_odd_validation_set(tmp_path):
    """127 validation images on two JAX devices: Keras' DataParallel splits every batch evenly, so
    a short last batch of 15 would fail the trial; it evaluates 126 (aiperf.data.feed.evaluated)."""
    import subprocess
    import sys
    from pathlib import Path

    env = {
        **os.environ,
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        settings.WORKER_DEVICES.name: "2",
    }
    done = subprocess.run(
        [sys.executable, "-c", ODD_VALIDATION, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["status"] == "completed", found["message"]
    assert found["evaluated"] == [126]


def test_a_workers_peak_counts_each_of_its_accelerators():
    """MFU's divisor for a worker with N GPUs is N times the one it probed, every rate alike."""
    from aiperf.train.worker import across_devices

    probed = {"flops": 2e14, "dtype": "bfloat16", "probes": {"mixed_bfloat16": {"flops": 2e14}}}
    assert across_devices(probed, 4) == {
        "flops": 8e14,
        "dtype": "bfloat16",
        "devices": 4,
        "probes": {"mixed_bfloat16": {"flops": 8e14}},
    }
    assert across_devices({"flops": 1e11}, 1) == {"flops": 1e11, "devices": 1}
