"""Issue 26 items 4 and 5 against the session's real `make serve` (conftest.py's `served_prefect`):

- a run of the `benchmark` deployment whose `out` is below the served folder links its HTML report
  and event log at the reports server, and the report's link opens the report in headless Chromium
  (tests/chromium.py); a path leading out of the folder (to the API's auth string, next to it) is
  refused;
- the automation on a failed nightly exists, names the nightly flow and the FAILED and CRASHED state
  types, and, once a notification block `aiperf-nightly` exists and `python -m aiperf_flows.notify` has run
  again, a nightly run's failure reaches that block: a custom webhook on this machine, here.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from chromium import Chromium
from prefect_serve import REPO, Served, free_port

from aiperf_flows import notify

pytestmark = pytest.mark.slow


def _client(served: Served):
    from prefect.client.orchestration import SyncPrefectClient

    return SyncPrefectClient(served.api, auth_string=served.auth())


def _deployments(served: Served) -> dict:
    with _client(served) as client:

        def deployed():
            try:
                return {d.name: d for d in client.read_deployments()}
            except Exception:
                return None

        return served.wait_for(
            "both deployments", lambda: (d := deployed()) and len(d) == 2 and d, 240
        )


def test_the_report_link_of_a_served_run_opens_in_a_browser(
    served_prefect, served_benchmark_run, tmp_path
):
    served, run = served_prefect, served_benchmark_run  # its `out` is below the served folder
    assert run.final.state.is_failed() and run.final.state.name == "Invalid", run.final.state
    artifacts = {key: data for key, (_, data) in run.artifacts.items()}
    links = {
        key: re.search(r"\]\((\S+)\)", artifacts[key]).group(1)
        for key in ("aiperf-report", "aiperf-event-log")
    }
    for key, link in links.items():
        assert link.startswith(f"{served.reports_url}/{run.out.name}/"), (key, link)
    page = next(run.out.glob("reports/aiperf-report-*.html"))
    title = re.search(r"<title>(.*?)</title>", page.read_text()).group(1)

    with Chromium(tmp_path / "chromium") as browser:
        browser.navigate(links["aiperf-report"])
        assert browser.evaluate("document.title") == title and "aiperf" in title
        assert browser.evaluate("document.body.innerText.length") > 200  # the report, not an error
        log_status = browser.evaluate(
            f"fetch({json.dumps(links['aiperf-event-log'])}).then(r => r.status)"
        )
        assert log_status == 200
        # the API's auth string lies beside the served folder: a way out of it is refused
        auth = served.auth_file.relative_to(served.reports.parent).as_posix()
        outside = served.reports_url + "/..%2f" + auth.replace("/", "%2f")
        browser.navigate(outside)
        text = browser.evaluate("document.body.innerText")
        assert "404" in text and served.auth() not in text
        listing = (
            f"{served.reports_url}/{run.out.name}/reports/"  # nor a listing of what is inside
        )
        assert browser.evaluate(f"fetch({json.dumps(listing)}).then(r => r.status)") == 404


class _Hook(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802  # http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).received.append(json.loads(body or b"{}"))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def test_a_failed_nightly_is_announced_through_the_users_block(served_prefect, tmp_path):
    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings
    from prefect.states import Failed, Scheduled

    served = served_prefect
    deployments = _deployments(served)
    with _client(served) as client:  # make serve made it: the nightly flow, failed or crashed
        (automation,) = served.wait_for(
            "the automation", lambda: client.read_automations_by_name(notify.AUTOMATION), 60
        )
    trigger = automation.trigger.model_dump()
    assert trigger["match"]["prefect.state-type"] == ["FAILED", "CRASHED"]
    assert trigger["match_related"]["prefect.resource.name"] == "aiperf-nightly-regression"
    assert [a.type for a in automation.actions] == ["do-nothing"]  # no block chosen yet
    assert "announced nowhere yet" in served.log.read_text()

    # The user chooses: a notification block named aiperf-nightly (a webhook on this machine here).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_API_URL=served.api, PREFECT_API_AUTH_STRING=served.auth())
    hook = ThreadingHTTPServer(
        ("127.0.0.1", free_port()), type("Hook", (_Hook,), {"received": []})
    )
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    try:
        with temporary_settings(
            {PREFECT_API_URL: served.api, PREFECT_API_AUTH_STRING: served.auth()}
        ):
            CustomWebhookNotificationBlock(
                name="aiperf test hook",
                url=f"http://127.0.0.1:{hook.server_port}/nightly",
                json_data={"subject": "{{subject}}", "body": "{{body}}"},
            ).save(notify.BLOCK, overwrite=True)
        again = subprocess.run(
            [sys.executable, "-m", "aiperf_flows.notify"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert again.returncode == 0 and "Custom Webhook block 'aiperf-nightly'" in again.stderr, (
            again.stderr
        )

        with _client(served) as client:
            (automation,) = client.read_automations_by_name(notify.AUTOMATION)
            assert [a.type for a in automation.actions] == ["send-notification"]
            # A nightly run that fails (a far-off schedule, so the worker never takes it first).
            later = datetime.now(UTC) + timedelta(days=30)
            night = client.create_flow_run_from_deployment(
                deployments["nightly-regression"].id, state=Scheduled(scheduled_time=later)
            )
            client.set_flow_run_state(night.id, Failed(message="OPS fell 20% (test)"), force=True)
            name = night.name
        received = hook.RequestHandlerClass.received
        deadline = time.time() + 120
        while not received and time.time() < deadline:
            time.sleep(0.5)
        assert received, "no notification within 2 minutes: " + served.log.read_text()[-2000:]
        (message,) = received
        assert name in message["subject"] and "Failed" in message["subject"]
        assert (
            "OPS fell 20% (test)" in message["body"]
            and f"{served.ui}/runs/flow-run/" in message["body"]
        )
    finally:
        hook.shutdown()
        hook.server_close()
        with httpx.Client(base_url=served.api, headers=served.headers(), timeout=10) as http:
            http.delete(f"/block_documents/{_block_id(http)}")
        subprocess.run(  # back to "announced nowhere" for any later test of this serve
            [sys.executable, "-m", "aiperf_flows.notify"],
            cwd=REPO,
            env=env,
            capture_output=True,
            timeout=120,
        )


def _block_id(http: httpx.Client) -> str:
    found = http.post("/block_documents/filter", json={"include_secrets": False}).json()
    return next(b["id"] for b in found if b["name"] == notify.BLOCK)
