"""No silent fallback on a GPU node (issue 48, part 2): a node whose NVIDIA GPUs exist (listed by
`nvidia-smi -L`, or their device files, or the driver's libraries) but cannot be listed or queried
is refused in one line naming the call that failed and the fix, before any worker starts; a run on
its CPUs happens only when the user asks (train.device cpu), and is then recorded and open. A
stand-in nvidia-smi (tests/nvidia_smi_samples.py) plays each way the driver fails; a tmp folder
plays /dev and the library folders."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from nvidia_smi_samples import FACTS_ARGS, NO_DRIVER, calls, h200_node, put_first_on_path, stand_in

from aiperf.cluster.environment import worker_environment
from aiperf.config import host, layers, load_config
from aiperf.errors import UserError
from aiperf.results.division import classify
from aiperf.train import auto


@pytest.fixture(autouse=True)
def _all_listed_gpus_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def _unqueryable_node(folder: Path, gpus: int = 2) -> Path:
    """A stand-in whose `-L` lists `gpus` H200s and whose `--query-gpu` (the device facts') fails,
    as the issue found it: the node is there, its memory and capability are not."""
    node = {k: v for k, v in h200_node(gpus).items() if k != "facts"}
    return stand_in(folder, node)


def _gpu_files(dev: Path, gpus: int = 2) -> Path:
    """A /dev of a node with `gpus` NVIDIA GPUs (and the driver's control files, not GPUs)."""
    dev.mkdir(parents=True, exist_ok=True)
    for name in [f"nvidia{i}" for i in range(gpus)] + ["nvidiactl", "nvidia-uvm"]:
        (dev / name).touch()
    return dev


def _one_line(problem: str | None) -> str:
    assert problem is not None and "\n" not in problem
    assert "--set train.device=cpu" in problem, problem
    return problem


# --- (a) -L lists GPUs, --query-gpu fails -------------------------------------------------------


def test_listed_gpus_that_cannot_be_queried_are_refused(tmp_path, monkeypatch):
    folder = _unqueryable_node(tmp_path / "bin")
    put_first_on_path(monkeypatch, folder)
    with pytest.raises(UserError) as caught:  # as `aiperf run` loads its config
        load_config("quick")
    problem = _one_line(str(caught.value))
    assert problem.startswith("nvidia-smi lists 2 GPUs but `nvidia-smi --query-gpu=")
    assert "exit 2: Field is not a valid field to query." in problem
    assert host.node_gpus(dev=tmp_path / "dev", folders=[]).problem == problem
    assert FACTS_ARGS in calls(folder)
    # here: the module predates unqueried_gpus
    from aiperf.train.gpu_failures import refuse_unused_gpus, unqueried_gpus

    # A job queue's worker on such a node says the same from its device facts, and is refused
    # before the first trial rather than resolved to float32 and the CPUs' batch.
    facts = auto.device_facts(accelerated=True)
    assert facts.unqueried is not None and "--query-gpu=" in facts.unqueried
    peak = {"worker": "3", "device_facts": facts.to_dict()}
    assert _one_line(unqueried_gpus([peak])).startswith("worker 3: `nvidia-smi --query-gpu=")
    assert unqueried_gpus([{"worker": "0", "device_facts": {"accelerator": True}}]) is None
    with pytest.raises(UserError, match="^worker 3: `nvidia-smi --query-gpu="):
        refuse_unused_gpus(load_config("quick", cluster={"gpus": 2}, runs_here=False), [peak])


# --- (b) nvidia-smi missing, the GPUs' device files there -----------------------------------------


def test_gpu_device_files_without_nvidia_smi_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    dev = _gpu_files(tmp_path / "dev", 2)
    problem = _one_line(host.node_gpus(dev=dev, folders=[]).problem)
    assert problem.startswith(
        f"this node has NVIDIA GPUs ({dev}/nvidia0, {dev}/nvidia1) but nvidia-smi is not on PATH"
    )
    # The driver's library alone says so too; the CUDA toolkit's unversioned stub does not.
    libraries = tmp_path / "lib"
    libraries.mkdir()
    (libraries / "libcuda.so").touch()
    assert host.node_gpus(dev=tmp_path / "none", folders=[libraries]).problem is None
    (libraries / "libnvidia-ml.so.1").touch()
    problem = _one_line(host.node_gpus(dev=tmp_path / "none", folders=[libraries]).problem)
    assert f"{libraries}/libnvidia-ml.so.1" in problem


# --- (c) nvidia-smi there, -L fails, the device files there ---------------------------------------


def test_a_failing_listing_beside_gpu_device_files_is_refused(tmp_path, monkeypatch):
    put_first_on_path(monkeypatch, stand_in(tmp_path / "bin", fail=True))  # no driver loaded
    dev = _gpu_files(tmp_path / "dev", 8)
    problem = _one_line(host.node_gpus(dev=dev, folders=[]).problem)
    assert f"{dev}/nvidia0, {dev}/nvidia1, {dev}/nvidia2 and 5 more" in problem
    assert f"`nvidia-smi -L` fails (exit 1: {NO_DRIVER})" in problem
    # The same failing nvidia-smi on a machine without GPUs is a CPU machine, as before.
    assert host.node_gpus(dev=tmp_path / "empty-dev", folders=[]) == host.NodeGpus(0)
    # An nvidia-smi that answers but lists none beside the device files (a job without its GPUs).
    put_first_on_path(monkeypatch, stand_in(tmp_path / "none", {"list": ""}))
    problem = _one_line(host.node_gpus(dev=dev, folders=[]).problem)
    assert problem.startswith(f"`nvidia-smi -L` lists no GPU although this node has {dev}/nvidia0")
    assert host.node_gpus(dev=tmp_path / "empty-dev", folders=[]) == host.NodeGpus(0)


def test_gpus_listed_but_all_hidden_by_cuda_visible_devices_are_refused(tmp_path, monkeypatch):
    put_first_on_path(monkeypatch, stand_in(tmp_path / "bin", h200_node(2)))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    problem = _one_line(host.node_gpus(dev=tmp_path / "dev", folders=[]).problem)
    assert problem.startswith("CUDA_VISIBLE_DEVICES='' hides all 2 GPUs nvidia-smi lists")


# --- the CPUs, when the user asks -----------------------------------------------------------------


def test_a_cpu_run_the_user_asks_for_runs_recorded_and_open(tmp_path, monkeypatch):
    folder = _unqueryable_node(tmp_path / "bin")
    put_first_on_path(monkeypatch, folder)
    config = load_config("quick", overrides={"train.device": "cpu"})
    assert (config.train.device, config.cluster.gpus, config.train.backend) == (
        "cpu",
        0,
        "tensorflow",
    )
    assert calls(folder) == [], "a run asked onto the CPUs looks for no GPU"
    division = classify(config)
    assert not division.closed
    assert "train.device: 'auto' -> 'cpu'" in division.deviations
    # The default is out of the workload hash, so every earlier run keeps its hash.
    assert classify(load_config("quick", cluster={"gpus": 0})).config_hash != division.config_hash
    for cluster in ({"gpus": 2}, {"kind": "slurm", "gpus": 4}):
        with pytest.raises(
            UserError, match="train.device cpu trains on the CPUs, but cluster.gpus"
        ):
            load_config("quick", cluster=cluster, overrides={"train.device": "cpu"})
    # Its workers see none of the node's GPUs, whatever framework they import.
    hidden = worker_environment(2, on_cpus=True)
    assert (hidden["CUDA_VISIBLE_DEVICES"], hidden["JAX_PLATFORMS"]) == ("", "cpu")
    assert "CUDA_VISIBLE_DEVICES" not in worker_environment(2, gpus=2)


def test_cluster_gpus_0_on_a_node_with_gpu_device_files_names_the_setting(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    dev = _gpu_files(tmp_path / "dev", 1)
    monkeypatch.setattr(layers, "gpu_evidence", lambda: host.gpu_evidence(dev, []))
    with pytest.raises(UserError) as caught:
        load_config("quick", cluster={"gpus": 0})
    assert _one_line(str(caught.value)).startswith(
        f"cluster.gpus 0 on a node with NVIDIA GPUs ({dev}"
    )


# --- through the CLI ------------------------------------------------------------------------------


def test_aiperf_run_on_an_unqueryable_gpu_node_exits_2_before_any_worker(tmp_path):
    """The issue's case as a user meets it: the stand-in's seam, two host devices, `-L` listing two
    H200s and `--query-gpu` failing. `aiperf run` ends with exit 2 and one error line naming
    nvidia-smi, before a run is recorded or a worker starts (so no trial trained)."""
    env = {
        **os.environ,
        "PATH": f"{_unqueryable_node(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "AIPERF_ACCELERATOR_PLATFORMS": "cpu",
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    db = tmp_path / "refused.db"
    done = subprocess.run(
        [sys.executable, "-m", "aiperf.cli.main", "run", "--profile", "quick", "--budget", "30s"]
        + ["--db", f"sqlite:///{db}", "--out", str(tmp_path / "out"), "--allow-concurrent"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert "nvidia-smi lists 2 GPUs but `nvidia-smi --query-gpu=" in line, line
    assert "--set train.device=cpu" in line, line
    assert not db.exists() and not (tmp_path / "out").exists(), (
        "refused before anything was recorded"
    )


# --- a CPU node sharing its GPU nodes' image: the driver's libraries, no GPU --------------------


def _listing_none(folder: Path) -> Path:
    """An nvidia-smi as a loaded driver with no GPU answers `-L`: "No devices were found", exit 6."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/bash\necho '{host.NO_DEVICES}'\nexit 6\n")
    script.chmod(0o755)
    return folder


def test_driver_libraries_where_nvidia_smi_lists_no_gpu_are_a_cpu_node(tmp_path, monkeypatch):
    libraries = tmp_path / "lib"
    libraries.mkdir()
    (libraries / "libcuda.so.1").touch()
    (libraries / "libnvidia-ml.so.1").touch()
    no_dev = tmp_path / "no-dev"
    for answer in (_listing_none(tmp_path / "none"), stand_in(tmp_path / "empty", {"list": ""})):
        put_first_on_path(monkeypatch, answer)
        assert host.node_gpus(dev=no_dev, folders=[libraries]) == host.NodeGpus(0)
        assert host.gpu_evidence(no_dev, [libraries]) == []
        monkeypatch.setattr(layers, "gpu_evidence", lambda: host.gpu_evidence(no_dev, [libraries]))
        assert load_config("quick", cluster={"gpus": 0}).cluster.gpus == 0
        # Beside a GPU's device file the same answer is refused, as before.
        dev = _gpu_files(tmp_path / "dev", 1)
        assert host.node_gpus(dev=dev, folders=[libraries]).problem is not None
        assert host.gpu_evidence(dev, [libraries]) == [f"{dev}/nvidia0"]
    # A failing or missing nvidia-smi beside the libraries still cannot say there is no GPU.
    put_first_on_path(monkeypatch, stand_in(tmp_path / "bin", fail=True))
    assert host.gpu_evidence(no_dev, [libraries]) == [f"{libraries}/libcuda.so.1"] + [
        f"{libraries}/libnvidia-ml.so.1"
    ]
    assert _one_line(host.node_gpus(dev=no_dev, folders=[libraries]).problem)


def test_every_refusal_of_a_gpu_node_offers_the_cpus_in_the_same_words():
    """One wording (host.ON_THE_CPUS) for the way out, wherever a found GPU node is refused."""
    from aiperf.config.checks import jax_missing, worker_count

    assert jax_missing(8, True).endswith(f", {host.ON_THE_CPUS}")
    assert host.ON_THE_CPUS not in jax_missing(8, False)  # GPUs given for a job queue's nodes
    with pytest.raises(UserError) as caught:
        worker_count(3, local=True, gpus=2, found=True)
    assert str(caught.value).endswith(f", {host.ON_THE_CPUS}")


class _ClusterWhosePeakProbeFails:
    """A Dask client's `run` as it fails when the workers cannot run the peak probe (a worker's
    framework failing to start on its GPU); a real cluster would cost a start here."""

    def run(self, *_args: object, **_kwargs: object) -> dict:
        raise RuntimeError("CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected\nmore")


def test_a_gpu_run_whose_peak_probe_fails_is_refused(tmp_path, monkeypatch):
    """Without the probe nothing says the workers compute on their GPUs: a GPU run is refused in
    one line, rather than resolved to float32 and the CPUs' batch; a CPU run goes on without MFU."""
    from aiperf.lifecycle.prepare import probe_peaks

    gpu_run = load_config("quick", cluster={"gpus": 2}, runs_here=False)
    with pytest.raises(UserError) as caught:
        probe_peaks(gpu_run, 1, _ClusterWhosePeakProbeFails())
    problem = _one_line(str(caught.value))
    assert problem.startswith(
        "the workers' peak probe failed (RuntimeError: CUDA_ERROR_NO_DEVICE: no CUDA-capable "
        "device is detected), so nothing says their 2 GPUs can be used"
    )
    cpu_run = load_config("quick", cluster={"gpus": 0}, runs_here=False)
    assert probe_peaks(cpu_run, 1, _ClusterWhosePeakProbeFails()) is None
