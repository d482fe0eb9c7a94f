"""Edit distance between two networks, the similarity the Bayesian optimisation works with.

As in Auto-Keras (and so AIPerf): the distance between the sequences of convolution layers
(insert or delete one: 1; change one: up to 1, by how far its width, kernel and stride differ)
plus the number of skip connections one network has and the other does not. One morphism moves
a network by about 1.
"""

from __future__ import annotations

import math
from collections import Counter

from aiperf.arch.graph import Network

Conv = tuple[int, int, int]  # filters, kernel, stride


def describe(net: Network) -> tuple[list[Conv], Counter]:
    """Convolutions in order, and skip connections as (convs before each operand) tuples."""
    convs: list[Conv] = []
    convs_before: dict[str, int] = {}
    skips: Counter = Counter()
    for node in net.nodes:
        convs_before[node.id] = len(convs)
        if node.kind == "conv":
            p = node.params
            convs.append((p["filters"], p["kernel"], p["stride"]))
        elif node.kind == "add":
            skips[tuple(sorted(convs_before[i] for i in node.inputs))] += 1
    return convs, skips


def _change_cost(a: Conv, b: Conv) -> float:
    width = abs(math.log2(a[0] / b[0])) / 2
    return min(1.0, width + 0.5 * (a[1] != b[1]) + 0.5 * (a[2] != b[2]))


def conv_distance(a: list[Conv], b: list[Conv]) -> float:
    previous = [float(j) for j in range(len(b) + 1)]
    for i, ca in enumerate(a, start=1):
        current = [float(i)] + [0.0] * len(b)
        for j, cb in enumerate(b, start=1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + _change_cost(ca, cb))
        previous = current
    return previous[-1]


def distance(a: Network | tuple, b: Network | tuple) -> float:
    """Accepts networks or their `describe()` (cache those when comparing many pairs)."""
    convs_a, skips_a = describe(a) if isinstance(a, Network) else a
    convs_b, skips_b = describe(b) if isinstance(b, Network) else b
    skip_difference = sum(((skips_a - skips_b) + (skips_b - skips_a)).values())
    return conv_distance(convs_a, convs_b) + skip_difference
