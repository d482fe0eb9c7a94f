"""`make serve` for real: infra/prefect/serve.sh starts a Prefect server, creates the work pool,
deploys prefect.yaml and starts a worker; a run of the `benchmark` deployment created through the
API (as the UI's "Run" button does) completes with its task runs, logs and artifacts. The API answers
only requests with the session's auth string, which serve.sh made up (conftest.py's `served_prefect`,
shared with tests/test_prefect_ui.py: serve.sh in its own process group, against a fresh
PREFECT_HOME and a free port)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from conftest import TINY

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def test_the_served_api_answers_only_with_its_auth_string(served_prefect):
    api = served_prefect.api

    def healthy() -> bool:  # /health answers anyone, as load balancers and serve.sh ask it
        try:
            return httpx.get(f"{api}/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    served_prefect.wait_for("the API", healthy, 240)
    mode = served_prefect.auth_file.stat().st_mode & 0o777
    assert mode == 0o600, oct(mode)
    user, _, password = served_prefect.auth().partition(":")
    assert user == "aiperf" and len(password) >= 32
    wrong = httpx.BasicAuth(user, password[::-1])
    for auth in (None, wrong):
        answer = httpx.post(f"{api}/deployments/filter", json={}, auth=auth, timeout=10)
        assert answer.status_code == 401, answer.text
    answer = httpx.post(
        f"{api}/deployments/filter", json={}, headers=served_prefect.headers(), timeout=10
    )
    assert answer.status_code == 200, answer.text
    settings = httpx.get(f"{served_prefect.ui}/ui-settings", timeout=10).json()
    assert settings["auth"] == "BASIC"  # the UI asks for it on its login page
    assert "Authorization" not in served_prefect.log.read_text()
    assert password not in served_prefect.log.read_text()


def test_benchmark_deployment_runs_from_the_api(served_prefect, served_benchmark_run):
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        LogFilter,
        LogFilterFlowRunId,
    )

    log = served_prefect.log
    run = served_benchmark_run  # quick, 8 s, one worker, created through the API as the UI does
    deployments, db = run.deployments, run.db
    with SyncPrefectClient(served_prefect.api, auth_string=served_prefect.auth()) as client:
        nightly = deployments["nightly-regression"]
        # Issue 26 item 1: the run form says what to type: a description for every parameter, and
        # no whole `config` (that is `aiperf run`'s own flow, aiperf_flows.benchmark:benchmark_config).
        # One type each (no field whose type is only null), `profile` a choice of names and
        # `overrides` an object, which the form edits as JSON (tests/test_flow_parameters.py has
        # the same of the schemas `prefect deploy` makes).
        for name, deployment in deployments.items():
            schema = deployment.parameter_openapi_schema["properties"]
            assert "config" not in schema, name
            assert all(p.get("description") for p in schema.values()), {
                k: p for k, p in schema.items() if not p.get("description")
            }
            assert all(p.get("type") not in (None, "null") for p in schema.values()), schema
            assert {"quick", "nightly"} <= set(schema["profile"]["enum"]), schema["profile"]
            assert schema["overrides"]["type"] == "object", schema["overrides"]
            assert deployment.enforce_parameter_schema, name
        cluster = deployments["benchmark"].parameter_openapi_schema["properties"]["cluster"]
        assert "slurm" in json.dumps(cluster), cluster
        assert (
            nightly.global_concurrency_limit is not None
            and nightly.global_concurrency_limit.limit == 1
        )
        assert [(s.schedule.cron, s.schedule.timezone) for s in nightly.schedules] == [
            ("0 2 * * *", "UTC")
        ]
        assert (
            nightly.work_pool_name == "aiperf"
            and deployments["benchmark"].work_pool_name == "aiperf"
        )
        assert client.read_work_pool("aiperf").type == "process"

        # 8 s is under the quick profile's minimum: scored, but no result to publish, so the run
        # ends in a failed state named for it, never a green Completed (issue 26 item 2).
        final = run.final
        assert final.state.is_failed() and final.state.name == "Invalid", (
            f"{final.state}\n{log.read_text()[-4000:]}"
        )
        assert "too short: budget 8 s" in (final.state.message or "")

        tasks = client.read_task_runs(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id]))
        )
        names = {t.name.split("-")[0] for t in tasks}
        assert {"stage_dataset", "trial", "score", "report"} <= names, names
        assert all(t.state.is_completed() for t in tasks)
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id]))
        )
        assert any("search started on 1 workers" in entry.message for entry in logs)

        # The nightly deployment: its entrypoint is the flow tests/test_regression_flow.py runs end
        # to end (first run sets the baseline, a planted better one is flagged), and the parameters
        # a nightly run is made with pass its schema (a run of its own here would repeat that
        # test's first run through this worker: half a minute of CPU on a slow machine).
        from prefect.flows import load_flow_from_entrypoint

        from aiperf_flows.nightly import nightly as nightly_flow

        loaded = load_flow_from_entrypoint(str(ROOT / nightly.entrypoint))
        assert loaded.name == nightly_flow.name == "aiperf-nightly-regression", loaded.name
        assert loaded.fn.__code__.co_code == nightly_flow.fn.__code__.co_code
        loaded.validate_parameters(
            {"budget": "8s", "workers": 1, "db": f"sqlite:///{db}", "overrides": TINY}
        )
    kinds = {key: kind for key, (kind, _) in run.artifacts.items()}
    # A link artifact is stored (and shown) as markdown holding the link.
    assert kinds == {
        "aiperf-score": "table",
        "aiperf-score-summary": "markdown",
        "aiperf-report": "markdown",
        "aiperf-report-summary": "markdown",
        "aiperf-event-log": "markdown",
        "aiperf-progress": "progress",  # the budget used, updated as the run went (item 3)
        "aiperf-best": "markdown",  # the best figures so far, a version per milestone
    }, kinds
    # Its `out` is below the served folder: the link is the reports server's (tests/test_serve_reports.py
    # opens it in a browser), to the page the run wrote.
    page = next(run.out.glob("reports/aiperf-report-*.html"))
    assert page.read_text().startswith("<!DOCTYPE html>")
    link = run.artifacts["aiperf-report"][1]
    assert f"({served_prefect.reports_url}/" in link and page.name in link, link
    summary = run.artifacts["aiperf-report-summary"][1]
    assert "## Score over time" in summary and page.name in summary
    assert db.is_file()
