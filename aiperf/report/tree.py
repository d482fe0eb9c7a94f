"""The search tree for the HTML report: a collapsible outline of the morphism tree, laid out to the
page's width.

Each trial is an entry under its parent (seeds, and trials whose parent is not in the run, at the top
level), coloured by how it ended, with its operator and figures; an entry with children is a
<details> element, open, that a click folds. Entries indent by generation up to INDENT_LEVELS, then
stay at that depth (each names its generation and parent), and text wraps: a deep hill-climb or a
long operator never makes the tree wider than the page, and no label is ever cut.
"""

from __future__ import annotations

import html

from aiperf import quality
from aiperf.report.svg import STATUS_COLORS
from aiperf.report.trials import lm_loss
from aiperf.store import RunRecord, TrialRecord
from aiperf.units import ops_per_sample

INDENT_LEVELS = 12  # generations that indent; deeper ones stay at this depth (12 x 19 px at most)

# The outline's own styles, inline so the page stays one file.
CSS = """
.search-tree { font-size: 0.9em; line-height: 1.35; overflow-wrap: anywhere; max-width: 100%; }
.search-tree .kids { margin-left: 12px; padding-left: 6px; border-left: 1px solid #ddd; }
.search-tree .kids.flat { margin-left: 0; padding-left: 0; border-left: 0; }
.search-tree summary { cursor: pointer; padding: 1px 0; }
.search-tree .leaf { padding: 1px 0 1px 1.1em; }
.search-tree .dot { display: inline-block; width: 9px; height: 9px; border-radius: 50%;
                    margin-right: 5px; vertical-align: baseline; }
.search-tree .key { font-weight: 600; font-variant-numeric: tabular-nums; }
.search-tree .op { color: #333; } .search-tree .figs { color: #666; }
"""


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


def _label(trial: TrialRecord, generation: int, parent: TrialRecord | None) -> str:
    """One trial's line: its colour, key, operator and figures; past the indented depth, its
    generation and parent too, since the indent no longer shows them."""
    color = STATUS_COLORS.get(trial.status, "#333")
    measured = quality.phrase(trial.best_val_accuracy, lm_loss(trial))
    ops = ops_per_sample(trial.train_ops_per_sample) if trial.train_ops_per_sample else "not built"
    epochs = f"{sum(e.complete for e in trial.epochs)}/{len(trial.epochs)} epochs"
    where = f" \u00b7 on {trial.worker}" if trial.worker else ""
    deep = (
        f"generation {generation}, from {parent.trial_key} \u00b7 "
        if parent is not None and generation > INDENT_LEVELS
        else ""
    )
    return (
        f'<span class=dot style="background:{color}"></span><span class=key>{_esc(trial.trial_key)}</span> '
        f"<span class=op>{_esc(trial.operator or ('seed' if parent is None else 'proposed'))}</span> "
        f"<span class=figs>\u2014 {deep}{_esc(trial.status)} \u00b7 {measured} \u00b7 "
        f"{_esc(ops)} \u00b7 {epochs}{_esc(where)}</span>"
    )


def search_tree_html(run: RunRecord) -> str:
    """The section's HTML: the outline, its legend and a note. Written without recursion (a long
    hill-climb is a chain as deep as the run has trials)."""
    if not run.trials:
        return "<p class=note>No trials.</p>"
    by_id = {t.id: t for t in run.trials}
    gens = generations(run)
    children: dict[int | None, list[TrialRecord]] = {}
    for t in run.trials:
        parent_id = t.parent_trial_id if t.parent_trial_id in by_id else None
        children.setdefault(parent_id, []).append(t)
    roots = list(children.get(None, []))
    parts = ['<div class="search-tree" id="search-tree">']
    seen: set[int] = set()
    # Items: a trial to open, at a depth; or the text that closes one.
    stack: list[tuple[TrialRecord, int] | str] = [(t, 0) for t in reversed(roots)]
    while stack or len(seen) < len(run.trials):
        if not stack:  # a parent cycle no root reaches: show its first trial at the top level
            stack.append((next(t for t in run.trials if t.id not in seen), 0))
        item = stack.pop()
        if isinstance(item, str):
            parts.append(item)
            continue
        trial, depth = item
        if trial.id in seen:
            continue
        seen.add(trial.id)
        parent = by_id.get(trial.parent_trial_id) if trial.parent_trial_id is not None else None
        label = _label(trial, gens.get(trial.id, depth), parent)
        kids = [k for k in children.get(trial.id, []) if k.id not in seen]
        attrs = f'data-trial="{_esc(trial.trial_key)}" data-status="{_esc(trial.status)}"'
        if not kids:
            parts.append(f'<div class="trial leaf" {attrs}>{label}</div>')
            continue
        flat = " flat" if depth >= INDENT_LEVELS else ""
        parts.append(
            f'<details class="trial" open {attrs}><summary>{label}</summary><div class="kids{flat}">'
        )
        stack.append("</div></details>")
        stack.extend((k, depth + 1) for k in reversed(kids))
    parts.append("</div>")
    legend = "".join(
        f'<span><i style="background:{c}"></i>{_esc(s)}</span>' for s, c in STATUS_COLORS.items()
    )
    return (
        f"{''.join(parts)}<div class=legend>{legend}</div>"
        "<p class=note>Each line is a trial under the parent a morphism made it from (seeds at the top level), "
        "coloured by how it ended: its operator, then how it ended, its best validation quality (accuracy, or "
        "loss on the LM track), its training "
        "operations per sample, its complete epochs and its worker. Click a trial to fold its descendants.</p>"
    )
