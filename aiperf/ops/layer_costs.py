"""Per-layer operation rules: one small function per Keras layer class, registered in `RULES`.

A rule sees one call of a layer (`LayerCall`: the layer, its input and output shapes without the
batch dimension, and whether anything upstream is trainable) and returns one `Cost`: AIPerf-
convention forward and backward operations per sample, plus the conv/matmul multiply-accumulates
from which the "tensor" convention is derived (aiperf/ops/conventions.py).

The rules of docs/flops.md are reproduced to the unit (they give AIPerf's published ResNet-50 figures,
7,806,583,495 eval and 23,053,458,315 train operations per image). Layers docs/flops.md does not cover
get a rule in the same spirit, and each says so in its docstring:

- an elementwise operation costs 1 per output element and per extra operand;
- data movement (padding, reshaping, concatenation, dropout at inference) costs 0;
- only layers with parameters have a backward cost (AIPerf counts none for ReLU, Add, pooling).

Lookup is by exact class: a subclass of Conv2D may compute something else, so it needs its own
entry rather than silently inheriting one. A class with no entry is an `UnknownLayerError`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from keras import layers

from aiperf.ops.conventions import ZERO, Cost

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LayerCall:
    """One call of a layer inside the model being counted.

    needs_input_grad: some layer upstream of this call has trainable weights, so training must
    propagate a gradient through this layer's input. When nothing upstream is trainable (AIPerf's
    "first conv of the model") that input gradient is not computed and not counted.
    """

    layer: Any
    input_shapes: tuple[Shape, ...]
    output_shapes: tuple[Shape, ...]
    needs_input_grad: bool

    @property
    def input_shape(self) -> Shape:
        return self.input_shapes[0]

    @property
    def output_shape(self) -> Shape:
        return self.output_shapes[0]


Rule = Callable[[LayerCall], Cost]

# The registry: Keras layer class -> rule. Filled by the @rule decorators below.
RULES: dict[type, Rule] = {}


def rule(*classes: type) -> Callable[[Rule], Rule]:
    """Register `fn` as the rule for each of `classes`."""

    def register(fn: Rule) -> Rule:
        for cls in classes:
            if cls in RULES:
                raise RuntimeError(f"two operation rules for {cls.__name__}")
            RULES[cls] = fn
        return fn

    return register


# ---------------------------------------------------------------------------------------------
# Shape helpers


def _elements(shape: Shape) -> int:
    return math.prod(shape)


def _spatial_channels(shape: Shape, data_format: str) -> tuple[Shape, int]:
    """(spatial dims, channels) of a feature-map shape without its batch dimension."""
    if data_format == "channels_first":
        return shape[1:], shape[0]
    return shape[:-1], shape[-1]


def _softmax(shape: Shape, axes: tuple[int, ...] = (-1,)) -> int:
    """Softmax over n values costs 13n - 1 (exponentials, sum, division), the figure docs/flops.md's
    Dense rule carries ("2*in*out + (13*out - 1)" for a Dense with its softmax)."""
    n = math.prod(shape[a] for a in axes)
    return (_elements(shape) // n) * (13 * n - 1)


_SOFTMAX_NAMES = frozenset({"softmax", "log_softmax"})


def _activation(activation: Any, shape: Shape) -> int:
    """An activation function applied to a tensor of `shape`: softmax as `_softmax`, the
    identity ("linear", None) 0, anything else 1 per element (AIPerf's ReLU rule; AIPerf does not
    distinguish the cost of one elementwise nonlinearity from another)."""
    if activation is None:
        return 0
    name = getattr(activation, "__name__", None)
    if name == "linear":
        return 0
    if name in _SOFTMAX_NAMES:
        return _softmax(shape)
    return _elements(shape)


def _weighted_backward(macs: int, params: int, needs_input_grad: bool) -> int:
    """AIPerf's backward for a layer with weights: weight gradient (2 per MAC), input gradient
    (2 per MAC, skipped when nothing upstream is trainable) and the weight update (2 per weight).
    For Conv2D this is K^2*Cin*Cout*(4*O^2 + 2), or *(2*O^2 + 2) for the first conv."""
    return (4 if needs_input_grad else 2) * macs + 2 * params


# ---------------------------------------------------------------------------------------------
# Layers with weights


@rule(layers.Conv2D)
def conv2d(call: LayerCall) -> Cost:
    """docs/flops.md: forward 2 * Ho*Wo * Kh*Kw * Cin/groups * Cout (bias not counted); backward
    Kh*Kw*Cin/groups*Cout * (4*Ho*Wo + 2), first conv (2*Ho*Wo + 2). Strides, padding and dilation
    act through the output size only; a fused activation is counted as the Activation layer."""
    layer = call.layer
    (kh, kw), groups = layer.kernel_size, layer.groups
    _, cin = _spatial_channels(call.input_shape, layer.data_format)
    spatial, cout = _spatial_channels(call.output_shape, layer.data_format)
    params = kh * kw * (cin // groups) * cout
    macs = _elements(spatial) * params
    return Cost(
        forward=2 * macs + _activation(layer.activation, call.output_shape),
        backward=_weighted_backward(macs, params, call.needs_input_grad),
        macs=macs,
    )


@rule(layers.DepthwiseConv2D)
def depthwise_conv2d(call: LayerCall) -> Cost:
    """Conv2D's rule with one input channel per filter: forward 2 * Ho*Wo * Kh*Kw * Cin*M
    (M = depth multiplier), backward Kh*Kw*Cin*M * (4*Ho*Wo + 2), first conv (2*Ho*Wo + 2)."""
    layer = call.layer
    kh, kw = layer.kernel_size
    _, cin = _spatial_channels(call.input_shape, layer.data_format)
    spatial, _ = _spatial_channels(call.output_shape, layer.data_format)
    params = kh * kw * cin * layer.depth_multiplier
    macs = _elements(spatial) * params
    return Cost(
        forward=2 * macs + _activation(layer.activation, call.output_shape),
        backward=_weighted_backward(macs, params, call.needs_input_grad),
        macs=macs,
    )


@rule(layers.SeparableConv2D)
def separable_conv2d(call: LayerCall) -> Cost:
    """A DepthwiseConv2D (Kh*Kw*Cin*M weights) followed by a 1x1 Conv2D (Cin*M*Cout weights),
    each counted by its own rule at the output resolution. The pointwise part always computes
    its input gradient: the depthwise weights are upstream of it."""
    layer = call.layer
    kh, kw = layer.kernel_size
    _, cin = _spatial_channels(call.input_shape, layer.data_format)
    spatial, cout = _spatial_channels(call.output_shape, layer.data_format)
    positions = _elements(spatial)
    depthwise_params = kh * kw * cin * layer.depth_multiplier
    pointwise_params = cin * layer.depth_multiplier * cout
    depthwise_macs = positions * depthwise_params
    pointwise_macs = positions * pointwise_params
    macs = depthwise_macs + pointwise_macs
    backward = _weighted_backward(
        depthwise_macs, depthwise_params, call.needs_input_grad
    ) + _weighted_backward(pointwise_macs, pointwise_params, True)
    return Cost(
        forward=2 * macs + _activation(layer.activation, call.output_shape),
        backward=backward,
        macs=macs,
    )


@rule(layers.Dense)
def dense(call: LayerCall) -> Cost:
    """docs/flops.md, for a Dense with softmax: forward 2*in*out + (13*out - 1), backward
    4*in*out + 2*(in + 1)*out. Defined beyond it: any other activation costs 1 per output
    element and "linear" 0 (so Dense + a separate softmax Activation costs the same as a fused
    one); without a bias the update is 2*in*out; applied to a rank > 2 input the products
    repeat at every position; with nothing trainable upstream the input gradient (2*in*out per
    position) is dropped, as for the first conv."""
    layer = call.layer
    fan_in, units = call.input_shape[-1], layer.units
    positions = _elements(call.input_shape[:-1])
    macs = positions * fan_in * units
    params = (fan_in + (1 if layer.use_bias else 0)) * units
    return Cost(
        forward=2 * macs + _activation(layer.activation, call.output_shape),
        backward=_weighted_backward(macs, params, call.needs_input_grad),
        macs=macs,
    )


@rule(layers.BatchNormalization, layers.LayerNormalization)
def normalization_with_statistics(call: LayerCall) -> Cost:
    """docs/flops.md for BatchNormalization: forward 7 per output element, backward a constant 36
    per layer (as AIPerf counts it). LayerNormalization does the same per-element arithmetic
    (statistics, normalise, scale, shift) over another axis, so it gets the same rule."""
    return Cost(forward=7 * _elements(call.output_shape), backward=36)


# ---------------------------------------------------------------------------------------------
# Elementwise layers without weights (backward 0, as AIPerf counts ReLU and Add)


@rule(layers.Activation)
def activation(call: LayerCall) -> Cost:
    """docs/flops.md: H*W*C. Softmax costs 13n - 1 per vector of n (the Dense rule's softmax term);
    "linear" is the identity and costs 0."""
    return Cost(forward=_activation(call.layer.activation, call.output_shape))


@rule(layers.ReLU, layers.LeakyReLU, layers.ELU)
def relu(call: LayerCall) -> Cost:
    """docs/flops.md's ReLU: 1 per output element (whatever max_value, slope or threshold)."""
    return Cost(forward=_elements(call.output_shape))


@rule(layers.Softmax)
def softmax(call: LayerCall) -> Cost:
    """Beyond docs/flops.md: 13n - 1 per vector of n values along the layer's axis (or axes)."""
    axis = call.layer.axis
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    return Cost(forward=_softmax(call.output_shape, axes))


@rule(layers.Add, layers.Subtract, layers.Multiply, layers.Maximum, layers.Minimum)
def elementwise_merge(call: LayerCall) -> Cost:
    """docs/flops.md's Add (H*W*C for two inputs), generalised: (inputs - 1) per output element.
    Multiply with broadcasting (a squeeze-excitation scale) counts the broadcast output."""
    return Cost(forward=(len(call.input_shapes) - 1) * _elements(call.output_shape))


@rule(layers.Average)
def average(call: LayerCall) -> Cost:
    """Beyond docs/flops.md: (inputs - 1) additions and one division per output element."""
    return Cost(forward=len(call.input_shapes) * _elements(call.output_shape))


@rule(layers.Rescaling, layers.Normalization)
def affine_elementwise(call: LayerCall) -> Cost:
    """Beyond docs/flops.md: x * scale + offset (Rescaling) or (x - mean) / std (Normalization) is
    two operations per element; Keras performs both even when the offset is 0."""
    return Cost(forward=2 * _elements(call.output_shape))


# ---------------------------------------------------------------------------------------------
# Pooling


@rule(layers.MaxPooling2D, layers.AveragePooling2D)
def pooling2d(call: LayerCall) -> Cost:
    """docs/flops.md's MaxPooling2D: Kh*Kw per output element. AveragePooling2D (beyond docs/flops.md)
    does Kh*Kw - 1 additions and one division per output element: the same count."""
    kh, kw = call.layer.pool_size
    return Cost(forward=_elements(call.output_shape) * kh * kw)


@rule(layers.GlobalAveragePooling2D)
def global_average_pooling2d(call: LayerCall) -> Cost:
    """docs/flops.md: (Hin*Win - 1)*C + 4*C, from the input shape."""
    spatial, channels = _spatial_channels(call.input_shape, call.layer.data_format)
    return Cost(forward=(_elements(spatial) - 1) * channels + 4 * channels)


@rule(layers.GlobalMaxPooling2D)
def global_max_pooling2d(call: LayerCall) -> Cost:
    """Beyond docs/flops.md: Hin*Win - 1 comparisons per channel; unlike the average there is no
    division, so no 4*C term."""
    spatial, channels = _spatial_channels(call.input_shape, call.layer.data_format)
    return Cost(forward=(_elements(spatial) - 1) * channels)


# ---------------------------------------------------------------------------------------------
# Data movement: no arithmetic


@rule(
    layers.InputLayer,
    layers.ZeroPadding2D,
    layers.Cropping2D,
    layers.Flatten,
    layers.Reshape,
    layers.Permute,
    layers.Concatenate,
    layers.Dropout,
    layers.SpatialDropout2D,
    layers.Identity,
)
def no_arithmetic(call: LayerCall) -> Cost:
    """docs/flops.md: ZeroPadding2D, Flatten, Input and Dropout cost 0. Reshape, Permute, Cropping2D,
    Concatenate and Identity only move data, and the benchmark counts dropout at inference
    (its training-time mask is random-number generation, not counted arithmetic)."""
    return ZERO
