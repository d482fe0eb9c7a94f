"""`aiperf report RUN_ID`: one self-contained HTML page about a run, from its records alone.

Inline SVG plots and inline CSS only: nothing is fetched when the page is opened, so it can be
mailed, attached to a Prefect artifact or opened on a machine with no network. Sections:
the score; the score over time (AIPerf's table every 0.1 h, and a plot); validation accuracy
against operations per sample for every trial; the search tree as a graph (aiperf.report.tree);
a timeline of trials on each worker and where each worker's time went (a stacked bar of its
trials' phases, idle last); the compute nodes' system description (aiperf.report.system); and this
system's history for the run's profile.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from aiperf.errors import UserError
from aiperf.report.phases import PARTS, percent, worker_times
from aiperf.report.summary import score_rows
from aiperf.report.system import system_section
from aiperf.report.timeline import aiperf_checkpoints, even_checkpoints, score_over_time, window
from aiperf.report.tree import search_tree_svg
from aiperf.results.score import validity_label
from aiperf.status import TrialStatus
from aiperf.store import RunRecord, Store
from aiperf.units import format_ops

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

    def ticks(self, count: int = 5) -> list[float]:
        return [self.lo + (self.hi - self.lo) * i / count for i in range(count + 1)]


class Plot:
    """An SVG chart: axes with ticks and labels; marks are added by the caller."""

    def __init__(
        self,
        plot_id: str,
        title: str,
        xs: Sequence[float],
        ys: Sequence[float],
        *,
        x_label: str,
        y_label: str,
        x_format=lambda v: f"{v:g}",
        y_format=lambda v: f"{v:g}",
        y_zero: bool = True,
        height: int = HEIGHT,
        x_pad: float = 0.0,
        x_ticks: Sequence[float] | None = None,
    ) -> None:
        self.id, self.title, self.height = plot_id, title, height
        self.x = Scale.fit(list(xs), MARGIN["left"], WIDTH - MARGIN["right"], pad=x_pad)
        self.x_ticks = list(x_ticks) if x_ticks is not None else self.x.ticks()
        self.y = Scale.fit(list(ys), height - MARGIN["bottom"], MARGIN["top"], zero=y_zero)
        self.x_label, self.y_label, self.x_format, self.y_format = (
            x_label,
            y_label,
            x_format,
            y_format,
        )
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
        for v in self.y.ticks():
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


def _line(plot: Plot, points: Sequence[tuple[float, float]], color: str, label: str) -> None:
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
            f'fill="{color}"><title>{esc(label)}: {esc(plot.y_format(y))} at {esc(plot.x_format(x))}</title></circle>'
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


def _compact(value: float, unit: str) -> str:
    """Axis labels: three significant digits and an SI prefix (e.g. 136 MOPS)."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}\u202f{prefix}{unit}"
    return f"{value:.3g}\u202f{unit}"


def _ops_axis(v: float) -> str:
    return _compact(v, "OPS")


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
                f"{c.total_ops:.4g}",
                f"{format_ops(c.ops)}OPS",
                "-" if c.best_val_accuracy is None else f"{c.best_val_accuracy:.4f}",
                f"{format_ops(c.regulated_score)}OPS",
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
        x_label="seconds into the timed window",
        y_label="OPS",
        x_format=lambda v: f"{v:.0f}",
        y_format=_ops_axis,
    )
    _line(plot, [(c.t_s, c.ops) for c in curve], COLORS[0], "OPS")
    _line(plot, [(c.t_s, c.regulated_score) for c in curve], COLORS[1], "regulated score")
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
        x_format=lambda v: _compact(v, "ops"),
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
            f"<title>trial {esc(t.trial_key)} ({esc(t.status)}): {format_ops(ops)}ops per sample, "
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
    plot = Plot(
        "plot-worker-timeline",
        "Trials on each worker",
        begins + ends + [0.0, span[1]],
        [0, len(workers)],
        x_label="seconds into the timed window",
        y_label="",
        x_format=lambda v: f"{v:.0f}",
        y_format=lambda v: "",
        height=height,
    )
    deadline = (run.deadline - start).total_seconds() if run.deadline else None
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
        x_label="seconds of the worker's share of the timed window",
        y_label="",
        x_format=lambda v: f"{v:.0f}",
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
        y_label="OPS",
        x_format=lambda v: str(rows[int(v)].run_id),
        y_format=_ops_axis,
        x_pad=0.05,
        x_ticks=xs if len(xs) <= 12 else xs[:: max(1, len(xs) // 10)],
    )
    _line(plot, [(i, r.ops) for i, r in zip(xs, rows, strict=False)], COLORS[0], "OPS")
    _line(
        plot,
        [(i, r.regulated_score) for i, r in zip(xs, rows, strict=False)],
        COLORS[1],
        "regulated score",
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
                f"{format_ops(r.ops)}OPS",
                "-" if r.ops_change_pct is None else f"{r.ops_change_pct:+.1f}%",
                f"{format_ops(r.regulated_score)}OPS",
                validity_label(r.valid, r.verified),
            ]
            for r in rows
        ],
        numeric=(0, 2, 3, 4, 5),
    )
    return plot.render() + table


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
        ("Search tree", search_tree_svg(run)),
        ("Trials on each worker", _worker_timeline(run) + _worker_phases(run)),
        ("System description", system_section(run)),
        ("This system's history", _history(store, run)),
    ]
    body = "".join(f"<h2>{esc(title)}</h2>{content}" for title, content in sections)
    return (
        f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>aiperf run {run.id}</title>"
        f"<meta name=viewport content='width=device-width, initial-scale=1'><style>{CSS}</style></head><body>"
        f"<h1>aiperf run {run.id}</h1><p>{esc(run.profile)} profile, {run.workers} workers, budget "
        f"{run.budget_s:g} s, seed {run.seed}, {esc(run.status)}; started {created}.<br>System {system.id}: "
        f"{esc(system.hostname)}, {esc(system.cpu_model)}, {system.cpu_cores} cores, GPUs: {esc(gpus)}; "
        f"fingerprint {esc(system.fingerprint[:12])}.</p>{body}"
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
                f"| {c.t_s / 3600:.2f} | {c.t_s:.1f} | {format_ops(c.ops)}OPS | {accuracy} | "
                f"{format_ops(c.regulated_score)}OPS |"
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
