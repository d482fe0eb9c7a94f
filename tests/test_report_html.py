"""`aiperf report`: one self-contained HTML page, checked for its figures and then opened in a real
headless Chromium (Debian's), which must render every plot with its data points, fetch nothing,
show the result on its first screen and lay the search tree out to the page's width."""

from __future__ import annotations

import json
import math
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from chromium import Chromium
from sqlalchemy import text
from test_history_data import PlantedTrial, plant_run, scaled_trials, system_facts
from typer.testing import CliRunner

from aiperf import quality
from aiperf.cli.main import app
from aiperf.config import load_config
from aiperf.report.html import build_report, markdown_summary, write_report
from aiperf.report.summary import score_rows
from aiperf.report.svg import MARGIN
from aiperf.report.timeline import aiperf_checkpoints, judge_of, score_over_time
from aiperf.store import Store

NIGHT = datetime(2026, 11, 1, 2, 0, tzinfo=UTC)
PLOTS = [
    "plot-score-over-time",
    "plot-accuracy-vs-ops",
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


# A whole network spec (the planted trials' lacks its input and classes), in plain data: no framework.
NETWORK = {
    "input_shape": [16, 16, 3],
    "num_classes": 10,
    "stages": [{"blocks": 1, "filters": 8}],
    "stem_filters": 4,
}
TREE_TRIALS = 48
LONG_OPERATOR = (
    "widen stage {i} filters 64->128, deepen stage {i} block 2, add a skip connection from "
    "stage 1 to stage 3, dropout 0.25->0.3 (trial {i})"
)


def tree_run(store: Store) -> int:
    """A run whose search tree is deep and wide, its operators long: a 40-trial hill-climb, and
    eight siblings of one of its trials."""
    trials = [
        PlantedTrial(f"w{i % 2}", 1_000_000 + i, 300_000, epochs=1, epoch_s=5.0, start_s=5.0 * i)
        for i in range(TREE_TRIALS)
    ]
    run_id = plant_run(store, system_facts(), elapsed_s=300.0, trials=trials)
    ids = [t.id for t in store.get_run(run_id).trials]
    with store.engine.begin() as connection:
        for i, trial_id in enumerate(ids[1:], 1):
            connection.execute(
                text("UPDATE trials SET parent_trial_id = :parent, operator = :op WHERE id = :id"),
                {
                    "parent": ids[i - 1] if i < 40 else ids[3],
                    "op": LONG_OPERATOR.format(i=i),
                    "id": trial_id,
                },
            )
    return run_id


def test_score_over_time_every_tenth_of_an_hour(db_url):
    store = Store.open(db_url)
    try:
        run_id = long_run(store)
        run = store.get_run(run_id)
        rows = score_over_time(run, aiperf_checkpoints(900.0), judge_of(store, run))
    finally:
        store.close()
    assert [c.t_s for c in rows] == [360.0, 720.0, 900.0]
    # By 360 s: trials 0 and 1 finished 3 epochs each (0-300 s); trials 2 and 3 none yet (their first ends at 400 s).
    per_epoch = [384 * 1_000_000 * (i + 1) + 128 * 300_000 * (i + 1) for i in range(6)]
    assert rows[0].total_ops == pytest.approx(3 * (per_epoch[0] + per_epoch[1]))
    assert rows[0].ops == pytest.approx(rows[0].total_ops / 360.0)
    assert rows[0].metric == quality.ACCURACY and rows[0].best_quality == pytest.approx(0.35)
    # At the end of the window the figures are the run's stored score.
    assert rows[-1].ops == pytest.approx(run.score.ops)
    assert rows[-1].regulated_score == pytest.approx(run.score.regulated_score, rel=1e-9)


def lm_run(store: Store) -> int:
    """A 15-minute run of the LM track (a whole lm-quick config, a 256-token vocabulary), its
    trials' losses falling: the quality the score over time must judge by."""
    trials = [
        PlantedTrial(
            "w0", 2_000_000, 700_000, epochs=2, epoch_s=150.0, start_s=300.0 * i, val_loss=2.9 - i
        )
        for i in range(3)
    ]
    config = load_config("lm-quick").model_dump(mode="json")
    return plant_run(
        store, system_facts(), elapsed_s=900.0, trials=trials, config=config, classes=256
    )


def test_an_lm_run_s_score_over_time_ends_at_its_headline_judged_by_loss(db_url):
    """Issue 49: the score over time of a run judged by loss regulates by its best loss (ln V -
    loss under its ruleset), not by next-token accuracy, so its last row is the headline's regulated score."""
    store = Store.open(db_url)
    try:
        run = store.get_run(lm_run(store))
        rows = score_over_time(run, aiperf_checkpoints(900.0), judge_of(store, run))
        page = build_report(store, run.id)
        summary = markdown_summary(store, run.id, Path("report.html"))
    finally:
        store.close()
    assert run.score.best_val_loss == pytest.approx(0.9)
    assert [c.metric for c in rows] == [quality.LOSS] * 3
    # By 360 s only trial 0 had finished (its epochs end at 150 s and 300 s): its loss, 2.9.
    assert rows[0].best_quality == pytest.approx(2.9)
    # lm-quick's ruleset (1.7) regulates by ln((ln V - H) / (loss - H)), H its data's entropy floor
    floor = load_config("lm-quick").validity.entropy_floor
    expected = math.log((math.log(256) - floor) / (2.9 - floor))
    assert rows[0].regulated_score == pytest.approx(rows[0].ops * expected)
    assert rows[-1].best_quality == pytest.approx(0.9)
    assert rows[-1].regulated_score == pytest.approx(run.score.regulated_score, rel=1e-9)
    assert "best val loss (nats/token)" in page and "best val accuracy" not in page
    assert "Validation loss against operations per sample" in page
    assert "| best val loss (nats/token) |" in summary


def test_page_is_self_contained_and_has_every_section(db_url, tmp_path):
    store = Store.open(db_url)
    try:
        run_id = long_run(store)
        page = build_report(store, run_id)
    finally:
        store.close()
    for plot in PLOTS:
        assert f'id="{plot}"' in page
    assert 'id="search-tree"' in page and page.count('class="trial') == 6
    assert "Score over time" in page and "This system&#x27;s history" in page
    assert re.findall(r"<(?:script|link|img|iframe)\b", page) == []
    assert re.findall(r"https?://", page.replace("http://www.w3.org/2000/svg", "")) == []
    assert page.count('class="point trial"') == 6
    assert page.count('class="bar"') == 6
    assert "0.10</td><td class=num>360.0" in page and "0.25</td><td class=num>900.0" in page


def _tick_labels(page: str, plot_id: str) -> tuple[list[str], str]:
    """A plot's x tick labels, in order, and its x axis label."""
    svg = page[page.index(f'id="{plot_id}"') :]
    svg = svg[: svg.index("</svg>")]
    height = int(re.search(r'height="(\d+)"', svg)[1])
    tick_y, label_y = height - MARGIN["bottom"] + 18, height - 10
    ticks = re.findall(rf'y="{tick_y}" text-anchor="middle">([^<]*)</text>', svg)
    label = re.findall(rf'y="{label_y}" text-anchor="middle">([^<]*)</text>', svg)
    return ticks, label[0]


def test_the_page_leads_with_the_result_in_one_unit_style(sqlite_url):
    store = Store.open(sqlite_url)
    try:
        run_id = long_run(store)
        run = store.get_run(run_id)
        page = build_report(store, run_id)
    finally:
        store.close()
    ops = run.score.ops
    shown = f"{ops / 1e6:.3g} MOPS"
    # The title and the headline say the result: the system, OPS, the division, the verdict.
    title = re.search(r"<title>(.*?)</title>", page)[1]
    assert title == f"aiperf run {run_id} on node-a: {shown}, no division, unverified", title
    headline = page[page.index("<header class=headline>") : page.index("</header>")]
    for figure in (
        "regulated score",
        "verification",
        "division",
        "MFU",
        "ruleset",
        "budget 900 s",
    ):
        assert figure in headline, figure
    assert f'<span class="ops">{shown}</span>' in headline
    assert "not valid until verified" in headline and 'class="verdict warn"' in headline
    assert page.index("</header>") < page.index("<h2>"), "the headline comes first"
    # The score's table leads with the score, the verdict and the verification, then MFU.
    figures = [r["figure"] for r in score_rows(run)]
    assert figures[:5] == [
        "regulated score",
        "OPS (aiperf convention)",
        "verdict",
        "verification",
        "MFU",
    ]
    assert f"{shown} ({ops:.0f} operations/s)" in page
    # One unit style: no old spellings anywhere on the page.
    for old in ("ops per sample", "Mops", "Tops", "e+1", "e+0"):
        assert old not in page, old
    assert "MOPS/sample" in page


def test_the_plots_have_round_ticks(sqlite_url):
    store = Store.open(sqlite_url)
    try:
        page = build_report(store, long_run(store))  # a 900 s window: 0, 5, 10, 15 min
    finally:
        store.close()
    assert _tick_labels(page, "plot-score-over-time") == (
        ["0", "5", "10", "15"],
        "time into the timed window (min)",
    )
    assert _tick_labels(page, "plot-worker-timeline")[1] == "time into the timed window (min)"
    ticks, label = _tick_labels(page, "plot-accuracy-vs-ops")
    assert label == "training operations per sample (MOPS/sample)", label
    steps = {round(float(b) - float(a), 9) for a, b in zip(ticks, ticks[1:], strict=False)}
    assert len(steps) == 1 and float(ticks[0]) == 0.0, ticks  # one round step, from zero
    assert "OPS, regulated score (MOPS)" in page


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
    store = Store.open(sqlite_url)
    with (
        store.engine.begin() as connection
    ):  # `show` draws the trials' networks: give them whole ones
        connection.execute(
            text("UPDATE trials SET architecture = :net"), {"net": json.dumps(NETWORK)}
        )
    store.close()
    shown = CliRunner().invoke(
        app, ["show", str(run_id), "--db", sqlite_url], env={"COLUMNS": "200"}
    )
    title = re.search(r"<title>(.*?)</title>", target.read_text())[1]
    assert shown.exit_code == 0 and title in shown.output, "aiperf show leads with the same line"
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


TREE = """
(() => {
  const tree = document.getElementById('search-tree');
  const box = tree.getBoundingClientRect();
  const lines = [...tree.querySelectorAll('.trial')].map(
    t => t.matches('details') ? t.querySelector(':scope > summary') : t);
  const cut = lines.filter(l => l.scrollWidth > l.clientWidth + 1
    || l.getBoundingClientRect().right > box.right + 1 || l.getBoundingClientRect().left < box.left - 1);
  return {page: document.documentElement.clientWidth, scroll: document.documentElement.scrollWidth,
          body: document.body.getBoundingClientRect().right, left: box.left, right: box.right,
          treeScroll: tree.scrollWidth, treeClient: tree.clientWidth, lines: lines.length,
          cut: cut.length, shown: lines.filter(l => l.checkVisibility()).length};
})()
"""

HEADLINE = """
(() => {
  const h = document.querySelector('header.headline').getBoundingClientRect();
  return {bottom: h.bottom, viewport: window.innerHeight,
          text: document.querySelector('header.headline').innerText};
})()
"""


def _open(browser: Chromium, page) -> None:
    browser.call("Page.navigate", url=page.as_uri())
    for _ in range(100):
        if browser.evaluate("document.readyState") == "complete":
            break
        time.sleep(0.1)


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tmp_path, sqlite_url):
    store = Store.open(sqlite_url)
    try:
        run_id = long_run(store)
        page = write_report(store, run_id, tmp_path / "report.html")
        tree_page = write_report(store, tree_run(store), tmp_path / "tree.html")
    finally:
        store.close()
    browser = Chromium(tmp_path / "chromium-profile", window=(1280, 900))
    try:
        browser.call("Network.enable")
        browser.call("Page.enable")
        _open(browser, page)
        seen = browser.evaluate(RENDERED)
        headline = browser.evaluate(HEADLINE)
        shot = browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        requested = [
            e["params"]["request"]["url"]
            for e in browser.events
            if e.get("method") == "Network.requestWillBeSent"
        ]
        _open(browser, tree_page)
        tree = browser.evaluate(TREE)
        browser.screenshot(tmp_path / "tree.png")
        browser.click("document.querySelector('#search-tree > details > summary')", "the root")
        folded = browser.evaluate(TREE)
    finally:
        browser.close()
    assert seen["title"].startswith(f"aiperf run {run_id} on node-a: "), seen["title"]
    # The result is on the first screen.
    assert headline["bottom"] <= headline["viewport"], headline
    assert "regulated score" in headline["text"] and "MOPS" in headline["text"], headline
    # The search tree fits the page at 1280 px: nothing wider than the page, no label cut.
    assert tree["lines"] == TREE_TRIALS and tree["shown"] == TREE_TRIALS, tree
    assert tree["scroll"] <= tree["page"] and tree["right"] <= tree["body"] + 1, tree
    assert tree["treeScroll"] <= tree["treeClient"] and tree["cut"] == 0, tree
    assert folded["shown"] == 1, "a click on the seed folds its descendants"
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
    assert plots["plot-history"]["marks"] == 6 and plots["plot-history"]["lines"] == 2
    assert requested == [page.as_uri()], "the page fetched something besides itself"
    import base64

    png = base64.b64decode(shot["data"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    (tmp_path / "report.png").write_bytes(png)


def test_every_trial_status_has_its_colour_in_the_legends():
    """A status without a colour is drawn grey with no legend entry (too_large, out_of_memory and
    diverged were, in the charts): the charts and the search tree share one map of every status."""
    from aiperf.report import tree
    from aiperf.report.svg import STATUS_COLORS
    from aiperf.status import TrialStatus

    assert set(STATUS_COLORS) == set(TrialStatus)
    assert len(set(STATUS_COLORS.values())) == len(STATUS_COLORS)
    assert tree.STATUS_COLORS is STATUS_COLORS
