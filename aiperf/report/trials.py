"""A run's trials for the terminal: a table, and the search tree (parent to child, by morphism)."""

from __future__ import annotations

from rich.console import Console, ConsoleOptions, RenderResult
from rich.text import Text
from rich.tree import Tree

from aiperf import quality
from aiperf.arch.spec import network_from_dict
from aiperf.arch.transformer import TransformerSpec, is_transformer
from aiperf.report.tables import Col, FitTable
from aiperf.results.trial_figures import TrialFigures, run_trial_figures
from aiperf.store import RunRecord, TrialRecord
from aiperf.units import ops_per_sample


def lm_loss(trial: TrialRecord) -> float | None:
    """An LM trial's best val loss, its quality (None for a CNN's, judged by accuracy)."""
    return trial.best_val_loss if is_transformer(trial.architecture) else None


def _accuracy(trial: TrialRecord) -> str:
    """The trial's quality: its best val accuracy, or an LM trial's best val loss."""
    return quality.shown(trial.best_val_accuracy, lm_loss(trial))


def _shape(trial: TrialRecord) -> tuple[str, str]:
    """The convolutions and skips of a CNN; an LM's blocks and width in their place."""
    if is_transformer(trial.architecture):
        spec = TransformerSpec.from_dict(trial.architecture)
        return f"{spec.layers} blocks", f"width {spec.d_model}"
    net = network_from_dict(trial.architecture)
    return str(net.conv_count), str(net.skip_count)


def _ops(trial: TrialRecord) -> str:
    return ops_per_sample(trial.train_ops_per_sample) if trial.train_ops_per_sample else "-"


def _operator(trial: TrialRecord) -> str | None:
    """The morphism as recorded, with a space after each comma so that a long one can take two
    lines at a narrow terminal."""
    return trial.operator.replace(",", ", ") if trial.operator else None


def trial_table(run: RunRecord) -> FitTable:
    """One row per trial; a narrow terminal keeps what the search did and how each trial did,
    leaving out the per-trial figures (aiperf.results.trial_figures), then the architecture and
    hyperparameters first (a wider one shows them)."""
    lm = any(is_transformer(t.architecture) for t in run.trials)
    columns = (
        Col("trial"),
        Col("parent"),
        Col("operator", wrap=True),
        Col("status"),
        Col("worker", rank=3),
        Col("devices", "right", rank=10),
        Col("convs", "right", rank=8),
        Col("skips", "right", rank=9),
        Col("params", "right", rank=4),
        Col("lr", "right", rank=5),
        Col("batch", "right", rank=6),
        Col("dropout", "right", rank=7),
        Col("epochs", "right", rank=2),
        Col("train ops/sample", "right", rank=1),
        Col(
            "quality" if any(lm_loss(t) is not None for t in run.trials) else "val acc",
            "right",
        ),
        # What a narrow terminal leaves out first: `aiperf show --json` has them too.
        Col("tokens/s" if lm else "samples/s", "right", rank=11),
        Col("MFU", "right", rank=12),
        Col("compile", "right", rank=13),
    )
    keys: dict[int | None, str] = {t.id: t.trial_key for t in run.trials}
    figures = run_trial_figures(run)
    rows = [_trial_row(t, keys) + _figure_cells(figures[t.id], lm) for t in run.trials]
    return FitTable(columns, rows, title=f"trials of run {run.id}")


def _rate(value: float | None) -> str:
    """Samples or tokens per second: whole numbers from 100 up, three significant digits below."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _figure_cells(figures: TrialFigures, lm: bool) -> list[str]:
    """A trial's rate (tokens/s on the LM track), MFU and compile share; '-' where not recorded."""
    from aiperf.report.phases import percent

    rate = figures.tokens_per_s if lm else figures.samples_per_s
    return [_rate(rate), percent(figures.mfu), percent(figures.compile_share)]


def _parent(t: TrialRecord, keys: dict[int | None, str]) -> str:
    """The parent's key, and the epoch whose weights the trial grew from where it inherited
    them (search.inherit): "3 (epoch 1)"."""
    parent = keys.get(t.parent_trial_id, "-")
    return parent if t.inherited_epoch is None else f"{parent} (epoch {t.inherited_epoch})"


def _trial_row(t: TrialRecord, keys: dict[int | None, str]) -> list[str]:
    convs, skips = _shape(t)
    hp = t.hyperparameters
    return [
        t.trial_key,
        _parent(t, keys),
        _operator(t) or "-",
        str(t.status),
        t.worker or "-",
        str(t.devices or 1),  # a trial recorded before devices were is a one-device trial
        convs,
        skips,
        f"{t.parameters:,}" if t.parameters else "-",
        f"{hp.get('learning_rate', 0):.4g}",
        str(hp.get("batch_size", "-")),
        str(hp.get("dropout", "-")),
        f"{sum(e.complete for e in t.epochs)}/{len(t.epochs)}",
        _ops(t),
        _accuracy(t),
    ]


def time_table(run: RunRecord) -> FitTable | None:
    """Where each worker's share of the window went (seconds per phase, idle derived); None when
    no trial recorded its phases. A narrow terminal leaves out the trial count first, then the
    phases that are usually near zero (report, count)."""
    from aiperf.report.phases import PARTS, percent, worker_times

    workers = worker_times(run)
    if not workers:
        return None
    ranks = {"report": 2, "count": 3}
    columns = (
        Col("worker"),
        Col("trials", "right", rank=1),
        *(Col(part, "right", rank=ranks.get(part, 0)) for part in PARTS),
        Col("utilisation", "right"),
    )
    rows = [
        [
            w.worker,
            str(w.trials),
            *(f"{w.seconds[part]:.2f}" for part in PARTS),
            percent(w.utilisation),
        ]
        for w in workers
    ]
    title = f"where the time went in run {run.id} (seconds of each worker's window)"
    return FitTable(columns, rows, title=title)


def phase_table(run: RunRecord) -> FitTable:
    """Each trial's phases, in seconds, as its worker measured them. A narrow terminal leaves out
    the worker first, then the status, then the phases that are usually near zero (a wider one
    shows them)."""
    from aiperf.report.phases import PARTS

    ranks = {"report": 3, "count": 4}
    columns = (
        Col("trial"),
        Col("worker", rank=1),
        Col("status", rank=2),
        *(Col(part, "right", rank=ranks.get(part, 0)) for part in PARTS[:-1]),
        Col("total", "right"),
    )
    rows = []
    for t in run.trials:
        p = t.phases
        if p is None:  # recorded before phases were, or its worker was lost
            cells = ["-"] * len(PARTS)
        else:
            cells = [f"{getattr(p, f'{part}_s'):.2f}" for part in PARTS[:-1]] + [
                f"{p.total_s:.2f}"
            ]
        rows.append([t.trial_key, t.worker or "-", str(t.status), *cells])
    return FitTable(columns, rows, title=f"phases of the trials of run {run.id} (seconds)")


class TrialLabel:
    """A trial in the search tree: one line where it fits, else its morphism on the first line and
    its figures on the second, rather than a line broken between a figure and its unit."""

    def __init__(self, trial: TrialRecord) -> None:
        self.head = Text.assemble((trial.trial_key, "bold"), " ", _operator(trial) or "proposed")
        self.figures = Text.assemble(
            f"{quality.phrase(trial.best_val_accuracy, lm_loss(trial))}  {_ops(trial)}  ",
            (str(trial.status), "dim"),
        )

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        line = Text.assemble(self.head, "  ", self.figures)
        if line.cell_len <= options.max_width:
            yield line
        else:
            yield self.head
            yield self.figures


def search_tree(run: RunRecord) -> Tree:
    """Every trial under its parent; seeds (and keras-tuner's parentless trials) at the root."""
    root = Tree(f"[bold]search tree of run {run.id}[/] ({len(run.trials)} trials)")
    children: dict[int | None, list[TrialRecord]] = {}
    for t in run.trials:
        children.setdefault(t.parent_trial_id, []).append(t)

    def grow(branch: Tree, parent_id: int | None) -> None:
        for t in children.get(parent_id, []):
            grow(branch.add(TrialLabel(t)), t.id)

    grow(root, None)
    return root
