"""Operation rules for the layers of a decoder-only (GPT-style) transformer, in the `RULES` registry.

Kept apart from aiperf/ops/layer_costs.py (the CNN layers and AIPerf's own rules) so each module stays one
readable page; the rules here follow the same principles (docs/flops.md, "Decoder-only
transformers"), and are registered with the same `rule` decorator, by exact class:

- a lookup (token or position table) is data movement: 0 forward operations and 0 MACs; its
  weight gradient is a scatter-add, one add per looked-up element, plus the weight update;
- matrix products are MACs, 2 operations each, whether they multiply by a weight (the Q, K, V and
  output projections, an LM head) or by another activation (the attention scores Q·K^T and their
  product with V), so the "tensor" convention (2 x MACs forward, train = 3 x forward) counts the
  attention as a dense kernel computes it: the whole T x T, masked or not (Chowdhery et al. 2022,
  appendix B, and MLPerf count it so);
- elementwise work (softmax, the 1/sqrt(head size) scaling, norms) is counted in the "aiperf"
  convention only, with no backward, as AIPerf counts ReLU and Add.

An MLP needs no rule here: its Dense layers and their activation (GELU, or a SwiGLU MLP's SiLU gate,
1 per element in "aiperf" only, as any activation) and a SwiGLU MLP's Multiply of gate and up (1 per
element, "aiperf" only, as Add) are counted by the rules of rules.py.

Shapes exclude the batch dimension: a "sample" is one sequence of T tokens.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from keras import layers

from aiperf.arch.keras_layers import PositionEmbedding
from aiperf.ops.conventions import Cost
from aiperf.ops.layer_costs import (
    LayerCall,
    Shape,
    _elements,
    _softmax,
    _weighted_backward,
    rule,
)

# Backward of a normalisation layer: AIPerf's constant per BatchNormalization layer (docs/flops.md),
# which the LayerNormalization rule of rules.py carries too.
_NORM_BACKWARD = 36


@rule(layers.Embedding)
def embedding(call: LayerCall) -> Cost:
    """Forward 0: a token's vector is read from the table, no arithmetic (a gather, like Flatten
    moving data), and 0 MACs. Backward: the table's gradient is a scatter-add of the output
    gradient into the rows of the tokens seen (one add per output element, T*d for a sequence),
    plus the update of every weight (2 per weight, as every layer with weights counts it). No input
    gradient: the inputs are integer token ids."""
    table = call.layer.input_dim * call.layer.output_dim
    return Cost(backward=_elements(call.output_shape) + 2 * table)


@rule(layers.ReversibleEmbedding)
def reversible_embedding(call: LayerCall) -> Cost:
    """Called forward (token ids in, one more dimension out): the Embedding rule. Called with
    reverse=True (a (T, d) input, (T, V) logits out) it is an LM head: T*d*V MACs, forward 2 per
    MAC, backward the weight and input gradients (2 per MAC each) as for a Dense. A shared layer is
    counted per call (aiperf/ops/counter.py), so a tied table appears twice; its update (2 per
    weight) is counted once, with the lookup call, and the reverse call adds one only for a
    separate (tie_weights=False) output matrix. A logit soft cap, tanh(x / c) * c, costs 3 per
    logit."""
    layer = call.layer
    if len(call.output_shape) != len(call.input_shape):  # the lookup adds the width dimension
        return embedding(call)
    vocabulary, width = layer.input_dim, layer.output_dim
    macs = _elements(call.input_shape[:-1]) * width * vocabulary
    update = 0 if layer.tie_weights else 2 * width * vocabulary
    soft_cap = 3 * _elements(call.output_shape) if layer.logit_soft_cap is not None else 0
    return Cost(
        forward=2 * macs + soft_cap,
        backward=(4 if call.needs_input_grad else 2) * macs + update,
        macs=macs,
    )


@rule(PositionEmbedding)
def position_embedding(call: LayerCall) -> Cost:
    """Forward: one add per element (input + the vector of its position); the position lookup is
    data movement. Backward as the Embedding's: the table's gradient is the output gradient added
    into the rows of the positions used (one add per element) plus the update of the whole table
    (2 per weight); the input gradient passes through unchanged (0)."""
    elements = _elements(call.output_shape)
    table = call.layer.max_length * call.output_shape[-1]
    return Cost(forward=elements, backward=elements + 2 * table)


@rule(layers.RMSNormalization)
def rms_normalization(call: LayerCall) -> Cost:
    """Forward 4 per element: square, sum, multiply by the reciprocal root mean square, multiply by
    the scale (LayerNormalization's 7 less the mean, its subtraction and the shift). Backward
    AIPerf's constant per normalisation layer, 36, as BatchNormalization and LayerNormalization."""
    return Cost(forward=4 * _elements(call.output_shape), backward=_NORM_BACKWARD)


def _attention_split(shape: Shape, axes: tuple[int, ...]) -> tuple[int, int]:
    """(positions outside the attention axes, positions along them) of an input `shape` (batch
    excluded, features last); `axes` index the projected (batch, ..., heads, size) tensor, so
    axis a is dimension a - 1 of `shape`."""
    inside = math.prod(shape[a - 1] for a in axes)
    return _elements(shape[:-1]) // inside, inside


def _size(sublayer: Any) -> int:
    """Weights of one of the attention's projections (kernel, and bias where it has one)."""
    return sum(math.prod(w.shape) for w in sublayer.weights)


def _query_value_key(call: LayerCall, queries: int) -> tuple[Shape, Shape, Shape]:
    """The query, value and key input shapes. A call node lists its tensors in the order they were
    passed, so `mha(key=k, value=v, query=q)` lists k first: the roles are told apart by the input
    widths each projection's kernel was built for and by the query's positions (the output's)."""
    layer = call.layer
    widths = [p.kernel.shape[0] for p in (layer.query_dense, layer.value_dense, layer.key_dense)]
    for order in itertools.permutations(call.input_shapes):
        query, value = order[0], order[1]
        key = order[2] if len(order) > 2 else value
        if (
            [query[-1], value[-1], key[-1]] == widths
            and _elements(query[:-1]) == queries
            and value[:-1] == key[:-1]
        ):
            return query, value, key
    raise ValueError(
        f"cannot tell the query, value and key of {layer.name!r} from its input shapes "
        f"{call.input_shapes}"
    )


@rule(layers.MultiHeadAttention)
def multi_head_attention(call: LayerCall) -> Cost:
    """With H heads of size k (value size v), Tq query and Tk key positions:

    - projections, as Dense layers (2 per MAC forward; backward weight and input gradients, 2 per
      MAC each, and 2 per weight for the update, biases included): Q Tq*dq*H*k, K Tk*dk*H*k,
      V Tk*dv*H*v, output Tq*H*v*dout MACs (and a sigmoid gate Tq*dq*H*v with use_gate);
    - the attention as a dense kernel computes it: Q·K^T H*Tq*Tk*k and A·V H*Tq*Tk*v MACs, the
      whole Tq x Tk whatever the mask (a causal mask skips no work in a dense kernel). The count is
      the model's, read from the layer's shapes, never the kernel's: the fused kernel a run may
      choose (train.attention, aiperf.train.attention), which skips the masked half and computes
      the scores again in its backward pass, counts the same. Backward 2
      products of the forward's size each (gradients of both operands), 4 per MAC;
    - elementwise, "aiperf" convention only, backward 0: the 1/sqrt(k) scaling of the query (one
      multiply per query element, as Keras applies it), softmax 13n - 1 per row of n scores (the
      Dense rule's softmax), and with use_gate a sigmoid and a multiply per gated element. The
      causal mask is a selection, not arithmetic; attention dropout is not counted (Dropout's rule).
    """
    layer = call.layer
    heads, key_size, value_size = layer.num_heads, layer.key_dim, layer.value_dim
    out_features = math.prod(layer.output_dense.kernel.shape[2:])
    nq = _elements(call.output_shape) // out_features
    query, value, key = _query_value_key(call, nq)
    nk = _elements(key[:-1])
    axes = tuple(layer.attention_axes or range(1, len(query)))
    rows, tq = _attention_split(query, axes)
    _, tk = _attention_split(key, axes)

    projections = [  # (MACs, weights) of each projection, on the positions it is applied to
        (nq * math.prod(layer.query_dense.kernel.shape), _size(layer.query_dense)),
        (nk * math.prod(layer.key_dense.kernel.shape), _size(layer.key_dense)),
        (nk * math.prod(layer.value_dense.kernel.shape), _size(layer.value_dense)),
        (nq * math.prod(layer.output_dense.kernel.shape), _size(layer.output_dense)),
    ]
    elementwise = nq * heads * key_size  # the query's scaling
    if layer._use_gate:  # no public accessor; the gate is a sigmoid projection of the query
        gate = layer._gate_dense
        projections.append((nq * math.prod(gate.kernel.shape), _size(gate)))
        elementwise += 2 * nq * heads * value_size
    attention = rows * heads * tq * tk * (key_size + value_size)
    elementwise += _softmax((rows * heads * tq, tk))

    # The output projection always takes a gradient: Q, K and V are upstream of it.
    backward = sum(
        _weighted_backward(macs, weights, call.needs_input_grad or i == 3)
        for i, (macs, weights) in enumerate(projections)
    )
    macs = sum(m for m, _ in projections) + attention
    return Cost(forward=2 * macs + elementwise, backward=backward + 4 * attention, macs=macs)
