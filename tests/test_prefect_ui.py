"""The Prefect UI in a real browser: infra/prefect/serve.sh (as `make serve` runs it) and Debian's
headless Chromium over the DevTools protocol. Through the UI's own pages, as a user would: the
`benchmark` and `nightly-regression` deployments and the nightly schedule; a `benchmark` run started
from Run -> Custom run with its own budget and profile; its flow run page until it ends Invalid (a
run of seconds is too short to be valid, and the UI must not show it as a success); its task runs
and artifacts; and the HTML report it links, which shows the run completed. Every page is
saved as a screenshot under the test's temporary folder, and a page that shows an error fails it.
The served Prefect is the one tests/test_deployments.py uses too (conftest.py's `served_prefect`):
its server may already hold that test's flow runs, as a user's server holds earlier runs.

The UI is the one a browser opening the server's address gets: Prefect 3's V2 UI (React), under /v2.
Its run form has one typed field per parameter (issue 26 item 1): the custom profile is a profile
file, the packaged `quick` profile with the tests' TINY settings and simulated trials (the walk is
through the flow run's pages, not what trains), which serve.sh's worker has in its
AIPERF_PROFILE_DIR from the start (prefect_serve.tiny_profile), chosen in the form's list of
profiles (a flow run's profile is a name, never a path). The API
takes basic authentication, so the walk starts on the UI's login page, with serve.sh's auth string."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from chromium import Chromium
from prefect_serve import Served

pytestmark = pytest.mark.slow

RUN_NAME = "ui-tiny-run"
BUDGET = "5s"
OVERRIDES = {"system.name": "ui-machine"}  # typed into the form's JSON editor; the report names it
TASKS = {"stage_dataset", "trial", "score", "verify", "report"}
ARTIFACTS = {
    "aiperf-score": "TABLE",
    "aiperf-score-summary": "MARKDOWN",
    "aiperf-report-summary": "MARKDOWN",
    "aiperf-report": "MARKDOWN",
    "aiperf-progress": "PROGRESS",  # the budget used (issue 26 item 3)
    "aiperf-best": "MARKDOWN",  # the best figures so far
}
# The V2 UI's analytics library fetches its remote settings when the page loads, whatever the
# server's analytics setting; with analytics off (DO_NOT_TRACK, serve.sh) it sends no event. The
# browser resolves no name but 127.0.0.1, so nothing leaves the machine either way.
ANALYTICS_SETTINGS_HOST = "sr-client-cfg.amplitude.com"


def js(value: str) -> str:
    return json.dumps(value)


def by_text(selector: str, text: str, root: str = "document") -> str:
    """A JavaScript expression: the first element matching `selector` whose whole text is `text`."""
    return f"[...{root}.querySelectorAll({js(selector)})].find(e => e.textContent.trim() === {js(text)})"


def parameter(label: str) -> str:
    """The run form's block for one parameter, found by its label ("budget (Optional)")."""
    return f"({by_text('label', label)})?.closest('div.group')"


ACTIVE_PANEL = "document.querySelector('[role=tabpanel][data-state=active]')"
STATE_BADGE = "document.querySelector('main nav + div [data-slot=badge]')?.textContent.trim()"

# What the UI shows when something went wrong: its error boundary ("Something went wrong"), a page
# or record that is not there ("Not Found", "Flow Run Not Found", "Deployment not found"), React
# Router's crash page, and error toasts. Normal text (a log line, a parameter named "errors") does
# not match: each pattern is a whole line of the page's text.
ERRORS = r"""
(() => {
  const found = [...document.querySelectorAll('[data-sonner-toast][data-type=error]')]
    .map(t => 'toast: ' + t.innerText);
  const patterns = [/^Something went wrong/i, /^(\d{3} )?Not Found$/i, /^[A-Z][\w ]* (not found|Not Found)$/,
                    /does not exist or has been deleted/, /Unexpected Application Error/i, /^Application error/i];
  for (const line of document.body.innerText.split('\n').map(l => l.trim()))
    if (patterns.some(p => p.test(line))) found.push(line);
  return found;
})()
"""


class UI:
    """The browser on the served UI: clicks, waits, screenshots, and a check for errors on each page."""

    def __init__(
        self, browser: Chromium, server: Served, shots: Path, started: float, timings: list[str]
    ) -> None:
        self.browser, self.server, self.shots = browser, server, shots
        self.seen_events = 0
        self.count = 0
        self.started, self.timings = (
            started,
            timings,
        )  # when each page was seen (shots/timings.txt)

    def wait(
        self,
        expression: str,
        what: str,
        timeout: float = 60,
        interval: float = 0.5,
        reload: str | None = None,
        reload_every: float = 10,
    ):
        """Poll until the expression is truthy; `reload`: a URL to open again now and then, for lists
        the page does not refresh by itself (as a user presses F5)."""
        deadline = time.time() + timeout
        reloaded = time.time()
        expression = (
            f"(v => v instanceof Node ? true : v)({expression})"  # an element: found, not returned
        )
        while True:
            value = self.browser.evaluate(expression)
            if value:
                return value
            if reload is not None and time.time() - reloaded > reload_every:
                self.browser.navigate(reload)
                reloaded = time.time()
            self.check(what)
            if self.server.process.poll() is not None:
                pytest.fail(
                    f"serve.sh exited before {what}:\n{self.server.log.read_text()[-4000:]}"
                )
            if time.time() > deadline:
                self.shot("timed-out")
                pytest.fail(
                    f"timed out waiting for {what} on {self.location()}:\n{self.text()[:6000]}"
                )
            time.sleep(interval)

    def click(self, element: str, what: str) -> None:
        self.wait(element, what, timeout=30)
        self.browser.click(element, what)

    def follow(self, link: str, what: str, attempts: int = 3, patience: float = 10) -> None:
        """Click a link and wait until the page is the link's. A click can land while the list under
        it re-renders (the flows' names arrive after the rows, most on a busy machine) and open
        nothing; a user clicks again, and so does this (the link found afresh each time)."""
        anchor = f"({link})?.closest('a')"
        href = self.wait(f"({anchor})?.href", what, timeout=30)
        there = f"location.pathname === {js(urlparse(href).path)}"
        for attempt in range(1, attempts + 1):
            if self.wait(f"({there}) ? 'there' : ({anchor})", what, timeout=30) == "there":
                return  # the last click opened it after all
            self.browser.click(anchor, what)
            try:
                self.browser.wait_until(there, patience, f"{what} to open")
                return
            except TimeoutError:
                self.shot(f"click-again-{attempt}")
        pytest.fail(f"{attempts} clicks on {what} did not open it: still on {self.location()}")

    def text(self, root: str = "document.body") -> str:
        return self.browser.evaluate(f"({root})?.innerText ?? ''")

    def location(self) -> str:
        return self.browser.evaluate("location.href")

    def shot(self, name: str, full_page: bool = False) -> Path:
        self.count += 1
        path = self.shots / f"{self.count:02d}-{name}.png"
        self.browser.screenshot(path, full_page=full_page)
        self.timings.append(f"{time.time() - self.started:7.1f} s  {path.name}")
        (self.shots / "timings.txt").write_text("\n".join(self.timings) + "\n")
        return path

    def check(self, where: str) -> None:
        """Fail when the page shows an error, threw one, or one of its calls to the API failed."""
        shown = self.browser.evaluate(ERRORS)
        problems = [f"the page shows {line!r}" for line in shown]
        events, self.seen_events = (
            self.browser.events[self.seen_events :],
            len(self.browser.events),
        )
        for event in events:
            params = event.get("params", {})
            if event.get("method") == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                problems.append(
                    f"the page threw {details.get('exception', {}).get('description', details['text'])}"
                )
            elif event.get("method") == "Network.responseReceived":
                response = params["response"]
                # 503: the API asks to be asked again (SQLite busy); the UI does, and shows an error if that fails too
                if (
                    response["status"] >= 400
                    and response["status"] != 503
                    and response["url"].startswith(self.server.api)
                ):
                    problems.append(f"{response['url']} answered {response['status']}")
        if problems:
            self.shot("error")
            pytest.fail(f"{where} ({self.location()}): " + "; ".join(problems))

    def page(
        self, name: str, ready: str, what: str, timeout: float = 60, reload: str | None = None
    ) -> None:
        """Wait until the page shows what it should, check it for errors and save its screenshot."""
        self.wait(ready, what, timeout, reload=reload)
        time.sleep(0.5)  # what loads beside it (counts, badges) settles
        self.check(what)
        self.shot(name)

    def submit_run(self, submitted: str, attempts: int = 6) -> None:
        """Press Submit until the run is created. The server's SQLite database is often locked for
        a moment (Prefect's known "database is locked", PrefectHQ/prefect#18934; most on a busy
        machine): the API answers 503 (Service Unavailable: try again), which the UI does not, and
        shows "Unknown error while creating flow run.". A user submits again, and so does this, for
        that answer only. Any other error fails the test."""
        errors = "[...document.querySelectorAll('[data-sonner-toast][data-type=error]')].map(t => t.innerText)"
        for attempt in range(1, attempts + 1):
            self.click(by_text("button", "Submit"), "Submit")
            outcome = self.browser.wait_until(
                f"(v => v instanceof Node ? 'created' : v)(({submitted}) || ({errors}).join('; '))",
                60,
                "the run to be created",
            )
            answers = [
                e["params"]["response"]["status"]
                for e in self.browser.events[self.seen_events :]
                if e.get("method") == "Network.responseReceived"
                and e["params"]["response"]["url"].endswith("/create_flow_run")
            ]
            if outcome == "created" or attempt == attempts or set(answers) != {503}:
                return  # the caller checks the page
            self.shot(f"submit-retried-{attempt}")
            self.browser.wait_until(f"({errors}).length === 0", 30, "the error toast to go")

    def fill(self, label: str, text: str) -> None:
        """Type a parameter's value into its field of the run form: one typed field each."""
        block = parameter(label)
        assert not self.browser.evaluate(f"({block})?.querySelector('[role=tab]')"), (
            f"{label} offers a choice of types, not one typed field"
        )
        field = f"({block})?.querySelector('textarea, input:not([type=hidden])')"
        self.wait(field, f"the field of {label}", 10)
        self.browser.type_into(field, text, label)
        self.wait(f"({field}).value === {js(text)}", f"{label} to read {text!r}", 10)


def served_deployments(server: Served) -> dict[str, dict]:
    def deployments():
        try:
            found = httpx.post(
                f"{server.api}/deployments/filter", json={}, headers=server.headers(), timeout=5
            ).json()
        except (httpx.HTTPError, ValueError):
            return None
        named = {d["name"]: d for d in found} if isinstance(found, list) else {}
        return named if {"benchmark", "nightly-regression"} <= set(named) else None

    return server.wait_for("both deployments", deployments, 420)


def test_a_benchmark_run_launched_and_followed_in_the_prefect_ui(served_prefect, tmp_path):
    profile = served_prefect.profiles / "tiny-profile.yaml"  # the worker's from the start
    assert profile.is_file()
    db, out = tmp_path / "aiperf.db", tmp_path / "out"
    shots = tmp_path / "screenshots"
    shots.mkdir()
    started = time.time()
    server = served_prefect  # serve.sh, shared with tests/test_deployments.py (conftest.py)
    served_deployments(server)
    # serve.sh has deployed prefect.yaml: from here on, only the UI
    timings = [f"{time.time() - started:7.1f} s  serve.sh: server, work pool and deployments up"]
    with Chromium(
        tmp_path / "chromium-profile",
        window=(1400, 1600),
        args=("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",),
    ) as browser:
        for domain in ("Page", "Runtime", "Network"):
            browser.call(f"{domain}.enable")
        browser.call(
            "Emulation.setTimezoneOverride", timezoneId="UTC"
        )  # times shown as the schedule's
        ui = UI(browser, server, shots, started, timings)
        report = walk_through(ui, server, profile, db, out)
        external = {
            re.sub(r"^\w+://([^/:]+).*", r"\1", e["params"]["request"]["url"])
            for e in browser.events
            if e.get("method") == "Network.requestWillBeSent"
            and re.match(r"https?://", e["params"]["request"]["url"])
            and not e["params"]["request"]["url"].startswith(server.ui)
        }
    assert external <= {ANALYTICS_SETTINGS_HOST}, (
        f"the UI sent requests off this machine: {external}"
    )
    assert db.is_file() and report.is_file()
    assert len(list(shots.glob("*.png"))) >= 12


def walk_through(ui: UI, server: Served, profile: Path, db: Path, out: Path) -> Path:
    browser = ui.browser

    # The server's address opens the UI's dashboard.
    browser.navigate(
        server.ui + "/", timeout=120
    )  # the first load: the server sends the whole bundle
    # The API needs the auth string, which the UI asks for on its login page. Until then the page it
    # was sent to fails by design (401, "Something went wrong" as it redirects): checked from here on.
    password = "document.querySelector('input[type=password]')"
    browser.wait_until(f"!!{password}", 120, "the login page")
    ui.shot("login")
    browser.type_into(password, server.auth(), "the auth string")
    browser.click(by_text("button", "Login"), "Login")
    browser.wait_until(
        f"location.pathname.startsWith('/v2/dashboard') && !{password}", 60, "login"
    )
    ui.seen_events = len(browser.events)
    ui.page(
        "dashboard",
        f"location.pathname.startsWith('/v2/dashboard') && {by_text('a', 'Deployments')}",
        "the dashboard",
    )

    # Deployments: both, the nightly one with its schedule at 02:00, active.
    ui.follow(by_text("a", "Deployments"), "Deployments in the sidebar")
    row = "({link})?.closest('tr')?.innerText"
    benchmark_row = row.format(link=by_text("main a", "benchmark"))
    nightly_row = row.format(link=by_text("main a", "nightly-regression"))
    # (each row's flow name comes with the flows' own query, after the row itself)
    ui.page(
        "deployments",
        f"({benchmark_row})?.includes('aiperf-benchmark') && "
        f"({nightly_row})?.includes('aiperf-nightly-regression')",
        "the deployments list",
    )
    assert "aiperf-benchmark" in browser.evaluate(benchmark_row)
    nightly = browser.evaluate(nightly_row)
    assert (
        "aiperf-nightly-regression" in nightly and "At 02:00 AM" in nightly and "Active" in nightly
    ), nightly

    # The nightly deployment's page: the schedule (cron 0 2 * * * in UTC, as its edit form shows),
    # one run at a time, and its next run tonight at 02:00 UTC.
    ui.follow(by_text("main a", "nightly-regression"), "the nightly-regression deployment")
    schedule = (
        "[...document.querySelectorAll('[data-slot=card]')]"
        ".find(c => c.innerText.trim().startsWith('At 02:00 AM'))"
    )
    ui.page(
        "nightly-regression",
        f"({schedule}) && /Next Run[\\s\\S]*Scheduled/.test(document.querySelector('main').innerText)",
        "the nightly schedule",
    )
    assert (
        browser.evaluate(
            f"({schedule}).querySelector('[role=switch]').getAttribute('aria-checked')"
        )
        == "true"
    )
    details = ui.text("document.querySelector('main')")
    assert "flows/nightly.py:nightly" in details and re.search(
        r"Concurrency Limit\s+1\n", details
    ), details
    assert re.search(r"Next Run[\s\S]*Scheduled\s+\d{4}/\d\d/\d\d 02:00:00 AM", details), details
    ui.click(f"({schedule}).querySelector('button[aria-haspopup=menu]')", "the schedule's menu")
    ui.click(by_text("[role=menuitem]", "Edit"), "Edit schedule")
    cron = "document.querySelector('[role=dialog] input[name=\"schedule.cron\"]')?.value"
    ui.page("nightly-schedule", cron, "the schedule's form")
    assert browser.evaluate(cron) == "0 2 * * *"
    assert "Timezone\nUTC" in ui.text("document.querySelector('[role=dialog]')")
    ui.click(
        "[...document.querySelectorAll('[role=dialog] button')].filter(b => b.textContent.trim() === 'Close').at(-1)",
        "Close (the schedule is left as it is)",
    )
    ui.wait("!document.querySelector('[role=dialog]')", "the schedule's form to close", 10)

    # The benchmark deployment: Run -> Custom run.
    ui.follow(by_text("a", "Deployments"), "Deployments in the sidebar")
    ui.follow(by_text("main a", "benchmark"), "the benchmark deployment")
    ui.page(
        "benchmark",
        f"({by_text('button', 'Run')}) && "
        "document.querySelector('main').innerText.includes('flows/benchmark.py:benchmark')",
        "the benchmark deployment's page",
    )
    ui.click(by_text("button", "Run"), "Run")
    ui.click(by_text("[role=menuitem]", "Custom run"), "Custom run")
    ui.page(
        "custom-run",
        f"location.pathname.endsWith('/run') && {parameter('profile (Optional)')}",
        "the run form",
    )

    run_name = f"document.getElementById({by_text('label', 'Run Name')}?.htmlFor)"
    ui.wait(run_name, "the run name field")
    browser.type_into(run_name, RUN_NAME, "Run Name")
    # profile: a choice of the packaged profiles and the worker's AIPERF_PROFILE_DIR's, by name.
    ui.click("document.querySelector('[aria-label=\"Select profile\"]')", "the profile's list")
    options = "[...document.querySelectorAll('[role=option]')].map(o => o.textContent.trim())"
    ui.wait(f"{options}.includes({js(profile.stem)})", "the profile's choices", 10)
    assert {"quick", "nightly", profile.stem} <= set(browser.evaluate(options))
    ui.click(by_text("[role=option]", profile.stem), f"profile {profile.stem}")
    # The list stays open over the fields below it until Escape (or a click elsewhere) closes it.
    browser.press("Escape", "Escape", 27)
    ui.wait(
        "!document.querySelector('[role=option]') && "
        "document.querySelector('[aria-label=\"Select profile\"]')?.textContent.trim() === "
        + js(profile.stem),
        "the chosen profile, its list closed",
        10,
    )
    ui.fill("budget (Optional)", BUDGET)
    ui.fill("workers (Optional)", "1")
    ui.fill("db (Optional)", f"sqlite:///{db}")
    ui.fill("seed (Optional)", "5")
    ui.fill("out (Optional)", str(out))
    overrides = parameter("overrides (Optional)")
    assert browser.evaluate(f"!!({overrides})?.querySelector('[data-language=json]')"), (
        "overrides has a JSON editor"
    )
    # Typed into it as a user would: a click, Ctrl+A over its "{}", then the text.
    editor = f"({overrides})?.querySelector('[contenteditable=true]')"
    browser.click(editor, "the overrides editor")
    browser.press("a", "KeyA", 65, modifiers=2, command="selectAll")  # Ctrl+A
    browser.call("Input.insertText", text=json.dumps(OVERRIDES))
    ui.wait(
        f"JSON.stringify(JSON.parse(({editor}).innerText)) === {js(json.dumps(OVERRIDES, separators=(',', ':')))}",
        "the overrides typed",
        10,
    )
    ui.check("the filled run form")
    ui.shot("custom-run-filled")
    view_run = f"({by_text('[data-sonner-toast] button', 'View run')})?.closest('a')"
    ui.submit_run(view_run)

    # Back on the deployment, a toast links the new flow run.
    ui.page(
        "run-submitted",
        f"({view_run}) && [...document.querySelectorAll('[data-sonner-toast]')]"
        f".some(t => t.innerText.includes({js(RUN_NAME + ' scheduled to start now')}))",
        "the run's toast",
    )
    flow_run = browser.evaluate(f"({view_run}).getAttribute('href')")
    assert re.fullmatch(r"/v2/runs/flow-run/[0-9a-f-]{36}", flow_run), flow_run
    ui.click(view_run, "View run")

    # The flow run's page, followed (it updates itself) until the run is over.
    ui.wait(f"location.pathname === {js(flow_run)} && {STATE_BADGE}", "the flow run's page")
    assert RUN_NAME in ui.text("document.querySelector('main nav')")
    final = ui.wait(
        f"(s => ['Completed', 'Failed', 'Crashed', 'Cancelled', 'Invalid', 'Unverified']"
        f".includes(s) && s)({STATE_BADGE})",
        "the flow run to end",
        timeout=420,
        interval=1,
    )
    ui.shot(f"flow-run-{final.lower()}")
    assert final == "Invalid", (  # scored, but too short: a failed state named for why
        f"the flow run ended {final}:\n{ui.text()[-3000:]}\n{server.log.read_text()[-3000:]}"
    )

    # Opened afresh, the page draws the run's graph of task runs (what it loaded while the run went
    # on is not all redrawn).
    browser.navigate(server.ui + flow_run)
    ui.page("flow-run", f"{STATE_BADGE} === 'Invalid'", "the ended flow run's page")

    # Its parameters are the form's.
    ui.click(by_text("[role=tab]", "Parameters"), "the Parameters tab")
    ui.page(
        "parameters", f"{ACTIVE_PANEL}?.innerText.includes('\"budget\"')", "the run's parameters"
    )
    parameters = json.loads(re.search(r"\{[\s\S]*\}", ui.text(ACTIVE_PANEL)).group(0))
    assert {
        k: parameters[k]
        for k in ("profile", "budget", "workers", "db", "seed", "out", "overrides")
    } == {
        "profile": profile.stem,
        "budget": BUDGET,
        "workers": 1,
        "db": f"sqlite:///{db}",
        "seed": 5,
        "out": str(out),
        "overrides": OVERRIDES,
    }

    # Its logs: the search ran for the form's budget.
    ui.click(by_text("[role=tab]", "Logs"), "the Logs tab")
    ui.page(
        "logs",
        f"{ACTIVE_PANEL}?.innerText.includes('search started on 1 workers, budget 5 s')",
        "the search's log line",
    )

    # Its task runs, every one completed: stage_dataset, one per trial, score, verify, report.
    ui.click(by_text("[role=tab]", "Task Runs"), "the Task Runs tab")
    names = (
        "(t => t.split('\\n').map(l => l.trim())"
        ".filter(l => /^(stage_dataset|trial|score|verify|report)-\\w+$/.test(l)))"
        f"({ACTIVE_PANEL}?.innerText ?? '')"
    )
    # (A trial's task run, reported from its Dask worker, may be recorded after the flow run ends.)
    ui.page(
        "task-runs",
        "(n => ['stage_dataset', 'trial', 'score', 'verify', 'report']"
        f".every(k => n.some(t => t.startsWith(k + '-'))))({names})",
        "the task runs",
        timeout=120,
        reload=server.ui + flow_run + "?tab=TaskRuns",
    )
    tasks = browser.evaluate(names)
    assert {t.split("-")[0] for t in tasks} == TASKS, tasks
    panel = ui.text(ACTIVE_PANEL)
    # A trial the deadline cut is shown Stopped (a completed state), the others Completed. Whether the
    # deadline cuts one depends on the machine's speed (a trial may end just before it): the count of
    # Stopped is shown only when there is one (tests/test_benchmark_flow.py checks the naming itself).
    counts = re.search(
        rf"\b{len(tasks)} Task runs\s+\((\d+) Completed(?:, (\d+) Stopped)?\)", panel
    )
    assert counts and sum(int(n or 0) for n in counts.groups()) == len(tasks), panel

    # Its artifacts: the score table, its summary, the score over time and the report's link (the
    # link is shown as text: the UI's markdown drops file:// addresses, so the report is opened by its path).
    ui.click(by_text("[role=tab]", "Artifacts"), "the Artifacts tab")
    cards = (
        "Object.fromEntries([...document.querySelectorAll('main a[href*=\"/artifacts/artifact/\"]')]"
        ".map(a => a.innerText.split('\\n').map(l => l.trim()).filter(l => l)).map(l => [l[1], l[0]]))"
    )
    ui.page(
        "artifacts",
        f"(c => {js(sorted(ARTIFACTS))}.every(k => k in c))({cards})",
        "the artifacts",
        reload=server.ui + flow_run + "?tab=Artifacts",
    )
    shown = browser.evaluate(cards)
    assert {key: shown[key] for key in ARTIFACTS} == ARTIFACTS, shown

    card = (
        "[...document.querySelectorAll('main a[href*=\"/artifacts/artifact/\"]')]"
        ".find(a => a.innerText.includes({key}))"
    )
    ui.click(card.format(key=js("aiperf-score\n")), "the score table")
    ui.page(
        "score-table",
        "document.querySelector('main table')?.innerText.includes('OPS (aiperf convention)')",
        "the score table",
    )
    table = ui.text(
        "document.querySelector('main table')"
    )  # the run's own budget and profile (a file's)
    assert re.search(r"budget\s+5 s", table) and re.search(
        r"profile\s+custom-[0-9a-f]{12}", table
    ), table

    # Back to the list, then the card's own link: a click raced the list's re-render (it landed on a
    # card the page was replacing, and nothing opened), which following the href cannot.
    browser.navigate(server.ui + flow_run + "?tab=Artifacts")
    link = ui.wait(
        f"({card.format(key=js('aiperf-report-summary'))})?.href", "the score over time's card"
    )
    browser.navigate(link)
    ui.page(
        "score-over-time",
        "document.querySelector('main table')?.innerText.includes('regulated score')",
        "the score over time",
    )
    summary = ui.text("document.querySelector('main')")
    assert "Score over time" in summary and "time (h)" in summary, summary
    page = Path(re.search(r"(/\S+/reports/aiperf-report-\S+\.html)", summary).group(1))

    # The report the run published: the run completed, never "running".
    browser.navigate(page.as_uri())
    ui.wait("document.querySelector('h1')", "the HTML report")
    ui.shot("report", full_page=True)
    # The run's status is in the line under the headline (the score and verdict lead the page).
    details = browser.evaluate("document.querySelector('header + .details')?.innerText ?? ''")
    assert re.search(r"\bcompleted\b", details) and not re.search(r"\brunning\b", details), details
    # The system is named as the form's overrides said.
    title = browser.evaluate("document.querySelector('header.headline h1')?.innerText ?? ''")
    assert title.startswith(OVERRIDES["system.name"]), title
    return page
