"""The best trial's accuracy, measured again from the weights it kept.

Every other check of `aiperf verify` proves that the records agree with each other; records edited
together (a better accuracy in the epoch, the trial and the score at once) would agree too. So a
run keeps the weights that earned its best accuracy: each trial writes its weights at each new
best complete epoch, before reporting it (aiperf.train.kept.BestWeights), and when the run is
scored only the best trial's file is kept, its sha256 recorded (runs.best_weights)
and logged (aiperf.results.mllog BEST_WEIGHTS), the other trials' files deleted
(`keep_best_weights`).

`check_accuracy_remeasured` loads that file, once its sha256 is the recorded one, into the best
trial's architecture, evaluates it once on the run's validation set (staged again from the run's
config when the staged copy is gone: generated data is regenerated from the seed), with the trial's
own input pipeline, precision and loss, and fails when the accuracy it measures is further from the
recorded one than the ruleset's `accuracy_tolerance`. A ruleset without one (1.0, 1.1) keeps no
weights, and a simulated trainer has none: the check passes saying so.

A language-model run (its trials' architectures are transformer specs: aiperf.train.lm) is judged
by its validation loss, lower being better: its trials keep the weights of their lowest-loss
epoch, the run keeps its lowest-loss trial's, and the same check (same name) rebuilds the
transformer, evaluates the kept weights on the token validation split and compares the loss it
measures, in nats per token, with the recorded one within the ruleset's `loss_tolerance`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from aiperf import paths, quality, settings
from aiperf.arch.transformer import is_transformer
from aiperf.data.manifest import sha256_file
from aiperf.results.evidence import Evaluator
from aiperf.store import CheckRecord, EpochRecord, RunRecord, TrialRecord

if TYPE_CHECKING:
    from aiperf.results.evidence import Evidence
    from aiperf.rules import Ruleset

ACCURACY_REMEASURED = "accuracy_remeasured"


def _here(trial: TrialRecord, weights: Path, data_path: str, **how: Any) -> tuple[float, int, str]:
    from aiperf.train.peak import device

    measured, samples = evaluate_weights(trial, weights, data_path, **how)
    return measured, samples, device()[0]


IN_THIS_PROCESS = Evaluator(_here, "in this process (the run's workers have ended)")


def language(run: RunRecord) -> bool:
    """Whether `run` is a language-model run, judged by validation loss (its trials are
    transformer specs); an image run is judged by validation accuracy."""
    return any(is_transformer(t.architecture) for t in run.trials)


def _metric(lm: bool) -> str:
    """The figure a trial's weights are kept by: a language model's loss, else its accuracy."""
    return quality.LOSS if lm else quality.ACCURACY


def best_epoch(trial: TrialRecord) -> EpochRecord | None:
    """The trial's first complete epoch of its best validation accuracy (a language model's: of
    its lowest validation loss): the one whose weights it kept (a later epoch of equal quality is
    no new best)."""
    metric = _metric(is_transformer(trial.architecture))
    complete = [e for e in trial.epochs if e.complete]
    top = quality.best(metric, (quality.of(e, metric) for e in complete))
    return next((e for e in complete if top is not None and quality.of(e, metric) == top), None)


def best_candidates(run: RunRecord) -> list[tuple[TrialRecord, EpochRecord]]:
    """The trials whose best complete epoch is the run's best accuracy (the score's), by number;
    of a language-model run, the run's lowest validation loss."""
    metric = _metric(language(run))
    found = [(t, e) for t in run.trials if (e := best_epoch(t)) is not None]
    top = quality.best(metric, (quality.of(e, metric) for _t, e in found))
    return sorted(
        [(t, e) for t, e in found if top is not None and quality.of(e, metric) == top],
        key=lambda pair: pair[0].number,
    )


def keep_best_weights(run: RunRecord, folder: Path) -> dict[str, Any] | None:
    """Keep the weights of the run's best trial (the first by number of those that reached the
    run's best accuracy and wrote their file) and delete every other file of the run's weights
    folder; what to record in runs.best_weights and the event log, or None when no trial of the
    best accuracy kept weights (a simulated trainer, a run without a complete epoch)."""
    kept: dict[str, Any] | None = None
    for trial, epoch in best_candidates(run):
        relative = paths.weights_file(trial.number)
        if (folder / relative).is_file():
            kept = {
                "trial": trial.number,
                "epoch": epoch.epoch,
                "file": relative,
                "sha256": sha256_file(folder / relative),
                "val_accuracy": epoch.val_accuracy,
            }
            if is_transformer(trial.architecture):
                kept["val_loss"] = epoch.val_loss  # what a language model's weights earned
            break
    weights = folder / paths.WEIGHTS_FOLDER
    if weights.is_dir():
        for path in weights.iterdir():
            if kept is None or path.name != PurePosixPath(kept["file"]).name:
                if path.is_file() or path.is_symlink():
                    path.unlink()
    return kept


def tolerance_of(
    ev: Evidence, ruleset: Ruleset | None = None, *, loss: bool = False
) -> tuple[float | None, str]:
    """The tolerance the run's ruleset states (None: it keeps no weights), and the ruleset's name.
    `loss`: the tolerance on a language model's validation loss, in nats per token."""
    from aiperf.results.division import classify
    from aiperf.rules import load_ruleset

    rules = ruleset or load_ruleset(classify(ev.config).ruleset)
    return (rules.loss_tolerance if loss else rules.accuracy_tolerance), rules.name


def _best_loss(ev: Evidence) -> float | None:
    """A language-model run's best validation loss: the recomputed score's where it has one, else
    the lowest of its trials' complete epochs (what the score takes)."""
    if ev.recomputed.best_val_loss is not None:
        return ev.recomputed.best_val_loss
    found = best_candidates(ev.run)
    return found[0][1].val_loss if found else None


def check_accuracy_remeasured(ev: Evidence, ruleset: Ruleset | None = None) -> CheckRecord:
    """The best trial's kept weights, evaluated again on the validation set, give its recorded
    accuracy within the ruleset's tolerance (a language model's: its recorded validation loss
    within the loss tolerance). `ruleset`: judge by this one instead of the run's."""
    lm = language(ev.run)
    tolerance, name = tolerance_of(ev, ruleset, loss=lm)
    if tolerance is None:
        kept = "no loss tolerance" if lm else "no weights"
        return CheckRecord(ACCURACY_REMEASURED, True, f"not required by {name} (it keeps {kept})")
    if ev.config.train.trainer == "simulated":
        return CheckRecord(
            ACCURACY_REMEASURED,
            True,
            "simulated trainer: no weights to evaluate (the result is invalid)",
        )
    best = _best_loss(ev) if lm else ev.recomputed.best_val_accuracy
    if best is None:
        measured = "a loss" if lm else "an accuracy"
        return CheckRecord(
            ACCURACY_REMEASURED, True, f"no complete epoch measured {measured}: nothing to measure"
        )
    try:
        problem, detail = _remeasure(ev, best, tolerance, lm)
    except Exception as exc:  # noqa: BLE001 - whatever breaks the evaluation fails the check
        first = (str(exc).strip().splitlines() or [""])[0]
        problem, detail = f"the weights could not be evaluated: {type(exc).__name__}: {first}", ""
    return CheckRecord(ACCURACY_REMEASURED, problem is None, problem or detail)


@dataclass(frozen=True)
class _KeptWeights:
    """The best trial's kept weights, matched to its records, their file's sha256 checked: what is
    evaluated again."""

    trial: TrialRecord
    epoch: EpochRecord
    recorded: (
        Any  # the figure the weights record (val_loss or val_accuracy), equal to the run's best
    )
    path: Path


def _remeasure(ev: Evidence, best: float, tolerance: float, lm: bool) -> tuple[str | None, str]:
    """(what is wrong, or None; what was measured). `lm`: the figure is the validation loss."""
    kept = _kept_weights(ev, best, lm)
    if isinstance(kept, str):
        return kept, ""
    return _evaluate_kept(ev, kept, tolerance, lm)


def _kept_weights(ev: Evidence, best: float, lm: bool) -> _KeptWeights | str:
    """The kept weights, once they are the best trial's best epoch's as the records tell it and
    their file is the one recorded; else what is wrong."""
    figure = "val_loss" if lm else "val_accuracy"
    kept = ev.run.best_weights
    if not kept:
        return "the run kept no weights of its best trial to evaluate again"
    trial = next((t for t in ev.run.trials if t.number == kept.get("trial")), None)
    if trial is None:
        return f"the kept weights name trial number {kept.get('trial')!r}, not one of the run's"
    epoch = best_epoch(trial)
    recorded = kept.get(figure)
    found = None if epoch is None else getattr(epoch, figure)
    if epoch is None or epoch.epoch != kept.get("epoch") or found != recorded:
        return (
            f"the kept weights say trial {trial.number} epoch {kept.get('epoch')} at "
            f"{recorded!r}, its records say epoch {None if epoch is None else epoch.epoch} at "
            f"{found!r}"
        )
    if recorded != best:
        word = "loss" if lm else "accuracy"
        return f"the kept weights are of {word} {recorded!r}, the run's best is {best!r}"
    path = _weights_file(ev, kept)
    if isinstance(path, str):
        return path
    return _KeptWeights(trial, epoch, recorded, path)


def _weights_file(ev: Evidence, kept: Mapping[str, Any]) -> Path | str:
    """The kept weights' file inside the run's folder, with the recorded sha256; else what is wrong."""
    if ev.folder is None:
        return "the run's folder is not known: its weights file cannot be found"
    path = inside_folder(ev.folder, str(kept.get("file")))
    if path is None:
        return f"the weights file {kept.get('file')!r} is not a path inside the run's folder"
    if not path.is_file():
        return (
            f"the weights file {path} is missing (the run's folder is under its --out, relative "
            "to where the run was started)"
        )
    digest = sha256_file(path)
    if digest != kept.get("sha256"):
        return f"{path} has sha256 {digest[:12]}, the records say {str(kept.get('sha256'))[:12]}"
    return path


def _evaluate_kept(
    ev: Evidence, kept: _KeptWeights, tolerance: float, lm: bool
) -> tuple[str | None, str]:
    """The kept weights evaluated again, on a worker when the run's are still up, and compared
    with the recorded figure within the ruleset's tolerance."""
    data_path = _staged_data(ev)
    evaluator = ev.evaluator or IN_THIS_PROCESS
    measured, samples, on = evaluator.evaluate(
        kept.trial,
        kept.path,
        data_path,
        precision=ev.run.precision or _precision(ev),
        label_smoothing=ev.config.train.label_smoothing,
        # Decoded as the trials' validation images were: another decoder's pixels would move the
        # accuracy by more than the tolerance allows for rounding.
        feed="dali" if ev.run.data_feed == "dali" else "tf.data",
    )
    difference = abs(measured - kept.recorded)
    unit = "val_loss " if lm else ""
    detail = (
        f"trial {kept.trial.number} epoch {kept.epoch.epoch}: {unit}{measured!r} on {samples} "
        f"samples, recorded {kept.recorded!r} (difference {difference:.6f}, tolerance "
        f"{tolerance:g}), evaluated {evaluator.where} on {on}"
    )
    if not math.isfinite(difference) or difference > tolerance:  # NaN is never within
        return detail, ""
    return None, detail


def _precision(ev: Evidence) -> str:
    precision = ev.config.train.precision
    return "float32" if precision == "auto" else precision


def inside_folder(folder: Path, relative: str) -> Path | None:
    """`folder/relative` when `relative` is a relative path that stays inside `folder`."""
    pure = PurePosixPath(relative)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        return None
    return folder.joinpath(*pure.parts)


def _staged_data(ev: Evidence) -> str:
    """The run's dataset where a trial reads it, refused unless it is the data the run recorded.

    Sharded data still staged where the run staged it is read there: its manifest.json (written
    last, after every shard) must carry the recorded digest, and the shards' own content is what
    the data checks (aiperf.results.data_checks) and every run's staging digest; staging them again
    here would re-read a whole ImageNet for one evaluation. Otherwise (a synthetic .npz, whose
    staging digests a few arrays; data no longer there; a package) it is staged (or found staged)
    again from the run's config into the evidence's data folder: generated data from its seed."""
    from aiperf.data.manifest import read_manifest
    from aiperf.data.staging import stage

    recorded = ev.dataset.sha256 if ev.dataset is not None else None
    staged = (ev.dataset.manifest or {}).get("path") if ev.dataset is not None else None
    if recorded and isinstance(staged, str) and Path(staged).is_dir():
        try:
            if read_manifest(staged).get("sha256") == recorded:
                return staged
        except (OSError, ValueError):
            pass  # not (or no longer) a staged folder: staged again below
    if ev.data_folder is None:
        raise ValueError("no folder to stage the run's data into")
    # Into the data folder only: verification runs where the flow runs (the head node), which is
    # no compute node, so it makes no node-local copy (data.stage_to), there or anywhere.
    here = ev.config.data.model_copy(update={"stage_to": None})
    manifest = stage(here, ev.config.seed, ev.data_folder)
    if recorded is not None and manifest.sha256 != recorded:
        raise ValueError(
            f"the data staged now (sha256 {manifest.sha256[:12]}) is not the run's "
            f"(sha256 {recorded[:12]})"
        )
    return manifest.path


def evaluate_weights(
    trial: TrialRecord,
    weights: Path,
    data_path: str,
    *,
    precision: str = "float32",
    label_smoothing: float = 0.0,
    feed: str = "tf.data",
) -> tuple[float, int]:
    """One evaluation of `weights` in `trial`'s architecture on the validation split of the data at
    `data_path`, fed as the trial was fed (aiperf.data.feed.open_feed), built under the trial's
    precision and dropout: (accuracy, validation samples). A language model's (a transformer
    spec): (validation loss in nats per token, validation sequences), on the token windows its
    trial evaluated (aiperf.train.lm); smoothing and the image decoder do not apply to it."""
    import keras

    if is_transformer(trial.architecture):
        return _evaluate_lm(trial, weights, data_path, precision=precision)

    from aiperf.arch import build_model, network_from_dict
    from aiperf.data.feed import open_feed
    from aiperf.data.normalise import on_device
    from aiperf.train import recipe

    values = trial.hyperparameters
    batch = int(values.get("batch_size") or 32) * max(1, int(trial.devices or 1))
    before = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy(precision)
    try:
        model = build_model(
            network_from_dict(trial.architecture), dropout=float(values.get("dropout") or 0.0)
        )
        model.load_weights(str(weights))
        fed_by = open_feed(
            data_path,
            batch_size=batch,
            seed=0,
            input_shape=trial.architecture["input_shape"],
            threads=os.cpu_count(),
            feed=feed,
        )
        fed = on_device(model, fed_by.pixels)  # scaled on the device, as the trial's model was
        fed.compile(loss=recipe.loss(label_smoothing), metrics=["accuracy"])
        result = fed.evaluate(**fed_by.val, verbose=0, return_dict=True)
    finally:
        keras.mixed_precision.set_global_policy(before)
    return float(result["accuracy"]), fed_by.val_samples


def _evaluate_lm(
    trial: TrialRecord, weights: Path, data_path: str, *, precision: str
) -> tuple[float, int]:
    """evaluate_weights for a language model: the trial's own build, feed and loss."""
    import keras

    from aiperf.train import lm

    values = trial.hyperparameters
    batch = int(values.get("batch_size") or 32) * max(1, int(trial.devices or 1))
    before = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy(precision)
    try:
        model = lm.build_lm(
            trial.architecture, dropout=float(values.get("dropout") or 0.0), seed=0
        )
        model.load_weights(str(weights))
        feed = lm.open_lm_feed(data_path, trial.architecture, batch_size=batch, seed=0)
        model.compile(loss=lm.lm_loss(), metrics=lm.lm_metrics())
        result = model.evaluate(**feed.val, verbose=0, return_dict=True)
    finally:
        keras.mixed_precision.set_global_policy(before)
    return float(result["loss"]), feed.val_samples


def on_a_worker(client: Any, resources: Mapping[str, float] | None = None) -> Evaluator:
    """An Evaluator that evaluates on one of the run's Dask workers, with a trial's resources (its
    slot and devices): on a cluster the head process is a login node without the devices, where
    ImageNet's 50,000 validation images would take hours on its CPU."""

    def evaluate(
        trial: TrialRecord, weights: Path, data_path: str, **how: Any
    ) -> tuple[float, int, str]:
        future = client.submit(
            _on_worker, trial, str(weights), data_path, resources=resources, pure=False, **how
        )
        # A worker with a trial's slot waits at most as long as a run waits for its workers.
        wait = settings.number(settings.WORKERS_TIMEOUT, positive=True)
        measured, samples, on = future.result(timeout=wait)
        return float(measured), int(samples), str(on)

    return Evaluator(evaluate, "on a worker of the run")


def _on_worker(
    trial: TrialRecord, weights: str, data_path: str, **how: Any
) -> tuple[float, int, str]:
    """On a worker: its node's copy of the data where the run made node-local copies."""
    from aiperf.data.placement import local_copy

    return _here(trial, Path(weights), local_copy(data_path), **how)
