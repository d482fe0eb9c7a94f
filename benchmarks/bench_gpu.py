"""The GPU check: aiperf's trial against bare Keras on one device and on all of the node's, then a
short `aiperf run` on the ImageNet-shaped profile, and a table of the figures last.

0. **What the ranked profile resolves here**: `aiperf run --profile imagenet`'s precision and
   per-device batch from this node's devices, its global batch and learning-rate scale
   (aiperf-rules-1.4), printed first; parts 1 and 2 train at that batch unless --batch is given.
1. **Trial efficiency, one device.** ResNet-50 (aiperf.arch's, layer for layer
   keras.applications') at 224 px on 1000 classes of synthetic data, trained twice with the same
   backend, precision, per-device batch and steps:

   - aiperf: through aiperf's own trial code (aiperf.train.trial.run_trial with a TrialRequest, as a
     worker runs it: its data feed, deadline watch, phase clock, per-epoch fit and evaluate,
     reports);
   - bare Keras: model.fit on the same model, built by aiperf.arch, with one validation batch per
     epoch as the trial evaluates one.

   The first epoch of each compiles (and is not timed); the later epochs are. Images/s for each,
   their model FLOPs utilisation (tensor-convention FLOPs per image x images/s, over the devices'
   measured bf16 matmul peak, aiperf.train.peak) and the ratio aiperf / bare: what aiperf's
   orchestration costs inside a trial. Images are uint8 (0 or 1), so a GPU's batches stay small on
   the host; each batch is copied to the device as aiperf's feed does.
2. **The same on all of the node's devices** (what `--cluster-opt devices_per_trial=node` gives a
   trial): data-parallel, the batch per device, so a step takes batch x devices images (aiperf:
   TrialRequest.devices; bare: keras.distribution.DataParallel on JAX). Left out on a node of one
   device, where it is part 1 again.
3. **A short `aiperf run`** on the ImageNet-shaped profile (imagenet-shaped, else imagenet) on the
   JAX backend with jit, in the comparison's precision, one worker per GPU: its OPS, MFU, window
   utilisation and staging time from its records. Its data is the synthetic in-memory kind at the
   profile's 224 px and 1000 classes, not the profile's TFRecord shards: decoding those needs
   TensorFlow, which the H200 machine does not have (the table says so). Its budget fits the
   check's time limit (--limit, default 6 minutes) after parts 1 and 2, at most 5 minutes, at
   least 1; --budget sets it.

Parts 1 and 2 run in a child process that exits before part 3 starts: a JAX process holds most of
a GPU's memory until it ends, which would leave the run's workers without it.

    python benchmarks/bench_gpu.py                 # GPU: jax, mixed_bfloat16, batch 256, jit on
    python benchmarks/bench_gpu.py --no-run        # parts 1 and 2 only
    python benchmarks/bench_gpu.py --smoke         # CPU check of every part, well under a minute
    benchmarks/gpu_check.sh                        # on the H200 machine: install, then this

--smoke trains the small resnet-mini seed (32 px, 10 classes, batch 8, a few steps, float32) on
two logical CPU devices (XLA_FLAGS, on JAX), and runs a few seconds of `aiperf run` on 16 px data:
tracing ResNet-50's 177 layers alone would cost a small CPU more than the whole smoke check. Give
--model resnet50 with --smoke to trace the real network anyway. Figures, the device command and
the sizing are in docs/performance.md ("One GPU").
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

GPU = {
    "model": "resnet50",
    "image_size": 224,
    "classes": 1000,
    "batch": 256,
    "steps": 20,
    "epochs": 3,
    "precision": "mixed_bfloat16",
    "peak_seconds": 2.0,
    "peak_size": None,
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
    "run_image_size": 16,
    "run_classes": 10,
    "train_samples": 64,
    "val_samples": 32,
}
SMOKE_DEVICES = 2  # logical CPU devices in --smoke on JAX: part 2 runs on a CPU too
SMOKE_BUDGET_S = 8.0
MAX_BUDGET_S, MIN_BUDGET_S = 300.0, 60.0
# Seconds an `aiperf run` takes beyond its budget on a GPU node: the Prefect API, the workers'
# start and peak, staging, then score, verify and report. An estimate, not a measurement.
RUN_OVERHEAD_S = 75.0
PROFILES = ("imagenet-shaped", "imagenet")  # the first that exists
RUN_DATA = "synthetic in memory"
RUN_DATA_WHY = "not the profile's TFRecord shards: decoding them needs TensorFlow"


class Stopped(Exception):
    """SIGTERM (the check's timeout): the table is still printed, with what was measured."""


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--backend",
        choices=["jax", "tensorflow", "torch"],
        help="Keras backend (default: $KERAS_BACKEND, else jax)",
    )
    parser.add_argument(
        "--precision",
        choices=["float32", "mixed_bfloat16", "mixed_float16"],
        help="dtype policy (default: mixed_bfloat16; float32 with --smoke)",
    )
    parser.add_argument(
        "--batch",
        type=int,
        help="images per step and device (default: the largest imagenet resolves on this GPU "
        "node, else 256; 8 with --smoke)",
    )
    parser.add_argument(
        "--steps", type=int, help="training steps per epoch (default 20; 4 with --smoke)"
    )
    parser.add_argument(
        "--epochs", type=int, help="epochs, the first untimed (default 3; 2 with --smoke)"
    )
    parser.add_argument(
        "--jit",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="model.compile(jit_compile=...): XLA on TensorFlow, jax.jit on JAX, torch.compile "
        "on torch (default on; --no-jit for eager torch)",
    )
    parser.add_argument(
        "--model", help="seed network of aiperf.arch (default resnet50; resnet-mini with --smoke)"
    )
    parser.add_argument(
        "--image-size", type=int, help="pixels per side (default 224; 32 with --smoke)"
    )
    parser.add_argument("--classes", type=int, help="classes (default 1000; 10 with --smoke)")
    parser.add_argument(
        "--node",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="part 2, all of the node's devices (default on where it has more than one)",
    )
    parser.add_argument(
        "--run",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="part 3, the `aiperf run` (default on)",
    )
    parser.add_argument(
        "--budget",
        help="the run's budget, e.g. 5m (default: what --limit leaves, 1 to 5 minutes; 8s with "
        "--smoke)",
    )
    parser.add_argument(
        "--limit",
        type=float,
        default=360.0,
        help="seconds the whole check should take, which sizes the run's budget (default 360)",
    )
    parser.add_argument(
        "--train-samples", type=int, help="the run's training images (default 4096; 64 --smoke)"
    )
    parser.add_argument(
        "--val-samples", type=int, help="the run's validation images (default 512; 32 --smoke)"
    )
    parser.add_argument("--smoke", action="store_true", help="a quick CPU check of every part")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    parser.add_argument("--table", type=Path, help="also write the final table to this file")
    parser.add_argument(
        "--part", choices=["all", "compare"], default="all", help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    args.batch_given = args.batch is not None  # else the batch imagenet resolves on this node
    defaults = SMOKE if args.smoke else GPU
    for key in ("model", "image_size", "classes", "batch", "steps", "epochs", "precision"):
        if getattr(args, key) is None:
            setattr(args, key, defaults[key])
    for key in ("train_samples", "val_samples"):
        if getattr(args, key) is None:
            setattr(args, key, defaults[key])
    args.run_image_size, args.run_classes = defaults["run_image_size"], defaults["run_classes"]
    args.peak_seconds, args.peak_size = defaults["peak_seconds"], defaults["peak_size"]
    args.backend = args.backend or os.environ.get("KERAS_BACKEND") or "jax"
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: the first one compiles and is not timed")
    if min(args.batch, args.steps) < 1:
        parser.error("--batch and --steps must be positive")
    if args.budget is not None:
        from aiperf.units import parse_duration

        try:
            args.budget_s = parse_duration(args.budget)
        except ValueError as exc:
            parser.error(f"--budget: {exc}")
    else:
        args.budget_s = SMOKE_BUDGET_S if args.smoke else None
    return args


# --- parts 1 and 2, in the child process ---------------------------------------------------------


def synthetic(path: Path, args: argparse.Namespace, devices: int) -> None:
    """A staged synthetic dataset as aiperf's feed reads it (an .npz of x/y train and val arrays):
    one epoch of `steps` global batches, and one global validation batch."""
    import numpy as np

    rng = np.random.default_rng(0)
    shape = (args.image_size, args.image_size, 3)
    train, val = args.steps * args.batch * devices, args.batch * devices
    np.savez(
        path,
        x_train=rng.integers(0, 2, (train, *shape), dtype=np.uint8),
        y_train=rng.integers(0, args.classes, train).astype(np.int32),
        x_val=rng.integers(0, 2, (val, *shape), dtype=np.uint8),
        y_val=rng.integers(0, args.classes, val).astype(np.int32),
    )


def timed(epochs: list[tuple[float, int, int]]) -> dict[str, float]:
    """Images/s over the timed epochs: (seconds, images trained, images evaluated) each, the first
    epoch (compilation) left out."""
    later = epochs[1:]
    seconds = sum(s for s, _, _ in later)
    trained = sum(t for _, t, _ in later)
    evaluated = sum(e for _, _, e in later)
    return {
        "seconds": seconds,
        "images": trained,
        "evaluated": evaluated,
        "images_per_s": trained / seconds,
    }


class Unsupported(Exception):
    """A path this backend or this checkout cannot run: reported in the table, not an error."""


def run_aiperf(network: Any, data: Path, args: argparse.Namespace, devices: int) -> dict[str, Any]:
    """The trial as a worker runs it (aiperf.train.trial.run_trial), on `devices` devices."""
    from aiperf.train.messages import EpochReport, TrialBuilt, TrialRequest
    from aiperf.train.trial import run_trial

    spread = {"devices": devices} if devices > 1 else {}
    if spread and "devices" not in {f.name for f in fields(TrialRequest)}:
        raise Unsupported("this checkout's TrialRequest has no devices")
    request = TrialRequest(
        run_id=0,
        trial_key="bench-gpu",
        architecture=network.to_dict(),
        learning_rate=0.01,
        batch_size=args.batch,
        epochs=args.epochs,
        deadline=time.time() + 3600,
        data_path=str(data),
        seed=0,
        precision=args.precision,
        jit_compile=args.jit,
        **spread,
    )
    reports: list[Any] = []
    result = run_trial(request, reports.append)
    if len(result.epochs) < args.epochs:
        raise SystemExit(
            f"the aiperf trial on {devices} device(s) ended {result.status} after "
            f"{len(result.epochs)} epochs: {result.message}"
        )
    built = next(r for r in reports if isinstance(r, TrialBuilt))
    epochs = [
        (e.ended_at - e.started_at, e.samples_trained, e.samples_evaluated)
        for e in reports
        if isinstance(e, EpochReport)
    ]
    return {
        **timed(epochs),
        "train_flops": built.tensor_train_ops,
        "eval_flops": built.tensor_eval_ops,
        "placement": list(getattr(built, "placement", ())),
        "phases": getattr(result, "phases", None),
    }


@contextlib.contextmanager
def replicas(backend: str, devices: list[str]) -> Iterator[None]:
    """Keras' own data parallelism over `devices` (none for one device): the bare reference."""
    if len(devices) == 1:
        yield
        return
    if backend != "jax":
        raise Unsupported(f"bare Keras trains data-parallel here on jax only, not {backend}")
    import keras

    with keras.distribution.DataParallel(devices=devices).scope():
        yield


def run_bare(
    network: Any, data: Path, args: argparse.Namespace, devices: list[str]
) -> dict[str, Any]:
    """model.fit on the same model, the same data, one validation batch per epoch."""
    import keras
    import numpy as np

    from aiperf.arch import build_model
    from aiperf.ops import count_all

    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy(args.precision)
    with np.load(data) as arrays:
        x, y, x_val, y_val = (arrays[k] for k in ("x_train", "y_train", "x_val", "y_val"))
    epochs: list[tuple[float, int, int]] = []

    class EpochClock(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):  # after the epoch's validation
            epochs.append((time.perf_counter() - self.started, len(y), len(y_val)))

    with replicas(args.backend, devices):
        model = build_model(network)
        counts = count_all(model)["tensor"]
        model.compile(
            optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
            jit_compile=args.jit,
        )
        model.fit(
            x,
            y,
            batch_size=args.batch * len(devices),
            epochs=args.epochs,
            validation_data=(x_val, y_val),
            verbose=0,
            callbacks=[EpochClock()],
        )
    return {
        **timed(epochs),
        "train_flops": counts.train_per_sample,
        "eval_flops": counts.eval_per_sample,
        "placement": list(devices),
    }


def free() -> None:
    import keras

    keras.backend.clear_session()
    gc.collect()


def compare(args: argparse.Namespace) -> dict[str, Any]:
    """Parts 1 and 2 in this process: the peak, then aiperf and bare Keras per device count."""
    os.environ["KERAS_BACKEND"] = args.backend  # before anything imports Keras
    import keras

    from aiperf.arch import seed_spec
    from aiperf.train.peak import measure_peak

    if keras.backend.backend() != args.backend:  # pragma: no cover - Keras was imported before us
        raise SystemExit(
            f"Keras runs on {keras.backend.backend()}, not {args.backend}: run this script fresh"
        )
    network = seed_spec(args.model, (args.image_size, args.image_size, 3), args.classes)
    devices = list(keras.distribution.list_devices()) if args.backend == "jax" else ["default"]
    print(
        f"bench_gpu: {args.model} {args.image_size}x{args.image_size}x3, {args.classes} classes, "
        f"batch {args.batch} per device, {args.precision}, Keras {keras.__version__} on "
        f"{args.backend}, jit_compile {'on' if args.jit else 'off'}, {args.steps} steps x "
        f"{args.epochs - 1} timed epochs; {len(devices)} device(s): {', '.join(devices)}",
        flush=True,
    )
    peak = measure_peak(args.peak_seconds, "bfloat16", size=args.peak_size)
    print(
        f"device: {peak['device']}; peak {peak['flops'] / 1e12:.3f} TFLOP/s (bfloat16 matmul, "
        "measured)",
        flush=True,
    )
    imagenet = imagenet_on_this_node()
    print(f"imagenet on this node: {imagenet['said']}", flush=True)
    if not args.batch_given and imagenet.get("batch"):
        args.batch = imagenet["batch"]  # the per-device batch the ranked profile trains
        print(
            f"bench_gpu: batch {args.batch} per device, the largest imagenet resolves", flush=True
        )
    counts = [1] + ([len(devices)] if args.node and len(devices) > 1 else [])
    parts: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as folder:
        for n in counts:
            data = Path(folder) / f"synthetic-{n}.npz"
            synthetic(data, args, n)
            part: dict[str, Any] = {"devices": n, "ratio": None}
            for name in ("aiperf", "bare"):
                try:
                    if name == "aiperf":
                        result = run_aiperf(network, data, args, n)
                    else:
                        result = run_bare(network, data, args, devices[:n])
                except Unsupported as exc:
                    part[name] = {"skipped": str(exc)}
                    print(f"{n} device(s), {name:>6}: not measured: {exc}", flush=True)
                    continue
                finally:
                    free()
                flops = (
                    result["images"] * result["train_flops"]
                    + result["evaluated"] * result["eval_flops"]
                ) / result["seconds"]
                result["tflops"], result["mfu"] = flops / 1e12, flops / (peak["flops"] * n)
                part[name] = result
                print(
                    f"{n} device(s), {name:>6}: {result['images_per_s']:10,.1f} images/s  "
                    f"{result['tflops']:8.3f} TFLOP/s  MFU {100 * result['mfu']:5.1f}%",
                    flush=True,
                )
            if "images_per_s" in part["aiperf"] and "images_per_s" in part["bare"]:
                part["ratio"] = part["aiperf"]["images_per_s"] / part["bare"]["images_per_s"]
            parts.append(part)
            data.unlink()
    keras.mixed_precision.set_global_policy("float32")
    return {
        "peak": peak,
        "keras": keras.__version__,
        "device_count": len(devices),
        "devices": devices,
        "imagenet": imagenet,
        "batch": args.batch,
        "parts": parts,
    }


def imagenet_on_this_node() -> dict[str, Any]:
    """What `aiperf run --profile imagenet` resolves on this node before its first trial: the
    precision and per-device batch from the devices (aiperf.train.auto, as a run's workers report
    them), the global batch of a trial on all of them, and the learning rate's scale and warm-up
    (aiperf-rules-1.4). Never fails the check: what cannot be resolved is said."""
    try:
        from aiperf.config import load_config, trial_devices
        from aiperf.train.auto import device_facts, resolved_settings
        from aiperf.train.peak import device
        from aiperf.train.recipe import scaled_rate

        config = load_config("imagenet", workers=1, overrides={"data.source": "/imagenet"})
        facts = device_facts(device()[1])
        resolved = resolved_settings(config, [{"device_facts": facts.to_dict(), "probes": {}}])
        precision = resolved.get("train.precision", config.train.precision)
        batches = resolved.get("search.space.batch_size")
        on_devices = trial_devices(config.cluster)
        if batches is None:
            return {"precision": precision, "said": f"{precision}; no GPU batch (not a GPU node)"}
        top = max(batches) * on_devices
        scale = scaled_rate(1.0, top, config.train.lr_reference_batch)
        said = (
            f"{precision}, {'/'.join(map(str, batches))} images a device x {on_devices} "
            f"device(s) (global batch up to {top:,}), learning rate x {scale:.1f} after a "
            f"{config.train.warmup_epochs:g}-epoch warm-up ({config.ruleset})"
        )
        return {
            "precision": precision,
            "batches": batches,
            "batch": max(batches),
            "devices": on_devices,
            "global_batch": top,
            "rate_scale": scale,
            "said": said,
        }
    except Exception as exc:  # noqa: BLE001 - the check goes on without it
        return {"said": f"not resolved: {type(exc).__name__}: {exc}"}


def compare_in_child(args: argparse.Namespace, argv: list[str], folder: Path) -> dict[str, Any]:
    """Parts 1 and 2 in a process of their own, which frees the devices' memory as it ends."""
    out = folder / "compare.json"
    env = dict(os.environ)
    if args.smoke and args.backend == "jax":  # part 2 on logical CPU devices
        flag = f"--xla_force_host_platform_device_count={SMOKE_DEVICES}"
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}".strip()
    command = [sys.executable, str(Path(__file__).resolve()), *argv]
    done = subprocess.run([*command, "--part", "compare", "--json", str(out)], env=env)
    if done.returncode != 0:
        raise SystemExit(f"bench_gpu: the comparison failed (exit {done.returncode})")
    return json.loads(out.read_text())


# --- part 3, `aiperf run` --------------------------------------------------------------------------


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
                "search.seed_architecture": args.model,
                "search.space.batch_size": [args.batch],
                "train.epochs": [1],
                "train.warmup_epochs": 0,  # the profile's 5-epoch warm-up needs longer rounds
            }
        )
    return settings


def run_budget(args: argparse.Namespace, elapsed: float) -> float:
    """--budget, else what the check's --limit leaves after `elapsed` s and the run's overhead."""
    if args.budget_s is not None:
        return float(args.budget_s)
    left = args.limit - elapsed - RUN_OVERHEAD_S
    return max(MIN_BUDGET_S, min(MAX_BUDGET_S, left // 10 * 10))


def benchmark_run(args: argparse.Namespace, budget_s: float, folder: Path) -> dict[str, Any]:
    """`aiperf run` as a user runs it (its own process, its own Prefect API and workers), then its
    OPS, MFU, window utilisation and staging time read back from its database."""
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
    shown = " ".join(command[3:])
    print(f"bench_gpu: aiperf {shown}", flush=True)
    began = time.perf_counter()
    process = subprocess.Popen(command, env=env, cwd=folder)
    stopped = None
    try:
        code = process.wait()
    except (
        Stopped
    ) as exc:  # the run ends interrupted, its epochs recorded: its figures still count
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
    except Exception as exc:  # the table still comes, saying why there are no figures
        return {"status": f"unreadable: {exc}"}
    score = record.score
    return {
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


# --- the table ---------------------------------------------------------------------------------


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def table(summary: dict[str, Any]) -> str:
    """The check's figures in a few lines, at most 100 columns: printed last."""
    from aiperf.units import format_ops

    settings = summary["settings"]
    lines = []
    compared = summary.get("compare")
    if compared:
        peak = compared["peak"]
        lines.append(
            f"GPU check: {peak['device']} x{compared['device_count']}, peak "
            f"{format_ops(peak['flops'])}FLOP/s each (bf16 matmul, measured)"
        )
        if compared.get("imagenet"):
            said = f"imagenet here: {compared['imagenet']['said']}"
            lines += textwrap.wrap(said, width=100, subsequent_indent="  ")
        lines.append(
            f"Keras {compared['keras']} on {settings['backend']}, {settings['precision']}, jit "
            f"{'on' if settings['jit'] else 'off'}; {settings['model']} {settings['image_size']} "
            f"px, {settings['classes']} classes, batch {settings['batch']}/device"
        )
        lines.append(
            f"{'devices':<10}{'bare img/s':>13}{'aiperf img/s':>15}{'aiperf/bare':>13}"
            f"{'MFU bare':>10}{'MFU aiperf':>12}"
        )
        for part in compared["parts"]:
            bare, ours = part["bare"], part["aiperf"]
            name = str(part["devices"]) if part["devices"] == 1 else f"node {part['devices']}"
            ratio = "-" if part["ratio"] is None else f"{part['ratio']:.3f}"
            lines.append(
                f"{name:<10}{_rate(bare):>13}{_rate(ours):>15}{ratio:>13}"
                f"{_percent(bare.get('mfu')):>10}{_percent(ours.get('mfu')):>12}"
            )
            for label, path in (("bare", bare), ("aiperf", ours)):
                if "skipped" in path:
                    lines.append(f"  {label} on {part['devices']} devices: {path['skipped']}")
        if compared["device_count"] == 1:
            lines.append("node: one device, the same as the row above (devices_per_trial=node)")
    run = summary.get("run")
    if run:
        data = run["data"]
        lines.append(
            f"aiperf run: --profile {run['profile']} --budget {run['budget_s']:g}s, "
            f"{run.get('workers', '?')} worker(s), {run.get('status')} in {run['seconds']:.0f} s"
        )
        lines.append(
            f"  data: {data['kind']}, {data['image_size']} px, {data['classes']} classes, "
            f"{data['train_samples']} + {data['val_samples']} images"
        )
        lines.append(f"  ({RUN_DATA_WHY})")
        if run.get("ops") is not None:
            staging = run.get("staging_s")
            accuracy = run.get("best_val_accuracy")
            lines.append(
                f"  OPS {format_ops(run['ops'])}OPS   MFU {_percent(run.get('mfu'))}   window "
                f"utilisation {_percent(run.get('utilisation'))}   staging "
                + ("-" if staging is None else f"{staging:.1f} s")
            )
            lines.append(
                f"  trials completed {run['trials_completed']}   best val accuracy "
                + ("-" if accuracy is None else f"{accuracy:.3f}")
                + f"   {'valid' if run.get('valid') else 'invalid'}, {run.get('division')}"
            )
        elif run.get("message"):
            lines.append(f"  {run['message']}")
    if summary.get("stopped"):
        lines.append(f"stopped: {summary['stopped']}")
    lines.append(f"total {summary['total_s']:.0f} s")
    return "\n".join(lines)


def _rate(path: dict[str, Any]) -> str:
    return f"{path['images_per_s']:,.1f}" if "images_per_s" in path else "-"


def _stop(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: the run's shutdown is not cut short
    raise Stopped(f"signal {signum}, the check's time limit")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse(raw)
    if args.part == "compare":
        summary = compare(args)
        if args.json:
            args.json.write_text(json.dumps(summary, indent=2, default=str) + "\n")
        return summary
    began = time.perf_counter()
    signal.signal(signal.SIGTERM, _stop)
    summary: dict[str, Any] = {
        "settings": {
            k: v
            for k, v in vars(args).items()
            if k not in ("json", "table", "part", "batch_given")
        },
        "compare": None,
        "run": None,
        "stopped": None,
    }
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as name:
        folder = Path(name)
        try:
            summary["compare"] = compare_in_child(args, raw, folder)
            if summary["compare"] and summary["compare"].get("batch"):
                args.batch = summary["settings"]["batch"] = summary["compare"]["batch"]
            if args.run:
                budget = run_budget(args, time.perf_counter() - began)
                summary["run"] = run = benchmark_run(args, budget, folder)
                summary["stopped"] = run["stopped"]
        except Stopped as exc:
            summary["stopped"] = str(exc)
        finally:
            summary["total_s"] = time.perf_counter() - began
            text = table(summary)
            print("\n" + text, flush=True)
            if args.table:
                args.table.write_text(text + "\n")
            if args.json:
                args.json.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


def failed(summary: dict[str, Any]) -> bool:
    """Whether the check failed: stopped by its time limit, or a run that did not complete. Its run
    is shorter than any ruleset's minimum, so a verified but invalid result (exit status 3,
    aiperf.cli.exit_codes.EXIT_INVALID) is what a good check gives."""
    from aiperf.cli.exit_codes import EXIT_INVALID, EXIT_VALID

    run = summary.get("run")
    return bool(summary.get("stopped")) or (
        run is not None
        and (run["exit"] not in (EXIT_VALID, EXIT_INVALID) or run.get("status") != "completed")
    )


if __name__ == "__main__":
    sys.exit(1 if failed(main()) else 0)
