"""Edit distance between two networks, the similarity the Bayesian optimisation works with.

As in Auto-Keras (and so AIPerf): the distance between the sequences of convolution layers
(insert or delete one: 1; change one: up to 1, by how far its width, kernel and stride differ)
plus the number of skip connections one network has and the other does not. One morphism moves
a network by about 1.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator

import numpy as np

from aiperf.arch.graph import Network

Conv = tuple[int, int, int]  # filters, kernel, stride


def describe(net: Network) -> tuple[list[Conv], Counter]:
    """Convolutions in order, and skip connections as (convs before each operand) tuples. Computed
    once per network (a network is frozen) and shared: callers must not change what it returns."""
    cached = net.__dict__.get("_described")
    if cached is None:
        cached = _describe(net)
        object.__setattr__(net, "_described", cached)
    return cached


def _describe(net: Network) -> tuple[list[Conv], Counter]:
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
            current[j] = min(
                previous[j] + 1, current[j - 1] + 1, previous[j - 1] + _change_cost(ca, cb)
            )
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
# is slow (the longer the networks, the slower); the same dynamic programme run for all pairs at
# once, row by row over numpy arrays, costs about as much as a few pairs. The recurrence
#     current[j] = min(previous[j] + 1, previous[j-1] + cost(a_i, b_j), current[j-1] + 1)
# has one sequential term; with x[j] = min(previous[j] + 1, previous[j-1] + cost) it is
#     current[j] = min over k <= j of (x[k] + j - k) = j + cumulative_min(x[k] - k),
# which numpy computes for a whole row at once (equal to the pairwise loop up to float rounding).
# The rows are kept shifted, s[j] = row[j] - j, which saves the shifts back and forth:
#     s'[j] = cumulative_min(min(s[j] + 1, s[j-1] + cost - 1)),  s'[0] = i.


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

    table = np.array([[_change_cost(a, b) for b in kinds] for a in kinds]).reshape(
        len(kinds), len(kinds)
    )
    return (*ids(rows), *ids(cols), table)


def _dp_rows(a: np.ndarray, b: np.ndarray, table: np.ndarray) -> Iterator[np.ndarray]:
    """Row i of the dynamic programme for every pair (a row of `a`, a row of `b`), i = 0, 1, ...,
    shifted: conv_distance(a[:i], b[:j]) - j for every j, shape (rows, cols, width + 1). `a` and `b`
    hold kind indices padded with -1 (which reads the last kind: past a sequence's end, never used).
    A yielded row is not changed afterwards, so callers may keep it."""
    shifted_cost = table - 1
    previous = np.zeros((a.shape[0], b.shape[0], b.shape[1] + 1))
    yield previous
    for i in range(1, a.shape[1] + 1):
        x = np.empty_like(previous)
        x[:, :, 0] = i
        np.add(
            previous[:, :, :-1],
            shifted_cost[a[:, i - 1, None, None], b[None, :, :]],
            out=x[:, :, 1:],
        )
        np.minimum(x[:, :, 1:], previous[:, :, 1:] + 1, out=x[:, :, 1:])
        previous = np.minimum.accumulate(x, axis=2, out=x)
        yield previous


def conv_distances(
    a: np.ndarray, a_lengths: np.ndarray, b: np.ndarray, b_lengths: np.ndarray, table: np.ndarray
) -> np.ndarray:
    """conv_distance for every pair of a row of `a` and a row of `b` (kind indices, -1 padded)."""
    result = np.empty((len(a), len(b)))
    pairs = np.arange(len(b))
    for i, row in enumerate(_dp_rows(a, b, table)):
        finished = a_lengths == i
        result[finished] = row[finished][:, pairs, b_lengths] + b_lengths
    return result


def conv_distance_matrix(rows: list[list[Conv]], cols: list[list[Conv]]) -> np.ndarray:
    """conv_distance(a, b) for every a of `rows` and b of `cols`, shape (len(rows), len(cols))."""
    return conv_distances(*_conv_ids(rows, cols))


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
    return conv_distance_matrix(
        [r[0] for r in rows], [c[0] for c in cols]
    ) + skip_difference_matrix([r[1] for r in rows], [c[1] for c in cols])


# --- candidates one edit away from a parent -----------------------------------------------------
#
# A proposal scores children that differ from a parent (one of a few well-scoring trials) by one
# morphism, and a morphism changes at most one convolution of the sequence: deepen inserts one,
# widen changes one, skip inserts a projection or none. With the parent's tables against a network
# b, forward F[i][j] = conv_distance(parent[:i], b[:j]) and backward B[i][j] = conv_distance(
# parent[i:], b[j:]), a child with x inserted at position p is at
#     min over j of (F[p][j] + 1 + B[p][j],  F[p][j] + cost(x, b[j]) + B[p][j+1])
# from b (x deleted, or changed into b[j]; the rest aligns before and after it), and a child with
# parent[p] changed into x the same with B[p+1]: one vectorised operation over every b and j, where
# a direct computation would run the whole dynamic programme per pair. The tables are kept from one
# proposal to the next: a trial new to the training set adds one table per parent.

Edit = tuple[
    str, int, int
]  # ("same" | "insert" | "change", position, kind index of the new convolution)


class ConvKinds:
    """Indices for convolution kinds (filters, kernel, stride), and the cost of changing one into
    another, grown as new kinds appear (a run meets a few dozen)."""

    def __init__(self) -> None:
        self._index: dict[Conv, int] = {}
        self._kinds: list[Conv] = []
        self.table = np.zeros((0, 0))

    def ids(self, convs: list[Conv]) -> np.ndarray:
        new = [c for c in dict.fromkeys(convs) if c not in self._index]
        if new:
            self._grow(new)
        return np.array([self._index[c] for c in convs], dtype=int)

    def _grow(self, new: list[Conv]) -> None:
        for kind in new:
            self._index[kind] = len(self._kinds)
            self._kinds.append(kind)
        n, old = len(self._kinds), len(self.table)
        table = np.empty((n, n))
        table[:old, :old] = self.table
        for i in range(n):
            for j in range(old if i < old else 0, n):
                table[i, j] = _change_cost(self._kinds[i], self._kinds[j])
        self.table = table


def edit_from(parent: list[Conv], child: list[Conv]) -> tuple[str, int, Conv | None] | None:
    """How `child`'s convolutions differ from `parent`'s: ("same", 0, None), ("insert", p, x),
    ("change", p, x); None when it takes more than one edit."""
    p = next(
        (i for i, (a, b) in enumerate(zip(parent, child, strict=False)) if a != b),
        min(len(parent), len(child)),
    )
    if len(child) == len(parent):
        if p == len(parent):
            return "same", 0, None
        return ("change", p, child[p]) if child[p + 1 :] == parent[p + 1 :] else None
    if len(child) == len(parent) + 1 and child[p + 1 :] == parent[p:]:
        return "insert", p, child[p]
    return None


def padded(sequences: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Kind-index sequences as one array padded with -1, and their lengths."""
    lengths = np.array([len(s) for s in sequences], dtype=int)
    padded = np.full((len(sequences), int(lengths.max(initial=0))), -1, dtype=int)
    for row, sequence in enumerate(sequences):
        padded[row, : len(sequence)] = sequence
    return padded, lengths


class EditTables:
    """Forward and backward tables of some parents against the members of a set (the GP's training
    set), each member in one slot shared by every parent; `distances` scores one-edit children."""

    def __init__(self, kinds: ConvKinds) -> None:
        self.kinds = kinds
        self._parents: dict[str, np.ndarray] = {}  # parent -> its kind indices
        self._forward: dict[str, np.ndarray] = {}  # parent -> (len + 1, slots, width + 1)
        self._backward: dict[str, np.ndarray] = {}
        self._slot: dict[str, int] = {}  # member -> slot
        self._members = np.full((0, 0), -1, dtype=int)  # (slots, width) kind indices, -1 padded
        self._lengths = np.zeros(0, dtype=int)

    def sync(self, parents: dict[str, np.ndarray], members: dict[str, np.ndarray]) -> None:
        """Hold tables for exactly these parents and members (kind indices): only pairs not held
        already are computed, all in one dynamic programme per direction."""
        for gone in [p for p in self._parents if p not in parents]:
            del self._parents[gone], self._forward[gone], self._backward[gone]
        for gone in [m for m in self._slot if m not in members]:
            del self._slot[gone]
        kept = list(self._parents)
        new_members = [m for m in members if m not in self._slot]
        self._place(new_members, [members[m] for m in new_members])
        if kept and new_members:
            self._fill(kept, new_members)
        new_parents = [p for p in parents if p not in self._parents]
        self._parents.update((p, parents[p]) for p in new_parents)
        for p in new_parents:
            shape = (len(parents[p]) + 1, *self._members.shape[:1], self._members.shape[1] + 1)
            self._forward[p], self._backward[p] = np.full(shape, np.inf), np.full(shape, np.inf)
        if new_parents and self._slot:
            self._fill(new_parents, list(self._slot))

    def _place(self, names: list[str], sequences: list[np.ndarray]) -> None:
        """Free slots for `names`, the arrays grown (padded with inf) where there are too few or
        too narrow ones."""
        held = len(self._lengths)
        free = sorted(set(range(held)) - set(self._slot.values()))
        slots = held + max(0, len(names) - len(free))
        width = max([self._members.shape[1], *map(len, sequences)])
        if (slots, width) != self._members.shape:
            members = np.full((slots, width), -1, dtype=int)
            members[:held, : self._members.shape[1]] = self._members
            self._members, self._lengths = (
                members,
                np.concatenate([self._lengths, np.zeros(slots - held, dtype=int)]),
            )
            for tables in (self._forward, self._backward):
                for p, old in tables.items():
                    tables[p] = np.full((old.shape[0], slots, width + 1), np.inf)
                    tables[p][:, :held, : old.shape[2]] = old
            free += range(held, slots)
        for name, sequence, slot in zip(names, sequences, free, strict=False):
            self._slot[name] = slot
            self._members[slot] = -1
            self._members[slot, : len(sequence)] = sequence
            self._lengths[slot] = len(sequence)

    def _fill(self, parents: list[str], members: list[str]) -> None:
        """The tables of every pair (one of `parents`, one of `members`)."""
        slots = np.array([self._slot[m] for m in members])
        b, lengths = self._members[slots], self._lengths[slots]
        a, a_lengths = padded([self._parents[p] for p in parents])
        j = np.arange(lengths.max(initial=0) + 1)
        forward = np.stack(list(_dp_rows(a, b[:, : j[-1]], self.kinds.table))) + j
        reverse_a, _ = padded([self._parents[p][::-1] for p in parents])
        reverse_b, _ = padded(
            [self._members[s, :n][::-1] for s, n in zip(slots, lengths, strict=False)]
        )
        backward = np.stack(list(_dp_rows(reverse_a, reverse_b, self.kinds.table))) + j
        beyond = j[None, :] > lengths[:, None]  # (members, width + 1): past a member's end
        reverse_j = np.clip(lengths[:, None] - j[None, :], 0, None)
        for row, p in enumerate(parents):
            n = a_lengths[row]
            f = forward[: n + 1, row]
            # backward[i][j] = conv_distance(parent[i:], b[j:]) is the reversed sequences' table at
            # (n - i, len(b) - j)
            g = np.take_along_axis(backward[n::-1, row], reverse_j[None], axis=2)
            f[:, beyond], g[:, beyond] = np.inf, np.inf
            for tables, values in ((self._forward, f), (self._backward, g)):
                tables[p][:, slots] = np.inf  # a reused slot: past the new member's end too
                tables[p][:, slots, : values.shape[2]] = values

    def distances(self, parent: str, edits: list[Edit], members: list[str]) -> np.ndarray:
        """conv_distance from each child of `parent` (given by its edit) to each member."""
        slots = np.array([self._slot[m] for m in members])
        forward, backward = self._forward[parent], self._backward[parent]
        kinds, positions, new = (np.array(column) for column in zip(*edits, strict=False))
        before = forward[positions[:, None], slots[None, :]]  # (edits, members, width + 1)
        after = backward[(positions + (kinds == "change"))[:, None], slots[None, :]]
        cost = self.kinds.table[new[:, None, None], self._members[slots][None]]
        dropped = (before + after).min(axis=2) + 1
        changed = (before[:, :, :-1] + cost + after[:, :, 1:]).min(axis=2)
        result = np.minimum(dropped, changed)
        result[kinds == "same"] = forward[len(self._parents[parent]), slots, self._lengths[slots]]
        return result
