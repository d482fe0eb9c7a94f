"""Analytic operation counting per layer, under two conventions (see docs/flops.md).

    from aiperf.ops import count_model
    ops = count_model(model, "aiperf")      # ModelOps: forward, backward, per-layer rows
    ops.eval_per_sample, ops.train_per_sample

- aiperf/ops/layer_costs.py: one rule per Keras layer class, the only place arithmetic is defined;
  aiperf/ops/transformer_costs.py adds those of decoder-only transformers to the same registry.
- aiperf/ops/counter.py: the walk over a built model (nested models, shared layers).
- aiperf/ops/conventions.py: "aiperf" and "tensor" as projections of one per-layer cost.
- aiperf/cli/flops.py: `aiperf flops`.

The Keras-dependent names (count_model, count_all) load on first use, so importing this package,
or its CLI module, does not import TensorFlow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiperf.ops.conventions import CONVENTIONS, check_convention
from aiperf.ops.result import LayerOps, ModelOps, UnknownLayerError

if TYPE_CHECKING:
    from aiperf.ops.counter import count_all, count_model

__all__ = [
    "CONVENTIONS",
    "LayerOps",
    "ModelOps",
    "UnknownLayerError",
    "check_convention",
    "count_all",
    "count_model",
]


def __getattr__(name: str) -> Any:
    if name in ("count_model", "count_all"):
        from aiperf.ops import counter

        return getattr(counter, name)
    raise AttributeError(f"module 'aiperf.ops' has no attribute {name!r}")
