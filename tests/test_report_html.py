"""`aiperf report`: one self-contained HTML page, checked for its figures and then opened in a real
headless Chromium (Debian's), which must render every plot with its data points and fetch nothing."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta

import pytest
from chromium import Chromium
from test_history_data import PlantedTrial, plant_run, scaled_trials, system_facts
from typer.testing import CliRunner

from aiperf.cli.main import app
from aiperf.report.html import build_report, write_report
from aiperf.report.timeline import aiperf_checkpoints, score_over_time
from aiperf.store import Store

NIGHT = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
PLOTS = [
    "plot-score-over-time",
    "plot-accuracy-vs-ops",
    "plot-search-tree",
    "plot-worker-timeline",
    "plot-history",
]


def long_run(store: Store) -> int:
    """A 15-minute run (0.25 h): AIPerf's table has rows at 0.1 h, 0.2 h and the end."""
    trials = [
        PlantedTrial(
            f"w{i % 2}",
            1_000_000 * (i + 1),
            300_000 * (i + 1),
            epochs=3,
            epoch_s=100.0,
            start_s=300.0 * (i // 2),
            val_accuracy=0.3 + 0.05 * i,
        )
        for i in range(6)
    ]
    for night in range(2):
        plant_run(
            store, system_facts(), started=NIGHT + timedelta(days=night), trials=scaled_trials(1.0)
        )
    return plant_run(
        store, system_facts(), started=NIGHT + timedelta(days=2), elapsed_s=900.0, trials=trials
    )


def test_score_over_time_every_tenth_of_an_hour(db_url):
    store = Store.open(db_url)
    try:
        run_id = long_run(store)
        run = store.get_run(run_id)
        rows = score_over_time(run, aiperf_checkpoints(900.0), 128)
    finally:
        store.close()
    assert [c.t_s for c in rows] == [360.0, 720.0, 900.0]
    # By 360 s: trials 0 and 1 finished 3 epochs each (0-300 s); trials 2 and 3 none yet (their first ends at 400 s).
    per_epoch = [384 * 1_000_000 * (i + 1) + 128 * 300_000 * (i + 1) for i in range(6)]
    assert rows[0].total_ops == pytest.approx(3 * (per_epoch[0] + per_epoch[1]))
    assert rows[0].ops == pytest.approx(rows[0].total_ops / 360.0)
    assert rows[0].best_val_accuracy == pytest.approx(0.35)
    # At the end of the window the figures are the run's stored score.
    assert rows[-1].ops == pytest.approx(run.score.ops)
    assert rows[-1].regulated_score == pytest.approx(run.score.regulated_score)


def test_page_is_self_contained_and_has_every_section(db_url, tmp_path):
    store = Store.open(db_url)
    try:
        run_id = long_run(store)
        page = build_report(store, run_id)
    finally:
        store.close()
    for plot in PLOTS:
        assert f'id="{plot}"' in page
    assert "Score over time" in page and "This system&#x27;s history" in page
    assert re.findall(r"<(?:script|link|img|iframe)\b", page) == []
    assert re.findall(r"https?://", page.replace("http://www.w3.org/2000/svg", "")) == []
    assert page.count('class="point trial"') == 6
    assert page.count('class="bar"') == 6
    assert "0.10</td><td class=num>360.0" in page and "0.25</td><td class=num>900.0" in page


def test_cli_writes_the_report(tmp_path, sqlite_url):
    store = Store.open(sqlite_url)
    try:
        run_id = long_run(store)
    finally:
        store.close()
    target = tmp_path / "r.html"
    result = CliRunner().invoke(
        app, ["report", str(run_id), "--db", sqlite_url, "--to", str(target)]
    )
    assert result.exit_code == 0, result.output
    assert target.read_text().startswith("<!DOCTYPE html>")
    missing = CliRunner().invoke(app, ["report", "999", "--db", sqlite_url, "--to", str(target)])
    assert missing.exit_code == 2 and "run 999 is not in the database" in missing.output
    nowhere = CliRunner().invoke(
        app, ["report", str(run_id), "--db", sqlite_url, "--to", "/no/such/dir/r.html"]
    )
    assert nowhere.exit_code == 2 and "does not exist" in nowhere.output


RENDERED = """
(() => {
  const plots = {};
  for (const svg of document.querySelectorAll('svg.plot')) {
    const box = svg.getBoundingClientRect();
    const marks = [...svg.querySelectorAll('circle.point, rect.bar, rect.node')].filter(m => {
      const b = m.getBoundingClientRect();
      return b.width > 0 && b.height > 0 && b.left >= box.left - 1 && b.right <= box.right + 1
        && b.top >= box.top - 1 && b.bottom <= box.bottom + 1;
    });
    const lines = [...svg.querySelectorAll('path.series')].filter(p => p.getTotalLength() > 0);
    plots[svg.id] = {width: box.width, height: box.height, marks: marks.length, lines: lines.length};
  }
  return {title: document.title, h2: [...document.querySelectorAll('h2')].map(h => h.textContent), plots};
})()
"""


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tmp_path, sqlite_url):
    store = Store.open(sqlite_url)
    try:
        run_id = long_run(store)
        page = write_report(store, run_id, tmp_path / "report.html")
    finally:
        store.close()
    browser = Chromium(tmp_path / "chromium-profile")
    try:
        browser.call("Network.enable")
        browser.call("Page.enable")
        browser.call("Page.navigate", url=page.as_uri())
        for _ in range(100):
            if browser.evaluate("document.readyState") == "complete":
                break
            time.sleep(0.1)
        seen = browser.evaluate(RENDERED)
        shot = browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
    finally:
        browser.close()
    assert seen["title"] == f"aiperf run {run_id}"
    assert seen["h2"] == [
        "Score",
        "Score over time",
        "Validation accuracy against operations per sample",
        "Search tree",
        "Trials on each worker",
        "System description",
        "This system's history",
    ]
    plots = seen["plots"]
    assert sorted(plots) == sorted(PLOTS)
    assert all(p["width"] > 600 and p["height"] > 100 for p in plots.values()), plots
    assert (
        plots["plot-score-over-time"]["marks"] == 120
        and plots["plot-score-over-time"]["lines"] == 2
    )
    assert plots["plot-accuracy-vs-ops"]["marks"] == 6
    assert plots["plot-worker-timeline"]["marks"] == 6
    assert plots["plot-search-tree"]["marks"] == 6, "a node per trial"
    assert plots["plot-history"]["marks"] == 6 and plots["plot-history"]["lines"] == 2
    requested = [
        e["params"]["request"]["url"]
        for e in browser.events
        if e.get("method") == "Network.requestWillBeSent"
    ]
    assert requested == [page.as_uri()], "the page fetched something besides itself"
    import base64

    png = base64.b64decode(shot["data"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    (tmp_path / "report.png").write_bytes(png)
