"""A run's trials for the terminal: a table, and the search tree (parent to child, by morphism)."""

from __future__ import annotations

from rich.table import Table
from rich.tree import Tree

from aiperf.arch.spec import network_from_dict
from aiperf.store import RunRecord, TrialRecord
from aiperf.units import format_ops


def _accuracy(trial: TrialRecord) -> str:
    return "-" if trial.best_val_accuracy is None else f"{trial.best_val_accuracy:.4f}"


def _ops(trial: TrialRecord) -> str:
    return f"{format_ops(trial.train_ops_per_sample)}OPS" if trial.train_ops_per_sample else "-"


def trial_table(run: RunRecord) -> Table:
    table = Table(title=f"trials of run {run.id}")
    for column in (
        "trial",
        "parent",
        "operator",
        "status",
        "worker",
        "convs",
        "skips",
        "params",
        "lr",
        "batch",
        "dropout",
        "epochs",
        "train ops/sample",
        "best val acc",
    ):
        table.add_column(column)
    keys: dict[int | None, str] = {t.id: t.trial_key for t in run.trials}
    for t in run.trials:
        net = network_from_dict(t.architecture)
        hp = t.hyperparameters
        table.add_row(
            t.trial_key,
            keys.get(t.parent_trial_id, "-"),
            t.operator or "-",
            t.status,
            t.worker or "-",
            str(net.conv_count),
            str(net.skip_count),
            f"{t.parameters:,}" if t.parameters else "-",
            f"{hp.get('learning_rate', 0):.4g}",
            str(hp.get("batch_size", "-")),
            str(hp.get("dropout", "-")),
            f"{sum(e.complete for e in t.epochs)}/{len(t.epochs)}",
            _ops(t),
            _accuracy(t),
        )
    return table


def time_table(run: RunRecord) -> Table | None:
    """Where each worker's share of the window went (seconds per phase, idle derived); None when
    no trial recorded its phases."""
    from aiperf.report.phases import PARTS, percent, worker_times

    workers = worker_times(run)
    if not workers:
        return None
    table = Table(title=f"where the time went in run {run.id} (seconds of each worker's window)")
    for column in ("worker", "trials", *PARTS, "utilisation"):
        table.add_column(column, justify="left" if column == "worker" else "right")
    for w in workers:
        table.add_row(
            w.worker,
            str(w.trials),
            *(f"{w.seconds[part]:.2f}" for part in PARTS),
            percent(w.utilisation),
        )
    return table


def phase_table(run: RunRecord) -> Table:
    """Each trial's phases, in seconds, as its worker measured them."""
    from aiperf.report.phases import PARTS

    table = Table(title=f"phases of the trials of run {run.id} (seconds)")
    for column in ("trial", "worker", "status", *PARTS[:-1], "total"):
        table.add_column(
            column, justify="left" if column in ("trial", "worker", "status") else "right"
        )
    for t in run.trials:
        p = t.phases
        if p is None:  # recorded before phases were, or its worker was lost
            cells = ["-"] * len(PARTS)
        else:
            cells = [f"{getattr(p, f'{part}_s'):.2f}" for part in PARTS[:-1]] + [
                f"{p.total_s:.2f}"
            ]
        table.add_row(t.trial_key, t.worker or "-", str(t.status), *cells)
    return table


def search_tree(run: RunRecord) -> Tree:
    """Every trial under its parent; seeds (and keras-tuner's parentless trials) at the root."""
    root = Tree(f"[bold]search tree of run {run.id}[/] ({len(run.trials)} trials)")
    children: dict[int | None, list[TrialRecord]] = {}
    for t in run.trials:
        children.setdefault(t.parent_trial_id, []).append(t)

    def label(t: TrialRecord) -> str:
        operator = t.operator or "proposed"
        return (
            f"[bold]{t.trial_key}[/] {operator}  val acc {_accuracy(t)}  {_ops(t)}/sample  "
            f"[dim]{t.status}[/]"
        )

    def grow(branch: Tree, parent_id: int | None) -> None:
        for t in children.get(parent_id, []):
            grow(branch.add(label(t)), t.id)

    grow(root, None)
    return root
