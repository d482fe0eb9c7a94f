"""What glibc's malloc settings cost a training process, with TensorFlow's oneDNN on and off.

Dask's nanny starts its workers with MALLOC_TRIM_THRESHOLD_=65536, which switches off glibc's
dynamic mmap threshold; where TensorFlow runs without oneDNN (its default on CPUs without AVX-512
VNNI/BF16, AVX-VNNI or AMX, such as a Zen 3) it takes its tensors from malloc, and every large one
is then mmapped, page-faulted and zeroed afresh (docs/performance.md, "A 2-core Zen 3").

Each row is a fresh process, one thread, training the quick profile's seed (resnet-mini, batch 64)
on aiperf's feed of the quick profile's synthetic data for --seconds after one untimed pass (its
tracing), under one combination of TF_ENABLE_ONEDNN_OPTS (unset: TensorFlow's default for this CPU)
and MALLOC_TRIM_THRESHOLD_ (unset, or Dask's value). `--backend jax` (jax.jit; XLA has no oneDNN
switch) runs the two MALLOC_TRIM_THRESHOLD_ rows only. It prints passes per second, minor page faults
per second and the user and system CPU per second. The rows run one after the other: compare them
on a quiet machine.

    .venv/bin/python benchmarks/bench_allocator.py [--seconds 20] [--backend tensorflow|jax]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DASK_TRIM = "65536"  # distributed.nanny.pre-spawn-environ's MALLOC_TRIM_THRESHOLD_
ROWS = [  # (TF_ENABLE_ONEDNN_OPTS, MALLOC_TRIM_THRESHOLD_); None: unset
    (None, None),
    (None, DASK_TRIM),
    ("0", None),
    ("0", DASK_TRIM),
]


def train(data: str, seconds: float, jit_compile: bool) -> dict[str, float]:
    """In this process: the seed's passes per second, minor faults and CPU over `seconds`."""
    import resource

    import keras

    from aiperf.arch import build_model
    from aiperf.arch.spec import ArchSpec, StageSpec
    from aiperf.data.feed import open_feed

    spec = ArchSpec(
        input_shape=(32, 32, 3),
        num_classes=10,
        stem_filters=16,
        stages=tuple(StageSpec(1, 16 * 2**i, 1 if i == 0 else 2) for i in range(3)),
    )
    feed = open_feed(data, batch_size=64, input_shape=(32, 32, 3), seed=0)
    model = build_model(spec.to_network())
    model.compile(
        optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
        loss="sparse_categorical_crossentropy",
        jit_compile=jit_compile,
    )
    model.fit(**feed.train, epochs=1, verbose=0)  # tracing, untimed
    before, started, passes = resource.getrusage(resource.RUSAGE_SELF), time.time(), 0
    while time.time() - started < seconds:
        model.fit(**feed.train, epochs=1, verbose=0)
        passes += 1
    elapsed = time.time() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "passes_per_s": passes / elapsed,
        "minor_faults_per_s": (after.ru_minflt - before.ru_minflt) / elapsed,
        "user": (after.ru_utime - before.ru_utime) / elapsed,
        "system": (after.ru_stime - before.ru_stime) / elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="timed seconds per row")
    parser.add_argument("--backend", default="tensorflow", choices=["tensorflow", "jax"])
    parser.add_argument("--train", default=None, help=argparse.SUPPRESS)  # a row's own process
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    if args.train:
        print(json.dumps(train(args.train, args.seconds, jit_compile=args.backend == "jax")))
        return

    from aiperf.config import load_config
    from aiperf.data.staging_npz import stage_synthetic

    config = load_config("quick")
    folder = Path(tempfile.mkdtemp(prefix="aiperf-allocator-"))
    data = stage_synthetic(config.data, config.seed, folder).path
    print(
        f"resnet-mini, batch 64, one thread, {args.backend}, {args.seconds:g} s a row; "
        f"{os.cpu_count()} CPUs"
    )
    print("TF_ENABLE_ONEDNN_OPTS  MALLOC_TRIM_THRESHOLD_  passes/s  minor faults/s  user  system")
    for onednn, trim in ROWS if args.backend == "tensorflow" else ROWS[:2]:
        env = {k: v for k, v in os.environ.items()}
        for name in ("TF_ENABLE_ONEDNN_OPTS", "MALLOC_TRIM_THRESHOLD_"):
            env.pop(name, None)
        if onednn is not None:
            env["TF_ENABLE_ONEDNN_OPTS"] = onednn
        if trim is not None:
            env["MALLOC_TRIM_THRESHOLD_"] = trim
        env.update(
            TF_NUM_INTRAOP_THREADS="1",
            TF_NUM_INTEROP_THREADS="1",
            OMP_NUM_THREADS="1",
            TF_CPP_MIN_LOG_LEVEL="2",
            KERAS_BACKEND=args.backend,
        )
        command = [sys.executable, __file__, "--train", str(data), "--seconds", str(args.seconds)]
        command += ["--backend", args.backend]
        out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{onednn or 'default':>21}  {trim or 'unset':>22}  {row['passes_per_s']:8.3f}  "
            f"{row['minor_faults_per_s']:14,.0f}  {row['user']:4.2f}  {row['system']:6.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
