"""Decoder-only transformers as a few numbers (`TransformerSpec`), and the one builder that turns
such a spec into a Keras 3 model from Keras' own layers (`build_transformer`).

The LM track's counterpart of ArchSpec and builder.py: the search grows specs (grow.py), every
trial stores one as JSON, and every worker builds the same layers from it, named by block index so
that two builds of one spec match layer for layer and a grown child's weights can be mapped from
its parent's by name. The spec itself is plain Python (Keras is imported by the builder only), so
the search can validate, count and compare thousands of them without starting a framework.

The model (GPT-2's shape, pre-norm):
    tokens (int32, (batch, seq_len))
    token_embedding (Embedding; ReversibleEmbedding when the head is tied) -> position_embedding
    block{i}, i = 0 .. layers - 1:
        x + attention(norm1(x))    MultiHeadAttention, causal, key_dim = spec.key_dim
                                   (keras_layers.causal_self_attention: the run's kernel)
        x + mlp_down(mlp_up(norm2(x)))   Dense(mlp_width, activation) -> Dense(d_model)
            swiglu: x + mlp_down(mlp_multiply(mlp_gate(y), mlp_up(y))), y = norm2(x):
            Dense(mlp_width, silu) and Dense(mlp_width), Multiply, Dense(d_model)
            (Shazeer 2020's SwiGLU, Llama's MLP)
    final_norm -> head (Dense(vocab_size), or the token embedding reversed) -> logits, float32
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from aiperf.errors import UserError

if TYPE_CHECKING:
    import keras

FORMAT = "aiperf-transformer/1"
NORMS = ("layer", "rms")
POSITIONS = ("learned",)
# "swiglu" is a gated MLP (two hidden projections multiplied), the others one Dense's activation.
ACTIVATIONS = ("gelu", "relu", "swiglu")
# Layers (and their part names) every block has, in order: a block's layer is f"block{i}_{part}".
BLOCK_PARTS = ("norm1", "attention", "add1", "norm2", "mlp_up", "mlp_down", "add2")
# A swiglu block's MLP has two more: the gate (silu) and the product of gate and up.
GATED_PARTS = (
    "norm1",
    "attention",
    "add1",
    "norm2",
    "mlp_gate",
    "mlp_up",
    "mlp_multiply",
    "mlp_down",
    "add2",
)


class InvalidTransformer(UserError, ValueError):
    """A spec that cannot describe a model: a user's mistake when it comes from a file (one line at
    the command line), a ValueError to code that builds specs."""


@dataclass(frozen=True)
class TransformerSpec:
    """A decoder-only transformer. `head_dim` None means d_model // heads (and then heads must
    divide d_model); widen_heads sets it, since added heads keep the width of the others.
    `history` lists the growth steps (grow.py) that made this spec from its seed, one entry each."""

    vocab_size: int
    seq_len: int
    layers: int
    d_model: int
    heads: int
    mlp_width: int
    head_dim: int | None = None
    norm: str = "layer"
    positions: str = "learned"
    tied_head: bool = True
    activation: str = "gelu"
    dropout: float = 0.0
    history: tuple[str, ...] = ()
    name: str = "transformer"

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise InvalidTransformer("invalid transformer: " + "; ".join(problems))

    @property
    def key_dim(self) -> int:
        """Width of one attention head (Keras' key_dim)."""
        return self.head_dim if self.head_dim is not None else self.d_model // self.heads

    @property
    def param_count(self) -> int:
        """Weights of the built model, as Keras counts them (tests/test_transformer_arch.py checks)."""
        d, v, m, h, k = self.d_model, self.vocab_size, self.mlp_width, self.heads, self.key_dim
        norm = 2 * d if self.norm == "layer" else d  # gamma and beta; RMS: scale only
        attention = 3 * (d * h * k + h * k) + h * k * d + d
        hidden = 2 if self.gated else 1  # swiglu: gate and up, each Dense(mlp_width)
        mlp = hidden * (d * m + m) + m * d + d
        head = 0 if self.tied_head else d * v + v
        return v * d + self.seq_len * d + self.layers * (2 * norm + attention + mlp) + norm + head

    @property
    def gated(self) -> bool:
        """Whether the MLP is gated (swiglu): a gate Dense beside the up projection."""
        return self.activation == "swiglu"

    def architecture_key(self) -> str:
        """Hash of what the model computes (not its name or history): two specs with equal keys
        build the same layers, so a search proposes each architecture once (deepen at different
        positions gives one architecture)."""
        data = {k: v for k, v in self.to_dict().items() if k not in ("history", "name")}
        data["head_dim"] = self.key_dim
        text = json.dumps(data, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def block_parts(self) -> tuple[str, ...]:
        """The part names of every block's layers, in order: GATED_PARTS for swiglu."""
        return GATED_PARTS if self.gated else BLOCK_PARTS

    def block_names(self, block: int) -> list[str]:
        """The names of block `block`'s layers, in order: stable names are what grow_weights maps
        a parent's weights to its child's by."""
        return [f"block{block}_{part}" for part in self.block_parts]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["history"] = list(self.history)
        return {"format": FORMAT, **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TransformerSpec:
        data = dict(data)
        found = data.pop("format", FORMAT)
        if found != FORMAT:
            raise InvalidTransformer(f"invalid transformer: format {found!r}, expected {FORMAT!r}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidTransformer(f"invalid transformer: unknown fields {', '.join(unknown)}")
        if isinstance(data.get("history"), list):
            data["history"] = tuple(data["history"])
        try:
            return cls(**data)
        except TypeError as exc:  # a required field missing
            raise InvalidTransformer(f"invalid transformer: {exc}") from None

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TransformerSpec:
        return cls.from_dict(json.loads(text))


def is_transformer(architecture: dict[str, Any]) -> bool:
    """Whether a trial's architecture (as recorded and sent to workers) is a transformer spec of
    the LM track, not a CNN graph: the one test every place that handles both makes."""
    return architecture.get("format") == FORMAT


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _problems(spec: TransformerSpec) -> list[str]:
    """Every problem of `spec`, one message each, naming the field and the value found."""
    problems = []
    for name in ("vocab_size", "seq_len", "layers", "d_model", "heads", "mlp_width"):
        value = getattr(spec, name)
        if not _is_int(value) or value < 1:
            problems.append(f"{name} must be a positive integer, got {value!r}")
    if spec.vocab_size == 1:
        problems.append("vocab_size must be at least 2, got 1")
    if spec.head_dim is not None and (not _is_int(spec.head_dim) or spec.head_dim < 1):
        problems.append(f"head_dim must be a positive integer or null, got {spec.head_dim!r}")
    if (
        spec.head_dim is None
        and _is_int(spec.d_model)
        and _is_int(spec.heads)
        and spec.heads > 0
        and spec.d_model % spec.heads
    ):
        problems.append(
            f"heads ({spec.heads}) must divide d_model ({spec.d_model}) unless head_dim is given"
        )
    if spec.norm not in NORMS:
        problems.append(f"norm must be one of {', '.join(NORMS)}, got {spec.norm!r}")
    if spec.positions == "rotary":
        problems.append(
            "positions 'rotary' is not supported: Keras' MultiHeadAttention has no hook to rotate "
            "queries and keys; use 'learned'"
        )
    elif spec.positions not in POSITIONS:
        problems.append(f"positions must be one of {', '.join(POSITIONS)}, got {spec.positions!r}")
    if not isinstance(spec.tied_head, bool):
        problems.append(f"tied_head must be true or false, got {spec.tied_head!r}")
    if spec.activation not in ACTIVATIONS:
        problems.append(
            f"activation must be one of {', '.join(ACTIVATIONS)}, got {spec.activation!r}"
        )
    if (
        not isinstance(spec.dropout, (int, float))
        or isinstance(spec.dropout, bool)
        or not 0.0 <= spec.dropout < 1.0
    ):
        problems.append(f"dropout must be in [0, 1), got {spec.dropout!r}")
    if not isinstance(spec.history, tuple) or not all(isinstance(s, str) for s in spec.history):
        problems.append("history must be a list of growth steps (strings)")
    return problems


# --- seeds ------------------------------------------------------------------------------------

SEEDS: dict[str, dict[str, Any]] = {
    # Two CPU cores train it in seconds: byte vocabulary, 64 positions, 2 blocks of width 64.
    "lm-tiny": {
        "vocab_size": 256,
        "seq_len": 64,
        "layers": 2,
        "d_model": 64,
        "heads": 4,
        "mlp_width": 256,
    },
    # GPT-2 small's body (12 blocks, width 768, 12 heads, MLP 3072, 1024 positions, tied head)
    # over the byte vocabulary the LM track's data uses (vocab_size is a field: 50257 for GPT-2's).
    "gpt2-small": {
        "vocab_size": 256,
        "seq_len": 1024,
        "layers": 12,
        "d_model": 768,
        "heads": 12,
        "mlp_width": 3072,
    },
}


def transformer_seed_names() -> list[str]:
    return sorted(SEEDS)


def transformer_seed(name: str, **changes: Any) -> TransformerSpec:
    """The named seed, with fields changed by `changes` (e.g. vocab_size, seq_len from a profile)."""
    if name not in SEEDS:
        raise UserError(
            f"unknown transformer seed {name!r}; use one of: {', '.join(transformer_seed_names())}"
        )
    return TransformerSpec(**{**SEEDS[name], "name": name, **changes})


# --- the builder ------------------------------------------------------------------------------


def _norm(spec: TransformerSpec, name: str) -> Any:
    import keras

    if spec.norm == "rms":
        return keras.layers.RMSNormalization(epsilon=1e-5, name=name)
    return keras.layers.LayerNormalization(epsilon=1e-5, name=name)


def _mlp(spec: TransformerSpec, names: dict[str, str], y: Any) -> Any:
    """A block's MLP on `y`: Dense(mlp_width, activation) -> Dense(d_model), or for swiglu
    down(silu(gate(y)) * up(y)). The gate is built before up, so a block's weights are listed
    norm, attention, norm, gate, up, down."""
    import keras

    layers = keras.layers
    if spec.gated:
        gate = layers.Dense(spec.mlp_width, activation="silu", name=names["mlp_gate"])(y)
        up = layers.Dense(spec.mlp_width, name=names["mlp_up"])(y)
        y = layers.Multiply(name=names["mlp_multiply"])([gate, up])
    else:
        y = layers.Dense(spec.mlp_width, activation=spec.activation, name=names["mlp_up"])(y)
    return layers.Dense(spec.d_model, name=names["mlp_down"])(y)


def attention_kernel(spec: TransformerSpec, attention: str) -> str:
    """The kernel `spec`'s attention layers take under the run's `attention` (keras_layers'
    ATTENTION_KERNELS): "fused" only where cuDNN's flash kernel takes the spec's head width on every
    GPU (keras_layers.fused_head_fits); a wider head is left to Keras ("auto": Hopper's cuDNN takes
    up to 256), rather than failing the trial that grew it."""
    from aiperf.arch.keras_layers import AUTO, FUSED, fused_head_fits

    if attention == FUSED and not fused_head_fits(spec.key_dim):
        return AUTO
    return attention


def build_transformer(spec: TransformerSpec, *, seed: int, attention: str = "auto") -> keras.Model:
    """A fresh model for `spec`, its weights drawn from `seed` (Keras' global seed is set: the same
    spec and seed give the same weights, on any backend's own generator). Logits come out float32
    under any dtype policy (the head computes in float32), so a mixed-precision model's softmax and
    loss keep float32's range, as the CNN builder's head does. `attention` names the kernel of every
    causal attention (keras_layers.causal_self_attention; a trial passes its run's choice,
    aiperf.train.attention): which kernel runs changes neither the weights nor the counted
    operations, so "auto" (Keras' own guess) serves a model built only to count or to load."""
    import keras

    from aiperf.arch.keras_layers import PositionEmbedding, causal_self_attention

    keras.utils.set_random_seed(seed)
    kernel = attention_kernel(spec, attention)
    layers = keras.layers
    tokens = keras.Input(shape=(spec.seq_len,), dtype="int32", name="tokens")
    if spec.tied_head:
        # float32 throughout: the reverse call is the head. Its lookups come out float32 and the
        # next layer casts them to its compute dtype.
        embedding: Any = layers.ReversibleEmbedding(
            spec.vocab_size, spec.d_model, dtype="float32", name="token_embedding"
        )
    else:
        embedding = layers.Embedding(spec.vocab_size, spec.d_model, name="token_embedding")
    x = PositionEmbedding(spec.seq_len, name="position_embedding")(embedding(tokens))
    if spec.dropout > 0:
        x = layers.Dropout(spec.dropout, name="embedding_dropout")(x)
    for i in range(spec.layers):
        names = dict(zip(spec.block_parts, spec.block_names(i), strict=True))
        y = _norm(spec, names["norm1"])(x)
        # No dropout inside the attention and no mask but the causal one: either would rule out
        # the backend's fused kernel (MultiHeadAttention passes is_causal=True to it only then).
        y = causal_self_attention(
            spec.heads, spec.key_dim, attention=kernel, name=names["attention"]
        )(y, y, use_causal_mask=True)
        if spec.dropout > 0:
            y = layers.Dropout(spec.dropout, name=f"block{i}_attention_dropout")(y)
        x = layers.Add(name=names["add1"])([x, y])
        y = _norm(spec, names["norm2"])(x)
        y = _mlp(spec, names, y)
        if spec.dropout > 0:
            y = layers.Dropout(spec.dropout, name=f"block{i}_mlp_dropout")(y)
        x = layers.Add(name=names["add2"])([x, y])
    x = _norm(spec, "final_norm")(x)
    if spec.tied_head:
        logits = embedding(x, reverse=True)
    else:
        logits = layers.Dense(spec.vocab_size, dtype="float32", name="head")(x)
    return keras.Model(tokens, logits, name=spec.name)
