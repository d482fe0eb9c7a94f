"""The search tree as a graph for the HTML report: one self-contained inline SVG.

Each trial is a node, placed in the column of its generation (a seed, or a trial without a parent
in the run, is generation 0; a child is one more than its parent) and, within the column, near its
parent; each edge runs parent -> child and is labelled with the morphism operator that made the
child. Nodes are coloured by how the trial ended.
"""

from __future__ import annotations

import html

from aiperf.status import TrialStatus
from aiperf.store import RunRecord, TrialRecord
from aiperf.units import format_ops

STATUS_COLORS = {
    TrialStatus.COMPLETED: "#2ca02c",
    TrialStatus.STOPPED: "#ff7f0e",
    TrialStatus.FAILED: "#d62728",
    TrialStatus.DIVERGED: "#9467bd",
    TrialStatus.INTERRUPTED: "#8c564b",
    TrialStatus.RUNNING: "#7f7f7f",
}
COLUMN, ROW = 240, 34  # pixels per generation, per trial in a generation
NODE_W, NODE_H = 74, 22
PAD = 16
MIN_WIDTH, MIN_HEIGHT = 720, 120  # as wide as the report's other plots
LABEL_CHARS = 28  # an operator's label on its edge: what fits between two columns


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def generations(run: RunRecord) -> dict[int, int]:
    """Trial id -> generation: 0 without a parent in the run, else its parent's plus one."""
    by_id = {t.id: t for t in run.trials}
    known: dict[int, int] = {}
    for trial in run.trials:
        chain: list[TrialRecord] = []
        on_chain: set[int] = set()
        node: TrialRecord | None = trial
        while node is not None and node.id not in known and node.id not in on_chain:
            chain.append(node)
            on_chain.add(node.id)
            node = by_id.get(node.parent_trial_id) if node.parent_trial_id is not None else None
        base = known[node.id] + 1 if node is not None and node.id in known else 0
        for i, t in enumerate(reversed(chain)):
            known[t.id] = base + i
    return known


def layout(run: RunRecord) -> dict[int, tuple[int, int]]:
    """Trial id -> (generation, row): each generation in the order of its parents' rows, then by number."""
    gens = generations(run)
    rows: dict[int, tuple[int, int]] = {}
    for g in range(max(gens.values(), default=-1) + 1):
        members = [t for t in run.trials if gens[t.id] == g]
        members.sort(
            key=lambda t: (
                rows[t.parent_trial_id][1] if t.parent_trial_id in rows else -1,
                t.number,
            )
        )
        for row, t in enumerate(members):
            rows[t.id] = (g, row)
    return rows


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "\u2026"


def search_tree_svg(run: RunRecord) -> str:
    """The section's HTML: the graph, its legend and a note."""
    if not run.trials:
        return "<p class=note>No trials.</p>"
    places = layout(run)
    by_id = {t.id: t for t in run.trials}
    width = max(MIN_WIDTH, PAD * 2 + (max(g for g, _ in places.values()) + 1) * COLUMN)
    height = max(MIN_HEIGHT, PAD * 2 + (max(r for _, r in places.values()) + 1) * ROW)

    def corner(trial_id: int) -> tuple[float, float]:
        g, r = places[trial_id]
        return PAD + g * COLUMN, PAD + r * ROW

    parts = [
        f'<svg class="plot tree" id="plot-search-tree" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="Search tree">'
        "<title>Search tree: parent to child, by morphism</title>"
    ]
    for t in run.trials:  # edges first, so nodes sit on top
        parent = by_id.get(t.parent_trial_id) if t.parent_trial_id is not None else None
        if parent is None:
            continue
        px, py = corner(parent.id)
        cx, cy = corner(t.id)
        x0, y0, x1, y1 = px + NODE_W, py + NODE_H / 2, cx, cy + NODE_H / 2
        mid = (x0 + x1) / 2
        operator = t.operator or "proposed"
        parts.append(
            f'<g class="edge" data-parent="{_esc(parent.trial_key)}" data-child="{_esc(t.trial_key)}" '
            f'data-operator="{_esc(operator)}"><path d="M{x0:.1f},{y0:.1f} C{mid:.1f},{y0:.1f} {mid:.1f},{y1:.1f} '
            f'{x1:.1f},{y1:.1f}" fill="none" stroke="#999" stroke-width="1.2"/>'
            f'<text class="operator" x="{mid:.1f}" y="{(y0 + y1) / 2 - 3:.1f}" text-anchor="middle" '
            'style="font-size:9px;paint-order:stroke;stroke:#fff;stroke-width:3px">'
            f"{_esc(_short(operator))}</text><title>{_esc(parent.trial_key)} \u2192 {_esc(t.trial_key)}: "
            f"{_esc(operator)}</title></g>"
        )
    for t in run.trials:
        x, y = corner(t.id)
        color = STATUS_COLORS.get(t.status, "#333")
        accuracy = "-" if t.best_val_accuracy is None else f"{t.best_val_accuracy:.4f}"
        ops = (
            f"{format_ops(t.train_ops_per_sample)}ops per sample"
            if t.train_ops_per_sample
            else "not built"
        )
        parts.append(
            f'<g class="node trial" data-trial="{_esc(t.trial_key)}" data-status="{_esc(t.status)}">'
            f'<rect class="node" x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="5" '
            f'fill="{color}" fill-opacity="0.85"/>'
            f'<text x="{x + NODE_W / 2}" y="{y + NODE_H / 2 + 4}" text-anchor="middle" fill="#fff" '
            f'style="fill:#fff">{_esc(t.trial_key[-8:])}</text><title>trial {_esc(t.trial_key)} ({_esc(t.status)}): '
            f"{_esc(t.operator or 'proposed')}; best val accuracy {accuracy}; {_esc(ops)}</title></g>"
        )
    parts.append("</svg>")
    legend = "".join(
        f'<span><i style="background:{c}"></i>{_esc(s)}</span>' for s, c in STATUS_COLORS.items()
    )
    return (
        f'<div style="overflow-x:auto">{"".join(parts)}</div><div class=legend>{legend}</div>'
        "<p class=note>Each box is a trial, in the column of its generation (seeds first), coloured by how it "
        "ended; each edge runs from a parent to the child a morphism made of it, labelled with the operator.</p>"
    )
