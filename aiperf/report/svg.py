"""The HTML report's drawing kit: an SVG chart with round-tick axes (Plot, Scale), a line series, a
table, HTML escaping and the report's colours. Kept apart from the sections that use it
(aiperf.report.charts) so a chart's geometry is read and tested in one place, and from the page
(aiperf.report.html) that puts the sections together.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aiperf.report.axes import round_ticks, si_axis, time_unit
from aiperf.status import TrialStatus

WIDTH, HEIGHT = 720, 300
MARGIN = {"left": 90, "right": 40, "top": 20, "bottom": 50}
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
# Every trial status, so that none is drawn in a colour the legend does not name (the charts' and
# the search tree's legends list these).
STATUS_COLORS = {
    TrialStatus.COMPLETED: "#2ca02c",
    TrialStatus.STOPPED: "#ff7f0e",
    TrialStatus.FAILED: "#d62728",
    TrialStatus.DIVERGED: "#9467bd",
    TrialStatus.INTERRUPTED: "#8c564b",
    TrialStatus.OUT_OF_MEMORY: "#e377c2",
    TrialStatus.TOO_LARGE: "#bcbd22",
    TrialStatus.RUNNING: "#7f7f7f",
}


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


@dataclass(frozen=True)
class Axis:
    """How one axis of a Plot reads: its label, and how its ticks are written. `time`: seconds, read
    in s, min or h; `unit`: one SI prefix for every tick, named in the label (both x only where
    noted). x only: `pad`, the share of the data's span added on each side, and `ticks` the caller
    chose (a padded scale around them). y only: `zero`, whether the axis starts at 0."""

    label: str
    format: Callable[[float], str] | None = None
    time: bool = False  # x only
    unit: str | None = None
    pad: float = 0.0  # x only
    ticks: Sequence[float] | None = None  # x only
    zero: bool = True  # y only

    def reading(self, ticks: Sequence[float]) -> tuple[str, Callable[[float], str]]:
        """(label, format) for these ticks: the unit a time or an SI prefix reads in, in the label."""
        label = self.label
        written: Callable[[float], str] = self.format or (lambda v: f"{v:.12g}")
        if self.time:
            unit, scale = time_unit(ticks)
            written = lambda v: f"{v / scale:.12g}"  # noqa: E731
            label = f"{label} ({unit})"
        if self.unit:
            unit_label, written = si_axis(ticks, self.unit)
            label = f"{label} ({unit_label})"
        return label, written


def _x_scale(xs: list[float], x: Axis) -> tuple[list[float], Scale]:
    """The x ticks and scale: round ticks over the padded data, or the caller's ticks (runs by
    number) on a padded scale around the data."""
    if x.ticks is not None:
        return list(x.ticks), Scale.fit(xs, MARGIN["left"], WIDTH - MARGIN["right"], pad=x.pad)
    lo, hi = min(xs), max(xs)
    margin = (hi - lo) * x.pad
    lo = lo - margin if lo - margin >= 0 or lo < 0 else 0.0
    ticks = round_ticks(lo, hi + margin, time=x.time)
    return ticks, Scale(ticks[0], ticks[-1], MARGIN["left"], WIDTH - MARGIN["right"])


class Plot:
    """An SVG chart: axes with round ticks (aiperf.report.axes) and labels; marks are added by the
    caller. An axis of seconds (`Axis.time`) reads in s, min or h, whichever its step is round in; an
    axis with a unit (`Axis.unit`: OPS, OPS/sample) shares one SI prefix, named in its label
    ("OPS (GOPS)": 0, 25, 50, 75)."""

    def __init__(
        self,
        plot_id: str,
        title: str,
        xs: Sequence[float],
        ys: Sequence[float],
        *,
        x: Axis,
        y: Axis,
        height: int = HEIGHT,
    ) -> None:
        self.id, self.title, self.height = plot_id, title, height
        xs, ys = list(xs) or [0.0, 1.0], list(ys) or [0.0, 1.0]
        self.x_ticks, self.x = _x_scale(xs, x)
        self.y_ticks = round_ticks(min(min(ys), 0.0) if y.zero else min(ys), max(ys))
        self.y = Scale(self.y_ticks[0], self.y_ticks[-1], height - MARGIN["bottom"], MARGIN["top"])
        self.x_label, self.x_format = x.reading(self.x_ticks)
        self.y_label, self.y_format = y.reading(self.y_ticks)
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


def add_line(
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


def html_table(
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
