"""A node's energy over the timed window, read from its own meters by one of its workers.

aiperf.system.meters says which meters a node has; here one worker of each node reads them, on a
sampler thread, once a second: from `start` (the node idle: the workers are warm and wait for
their first trial) through `open_window` to `stop`, three calls the run makes through Client.run
(aiperf.lifecycle.metering), each returning at once. Each meter's result is its energy in the
window (joules), its mean and peak power (watts; the peak over one sampling interval), its
number of samples and the seconds it covered, and its idle power before the window.

- RAPL (`energy_uj` under Linux's powercap, per CPU package and DRAM) is a counter that wraps at
  the zone's `max_energy_range_uj` (about 262 kJ for a package: some 20 minutes at 200 W), so it
  is read often enough to see every wrap and each step is taken modulo the range.
- NVML (`nvmlDeviceGetTotalEnergyConsumption`, millijoules since the driver loaded) is a 64-bit
  counter that does not wrap within a run.
- A BMC (aiperf.system.bmc) gives watts, integrated between readings (the trapezoid of each).

A counter's energy is its difference, whatever the interval. A meter that stops answering keeps
what it measured until then, with `stopped` saying when and why; its node's energy is then
incomplete and the run says so (aiperf.results.energy), never filling the gap. The worker keeps
its sampler in this module between the run's calls, keyed by the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from aiperf import settings
from aiperf.system import meters

SAMPLE_S = 1.0
# Readings kept per meter and window segment: a second apart for the first 10 minutes, evenly
# spaced after (the database and the event log carry them; a package's power logs are made of them).
MAX_READINGS = 600


class MeterError(Exception):
    """A meter did not answer."""


@dataclass
class Counter:
    """One meter as an energy counter: `read` gives its raw value, `to_joules` its unit, `wraps_at`
    the raw value after which it starts again from zero (None: it does not wrap). A meter that
    reads power (`watts`: a BMC) is integrated between reads, the trapezoid of each interval, on
    the clock of whoever reads it (the sampler's), so that the power it reports over an interval
    is what it read, whatever a read's own latency."""

    meter: dict[str, Any]
    read: Callable[[], float]
    to_joules: float = 1.0
    wraps_at: float | None = None
    watts: bool = False
    _last: float | None = None
    _at: float = 0.0
    _joules: float = 0.0

    def joules(self, now: float) -> float:
        """The energy counted since the first call, wraps unfolded, read at time `now`;
        MeterError if unreadable."""
        try:
            raw = float(self.read())
        except Exception as exc:  # OSError from sysfs, BmcError, a driver's own (NVMLError)
            raise MeterError(f"{type(exc).__name__}: {exc}") from exc
        if self._last is not None and self.watts:
            self._joules += (raw + self._last) / 2 * (now - self._at)
        elif self._last is not None:
            step = raw - self._last
            if step < 0 and self.wraps_at is not None:
                step += self.wraps_at + 1
            self._joules += max(step, 0.0) * self.to_joules
        self._last, self._at = raw, now
        return self._joules


@dataclass
class Track:
    """What the sampler saw of one counter: idle from `begun` to `opened`, the window from
    `opened` to `last`."""

    counter: Counter
    begun: tuple[float, float] | None = None  # (time, joules) as the idle measurement began
    opened: tuple[float, float] | None = None  # as the window opened
    last: tuple[float, float] | None = None
    peak_w: float | None = None
    samples: int = 0
    stopped: str | None = None
    window: list[tuple[float, float]] = field(default_factory=list)  # (time, joules) from opening

    def sample(self, now: float, *, opening: bool = False) -> None:
        """Read the counter; the first reading begins the idle measurement, `opening` the window."""
        if self.stopped is not None:
            return
        try:
            reading = (now, self.counter.joules(now))
        except MeterError as exc:
            since = self.opened or self.begun
            self.stopped = (
                f"stopped answering {now - since[0]:.0f} s in ({exc})" if since else str(exc)
            )
            return
        if self.begun is None:
            self.begun = reading
        if opening:
            self.opened = reading
        elif self.opened is not None and self.last is not None and now > self.last[0]:
            watts = (reading[1] - self.last[1]) / (now - self.last[0])
            self.peak_w = watts if self.peak_w is None else max(self.peak_w, watts)
        if self.opened is not None:
            self.samples += 1
            self.window.append(reading)
        self.last = reading

    def result(self) -> dict[str, Any]:
        """The meter as listed, with its window's joules, seconds, mean and peak watts, samples,
        idle watts, its readings (`opened_at`, then [seconds, joules] since it) and, if it stopped
        answering, when and why."""
        idle_w = joules = seconds = None
        if self.begun is not None and self.opened is not None and self.opened[0] > self.begun[0]:
            idle_w = (self.opened[1] - self.begun[1]) / (self.opened[0] - self.begun[0])
        if self.opened is not None and self.last is not None:
            joules = self.last[1] - self.opened[1]
            seconds = self.last[0] - self.opened[0]
        return {
            **self.counter.meter,
            "joules": joules,
            "seconds": seconds,
            "mean_w": joules / seconds if joules is not None and seconds else None,
            "peak_w": self.peak_w,
            "samples": self.samples,
            "idle_w": idle_w,
            "stopped": self.stopped,
            "opened_at": None if self.opened is None else self.opened[0],
            "readings": readings(self.window),
        }


def readings(window: list[tuple[float, float]], most: int = MAX_READINGS) -> list[list[float]]:
    """A window's (time, joules) samples as [seconds, joules] since its first, to the millisecond
    and millijoule, at most `most` of them: a long window keeps evenly spaced ones, its first and
    last always. The joules are cumulative, so a kept reading loses nothing of the total (only the
    detail of the power between two kept ones), and every node's sampler keeps the same ones."""
    if not window:
        return []
    keep: Sequence[int] = range(len(window))
    if len(window) > most:
        step = (len(window) - 1) / (most - 1)
        keep = sorted({round(i * step) for i in range(most)})
    t0, j0 = window[0]
    return [[round(window[i][0] - t0, 3), round(window[i][1] - j0, 3)] for i in keep]


@dataclass
class Sampler:
    """The node's counters, read every `interval_s` seconds on a thread from `begin` (idle) through
    `open` (the window) to `close`. Each call returns at once: a Dask worker runs them on its
    event loop, which must not wait."""

    tracks: list[Track]
    interval_s: float = SAMPLE_S
    clock: Callable[[], float] = time.time  # the time of a sample, as every counter is read at it
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def begin(self) -> None:
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="aiperf-power", daemon=True)
        self._thread.start()

    def open(self) -> None:
        self._sample(opening=True)

    def close(self) -> list[dict[str, Any]]:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()
        return [track.result() for track in self.tracks]

    def _loop(self) -> None:
        while not self._done.wait(self.interval_s):
            self._sample()

    def _sample(self, *, opening: bool = False) -> None:
        with self._lock:
            now = self.clock()
            for track in self.tracks:
                track.sample(now, opening=opening)


# --- the counters of the meters aiperf.system.meters lists ----------------------------------------


def counters(listed: list[dict[str, Any]]) -> tuple[list[Counter], Callable[[], None]]:
    """A counter for each meter `describe_meters` listed, and what releases them afterwards."""
    found = [_bmc(m) for m in listed if m.get("kind") == "bmc"]
    found += [_rapl(m) for m in listed if m.get("kind") == "rapl"]
    gpus = [m for m in listed if m.get("kind") == "nvml"]
    if not gpus:
        return found, lambda: None
    import pynvml  # nvidia-ml-py: listed, so it was importable and NVML started on this node

    pynvml.nvmlInit()
    for meter in gpus:
        handle = pynvml.nvmlDeviceGetHandleByIndex(int(meter["gpu"]))
        read = partial(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        found.append(Counter(meter, read, to_joules=1e-3))
    return found, pynvml.nvmlShutdown


def _bmc(meter: dict[str, Any]) -> Counter:
    from aiperf.system.bmc import Bmc

    fields = ("host", "user", "password_file", "port", "reading")
    return Counter(meter, Bmc(**{k: meter[k] for k in fields}).watts, watts=True)


def _rapl(meter: dict[str, Any]) -> Counter:
    path = Path(str(meter["path"]))
    return Counter(
        meter, lambda: int(path.read_text()), to_joules=1e-6, wraps_at=float(meter["wraps_at_uj"])
    )


# --- on the worker: the two calls a run makes around its window (through Client.run) -------------

_RUNNING: dict[str, tuple[Sampler, Callable[[], None]]] = {}


def start(key: str, by_node: dict[str, list[dict[str, Any]]]) -> bool:
    """Begin this node's idle measurement, sampling its meters until `stop(key)`. `by_node`:
    hostname -> the meters the node listed; False where this worker's node has none."""
    import socket

    listed = by_node.get(socket.gethostname())
    if not listed or key in _RUNNING:
        return False
    found, release = counters(listed)
    sampler = Sampler([Track(c) for c in found])
    sampler.begin()
    _RUNNING[key] = (sampler, release)
    return True


def open_window(key: str) -> bool:
    """The window opens: idle ends; False if this worker samples nothing under `key`."""
    running = _RUNNING.get(key)
    if running is not None:
        running[0].open()
    return running is not None


def stop(key: str) -> list[dict[str, Any]] | None:
    """Each meter's result over the window (Track.result), or None if this worker sampled none."""
    running = _RUNNING.pop(key, None)
    if running is None:
        return None
    sampler, release = running
    try:
        return sampler.close()
    finally:
        release()


def idle_seconds() -> float:
    """The stated few seconds a node is measured idle before its window (AIPERF_IDLE_POWER_S)."""
    return settings.number(settings.IDLE_POWER_S)


def powercap() -> Path:
    """Where this node's kernel exposes its powercap zones (AIPERF_POWERCAP)."""
    return Path(settings.text(settings.POWERCAP) or meters.POWERCAP)
