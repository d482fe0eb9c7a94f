"""Feed rate against device rate, measured on each worker before the timed window: was the run
feed-bound, and by how much?

A worker's trials can train no faster than the slower of two rates:

- its feed's, as the trial gets it (trial_feed_rates): images per second out of the real pipeline
  (aiperf.data.feed.open_feed, the staged data, the worker's own cores as its trials use them, the
  run's global batch) opened inside the trial's data-parallel distribution, so DALI opens one
  pipeline per device, each its shard of the files at the per-device batch, as in a trial; counted
  per device from each batch's parts on the devices, and for the node; the batches taken as Keras
  takes them, nothing trained. tf.data is one host pipeline feeding every device: its node rate is
  measured and per device is node / devices, recorded as such (`feed_per_device`);
- its devices': images per second of training steps of the run's seed model
  (search.seed_architecture) at that batch (on CPU devices at most CPU_BATCH_PER_DEVICE images a
  device: recorded as `device_batch`), in the run's precision and compile setting, on all the
  devices a trial uses, on synthetic batches already in memory (uint8 pixels where the feed gives
  pixels, scaled on the device as in a trial), timed after a step that compiles.

Each lasts about half of $AIPERF_PEAK_SECONDS (the peak probe's setting:
aiperf.train.peak.peak_seconds; 2 s, so 1 s each), after its warm-up. A worker whose feed is
slower than its devices is feed-bound: its devices wait for batches about 1 - feed/device of the
time. The run's verdict compares the sums over its workers
(each worker feeds only its own devices). The seed model is not what every trial trains (the search
grows it), so the devices' rate is the rate at the run's start; a larger model only lowers it.

Which feed ran (`data.feed`) comes from open_feed: "tf.data" (the TensorFlow pipeline, also
for in-memory arrays on the TensorFlow backend) or "arrays" (in-memory NumPy arrays that Keras
slices itself on other backends: no pipeline, its rate is not the host's decode and is recorded
without a feed rate).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiperf.train.seed import SeedModel

WARM_UP_STEPS = 1  # device steps before the clock starts: the first traces and compiles
# On CPU devices the devices' rate is measured at most at this many images per device: a CPU's
# images/s barely changes with the batch past a few images, and the run's own batch (192-224 for
# the imagenet-shaped profile on CPUs) would cost minutes a step of ResNet-50 before the window.
CPU_BATCH_PER_DEVICE = 8
# How a one-pipeline feed's per-device rate is given: not measured per device, but the node's share.
SHARED = "node / devices: one host pipeline feeds every device"


def _timed(step: Callable[[], int], seconds: float, *, minimum: int = 3) -> tuple[int, float]:
    """Call `step()` (which returns how many items it did) for about `seconds`, at least `minimum`
    times: (items done, seconds taken). The one timing loop of the feed's and the devices' rates."""
    done, calls, started = 0, 0, time.perf_counter()
    while calls < minimum or time.perf_counter() - started < seconds:
        done += step()
        calls += 1
    return done, time.perf_counter() - started


def _rate(step: Callable[[], int], seconds: float, *, minimum: int = 3) -> float:
    """Items per second of `step()` over about `seconds`, at least `minimum` calls (_timed)."""
    done, elapsed = _timed(step, seconds, minimum=minimum)
    return done / elapsed


def feed_images_per_s(feed: Any, seconds: float) -> float | None:
    """Images per second out of the feed's training pipeline as a trial's `fit` iterates it (its
    passes repeated in one iterator: aiperf.data.feed.Feed.epochs), after its first batch (the
    pipeline's start-up); None for in-memory arrays Keras slices itself."""
    delivered = images_by_device(feed, seconds)
    return None if delivered is None else sum(delivered.values())


def images_by_device(feed: Any, seconds: float) -> dict[str, float] | None:
    """Images per second out of the feed's training stream, by the device each batch's part was
    decoded for and placed on (a batch sharded over the trial's devices: DALI's pipelines, one a
    device), or under "" for a batch that comes whole to the host (tf.data), after its first
    batch; None for in-memory arrays Keras slices itself."""
    if feed.kind == "arrays":
        return None
    batches = iter(feed.epochs["x"])
    next(batches)
    counts: dict[str, int] = {}

    def take() -> int:
        parts = _parts(next(batches)[1])
        for device, images in parts.items():
            counts[device] = counts.get(device, 0) + images
        return sum(parts.values())

    _, elapsed = _timed(take, seconds)
    return {device: images / elapsed for device, images in counts.items()}


def _parts(labels: Any) -> dict[str, int]:
    """A batch's labels by device: each shard of a JAX array sharded over several devices, named as
    Keras names devices ("gpu:3"); else the whole batch under ""."""
    shards = getattr(labels, "addressable_shards", None) or ()
    if len(shards) > 1:
        return {f"{s.device.platform}:{s.device.id}": int(s.data.shape[0]) for s in shards}
    return {"": int(labels.shape[0])}


def _named(delivered: dict[str, float] | None, placement: Any) -> dict[str, float] | None:
    """`delivered` (images_by_device), a single device's whole batch ("": no shards to count)
    named as the device its one pipeline decodes for (DALI's on one GPU), so that it reads as
    measured on it, not as a host pipeline's share."""
    if delivered is not None and set(delivered) == {""} and len(placement) == 1:
        return {placement[0]: delivered[""]}
    return delivered


def trial_feed_rates(
    data_path: str,
    *,
    batch: int,
    input_shape: tuple[int, int, int],
    devices: int,
    seconds: float,
    feed: str = "auto",
    threads: int | None = None,
) -> dict[str, Any]:
    """The feed as a trial on `devices` devices gets it, measured: opened by the trial's own
    aiperf.data.feed.open_feed inside the trial's data-parallel distribution at the global `batch`
    (per-device batch x devices), so DALI opens one pipeline per device, each its shard of the
    files at the per-device batch (aiperf.data.dali.trial_devices), and images/s are counted per
    device from the parts of each batch on each device. One host pipeline feeding every device
    (tf.data) is one pipeline: its node rate is measured, and per device is node / devices, said
    so in `per_device` rather than measured. Run it in the process whose JAX sees the devices."""
    import keras

    from aiperf.data.feed import open_feed
    from aiperf.train.devices import data_parallel

    shape = (int(input_shape[0]), int(input_shape[1]), int(input_shape[2]))
    with data_parallel(keras.backend.backend(), devices) as placement:
        opened = open_feed(
            data_path,
            batch_size=batch,
            input_shape=shape,
            seed=0,
            threads=threads,
            feed=feed,
            devices=devices,
        )
        delivered = _named(images_by_device(opened, seconds), opened.placement)
    measured = delivered is not None and "" not in delivered and len(opened.placement) == devices
    record: dict[str, Any] = {
        "feed": opened.kind,
        "pipelines": len(opened.placement) or (0 if delivered is None else 1),
        "devices": list(opened.placement) if measured else list(placement),
        "per_device_images_per_s": None,
        "node_images_per_s": None,
        "per_device": "measured" if measured else SHARED,
        "pixels": opened.pixels,  # uint8 pixels (staged shards), scaled on the device
        "batch": batch,
        "seconds": seconds,
    }
    if delivered is None:  # in-memory arrays: no pipeline to measure
        record["per_device"] = None
        return record
    node = sum(delivered.values())
    record["node_images_per_s"] = node
    record["per_device_images_per_s"] = (
        [delivered.get(d, 0.0) for d in record["devices"]]
        if measured
        else [node / devices] * devices
    )
    return record


def device_images_per_s(
    feed_pixels: bool, seed: SeedModel, *, batch: int, seconds: float
) -> float:
    """Images per second of the seed model's training steps at `batch` (global) on its devices,
    on one synthetic batch held in memory."""
    import keras

    from aiperf.train.devices import data_parallel

    x, y = _synthetic_batch(feed_pixels, seed, batch)
    before = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy(seed.precision)
    try:
        with data_parallel(keras.backend.backend(), seed.devices):
            model = _compiled_seed(feed_pixels, seed)
            for _ in range(WARM_UP_STEPS):
                model.train_on_batch(x, y)

            def step() -> int:
                model.train_on_batch(x, y)
                return batch

            return _rate(step, seconds, minimum=1)
    finally:
        keras.mixed_precision.set_global_policy(before)


def _synthetic_batch(feed_pixels: bool, seed: SeedModel, batch: int) -> tuple[Any, Any]:
    """One batch of random inputs (uint8 pixels, or float model inputs) and labels, the same every
    time (seeded): the devices' rate is measured without a feed."""
    import numpy as np

    rng = np.random.default_rng(0)
    if feed_pixels:
        x = rng.integers(0, 256, (batch, *seed.shape), dtype=np.uint8)
    else:
        x = rng.standard_normal((batch, *seed.shape)).astype("float32")
    y = rng.integers(0, seed.classes, batch).astype("int32")
    return x, y


def _compiled_seed(feed_pixels: bool, seed: SeedModel) -> Any:
    """The seed model behind the device-side scaling of pixels, compiled, its optimizer's slots
    made now: a first trace that creates them traces twice (as in a trial:
    aiperf.train.trial.build_step_state). Build it inside the devices' distribution."""
    import keras

    from aiperf.arch import build_model
    from aiperf.arch.seeds import seed_spec
    from aiperf.data.normalise import on_device

    model = on_device(
        build_model(seed_spec(seed.seed_architecture, seed.shape, seed.classes)), feed_pixels
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
        loss="sparse_categorical_crossentropy",
        jit_compile=seed.jit_compile,
    )
    model.optimizer.build(model.trainable_variables)
    return model


def rates_on_worker(
    data_path: str,
    seed: SeedModel,
    *,
    batch: int,
    seconds: float,
    dask_worker: Any = None,
) -> dict[str, Any]:
    """This worker's feed and device rates (run on every worker with Client.run, which passes
    `dask_worker`), named as its trials name their worker."""
    from aiperf.cluster.environment import worker_label
    from aiperf.train.trial import configure_threads, worker_cores

    configure_threads(worker_cores())
    fed = trial_feed_rates(
        data_path,
        batch=batch,
        input_shape=seed.shape,
        devices=seed.devices,
        seconds=seconds,
        feed=seed.feed,
        threads=worker_cores(),
    )
    rate = _seed_rate(fed["pixels"], seed, batch=batch, seconds=seconds)
    return {
        "worker": worker_label(str(dask_worker.name)) if dask_worker is not None else "local",
        "feed": fed["feed"],
        "feed_images_per_s": fed["node_images_per_s"],
        "feed_pipelines": fed["pipelines"],
        "feed_devices": fed["devices"],
        "feed_per_device_images_per_s": fed["per_device_images_per_s"],
        "feed_per_device": fed["per_device"],
        **rate,
        "batch": batch,
        "devices": seed.devices,
        "cores": worker_cores(),
        "seconds": seconds,
    }


def _seed_rate(
    feed_pixels: bool, seed: SeedModel, *, batch: int, seconds: float
) -> dict[str, Any]:
    """The devices' rate on the seed model (device_images_per_s), at the run's global `batch` on
    accelerators and at most CPU_BATCH_PER_DEVICE a device on CPUs: the rate, the batch it was
    measured at, and whether the devices accelerate."""
    from aiperf.train.peak import device

    accelerated = device()[1]
    devices = seed.devices
    device_batch = batch if accelerated else min(batch, CPU_BATCH_PER_DEVICE * devices)
    rate = device_images_per_s(feed_pixels, seed, batch=device_batch, seconds=seconds)
    return {
        "device_images_per_s": rate,
        "device_batch": device_batch,
        "accelerated": accelerated,
    }


@dataclass(frozen=True)
class FeedVerdict:
    """The run's feed against its devices, summed over the workers that measured both."""

    feed: str | None
    feed_images_per_s: float | None  # None: in-memory arrays, no pipeline measured
    device_images_per_s: float
    workers: int
    # The feed per device, as the trials get it (trial_feed_rates), over every worker's devices;
    # None for a record made before it was measured, or in-memory arrays.
    per_device_images_per_s: tuple[float, ...] | None = None
    pipelines: int | None = None  # the training pipelines opened, over the workers
    per_device_measured: bool = False  # False: a host pipeline's rate shared over its devices

    @property
    def bound(self) -> bool:
        return (
            self.feed_images_per_s is not None
            and self.feed_images_per_s < self.device_images_per_s
        )

    @property
    def idle(self) -> float:
        """The share of time the devices would wait for batches (0 when not feed-bound)."""
        if not self.bound or self.feed_images_per_s is None:
            return 0.0
        return 1.0 - self.feed_images_per_s / self.device_images_per_s

    def line(self) -> str:
        """e.g. "tf.data feed 640 img/s < devices 1,900 img/s: feed-bound, devices idle ~66%"."""
        devices = f"devices {self.device_images_per_s:,.0f} img/s"
        if self.feed_images_per_s is None:
            return f"{self.feed or 'feed'}: in-memory arrays, not measured; {devices}"
        fed = f"{self.feed or 'feed'} {self.feed_images_per_s:,.0f} img/s"
        if self.bound:
            return f"{fed} < {devices}: feed-bound, devices idle ~{self.idle:.0%}"
        spare = self.feed_images_per_s / self.device_images_per_s
        return f"{fed} >= {devices}: not feed-bound (feed {spare:.1f}x the devices)"

    def devices_line(self) -> str | None:
        """The feed per device and for the node, e.g. "dali: 8 pipelines on 8 devices, 1,210 img/s
        a device (1,180-1,240), node 9,680 img/s"; None when not recorded."""
        rates = self.per_device_images_per_s
        if not rates or self.feed_images_per_s is None:
            return None
        feed, node = self.feed or "feed", f"node {self.feed_images_per_s:,.0f} img/s"
        mean = sum(rates) / len(rates)
        if not self.per_device_measured:
            pipelines = "1 host pipeline" if self.pipelines == 1 else f"{self.pipelines} pipelines"
            return (
                f"{feed}: {pipelines} for {_some(len(rates), 'device')}, {node}, "
                f"{mean:,.0f} img/s a device (node / devices)"
            )
        low, high = f"{min(rates):,.0f}", f"{max(rates):,.0f}"
        spread = f" ({low}-{high})" if low != high else ""  # one stream: parts alike a step
        return (
            f"{feed}: {_some(self.pipelines or 0, 'pipeline')} on {_some(len(rates), 'device')}, "
            f"{mean:,.0f} img/s a device{spread}, {node}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "feed": self.feed,
            "feed_images_per_s": self.feed_images_per_s,  # the node's: its workers' sum
            "per_device_images_per_s": (
                None
                if self.per_device_images_per_s is None
                else list(self.per_device_images_per_s)
            ),
            "per_device_measured": self.per_device_measured,
            "pipelines": self.pipelines,
            "devices_line": self.devices_line(),
            "device_images_per_s": self.device_images_per_s,
            "workers": self.workers,
            "feed_bound": self.bound,
            "devices_idle": self.idle,
            "line": self.line(),
        }


def _some(count: int, thing: str) -> str:
    """e.g. "1 pipeline", "8 pipelines"."""
    return f"{count} {thing}{'' if count == 1 else 's'}"


def verdict(data_feed: str | None, rates: Any) -> FeedVerdict | None:
    """The run's verdict from its recorded per-worker rates; None when none were measured. A
    record that is not one (an edited event log read by `verify --package`) is left out."""
    measured = [r for r in rates or () if _positive(_get(r, "device_images_per_s"))]
    if not measured:
        return None
    fed = [_get(r, "feed_images_per_s") for r in measured]
    per_device = [_per_device(r) for r in measured]
    recorded = all(rates is not None for rates in per_device)
    pipelines = [_get(r, "feed_pipelines") for r in measured]
    return FeedVerdict(
        feed=data_feed if isinstance(data_feed, str) else None,
        feed_images_per_s=float(sum(fed)) if all(_positive(f) for f in fed) else None,
        device_images_per_s=float(sum(float(r["device_images_per_s"]) for r in measured)),
        workers=len(measured),
        per_device_images_per_s=(
            tuple(x for rates in per_device for x in rates or ()) if recorded else None
        ),
        pipelines=sum(pipelines) if all(_positive(p) for p in pipelines) else None,
        per_device_measured=all(_get(r, "feed_per_device") == "measured" for r in measured),
    )


def _per_device(record: Any) -> list[float] | None:
    """A worker's feed per device, one rate (0 or more: a starved device waits at 0) for each of
    its `devices`; None where not recorded so (made before it was measured, or edited)."""
    rates, devices = _get(record, "feed_per_device_images_per_s"), _get(record, "devices")
    if not isinstance(rates, list) or not rates:
        return None
    if not all(_number(x) and x >= 0 for x in rates):
        return None
    if _number(devices) and len(rates) != devices:
        return None
    return [float(x) for x in rates]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _get(record: Any, key: str) -> Any:
    return record.get(key) if isinstance(record, dict) else None


def _positive(value: Any) -> bool:
    return _number(value) and value > 0
