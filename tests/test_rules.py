"""Rules as versioned data and the two divisions: a packaged profile changed only where and how long
it runs is closed; every other change, by any path, is open with each deviation listed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from aiperf.config import available_profiles, load_config
from aiperf.errors import UserError
from aiperf.results.division import CLOSED, OPEN, classify
from aiperf.rules import DEFAULT_RULESET, load_ruleset

# The inflation a new user tried: easier data, a huge validation set (a higher accuracy cap), no floor,
# a shorter minimum budget, and the result filed under another profile.
INFLATION = {
    "data.noise": 0,
    "data.clutter": 0,
    "data.label_noise": 0,
    "data.val_samples": 100000,
    "validity.accuracy_floor": 0,
    "validity.min_budget": "10s",
}


def test_every_packaged_profile_names_a_ruleset_that_judges_it():
    assert load_ruleset(DEFAULT_RULESET).name == "aiperf-rules-1.0"
    for profile in available_profiles():
        config = load_config(
            profile,
            workers=1,
            overrides={"data.source": "/data"} if profile == "imagenet" else None,
        )
        assert config.ruleset is not None
        ruleset = load_ruleset(config.ruleset)
        rules = ruleset.for_profile(profile)
        assert config.ruleset == ruleset.name
        assert (config.validity.min_budget_s, config.validity.accuracy_floor) == (
            rules.min_budget_s,
            rules.accuracy_floor,
        )
        assert config.search.seed_architecture == rules.seed_architecture


def test_where_and_how_long_keep_a_run_closed():
    config = load_config(
        "quick",
        budget="10m",
        workers=1,
        db="sqlite:///elsewhere.db",
        out="/tmp/o",
        overrides={
            "cluster.kind": "slurm",
            "cluster.queue": "gpu",
            "cluster.walltime": "01:00:00",
        },
    )
    division = classify(config)
    assert division.name == CLOSED and division.deviations == ()
    assert division.config_hash == classify(load_config("quick", workers=1)).config_hash, (
        "same workload"
    )


def test_the_inflation_is_open_with_every_deviation_listed():
    division = classify(load_config("quick", workers=1, overrides=INFLATION))
    assert division.name == OPEN
    changed = {d.split(":")[0] for d in division.deviations}
    assert changed == {
        "data.noise",
        "data.clutter",
        "data.label_noise",
        "data.val_samples",
        "validity.accuracy_floor",
        "validity.min_budget_s",
    }
    assert "data.val_samples: 1000 -> 100000" in division.deviations
    assert division.config_hash != classify(load_config("quick", workers=1)).config_hash


@pytest.mark.parametrize(
    "overrides",
    [{"search.oracle": "random"}, {"train.epochs": [1]}, {"train.trainer": "simulated"}],
)
def test_any_other_change_is_open(overrides):
    assert classify(load_config("quick", workers=1, overrides=overrides)).name == OPEN


def test_other_data_is_open_even_with_a_settable_source(tmp_path):
    division = classify(
        load_config(
            "quick", workers=1, overrides={"data.kind": "folder", "data.source": str(tmp_path)}
        )
    )
    assert division.name == OPEN and "data.kind: 'synthetic' -> 'folder'" in division.deviations
    assert not any(d.startswith("data.source") for d in division.deviations), (
        "where the data is, is settable"
    )


def test_a_seed_of_ones_own_is_open():
    assert classify(load_config("quick", workers=1, seed=5)).deviations == ("seed: 0 -> 5",)


@pytest.mark.parametrize("key", ["profile", "ruleset"])
def test_profile_and_ruleset_cannot_be_overridden(key):
    with pytest.raises(UserError, match=f"{key} cannot be overridden"):
        load_config("quick", overrides={key: "imagenet"})


def test_a_profile_file_is_custom_whatever_it_says(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "profile: imagenet\nruleset: aiperf-rules-1.0\nbudget: 1m\ndata: {kind: synthetic}\n"
    )
    config = load_config(str(path), workers=1)
    assert config.profile.startswith("custom-") and len(config.profile) == len("custom-") + 12
    division = classify(config)
    assert division.name == OPEN and "is not a packaged profile" in division.deviations[0]


def test_cli_refuses_to_relabel_a_run():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "aiperf.cli.main",
            "run",
            "--set",
            "profile=imagenet",
            "--budget",
            "5s",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "profile cannot be overridden" in result.stderr
    assert "Traceback" not in result.stderr
