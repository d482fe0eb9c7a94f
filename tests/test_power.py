"""A node's energy over the window (aiperf.system.power): counters unfolded at their wrap, idle
power before the window, joules, mean and peak watts in it, and a meter that stops answering kept
as far as it answered and named, never filled in."""

from __future__ import annotations

import time

import pytest
from rapl_standin import RaplStandIn

from aiperf.system import meters, power


def _counter(readings, to_joules=1.0, wraps_at=None):
    values = iter(readings)

    def read():
        value = next(values)
        if isinstance(value, Exception):
            raise value
        return value

    return power.Counter({"kind": "rapl", "zone": "package-0"}, read, to_joules, wraps_at)


def test_a_counter_adds_its_steps_and_unfolds_each_wrap():
    counter = _counter([990, 995, 3, 10], to_joules=0.5, wraps_at=999)
    assert [counter.joules(t) for t in range(4)] == [0.0, 2.5, 6.5, 10.0]
    # a counter without a wrap that steps back (a driver reset) adds nothing, never a negative step
    reset = _counter([100, 40, 50])
    assert [reset.joules(t) for t in range(3)] == [0.0, 0.0, 10.0]


def test_a_power_meter_is_integrated_on_the_reader_s_clock():
    bmc = power.Counter({"kind": "bmc"}, iter([100.0, 300.0, 300.0]).__next__, watts=True)
    assert [bmc.joules(t) for t in (10.0, 12.0, 13.0)] == [0.0, 400.0, 700.0]


def test_a_meter_that_cannot_be_read_raises_meter_error():
    with pytest.raises(power.MeterError, match="OSError: gone"):
        _counter([OSError("gone")]).joules(0.0)


class _Clock:
    """Seconds since it was made, remembered as last read: the sampler's clock, read once a sample."""

    def __init__(self) -> None:
        self.origin = time.monotonic()
        self.last = 0.0

    def __call__(self) -> float:
        self.last = time.monotonic() - self.origin
        return self.last


def test_the_sampler_measures_idle_then_the_window():
    clock = _Clock()
    # Two counters of 10 W by the sampler's clock: each reads the time its sample was taken at,
    # so what they report is exact however late the loaded machine's thread runs.
    idle, busy = (
        power.Counter({"kind": "rapl", "zone": "package-0"}, lambda: 10.0 * clock.last, 1.0)
        for _ in range(2)
    )
    sampler = power.Sampler([power.Track(idle), power.Track(busy)], interval_s=0.05, clock=clock)
    sampler.begin()
    time.sleep(0.3)
    sampler.open()
    time.sleep(0.4)
    first, _ = sampler.close()
    assert first["kind"] == "rapl" and first["zone"] == "package-0"
    exact = {"rel": 1e-9}
    assert first["idle_w"] == pytest.approx(10.0, **exact)
    assert first["mean_w"] == pytest.approx(10.0, **exact)
    assert first["peak_w"] == pytest.approx(10.0, **exact)
    assert first["joules"] == pytest.approx(10.0 * first["seconds"], **exact)
    assert first["seconds"] >= 0.4 and first["samples"] >= 2 and first["stopped"] is None


def test_a_meter_that_stops_answering_keeps_what_it_measured_and_says_when():
    track = power.Track(_counter([0, 0, 100, 250, OSError("no such device"), 999]))
    for now in (0.0, 10.0, 11.0, 12.0, 13.0, 14.0):
        track.sample(now, opening=now == 10.0)
    result = track.result()
    assert result["joules"] == 250.0 and result["seconds"] == 2.0
    assert result["peak_w"] == 150.0 and result["samples"] == 3
    assert result["stopped"] == "stopped answering 3 s in (OSError: no such device)"


def test_a_worker_samples_its_node_s_rapl_zones_between_the_run_s_calls(tmp_path):
    import socket

    with RaplStandIn(tmp_path):
        zones, absent = meters.rapl_zones(tmp_path)
        assert absent is None and len(zones) == 2
        key = "test-run"
        assert power.start(key, {"another-node": zones}) is False
        assert power.start(key, {socket.gethostname(): zones}) is True
        time.sleep(0.5)
        assert power.open_window(key) is True
        time.sleep(2.5)
        results = power.stop(key)
    assert power.stop(key) is None and power.open_window(key) is False
    assert [r["zone"] for r in results] == ["package-0", "dram"]
    package, dram = results
    assert package["joules"] == pytest.approx(40.0 * package["seconds"], rel=0.25)
    assert dram["mean_w"] == pytest.approx(5.0, rel=0.25)
    assert package["idle_w"] == pytest.approx(40.0, rel=0.5)
