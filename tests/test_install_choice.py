"""`make run` picks its build by asking nvidia-smi (infra/build-kind.sh): the CUDA build on the JAX
backend with jit where a GPU answers, the CPU build as before elsewhere. A stand-in nvidia-smi
plays the GPU node, first on PATH (the only thing on it for the script), so the machine's own
nvidia-smi, if any, is never asked."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from nvidia_smi_samples import L40S_NODE, calls, stand_in

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "infra" / "build-kind.sh"
BASH = shutil.which("bash") or "/bin/bash"


def _bare_path(*folders: Path) -> str:
    """A PATH of `folders` only: build-kind.sh needs nothing but bash and nvidia-smi."""
    return os.pathsep.join(map(str, folders)) or "/nonexistent"


def _build_kind(path: str) -> str:
    done = subprocess.run(
        [BASH, str(SCRIPT)],
        env={"PATH": path},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stderr == ""
    return done.stdout.strip()


def test_a_gpu_that_answers_means_the_cuda_build(tmp_path):
    gpu = stand_in(tmp_path / "gpu", L40S_NODE)
    assert _build_kind(_bare_path(gpu)) == "cuda"
    assert calls(gpu) == ["-L"]


def test_no_nvidia_smi_or_no_driver_means_the_cpu_build(tmp_path):
    assert _build_kind(_bare_path()) == "cpu"
    failing = stand_in(tmp_path / "failing", fail=True)
    assert _build_kind(_bare_path(failing)) == "cpu"
    empty = stand_in(tmp_path / "empty", {**L40S_NODE, "list": "No devices were found"})
    assert _build_kind(_bare_path(empty)) == "cpu"


def _make_run(nvidia_smi: Path, args: str = "", **variables: str) -> str:
    """The commands `make run` would run (make -n) with `nvidia-smi` first on PATH."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("BUILD_KIND", "MAKEFLAGS", "ARGS")}
    env["PATH"] = f"{nvidia_smi}{os.pathsep}{env.get('PATH', os.defpath)}"
    return subprocess.run(
        [make, "-n", "-B", "-C", str(ROOT), "run", f"ARGS={args}"]
        + [f"{k}={v}" for k, v in variables.items()],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout


def test_make_run_installs_and_runs_what_the_machine_has(tmp_path):
    gpu = stand_in(tmp_path / "gpu", L40S_NODE)
    commands = _make_run(gpu, "--budget 1m")
    assert "infra/install.sh .venv '.[cuda]'" in commands
    assert (
        "aiperf run --set train.backend=jax --set train.jit_compile=true --budget 1m" in commands
    )
    chosen = _make_run(gpu, "--set train.backend=tensorflow")
    assert "aiperf run  --set train.backend=tensorflow" in chosen, "ARGS' backend stands alone"
    no_jit = _make_run(gpu, "--set train.jit_compile=false")
    assert "aiperf run --set train.backend=jax --set train.jit_compile=false" in no_jit
    assert "aiperf run  --resume 3" in _make_run(gpu, "--resume 3"), "a run keeps its own"
    cpu = _make_run(gpu, "--budget 1m", BUILD_KIND="cpu")
    assert "[cuda]" not in cpu and "aiperf run  --budget 1m" in cpu
    no_driver = _make_run(stand_in(tmp_path / "failing", fail=True))
    assert "[cuda]" not in no_driver and "train.backend" not in no_driver


def test_the_cuda_extra_brings_a_cuda_build_of_jax():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert any(req.startswith("jax[cuda12]") for req in extras["cuda"])
    assert not any(req.startswith("tensorflow") for req in extras["cuda"]), (
        "tensorflow[and-cuda] cannot share an environment with the base install's tensorflow-cpu"
    )
