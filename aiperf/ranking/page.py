"""`aiperf results page`: the ranked list as one self-contained HTML page, in TOP500's manner.

A title and the date, then per group (one division, ruleset and workload) its heading, a table of
its ranked rows and an inline SVG plot of OPS against accelerator count across the systems: weak
scaling across machines. Only ranked rows are plotted: an unranked one (invalid, unverified, or a
closed series short of runs) is listed greyed below them with why, and left off the plot, whose
figures would otherwise compare it with the ranked ones; a note names how many. A group whose
ranked systems are all CPU-only is plotted against their physical cores, and the axis says so; in
a group with accelerators, CPU-only systems are left off the plot and a note names how many. No
script, no external URL, no font: it opens offline, anywhere.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from aiperf.ranking.standings import Group, Standing
from aiperf.report.phases import percent
from aiperf.results.uncertainty import Interval
from aiperf.units import ops_rate, ops_span

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 80, 30, 20, 50

CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 2em auto; max-width: 1100px;
       color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0; } td, th { padding: 3px 8px; border-bottom: 1px solid #eee;
text-align: left; } th { background: #f5f5f5; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.num, td.date { white-space: nowrap; }
tr.unqualified td { color: #888; } p.note { color: #666; font-size: 0.9em; }
svg.plot { display: block; margin: 0.5em 0; background: #fff; border: 1px solid #eee; }
svg text { font-size: 11px; fill: #333; } svg line { stroke: #555; } svg line.grid { stroke: #eee; }
"""

HEADERS = (
    "rank",
    "system",
    "submitter",
    "nodes",
    "accelerators",
    "OPS",
    "OPS 95% interval",
    "regulated",
    "MFU",
    "runs",
    "OPS spread",
    "date",
    "not ranked",
)


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def spread(s: Standing, *, full: bool = True) -> str:
    """A series' spread: the coefficient of variation of its OPS and (`full`) its lowest and
    highest; "-" for a single run, which measures none."""
    if s.runs < 2:
        return "-"
    cv = f"CV {100 * s.ops.cv:.2g}%"
    if not full:
        return cv
    return f"{ops_rate(s.ops.minimum)} to {ops_rate(s.ops.maximum)}, {cv}"


def plus_minus(interval: Interval | None, figure: float) -> str:
    """OPS's 95% interval in a narrow column: its half-width as a share of the figure, "±4.8%";
    "-" where the result has none."""
    if interval is None or figure <= 0:
        return "-"
    return f"±{50 * (interval.high - interval.low) / figure:.2g}%"


def _cell_class(kind: bool | str) -> str:
    """True: a figure (right-aligned, on one line); a word: that class; False: none."""
    if kind is True:
        return " class=num"
    return f" class={kind}" if kind else ""


def _row(s: Standing) -> str:
    interval = s.ops_interval
    cells: list[tuple[str, bool | str]] = [
        (s.rank_text, True),
        (s.system, False),
        (s.submitter or "-", False),
        (str(s.nodes), True),
        (s.accelerators_text(), False),
        (ops_rate(s.ops.ranked), True),
        (ops_span(interval.low, interval.high) if interval else "-", False),
        (ops_rate(s.regulated_score.ranked), True),
        (percent(s.mfu), True),
        (str(s.runs), True),
        (spread(s), False),
        (s.date.strftime("%Y-%m-%d"), "date"),
        (s.reason or "", False),
    ]
    body = "".join(f"<td{_cell_class(kind)}>{esc(text)}</td>" for text, kind in cells)
    kind = "qualified" if s.qualified else "unqualified"
    return (
        f'<tr class="result {kind}" data-rank="{s.rank_text}" data-system="{esc(s.system)}">'
        f"{body}</tr>"
    )


def nice_ticks(top: float, count: int = 5, *, whole: bool = False) -> list[float]:
    """Ticks from 0 at a round step (1, 2, 2.5 or 5 times a power of ten; whole numbers when
    `whole`, as counts of accelerators are) up to the first at or above `top`."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / count
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(s * magnitude for s in (1.0, 2.0, 2.5, 5.0, 10.0) if s * magnitude >= raw)
    if whole:
        step = max(1.0, math.ceil(step))
    ticks = [0.0]
    while ticks[-1] < top * (1 - 1e-9):
        ticks.append(ticks[-1] + step)
    return ticks


def _label(x: float, y: float, text: str) -> str:
    """A point's system name beside it: to its right, or to its left in the plot's right half."""
    right = x > (LEFT + WIDTH - RIGHT) / 2
    return (
        f'<text class="point-label" x="{x - 8 if right else x + 8:.1f}" y="{y + 4:.1f}" '
        f'text-anchor="{"end" if right else "start"}">{esc(text)}</text>'
    )


def scaling_plot(group: Group, plot_id: str) -> str:
    """OPS against accelerators (or, when every system is CPU-only, physical cores) per ranked
    system; "" with a note when the group has none ranked."""
    ranked = [s for s in group.standings if s.rank is not None]
    unranked = len(group.standings) - len(ranked)
    unranked_note = (
        f"<p class=note>{unranked} unranked result(s) of this group are not on the plot.</p>"
        if unranked
        else ""
    )
    if not ranked:
        return unranked_note
    points, x_label, left_off = _plot_points(ranked)
    axes = _Axes(
        nice_ticks(max((x for x, _ in points), default=1.0) * 1.05, whole=True),
        nice_ticks(max((s.ops.ranked for _, s in points), default=1.0) * 1.05),
    )
    title = f"OPS against {x_label.split(' (')[0]}: {group.key.heading()}"
    parts = [
        f'<svg class="plot" id="{esc(plot_id)}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{esc(title)}">'
        f"<title>{esc(title)}</title>",
        *_axes_svg(axes, x_label),
    ]
    for x, s in points:
        px, py = axes.px(x), axes.py(s.ops.ranked)
        parts.append(
            f'<circle class="point" data-system="{esc(s.system)}" cx="{px:.1f}" '
            f'cy="{py:.1f}" r="5" fill="#1f77b4"><title>#{s.rank} {esc(s.system)}: '
            f"{esc(ops_rate(s.ops.ranked))} at {x:g}</title></circle>" + _label(px, py, s.system)
        )
    parts.append("</svg>")
    note = (
        f"<p class=note>{left_off} CPU-only system(s) of this group are not on the plot, whose "
        "axis counts accelerators.</p>"
        if left_off
        else ""
    )
    return "".join(parts) + note + unranked_note


def _plot_points(ranked: list[Standing]) -> tuple[list[tuple[float, Standing]], str, int]:
    """(x, standing) per system on the plot, the x axis's label, and how many CPU-only systems are
    left off: with any accelerators in the group the axis counts them, and CPU-only systems have no
    place on it; else it counts physical cores (nodes, where cores are not described)."""
    with_accelerators = [s for s in ranked if s.accelerators]
    if with_accelerators:
        points = [(float(s.accelerators), s) for s in with_accelerators]
        return points, "accelerators (all nodes)", len(ranked) - len(with_accelerators)
    points = [(float(s.cores or s.nodes), s) for s in ranked]
    counted_cores = all(s.cores for s in ranked)
    x_label = (
        "physical CPU cores (all nodes; CPU-only systems)"
        if counted_cores
        else "nodes (CPU-only systems; cores not described)"
    )
    return points, x_label, 0


@dataclass(frozen=True)
class _Axes:
    """A plot's ticks, and where a value falls on it in SVG pixels."""

    x_ticks: list[float]
    y_ticks: list[float]

    def px(self, x: float) -> float:
        """x's pixel, left to right."""
        return LEFT + x / self.x_ticks[-1] * (WIDTH - LEFT - RIGHT)

    def py(self, y: float) -> float:
        """y's pixel: SVG's y grows downwards, so 0 is at the bottom."""
        return HEIGHT - BOTTOM - y / self.y_ticks[-1] * (HEIGHT - TOP - BOTTOM)


def _axes_svg(axes: _Axes, x_label: str) -> list[str]:
    """The plot's grid lines and OPS labels, x ticks, both axes and their labels."""
    parts = []
    for v in axes.y_ticks:
        y = axes.py(v)
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{esc(ops_rate(v))}</text>'
        )
    for v in axes.x_ticks:
        x = axes.px(v)
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{HEIGHT - BOTTOM}" y2="{HEIGHT - BOTTOM + 5}"/>'
            f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 18}" text-anchor="middle">{v:g}</text>'
        )
    parts.append(
        f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{HEIGHT - BOTTOM}" y2="{HEIGHT - BOTTOM}"/>'
        f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{HEIGHT - BOTTOM}"/>'
        f'<text class="x-label" x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 10}" '
        f'text-anchor="middle">{esc(x_label)}</text>'
        f'<text transform="translate(14 {(TOP + HEIGHT - BOTTOM) / 2}) rotate(-90)" '
        'text-anchor="middle">OPS</text>'
    )
    return parts


def build_page(
    groups: Sequence[Group], *, title: str = "aiperf results", now: datetime | None = None
) -> str:
    """The whole page as HTML text."""
    when = (now or datetime.now(tz=UTC)).strftime("%Y-%m-%d %H:%M UTC")
    total = sum(len(g.standings) for g in groups)
    body = [
        f"<h1>{esc(title)}</h1>",
        f"<p>{esc(when)}: {total} system result(s) in {len(groups)} group(s). Results of different "
        "divisions, rulesets or workloads are never ranked together. Only a qualified result has a "
        "rank: valid, verified and, in the closed division, a series of as many runs as its "
        "ruleset asks; the others are listed greyed below the ranked rows of their group, with why "
        "they are not ranked, and are not plotted. Every result here passed every check of "
        "<code>aiperf verify --package</code> when it was imported.</p>",
    ]
    if not groups:
        body.append(
            "<p class=note>No results yet: import packages with <code>aiperf results import</code>.</p>"
        )
    for i, g in enumerate(groups, start=1):
        head = "".join(f"<th>{esc(h)}</th>" for h in HEADERS)
        rows = "".join(_row(s) for s in g.standings)
        rule = "single runs" if g.rule is None else g.rule.describe()
        body += [
            f'<h2 id="group-{i}">{esc(g.key.heading())}</h2>',
            f"<p class=note>Workload hash {esc(g.key.workload_hash or '-')}; ranked by OPS of: "
            f"{esc(rule)}.</p>",
            f'<table class="ranking" id="table-{i}"><thead><tr>{head}</tr></thead><tbody>{rows}'
            "</tbody></table>",
            scaling_plot(g, f"plot-{i}"),
        ]
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        + "".join(body)
        + "</body></html>"
    )


def write_page(groups: Sequence[Group], path: Path) -> Path:
    path = Path(path)
    if path.parent and not path.parent.is_dir():
        from aiperf.errors import UserError

        raise UserError(f"--to {path}: folder {path.parent} does not exist; create it first")
    path.write_text(build_page(groups), encoding="utf-8")
    return path
