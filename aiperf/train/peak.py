"""A worker's measured peak: the matmul rate its device reaches in the run's compute precision.

Model FLOPs utilisation (MFU) divides the run's achieved tensor-convention FLOP/s by the sum of its
workers' peaks, so each worker measures its own before the timed window opens, with what its trials
will use: the Keras backend, its thread pools (aiperf.train.trial.configure_threads) and its GPU when
it has one. The probe multiplies two square matrices over and over, through keras.ops so it runs on
every backend: a warm-up product first (the backend's start-up, kernel selection), then products for
$AIPERF_PEAK_SECONDS (default 2 s). Each product is 2 * n**3 floating-point operations.

With train.precision auto the run has no precision yet: each worker probes every candidate its
device supports (`probe_precisions`, aiperf.train.auto says which), the run chooses one from the
rates, and each worker's record is then that precision's (`in_precision`), so the peak is measured
in what the trials compute in, as with a precision given.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from aiperf import settings
from aiperf.config.gpu_backend import accelerator_platforms

CPU_SIZE = 1024
GPU_SIZE = 8192

# The run's precision setting (train.precision) -> the dtype its matmuls compute in.
COMPUTE_DTYPES = {
    "float32": "float32",
    "mixed_bfloat16": "bfloat16",
    "mixed_float16": "float16",
    "bfloat16": "bfloat16",
    "float16": "float16",
}


def compute_dtype(precision: str | None) -> str:
    """The dtype a run of `precision` multiplies in (float32 when unset); an unknown one is a ValueError."""
    precision = precision or "float32"
    if precision not in COMPUTE_DTYPES:
        raise ValueError(f"unknown precision {precision!r}; one of {sorted(COMPUTE_DTYPES)}")
    return COMPUTE_DTYPES[precision]


def peak_seconds() -> float:
    """How long each worker measures: $AIPERF_PEAK_SECONDS."""
    return settings.number(settings.PEAK_SECONDS, positive=True)


def device() -> tuple[str, bool]:
    """A description of the device the backend computes on, and whether it is an accelerator (on
    JAX: whether its platform is one of `accelerator_platforms`)."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            details = tf.config.experimental.get_device_details(gpus[0])
            return f"GPU {details.get('device_name', gpus[0].name)}", True
    elif backend == "jax":
        import jax

        first = jax.devices()[0]
        if first.platform in accelerator_platforms():
            return f"{first.platform.upper()} {getattr(first, 'device_kind', '')}".strip(), True
    elif backend == "torch":
        import torch

        if torch.cuda.is_available():
            return f"GPU {torch.cuda.get_device_name(0)}", True
    from aiperf.system.fingerprint import cpu_model

    return f"CPU {cpu_model()}".strip(), False


def measure_peak(
    seconds: float | None = None,
    dtype: str = "float32",
    *,
    size: int | None = None,
    worker: str | None = None,
) -> dict[str, Any]:
    """{"worker", "flops", "dtype", "device", "seconds"}: the FLOP/s this process reaches multiplying
    square matrices of `size` (1024 on a CPU, 8192 on an accelerator) in `dtype` for `seconds`."""
    import keras
    from keras import ops

    seconds = peak_seconds() if seconds is None else float(seconds)
    where, accelerated = device()
    # The matrix fits the hardware that multiplies: an accelerator whose arithmetic runs on the
    # CPU (JAX's host platform named by AIPERF_ACCELERATOR_PLATFORMS) gets the CPU's size.
    n = size or (GPU_SIZE if accelerated and not where.startswith("CPU") else CPU_SIZE)
    a = keras.random.uniform((n, n), minval=-1.0, maxval=1.0, dtype=dtype, seed=1)
    b = keras.random.uniform((n, n), minval=-1.0, maxval=1.0, dtype=dtype, seed=2)
    # Kernels run asynchronously on accelerators: a few products per wait, so the wait costs little.
    batch = 8 if accelerated else 1

    def products(count: int) -> None:
        c = a
        for _ in range(count):
            c = ops.matmul(a, b)
        ops.convert_to_numpy(ops.cast(c[:1, :1], "float32"))  # waits for the device to finish

    products(2)  # warm-up: kernel selection, allocation, the backend's first call
    done, started = 0, time.perf_counter()
    while True:
        products(batch)
        done += batch
        elapsed = time.perf_counter() - started
        if elapsed >= seconds:
            break
    return {
        "worker": worker or socket.gethostname(),
        "flops": 2.0 * n**3 * done / elapsed,
        "dtype": dtype,
        "device": where,
        "seconds": elapsed,
    }


def probe_precisions(
    precisions: list[str] | tuple[str, ...],
    seconds: float | None = None,
    *,
    size: int | None = None,
    worker: str | None = None,
) -> dict[str, Any]:
    """The peak record of a worker asked to choose (train.precision auto): each precision's rate
    under "probes" ({precision: {"flops", "dtype", "seconds"}}), measured one after another for
    `seconds` each, and the record's own figures those of the first until the run has chosen
    (`in_precision`)."""
    probes: dict[str, dict[str, Any]] = {}
    record: dict[str, Any] = {}
    for precision in precisions:
        peak = measure_peak(seconds, compute_dtype(precision), size=size, worker=worker)
        probes[precision] = {k: peak[k] for k in ("flops", "dtype", "seconds")}
        record = record or peak
    return {**record, "probes": probes}


def in_precision(peak: dict[str, Any], precision: str) -> dict[str, Any]:
    """A worker's peak record in the run's resolved precision: MFU's divisor is the rate the
    trials' precision reaches, which the worker probed among its candidates. A record without
    probes (a precision given, not auto) was measured in it already."""
    probes = peak.get("probes")
    if not probes or precision not in probes:
        return dict(peak)
    return {**peak, **probes[precision]}
