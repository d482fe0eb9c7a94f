"""A trial's kept weights: the weights of its best complete epoch, in one file per trial in the
run's folder (aiperf.paths.weights_path), written by the trial and read by two others: `aiperf
verify`, which evaluates the best trial's again (aiperf.results.remeasure), and a grown LM child
that continues its parent (search.inherit; `inherited_lm`, here).

The file is Keras' weights-only format with one attribute of aiperf's on its root, the epoch
whose weights it holds, so that a child records exactly which of its parent's epochs it grew from
even while the parent, still training, writes a better one: the child reads a snapshot (`snapshot`)
and takes the epoch and the weights from the same bytes.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from aiperf import quality
from aiperf.train import lm
from aiperf.train.messages import EpochReport, TrialRequest

log = logging.getLogger("aiperf.train.kept")

EPOCH_ATTRIBUTE = "aiperf_epoch"  # on the file's root: the epoch whose weights it holds


class BestWeights:
    """The weights of the trial's best complete epoch, the ones that earned the accuracy (or, for
    a language model, the loss) the score may use, kept so that `aiperf verify` can evaluate them
    again and a grown child can start from them.

    At each new best (a complete epoch whose `metric`, validation accuracy or, for a language model,
    validation loss, beats every earlier one's: aiperf.quality) they are
    written at once, between epochs and outside the timed steps, before the epoch is reported: a
    recorded best epoch always has its weights on disk, even when the run then crashes and is
    resumed (its interrupted trials never reach their end). The first epoch of equal quality
    wins, as the first occurrence of the trial's best does in the records. The file is written
    under a temporary name, stamped with its epoch, then renamed: a file at `path` is always whole."""

    def __init__(self, path: str | None, metric: str = quality.ACCURACY) -> None:
        self.path = None if path is None else Path(path)
        self.metric = metric
        self.value: float | None = None  # of the kept epoch, by `metric`
        self.epoch: int | None = None

    def offer(self, model: Any, report: EpochReport) -> bool:
        """Write `model`'s weights if `report` is a new best complete epoch; whether it was."""
        value = quality.of(report, self.metric)
        if self.path is None or not report.complete or value is None:
            return False
        if not quality.better(self.metric, value, self.value):
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name("." + self.path.name)  # still ends in .weights.h5
        model.save_weights(str(partial))
        _stamp(partial, report.epoch)
        os.replace(partial, self.path)
        self.value, self.epoch = value, report.epoch
        return True


def _stamp(path: Path, epoch: int) -> None:
    import h5py

    with h5py.File(path, "a") as weights:
        weights.attrs[EPOCH_ATTRIBUTE] = epoch


def snapshot(path: str | Path, into: Path) -> int | None:
    """Copy the kept weights at `path` into the folder `into`, as they are now (one read of
    whichever file the name holds: a newer best renamed over it meanwhile changes nothing), and
    return the epoch they are of; None when there is no such file (or it carries no epoch: one
    written before files were stamped). The copy is `into`'s file of the same name."""
    import h5py

    source = Path(path)
    target = into / source.name
    try:
        shutil.copyfile(source, target)
    except FileNotFoundError:
        return None
    with h5py.File(target, "r") as weights:
        epoch = weights.attrs.get(EPOCH_ATTRIBUTE)
    return None if epoch is None else int(epoch)


def inherited_lm(request: TrialRequest) -> tuple[Any, int | None]:
    """The trial's model, and the parent's epoch it grew from: a child that continues its parent
    (search.inherit: the request names the parent's weights) starts from a snapshot of the
    parent's kept weights, grown by the child's one step (aiperf.arch.grow.grow_weights: for
    deepen, widen_mlp and widen_heads the child computes the parent's function); anything else,
    and a child whose parent's weights this worker cannot read (a run folder the worker does not
    share, or a parent that kept none), starts fresh: the epoch is then None."""
    from aiperf.arch.grow import grow_weights

    def fresh(architecture: dict[str, Any]) -> Any:
        return lm.build_lm(
            architecture, dropout=request.dropout, seed=request.seed, attention=request.attention
        )

    if request.parent_weights is None or request.parent_architecture is None:
        return fresh(request.architecture), None
    with tempfile.TemporaryDirectory(prefix="aiperf-parent-") as folder:
        epoch = snapshot(request.parent_weights, Path(folder))
        if epoch is None:
            log.warning(
                "trial %s starts from fresh weights: its parent's %s cannot be read here",
                request.trial_key,
                request.parent_weights,
            )
            return fresh(request.architecture), None
        parent = fresh(request.parent_architecture)
        parent.load_weights(str(Path(folder) / Path(request.parent_weights).name))
    child = grow_weights(
        parent,
        lm.spec_of(request.parent_architecture, request.dropout),
        lm.spec_of(request.architecture, request.dropout),
        seed=request.seed,
        attention=request.attention,
    )
    return child, epoch
