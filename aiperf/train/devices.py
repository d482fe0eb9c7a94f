"""The devices one trial trains across, and the data-parallel scope it builds and trains in.

AIPerf's unit of work is a node: a trial trains on all of its GPUs at once, so the score exercises
the node's interconnect and all-reduce as well as its chips. Here a worker owns the devices of its
trials (AIPERF_WORKER_DEVICES, pinned when its process started: aiperf.cluster.environment), and a
trial on more than one of them trains data-parallel: one replica of the model per device, each on
its share of the global batch, gradients all-reduced every step. Keras 3 does it through its
distribution API on JAX (keras.distribution.DataParallel) and through tf.distribute's
MirroredStrategy on TensorFlow; it has neither on torch.

On a machine without accelerators the same path runs on logical CPU devices that share the
worker's cores: JAX makes them from XLA_FLAGS as it starts (the worker's environment sets it), and
TensorFlow from a logical device configuration that must be set before its runtime starts, which
`configure_logical_cpus` does on the worker's first framework call.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aiperf import settings


def worker_devices() -> int:
    """Devices this worker owns ($AIPERF_WORKER_DEVICES; 1 when unset)."""
    return settings.count(settings.WORKER_DEVICES) or 1


def configure_logical_cpus(devices: int) -> None:
    """Split TensorFlow's CPU into `devices` logical devices, once, before its runtime starts (on a
    machine with GPUs, or for one device, nothing to do). Later calls find it done."""
    import keras

    if devices < 2 or keras.backend.backend() != "tensorflow":
        return
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        return
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(devices)]
        )
    except RuntimeError:
        pass  # the runtime started already: configured by an earlier trial of this process


def _tensorflow_devices() -> list[str]:
    import tensorflow as tf

    return [d.name for d in tf.config.list_logical_devices("GPU")] or [
        d.name for d in tf.config.list_logical_devices("CPU")
    ]


def _jax_devices() -> list[str]:
    import keras

    return list(keras.distribution.list_devices())


def available(backend: str) -> list[str]:
    """The devices this process's framework shows, accelerators first, as the framework names them."""
    if backend == "tensorflow":
        return _tensorflow_devices()
    if backend == "jax":
        return _jax_devices()
    import torch

    return [f"cuda:{i}" for i in range(torch.cuda.device_count())] or ["cpu"]


@functools.cache
def _mirrored(placement: tuple[str, ...]) -> Any:
    """One MirroredStrategy per set of devices for the life of the worker process, shared by its
    trials: each strategy numbers its all-reduces from the same start, so a second strategy's
    collectives would meet the first's in TensorFlow's runtime under the same keys and abort on the
    other model's shapes."""
    import tensorflow as tf

    return tf.distribute.MirroredStrategy(devices=list(placement))


@contextmanager
def data_parallel(backend: str, devices: int) -> Iterator[list[str]]:
    """Build, compile and train the trial's model inside this: it yields the devices the trial
    trains on. One device: the framework's default placement, nothing changed. More: one replica per
    device (JAX: a DataParallel distribution, set for the trial and unset after it; TensorFlow: a
    MirroredStrategy's scope). A ValueError when the worker has fewer devices than asked, or the
    backend cannot train data-parallel."""
    shown = available(backend)
    if devices < 1 or devices > len(shown):
        raise ValueError(
            f"the trial asks for {devices} devices; this worker shows {len(shown)} "
            f"({', '.join(shown)})"
        )
    placement = shown[:devices]
    if devices == 1:
        yield placement
        return
    if backend == "jax":
        import keras

        keras.distribution.set_distribution(keras.distribution.DataParallel(devices=placement))
        try:
            yield placement
        finally:
            keras.distribution.set_distribution(None)
        return
    if backend == "tensorflow":
        with _mirrored(tuple(placement)).scope():
            yield placement
        return
    raise ValueError(
        f"Keras cannot train one model across {devices} devices on the {backend} backend; use "
        "jax or tensorflow, or cluster.devices_per_trial=1"
    )
