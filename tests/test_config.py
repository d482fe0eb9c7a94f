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


# --- verify anywhere: this machine is checked where a run starts, not where a config is read ------


# Cores, or devices a trial, beyond any machine this suite runs on (a worker's device is a core).
MANY = 4096


@pytest.mark.parametrize(
    "settings, fragment",
    [
        ({"cluster.cores": MANY}, "more than this machine's"),
        (
            {
                "cluster.devices_per_trial": MANY,
                "train.backend": "jax",
                "data.train_samples": 10**7,
            },
            "more than a worker's",
        ),
        (
            {"cluster.devices_per_trial": 2, "train.backend": "jax", "train.jit_compile": False},
            "needs train.jit_compile: true",
        ),
    ],
)
def test_a_stored_config_validates_on_any_machine_and_a_run_here_is_refused(settings, fragment):
    from aiperf.cluster.start import start_cluster
    from aiperf.config import BenchmarkConfig, devices_problem, local_cores_problem

    stored = load_config("quick", workers=1).model_dump(mode="json")
    for dotted, value in settings.items():  # as a run on a far bigger machine recorded it
        section, key = dotted.split(".")
        stored[section][key] = value
    config = BenchmarkConfig.model_validate(stored)  # as verify, report and resume read it
    assert config.model_dump(mode="json") == stored
    problem = local_cores_problem(config) or devices_problem(config)
    assert problem and fragment in problem
    with pytest.raises(UserError, match=fragment):  # a run that would start here
        load_config("quick", workers=1, overrides=settings)
    with pytest.raises(UserError) as refused, start_cluster(config):  # a resumed or flow's run
        pass
    assert str(refused.value) == problem


def test_judging_a_run_does_not_depend_on_the_judging_machine():
    """Its division is judged by loading its profile with its settings (aiperf.results.division):
    no check of this machine's cores there either."""
    from aiperf.config import BenchmarkConfig
    from aiperf.results.division import classify

    stored = load_config("quick", workers=1).model_dump(mode="json")
    stored["cluster"]["cores"] = MANY
    assert classify(BenchmarkConfig.model_validate(stored)).name == "closed"
