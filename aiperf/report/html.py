"""`aiperf report RUN_ID`: one self-contained HTML page about a run, from its records alone.

Inline SVG plots and inline CSS only: nothing is fetched when the page is opened, so it can be
mailed, attached to a Prefect artifact or opened on a machine with no network. Sections:
a headline with the result (the system, OPS, the regulated score, the verdict and why, the division,
the verification, MFU against the measured peak, the ruleset, the date and the budget: the page's
title says the same); the score's table, its first rows the score, the verdict and the verification;
the score over time (AIPerf's table every 0.1 h, and a plot), judged by the run's own quality;
that quality (validation loss on the LM track, accuracy on the CNN track) against operations per
sample for every trial; the search tree as a collapsible outline (aiperf.report.tree);
a timeline of trials on each worker and where each worker's time went (a stacked bar of its
trials' phases, idle last); the compute nodes' system description (aiperf.report.system); and this
system's history for the run's profile.

This module is the page: its headline, its sections in order, and the markdown beside it. The plotted
sections are aiperf.report.charts, drawn with aiperf.report.svg.
"""

from __future__ import annotations

import html
from datetime import datetime
from pathlib import Path

from aiperf import quality
from aiperf.errors import UserError
from aiperf.report.charts import (
    history_plot,
    quality_heading,
    quality_vs_ops_plot,
    score_over_time_plot,
    worker_phases_plot,
    worker_timeline_plot,
)
from aiperf.report.phases import PARTS, percent, worker_times
from aiperf.report.summary import (
    mfu_text,
    score_rows,
    system_name,
    title,
    verdict_text,
    verdict_word,
    verification_text,
)
from aiperf.report.svg import esc, html_table
from aiperf.report.system import system_section
from aiperf.report.timeline import aiperf_checkpoints, counted_seconds, judge_of, score_over_time
from aiperf.report.tree import CSS as TREE_CSS
from aiperf.report.tree import search_tree_html
from aiperf.store import RunReads, RunRecord
from aiperf.units import ops_rate

CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 2em auto; max-width: 900px;
       color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0; } td, th { padding: 3px 10px; border-bottom: 1px solid #eee;
text-align: left; } th { background: #f5f5f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
svg.plot { display: block; margin: 0.5em 0; background: #fff; border: 1px solid #eee; }
svg .axis line, svg .axis path { stroke: #555; } svg text { font-size: 11px; fill: #333; }
svg .grid { stroke: #eee; } p.note { color: #666; font-size: 0.9em; }
.legend span { display: inline-block; margin-right: 1em; font-size: 0.9em; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
header.headline { margin-bottom: 1.5em; } header.headline h1 { margin: 0.2em 0; font-size: 1.9em; }
.headline .meta { color: #555; margin: 0; }
.headline .verdict { display: inline-block; margin: 0.4em 0; padding: 4px 10px; border-radius: 4px;
                     font-weight: 600; }
.verdict.ok { background: #e3f4e1; color: #1b5e20; } .verdict.bad { background: #fde2e1; color: #8e1b17; }
.verdict.warn { background: #fff3d6; color: #7a4f00; }
.headline dl { display: grid; grid-template-columns: repeat(auto-fill, minmax(11em, 1fr)); gap: 0.6em 1.5em;
               margin: 0.6em 0; }
.headline dt { color: #666; font-size: 0.85em; } .headline dd { margin: 0; font-size: 1.15em; font-weight: 600; }
.headline .details { color: #555; font-size: 0.9em; }
"""


def _headline(run: RunRecord) -> str:
    """The first screen: the result (the system, OPS, the verdict and why, the division, the
    verification, the regulated score, MFU against the measured peak, the ruleset, the date and
    the budget), then how the run was made."""
    score = run.score
    created = run.created_at.strftime("%Y-%m-%d %H:%M UTC")
    meta = (
        f"aiperf run {run.id} \u00b7 {esc(run.profile)} profile \u00b7 {created} \u00b7 "
        f"budget {run.budget_s:g} s"
    )
    name = esc(system_name(run))
    if score is None:
        message = f": {esc(run.message)}" if run.message else ""
        return (
            f"<header class=headline><p class=meta>{meta}</p><h1>{name}: no score</h1>"
            f'<p class="verdict bad">{esc(run.status)}{message}</p></header>'
        )
    word = verdict_word(run)
    tone = "ok" if word == "valid" else "bad" if word == "invalid" else "warn"
    accuracy = "-" if score.best_val_accuracy is None else f"{score.best_val_accuracy:.4f}"
    figures = [
        ("regulated score", ops_rate(score.regulated_score)),
        ("OPS", ops_rate(score.ops)),
        ("verification", verification_text(run)),
        ("division", run.division or "-"),
        ("MFU", mfu_text(run)),
        (
            ("best val loss", f"{score.best_val_loss:.4f} nats/token")
            if score.best_val_loss is not None  # the LM track's quality
            else ("best val accuracy", accuracy)
        ),
        ("ruleset", run.ruleset or "none"),
        ("workers", str(run.workers)),
    ]
    cells = "".join(f"<div><dt>{esc(k)}</dt><dd>{esc(v)}</dd></div>" for k, v in figures)
    return (
        f"<header class=headline><p class=meta>{meta}</p>"
        f'<h1>{name}: <span class="ops">{esc(ops_rate(score.ops))}</span></h1>'
        f'<p class="verdict {tone}">{esc(verdict_text(run))}</p><dl>{cells}</dl></header>'
    )


def build_report(store: RunReads, run_id: int) -> str:
    """The whole page as a string."""
    run = store.get_run(run_id)
    score = run.score
    judge = judge_of(store, run)
    summary = (
        html_table(["figure", "value"], [[r["figure"], r["value"]] for r in score_rows(run)])
        if score
        else f"<p>Run {run.id} ({esc(run.status)}) has no score{': ' + esc(run.message) if run.message else ''}.</p>"
    )
    system = run.system
    gpus = ", ".join(system.gpus.get("models", [])) or "none"
    created = run.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    sections = [
        ("Score", summary),
        ("Score over time", score_over_time_plot(run, judge)),
        (quality_heading(judge.metric), quality_vs_ops_plot(run, judge.metric)),
        ("Search tree", search_tree_html(run)),
        ("Trials on each worker", worker_timeline_plot(run) + worker_phases_plot(run)),
        ("System description", system_section(run)),
        ("This system's history", history_plot(store, run)),
    ]
    body = "".join(f"<h2>{esc(heading)}</h2>{content}" for heading, content in sections)
    return (
        f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{html.escape(title(run), quote=False)}</title>"
        f"<meta name=viewport content='width=device-width, initial-scale=1'><style>{CSS}{TREE_CSS}</style>"
        f"</head><body>{_headline(run)}"
        f"<p class=details>{esc(run.profile)} profile, {run.workers} workers, budget "
        f"{run.budget_s:g} s, seed {run.seed}, {esc(run.status)}; started {created}.<br>Submitted from system "
        f"{system.id}: {esc(system.hostname)}, {esc(system.cpu_model)}, {system.cpu_cores} cores, GPUs: "
        f"{esc(gpus)}; fingerprint {esc(system.fingerprint[:12])}.</p>{body}"
        "<p class=note>Made by aiperf from the records alone, "
        f"{datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}.</p>"
        "</body></html>\n"
    )


def write_report(store: RunReads, run_id: int, path: Path) -> Path:
    """Write the page; a folder that does not exist is the user's to fix."""
    path = Path(path)
    if not path.parent.is_dir():
        raise UserError(
            f"--to {path}: folder {path.parent} does not exist; create it or choose another path"
        )
    path.write_text(build_report(store, run_id), encoding="utf-8")
    return path


def markdown_summary(store: RunReads, run_id: int, path: Path) -> str:
    """What the flow publishes beside the page: where it is, and the score over time as AIPerf prints it."""
    run = store.get_run(run_id)
    judge = judge_of(store, run)
    label = quality.label(judge.metric)
    lines = [
        f"# aiperf report of run {run_id}",
        "",
        f"The full HTML report (plots of the score over time, {label} "
        f"against operations per sample, trials on each worker, this system's history): `{Path(path).resolve()}`",
        "",
        "## Score over time",
        "",
        f"| time (h) | time (s) | OPS | best {label} | regulated score |",
        "| --- | --- | --- | --- | --- |",
    ]
    elapsed = counted_seconds(run)
    if elapsed is not None and run.score is not None:
        for c in score_over_time(run, aiperf_checkpoints(elapsed), judge):
            best = "-" if c.best_quality is None else f"{c.best_quality:.4f}"
            lines.append(
                f"| {c.t_s / 3600:.2f} | {c.t_s:.1f} | {ops_rate(c.ops)} | {best} | "
                f"{ops_rate(c.regulated_score)} |"
            )
    lines += _time_breakdown(run)
    return "\n".join(lines) + "\n"


def _time_breakdown(run) -> list[str]:
    """Where each worker's window went (aiperf.report.phases), as a markdown table: the artifact's
    answer to "was the machine training, or doing something else?"."""

    times = worker_times(run)
    if not times:
        return []
    lines = [
        "",
        "## Where each worker's window went (seconds)",
        "",
        "| worker | trials | " + " | ".join(PARTS) + " | utilisation |",
        "| --- | --- | " + " | ".join("---" for _ in PARTS) + " | --- |",
    ]
    for t in times:
        lines.append(
            f"| {t.worker} | {t.trials} | "
            + " | ".join(f"{t.seconds[p]:.1f}" for p in PARTS)
            + f" | {percent(t.utilisation)} |"
        )
    return lines
