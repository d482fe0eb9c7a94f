"""What inheritance buys the LM track: the best validation loss of real `aiperf run --profile
lm-quick` runs with grown children continuing their parents (search.inherit true: the parent's
kept weights, grown, and its hyperparameters perturbed) and without (fresh weights, fresh draws),
side by side on one machine.

    .venv/bin/python benchmarks/bench_lm_inherit.py [--runs 3] [--budget 3m] [--workers auto]

The runs alternate (with, without, with, ...) so that what else the machine is doing falls on both
alike; each run has its own database and folder under a temporary directory. Each row is one run:
its best loss (nats/token), the regulation factor it earned under the profile's ruleset, its
trials completed, and how many of them started from a parent's weights (trials.inherited_epoch).
A run whose setting differs from the profile's is open (search.inherit is a deviation where the
profile says otherwise): the figures are what is compared, not the verdicts.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_run(folder: Path, inherit: bool, budget: str, workers: str) -> dict[str, float]:
    """One lm-quick run through the CLI; its best loss, factor, trials and inheriting trials."""
    db = folder / "lm.db"
    command = [
        sys.executable,
        "-m",
        "aiperf.cli.main",
        "run",
        "--profile",
        "lm-quick",
        "--budget",
        budget,
        "--workers",
        workers,
        "--db",
        f"sqlite:///{db}",
        "--out",
        str(folder / "out"),
        "--allow-concurrent",
        "--set",
        f"search.inherit={str(inherit).lower()}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=1800)
    with sqlite3.connect(db) as connection:
        [(loss, ops, regulated)] = connection.execute(
            "SELECT best_val_loss, ops, regulated_score FROM scores"
        ).fetchall()
        [(completed, inherited)] = connection.execute(
            "SELECT SUM(status = 'completed'), SUM(inherited_epoch IS NOT NULL) FROM trials"
        ).fetchall()
    return {
        "loss": loss,
        "factor": regulated / ops if ops else 0.0,
        "completed": completed or 0,
        "inherited": inherited or 0,
    }


def machine() -> str:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in lscpu.splitlines()
            if line.startswith("Model name")
        ),
        "?",
    )
    return f"{model}, {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each kind")
    parser.add_argument("--budget", default="3m")
    parser.add_argument("--workers", default="auto")
    args = parser.parse_args()
    print(f"# lm-quick, budget {args.budget}, workers {args.workers}; {machine()}")
    print("run  inherit  best loss  factor  completed  inherited")
    losses: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="bench-inherit-") as scratch:
        for number in range(args.runs):
            for inherit in (True, False):
                folder = Path(scratch) / f"{number}-{inherit}"
                folder.mkdir()
                row = one_run(folder, inherit, args.budget, args.workers)
                losses[inherit].append(row["loss"])
                print(
                    f"{number:>3}  {str(inherit):<7}  {row['loss']:9.4f}  {row['factor']:6.3f}  "
                    f"{row['completed']:9d}  {row['inherited']:9d}",
                    flush=True,
                )
    for inherit in (True, False):
        print(f"inherit {inherit}: mean best loss {statistics.mean(losses[inherit]):.4f}")


if __name__ == "__main__":
    main()
