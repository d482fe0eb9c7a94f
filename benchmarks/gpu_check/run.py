"""Part 3 of the GPU check: a short `aiperf run` on the ImageNet-shaped profile, as a user runs it
(its own process, its own Prefect API and workers), then its figures read back from its records.

Its data is the synthetic in-memory kind at the profile's 224 px and 1000 classes, not the
profile's TFRecord shards: decoding those needs TensorFlow, which the H200 machine lacks.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ("imagenet-shaped", "imagenet")  # the first that exists
RUN_DATA = "synthetic in memory"
MAX_BUDGET_S, MIN_BUDGET_S = 300.0, 60.0
# Seconds an `aiperf run` takes beyond its budget on a GPU node: the Prefect API, the workers'
# start and peak, staging, then score, verify and report (75 s, estimated before issue 48), and
# the seed's fit check before the window (aiperf.lifecycle.fitcheck): one compile of the run's
# seed (ResNet-50) at its largest resolved batch in the workers' own processes, about 40 s as the
# check's own fit part estimates it (its compile is in another process: nothing is cached). A seed
# that does not fit at once pays one more compile per halving. An estimate, not a measurement.
RUN_OVERHEAD_S = 115.0
# Seconds past --limit at which benchmarks/gpu_check.sh stops the check (its `timeout`).
LATE_S = 50.0


class Stopped(Exception):
    """SIGTERM (the check's timeout): the table is still written, with what was measured."""


def run_profile() -> str:
    from aiperf.config import available_profiles

    names = available_profiles()
    return next(name for name in PROFILES if name in names)


def run_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The run's --set overrides: synthetic in-memory data at the profile's shape, and the check's
    backend, jit and precision; with --smoke, a small network and a few small batches too."""
    settings: dict[str, Any] = {
        "data.kind": "synthetic",
        "data.source": None,
        "data.train_samples": args.train_samples,
        "data.val_samples": args.val_samples,
        "train.backend": args.backend,
        "train.jit_compile": args.jit,
        "train.precision": args.precision,
    }
    if args.run_image_size:
        settings["data.image_size"] = args.run_image_size
    if args.run_classes:
        settings["data.classes"] = args.run_classes
    if args.smoke:
        settings.update(
            {
                # The CPU smoke check runs part 3's plumbing (the command, its settings, the figures
                # read back) with simulated trials; training on JAX with jit on a node's devices is
                # the stand-in GPU node's test, and on the GPU this part trains for real.
                "train.trainer": "simulated",
                "search.seed_architecture": args.model,
                "search.space.batch_size": [args.batch],
                "train.epochs": [1],
                "train.warmup_epochs": 0,  # the profile's 5-epoch warm-up needs longer rounds
            }
        )
    return settings


def run_budget(args: argparse.Namespace, elapsed: float) -> float | None:
    """--budget, else what the check's --limit leaves after `elapsed` s and the run's overhead,
    in tens of seconds, between MIN_BUDGET_S and MAX_BUDGET_S; None where even the shortest run
    would end after the check is stopped (LATE_S past --limit): a run cut off says nothing."""
    if args.budget_s is not None:
        return float(args.budget_s)
    left = args.limit - elapsed - RUN_OVERHEAD_S
    if left + LATE_S < MIN_BUDGET_S:
        return None
    return max(MIN_BUDGET_S, min(MAX_BUDGET_S, left // 10 * 10))


def benchmark_run(args: argparse.Namespace, budget_s: float, folder: Path) -> dict[str, Any]:
    """`aiperf run` in its own process; on Stopped it is interrupted, its epochs recorded."""
    profile = run_profile()
    db = f"sqlite:///{folder / 'aiperf.db'}"
    settings = [f"--set={key}={json.dumps(value)}" for key, value in run_settings(args).items()]
    command = [
        sys.executable,
        "-c",
        "from aiperf.cli.main import main; main()",
        "run",
        f"--profile={profile}",
        f"--budget={budget_s:g}s",
        f"--db={db}",
        f"--out={folder / 'out'}",
        "--seed=0",
        *settings,
    ]
    if args.smoke:
        command += ["--workers=1", "--allow-concurrent"]
    env = {
        **os.environ,
        "KERAS_BACKEND": args.backend,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        "COLUMNS": os.environ.get("COLUMNS", "100"),
        # The run's own process may touch the GPU too (the oracle, verify's recount): without
        # this, JAX there would take most of the memory the workers train in.
        "XLA_PYTHON_CLIENT_PREALLOCATE": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),
    }
    print(f"bench_gpu: aiperf {' '.join(command[3:])}", flush=True)
    began = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=folder)
    stopped = None
    try:
        code = process.wait()
    except Stopped as exc:  # the run ends interrupted, its epochs recorded: its figures count
        stopped = str(exc)
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=12)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
    result: dict[str, Any] = {
        "profile": profile,
        "budget_s": budget_s,
        "exit": code,
        "seconds": time.perf_counter() - began,
        "stopped": stopped,
        "data": {
            "kind": RUN_DATA,
            "image_size": args.run_image_size or 224,
            "classes": args.run_classes or 1000,
            "train_samples": args.train_samples,
            "val_samples": args.val_samples,
        },
    }
    return {**result, **run_figures(db)}


def run_figures(db: str) -> dict[str, Any]:
    """The run's figures from its records (the newest run of the check's own database)."""
    from aiperf.store import Store

    try:
        with Store.open_existing(db) as store:
            runs = store.list_runs(limit=1)
            if not runs:
                return {"status": "not recorded"}
            record = store.get_run(runs[0].id)
    except Exception as exc:  # noqa: BLE001 - the table still comes, saying why there are none
        return {"status": f"unreadable: {exc}"}
    from aiperf.results.energy import energy

    score = record.score
    return {
        "energy": energy(record).line(),  # the window metered through NVML where it serves
        "run_id": record.id,
        "status": str(record.status),
        "message": record.message,
        "workers": record.workers,
        "staging_s": getattr(record, "staging_s", None),
        "ops": score.ops if score else None,
        "mfu": score.mfu if score else None,
        "utilisation": score.utilisation if score else None,
        "trials_completed": score.trials_completed if score else None,
        "best_val_accuracy": score.best_val_accuracy if score else None,
        "valid": score.valid if score else None,
        "division": record.division,
    }
