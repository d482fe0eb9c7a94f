"""Loading a config is a list of layers, lowest first (aiperf.config.layers): the site file's
`system:` facts, the profile, its ruleset, the environment, `--set` and the command line's options,
merged as Dask merges its config. A later layer wins where it sets a value, sections merge key by
key, and a layer that would replace a section with a value is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiperf.config import RunRequest, config_layers, load_config
from aiperf.errors import UserError


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A profile folder whose site file names the machine and its submitter; no database in the
    environment."""
    (tmp_path / "_site.yaml").write_text("system:\n  name: site-name\n  submitter: Site Lab\n")
    monkeypatch.setenv("AIPERF_PROFILE_DIR", str(tmp_path))
    monkeypatch.delenv("AIPERF_DB_URL", raising=False)
    return tmp_path


def _profile(folder: Path, text: str) -> str:
    path = folder / "mine.yaml"
    path.write_text(text)
    return str(path)


def test_each_layer_goes_over_the_ones_below(site, monkeypatch):
    profile = _profile(site, "system:\n  name: profile-name\ndb: sqlite:///profile.db\nseed: 3\n")
    config = load_config(profile, runs_here=False)
    assert (config.system.name, config.system.submitter) == ("profile-name", "Site Lab")
    assert (config.db, config.seed) == ("sqlite:///profile.db", 3)

    monkeypatch.setenv("AIPERF_DB_URL", "sqlite:///environment.db")
    assert load_config(profile, runs_here=False).db == "sqlite:///environment.db"

    overrides = {"db": "sqlite:///set.db", "seed": 4, "system.cooling": "air"}
    config = load_config(profile, overrides=overrides, runs_here=False)
    assert (config.db, config.seed) == ("sqlite:///set.db", 4)
    assert (config.system.name, config.system.submitter, config.system.cooling) == (
        "profile-name",
        "Site Lab",
        "air",
    ), "a --set merges into the section: the site's and the profile's facts stay"

    config = load_config(profile, overrides=overrides, db="sqlite:///option.db", seed=5)
    assert (config.db, config.seed) == ("sqlite:///option.db", 5)


def test_the_layers_are_listed_lowest_first(site):
    layers = config_layers(RunRequest("quick", overrides={"seed": 7}, budget="2m"))
    site_layer, profile, name, ruleset, environment, overrides, options = layers
    assert site_layer == {"system": {"name": "site-name", "submitter": "Site Lab"}}
    assert name == {"profile": "quick"} and profile["ruleset"]
    assert set(ruleset) == {"validity"} and environment == {}
    assert (overrides, options) == ({"seed": 7}, {"budget": "2m"})


def test_a_set_mapping_merges_into_its_section(site):
    config = load_config("quick", overrides={"system": {"cooling": "air"}}, runs_here=False)
    assert (config.system.name, config.system.cooling) == ("site-name", "air")


def test_a_packaged_profiles_validity_is_its_rulesets_alone():
    """The ruleset's layer merges over the profile's: the same as replacing it while no packaged
    profile has a validity section of its own."""
    from aiperf.config import available_profiles

    for name in available_profiles():
        _, profile, _, ruleset, *_ = config_layers(RunRequest(name))
        assert "validity" not in profile and set(ruleset) == {"validity"}, name


def test_a_profile_file_cannot_name_itself_a_packaged_profile(site):
    profile = _profile(site, "profile: quick\n")
    assert load_config(profile, runs_here=False).profile.startswith("custom-")


@pytest.mark.parametrize(
    "text, kwargs, message",
    [
        (
            "data: 5\n",
            {"overrides": {"data.kind": "digits"}},
            "cannot set data.kind: data is not a section",
        ),
        (
            "data:\n",
            {"overrides": {"data.kind": "digits"}},
            "cannot set data.kind: data is not a section",
        ),
        (
            "seed: 1\n",
            {"overrides": {"seed": 2, "seed.x": 3}},
            "cannot set seed.x: seed is not a section",
        ),
        ("cluster: slurm\n", {"cluster": {"cores": 2}}, "cluster: must be a mapping of settings"),
        (
            "{}\n",
            {"overrides": {"cluster": "slurm"}, "cluster": "pbs"},
            "cluster: must be a mapping of settings",
        ),
        ("system: lab\n", {}, "system: must be a mapping of facts"),
        ("data:\n  1: 2\n", {}, "invalid setting data.1: Keys should be strings"),
    ],
)
def test_a_layer_that_would_replace_a_section_is_refused_in_one_line(site, text, kwargs, message):
    with pytest.raises(UserError) as refused:
        load_config(_profile(site, text), runs_here=False, **kwargs)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)
