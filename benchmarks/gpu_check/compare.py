"""Parts 0, 1 and 2 of the GPU check, with the feed and the fit between them, in the child process
that holds the devices (a JAX process keeps most of a GPU's memory until it ends).

0. the node: its devices, their measured bf16 matmul peak and memory, and what `aiperf run
   --profile imagenet` resolves on them;
1. aiperf's trial against bare Keras on one device, at the check's batch (256 a device);
   then the feed as a trial gets it and the memory fit at the resolved batch (adapter.py);
2. the same as 1 on all of the node's devices, data-parallel (none on a node of one device).

Each part is saved (record.Record.save) as it ends.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

from benchmarks.gpu_check import adapter
from benchmarks.gpu_check.record import EXPECTED_GPU, Record, guarded


class Unsupported(Exception):
    """A path this backend or this checkout cannot run: reported in the table, not an error."""


def compare(args: argparse.Namespace, record: Record) -> None:
    """The child's parts, in order, each saved as it ends."""
    os.environ["KERAS_BACKEND"] = args.backend  # before anything imports Keras
    import keras

    from aiperf.arch import seed_spec

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
    done = record.parts()  # by an earlier child that died after them
    node = done.get("part0") or record.save("part0", guarded("part 0", node_part, args, devices))
    if "peak" not in node:
        return  # no devices or no peak: nothing after it can be measured
    peak, everyone = node["peak"]["flops"], len(devices) if args.node else 1
    later = {
        "part1": lambda data: device_part(network, data[1], args, 1, peak),
        "feed": lambda data: adapter.feed(data[everyone], args, everyone),
        "fit": lambda data: adapter.fit(network, args, node, everyone),
        "part2": lambda data: node_part2(network, data[everyone], args, everyone, peak),
    }
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as folder:
        data = {n: synthetic(Path(folder) / f"synthetic-{n}.npz", args, n) for n in {1, everyone}}
        for name, measure in later.items():
            if name not in done:
                record.save(name, guarded(name, measure, data))
    keras.mixed_precision.set_global_policy("float32")


def node_part2(
    network: Any, data: Path, args: argparse.Namespace, n: int, peak: float
) -> dict[str, Any]:
    """Part 2 on the node's `n` devices, or why not."""
    if not args.node:
        return {"skipped": "--no-node"}
    if n == 1:
        return {"skipped": "one device here: part 1 is the node (devices_per_trial=node)"}
    return device_part(network, data, args, n, peak)


def node_part(args: argparse.Namespace, devices: list[str]) -> dict[str, Any]:
    """Part 0: the devices, their peak and memory, and what the ranked profile resolves here."""
    import keras

    from aiperf.train.peak import measure_peak

    peak = measure_peak(args.peak_seconds, "bfloat16", size=args.peak_size)
    print(
        f"device: {peak['device']}; peak {peak['flops'] / 1e12:.3f} TFLOP/s (bfloat16 matmul, "
        "measured)",
        flush=True,
    )
    imagenet = imagenet_on_this_node(args.backend)
    print(f"imagenet on this node: {imagenet['said']}", flush=True)
    accelerated = "GPU" in str(peak["device"]).upper()
    expected = None
    if accelerated and EXPECTED_GPU not in str(peak["device"]):
        expected = (
            f"expected one {EXPECTED_GPU} (141 GB), found {peak['device']}: parts 1 and 2 still "
            f"train at {args.batch} a device; the fit says whether the resolved batch fits here"
        )
        print(f"bench_gpu: {expected}", flush=True)
    return {
        "peak": peak,
        "keras": keras.__version__,
        "device_count": len(devices),
        "devices": devices,
        "memory_bytes": imagenet.get("memory_bytes"),
        "expected": expected,
        "imagenet": imagenet,
    }


def imagenet_on_this_node(backend: str) -> dict[str, Any]:
    """What `aiperf run --profile imagenet` resolves on this node before its first trial: the
    precision and per-device batch from the devices (aiperf.train.auto, as a run's workers report
    them), the global batch of a trial on all of them, and the learning rate's scale and warm-up.
    On the check's `backend`: the profile's own (TensorFlow) is refused where it is not installed,
    as on the H200 machine. Never fails the check: what cannot be resolved is said."""
    try:
        from aiperf.config import load_config, trial_devices
        from aiperf.train.auto import device_facts, resolved_settings
        from aiperf.train.peak import device
        from aiperf.train.recipe import scaled_rate

        overrides = {"data.source": "/imagenet", "train.backend": backend}
        config = load_config("imagenet", workers=1, overrides=overrides)
        facts = device_facts(device()[1])
        resolved = resolved_settings(config, [{"device_facts": facts.to_dict(), "probes": {}}])
        precision = resolved.get("train.precision", config.train.precision)
        batches = resolved.get("search.space.batch_size")
        on_devices = trial_devices(config.cluster)
        if batches is None:
            said = f"{precision}; no GPU batch (not a GPU node)"
            return {"precision": precision, "memory_bytes": facts.memory_bytes, "said": said}
        top = max(batches) * on_devices
        scale = scaled_rate(1.0, top, config.train.lr_reference_batch)
        rate = (
            f"learning rate x {scale:.1f}"
            if config.train.lr_reference_batch
            else f"{config.train.optimizer} at its searched global rate"
        )
        said = (
            f"{precision}, {'/'.join(map(str, batches))} images a device x {on_devices} "
            f"device(s) (global batch up to {top:,}), {rate} after a "
            f"{config.train.warmup_epochs:g}-epoch warm-up, {config.train.lr_schedule} decay "
            f"({config.ruleset})"
        )
        return {
            "precision": precision,
            "batches": batches,
            "batch": max(batches),
            "devices": on_devices,
            "global_batch": top,
            "rate_scale": scale,
            "memory_bytes": facts.memory_bytes,
            "said": said,
        }
    except Exception as exc:  # noqa: BLE001 - the check goes on without it
        return {"said": f"not resolved: {type(exc).__name__}: {exc}"}


def synthetic(path: Path, args: argparse.Namespace, devices: int) -> Path:
    """A staged synthetic dataset as aiperf's feed reads it (an .npz of x/y train and val arrays):
    one epoch of `steps` global batches, and one global validation batch. Images are uint8 (0 or
    1), so a GPU's batches stay small on the host."""
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
    return path


def device_part(
    network: Any, data: Path, args: argparse.Namespace, n: int, peak: float
) -> dict[str, Any]:
    """Part 1 (n = 1) or 2: aiperf's trial, then bare Keras, on `n` devices; MFU against the
    measured peak of each device."""
    import keras

    devices = list(keras.distribution.list_devices())[:n] if args.backend == "jax" else ["default"]
    part: dict[str, Any] = {"devices": n, "ratio": None}
    for name in ("aiperf", "bare"):
        try:
            if name == "aiperf":
                result = run_aiperf(network, data, args, n)
            else:
                result = run_bare(network, data, args, devices)
        except Unsupported as exc:
            part[name] = {"skipped": str(exc)}
            print(f"{n} device(s), {name:>6}: not measured: {exc}", flush=True)
            continue
        finally:
            free()
        flops = (
            result["images"] * result["train_flops"] + result["evaluated"] * result["eval_flops"]
        ) / result["seconds"]
        result["tflops"], result["mfu"] = flops / 1e12, flops / (peak * n)
        part[name] = result
        print(
            f"{n} device(s), {name:>6}: {result['images_per_s']:10,.1f} images/s  "
            f"{result['tflops']:8.3f} TFLOP/s  MFU {100 * result['mfu']:5.1f}%",
            flush=True,
        )
    if "images_per_s" in part["aiperf"] and "images_per_s" in part["bare"]:
        part["ratio"] = part["aiperf"]["images_per_s"] / part["bare"]["images_per_s"]
    return part


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
        raise RuntimeError(
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
    """model.fit on the same model, the same data, one validation batch per epoch (as the trial
    evaluates one)."""
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
    """The last model's memory back before the next part builds one."""
    import keras

    keras.backend.clear_session()
    gc.collect()
