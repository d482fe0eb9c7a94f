"""benchmarks/bench_gpu.py in its CPU smoke mode: both paths train (aiperf's trial code and bare
Keras on the same model), and it reports images/s, MFU against a measured peak, and their ratio."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_gpu.py"
BACKEND = "jax" if find_spec("jax") else "tensorflow"  # jax: the backend of the GPU run


@pytest.mark.slow
def test_smoke_mode_trains_both_paths_and_compares_them(tmp_path):
    out = tmp_path / "bench.json"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("KERAS_BACKEND", None)
    done = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--backend", BACKEND, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert f"on {BACKEND}" in done.stdout and "aiperf / bare:" in done.stdout
    assert (
        "images/s" in done.stdout
        and "MFU" in done.stdout
        and "bfloat16 matmul, measured" in done.stdout
    )
    result = json.loads(out.read_text())
    settings = result["settings"]
    assert (settings["model"], settings["image_size"], settings["classes"], settings["batch"]) == (
        "resnet-mini",
        32,
        10,
        8,
    )
    timed_images = settings["steps"] * settings["batch"] * (settings["epochs"] - 1)
    for path in ("aiperf", "bare"):
        figures = result[path]
        assert figures["images"] == timed_images, (
            f"{path}: every timed step counted, the compiling epoch not"
        )
        assert figures["images_per_s"] > 0 and 0 < figures["mfu"] < 5
    assert result["aiperf"]["train_flops"] == result["bare"]["train_flops"] > 0, "the same model"
    assert result["ratio"] == pytest.approx(
        result["aiperf"]["images_per_s"] / result["bare"]["images_per_s"]
    )
    assert result["peak"]["dtype"] == "bfloat16" and result["peak"]["flops"] > 0
