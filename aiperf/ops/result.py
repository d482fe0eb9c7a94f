"""Result types of the operation counter. Plain data, no Keras import: the store, the score
and the CLI can use them without paying for TensorFlow."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class UnknownLayerError(ValueError):
    """A layer (or operation) the counter has no rule for.

    Never counted as 0: an unknown layer silently costing nothing would inflate the score of any
    model that contains it. The message names the layer, its type and where to add the rule.
    """

    def __init__(self, layer_name: str, layer_type: str, detail: str | None = None) -> None:
        self.layer_name = layer_name
        self.layer_type = layer_type
        message = (
            f"no operation rule for layer {layer_name!r} of type {layer_type}; "
            f"{detail or 'add one in aiperf/ops/layer_costs.py'}"
        )
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class LayerOps:
    """One call of one layer: per-sample operations under one convention.

    `name` is the layer's name, prefixed "outer/" inside a nested model and suffixed "#2", "#3"
    for the second, third call of a shared layer. `output_shape` excludes the batch dimension
    (a tuple of such shapes when the layer has several outputs).
    """

    name: str
    type: str
    output_shape: tuple
    forward: int
    backward: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "output_shape": _jsonable(self.output_shape),
            "forward": self.forward,
            "backward": self.backward,
        }


@dataclass(frozen=True, slots=True)
class ModelOps:
    """Per-sample operations of a whole model under one convention."""

    convention: str
    forward: int
    backward: int
    layers: tuple[LayerOps, ...]

    @property
    def eval_per_sample(self) -> int:
        """An evaluated (inference) sample costs the forward pass."""
        return self.forward

    @property
    def train_per_sample(self) -> int:
        """A trained sample costs the forward and the backward pass (weight update included)."""
        return self.forward + self.backward

    def to_dict(self) -> dict[str, Any]:
        return {
            "convention": self.convention,
            "forward": self.forward,
            "backward": self.backward,
            "eval_per_sample": self.eval_per_sample,
            "train_per_sample": self.train_per_sample,
            "layers": [layer.to_dict() for layer in self.layers],
        }


def _jsonable(shape: tuple) -> list:
    return [_jsonable(s) if isinstance(s, tuple) else s for s in shape]
