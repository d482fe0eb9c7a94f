"""Edit distance between two networks, the similarity the Bayesian optimisation works with.

As in Auto-Keras (and so AIPerf): the distance between the sequences of convolution layers
(insert or delete one: 1; change one: up to 1, by how far its width, kernel and stride differ)
plus the number of skip connections one network has and the other does not. One morphism moves
a network by about 1.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

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


# --- many distances at once ------------------------------------------------------------------------
#
# A proposal compares every candidate with every network the GP is trained on. One pair in Python
# costs 0.1-3 ms (longer networks, more); the same dynamic programme run for all pairs at once, row by
# row over numpy arrays, costs about as much as a few pairs. The recurrence
#     current[j] = min(previous[j] + 1, previous[j-1] + cost(a_i, b_j), current[j-1] + 1)
# has one sequential term; with x[j] = min(previous[j] + 1, previous[j-1] + cost) it is
#     current[j] = min over k <= j of (x[k] + j - k) = j + cumulative_min(x[k] - k),
# which numpy computes for a whole row at once (equal to the pairwise loop up to float rounding).

def _conv_ids(rows: list[list[Conv]], cols: list[list[Conv]]) -> tuple[np.ndarray, ...]:
    """Each convolution as the index of its (filters, kernel, stride) kind, padded with -1; each
    sequence's length; and the cost of changing every kind into every other (a small table)."""
    kinds = sorted({c for s in rows + cols for c in s})
    index = {c: i for i, c in enumerate(kinds)}

    def ids(sequences: list[list[Conv]]) -> tuple[np.ndarray, np.ndarray]:
        lengths = np.array([len(s) for s in sequences], dtype=int)
        padded = np.full((len(sequences), int(lengths.max(initial=0))), -1, dtype=int)
        for row, sequence in enumerate(sequences):
            padded[row, : len(sequence)] = [index[c] for c in sequence]
        return padded, lengths

    table = np.array([[_change_cost(a, b) for b in kinds] for a in kinds]).reshape(len(kinds), len(kinds))
    return (*ids(rows), *ids(cols), table)


def conv_distance_matrix(rows: list[list[Conv]], cols: list[list[Conv]]) -> np.ndarray:
    """conv_distance(a, b) for every a of `rows` and b of `cols`, shape (len(rows), len(cols))."""
    a, a_lengths, b, b_lengths, table = _conv_ids(rows, cols)
    columns = np.arange(b.shape[1] + 1, dtype=float)
    previous = np.broadcast_to(columns, (len(rows), len(cols), b.shape[1] + 1)).copy()
    result = np.empty((len(rows), len(cols)))
    done = a_lengths == 0
    result[done] = previous[done][:, np.arange(len(cols)), b_lengths]
    x = np.empty_like(previous)
    for i in range(1, a.shape[1] + 1):
        cost = table[a[:, i - 1, None, None], b[None, :, :]]  # (rows, cols, longest); padding reads
        x[:, :, 0] = i                                        # the last kind: past b's end, unused
        np.minimum(previous[:, :, 1:] + 1, previous[:, :, :-1] + cost, out=x[:, :, 1:])
        previous = columns + np.minimum.accumulate(x - columns, axis=2)
        finished = a_lengths == i
        result[finished] = previous[finished][:, np.arange(len(cols)), b_lengths]
    return result


def skip_difference_matrix(rows: list[Counter], cols: list[Counter]) -> np.ndarray:
    """For every pair: the skip connections one has and the other does not (an L1 distance of counts)."""
    vocabulary = {key: i for i, key in enumerate({k for c in rows + cols for k in c})}

    def counts(counters: list[Counter]) -> np.ndarray:
        matrix = np.zeros((len(counters), len(vocabulary)))
        for row, counter in enumerate(counters):
            for key, n in counter.items():
                matrix[row, vocabulary[key]] = n
        return matrix

    return np.abs(counts(rows)[:, None, :] - counts(cols)[None, :, :]).sum(axis=2)


def distance_matrix(rows: list[tuple], cols: list[tuple]) -> np.ndarray:
    """distance(a, b) for every a of `rows` and b of `cols`, all given as `describe()` results."""
    if not rows or not cols:
        return np.zeros((len(rows), len(cols)))
    return (conv_distance_matrix([r[0] for r in rows], [c[0] for c in cols])
            + skip_difference_matrix([r[1] for r in rows], [c[1] for c in cols]))
