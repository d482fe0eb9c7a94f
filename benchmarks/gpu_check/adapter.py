"""The GPU check's two parts that call other parts of aiperf, through their pinned signatures:

- the feed as a trial gets it: aiperf.train.feedrate.trial_feed_rates(data_path, *, batch,
  input_shape, devices, seconds, feed="auto", threads=None), `batch` the global batch;
- the memory fit at the resolved batch: aiperf.train.fit.step_memory(model, *, global_batch,
  devices, precision) -> StepMemory (bytes_needed, bytes_available, fits), XLA's memory analysis
  of the training step against the device, the model compiled by aiperf.train.fit.trainable (the
  builder a trial and the seed's fit check use) with the imagenet profile's recipe.

Each is imported here, lazily and nowhere else in the check: a checkout without it (an older one,
or before the parts are merged) records {"skipped": why} and the check goes on.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any


def _missing(module: str, name: str, exc: ImportError) -> dict[str, Any]:
    return {"skipped": f"this checkout has no {module}.{name} ({exc})"}


def feed(data: Path, args: argparse.Namespace, devices: int) -> dict[str, Any]:
    """The feed as a trial on `devices` devices opens it (one pipeline a GPU with DALI, each on its
    shard), at the global batch, for args.feed_seconds: images/s per device and for the node.
    Its data: --feed-data (staged shards) where given, else the check's synthetic arrays."""
    try:
        from aiperf.train.feedrate import trial_feed_rates
    except ImportError as exc:
        return _missing("aiperf.train.feedrate", "trial_feed_rates", exc)
    path = str(args.feed_data or data)
    batch = args.batch * devices
    rates = trial_feed_rates(
        path,
        batch=batch,
        input_shape=(args.image_size, args.image_size, 3),
        devices=devices,
        seconds=args.feed_seconds,
    )
    said = "staged shards (--feed-data)" if args.feed_data else "the check's synthetic arrays"
    return {**rates, "batch": batch, "data": said}


def fit(
    network: Any, args: argparse.Namespace, node: dict[str, Any], devices: int
) -> dict[str, Any]:
    """XLA's memory for one training step of the check's model at the per-device batch imagenet
    resolves on this node (else --batch), in its resolved precision, on `devices` devices,
    against the device. Compiled only: nothing is allocated, so it cannot run out of memory."""
    try:
        from aiperf.train.fit import step_memory
    except ImportError as exc:
        return _missing("aiperf.train.fit", "step_memory", exc)
    imagenet = node.get("imagenet") or {}
    per_device = int(imagenet.get("batch") or args.batch)
    precision = imagenet.get("precision")
    if precision not in ("float32", "mixed_bfloat16", "mixed_float16"):
        precision = args.precision  # not resolved here (or "auto"): the check's own
    memory = _step_memory(step_memory, network, args, per_device, devices, precision)
    figures = (
        dataclasses.asdict(memory)
        if dataclasses.is_dataclass(memory) and not isinstance(memory, type)
        else {}
    )
    figures.update(
        bytes_needed=int(memory.bytes_needed),
        bytes_available=None if memory.bytes_available is None else int(memory.bytes_available),
        fits=bool(memory.fits),
    )
    batch_from = "imagenet resolves here" if imagenet.get("batch") else "--batch"
    return {
        **figures,
        "model": args.model,
        "batch": per_device,
        "batch_from": batch_from,
        "global_batch": per_device * devices,
        "devices": devices,
        "precision": precision,
    }


def _recipe(backend: str) -> Any:
    """The step recipe of the imagenet profile's trials (aiperf.train.fit.StepRecipe: its
    optimizer, weight decay, label smoothing), with jit: the step the check reads is the one those
    trials compile. The packaged default recipe where the profile cannot be loaded here."""
    from aiperf.train.fit import StepRecipe

    try:
        from aiperf.config import load_config

        overrides = {"data.source": "/imagenet", "train.backend": backend}
        train = load_config("imagenet", workers=1, overrides=overrides).train
    except Exception:  # an older checkout or a profile refused here: the packaged default
        return StepRecipe()
    return dataclasses.replace(StepRecipe.of_train(train), jit_compile=True)


def _step_memory(
    step_memory: Any,
    network: Any,
    args: argparse.Namespace,
    per_device: int,
    devices: int,
    precision: str,
) -> Any:
    """The model as a trial trains it (aiperf.train.fit.trainable, the one builder of a trial's
    step: the profile's recipe, uint8 pixels scaled on the device), built under the precision's
    policy inside the trial's data-parallel distribution (aiperf.train.devices.data_parallel)."""
    import keras

    from aiperf.arch import build_model
    from aiperf.train.devices import data_parallel
    from aiperf.train.fit import trainable
    from benchmarks.gpu_check.compare import free  # here: compare.py imports this module

    keras.mixed_precision.set_global_policy(precision)
    try:
        with data_parallel(args.backend, devices):
            model = trainable(
                build_model(network), _recipe(args.backend), pixels=True, devices=devices
            )
            return step_memory(
                model, global_batch=per_device * devices, devices=devices, precision=precision
            )
    finally:
        keras.mixed_precision.set_global_policy("float32")
        free()
