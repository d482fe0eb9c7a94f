"""One GPU, one trial: how fast does aiperf train ResNet-50, next to bare Keras on the same model?

Trains ResNet-50 (aiperf.arch's, layer for layer keras.applications') at 224 px on 1000 classes of
synthetic data twice, in one process, with the same backend, precision, batch and steps:

- aiperf: through aiperf's own trial code (aiperf.train.trial.run_trial with a TrialRequest, as a
  worker runs it: its data feed, deadline watch, phase clock, per-epoch fit and evaluate, reports);
- bare Keras: model.fit on the same model, built by aiperf.arch, with one validation batch per
  epoch as the trial evaluates one.

The first epoch of each compiles (and is not timed); the later epochs are. It prints images/s for
each, their model FLOPs utilisation (tensor-convention FLOPs per image x images/s, over this
device's measured bf16 matmul peak, aiperf.train.peak), and the ratio aiperf / bare: what aiperf's
orchestration costs inside a trial. Images are uint8 (0 or 1) so that a GPU's batches stay small on
the host; each batch is copied to the device as aiperf's feed does.

Reference figures are in docs/performance.md ("One GPU"). The GPU run below is sized to take under
5 minutes, most of it two compilations.

    python benchmarks/bench_gpu.py                 # GPU: jax, mixed_bfloat16, batch 256, jit on
    python benchmarks/bench_gpu.py --backend torch --batch 128
    python benchmarks/bench_gpu.py --smoke         # CPU check of the code path, well under a minute

--smoke trains the small resnet-mini seed (32 px, 10 classes, batch 8, a few steps, float32): the
fixed cost of tracing ResNet-50's 177 layers alone is over a minute on a 2-core CPU. Give
--model resnet50 with --smoke to trace the real network anyway.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

GPU = {
    "model": "resnet50",
    "image_size": 224,
    "classes": 1000,
    "batch": 256,
    "steps": 20,
    "epochs": 4,
    "precision": "mixed_bfloat16",
    "peak_seconds": 2.0,
    "peak_size": None,
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
}


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
    parser.add_argument("--batch", type=int, help="images per step (default 256; 8 with --smoke)")
    parser.add_argument(
        "--steps", type=int, help="training steps per epoch (default 20; 4 with --smoke)"
    )
    parser.add_argument(
        "--epochs", type=int, help="epochs, the first untimed (default 4; 2 with --smoke)"
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
    parser.add_argument("--smoke", action="store_true", help="a quick CPU check of the code path")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)
    defaults = SMOKE if args.smoke else GPU
    for key in ("model", "image_size", "classes", "batch", "steps", "epochs", "precision"):
        if getattr(args, key) is None:
            setattr(args, key, defaults[key])
    args.peak_seconds, args.peak_size = defaults["peak_seconds"], defaults["peak_size"]
    args.backend = args.backend or os.environ.get("KERAS_BACKEND") or "jax"
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: the first one compiles and is not timed")
    if min(args.batch, args.steps) < 1:
        parser.error("--batch and --steps must be positive")
    return args


def synthetic(path: Path, args: argparse.Namespace) -> None:
    """A staged synthetic dataset as aiperf's feed reads it (an .npz of x/y train and val arrays):
    one epoch of `steps` batches, and one validation batch."""
    import numpy as np

    rng = np.random.default_rng(0)
    shape = (args.image_size, args.image_size, 3)
    train, val = args.steps * args.batch, args.batch
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


def run_aiperf(network: Any, data: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The trial as a worker runs it (aiperf.train.trial.run_trial)."""
    from aiperf.train.messages import EpochReport, TrialBuilt, TrialRequest
    from aiperf.train.trial import run_trial

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
    )
    reports: list[Any] = []
    result = run_trial(request, reports.append)
    if len(result.epochs) < args.epochs:
        raise SystemExit(
            f"the aiperf trial ended {result.status} after {len(result.epochs)} epochs: {result.message}"
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
        "phases": getattr(result, "phases", None),
    }


def run_bare(network: Any, data: Path, args: argparse.Namespace) -> dict[str, Any]:
    """model.fit on the same model, the same data, one validation batch per epoch."""
    import keras
    import numpy as np

    from aiperf.arch import build_model
    from aiperf.ops import count_all

    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy(args.precision)
    model = build_model(network)
    counts = count_all(model)["tensor"]
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=args.jit,
    )
    with np.load(data) as arrays:
        x, y, x_val, y_val = (arrays[k] for k in ("x_train", "y_train", "x_val", "y_val"))
    epochs: list[tuple[float, int, int]] = []

    class EpochClock(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):  # after the epoch's validation
            epochs.append((time.perf_counter() - self.started, len(y), len(y_val)))

    model.fit(
        x,
        y,
        batch_size=args.batch,
        epochs=args.epochs,
        validation_data=(x_val, y_val),
        verbose=0,
        callbacks=[EpochClock()],
    )
    return {
        **timed(epochs),
        "train_flops": counts.train_per_sample,
        "eval_flops": counts.eval_per_sample,
    }


def free() -> None:
    import keras

    keras.backend.clear_session()
    gc.collect()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    os.environ["KERAS_BACKEND"] = args.backend  # before anything imports Keras
    began = time.perf_counter()
    import keras

    from aiperf.arch import seed_spec
    from aiperf.train.peak import measure_peak

    if keras.backend.backend() != args.backend:  # pragma: no cover - Keras was imported before us
        raise SystemExit(
            f"Keras runs on {keras.backend.backend()}, not {args.backend}: run this script fresh"
        )
    network = seed_spec(args.model, (args.image_size, args.image_size, 3), args.classes)
    print(
        f"bench_gpu: {args.model} {args.image_size}x{args.image_size}x3, {args.classes} classes, "
        f"batch {args.batch}, {args.precision}, Keras {keras.__version__} on {args.backend}, jit_compile "
        f"{'on' if args.jit else 'off'}, {args.steps} steps x {args.epochs - 1} timed epochs",
        flush=True,
    )
    peak = measure_peak(args.peak_seconds, "bfloat16", size=args.peak_size)
    print(
        f"device: {peak['device']}; peak {peak['flops'] / 1e12:.3f} TFLOP/s (bfloat16 matmul, measured)",
        flush=True,
    )

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as folder:
        data = Path(folder) / "synthetic.npz"
        synthetic(data, args)
        for name, run in (("aiperf", run_aiperf), ("bare keras", run_bare)):
            results[name] = result = run(network, data, args)
            free()
            flops = (
                result["images"] * result["train_flops"]
                + result["evaluated"] * result["eval_flops"]
            ) / result["seconds"]
            result["tflops"], result["mfu"] = flops / 1e12, flops / peak["flops"]
            print(
                f"{name:>10}: {result['images_per_s']:10,.1f} images/s  {result['tflops']:8.3f} TFLOP/s  "
                f"MFU {100 * result['mfu']:5.1f}%",
                flush=True,
            )
    keras.mixed_precision.set_global_policy("float32")
    ratio = results["aiperf"]["images_per_s"] / results["bare keras"]["images_per_s"]
    total = time.perf_counter() - began
    print(f"aiperf / bare: {ratio:.3f}   (total {total:.1f} s)")
    summary = {
        "settings": {k: v for k, v in vars(args).items() if k != "json"},
        "peak": peak,
        "aiperf": results["aiperf"],
        "bare": results["bare keras"],
        "ratio": ratio,
        "total_s": total,
    }
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


if __name__ == "__main__":
    main()
