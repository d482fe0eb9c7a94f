import pytest

from aiperf.config import load_config, machine_cores
from aiperf.errors import UserError
from aiperf.units import parse_duration


@pytest.mark.parametrize(
    "text, seconds",
    [("90s", 90), ("3m", 180), ("1h30m", 5400), ("45", 45), (12, 12), ("2.5m", 150)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


def test_quick_profile_defaults():
    config = load_config("quick")
    assert config.budget_s == 180
    assert config.db == "sqlite:///aiperf.db"
    assert config.workers == machine_cores()
    assert config.data.kind == "synthetic" and config.data.image_size == 32


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"profile": "nope"}, "unknown profile 'nope'"),
        ({"budget": "0"}, "--budget must be positive"),
        ({"budget": "-5"}, "not a duration"),
        ({"budget": "soon"}, "not a duration"),
        ({"workers": 10_000}, "more than this machine can hold"),
        ({"workers": 0}, "at least 1"),
        ({"workers": "many"}, "whole number"),
        ({"overrides": {"train.epochs": 0}}, "train.epochs"),
        ({"overrides": {"data.colour": 1}}, "data.colour"),
    ],
)
def test_bad_values_name_the_problem(kwargs, fragment):
    with pytest.raises(UserError, match=fragment.replace("(", r"\(").replace("+", r"\+")):
        load_config(**{"profile": "quick", **kwargs})
