"""Bare Keras on a worker's node: the rate a Keras user reaches there with the run's seed model, its
data and its batch, measured in a clean process before the timed window, for the run to show its
trials against (aiperf.results.overhead).

Why a process of its own: a worker process is what may be slow (Dask's nanny puts
MALLOC_TRIM_THRESHOLD_, OMP_NUM_THREADS=1 and others in its environment; its event loop and
threads run beside a trial), so training inside it would measure the benchmark's own cost into
the reference. The worker (`reference_on_worker`, run on every worker at once) starts
`python -m aiperf.train.bare_reference` with the environment a user on that many cores would have
(`clean_environment`) and reads the one JSON line it prints.

What the process does is what a Keras user does: open the staged data with the feed a trial gets
(aiperf.data.feed.open_feed: the same batches), build the run's seed model
(search.seed_architecture) at the data's shape and classes, compile it with SGD (momentum 0.9) and
sparse categorical cross-entropy in the run's precision and XLA setting, and `fit`. The first
TRACE_STEPS steps trace and compile (not timed); then whole steps are timed for `seconds`, from
the end of one step's hook to the end of the last's. Its training operations per second are
samples/s x the model's counted training operations per sample (aiperf.ops, the score's own
convention), so they compare with a trial's directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from aiperf import settings
from aiperf.train.seed import SeedModel
from aiperf.train.watch import stop_loop

TRACE_STEPS = 2  # steps before the clock starts: the first traces and compiles the train step
# The timed steps are also rated in this many consecutive bursts: their spread is the reference's
# own (aiperf.results.overhead gives the comparison's interval from it).
BURSTS = 4
MIN_TIMED_STEPS = 2  # at least this many timed steps, however slow one is
# A first step (tracing included) slower than this skips the reference: whole steps of a large
# model at a large batch on a CPU (ResNet-50 at 192 images) take minutes each, which would hold up
# the window for many minutes.
SLOW_STEP_S = 60.0
# Seconds the process may take beyond its timed part (Python, TensorFlow and the data opened, the
# model built and traced) before the worker gives up on it.
START_UP_TIMEOUT_S = 600.0
# Always dropped: Dask's nanny default (65536) that makes glibc return every freed large block to
# the kernel; a bare user never sets it, whatever this process's Dask config now says.
ALWAYS_DROPPED = ("MALLOC_TRIM_THRESHOLD_",)


def nanny_keys() -> set[str]:
    """The variables Dask's nanny puts in a worker's environment (dask config
    `distributed.nanny.pre-spawn-environ` and `distributed.nanny.environ`)."""
    import dask.config
    import distributed  # noqa: F401  (its defaults are the config's)

    keys: set[str] = set(ALWAYS_DROPPED)
    for name in ("distributed.nanny.pre-spawn-environ", "distributed.nanny.environ"):
        keys |= {str(k) for k in (dask.config.get(name, default=None) or {})}
    return keys


def clean_environment(environ: Mapping[str, str], cores: int | None) -> dict[str, str]:
    """`environ` as a bare Keras user on `cores` cores would have it: without what Dask's nanny
    injects and without DASK_* settings, with TensorFlow's and OpenMP's thread counts set to the
    cores (one inter-op thread), as the tuning guides say; everything else (KERAS_BACKEND, PATH,
    aiperf's own settings) kept."""
    dropped = nanny_keys()
    clean = {k: v for k, v in environ.items() if k not in dropped and not k.startswith("DASK_")}
    for key in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
        clean.pop(key, None)
    if cores:
        clean["TF_NUM_INTRAOP_THREADS"] = str(cores)
        clean["OMP_NUM_THREADS"] = str(cores)
        clean["TF_NUM_INTEROP_THREADS"] = "1"
    return clean


def reference_on_worker(
    data_path: str,
    seed: SeedModel,
    *,
    batch: int,
    seconds: float,
    slow_step_s: float = SLOW_STEP_S,
    dask_worker: Any = None,
) -> dict[str, Any]:
    """This worker's bare Keras rate, from a clean process on its node (run on every worker with
    aiperf.cluster.broadcast.on_every_worker, which passes `dask_worker`), or the reason it was skipped,
    named as its trials name their worker. A process that fails raises, with its last words."""
    from aiperf.cluster.environment import worker_label
    from aiperf.train.peak import device
    from aiperf.train.trial import worker_cores

    name = worker_label(str(dask_worker.name)) if dask_worker is not None else "local"
    if device()[1]:
        return {
            "worker": name,
            "skipped": "GPU worker: its process holds the devices, so a second process cannot "
            "train on them beside it",
        }
    cores = worker_cores()
    request = {
        "data_path": data_path,
        "input_shape": [int(d) for d in seed.input_shape],
        "classes": int(seed.classes),
        "seed_architecture": seed.seed_architecture,
        "batch": int(batch),
        "devices": int(seed.devices),
        "precision": seed.precision,
        "jit_compile": bool(seed.jit_compile),
        "seconds": float(seconds),
        "slow_step_s": float(slow_step_s),
        "cores": cores,
        "feed": seed.feed,
    }
    done = subprocess.run(
        [sys.executable, "-m", "aiperf.train.bare_reference", json.dumps(request)],
        env=clean_environment(os.environ, cores),
        capture_output=True,
        text=True,
        timeout=START_UP_TIMEOUT_S + 10 * seconds,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        said = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the bare Keras process exited {done.returncode}: {said}")
    measured = json.loads(lines[-1])
    return {"worker": name, **measured}


def _step_clock(keras: Any, seconds: float, slow_step_s: float) -> Any:
    """A Keras callback that times whole steps after the first TRACE_STEPS for about `seconds`
    (at least MIN_TIMED_STEPS), then stops the fit: `steps` timed over `ended - started`. A first
    step that ends after more than `slow_step_s` stops it at once (`first_step_s`)."""

    class StepClock(keras.callbacks.Callback):
        # Keras calls it on its own thread once the step's logs are ready, as a trial's clocks:
        # without it every step would wait for its loss on the host, which bare Keras never does.
        async_safe = True

        def __init__(self) -> None:
            super().__init__()
            self.seen = 0
            self.steps = 0
            self.began = self.started = self.ended = 0.0
            self.first_step_s: float | None = None
            self.marks: list[float] = []  # when each timed step ended, the clock's start first

        def on_train_begin(self, logs: Any = None) -> None:
            self.began = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.seen += 1
            now = time.perf_counter()
            if self.seen == 1 and now - self.began > slow_step_s:
                self.first_step_s = now - self.began
                stop_loop(self)
            elif self.seen == TRACE_STEPS:
                self.started = now
                self.marks = [now]
            elif self.seen > TRACE_STEPS:
                self.steps, self.ended = self.seen - TRACE_STEPS, now
                self.marks.append(now)
                if now - self.started >= seconds and self.steps >= MIN_TIMED_STEPS:
                    stop_loop(self)

    return StepClock()


def burst_rates(marks: list[float], batch: int, bursts: int = BURSTS) -> list[float]:
    """Samples per second in `bursts` consecutive runs of whole timed steps (`marks`: the clock's
    start, then each timed step's end); none when there are fewer steps than bursts."""
    steps = len(marks) - 1
    if steps < bursts:
        return []
    edges = [round(i * steps / bursts) for i in range(bursts + 1)]
    return [
        (end - start) * batch / (marks[end] - marks[start])
        for start, end in zip(edges, edges[1:], strict=False)
        if marks[end] > marks[start]
    ]


def measure(request: Mapping[str, Any]) -> dict[str, Any]:
    """Run in the clean process: the seed model's bare `fit` rate on the staged data."""
    import keras

    from aiperf.train.devices import configure_logical_cpus

    devices = int(request["devices"])
    configure_logical_cpus(devices)  # several CPU devices a worker owns (trials split it so too)
    batch = int(request["batch"])
    clock, ops_per_sample = _timed_fit(request)
    if clock.first_step_s is not None:
        return {
            "skipped": f"its first step took {clock.first_step_s:.0f} s (tracing included): timing "
            "whole steps of this model and batch would hold up the window for minutes; "
            f"{settings.REFERENCE_SECONDS.name}=0 saves the first step too",
            "batch": batch,
        }
    if clock.steps < 1:
        raise RuntimeError(f"the fit ended after {clock.seen} steps, before any was timed")
    timed_s = clock.ended - clock.started
    samples_per_s = clock.steps * batch / timed_s
    return {
        "samples_per_s": samples_per_s,
        "ops_per_s": samples_per_s * ops_per_sample,
        "train_ops_per_sample": ops_per_sample,
        "batch": batch,
        "devices": devices,
        "steps": clock.steps,
        "seconds": timed_s,
        "burst_ops_per_s": [rate * ops_per_sample for rate in burst_rates(clock.marks, batch)],
        "cores": request.get("cores"),
        "backend": keras.backend.backend(),
    }


def _timed_fit(request: Mapping[str, Any]) -> tuple[Any, float]:
    """The seed model fed by a trial's feed and compiled as a bare Keras user would, fit until its
    step clock (`_step_clock`) stops it: the clock, and the model's operations per sample."""
    import keras

    from aiperf.arch import build_model
    from aiperf.arch.seeds import seed_spec
    from aiperf.data.feed import open_feed
    from aiperf.data.normalise import on_device
    from aiperf.ops import count_all
    from aiperf.train.devices import data_parallel

    height, width, channels = (int(d) for d in request["input_shape"])
    shape = (height, width, channels)
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy(str(request["precision"]))
    feed = open_feed(
        str(request["data_path"]),
        batch_size=int(request["batch"]),
        input_shape=shape,
        seed=0,
        threads=request.get("cores"),
        feed=str(request.get("feed", "auto")),
    )
    with data_parallel(keras.backend.backend(), int(request["devices"])):
        model = build_model(
            seed_spec(str(request["seed_architecture"]), shape, request["classes"])
        )
        ops_per_sample = count_all(model)["aiperf"].train_per_sample
        fed = on_device(model, feed.pixels)
        fed.compile(
            optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],  # as a user (and every trial) watches it
            jit_compile=bool(request["jit_compile"]),
        )
        clock = _step_clock(
            keras, float(request["seconds"]), float(request.get("slow_step_s", SLOW_STEP_S))
        )
        # One fit, as a trial's: its iterator lives across passes; the clock stops it.
        fed.fit(**feed.epochs, epochs=1_000_000, verbose=0, callbacks=[clock])
    return clock, ops_per_sample


def main(argv: list[str]) -> int:
    """`python -m aiperf.train.bare_reference REQUEST_JSON`: one JSON line on stdout."""
    result = measure(json.loads(argv[0]))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
