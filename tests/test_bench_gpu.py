"""The GPU check (benchmarks/bench_gpu.py, benchmarks/gpu_check.sh) on a CPU: its smoke mode runs
every part (aiperf's trial against bare Keras on one device and on all of the node's, then a short
`aiperf run`) and prints the table last; the device script refuses to start without its wheels."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import fields
from importlib.util import find_spec
from pathlib import Path

import pytest

from aiperf.train.messages import TrialRequest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
BENCH = BENCHMARKS / "bench_gpu.py"
BACKEND = "jax" if find_spec("jax") else "tensorflow"  # jax: the backend of the GPU run


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_smoke_mode_runs_every_part_and_prints_the_table_last(prefect_api, tmp_path):
    from prefect.settings import PREFECT_API_URL

    out, table = tmp_path / "bench.json", tmp_path / "table.txt"
    # The run uses the session's Prefect API rather than starting one of its own (seconds saved).
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PREFECT_API_URL": PREFECT_API_URL.value()}
    env.pop("KERAS_BACKEND", None)
    done = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--backend", BACKEND, "--json", str(out)]
        + ["--table", str(table)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"on {BACKEND}" in done.stdout and "bfloat16 matmul, measured" in done.stdout
    assert done.stdout.rstrip().endswith(table.read_text().rstrip()), "the table comes last"
    result = json.loads(out.read_text())
    settings = result["settings"]
    assert (settings["model"], settings["image_size"], settings["classes"], settings["batch"]) == (
        "resnet-mini",
        32,
        10,
        8,
    )
    compared = result["compare"]
    assert compared["peak"]["dtype"] == "bfloat16" and compared["peak"]["flops"] > 0
    # What the ranked profile resolves here, printed before the comparison: a CPU has no GPU batch
    assert "no GPU batch (not a GPU node)" in compared["imagenet"]["said"], compared["imagenet"]
    assert "imagenet on this node:" in done.stdout
    parts = {part["devices"]: part for part in compared["parts"]}
    expected = [1, 2] if BACKEND == "jax" else [1]  # two logical CPU devices on JAX
    assert sorted(parts) == expected
    spread = "devices" in {f.name for f in fields(TrialRequest)}
    for devices, part in parts.items():
        measured = ("aiperf", "bare") if devices == 1 or spread else ("bare",)
        timed = settings["steps"] * settings["batch"] * devices * (settings["epochs"] - 1)
        for path in measured:
            figures = part[path]
            assert figures["images"] == timed, f"{path} on {devices}: the timed steps, all of them"
            assert figures["images_per_s"] > 0 and 0 < figures["mfu"] < 5
            if spread:  # trials report where they trained since TrialRequest has devices
                assert len(figures["placement"]) == devices
        if len(measured) == 2:
            assert part["aiperf"]["train_flops"] == part["bare"]["train_flops"] > 0
            assert part["ratio"] == pytest.approx(
                part["aiperf"]["images_per_s"] / part["bare"]["images_per_s"]
            )
    run = result["run"]
    # Shorter than the profile's minimum: verified and invalid (aiperf.cli.exit_codes.EXIT_INVALID)
    assert run["profile"] in ("imagenet-shaped", "imagenet") and run["exit"] == 3
    assert run["status"] == "completed", run
    assert run["data"]["kind"].startswith("synthetic in memory")
    assert run["ops"] is not None and run["utilisation"] is not None
    assert "aiperf run: --profile" in done.stdout and "synthetic in memory" in done.stdout


def test_table_names_a_one_device_node_and_what_was_not_measured():
    bench = _bench_module()
    peak = {"device": "GPU NVIDIA H200", "flops": 8e14}
    fast = {"images_per_s": 5000.0, "mfu": 0.4}
    summary = {
        "settings": {
            "backend": "jax",
            "precision": "mixed_bfloat16",
            "jit": True,
            "model": "resnet50",
            "image_size": 224,
            "classes": 1000,
            "batch": 256,
        },
        "compare": {
            "peak": peak,
            "keras": "3.15.1",
            "device_count": 1,
            "imagenet": {
                "said": "mixed_bfloat16, 876/949/1022 images a device x 8 device(s) (global batch "
                "up to 8,176), learning rate x 31.9 after a 5-epoch warm-up (aiperf-rules-1.4)"
            },
            "parts": [
                {"devices": 1, "aiperf": {"skipped": "no devices"}, "bare": fast, "ratio": None}
            ],
        },
        "run": None,
        "stopped": "signal 15, the check's time limit",
        "total_s": 361.0,
    }
    text = bench.table(summary)
    lines = text.splitlines()
    assert lines[0].startswith("GPU check: GPU NVIDIA H200 x1")
    assert "5,000.0" in text and "40.0%" in text and "aiperf on 1 devices: no devices" in text
    assert "node: one device" in text and lines[-2].startswith("stopped: signal 15")
    assert "imagenet here: mixed_bfloat16, 876/949/1022 images a device" in text
    assert all(len(line) <= 100 for line in lines)


def test_run_budget_fits_the_limit_between_one_and_five_minutes():
    bench = _bench_module()
    args = bench.parse(["--limit", "360"])
    assert bench.run_budget(args, elapsed=100) == 180  # 360 - 100 - the run's 75 s, in tens
    assert bench.run_budget(args, elapsed=0) == 280
    assert bench.run_budget(args, elapsed=300) == 60
    assert bench.run_budget(bench.parse(["--budget", "5m"]), elapsed=300) == 300


def test_gpu_check_without_its_wheels_says_how_to_bring_them(tmp_path):
    done = subprocess.run(
        ["bash", str(BENCHMARKS / "gpu_check.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GPU_BUNDLE": str(tmp_path / "none")},
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "gpu_bundle.sh" in done.stderr, done.stderr
