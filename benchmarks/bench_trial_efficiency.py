"""Trial efficiency: aiperf's trials against bare Keras on the same models, data, batch and
concurrency, as the ratio of operations per second, in-trial and over the whole window.

For each case the script runs, side by side in one invocation:
  aiperf  the real flow (`aiperf run`, one worker per core) with the search pinned to one
          architecture and one batch size, so every trial trains the case's model;
  bare    as many processes as workers, each with one thread, doing what a user of Keras would:
          build, compile (with the profile's jit_compile, as the trials), then `model.fit` and
          `model.evaluate` per epoch, new model after the profile's epochs, until the same window
          ends (a batch that crosses it is the last).
          `--bare-feed arrays` (the default) gives `fit` the NumPy arrays, as most users do;
          `--bare-feed aiperf` gives it what a trial gets (aiperf.data.feed.open_feed: a tf.data
          feed of the same arrays, tf.data's autotuner off), so the ratio then isolates
          what the flow, the workers and the trial code cost.
Both count operations with aiperf's counter ('aiperf' convention, train + eval), so the ratios
compare speed only.
  in-trial  operations / seconds inside epochs, after each trial's first epoch (its tracing),
            summed over the workers: what a trial costs once it runs;
  window    all operations / (window seconds): what the score sees, start-up and gaps included.
Targets (issue 13): in-trial >= 0.95 and window >= 0.90 of bare on the 2-core machine.

    .venv/bin/python benchmarks/bench_trial_efficiency.py [--cases quick-seed resnet20] [--window 60]
                                                          [--workers N] [--order bare-first]
                                                          [--bare-feed arrays|aiperf]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
for key, value in {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}.items():
    os.environ.setdefault(key, value)


@dataclass(frozen=True)
class Case:
    """One model to compare: a member of the random oracle's ResNet family at one batch size."""

    name: str
    stages: int
    blocks: int
    base_filters: int
    batch_size: int
    epochs: int

    def overrides(self) -> list[str]:
        """`aiperf run --set` pins for the quick profile: every trial trains this case's model."""
        pins = {
            "search.oracle": "random",
            "search.space.stages": f"[{self.stages}]",
            "search.space.blocks_per_stage": f"[{self.blocks}]",
            "search.space.base_filters": f"[{self.base_filters}]",
            "search.space.kernel_size": "[3]",
            "search.space.batch_size": f"[{self.batch_size}]",
            "search.space.dropout": "[0.0]",
            "search.space.learning_rate": "[0.01, 0.01001]",
            "train.epochs": f"[{self.epochs}]",
            "train.early_stopping_patience": "null",
        }
        return [item for key, value in pins.items() for item in ("--set", f"{key}={value}")]


CASES = {
    # The quick profile's seed (resnet-mini: one basic block per stage, 16/32/64 filters).
    "quick-seed": Case("quick-seed", stages=3, blocks=1, base_filters=16, batch_size=64, epochs=3),
    # ResNet-20 of He et al. (three blocks per stage) at batch 128.
    "resnet20": Case("resnet20", stages=3, blocks=3, base_filters=16, batch_size=128, epochs=3),
}


@dataclass(frozen=True)
class Rates:
    in_trial: float  # operations per second inside epochs after the first, summed over workers
    window: float  # all operations / window seconds
    epochs: int  # epochs that counted toward in_trial

    def ratio(self, bare: Rates) -> tuple[float, float]:
        return self.in_trial / bare.in_trial, self.window / bare.window


def _steady_rate(epochs: list[tuple[str, int, float, float]]) -> tuple[float, int]:
    """Sum over workers of (operations / seconds) in each trial's epochs after its first (its
    tracing). `epochs`: (worker, epoch number, operations, seconds) of every complete epoch."""
    by_worker: dict[str, list[tuple[float, float]]] = {}
    for worker, number, ops, seconds in epochs:
        if number >= 1 and seconds > 0:
            by_worker.setdefault(worker, []).append((ops, seconds))
    rate = sum(sum(o for o, _ in pairs) / sum(s for _, s in pairs) for pairs in by_worker.values())
    return rate, sum(len(p) for p in by_worker.values())


# --- aiperf: the real flow ---------------------------------------------------------------------------


def run_aiperf(case: Case, window_s: float, workers: int, folder: Path) -> Rates:
    from aiperf.cli.exit_codes import EXIT_INVALID, EXIT_VALID
    from aiperf.store import Store

    db = f"sqlite:///{folder / f'{case.name}.db'}"
    aiperf = Path(sys.executable).with_name("aiperf")
    command = [
        str(aiperf),
        "run",
        "--budget",
        f"{window_s:g}s",
        "--workers",
        str(workers),
        "--db",
        db,
        "--out",
        str(folder / "out"),
        *case.overrides(),
    ]
    code = subprocess.run(command, stdout=subprocess.DEVNULL).returncode
    if code not in (EXIT_VALID, EXIT_INVALID):  # a short run is verified and invalid: exit 3
        raise SystemExit(f"bench_trial_efficiency: `aiperf run` failed (exit status {code})")
    with Store.open_existing(db) as store:
        run_id = max(r.id for r in store.list_runs())
        run = store.get_run(run_id)
    epochs = []
    total = 0.0
    for trial in run.trials:
        if trial.train_ops_per_sample is None:
            continue
        for e in trial.epochs:
            ops = (
                e.samples_trained * trial.train_ops_per_sample
                + e.samples_evaluated * trial.eval_ops_per_sample
            )
            total += ops
            if e.complete:
                epochs.append(
                    (
                        trial.worker or "?",
                        e.epoch,
                        ops,
                        (e.ended_at - e.started_at).total_seconds(),
                    )
                )
    in_trial, counted = _steady_rate(epochs)
    assert run.score is not None, f"run {run_id} was not scored"
    return Rates(in_trial=in_trial, window=total / run.score.elapsed_s, epochs=counted)


# --- bare Keras: what a user would write ----------------------------------------------------------------


def _bare_worker(
    case: Case,
    data_path: str,
    feed: str,
    jit_compile: bool,
    window_start: float,
    window_s: float,
    index: int,
    results,
) -> None:
    os.environ["TF_NUM_INTRAOP_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["TF_NUM_INTEROP_THREADS"] = "1"
    import keras

    from aiperf.arch.spec import ArchSpec, StageSpec
    from aiperf.data.feed import open_feed
    from aiperf.data.staging_npz import load_staged
    from aiperf.ops import count_all

    data = load_staged(data_path)
    whole = len(data.y_train) // case.batch_size * case.batch_size
    x, y = data.x_train[:whole], data.y_train[:whole]
    spec = ArchSpec(
        input_shape=x.shape[1:],
        num_classes=int(data.y_train.max()) + 1,
        stem_filters=case.base_filters,
        stages=tuple(
            StageSpec(case.blocks, case.base_filters * 2**i, 1 if i == 0 else 2)
            for i in range(case.stages)
        ),
    )

    class Window(keras.callbacks.Callback):
        """Stops at the window's end and counts batches, as the benchmark's clock needs."""

        def __init__(self) -> None:
            super().__init__()
            self.train = self.test = 0
            self.cut = False

        def on_train_batch_end(self, batch, logs=None):
            self.train += 1
            if time.time() >= window_end:
                self.cut, self.model.stop_training = True, True

        def on_test_batch_end(self, batch, logs=None):
            self.test += 1
            if time.time() >= window_end:
                self.cut, self.model.stop_evaluating = True, True

    from aiperf.arch import build_model

    if feed == "aiperf":  # exactly what a trial gets
        trial_feed = open_feed(
            data_path, batch_size=case.batch_size, input_shape=x.shape[1:], seed=index
        )
        train, val = trial_feed.train, trial_feed.val
    else:  # the NumPy arrays, as most users write it
        train = {"x": x, "y": y, "batch_size": case.batch_size, "shuffle": True}
        val = {"x": data.x_val, "y": data.y_val, "batch_size": case.batch_size}
    # Imported and loaded: wait for the window to open, as aiperf's workers warm up before it.
    if time.time() > window_start:
        results.put(None)  # too slow to be ready: the caller gives more time
        return
    time.sleep(window_start - time.time())
    window_end = window_start + window_s
    epochs, total, trial = [], 0.0, 0
    while time.time() < window_end:
        keras.utils.set_random_seed(trial * 100 + index)
        model = build_model(spec.to_network())
        counts = count_all(model)["aiperf"]
        model.compile(
            optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
            jit_compile=jit_compile,  # as the trials compile (Keras' "auto" would be XLA on TF)
        )
        for number in range(case.epochs):
            if time.time() >= window_end:
                break
            watch, started = Window(), time.time()
            model.fit(**train, epochs=1, verbose=0, callbacks=[watch])
            if not watch.cut:
                model.evaluate(**val, verbose=0, callbacks=[watch])
            ops = (
                min(watch.train * case.batch_size, whole) * counts.train_per_sample
                + min(watch.test * case.batch_size, len(data.y_val)) * counts.eval_per_sample
            )
            total += ops
            if not watch.cut:
                epochs.append((f"bare-{index}", number, ops, time.time() - started))
        trial += 1
    results.put((epochs, total))


def run_bare(
    case: Case, window_s: float, workers: int, folder: Path, feed: str = "arrays"
) -> Rates:
    """`workers` processes at once for the window. Each imports Keras and loads the data first, then
    waits for the common window start, as aiperf's window opens once its workers are up and warm."""
    from aiperf.config import load_config
    from aiperf.data.staging_npz import stage_synthetic

    config = load_config("quick")
    manifest = stage_synthetic(config.data, config.seed, folder / "bare-data")
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    window_start = (
        time.time() + 30
    )  # the processes' imports and data loading happen before the window
    processes = [
        context.Process(
            target=_bare_worker,
            args=(
                case,
                manifest.path,
                feed,
                config.train.jit_compile,
                window_start,
                window_s,
                i,
                results,
            ),
        )
        for i in range(workers)
    ]
    for p in processes:
        p.start()
    gathered = [results.get(timeout=window_s + 600) for _ in processes]
    for p in processes:
        p.join()
    if any(g is None for g in gathered):
        raise SystemExit(
            "bare Keras processes took over 30 s to import and load the data: machine too busy"
        )
    epochs = [e for part, _ in gathered for e in part]
    in_trial, counted = _steady_rate(epochs)
    return Rates(in_trial=in_trial, window=sum(t for _, t in gathered) / window_s, epochs=counted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--window", type=float, default=60.0, help="seconds of each timed window")
    parser.add_argument("--workers", type=int, default=None, help="default: one per core")
    parser.add_argument("--order", default="aiperf-first", choices=["aiperf-first", "bare-first"])
    parser.add_argument(
        "--bare-feed",
        default="arrays",
        choices=["arrays", "aiperf"],
        help="what bare Keras's fit gets: the NumPy arrays, or aiperf's tf.data feed of them",
    )
    parser.add_argument(
        "--out", default=None, help="folder for databases and data (default: temporary)"
    )
    args = parser.parse_args()

    from aiperf.config import machine_cores
    from aiperf.units import format_ops

    workers = args.workers or machine_cores()
    folder = Path(args.out or tempfile.mkdtemp(prefix="aiperf-efficiency-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(
        f"{workers} workers, window {args.window:g} s, {os.cpu_count()} CPUs, bare Keras fed {args.bare_feed}; "
        f"folder {folder}",
        flush=True,
    )
    for name in args.cases:
        case = CASES[name]
        steps = [("aiperf", run_aiperf), ("bare", partial(run_bare, feed=args.bare_feed))]
        rates = {
            label: fn(case, args.window, workers, folder)
            for label, fn in (steps if args.order == "aiperf-first" else steps[::-1])
        }
        aiperf, bare = rates["aiperf"], rates["bare"]
        in_trial, window = aiperf.ratio(bare)
        for label, r in rates.items():
            print(
                f"  {name} {label:6s}: in-trial {format_ops(r.in_trial)}OPS ({r.epochs} epochs), "
                f"window {format_ops(r.window)}OPS",
                flush=True,
            )
        print(
            f"{name}: aiperf / bare  in-trial {in_trial:.3f} (target >= 0.95)  "
            f"window {window:.3f} (target >= 0.90)",
            flush=True,
        )


if __name__ == "__main__":
    main()
