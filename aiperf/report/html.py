"""`aiperf report RUN_ID`: one self-contained HTML page about a run, from its records alone.

Inline SVG plots and inline CSS only: nothing is fetched when the page is opened, so it can be
mailed, attached to a Prefect artifact or opened on a machine with no network. Sections:
a headline with the result (the system, OPS, the regulated score, the verdict and why, the division,
the verification, MFU against the measured peak, the ruleset, the date and the budget: the page's
title says the same); the score's table, its first rows the score, the verdict and the verification;
the score over time (AIPerf's table every 0.1 h, and a plot); validation accuracy against operations
per sample for every trial; the search tree as a collapsible outline (aiperf.report.tree);
a timeline of trials on each worker and where each worker's time went (a stacked bar of its
trials' phases, idle last); the compute nodes' system description (aiperf.report.system); and this
system's history for the run's profile.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from aiperf.errors import UserError
from aiperf.report.axes import round_ticks, si_axis, time_unit
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
from aiperf.report.system import system_section
from aiperf.report.timeline import aiperf_checkpoints, even_checkpoints, score_over_time, window
from aiperf.report.tree import CSS as TREE_CSS
from aiperf.report.tree import search_tree_html
from aiperf.results.score import validity_label
from aiperf.status import TrialStatus
from aiperf.store import RunRecord, Store
from aiperf.units import operations, ops_per_sample, ops_rate

WIDTH, HEIGHT = 720, 300
MARGIN = {"left": 90, "right": 40, "top": 20, "bottom": 50}
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
STATUS_COLORS = {
    TrialStatus.COMPLETED: "#2ca02c",
    TrialStatus.STOPPED: "#ff7f0e",
    TrialStatus.FAILED: "#d62728",
    TrialStatus.RUNNING: "#7f7f7f",
}

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


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


@dataclass(frozen=True)
class Scale:
    """A linear map from data to pixels."""

    lo: float
    hi: float
    px_lo: float
    px_hi: float

    @classmethod
    def fit(
        cls,
        values: Sequence[float],
        px_lo: float,
        px_hi: float,
        *,
        zero: bool = False,
        pad: float = 0.0,
    ) -> Scale:
        lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
        if zero:
            lo = min(lo, 0.0)
        if hi == lo:
            lo, hi = (lo - 1.0, hi + 1.0) if lo == 0 else (lo * 0.9, hi * 1.1)
            lo, hi = min(lo, hi), max(lo, hi)
        margin = (hi - lo) * pad
        return cls(lo - margin if lo - margin >= 0 or lo < 0 else 0.0, hi + margin, px_lo, px_hi)

    def __call__(self, value: float) -> float:
        return self.px_lo + (value - self.lo) / (self.hi - self.lo) * (self.px_hi - self.px_lo)


class Plot:
    """An SVG chart: axes with round ticks (aiperf.report.axes) and labels; marks are added by the
    caller. An axis of seconds (`x_time`) reads in s, min or h, whichever its step is round in; an
    axis with a unit (`x_unit`, `y_unit`: OPS, OPS/sample) shares one SI prefix, named in its label
    ("OPS (GOPS)": 0, 25, 50, 75)."""

    def __init__(
        self,
        plot_id: str,
        title: str,
        xs: Sequence[float],
        ys: Sequence[float],
        *,
        x_label: str,
        y_label: str,
        x_format: Callable[[float], str] | None = None,
        y_format: Callable[[float], str] | None = None,
        x_time: bool = False,
        x_unit: str | None = None,
        y_unit: str | None = None,
        y_zero: bool = True,
        height: int = HEIGHT,
        x_pad: float = 0.0,
        x_ticks: Sequence[float] | None = None,
    ) -> None:
        self.id, self.title, self.height = plot_id, title, height
        xs, ys = list(xs) or [0.0, 1.0], list(ys) or [0.0, 1.0]
        if (
            x_ticks is not None
        ):  # ticks the caller chose (runs by number): a padded scale around them
            self.x_ticks = list(x_ticks)
            self.x = Scale.fit(xs, MARGIN["left"], WIDTH - MARGIN["right"], pad=x_pad)
        else:
            lo, hi = min(xs), max(xs)
            margin = (hi - lo) * x_pad
            lo = lo - margin if lo - margin >= 0 or lo < 0 else 0.0
            self.x_ticks = round_ticks(lo, hi + margin, time=x_time)
            self.x = Scale(
                self.x_ticks[0], self.x_ticks[-1], MARGIN["left"], WIDTH - MARGIN["right"]
            )
        self.y_ticks = round_ticks(min(min(ys), 0.0) if y_zero else min(ys), max(ys))
        self.y = Scale(self.y_ticks[0], self.y_ticks[-1], height - MARGIN["bottom"], MARGIN["top"])
        self.x_format = x_format or (lambda v: f"{v:.12g}")
        self.y_format = y_format or (lambda v: f"{v:.12g}")
        if x_time:
            unit, scale = time_unit(self.x_ticks)
            self.x_format = lambda v: f"{v / scale:.12g}"
            x_label = f"{x_label} ({unit})"
        if x_unit:
            unit_label, self.x_format = si_axis(self.x_ticks, x_unit)
            x_label = f"{x_label} ({unit_label})"
        if y_unit:
            unit_label, self.y_format = si_axis(self.y_ticks, y_unit)
            y_label = f"{y_label} ({unit_label})"
        self.x_label, self.y_label = x_label, y_label
        self.marks: list[str] = []

    def add(self, svg: str) -> None:
        self.marks.append(svg)

    def render(self) -> str:
        left, right = MARGIN["left"], WIDTH - MARGIN["right"]
        top, bottom = MARGIN["top"], self.height - MARGIN["bottom"]
        parts = [
            f'<svg class="plot" id="{esc(self.id)}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
            f'height="{self.height}" viewBox="0 0 {WIDTH} {self.height}" role="img" aria-label="{esc(self.title)}">',
            f"<title>{esc(self.title)}</title>",
            '<g class="axis">',
        ]
        for v in self.y_ticks:
            py = self.y(v)
            parts.append(
                f'<line class="grid" x1="{left}" x2="{right}" y1="{py:.1f}" y2="{py:.1f}"/>'
                f'<text x="{left - 6}" y="{py + 4:.1f}" text-anchor="end">{esc(self.y_format(v))}</text>'
            )
        for v in self.x_ticks:
            px = self.x(v)
            parts.append(
                f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{bottom}" y2="{bottom + 5}"/>'
                f'<text x="{px:.1f}" y="{bottom + 18}" text-anchor="middle">{esc(self.x_format(v))}</text>'
            )
        parts.append(
            f'<line x1="{left}" x2="{right}" y1="{bottom}" y2="{bottom}"/>'
            f'<line x1="{left}" x2="{left}" y1="{top}" y2="{bottom}"/>'
            f'<text x="{(left + right) / 2}" y="{self.height - 10}" text-anchor="middle">{esc(self.x_label)}</text>'
            f'<text transform="translate(14 {(top + bottom) / 2}) rotate(-90)" text-anchor="middle">'
            f"{esc(self.y_label)}</text></g>"
        )
        parts.extend(self.marks)
        parts.append("</svg>")
        return "".join(parts)


def _line(
    plot: Plot,
    points: Sequence[tuple[float, float]],
    color: str,
    label: str,
    describe: Callable[[float, float], str],
) -> None:
    """A series: its line, and a point at each value with `describe(x, y)` as its tooltip."""
    if not points:
        return
    path = " ".join(
        f"{'M' if i == 0 else 'L'}{plot.x(x):.1f},{plot.y(y):.1f}"
        for i, (x, y) in enumerate(points)
    )
    plot.add(
        f'<path class="series" data-series="{esc(label)}" d="{path}" fill="none" stroke="{color}" stroke-width="2"/>'
    )
    for x, y in points:
        plot.add(
            f'<circle class="point" data-series="{esc(label)}" cx="{plot.x(x):.1f}" cy="{plot.y(y):.1f}" r="2.5" '
            f'fill="{color}"><title>{esc(label)}: {esc(describe(x, y))}</title></circle>'
        )


def _table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], numeric: Sequence[int] = ()
) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{' class=num' if i in numeric else ''}>{esc(c)}</td>" for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _at(x: float, y: float) -> str:
    """A tooltip's text: OPS at a time into the window."""
    return f"{ops_rate(y)} at {x:.1f} s"


def _score_over_time(run: RunRecord, val_samples: int) -> str:
    span = window(run)
    if span is None:
        return "<p class=note>The search has not ended: no score over time yet.</p>"
    elapsed = span[1]
    rows = score_over_time(run, aiperf_checkpoints(elapsed), val_samples)
    table = _table(
        ["time (h)", "time (s)", "operations", "OPS", "best val accuracy", "regulated score"],
        [
            [
                f"{c.t_s / 3600:.2f}",
                f"{c.t_s:.1f}",
                operations(c.total_ops),
                ops_rate(c.ops),
                "-" if c.best_val_accuracy is None else f"{c.best_val_accuracy:.4f}",
                ops_rate(c.regulated_score),
            ]
            for c in rows
        ],
        numeric=range(6),
    )
    curve = score_over_time(run, even_checkpoints(elapsed), val_samples)
    plot = Plot(
        "plot-score-over-time",
        "Score over time",
        [c.t_s for c in curve],
        [c.ops for c in curve] + [c.regulated_score for c in curve],
        x_label="time into the timed window",
        y_label="OPS, regulated score",
        x_time=True,
        y_unit="OPS",
    )
    _line(plot, [(c.t_s, c.ops) for c in curve], COLORS[0], "OPS", _at)
    _line(plot, [(c.t_s, c.regulated_score) for c in curve], COLORS[1], "regulated score", _at)
    legend = (
        f'<div class=legend><span><i style="background:{COLORS[0]}"></i>OPS</span>'
        f'<span><i style="background:{COLORS[1]}"></i>regulated score</span></div>'
    )
    return (
        f"<p class=note>As AIPerf prints it: every 0.1 h of the timed window and at its end, the operations of "
        f"every epoch finished by then over the time so far.</p>{table}{plot.render()}{legend}"
    )


def _accuracy_vs_ops(run: RunRecord) -> str:
    # The trials that built a model, with their operations per sample.
    built = [(t, ops) for t in run.trials if (ops := t.train_ops_per_sample)]
    if not built:
        return "<p class=note>No trial built a model.</p>"
    plot = Plot(
        "plot-accuracy-vs-ops",
        "Validation accuracy against operations per sample",
        [float(ops) for _, ops in built],
        [t.best_val_accuracy or 0.0 for t, _ in built] + [1.0],
        x_label="training operations per sample",
        y_label="best validation accuracy",
        x_unit="OPS/sample",
        y_format=lambda v: f"{v:.2f}",
        x_pad=0.08,
    )
    for t, ops in built:
        color = STATUS_COLORS.get(t.status, "#333")
        accuracy = t.best_val_accuracy
        shape = (
            f'<circle class="point trial" data-trial="{esc(t.trial_key)}" cx="{plot.x(ops):.1f}" '
            f'cy="{plot.y(accuracy or 0.0):.1f}" r="5" fill="{color}" '
            f'fill-opacity="{0.85 if accuracy is not None else 0.25}">'
            f"<title>trial {esc(t.trial_key)} ({esc(t.status)}): {ops_per_sample(ops)}, "
            f"best val accuracy {'-' if accuracy is None else f'{accuracy:.4f}'}</title></circle>"
        )
        plot.add(shape)
    legend = "".join(
        f'<span><i style="background:{c}"></i>{esc(s)}</span>' for s, c in STATUS_COLORS.items()
    )
    return (
        f"{plot.render()}<div class=legend>{legend}</div><p class=note>One point per trial; faded points never "
        "finished an epoch, so they have no accuracy.</p>"
    )


def _worker_timeline(run: RunRecord) -> str:
    span = window(run)
    trials = [t for t in run.trials if t.started_at is not None]
    if not trials or span is None:
        return "<p class=note>No trials.</p>"
    start = span[0]
    search_ended_at = run.search_ended_at
    assert search_ended_at is not None  # window() is None until the search has ended
    workers = sorted({t.worker or "(not placed)" for t in trials})
    lane = 28
    height = MARGIN["top"] + MARGIN["bottom"] + lane * len(workers)
    ends = [((t.ended_at or search_ended_at) - start).total_seconds() for t in trials]
    begins = [(t.started_at - start).total_seconds() for t in trials]
    deadline = (run.deadline - start).total_seconds() if run.deadline else None
    plot = Plot(
        "plot-worker-timeline",
        "Trials on each worker",
        begins + ends + [0.0, span[1]] + ([deadline] if deadline is not None else []),
        [0, len(workers)],
        x_label="time into the timed window",
        y_label="",
        x_time=True,
        y_format=lambda v: "",
        height=height,
    )
    for i, name in enumerate(workers):
        y = MARGIN["top"] + i * lane
        plot.add(
            f'<text x="{MARGIN["left"] - 6}" y="{y + lane / 2 + 4:.1f}" text-anchor="end">{esc(name[-12:])}</text>'
        )
    for t, b, e in zip(trials, begins, ends, strict=False):
        i = workers.index(t.worker or "(not placed)")
        x0, x1 = plot.x(b), plot.x(max(e, b))
        plot.add(
            f'<rect class="bar" data-trial="{esc(t.trial_key)}" data-worker="{esc(t.worker or "")}" x="{x0:.1f}" '
            f'y="{MARGIN["top"] + i * lane + 4}" width="{max(x1 - x0, 1.0):.1f}" height="{lane - 8}" '
            f'fill="{STATUS_COLORS.get(t.status, "#333")}" stroke="#fff"><title>trial {esc(t.trial_key)} '
            f"({esc(t.status)}) on {esc(t.worker or '-')}: {b:.1f}-{e:.1f} s</title></rect>"
        )
    if deadline is not None:
        px = plot.x(deadline)
        plot.add(
            f'<line class="deadline" x1="{px:.1f}" x2="{px:.1f}" y1="{MARGIN["top"]}" '
            f'y2="{height - MARGIN["bottom"]}" stroke="#000" stroke-dasharray="4 3"/>'
            f'<text x="{px - 3:.1f}" y="{MARGIN["top"] - 6}" text-anchor="end">deadline</text>'
        )
    return (
        plot.render()
        + "<p class=note>Each bar is a trial, coloured by how it ended; the dashed line is the deadline.</p>"
    )


PHASE_COLORS = {
    "build": "#8c564b",
    "count": "#e377c2",
    "compile": "#ff7f0e",
    "train": "#1f77b4",
    "evaluate": "#2ca02c",
    "report": "#9467bd",
    "idle": "#d9d9d9",
}


def _worker_phases(run: RunRecord) -> str:
    """A stacked horizontal bar per worker: its share of the window, phase by phase, idle last."""
    workers = worker_times(run)
    if not workers:
        return "<p class=note>No trial recorded where its time went (runs before aiperf measured phases).</p>"
    lane = 28
    height = MARGIN["top"] + MARGIN["bottom"] + lane * len(workers)
    window_s = workers[0].window_s
    plot = Plot(
        "plot-worker-phases",
        "Where each worker's time went",
        [0.0, window_s],
        [0, len(workers)],
        x_label="the worker's share of the timed window",
        y_label="",
        x_time=True,
        y_format=lambda v: "",
        height=height,
    )
    for i, w in enumerate(workers):
        y = MARGIN["top"] + i * lane
        plot.add(
            f'<text x="{MARGIN["left"] - 6}" y="{y + lane / 2 + 4:.1f}" text-anchor="end">{esc(w.worker[-12:])}</text>'
        )
        at = 0.0
        for part in PARTS:
            seconds = w.seconds[part]
            if seconds <= 0:
                continue
            x0, x1 = plot.x(at), plot.x(min(at + seconds, window_s))
            at += seconds
            plot.add(
                f'<rect class="bar phase" data-worker="{esc(w.worker)}" data-phase="{part}" x="{x0:.1f}" '
                f'y="{y + 4}" width="{max(x1 - x0, 0.5):.1f}" height="{lane - 8}" fill="{PHASE_COLORS[part]}">'
                f"<title>{esc(w.worker)}: {part} {seconds:.2f} s ({percent(seconds / w.window_s)})</title></rect>"
            )
    legend = "".join(
        f'<span><i style="background:{c}"></i>{esc(p)}</span>' for p, c in PHASE_COLORS.items()
    )
    table = _table(
        ["worker", "trials", *PARTS, "utilisation"],
        [
            [w.worker, w.trials, *(f"{w.seconds[p]:.2f}" for p in PARTS), percent(w.utilisation)]
            for w in workers
        ],
        numeric=range(1, len(PARTS) + 3),
    )
    return (
        f"{plot.render()}<div class=legend>{legend}</div><p class=note>Each worker's share of the timed window "
        "by phase, in seconds, as its trials measured them on the worker: building the data feed and model, "
        "counting operations, compiling (with the tracing of the first training and evaluation steps), "
        "training and evaluation steps, sending reports; idle is the rest (start-up between trials, "
        f"waiting for work). Window utilisation: {percent(run.score.utilisation if run.score else None)}.</p>"
        f"{table}"
    )


def _history(store: Store, run: RunRecord) -> str:
    rows = [
        r
        for r in store.run_scores(system_id=run.system_id, profile=run.profile)
        if (r.division, r.config_hash) == (run.division, run.config_hash)
    ]  # like with like only
    if not rows:
        return "<p class=note>No scored runs of this workload on this system yet.</p>"
    xs = list(range(len(rows)))
    plot = Plot(
        "plot-history",
        f"History of {run.profile} on this system",
        xs,
        [r.ops for r in rows] + [r.regulated_score for r in rows],
        x_label="run (oldest to newest)",
        y_label="OPS, regulated score",
        x_format=lambda v: str(rows[int(v)].run_id),
        y_unit="OPS",
        x_pad=0.05,
        x_ticks=xs if len(xs) <= 12 else xs[:: max(1, len(xs) // 10)],
    )

    def of_run(i: float, y: float) -> str:
        return f"{ops_rate(y)} in run {rows[int(i)].run_id}"

    _line(plot, [(i, r.ops) for i, r in zip(xs, rows, strict=False)], COLORS[0], "OPS", of_run)
    _line(
        plot,
        [(i, r.regulated_score) for i, r in zip(xs, rows, strict=False)],
        COLORS[1],
        "regulated score",
        of_run,
    )
    for i, r in zip(xs, rows, strict=False):
        if r.run_id == run.id:
            plot.add(
                f'<circle class="this-run" cx="{plot.x(i):.1f}" cy="{plot.y(r.ops):.1f}" r="7" fill="none" '
                f'stroke="#000" stroke-width="2"><title>this run</title></circle>'
            )
    table = _table(
        ["run", "created (UTC)", "workers", "OPS", "change", "regulated", "valid"],
        [
            [
                r.run_id,
                r.created_at.strftime("%Y-%m-%d %H:%M"),
                r.workers,
                ops_rate(r.ops),
                "-" if r.ops_change_pct is None else f"{r.ops_change_pct:+.1f}%",
                ops_rate(r.regulated_score),
                validity_label(r.valid, r.verified),
            ]
            for r in rows
        ],
        numeric=(0, 2, 3, 4, 5),
    )
    return plot.render() + table


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
        ("best val accuracy", accuracy),
        ("ruleset", run.ruleset or "none"),
        ("workers", str(run.workers)),
    ]
    cells = "".join(f"<div><dt>{esc(k)}</dt><dd>{esc(v)}</dd></div>" for k, v in figures)
    return (
        f"<header class=headline><p class=meta>{meta}</p>"
        f'<h1>{name}: <span class="ops">{esc(ops_rate(score.ops))}</span></h1>'
        f'<p class="verdict {tone}">{esc(verdict_text(run))}</p><dl>{cells}</dl></header>'
    )


def build_report(store: Store, run_id: int) -> str:
    """The whole page as a string."""
    run = store.get_run(run_id)
    score = run.score
    val_samples = score.val_samples if score else 0
    summary = (
        _table(["figure", "value"], [[r["figure"], r["value"]] for r in score_rows(run)])
        if score
        else f"<p>Run {run.id} ({esc(run.status)}) has no score{': ' + esc(run.message) if run.message else ''}.</p>"
    )
    system = run.system
    gpus = ", ".join(system.gpus.get("models", [])) or "none"
    created = run.created_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    sections = [
        ("Score", summary),
        ("Score over time", _score_over_time(run, val_samples)),
        ("Validation accuracy against operations per sample", _accuracy_vs_ops(run)),
        ("Search tree", search_tree_html(run)),
        ("Trials on each worker", _worker_timeline(run) + _worker_phases(run)),
        ("System description", system_section(run)),
        ("This system's history", _history(store, run)),
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


def write_report(store: Store, run_id: int, path: Path) -> Path:
    """Write the page; a folder that does not exist is the user's to fix."""
    path = Path(path)
    if not path.parent.is_dir():
        raise UserError(
            f"--to {path}: folder {path.parent} does not exist; create it or choose another path"
        )
    path.write_text(build_report(store, run_id), encoding="utf-8")
    return path


def markdown_summary(store: Store, run_id: int, path: Path) -> str:
    """What the flow publishes beside the page: where it is, and the score over time as AIPerf prints it."""
    run = store.get_run(run_id)
    score = run.score
    lines = [
        f"# aiperf report of run {run_id}",
        "",
        f"The full HTML report (plots of the score over time, accuracy "
        f"against operations per sample, trials on each worker, this system's history): `{Path(path).resolve()}`",
        "",
        "## Score over time",
        "",
        "| time (h) | time (s) | OPS | best val accuracy | regulated score |",
        "| --- | --- | --- | --- | --- |",
    ]
    span = window(run)
    if span is not None and score is not None:
        for c in score_over_time(run, aiperf_checkpoints(span[1]), score.val_samples):
            accuracy = "-" if c.best_val_accuracy is None else f"{c.best_val_accuracy:.4f}"
            lines.append(
                f"| {c.t_s / 3600:.2f} | {c.t_s:.1f} | {ops_rate(c.ops)} | {accuracy} | "
                f"{ops_rate(c.regulated_score)} |"
            )
    lines += _time_breakdown(run)
    return "\n".join(lines) + "\n"


def _time_breakdown(run) -> list[str]:
    """Where each worker's window went (aiperf.report.phases), as a markdown table: the artifact's
    answer to "was the machine training, or doing something else?"."""
    from aiperf.report.phases import PARTS, percent, worker_times

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
