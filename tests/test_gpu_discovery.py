"""`workers: auto` finds the machine's GPUs: one worker per visible GPU, each pinned to its own as
with cluster.gpus, else one per core. A stand-in nvidia-smi on PATH plays the GPU node."""

from __future__ import annotations

import os

import pytest
from nvidia_smi_samples import H100_NODE, L40S_NODE, calls, put_first_on_path, stand_in

from aiperf.cluster.environment import JOB_GPUS_ENV, PINNED_ENV, pin_gpu, worker_environment
from aiperf.config import checks, host, load_config, visible_devices
from aiperf.errors import UserError

CORES = 16  # more cores than GPUs, so the GPUs decide


@pytest.fixture(autouse=True)
def _machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "machine_cores", lambda: CORES)
    for name in ("CUDA_VISIBLE_DEVICES", PINNED_ENV, JOB_GPUS_ENV):
        monkeypatch.delenv(name, raising=False)


def _devices_pinned(monkeypatch: pytest.MonkeyPatch, gpus: int, workers: int) -> list[str | None]:
    """The device each local worker 0..workers-1 pins as its process starts: this process's
    environment plus what the local cluster gives its workers (`worker_environment`)."""
    pinned = []
    for name in range(workers):
        with monkeypatch.context() as worker:  # undone after each: the next is a fresh process
            worker.setenv(PINNED_ENV, "")
            worker.setenv("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", ""))
            if not os.environ["CUDA_VISIBLE_DEVICES"]:
                worker.delenv("CUDA_VISIBLE_DEVICES")
            for key, value in worker_environment(1, gpus=gpus).items():
                worker.setenv(key, value)
            pinned.append(pin_gpu(str(name)))
    return pinned


def test_auto_is_one_worker_per_listed_gpu_each_pinned_to_its_own(tmp_path, monkeypatch):
    put_first_on_path(monkeypatch, stand_in(tmp_path / "bin", H100_NODE))
    config = load_config("quick")
    assert (config.workers, config.cluster.gpus) == (8, 8)
    assert _devices_pinned(monkeypatch, config.cluster.gpus, config.workers) == [
        str(i) for i in range(8)
    ]
    assert load_config("quick", workers=3).cluster.gpus == 8, "fewer workers than GPUs: fine"


def test_cuda_visible_devices_narrows_the_gpus(tmp_path, monkeypatch):
    put_first_on_path(monkeypatch, stand_in(tmp_path / "bin", H100_NODE))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    config = load_config("quick")
    assert (config.workers, config.cluster.gpus) == (2, 2)
    assert _devices_pinned(monkeypatch, 2, 2) == ["5", "7"], "worker i on the i-th visible GPU"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # hides them all: a CPU run only when asked
    with pytest.raises(UserError, match="CUDA_VISIBLE_DEVICES='' hides all 8 GPUs"):
        load_config("quick")
    assert load_config("quick", overrides={"train.device": "cpu"}).workers == CORES


def test_no_gpu_found_is_one_worker_per_core(tmp_path, monkeypatch):
    failing = stand_in(tmp_path / "failing", fail=True)  # driver not loaded
    put_first_on_path(monkeypatch, failing)
    config = load_config("quick")
    assert (config.workers, config.cluster.gpus) == (CORES, 0)
    assert calls(failing) == ["-L"]


def test_without_nvidia_smi_on_path_nothing_is_spawned(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder

    def spawn(*args, **kwargs):
        raise AssertionError(f"spawned {args}")

    monkeypatch.setattr(host.subprocess, "run", spawn)
    config = load_config("quick")
    assert (config.workers, config.cluster.gpus) == (CORES, 0)


def test_workers_above_the_gpus_found_are_refused_in_one_line(tmp_path, monkeypatch):
    put_first_on_path(monkeypatch, stand_in(tmp_path / "bin", L40S_NODE))
    with pytest.raises(UserError) as error:
        load_config("quick", workers=3)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("--workers 3 is more than the 2 GPUs nvidia-smi lists")
    assert "--workers 2 or fewer" in message and "train.device=cpu" in message


def test_a_given_cluster_gpus_a_queue_and_simulated_trials_ask_no_gpu(tmp_path, monkeypatch):
    folder = stand_in(tmp_path / "bin", H100_NODE)
    put_first_on_path(monkeypatch, folder)
    assert load_config("quick", cluster={"gpus": 0}).workers == CORES, "gpus=0: the CPUs"
    assert load_config("quick", cluster={"gpus": 2}).workers == 2
    queued = load_config("quick", cluster={"kind": "slurm"})
    assert (queued.workers, queued.cluster.gpus) == (1, 0), "a queue's GPUs are on its nodes"
    simulated = load_config("quick", overrides={"train.trainer": "simulated"})
    assert simulated.cluster.gpus == 0
    assert calls(folder) == [], "none of them ran nvidia-smi"


MIG_LISTING = """GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-aaaaaaaa-1111-2222-3333-444444444444)
  MIG 3g.40gb     Device  0: (UUID: MIG-bbbbbbbb-1111-2222-3333-444444444444)
  MIG 3g.40gb     Device  1: (UUID: MIG-cccccccc-1111-2222-3333-444444444444)
GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-dddddddd-1111-2222-3333-444444444444)"""


def test_cuda_visible_devices_is_read_as_cuda_reads_it():
    gpu0, gpu1 = (
        "GPU-aaaaaaaa-1111-2222-3333-444444444444",
        "GPU-dddddddd-1111-2222-3333-444444444444",
    )
    assert visible_devices(MIG_LISTING, None) == [gpu0, gpu1]
    assert visible_devices(MIG_LISTING, "1") == [gpu1]
    assert visible_devices(MIG_LISTING, "GPU-dddd,0") == [gpu1, gpu0], "UUIDs, or their start"
    assert visible_devices(MIG_LISTING, "MIG-bbbbbbbb-1111-2222-3333-444444444444") == [
        "MIG-bbbbbbbb-1111-2222-3333-444444444444"
    ]
    assert visible_devices(MIG_LISTING, "0,7,1") == [gpu0], "the first unknown entry ends it"
    assert visible_devices(MIG_LISTING, "-1") == [] and visible_devices(MIG_LISTING, "") == []
    assert visible_devices(MIG_LISTING, "0,0") == [gpu0], "a repeated device ends it"
    assert visible_devices("No devices were found", None) == []
