"""Growth operators for transformers: the LM track's morphisms, as edits of a TransformerSpec, and
the weights that make a grown child compute what its parent computes.

    deepen(at)        insert a block at index `at` (0 .. layers): it becomes block{at}, the blocks
                      from `at` on move up one
    widen_mlp(factor) multiply every block's MLP hidden width
    widen_heads(add)  add `add` heads to every attention, each as wide as the others (key_dim kept),
                      so d_model is unchanged: heads x key_dim may then exceed d_model, which
                      Keras' MultiHeadAttention allows (its output projection maps back to d_model)
    widen_model(factor) multiply d_model (the residual stream, embeddings, norms; key_dim too when
                      it follows d_model // heads)

Each operator returns a new valid spec whose history has one more entry (morph.py's Morphism:
operator and arguments, described and parsed the same way), so `replay` rebuilds any spec from its
seed. `candidates` lists every child the search may propose (widen_heads as a doubling, like the
other widenings) within the limits, so the search never proposes a model that
will not build or fit. `grow_weights` gives a child the parent's weights; for deepen, widen_mlp
and widen_heads the new parts are initialised so the child computes the parent's function exactly
(zeroed output projections: the new parts add zero to the residual stream), so training continues
from the parent. A swiglu MLP (gate, up, their product, down) grows the same way: its new hidden
units' gate and up columns are fresh and their rows of mlp_down zero, so they add zero.

widen_model preserves the function too, by duplicating the residual stream (in the spirit of Shen
et al. 2022's width operator; Net2Net's, Chen et al. 2016, for a stream read through norms): the
child's stream is the parent's tiled `factor` times. A norm over tile(x) computes tile(norm(x))
exactly (mean and variance, or the mean square, are the same), so every norm's scale and offset are
tiled; whatever writes to the stream (embeddings, each attention's output projection, each
MLP's down projection) writes its output tiled; whatever reads a norm's output (the queries, keys
and values, the MLP's up and gate, an untied head) reads each copy with a share of the parent's
weight, the shares of one weight summing to 1 and drawn at random from the seed, so the copies get
different gradients and grow apart (equal shares would keep them equal for ever). A tied head reads
the stream through the tiled embedding, so the final norm's scale and offset are divided by
`factor`. Where the head width follows d_model (head_dim unset) each head doubles with it: the
queries' old dimensions are scaled by sqrt(new / old width), to undo the wider head's 1/sqrt(key_dim);
the new dimensions' queries and their output rows start at zero (they add nothing), their keys and
values fresh (so the zero queries still learn).

`distance` compares two specs for the oracle's Gaussian process, in the spirit of
aiperf/search/distance.py: one growth step moves a spec by about 1.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from aiperf.arch.morph import Morphism
from aiperf.arch.transformer import ACTIVATIONS, TransformerSpec, build_transformer

if TYPE_CHECKING:
    import keras

OPERATORS = ("deepen", "widen_mlp", "widen_heads", "widen_model")
# The operators grow_weights makes function-preserving: every one.
PRESERVING = OPERATORS


def _grown(spec: TransformerSpec, step: Morphism, **changes: Any) -> TransformerSpec:
    return replace(spec, history=(*spec.history, step.describe()), **changes)


def deepen(spec: TransformerSpec, at: int) -> TransformerSpec:
    if not 0 <= at <= spec.layers:
        raise ValueError(f"deepen inserts a block at 0 .. {spec.layers}, not at {at}")
    return _grown(spec, Morphism("deepen", {"at": at}), layers=spec.layers + 1)


def widen_mlp(spec: TransformerSpec, factor: int = 2) -> TransformerSpec:
    if factor < 2:
        raise ValueError(f"widen_mlp multiplies the MLP width by 2 or more, not {factor}")
    return _grown(
        spec, Morphism("widen_mlp", {"factor": factor}), mlp_width=spec.mlp_width * factor
    )


def widen_heads(spec: TransformerSpec, add: int) -> TransformerSpec:
    if add < 1:
        raise ValueError(f"widen_heads adds at least one head, not {add}")
    return _grown(
        spec, Morphism("widen_heads", {"add": add}), heads=spec.heads + add, head_dim=spec.key_dim
    )


def widen_model(spec: TransformerSpec, factor: int = 2) -> TransformerSpec:
    if factor < 2:
        raise ValueError(f"widen_model multiplies d_model by 2 or more, not {factor}")
    return _grown(spec, Morphism("widen_model", {"factor": factor}), d_model=spec.d_model * factor)


def apply(spec: TransformerSpec, step: Morphism | str) -> TransformerSpec:
    """Replay one recorded growth step (a Morphism or its description)."""
    step = Morphism.parse(step) if isinstance(step, str) else step
    args = step.args
    if step.operator == "deepen":
        return deepen(spec, int(args["at"]))
    if step.operator == "widen_mlp":
        return widen_mlp(spec, int(args["factor"]))
    if step.operator == "widen_heads":
        return widen_heads(spec, int(args["add"]))
    if step.operator == "widen_model":
        return widen_model(spec, int(args["factor"]))
    raise ValueError(f"unknown growth step {step.operator!r}; known: {', '.join(OPERATORS)}")


def replay(seed: TransformerSpec, history: tuple[str, ...] | list[str]) -> TransformerSpec:
    """`seed` grown by every step of `history` in turn: a stored spec's lineage, checked."""
    spec = seed
    for step in history:
        spec = apply(spec, step)
    return spec


# --- what the search may propose --------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """Bounds from the profile: a child past them is never proposed. max_layers counts blocks."""

    max_layers: int = 48
    max_params: int = 200_000_000


def within(spec: TransformerSpec, limits: Limits) -> bool:
    return spec.layers <= limits.max_layers and spec.param_count <= limits.max_params


def _children(spec: TransformerSpec, operator: str) -> list[TransformerSpec]:
    if operator == "deepen":
        return [deepen(spec, at) for at in range(spec.layers + 1)]
    if operator == "widen_mlp":
        return [widen_mlp(spec, 2)]
    if operator == "widen_heads":
        # Doubling, as the other widenings do: one step of distance (log2 heads) like theirs. One
        # head more at a time was a step that shrank as heads grew, so the search's GP saw such a
        # child as its parent again and proposed little else (hundreds of heads in a long run).
        return [widen_heads(spec, spec.heads)]
    if operator == "widen_model":
        return [widen_model(spec, 2)]
    raise ValueError(f"unknown growth operator {operator!r}; known: {', '.join(OPERATORS)}")


def candidates(
    spec: TransformerSpec, limits: Limits, operators: tuple[str, ...] = OPERATORS
) -> list[TransformerSpec]:
    """Every child one growth step from `spec` within `limits` (each a valid spec, so it builds)."""
    return [c for op in operators for c in _children(spec, op) if within(c, limits)]


# --- distance ---------------------------------------------------------------------------------

# Depth in blocks, then widths on a log2 scale (doubling one is a step of 1), then the choices that
# growth never changes (weighted 0.5: two specs that differ in one are as far apart as half a step).
_WEIGHTS = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5] + [0.5 / 2] * len(ACTIVATIONS))


def describe(spec: TransformerSpec) -> np.ndarray:
    """The features `distance` compares, one vector per spec (cache it when comparing many). The
    vocabulary and sequence length are the run's, the same for every trial: not compared."""
    activation = [float(spec.activation == a) for a in ACTIVATIONS]
    return np.array(
        [
            spec.layers,
            math.log2(spec.d_model),
            math.log2(spec.heads),
            math.log2(spec.key_dim),
            math.log2(spec.mlp_width),
            float(spec.norm == "rms"),
            float(spec.tied_head),
            *activation,
        ]
    )


def distance(a: TransformerSpec | np.ndarray, b: TransformerSpec | np.ndarray) -> float:
    """A weighted L1 distance of the features (a metric): O(1) per pair."""
    fa = describe(a) if isinstance(a, TransformerSpec) else a
    fb = describe(b) if isinstance(b, TransformerSpec) else b
    return float(np.abs(fa - fb) @ _WEIGHTS)


def distance_matrix(rows: list[np.ndarray], cols: list[np.ndarray]) -> np.ndarray:
    """distance(a, b) for every a of `rows` and b of `cols`, all given as describe() vectors."""
    if not rows or not cols:
        return np.zeros((len(rows), len(cols)))
    a, b = np.stack(rows), np.stack(cols)
    return np.abs(a[:, None, :] - b[None, :, :]) @ _WEIGHTS


# --- weights ----------------------------------------------------------------------------------

_BLOCK = re.compile(r"block(\d+)_(.+)")


def _parent_layer(layer: str, step: Morphism) -> str | None:
    """The parent's name for the child's layer `layer` (None for a new one): deepen renumbers the
    blocks from its position on; the other operators keep every name."""
    match = _BLOCK.fullmatch(layer)
    if step.operator != "deepen" or match is None:
        return layer
    block, part, at = int(match[1]), match[2], int(step.args["at"])
    if block == at:
        return None
    return f"block{block - 1 if block > at else block}_{part}"


def _grown_value(child: np.ndarray, parent: np.ndarray | None, path: str) -> np.ndarray:
    """The child's fresh value with the parent's in its leading slice along every axis."""
    if parent is None:
        return child
    if parent.ndim != child.ndim or any(
        p > c for p, c in zip(parent.shape, child.shape, strict=False)
    ):
        raise ValueError(f"weight {path}: parent shape {parent.shape} does not fit {child.shape}")
    value = child.copy()
    value[tuple(slice(0, n) for n in parent.shape)] = parent
    return value


def _preserve(
    value: np.ndarray, layer: str, rest: str, step: Morphism, parent: TransformerSpec
) -> np.ndarray:
    """Zero the new parts' contributions to the residual stream, so the child's function is the
    parent's: a new block's output projections (attention and MLP), new hidden units' rows of the
    MLP's down projection (whatever computes them: a swiglu MLP's gate and up columns are fresh),
    new heads' slices of the attention's output projection."""
    output = rest.startswith("attention_output/")
    if step.operator == "deepen" and layer in (
        f"block{step.args['at']}_attention",
        f"block{step.args['at']}_mlp_down",
    ):
        if output or layer.endswith("_mlp_down"):
            value[...] = 0
    elif step.operator == "widen_mlp" and layer.endswith("_mlp_down") and rest == "kernel":
        value[parent.mlp_width :] = 0
    elif step.operator == "widen_heads" and output and rest.endswith("kernel"):
        value[parent.heads :] = 0
    return value


_READERS = ("query/kernel", "key/kernel", "value/kernel")


def _tiled(value: np.ndarray, factor: int) -> np.ndarray:
    """The stream's last axis repeated `factor` times: tile(x)."""
    return np.concatenate([value] * factor, axis=-1)


def _shared(value: np.ndarray, factor: int, rng: np.random.Generator) -> np.ndarray:
    """A reader's kernel (stream on the first axis) for the tiled stream: `factor` copies of its
    rows, each weight split into random shares that sum to it."""
    shares = rng.dirichlet(np.ones(factor), size=value.shape)  # value.shape + (factor,)
    return np.concatenate([value * shares[..., j] for j in range(factor)], axis=0)


def _widened_heads(
    fresh: np.ndarray, value: np.ndarray, part: str, widths: tuple[int, int]
) -> np.ndarray:
    """A query, key or value kernel or bias (heads and head width on its last two axes) whose heads
    widened from `widths[0]` to `widths[1]`: the parent's in the leading dimensions (a query's
    scaled by sqrt(new / old)); the new dimensions' queries zero, their keys and values fresh."""
    old, new = widths
    out = fresh.copy()
    if part == "query":
        out[..., old:] = 0
        value = value * math.sqrt(new / old)
    out[..., :old] = value
    return out


def _widen_model_value(
    path: str,
    fresh: np.ndarray,
    value: np.ndarray,
    parent: TransformerSpec,
    factor: int,
    rng: np.random.Generator,
    widths: tuple[int, int],
) -> np.ndarray:
    """One child weight of widen_model from the parent's `value` (the module's docstring)."""
    layer, _, rest = path.partition("/")
    if rest in ("gamma", "beta", "scale"):  # a norm: tiled; a tied head's final norm / factor
        tiled = _tiled(value, factor)
        return tiled / factor if layer == "final_norm" and parent.tied_head else tiled
    if rest == "attention_output/kernel":  # writes the stream; new head dims' rows zero
        out = np.zeros_like(fresh)
        out[:, : widths[0], :] = _tiled(value, factor)
        return out
    if rest in _READERS or (rest == "kernel" and layer.endswith(("_mlp_up", "_mlp_gate", "head"))):
        value = _shared(value, factor, rng)
    elif layer.endswith(("_mlp_down", "embedding")) or rest == "attention_output/bias":
        return _tiled(value, factor)  # a writer: its output tiled
    part = rest.split("/")[0]
    if part in ("query", "key", "value") and widths[1] != widths[0]:
        return _widened_heads(fresh, value, part, widths)
    return value


def _widen_model_weights(
    child: keras.Model,
    parents: dict[str, Any],
    parent: TransformerSpec,
    child_spec: TransformerSpec,
    rng: np.random.Generator,
) -> None:
    """Every weight of a widen_model child, so that it computes its parent's function."""
    factor, widths = child_spec.d_model // parent.d_model, (parent.key_dim, child_spec.key_dim)
    for variable in child.weights:
        old = parents[variable.path]
        value = _widen_model_value(
            variable.path,
            np.array(variable.numpy()),
            np.array(old.numpy()),
            parent,
            factor,
            rng,
            widths,
        )
        if value.shape != tuple(variable.shape):
            raise ValueError(
                f"weight {variable.path}: {value.shape} does not fit {variable.shape}"
            )
        variable.assign(value)


def grow_weights(
    parent_model: keras.Model,
    parent_spec: TransformerSpec,
    child_spec: TransformerSpec,
    *,
    seed: int,
    attention: str = "auto",
) -> keras.Model:
    """The child built fresh from `seed` (its attention computed by `attention`'s kernel, as
    build_transformer's), the parent's weights carried over by name, so that it computes the
    parent's function (up to float rounding; the module's docstring says how for each operator).
    The child must be the parent grown by one step (or the parent itself, whose weights are then
    copied)."""
    history = parent_spec.history
    if child_spec.history[: len(history)] != history or len(child_spec.history) > len(history) + 1:
        raise ValueError("the child is not one growth step from the parent")
    step = (
        Morphism.parse(child_spec.history[-1])
        if len(child_spec.history) > len(history)
        else Morphism("same", {})
    )
    if step.operator != "same" and apply(parent_spec, step) != child_spec:
        raise ValueError(f"the child is not the parent grown by {step.describe()}")
    if step.operator == "same" and child_spec != parent_spec:
        raise ValueError("the child differs from the parent but its history records no growth")
    child = build_transformer(child_spec, seed=seed, attention=attention)
    parents = {v.path: v for v in parent_model.weights}
    if step.operator == "widen_model":
        _widen_model_weights(child, parents, parent_spec, child_spec, np.random.default_rng(seed))
        return child
    for variable in child.weights:
        layer, _, rest = variable.path.partition("/")
        source = _parent_layer(layer, step)
        old = parents.get(f"{source}/{rest}") if source is not None else None
        value = _grown_value(
            np.array(variable.numpy()),
            None if old is None else np.array(old.numpy()),
            variable.path,
        )
        variable.assign(_preserve(value, layer, rest, step, parent_spec))
    return child
