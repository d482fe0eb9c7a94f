"""The two counting conventions, as projections of one per-layer cost.

Every layer rule (aiperf/ops/layer_costs.py) returns a single `Cost`: the AIPerf-convention forward and
backward operations, plus the multiply-accumulates (MACs) of its convolution / matrix-multiply
work. Both conventions are then pure functions of that cost, so a rule is written once and the
two conventions can never disagree about which work a layer does (see docs/flops.md):

- "aiperf": AIPerf's own per-layer figures (comparable with published AIPerf results);
  train = forward + backward, with AIPerf's backward rules.
- "tensor": only Conv2D / DepthwiseConv2D / SeparableConv2D / Dense work, and a transformer's
  matrix products (attention projections, Q·K^T and A·V, a tied LM head), 2 operations per MAC
  (what TensorFlow's profiler reports for Conv2D, DepthwiseConv2dNative and MatMul nodes);
  backward = 2 * forward, so train = 3 * forward (the MLPerf model-FLOPs convention). Use it
  for model FLOPs utilisation against a measured matmul peak.

This module imports nothing heavy (no Keras), so the CLI can validate a convention instantly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

CONVENTIONS: tuple[str, ...] = ("aiperf", "tensor")


@dataclass(frozen=True, slots=True)
class Cost:
    """What one call of one layer costs, per sample.

    forward/backward: operations under the "aiperf" convention.
    macs: multiply-accumulates of convolution or matrix-multiply work (0 for every other layer);
    the "tensor" convention is derived from it alone.
    """

    forward: int = 0
    backward: int = 0
    macs: int = 0


ZERO = Cost()


def _aiperf(cost: Cost) -> tuple[int, int]:
    return cost.forward, cost.backward


def _tensor(cost: Cost) -> tuple[int, int]:
    # Backward of a conv/matmul is two products of the forward's size (input and weight
    # gradients): 2 * forward, so training is 3 * forward.
    return 2 * cost.macs, 4 * cost.macs


PROJECTIONS: dict[str, Callable[[Cost], tuple[int, int]]] = {"aiperf": _aiperf, "tensor": _tensor}
assert tuple(PROJECTIONS) == CONVENTIONS


def check_convention(convention: str) -> str:
    """Return `convention` if it is one we count, else raise a ValueError naming the valid ones."""
    if convention not in PROJECTIONS:
        valid = ", ".join(repr(c) for c in CONVENTIONS)
        raise ValueError(
            f"unknown operation-counting convention {convention!r}; use one of {valid}"
        )
    return convention
