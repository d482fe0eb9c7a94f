"""The GPU check: what the node resolves, aiperf's trial against bare Keras on one device, the
feed as a trial gets it, the memory fit from XLA, the same trial on all of the node's devices,
then a short `aiperf run` on the ImageNet-shaped profile; each part's figures saved as it ends.

It expects one NVIDIA H200 (141 GB) and takes about 5.5 minutes there (docs/performance.md, "One
GPU", has the device command and the sizing). The parts, most valuable first:

0. **The node**: its devices, their measured bf16 matmul peak and memory, and what `aiperf run
   --profile imagenet` resolves on them (precision, per-device batch, global batch, learning-rate
   scale). A GPU other than an H200 is named in the table.
1. **Trial efficiency, one device.** ResNet-50 (aiperf.arch's, layer for layer
   keras.applications') at 224 px on 1000 classes of synthetic uint8 data, at the documented 256
   images a device, trained twice with the same backend, precision, batch and steps: through
   aiperf's own trial code (aiperf.train.trial.run_trial, as a worker runs it) and as bare Keras
   model.fit on the same model. The first epoch of each compiles and is not timed. Images/s, MFU
   against the measured peak, and the ratio aiperf / bare: what aiperf's orchestration costs.
   - **The feed as a trial gets it**: aiperf.train.feedrate.trial_feed_rates on all the node's
     devices at the global batch (one DALI pipeline a GPU where DALI runs): images/s per device
     and for the node. On the check's synthetic arrays there is no pipeline to measure; give
     --feed-data with staged shards for one.
   - **The memory fit**: aiperf.train.fit.step_memory, XLA's memory analysis of the compiled
     training step at the per-device batch imagenet resolves here (else --batch), against the
     device. Compiled, never run: it cannot run out of memory.
   Both through benchmarks/gpu_check/adapter.py, which records {"skipped": why} where this
   checkout lacks them.
2. **The same as 1 on all of the node's devices**, data-parallel, the batch per device (what
   `--cluster-opt devices_per_trial=node` gives a trial). Left out on a node of one device.
3. **A short `aiperf run`** on the ImageNet-shaped profile on JAX with jit, in the check's
   precision, one worker per GPU, on synthetic in-memory data at 224 px and 1000 classes (the
   profile's TFRecord shards need TensorFlow to decode, which the H200 machine lacks): OPS, MFU,
   window utilisation, staging time. Its budget is what --limit leaves, 1 to 5 minutes.
   Its window is metered where the node serves NVML (its line in the table: joules, OPS/W, the
   level); the table's last line names the node's energy meters (record.node_meters).

Parts 0-2 run in a child process that exits before part 3 starts (a JAX process holds most of a
GPU's memory until it ends). Should it die (an out-of-memory abort), the part it died in is
recorded failed and a fresh child goes on with the next. With --out DIR each part's figures are
written to DIR/<part>.json as the part ends, with the summary (gpu_check.json) and the table of
everything so far (gpu_check.txt), so a check stopped by its time limit still returns them.

    python benchmarks/bench_gpu.py --out DIR       # GPU: jax, mixed_bfloat16, batch 256, jit on
    python benchmarks/bench_gpu.py --no-run        # parts 0-2 only
    python benchmarks/bench_gpu.py --smoke         # CPU check of every part, well under a minute
    bash benchmarks/gpu_check.sh --batch 256       # on the H200 machine: install, then this

--smoke trains the small resnet-mini seed (32 px, 10 classes, batch 8, a few steps, float32) on
two logical CPU devices (XLA_FLAGS, on JAX), and runs a few seconds of `aiperf run` on 16 px data
with simulated trials (the GPU trains them).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.gpu_check.record import PARTS, Record  # noqa: E402
from benchmarks.gpu_check.run import Stopped, benchmark_run, run_budget  # noqa: E402

GPU = {
    "model": "resnet50",
    "image_size": 224,
    "classes": 1000,
    "batch": 256,  # a device: docs/performance.md's, what the H200 reference figures used
    "steps": 20,
    "epochs": 3,
    "precision": "mixed_bfloat16",
    "peak_seconds": 2.0,
    "peak_size": None,
    "feed_seconds": 5.0,
    # part 3: the profile's own images and classes; samples sized so staging takes seconds and a
    # trial's 15 epochs about as long as its compilation
    "run_image_size": None,
    "run_classes": None,
    "train_samples": 4096,
    "val_samples": 512,
}
SMOKE = {
    "model": "resnet-mini",
    "image_size": 32,
    "classes": 10,
    "batch": 8,
    "steps": 4,
    "epochs": 2,
    "precision": "float32",
    "peak_seconds": 0.2,
    "peak_size": 256,
    "feed_seconds": 0.3,
    "run_image_size": 16,
    "run_classes": 10,
    "train_samples": 64,
    "val_samples": 32,
}
SMOKE_DEVICES = 2  # logical CPU devices in --smoke on JAX: part 2 runs on a CPU too
SMOKE_BUDGET_S = 8.0
CHILD_PARTS = PARTS[:-1]  # all but the run: what the child process measures
HIDDEN = ("part", "began", "out", "batch_given")  # arguments that are not the check's settings


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add = parser.add_argument
    add(
        "--backend",
        choices=["jax", "tensorflow", "torch"],
        help="default $KERAS_BACKEND, else jax",
    )
    add(
        "--precision",
        choices=["float32", "mixed_bfloat16", "mixed_float16"],
        help="dtype policy (default: mixed_bfloat16; float32 with --smoke)",
    )
    add("--batch", type=int, help="images per step and device (default 256; 8 with --smoke)")
    add("--steps", type=int, help="training steps per epoch (default 20; 4 with --smoke)")
    add("--epochs", type=int, help="epochs, the first untimed (default 3; 2 with --smoke)")
    add(
        "--jit",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="model.compile(jit_compile=...) (default on; --no-jit for eager torch)",
    )
    add("--model", help="seed network of aiperf.arch (default resnet50; resnet-mini with --smoke)")
    add("--image-size", type=int, help="pixels per side (default 224; 32 with --smoke)")
    add("--classes", type=int, help="classes (default 1000; 10 with --smoke)")
    add(
        "--node",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="part 2 and the feed on all of the node's devices (default on)",
    )
    add("--run", action=argparse.BooleanOptionalAction, default=True, help="part 3 (default on)")
    add("--budget", help="the run's budget, e.g. 5m (default: what --limit leaves; 8s --smoke)")
    add(
        "--limit",
        type=float,
        default=340.0,
        help="seconds the whole check should take, which sizes the run's budget (default 340)",
    )
    add("--feed-data", type=Path, help="staged data for the feed part (default: synthetic)")
    add("--train-samples", type=int, help="the run's training images (default 4096; 64 --smoke)")
    add("--val-samples", type=int, help="the run's validation images (default 512; 32 --smoke)")
    add("--smoke", action="store_true", help="a quick CPU check of every part")
    add("--out", type=Path, help="each part's JSON, the summary and the table, as they come")
    add("--part", choices=["all", "compare"], default="all", help=argparse.SUPPRESS)
    add("--began", type=float, help=argparse.SUPPRESS)  # the check's start, for the child
    args = parser.parse_args(argv)
    args.batch_given = args.batch is not None
    defaults = SMOKE if args.smoke else GPU
    for key, value in defaults.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    args.backend = args.backend or os.environ.get("KERAS_BACKEND") or "jax"
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: the first one compiles and is not timed")
    if min(args.batch, args.steps) < 1:
        parser.error("--batch and --steps must be positive")
    args.budget_s = SMOKE_BUDGET_S if args.smoke else None
    if args.budget is not None:
        from aiperf.units import parse_duration

        try:
            args.budget_s = parse_duration(args.budget)
        except ValueError as exc:
            parser.error(f"--budget: {exc}")
    return args


def settings(args: argparse.Namespace) -> dict[str, Any]:
    return {k: v for k, v in vars(args).items() if k not in HIDDEN}


def measure_in_children(args: argparse.Namespace, argv: list[str], record: Record) -> None:
    """Parts 0-2 in a child process, which frees the devices' memory as it ends. A child that
    dies leaves its part recorded failed, and the next child goes on after it."""
    env = dict(os.environ)
    if args.smoke and args.backend == "jax":  # part 2 on logical CPU devices
        flag = f"--xla_force_host_platform_device_count={SMOKE_DEVICES}"
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}".strip()
    command = [sys.executable, str(Path(__file__).resolve()), *argv, "--part", "compare"]
    command += ["--out", str(record.folder), "--began", str(record.began)]
    for _ in CHILD_PARTS:
        code = subprocess.run(command, env=env).returncode
        parts = record.parts()
        left = [name for name in CHILD_PARTS if name not in parts]
        if not left or "peak" not in parts.get("part0", {"peak": None}):
            return  # all measured, or part 0 failed: the later parts need its devices and peak
        print(f"bench_gpu: the child ended with exit {code} in {left[0]}", flush=True)
        record.save(left[0], {"failed": f"its process ended with exit {code}"})
        if left[0] == "part0":
            return


def measure_run(args: argparse.Namespace, record: Record, folder: Path) -> str | None:
    """Part 3, where the check's time allows it; returns why it was stopped, if it was."""
    if not args.run:
        record.save("part3", {"skipped": "--no-run"})
        return None
    elapsed = time.time() - record.began
    budget = run_budget(args, elapsed)
    if budget is None:
        why = f"{elapsed:.0f} s of the check's {args.limit:g} s gone: no room for a run"
        record.save("part3", {"skipped": why})
        return None
    run = record.save("part3", benchmark_run(args, budget, folder))
    return run["stopped"]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse(raw)
    if args.part == "compare":
        from benchmarks.gpu_check.compare import compare

        compare(args, Record(args.out, settings(args), args.began))
        return {}
    signal.signal(signal.SIGTERM, _stop)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as name:
        folder = Path(name)
        record = Record(args.out or folder / "out", settings(args), time.time())
        record.write()  # the settings, before anything is measured
        stopped = None
        try:
            measure_in_children(args, raw, record)
            stopped = measure_run(args, record, folder)
        except Stopped as exc:
            stopped = str(exc)
        finally:
            print("\n" + record.write(stopped), flush=True)
        return record.summary(stopped)


def _stop(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the run's shutdown is not cut short
    raise Stopped(f"signal {signum}, the check's time limit")


def failed(summary: dict[str, Any]) -> bool:
    """Whether the check failed: stopped by its time limit, a part that failed, or a run that did
    not complete. Its run is shorter than any ruleset's minimum, so a verified but invalid result
    (exit status 3, aiperf.cli.exit_codes.EXIT_INVALID) is what a good check gives."""
    from aiperf.cli.exit_codes import EXIT_INVALID, EXIT_VALID

    parts = summary.get("parts", {})
    run = parts.get("part3", {})
    broken = any("failed" in part for part in parts.values())
    ran_badly = "exit" in run and (
        run["exit"] not in (EXIT_VALID, EXIT_INVALID) or run.get("status") != "completed"
    )
    return bool(summary.get("stopped")) or broken or ran_badly


if __name__ == "__main__":
    sys.exit(1 if failed(main()) else 0)
