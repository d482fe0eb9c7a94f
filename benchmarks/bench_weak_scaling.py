"""Weak scaling: the benchmark with 1 and with 2 one-core workers, and the efficiency
OPS(2) / (2 * OPS(1)).

The workload grows with the workers (each runs its own trials), so on a machine that scales
perfectly the efficiency is 1.0. Both runs use the same profile, seed and budget, through the
real flow; the workers are one core each (cluster.cores=1), locally or as SLURM jobs.

    .venv/bin/python benchmarks/bench_weak_scaling.py [--profile quick] [--budget 60s]
                                                      [--cluster local|slurm] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
for key, value in {
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}.items():
    os.environ.setdefault(key, value)


def efficiency(ops_1: float, ops_2: float) -> float:
    """OPS(2) / (2 * OPS(1)): 1.0 when two workers do twice the work of one."""
    return ops_2 / (2 * ops_1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--budget", default="60s")
    parser.add_argument(
        "--cluster", default="local", choices=["local", "slurm", "pbs", "lsf", "sge"]
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--out", default=None, help="folder for the runs' database and data (default: temporary)"
    )
    args = parser.parse_args()

    from aiperf.units import format_ops
    from aiperf_flows.benchmark import benchmark

    with tempfile.TemporaryDirectory(prefix="aiperf-weak-") as tmp:
        folder = Path(args.out or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        ops = {}
        for workers in (1, 2):
            result = benchmark(
                profile=args.profile,
                budget=args.budget,
                workers=workers,
                db=f"sqlite:///{folder / 'weak-scaling.db'}",
                seed=args.seed,
                out=str(folder / "out"),
                overrides={"cluster.kind": args.cluster, "cluster.cores": 1},
            )
            ops[workers] = result["ops"]
            print(
                f"{workers} one-core worker(s): OPS {format_ops(result['ops'])}OPS over {result['elapsed_s']:.1f} s, "
                f"{result['trials_completed']} trials completed (run {result['run_id']})",
                flush=True,
            )
    print(f"weak-scaling efficiency OPS(2) / (2 * OPS(1)) = {efficiency(ops[1], ops[2]):.3f}")


if __name__ == "__main__":
    main()
