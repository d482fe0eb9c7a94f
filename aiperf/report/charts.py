"""The HTML report's plotted sections, each a piece of HTML from a run's records: the score over
time (AIPerf's table every 0.1 h, and a plot), the run's own quality (validation loss on the LM
track, accuracy on the CNN track) against operations per sample,
the trials on each worker, where each worker's time went (a stacked bar of its trials' phases,
idle last), and this system's history for the run's profile. Drawn with aiperf.report.svg; put
on the page by aiperf.report.html.
"""

from __future__ import annotations

from aiperf import quality
from aiperf.report.phases import PARTS, percent, worker_times
from aiperf.report.svg import (
    COLORS,
    MARGIN,
    STATUS_COLORS,
    Axis,
    Plot,
    add_line,
    esc,
    html_table,
)
from aiperf.report.timeline import (
    Judge,
    aiperf_checkpoints,
    counted_seconds,
    even_checkpoints,
    score_over_time,
    window,
)
from aiperf.results.score import validity_label
from aiperf.store import RunReads, RunRecord
from aiperf.units import operations, ops_per_sample, ops_rate


def _at(x: float, y: float) -> str:
    """A tooltip's text: OPS at a time into the window."""
    return f"{ops_rate(y)} at {x:.1f} s"


def _quality_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def score_over_time_plot(run: RunRecord, judge: Judge) -> str:
    """AIPerf's table every 0.1 h and a plot, each row's quality the run's own (`judge.metric`)."""
    elapsed = counted_seconds(run)  # a resumed run's segments end to end
    if elapsed is None:
        return "<p class=note>The search has not ended: no score over time yet.</p>"
    rows = score_over_time(run, aiperf_checkpoints(elapsed), judge)
    table = html_table(
        ["time (h)", "time (s)", "operations", "OPS", "best " + quality.label(judge.metric)]
        + ["regulated score"],
        [
            [
                f"{c.t_s / 3600:.2f}",
                f"{c.t_s:.1f}",
                operations(c.total_ops),
                ops_rate(c.ops),
                _quality_text(c.best_quality),
                ops_rate(c.regulated_score),
            ]
            for c in rows
        ],
        numeric=range(6),
    )
    curve = score_over_time(run, even_checkpoints(elapsed), judge)
    plot = Plot(
        "plot-score-over-time",
        "Score over time",
        [c.t_s for c in curve],
        [c.ops for c in curve] + [c.regulated_score for c in curve],
        x=Axis("time into the timed window", time=True),
        y=Axis("OPS, regulated score", unit="OPS"),
    )
    add_line(plot, [(c.t_s, c.ops) for c in curve], COLORS[0], "OPS", _at)
    add_line(plot, [(c.t_s, c.regulated_score) for c in curve], COLORS[1], "regulated score", _at)
    legend = (
        f'<div class=legend><span><i style="background:{COLORS[0]}"></i>OPS</span>'
        f'<span><i style="background:{COLORS[1]}"></i>regulated score</span></div>'
    )
    return (
        f"<p class=note>As AIPerf prints it: every 0.1 h of the timed window and at its end, the operations of "
        f"every epoch finished by then over the time so far, regulated by the best "
        f"{esc(quality.label(judge.metric))} of the complete epochs finished by then."
        f"</p>{table}{plot.render()}{legend}"
    )


def quality_heading(metric: str) -> str:
    """The scatter's title: 'Validation loss against ...' on the LM track, accuracy on the CNN's."""
    name = "loss" if quality.lower_is_better(metric) else "accuracy"
    return f"Validation {name} against operations per sample"


def quality_vs_ops_plot(run: RunRecord, metric: str) -> str:
    """Each trial's best quality (`metric`: the run's own) against its operations per sample."""
    # The trials that built a model, with their operations per sample.
    built = [(t, ops) for t in run.trials if (ops := t.train_ops_per_sample)]
    if not built:
        return "<p class=note>No trial built a model.</p>"
    lower = quality.lower_is_better(metric)
    measured = {t.id: t.best_val_loss if lower else t.best_val_accuracy for t, _ in built}
    present = [v for v in measured.values() if v is not None]
    # An unmeasured trial sits, faded, at the axis's worst end: 0 accuracy, the highest loss.
    floor = max(present, default=1.0) if lower else 0.0
    label = quality.label(metric)
    plot = Plot(
        "plot-accuracy-vs-ops",
        quality_heading(metric),
        [float(ops) for _, ops in built],
        [floor if v is None else v for v in measured.values()] + [floor if present else 1.0],
        x=Axis("training operations per sample", unit="OPS/sample", pad=0.08),
        y=Axis("best " + label, format=lambda v: f"{v:.2f}"),
    )
    for t, ops in built:
        color = STATUS_COLORS.get(t.status, "#333")
        value = measured[t.id]
        shape = (
            f'<circle class="point trial" data-trial="{esc(t.trial_key)}" cx="{plot.x(ops):.1f}" '
            f'cy="{plot.y(floor if value is None else value):.1f}" r="5" fill="{color}" '
            f'fill-opacity="{0.85 if value is not None else 0.25}">'
            f"<title>trial {esc(t.trial_key)} ({esc(t.status)}): {ops_per_sample(ops)}, "
            f"best {esc(label)} {_quality_text(value)}</title></circle>"
        )
        plot.add(shape)
    legend = "".join(
        f'<span><i style="background:{c}"></i>{esc(s)}</span>' for s, c in STATUS_COLORS.items()
    )
    return (
        f"{plot.render()}<div class=legend>{legend}</div><p class=note>One point per trial; faded points never "
        f"finished an epoch, so they have no {esc(label)}.</p>"
    )


def worker_timeline_plot(run: RunRecord) -> str:
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
        x=Axis("time into the timed window", time=True),
        y=Axis("", format=lambda v: ""),
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


def worker_phases_plot(run: RunRecord) -> str:
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
        x=Axis("the worker's share of the timed window", time=True),
        y=Axis("", format=lambda v: ""),
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
    table = html_table(
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


def history_plot(store: RunReads, run: RunRecord) -> str:
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
        x=Axis(
            "run (oldest to newest)",
            format=lambda v: str(rows[int(v)].run_id),
            pad=0.05,
            ticks=xs if len(xs) <= 12 else xs[:: max(1, len(xs) // 10)],
        ),
        y=Axis("OPS, regulated score", unit="OPS"),
    )

    def of_run(i: float, y: float) -> str:
        return f"{ops_rate(y)} in run {rows[int(i)].run_id}"

    add_line(plot, [(i, r.ops) for i, r in zip(xs, rows, strict=False)], COLORS[0], "OPS", of_run)
    add_line(
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
    table = html_table(
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
