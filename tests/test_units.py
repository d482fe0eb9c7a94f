"""One unit style everywhere (aiperf.units) and round ticks for the report's plots (aiperf.report.axes)."""

from __future__ import annotations

import pytest

from aiperf.report.axes import round_ticks, si_axis, time_unit
from aiperf.units import (
    exact,
    flop_rate,
    format_ops,
    operations,
    ops_per_sample,
    ops_rate,
    si_prefix,
)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (18_333_012_345.0, "18.3 GOPS"),
        (1.83329e12, "1.83 TOPS"),
        (1.83329e13, "18.3 TOPS"),
        (900e6, "900 MOPS"),
        (999.96e6, "1 GOPS"),  # rounds up to the next prefix, never "1e+03 MOPS"
        (1000.0, "1 kOPS"),
        (12.5, "12.5 OPS"),
        (0.0, "0 OPS"),
        (2.5e21, "2500 EOPS"),  # beyond the largest prefix: whole, no exponent
    ],
)
def test_ops_rate(value, shown):
    assert ops_rate(value) == shown


def test_each_quantity_has_its_unit():
    assert ops_per_sample(4_123_456.0) == "4.12 MOPS/sample"
    assert flop_rate(1.234e9) == "1.23 GFLOP/s"
    assert flop_rate(3.0e14) == "300 TFLOP/s"
    assert operations(1.83329e13) == "18.3 T operations"
    assert operations(512.0) == "512 operations"
    assert exact(18_333_012_345.4) == "18333012345" and exact(0.25) == "0.25"
    assert si_prefix(-2.0e9) == ("G", 1e9)


@pytest.mark.parametrize(
    ("lo", "hi", "time", "ticks"),
    [
        (0.0, 117.0, True, [0, 30, 60, 90, 120]),  # the 3, 38, 74, 109 s
        (3.0, 109.0, True, [0, 30, 60, 90, 120]),
        (0.0, 200.0, True, [0, 60, 120, 180, 240]),  # minutes, not 40 s steps
        (0.0, 5400.0, True, [0, 1800, 3600, 5400]),
        (0.0, 0.37, True, [0, 0.1, 0.2, 0.3, 0.4]),  # under a second: decimal steps
        (0.0, 86.9e9, False, [0, 20e9, 40e9, 60e9, 80e9, 100e9]),
        (0.0, 74e9, False, [0, 20e9, 40e9, 60e9, 80e9]),
        (0.0, 1.0, False, [0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (0.0, 0.00012, False, [0, 2.5e-5, 5e-5, 7.5e-5, 1e-4, 1.25e-4]),  # tiny
        (0.0, 3.7e17, False, [0, 1e17, 2e17, 3e17, 4e17]),  # huge
        (-3.0, 7.0, False, [-4, -2, 0, 2, 4, 6, 8]),
        (5.0, 5.0, False, [4.4, 4.6, 4.8, 5.0, 5.2, 5.4, 5.6]),  # an empty range: one around it
    ],
)
def test_round_ticks(lo, hi, time, ticks):
    got = round_ticks(lo, hi, time=time)
    assert got == pytest.approx(ticks, rel=1e-12, abs=1e-18), got
    assert got[0] <= lo and got[-1] >= hi
    assert 2 <= len(got) <= 7


def test_round_ticks_refuses_what_is_not_a_range():
    with pytest.raises(ValueError, match="finite"):
        round_ticks(0.0, float("nan"))


def test_axis_units():
    assert time_unit([0, 30, 60]) == ("s", 1.0)
    assert time_unit([0, 60, 120]) == ("min", 60.0)
    assert time_unit([0, 1800, 3600]) == ("min", 60.0)
    assert time_unit([0, 3600, 7200]) == ("h", 3600.0)
    label, tick = si_axis([0.0, 25e9, 50e9, 75e9], "OPS")
    assert label == "GOPS" and [tick(v) for v in (0.0, 25e9, 75e9)] == ["0", "25", "75"]
    label, tick = si_axis([0.0, 0.5e12, 1e12], "OPS")
    assert label == "TOPS" and tick(0.5e12) == "0.5"


def test_format_ops_is_the_same_style_for_callers_that_add_a_unit():
    assert format_ops(18_333_012_345.0) + "OPS" == ops_rate(18_333_012_345.0) == "18.3 GOPS"
    assert format_ops(12.5) + "OPS" == "12.5 OPS"
