"""How long the operation counter takes on a 300-layer model (the budget is 50 ms).

Counting runs once per trial before training starts, so it must cost nothing next to a trial.
Run: python benchmarks/bench_ops.py [--layers 300] [--repeat 20]
Prints the median and best wall time of count_model (one convention) and count_all (both), and
exits 1 if the median of count_model is over the budget.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import keras  # noqa: E402
from keras import layers  # noqa: E402

from aiperf.ops import count_all, count_model  # noqa: E402

BUDGET_MS = 50.0


def residual_net(n_layers: int) -> keras.Model:
    """A ResNet-like stack (conv, batch norm, ReLU, residual add) of exactly `n_layers` layers,
    with a stem, a stride-2 block every 40 layers and a pooled softmax head."""
    inputs = keras.Input((64, 64, 3))
    x = layers.Conv2D(16, 3, padding="same")(inputs)
    count = 2  # input, stem
    head = 2  # pooling, classifier
    while count + 7 + head <= n_layers:  # one block: 2 x (conv, bn), relu, add, relu = 7 layers
        stride = 2 if count % 40 < 7 and x.shape[1] > 4 else 1
        channels = x.shape[-1] * stride
        y = layers.Conv2D(channels, 3, strides=stride, padding="same")(x)
        y = layers.BatchNormalization()(y)
        y = layers.ReLU()(y)
        y = layers.Conv2D(channels, 3, padding="same")(y)
        y = layers.BatchNormalization()(y)
        shortcut = x if stride == 1 else layers.Conv2D(channels, 1, strides=2)(x)
        x = layers.Activation("relu")(layers.Add()([shortcut, y]))
        count += 7 if stride == 1 else 8
    while count + head < n_layers:
        x = layers.ReLU()(x)
        count += 1
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(10, activation="softmax")(x))


def timed_ms(fn, repeat: int) -> list[float]:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    model = residual_net(args.layers)
    n_layers = len(model.layers)
    one = timed_ms(lambda: count_model(model, "aiperf"), args.repeat)
    both = timed_ms(lambda: count_all(model), args.repeat)
    median = statistics.median(one)
    print(
        f"model: {n_layers} layers, eval {count_model(model).eval_per_sample:,} operations per sample"
    )
    print(
        f"count_model (one convention): median {median:.2f} ms, best {min(one):.2f} ms over {args.repeat} runs"
    )
    print(
        f"count_all (both conventions): median {statistics.median(both):.2f} ms, best {min(both):.2f} ms"
    )
    verdict = "OK" if median < BUDGET_MS else "OVER BUDGET"
    print(f"{verdict}: budget {BUDGET_MS:.0f} ms for {n_layers} layers")
    return 0 if median < BUDGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
