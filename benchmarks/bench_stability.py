"""Reproducibility: the nightly profile run N times on one machine with one seed, and the coefficient
of variation (stdev / mean) of OPS and of the regulated score.

A regression check is only as good as the noise it must see through: the nightly regression's
default thresholds (aiperf.history.regression.DEFAULT_THRESHOLDS) are three of these CVs of each figure,
rounded up, so that a healthy night rarely fails (docs/performance.md, "Nightly stability", gives
every series measured). Every run goes through the real flow, as `aiperf run` does, into one
temporary database.

    .venv/bin/python benchmarks/bench_stability.py [--runs 3] [--profile nightly] [--budget 5m]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
for key, value in {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}.items():
    os.environ.setdefault(key, value)


def coefficient_of_variation(values: list[float]) -> float:
    """Sample stdev / mean: the spread of repeated measurements relative to their size."""
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if len(values) > 1 and mean else 0.0


def threshold_for(cv: float, sigmas: float = 3.0) -> float:
    """A regression threshold that noise of this CV crosses rarely: `sigmas` CVs, up to a whole percent."""
    return math.ceil(100 * sigmas * cv) / 100


def _run(command: list[str]) -> None:
    """One `aiperf run`: valid (exit 0), or verified and invalid (3: a --budget under the
    profile's minimum) still measures the machine; any other status stops the series."""
    from aiperf.cli.exit_codes import EXIT_INVALID, EXIT_VALID

    code = subprocess.run(command, stdout=subprocess.DEVNULL).returncode
    if code not in (EXIT_VALID, EXIT_INVALID):
        raise SystemExit(f"bench_stability: `aiperf run` failed (exit status {code})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", default="nightly")
    parser.add_argument("--budget", default=None, help="default: the profile's")
    parser.add_argument(
        "--out", default=None, help="folder for the runs' database and data (default: temporary)"
    )
    args = parser.parse_args()

    from aiperf.store import Store
    from aiperf.units import format_ops

    folder = Path(args.out or tempfile.mkdtemp(prefix="aiperf-stability-"))
    folder.mkdir(parents=True, exist_ok=True)
    db = f"sqlite:///{folder / 'stability.db'}"
    aiperf = Path(sys.executable).with_name("aiperf")
    for n in range(args.runs):
        command = [
            str(aiperf),
            "run",
            "--profile",
            args.profile,
            "--db",
            db,
            "--out",
            str(folder / "out"),
        ]
        command += ["--budget", args.budget] if args.budget else []
        print(f"run {n + 1} of {args.runs}: {' '.join(command)}", flush=True)
        _run(command)
    with Store.open_existing(db) as store:
        runs = [store.get_run(r.id) for r in reversed(store.list_runs(args.runs))]
    ops = [r.score.ops for r in runs]
    regulated = [r.score.regulated_score for r in runs]
    print(
        f"\n{args.runs} runs of profile {args.profile} ({runs[0].division}), seed {runs[0].seed}, "
        f"{runs[0].workers} workers, budget {runs[0].budget_s:g} s"
    )
    print(
        f"{'run':>4} {'OPS':>14} {'regulated':>14} {'best acc':>9} {'trials':>7} {'completed':>10} "
        f"{'MFU':>7} {'utilised':>9} {'verified':>9}"
    )
    for r in runs:
        s = r.score
        mfu = "-" if s.mfu is None else f"{100 * s.mfu:.1f}%"
        used = "-" if s.utilisation is None else f"{100 * s.utilisation:.1f}%"
        print(
            f"{r.id:>4} {format_ops(s.ops) + 'OPS':>14} {format_ops(s.regulated_score) + 'OPS':>14} "
            f"{s.best_val_accuracy or 0:>9.4f} {len(r.trials):>7} {s.trials_completed:>10} {mfu:>7} {used:>9} "
            f"{str(r.verified):>9}"
        )
    cv_util = coefficient_of_variation([r.score.utilisation or 0.0 for r in runs])
    print(
        f"CV(window utilisation) = {100 * cv_util:.2f}%: the share of OPS's spread that is the machine's time "
        "going elsewhere rather than slower steps"
    )
    cv_ops, cv_regulated = coefficient_of_variation(ops), coefficient_of_variation(regulated)
    print(f"\nCV(OPS) = {100 * cv_ops:.2f}%   (target <= 2%)")
    print(f"CV(regulated score) = {100 * cv_regulated:.2f}%   (target <= 5%)")
    print(
        f"nightly thresholds of 3 CVs: ops_threshold {threshold_for(cv_ops):.2f}, "
        f"regulated_threshold {threshold_for(cv_regulated):.2f}"
    )


if __name__ == "__main__":
    main()
