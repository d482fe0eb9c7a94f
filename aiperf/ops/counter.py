"""The model walk: visit every layer call of a built Keras model once, in topological order, and
price it with the rule registered for its class (aiperf/ops/layer_costs.py).

Kept apart from the rules so that neither knows about the other's concerns: the walk deals with
graph structure (nested models, shared layers, shapes, which inputs need a gradient), the rules
with arithmetic.

- Functional models are walked through their call nodes, not their layer list, so a shared layer
  is counted once per call and a layer that belongs to another model as well is counted only for
  the calls inside this one.
- A Functional model (or built Sequential) used as a layer is walked into; its layers appear as
  "outer/inner" rows and nothing is counted for the container itself.
- Shapes come from the built graph (batch dimension excluded). Where a nested model is called on
  shapes other than those it was built with, or `input_shape` is given for a model with undefined
  dimensions, shapes are re-derived with the layers' own `compute_output_spec`.
- A tensor "needs a gradient" when a layer with trainable weights lies upstream of it; a layer
  whose inputs need none (AIPerf's "first conv of the model") skips its input-gradient term.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import keras
from keras import tree

from aiperf.ops import transformer_costs  # noqa: F401  (importing it registers the transformer rules)
from aiperf.ops.conventions import PROJECTIONS, Cost, check_convention
from aiperf.ops.layer_costs import RULES, LayerCall, Shape
from aiperf.ops.result import LayerOps, ModelOps, UnknownLayerError


def count_model(
    model: keras.Model, convention: str = "aiperf", *, input_shape: Sequence[int] | None = None
) -> ModelOps:
    """Per-sample operations of `model` under `convention` ("aiperf" or "tensor").

    input_shape (batch excluded) is only needed for a model built with undefined dimensions;
    it must agree with every dimension the model does define.
    Raises UnknownLayerError for a layer without a rule, ValueError for an unknown convention
    or a model whose shapes are not all known.
    """
    check_convention(convention)
    return _project(_walk(model, input_shape), convention)


def count_all(
    model: keras.Model, *, input_shape: Sequence[int] | None = None
) -> dict[str, ModelOps]:
    """Both conventions from one walk of the model: {"aiperf": ModelOps, "tensor": ModelOps}."""
    rows = _walk(model, input_shape)
    return {convention: _project(rows, convention) for convention in PROJECTIONS}


# A priced layer call before a convention is chosen: (name, type, output shape, cost).
_Row = tuple[str, str, tuple, Cost]


def _project(rows: list[_Row], convention: str) -> ModelOps:
    project = PROJECTIONS[convention]
    layer_ops = []
    forward = backward = 0
    for name, type_name, shape, cost in rows:
        f, b = project(cost)
        forward += f
        backward += b
        layer_ops.append(
            LayerOps(name=name, type=type_name, output_shape=shape, forward=f, backward=b)
        )
    return ModelOps(
        convention=convention, forward=forward, backward=backward, layers=tuple(layer_ops)
    )


def _graph_of(model: Any) -> Any | None:
    """The Functional graph behind `model`: itself when Functional, the graph a built Sequential
    keeps, or None (a subclassed model, an unbuilt Sequential: nothing to walk)."""
    if hasattr(model, "_nodes_by_depth"):
        return model
    return getattr(model, "_functional", None)


def _walk(model: keras.Model, input_shape: Sequence[int] | None) -> list[_Row]:
    graph = _graph_of(model)
    if graph is None:
        kind = type(model).__name__
        if isinstance(model, keras.Sequential):
            raise ValueError(
                f"Sequential model {model.name!r} is not built; give it a keras.Input "
                "or call model.build((None, H, W, C)) before counting its operations"
            )
        raise ValueError(
            f"model {getattr(model, 'name', model)!r} of type {kind} has no layer graph to "
            "walk; count a Functional or Sequential model built with an input shape"
        )
    inputs = list(graph.inputs)
    if input_shape is not None:
        inputs = [_with_input_shape(graph, tuple(int(d) for d in input_shape))]
    walk = _Walk()
    walk.graph(graph, "", inputs, [False] * len(inputs))
    return walk.rows


def _with_input_shape(graph: Any, shape: Shape) -> keras.KerasTensor:
    if len(graph.inputs) != 1:
        raise ValueError(
            f"input_shape applies to single-input models; this one has {len(graph.inputs)} inputs"
        )
    ref = graph.inputs[0]
    built = tuple(ref.shape[1:])
    if len(built) != len(shape) or any(
        b is not None and b != s for b, s in zip(built, shape, strict=False)
    ):
        raise ValueError(
            f"input shape {shape} does not fit the model, which was built for inputs of "
            f"shape {built}"
        )
    return keras.KerasTensor(shape=(None, *shape), dtype=ref.dtype)


class _Walk:
    """Accumulates priced rows while walking (possibly nested) graphs."""

    def __init__(self) -> None:
        self.rows: list[_Row] = []

    def graph(
        self, graph: Any, prefix: str, inputs: list, input_grads: list[bool]
    ) -> tuple[list, list[bool]]:
        """Walk one Functional graph whose inputs take the tensors `inputs` (their shapes may
        differ from the built ones); return its output tensors and their needs-gradient flags."""
        actual: dict[int, Any] = {}  # id(tensor as built) -> tensor with the shapes of this call
        grads: dict[int, bool] = {}  # id(tensor as built) -> some trainable layer is upstream
        for ref, x, g in zip(graph.inputs, inputs, input_grads, strict=False):
            actual[id(ref)] = x
            grads[id(ref)] = g
        # Nodes in decreasing depth are topologically sorted; inside one depth, the model's own
        # layer order keeps the rows readable and deterministic.
        order = {id(op): i for i, op in enumerate(graph.operations)}
        calls: dict[int, int] = {}
        nodes_by_depth = graph._nodes_by_depth  # Keras keeps the graph's call nodes here
        for depth in sorted(nodes_by_depth, reverse=True):
            for node in sorted(
                nodes_by_depth[depth], key=lambda n: order.get(id(n.operation), -1)
            ):
                op = node.operation
                n_call = calls.get(id(op), 0) + 1
                calls[id(op)] = n_call
                name = prefix + op.name + (f"#{n_call}" if n_call > 1 else "")
                if node.is_input:
                    for ref in node.outputs:
                        actual.setdefault(id(ref), ref)
                        grads.setdefault(id(ref), False)
                    outs = [actual[id(ref)] for ref in node.outputs]
                    self._price(op, name, [], outs, needs_input_grad=False)
                    continue
                refs = node.input_tensors
                ins = [actual[id(ref)] for ref in refs]
                in_grads = [grads[id(ref)] for ref in refs]
                needs_grad = any(in_grads)
                inner = _graph_of(op) if isinstance(op, keras.Model) else None
                if inner is not None:
                    outs, out_grads = self.graph(inner, name + "/", ins, in_grads)
                else:
                    rule_fn = self._rule(op, name)
                    if all(x is ref for x, ref in zip(ins, refs, strict=False)):
                        outs = node.outputs
                    else:
                        args, kwargs = node.arguments.fill_in(actual)
                        outs = tree.flatten(op.compute_output_spec(*args, **kwargs))
                    self._price(op, name, ins, outs, needs_grad, rule_fn)
                    out_grads = [needs_grad or bool(op.trainable_weights)] * len(outs)
                for ref, x, g in zip(node.outputs, outs, out_grads, strict=False):
                    actual[id(ref)] = x
                    grads[id(ref)] = g
        return [actual[id(t)] for t in graph.outputs], [grads[id(t)] for t in graph.outputs]

    @staticmethod
    def _rule(op: Any, name: str):
        rule_fn = RULES.get(type(op))
        if rule_fn is None:
            cls = type(op)
            if isinstance(op, keras.Model):
                raise UnknownLayerError(
                    name,
                    cls.__name__,
                    "a nested model is counted through its layers, "
                    "so it must be a Functional model or a built Sequential",
                )
            # Raw keras.ops calls in a Functional graph are operations, not layers; their class
            # names ("Add") would be confused with layers of the same name.
            kind = (
                cls.__name__
                if isinstance(op, keras.layers.Layer)
                else f"{cls.__module__}.{cls.__qualname__}"
            )
            raise UnknownLayerError(name, kind)
        return rule_fn

    def _price(
        self, op: Any, name: str, ins: list, outs: list, needs_input_grad: bool, rule_fn=None
    ) -> None:
        if rule_fn is None:
            rule_fn = self._rule(op, name)
        type_name = type(op).__name__
        in_shapes = tuple(_shape(x, name, type_name) for x in ins)
        out_shapes = tuple(_shape(x, name, type_name) for x in outs)
        cost = rule_fn(LayerCall(op, in_shapes, out_shapes, needs_input_grad))
        self.rows.append(
            (name, type_name, out_shapes[0] if len(out_shapes) == 1 else out_shapes, cost)
        )


def _shape(tensor: Any, name: str, type_name: str) -> Shape:
    shape = tuple(tensor.shape[1:])
    if any(d is None for d in shape):
        raise ValueError(
            f"layer {name!r} ({type_name}) has an undefined dimension in its shape {shape}; "
            "count a model built with a fixed input shape (or pass input_shape)"
        )
    return shape
