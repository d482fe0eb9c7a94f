"""Operation counts of decoder-only transformers (aiperf/ops/transformer_costs.py): each rule on a hand-computed
case, then a GPT-style model built from Keras' own layers, saved, and counted by `aiperf flops` as a
user runs it, against an independent hand formula in both conventions, with a GELU or a SwiGLU MLP
(and aiperf's own swiglu transformer against the same formula); GPT-2 124M's figure; and on JAX,
the "tensor" forward against the matrix products XLA is given."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402
import typer  # noqa: E402
from keras import layers  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from aiperf.arch.keras_layers import PositionEmbedding  # noqa: E402
from aiperf.cli import flops as ops_cli  # noqa: E402
from aiperf.ops import LayerOps, count_all, count_model  # noqa: E402
from aiperf.ops.layer_costs import RULES  # noqa: E402

app = typer.Typer()
app.command("flops")(ops_cli.flops)


@app.command("other")
def _other() -> None:  # a second command, so "flops" is a subcommand as in the real CLI
    pass


def flops_json(*args: str) -> dict:
    result = CliRunner().invoke(app, ["flops", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# ---------------------------------------------------------------------------------------------
# Each rule on one layer


def _apply(layer: Any, xs: list) -> Any:
    return layer(*xs)


@dataclass(frozen=True)
class Case:
    """One layer called on inputs of given shapes (batch excluded) and dtype, with the expected
    per-sample (forward, backward) under each convention. upstream: a trainable BatchNormalization
    in front of every input, so the layer computes its input gradient."""

    id: str
    make: Callable[[], layers.Layer]
    inputs: tuple[tuple[int, ...], ...]
    aiperf: tuple[int, int]
    tensor: tuple[int, int] = (0, 0)
    output_shape: tuple[int, ...] | None = None
    upstream: bool = True
    dtype: str = "float32"
    apply: Callable[[Any, list], Any] = _apply


def _row(case: Case, convention: str) -> LayerOps:
    layer = case.make()
    inputs = [keras.Input(shape, dtype=case.dtype) for shape in case.inputs]
    xs = [layers.BatchNormalization()(x) for x in inputs] if case.upstream else inputs
    model = keras.Model(inputs, case.apply(layer, xs))
    (row,) = [r for r in count_model(model, convention).layers if r.type == type(layer).__name__]
    return row


def _reverse(layer: Any, xs: list) -> Any:
    return layer(xs[0], reverse=True)


def _causal(layer: Any, xs: list) -> Any:
    return layer(xs[0], xs[0], use_causal_mask=True)


# MultiHeadAttention(2 heads of 4) on (6, 8), self-attention: each projection 6*8*8 = 384 MACs and
# (8 + 1)*8 = 72 weights; attention 2 heads * 6*6 * (4 + 4) = 576 MACs; scaling 6*2*4 = 48;
# softmax 2*6 rows of 6: 12*(13*6 - 1) = 924.
MHA_MACS = 4 * 384 + 576
CASES = [
    Case(
        "embedding",
        lambda: layers.Embedding(20, 8),
        ((6,),),
        aiperf=(0, 6 * 8 + 2 * 20 * 8),
        output_shape=(6, 8),
        upstream=False,
        dtype="int32",
    ),
    Case(
        "reversible-embedding-lookup",
        lambda: layers.ReversibleEmbedding(20, 8),
        ((6,),),
        aiperf=(0, 6 * 8 + 2 * 20 * 8),
        output_shape=(6, 8),
        upstream=False,
        dtype="int32",
    ),
    # reverse: 6 positions * 8 * 20 = 960 MACs; tied: no update of its own
    Case(
        "reversible-embedding-reverse-tied",
        lambda: layers.ReversibleEmbedding(20, 8),
        ((6, 8),),
        aiperf=(1920, 4 * 960),
        tensor=(1920, 3840),
        output_shape=(6, 20),
        apply=_reverse,
    ),
    Case(
        "reversible-embedding-reverse-untied",
        lambda: layers.ReversibleEmbedding(20, 8, tie_weights=False),
        ((6, 8),),
        aiperf=(1920, 4 * 960 + 2 * 8 * 20),
        tensor=(1920, 3840),
        apply=_reverse,
    ),
    Case(
        "reversible-embedding-reverse-soft-cap-first",
        lambda: layers.ReversibleEmbedding(20, 8, logit_soft_cap=30.0),
        ((6, 8),),
        aiperf=(1920 + 3 * 6 * 20, 2 * 960),
        tensor=(1920, 3840),
        upstream=False,
        apply=_reverse,
    ),
    Case(
        "position-embedding",
        lambda: PositionEmbedding(10),
        ((6, 8),),
        aiperf=(48, 48 + 2 * 10 * 8),
        output_shape=(6, 8),
    ),
    Case("rms-normalization", lambda: layers.RMSNormalization(), ((6, 8),), aiperf=(4 * 48, 36)),
    Case(
        "mha-causal-self-attention",
        lambda: layers.MultiHeadAttention(2, 4),
        ((6, 8),),
        aiperf=(2 * MHA_MACS + 48 + 924, 4 * 4 * 384 + 2 * 4 * 72 + 4 * 576),
        tensor=(2 * MHA_MACS, 4 * MHA_MACS),
        output_shape=(6, 8),
        apply=_causal,
    ),
    # Nothing trainable upstream: Q, K and V skip their input gradient, the output projection not.
    Case(
        "mha-first",
        lambda: layers.MultiHeadAttention(2, 4),
        ((6, 8),),
        aiperf=(2 * MHA_MACS + 48 + 924, 3 * 2 * 384 + 4 * 384 + 2 * 4 * 72 + 4 * 576),
        tensor=(2 * MHA_MACS, 4 * MHA_MACS),
        upstream=False,
        apply=_causal,
    ),
    # Gate: one more projection (384 MACs, 72 weights), a sigmoid and a multiply on 6*2*4 values.
    Case(
        "mha-gated",
        lambda: layers.MultiHeadAttention(2, 4, use_gate=True),
        ((6, 8),),
        aiperf=(
            2 * (MHA_MACS + 384) + 48 + 924 + 2 * 48,
            5 * 4 * 384 + 2 * 5 * 72 + 4 * 576,
        ),
        tensor=(2 * (MHA_MACS + 384), 4 * (MHA_MACS + 384)),
        apply=_causal,
    ),
    # Cross-attention, 3 heads, key 2, value 5, output 7, no bias; query (4, 6), value (9, 10),
    # key (9, 3): Q 4*6*6 = 144, K 9*3*6 = 162, V 9*10*15 = 1350, O 4*15*7 = 420 MACs; weights
    # 36, 18, 150, 105; attention 3*4*9*(2 + 5) = 756; scaling 4*3*2 = 24; softmax 12*(13*9 - 1).
    Case(
        "mha-cross-attention",
        lambda: layers.MultiHeadAttention(3, 2, value_dim=5, output_shape=7, use_bias=False),
        ((4, 6), (9, 10), (9, 3)),
        aiperf=(
            2 * (2076 + 756) + 24 + 12 * 116,
            4 * 2076 + 2 * (36 + 18 + 150 + 105) + 4 * 756,
        ),
        tensor=(2 * (2076 + 756), 4 * (2076 + 756)),
        output_shape=(4, 7),
    ),
    # The same, its inputs passed by keyword in another order: the call node lists them k, q, v.
    Case(
        "mha-cross-attention-keywords",
        lambda: layers.MultiHeadAttention(3, 2, value_dim=5, output_shape=7, use_bias=False),
        ((4, 6), (9, 10), (9, 3)),
        aiperf=(
            2 * (2076 + 756) + 24 + 12 * 116,
            4 * 2076 + 2 * (36 + 18 + 150 + 105) + 4 * 756,
        ),
        tensor=(2 * (2076 + 756), 4 * (2076 + 756)),
        output_shape=(4, 7),
        apply=lambda layer, xs: layer(key=xs[2], value=xs[1], query=xs[0]),
    ),
    # Attention along the last of two position axes of (2, 3, 8): 2 independent rows of 3,
    # projections as for 6 positions; attention 2*2*3*3*(4 + 4) = 288; softmax 12*(13*3 - 1).
    Case(
        "mha-attention-axes",
        lambda: layers.MultiHeadAttention(2, 4, attention_axes=(2,)),
        ((2, 3, 8),),
        aiperf=(2 * (1536 + 288) + 48 + 12 * 38, 4 * 1536 + 2 * 4 * 72 + 4 * 288),
        tensor=(2 * (1536 + 288), 4 * (1536 + 288)),
        output_shape=(2, 3, 8),
        apply=lambda layer, xs: layer(xs[0], xs[0]),
    ),
    Case("gelu", lambda: layers.Activation("gelu"), ((6, 8),), aiperf=(48, 0)),
    Case("silu", lambda: layers.Activation("silu"), ((6, 8),), aiperf=(48, 0)),
    # A SwiGLU MLP's parts: the gate, Dense(16, silu) on (6, 8): 6*8*16 = 768 MACs, a silu per
    # output (96), (8 + 1)*16 weights; the product of gate and up, one multiply per element.
    Case(
        "dense-silu-gate",
        lambda: layers.Dense(16, activation="silu"),
        ((6, 8),),
        aiperf=(2 * 768 + 96, 4 * 768 + 2 * 9 * 16),
        tensor=(2 * 768, 4 * 768),
        output_shape=(6, 16),
    ),
    Case(
        "multiply-gate-by-up",
        lambda: layers.Multiply(),
        ((6, 16), (6, 16)),
        aiperf=(96, 0),
        output_shape=(6, 16),
        apply=lambda layer, xs: layer(xs),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_layer_rule(case: Case) -> None:
    aiperf, tensor = _row(case, "aiperf"), _row(case, "tensor")
    assert (aiperf.forward, aiperf.backward) == case.aiperf
    assert (tensor.forward, tensor.backward) == case.tensor
    if case.output_shape is not None:
        assert aiperf.output_shape == case.output_shape


def test_every_transformer_rule_has_a_case() -> None:
    mine = {cls for cls, fn in RULES.items() if fn.__module__ == "aiperf.ops.transformer_costs"}
    assert mine - {type(case.make()) for case in CASES} == set()
    assert len(mine) == 5


# ---------------------------------------------------------------------------------------------
# A GPT-style model, saved and counted through the CLI


def gpt(
    vocab: int,
    length: int,
    width: int,
    heads: int,
    blocks: int,
    tied: bool,
    open_length=False,
    swiglu: int = 0,
) -> keras.Model:
    """Token embedding, learned positions, pre-norm blocks (LayerNorm, causal attention, residual
    add; LayerNorm, Dense 4d gelu, Dense d, dropout, residual add), final LayerNorm, an LM head
    without bias: a Dense, or the token table reversed (tied). open_length: sequences of any
    length up to `length`. swiglu > 0: the MLP is Llama's, Dense(swiglu, silu) (the gate) times
    Dense(swiglu) (up), then Dense d (down)."""
    tokens = keras.Input((None if open_length else length,), dtype="int32")
    table = layers.ReversibleEmbedding(vocab, width) if tied else layers.Embedding(vocab, width)
    x = PositionEmbedding(length)(table(tokens))
    for _ in range(blocks):
        h = layers.LayerNormalization()(x)
        h = layers.MultiHeadAttention(heads, width // heads)(h, h, use_causal_mask=True)
        x = layers.Add()([x, h])
        h = layers.LayerNormalization()(x)
        if swiglu:
            gate = layers.Dense(swiglu, activation="silu")(h)
            h = layers.Multiply()([gate, layers.Dense(swiglu)(h)])
        else:
            h = layers.Dense(4 * width, activation="gelu")(h)
        h = layers.Dropout(0.1)(layers.Dense(width)(h))
        x = layers.Add()([x, h])
    x = layers.LayerNormalization()(x)
    logits = table(x, reverse=True) if tied else layers.Dense(vocab, use_bias=False)(x)
    return keras.Model(tokens, logits)


def hand_count(
    V: int, T: int, d: int, H: int, L: int, tied: bool, swiglu: int = 0
) -> dict[str, tuple[int, int]]:
    """Per-sequence (forward, backward) of `gpt(...)`, written from the rules of docs/flops.md."""
    m = swiglu or 4 * d  # the MLP's hidden width
    # tensor: 2 per MAC of every matmul weight (N of them, used at each of T positions) and of
    # the attention (Q.K^T and A.V: 2*T*T*d MACs per block); backward twice the forward. A SwiGLU
    # MLP has three d x m matrices (gate, up, down), a GELU one two.
    n_matmul = L * (4 * d * d + (3 if swiglu else 2) * d * m) + d * V
    tensor_forward = 2 * n_matmul * T + 2 * 2 * L * T * T * d
    if swiglu:
        mlp_forward = (
            2 * T * d * m
            + T * m  # gate: Dense d -> m and its silu
            + 2 * T * d * m  # up: Dense d -> m
            + T * m  # the product of gate and up
            + 2 * T * m * d  # down: Dense m -> d (dropout: 0)
        )
        mlp_backward = 2 * (4 * T * d * m + 2 * (d + 1) * m) + 4 * T * m * d + 2 * (m + 1) * d
    else:
        mlp_forward = (
            2 * T * d * m
            + T * m  # Dense d -> 4d and its gelu
            + 2 * T * m * d  # Dense 4d -> d (dropout: 0)
        )
        mlp_backward = 4 * T * d * m + 2 * (d + 1) * m + 4 * T * m * d + 2 * (m + 1) * d
    block_forward = (
        2 * 7 * T * d  # two LayerNorms
        + 2 * 4 * T * d * d  # Q, K, V, output projections
        + 2 * 2 * T * T * d  # Q.K^T and A.V
        + T * d  # 1/sqrt(head size) scaling of the query
        + H * T * (13 * T - 1)  # softmax over each of H*T rows of T scores
        + 2 * T * d  # two residual adds
        + mlp_forward
    )
    block_backward = (
        2 * 36  # two LayerNorms
        + 4 * 4 * T * d * d
        + 4 * 2 * (d + 1) * d  # projections: gradients and update
        + 4 * 2 * T * T * d  # gradients of both operands of the two attention products
        + mlp_backward  # each Dense: weight and input gradients, update
    )
    forward = T * d + L * block_forward + 7 * T * d + 2 * T * d * V  # positions, blocks, LN, head
    backward = (
        (T * d + 2 * V * d)  # token table: scatter-add, update
        + (T * d + 2 * T * d)  # position table (max length T)
        + L * block_backward
        + 36
        + 4 * T * d * V  # LM head's gradients
        + (0 if tied else 2 * d * V)  # a separate head's update (a tied one is the table's)
    )
    return {"aiperf": (forward, backward), "tensor": (tensor_forward, 2 * tensor_forward)}


SIZES = {"V": 256, "T": 32, "d": 64, "H": 4, "L": 2}


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[bool, Path]:
    folder = tmp_path_factory.mktemp("gpt")
    paths = {}
    for tied in (False, True):
        paths[tied] = folder / f"gpt-{'tied' if tied else 'untied'}.keras"
        s = SIZES
        gpt(s["V"], s["T"], s["d"], s["H"], s["L"], tied).save(paths[tied])
    return paths


@pytest.mark.parametrize("tied", [False, True], ids=["untied-head", "tied-head"])
@pytest.mark.parametrize("convention", ["aiperf", "tensor"])
def test_saved_gpt_counts_to_the_hand_formula(saved, tied: bool, convention: str) -> None:
    data = flops_json(str(saved[tied]), "--convention", convention)
    forward, backward = hand_count(**SIZES, tied=tied)[convention]
    assert (data["forward"], data["backward"]) == (forward, backward)
    assert data["train_per_sample"] == forward + backward
    T = SIZES["T"]
    assert data["input_shape"] == [T]
    assert data["tokens_per_sample"] == T
    assert data["train_per_token"] == data["train_per_sample"] / T
    if convention == "tensor":
        assert data["train_per_sample"] == 3 * data["forward"]
    types = [row["type"] for row in data["layers"]]
    assert types.count("MultiHeadAttention") == SIZES["L"]
    assert types.count("ReversibleEmbedding") == (2 if tied else 0)


def test_token_sequence_length_as_input_shape(saved) -> None:
    data = flops_json(str(saved[True]), "--input-shape", str(SIZES["T"]))
    assert data["forward"] == hand_count(**SIZES, tied=True)["aiperf"][0]
    result = CliRunner().invoke(app, ["flops", str(saved[True]), "--input-shape", "16"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "built for inputs of shape 32" in result.stderr
    result = CliRunner().invoke(app, ["flops", "resnet-mini", "--input-shape", "32"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "resnet-mini takes images" in result.stderr


def test_a_position_embedding_saved_under_its_old_module_path_loads() -> None:
    """Saved models find aiperf's layer by its registered name, not its module: one saved while it
    lived in aiperf/layers.py (now aiperf/arch/keras_layers.py) loads the same class."""
    assert keras.saving.get_registered_name(PositionEmbedding) == "aiperf>PositionEmbedding"
    saved_config = {
        "module": "aiperf.layers",
        "class_name": "PositionEmbedding",
        "config": {"max_length": 4, "name": "position_embedding"},
        "registered_name": "aiperf>PositionEmbedding",
    }
    layer = keras.saving.deserialize_keras_object(saved_config)
    assert type(layer) is PositionEmbedding and layer.max_length == 4


def test_model_of_open_length_is_counted_at_the_given_length(tmp_path) -> None:
    path = tmp_path / "open.keras"
    s = SIZES
    gpt(s["V"], s["T"], s["d"], s["H"], s["L"], tied=True, open_length=True).save(path)
    data = flops_json(str(path), "--input-shape", str(s["T"]), "--convention", "tensor")
    assert (data["forward"], data["backward"]) == hand_count(**s, tied=True)["tensor"]
    assert data["tokens_per_sample"] == s["T"]
    result = CliRunner().invoke(app, ["flops", str(path), "--input-shape", "16"])
    assert result.exit_code == 0, result.output
    assert "a sample is a sequence of 16 tokens" in " ".join(result.stdout.split())
    result = CliRunner().invoke(app, ["flops", str(path)])
    assert result.exit_code == 2 and "undefined dimension" in result.stderr


def test_table_states_the_figures_per_token(saved) -> None:
    result = CliRunner().invoke(app, ["flops", str(saved[False]), "--convention", "tensor"])
    assert result.exit_code == 0, result.output
    forward = hand_count(**SIZES, tied=False)["tensor"][0]
    T = SIZES["T"]
    per_token = f"per token: eval {forward / T:,.1f} train {3 * forward / T:,.1f}"
    assert f"a sequence of {T} tokens; {per_token}" in " ".join(result.stdout.split())


# Llama's MLP width for d = 64: about 8/3 d, so the SwiGLU MLP's weights are close to GELU's 8d^2.
SWIGLU = 176


def test_saved_swiglu_gpt_counts_to_the_hand_formula(tmp_path) -> None:
    """`aiperf flops MODEL.keras --input-shape T` on a saved SwiGLU model (Keras' own layers):
    the gate Dense and its silu, the Multiply and the down projection, in both conventions; per
    token for training, 6N + 12*L*d*T with N counting the gate's weights."""
    s, path = SIZES, tmp_path / "swiglu.keras"
    gpt(s["V"], s["T"], s["d"], s["H"], s["L"], tied=True, swiglu=SWIGLU).save(path)
    expected = hand_count(**s, tied=True, swiglu=SWIGLU)
    found = {}
    for convention in ("aiperf", "tensor"):
        found[convention] = flops_json(
            str(path), "--input-shape", str(s["T"]), "--convention", convention
        )
        data = found[convention]
        assert (data["forward"], data["backward"]) == expected[convention], convention
        types = [row["type"] for row in data["layers"]]
        assert types.count("Multiply") == s["L"] and types.count("Dense") == 3 * s["L"]
    # N: every matrix product's weights, the gate's included (biases and norms excluded).
    n = s["L"] * (4 * s["d"] * s["d"] + 3 * s["d"] * SWIGLU) + s["d"] * s["V"]
    per_token = 6 * n + 12 * s["L"] * s["d"] * s["T"]
    assert found["tensor"]["train_per_token"] == per_token


def test_aiperfs_swiglu_transformer_counts_to_the_same_formula() -> None:
    """The LM track's own builder (aiperf.arch.build_transformer, activation "swiglu": biases,
    tied head, learned positions) is the model of the hand formula, so its count is the formula's."""
    from aiperf.arch import TransformerSpec, build_transformer

    s = SIZES
    spec = TransformerSpec(
        vocab_size=s["V"],
        seq_len=s["T"],
        layers=s["L"],
        d_model=s["d"],
        heads=s["H"],
        mlp_width=SWIGLU,
        activation="swiglu",
    )
    counted = count_all(build_transformer(spec, seed=0))
    expected = hand_count(**s, tied=True, swiglu=SWIGLU)
    for convention, ops in counted.items():
        assert (ops.forward, ops.backward) == expected[convention], convention


def test_gpt2_small_per_token_training_figure() -> None:
    """GPT-2 124M (L=12, d=768, 12 heads, T=1024, vocabulary 50257, tied head), built, not saved:
    the counter, the hand formula, and per token 6N + 12*L*d*T (N: matmul weights, head included)."""
    model = gpt(50257, 1024, 768, 12, 12, tied=True)
    assert model.count_params() == 124_439_808  # GPT-2 small's published parameter count
    counted = count_all(model)
    expected = hand_count(50257, 1024, 768, 12, 12, tied=True)
    for convention, ops in counted.items():
        assert (ops.forward, ops.backward) == expected[convention]
    kernels = sum(math.prod(w.shape) for w in model.weights if w.path.endswith("/kernel"))
    n = kernels + 50257 * 768
    assert counted["tensor"].train_per_sample == 1024 * (6 * n + 12 * 12 * 768 * 1024)


# ---------------------------------------------------------------------------------------------

# On JAX, the saved model loads and counts the same, and the "tensor" forward equals the matrix
# products XLA is given: 2 x (output elements x contracted size) of every dot_general in the
# StableHLO of one sequence's forward pass (the attention included, the whole T x T).
JAX_SCRIPT = r"""
import json, math, re, sys
import jax, keras, numpy as np, typer
from typer.testing import CliRunner
import aiperf.arch.keras_layers
from aiperf.cli.flops import flops
app = typer.Typer()
app.command("flops")(flops)
app.command("other")(lambda: None)
found = {"backend": keras.backend.backend()}
for convention in ("aiperf", "tensor"):
    out = CliRunner().invoke(app, ["flops", sys.argv[1], "--json", "--convention", convention])
    found[convention] = json.loads(out.stdout) if out.exit_code == 0 else out.output
model = keras.saving.load_model(sys.argv[1], compile=False)
tokens = np.zeros((1, *model.inputs[0].shape[1:]), "int32")
hlo = jax.jit(lambda x: model(x, training=False)).lower(tokens).as_text()
found["dots"], found["dots_outside_main"], function = 0, 0, None
for line in hlo.splitlines():
    declared = re.search(r"func\.func (?:public |private )?@(\w+)", line)
    function = declared.group(1) if declared else function
    if "stablehlo.dot_general" not in line:
        continue
    if function != "main":  # a function called n times would hold its products once
        found["dots_outside_main"] += 1
    contracted = re.search(r"contracting_dims = \[([\d, ]*)\]", line).group(1).split(",")
    shapes = re.findall(r"tensor<([\dx]+)x[a-z]\w*>", line.split(" : ")[-1])
    lhs, out = ([int(d) for d in shape.split("x")] for shape in (shapes[0], shapes[-1]))
    found["dots"] += 2 * math.prod(out) * math.prod(lhs[int(i)] for i in contracted)
print(json.dumps(found))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("jax") is None,
    reason="JAX is not installed (pip install -e '.[jax]')",
)
def test_jax_loads_counts_the_same_and_xla_multiplies_what_tensor_counts(saved) -> None:
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", JAX_SCRIPT, str(saved[True])],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["backend"] == "jax", found
    expected = hand_count(**SIZES, tied=True)
    for convention in ("aiperf", "tensor"):
        data = found[convention]
        assert isinstance(data, dict), data
        assert (data["forward"], data["backward"]) == expected[convention]
    assert found["dots_outside_main"] == 0  # so each product is seen once per call
    assert found["dots"] == expected["tensor"][0]
