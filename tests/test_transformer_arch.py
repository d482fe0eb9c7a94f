"""Transformers as architectures (issue 35): the spec's validation and JSON round-trip, the builder
(shape, causality, float32 logits, weights as counted, stable names, on TensorFlow and JAX), the
growth operators (every candidate builds; deepen, widen_mlp and widen_heads keep the parent's
function), history replay, limits, the distance and the seeds."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from aiperf.arch import TransformerSpec, build_transformer, grow, transformer_seed
from aiperf.arch.morph import Morphism
from aiperf.arch.transformer import ACTIVATIONS, InvalidTransformer
from aiperf.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
TINY = {"vocab_size": 61, "seq_len": 16, "layers": 2, "d_model": 32, "heads": 4, "mlp_width": 64}


def tiny(**changes) -> TransformerSpec:
    return TransformerSpec(**{**TINY, **changes})


def tokens(spec: TransformerSpec, batch: int = 2, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, spec.vocab_size, (batch, spec.seq_len)).astype("int32")


# --- the spec ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"layers": 0}, "layers"),
        ({"d_model": -8}, "d_model"),
        ({"heads": 2.0}, "heads"),
        ({"vocab_size": 1}, "vocab_size"),
        ({"seq_len": True}, "seq_len"),
        ({"heads": 3}, "heads (3) must divide d_model (32)"),
        ({"head_dim": 0}, "head_dim"),
        ({"norm": "batch"}, "norm"),
        ({"positions": "sinusoidal"}, "positions"),
        ({"tied_head": "yes"}, "tied_head"),
        ({"activation": "swish"}, "activation must be one of gelu, relu, swiglu"),
        ({"dropout": 1.0}, "dropout"),
        ({"history": ("deepen(at=0)", 3)}, "history"),
    ],
)
def test_a_bad_value_is_one_message_naming_it(changes, field):
    with pytest.raises(InvalidTransformer) as caught:
        tiny(**changes)
    message = str(caught.value)
    assert field in message and "; " not in message, message
    assert isinstance(caught.value, UserError) and isinstance(caught.value, ValueError)


def test_every_problem_is_reported_at_once():
    with pytest.raises(InvalidTransformer) as caught:
        tiny(layers=0, norm="batch", dropout=-0.1)
    assert str(caught.value).count("; ") == 2


def test_rotary_positions_are_refused_with_the_reason():
    with pytest.raises(InvalidTransformer, match="rotary.*not supported.*use 'learned'"):
        tiny(positions="rotary")


def test_heads_need_not_divide_d_model_when_head_dim_is_given():
    spec = tiny(heads=3, head_dim=16)
    assert spec.key_dim == 16 and tiny().key_dim == 8


def test_json_round_trip_keeps_every_field_and_the_history():
    spec = grow.widen_heads(grow.deepen(tiny(norm="rms", tied_head=False, dropout=0.1), 1), 2)
    again = TransformerSpec.from_json(spec.to_json())
    assert again == spec and again.to_json() == spec.to_json()
    assert again.history == ("deepen(at=1)", "widen_heads(add=2)") and again.head_dim == 8


def test_the_architecture_key_ignores_name_history_and_how_head_dim_is_said():
    spec = tiny()
    assert tiny(name="other").architecture_key() == spec.architecture_key()
    assert grow.deepen(spec, 0).architecture_key() == grow.deepen(spec, 2).architecture_key()
    assert tiny(head_dim=8).architecture_key() == spec.architecture_key()
    assert grow.deepen(spec, 0).architecture_key() != spec.architecture_key()
    assert tiny(norm="rms").architecture_key() != spec.architecture_key()


def test_a_bad_spec_says_what_is_wrong():
    for text, reason in [
        (json.dumps({**TINY, "depth": 3}), "unknown fields depth"),
        (json.dumps({**TINY, "format": "aiperf-network/1"}), "format"),
        (json.dumps({"vocab_size": 256}), "missing"),
        (json.dumps({**TINY, "layers": "two"}), "layers must be a positive integer"),
        (json.dumps({**TINY, "history": "deepen(at=0)"}), "history must be a list"),
        ("[1, 2]", ""),  # not an object: refused, in whatever words json gives
    ]:
        with pytest.raises((ValueError, TypeError, AttributeError), match=reason):
            TransformerSpec.from_json(text)


def test_the_seeds():
    tiny_seed, gpt2 = transformer_seed("lm-tiny"), transformer_seed("gpt2-small")
    assert (tiny_seed.vocab_size, tiny_seed.layers, tiny_seed.d_model) == (256, 2, 64)
    assert (gpt2.layers, gpt2.d_model, gpt2.heads, gpt2.mlp_width, gpt2.seq_len) == (
        12,
        768,
        12,
        3072,
        1024,
    )
    # GPT-2 small with its own vocabulary and tied head has 124,439,808 weights.
    assert transformer_seed("gpt2-small", vocab_size=50257).param_count == 124_439_808
    with pytest.raises(UserError, match="unknown transformer seed 'gpt5'.*lm-tiny"):
        transformer_seed("gpt5")


# --- the builder ------------------------------------------------------------------------------


@pytest.mark.parametrize("tied, norm", [(True, "layer"), (False, "rms")])
def test_the_model_maps_tokens_to_logits_with_the_weights_counted(tied, norm):
    spec = tiny(tied_head=tied, norm=norm, dropout=0.1)
    model = build_transformer(spec, seed=3)
    logits = np.array(model(tokens(spec, batch=3)))
    assert logits.shape == (3, spec.seq_len, spec.vocab_size) and np.isfinite(logits).all()
    assert model.count_params() == spec.param_count
    kinds = {type(layer).__name__ for layer in model.layers}
    assert {"MultiHeadAttention", "PositionEmbedding", "Dense", "Add"} <= kinds
    assert ("ReversibleEmbedding" if tied else "Embedding") in kinds
    assert ("LayerNormalization" if norm == "layer" else "RMSNormalization") in kinds


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_every_activation_builds_with_the_weights_counted(activation):
    spec = tiny(activation=activation, layers=1)
    model = build_transformer(spec, seed=3)
    assert model.count_params() == spec.param_count
    names = [layer.name for layer in model.layers]
    assert [n for n in names if n.startswith("block0_")] == spec.block_names(0)
    up = model.get_layer("block0_mlp_up")
    assert np.isfinite(np.array(model(tokens(spec)))).all()
    if activation != "swiglu":
        assert up.activation.__name__ == activation and "block0_mlp_gate" not in names
        return
    # swiglu: down(silu(gate(y)) * up(y)), the gate's weights counted as the up projection's
    gate, multiply = model.get_layer("block0_mlp_gate"), model.get_layer("block0_mlp_multiply")
    assert (gate.activation.__name__, up.activation.__name__) == ("silu", "linear")
    assert type(multiply).__name__ == "Multiply"
    assert spec.param_count - tiny(layers=1).param_count == (32 + 1) * 64  # one more Dense(64)
    assert [n.operation.name for n in multiply._inbound_nodes[0].parent_nodes] == [
        "block0_mlp_gate",
        "block0_mlp_up",
    ]


def test_a_swiglu_mlp_computes_down_of_silu_gate_times_up():
    spec = tiny(activation="swiglu", layers=1)
    model = build_transformer(spec, seed=4)
    probe = keras.Model(model.input, model.get_layer("block0_norm2").output)
    y = np.array(probe(tokens(spec)))
    kernel = {
        n: np.array(model.get_layer(f"block0_mlp_{n}").kernel.numpy())
        for n in ("gate", "up", "down")
    }
    bias = {
        n: np.array(model.get_layer(f"block0_mlp_{n}").bias.numpy())
        for n in ("gate", "up", "down")
    }
    gate = y @ kernel["gate"] + bias["gate"]
    hidden = gate / (1 + np.exp(-gate)) * (y @ kernel["up"] + bias["up"])
    expected = hidden @ kernel["down"] + bias["down"]
    mlp = keras.Model(model.input, model.get_layer("block0_mlp_down").output)
    np.testing.assert_allclose(np.array(mlp(tokens(spec))), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("tied, activation", [(True, "gelu"), (False, "gelu"), (True, "swiglu")])
def test_a_saved_model_loads_back_computing_the_same(tmp_path, tied, activation):
    spec = tiny(tied_head=tied, layers=1, activation=activation)
    model = build_transformer(spec, seed=2)
    path = tmp_path / "lm.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    x = tokens(spec)
    np.testing.assert_allclose(np.array(loaded(x)), np.array(model(x)), atol=1e-6)
    assert [layer.name for layer in loaded.layers] == [layer.name for layer in model.layers]


def test_two_builds_of_a_spec_are_the_same_layer_for_layer():
    spec = tiny()
    a, b = build_transformer(spec, seed=5), build_transformer(spec, seed=5)
    assert [layer.name for layer in a.layers] == [layer.name for layer in b.layers]
    assert "block1_mlp_down" in [layer.name for layer in a.layers]
    for va, vb in zip(a.weights, b.weights, strict=True):
        assert va.path == vb.path
        np.testing.assert_array_equal(np.array(va.numpy()), np.array(vb.numpy()))
    other = build_transformer(spec, seed=6)
    assert not np.array_equal(np.array(a.weights[0].numpy()), np.array(other.weights[0].numpy()))


def test_the_model_is_causal():
    spec = tiny()
    model = build_transformer(spec, seed=1)
    x = tokens(spec)
    t = 6
    changed = x.copy()
    changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % spec.vocab_size
    before, after = np.array(model(x)), np.array(model(changed))
    np.testing.assert_allclose(after[:, : t + 1], before[:, : t + 1], atol=1e-6)
    assert np.abs(after[:, t + 1] - before[:, t + 1]).max() > 1e-4  # the test can tell


@pytest.mark.parametrize("tied", [True, False])
def test_logits_are_float32_under_a_mixed_policy(tied):
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    try:
        spec = tiny(tied_head=tied)
        model = build_transformer(spec, seed=0)
        assert model.get_layer("block0_mlp_up").compute_dtype == "bfloat16"
        assert model.output.dtype == "float32"
        assert keras.backend.standardize_dtype(model(tokens(spec)).dtype) == "float32"
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


# --- growth -----------------------------------------------------------------------------------


def test_every_candidate_is_a_valid_spec_one_step_on():
    spec = tiny()
    children = grow.candidates(spec, grow.Limits())
    operators = {Morphism.parse(c.history[-1]).operator for c in children}
    assert operators == set(grow.OPERATORS)
    assert len(children) == (spec.layers + 1) + 1 + 1 + 1  # deepen anywhere; each widening doubles
    for child in children:
        assert child.history[:-1] == spec.history
        assert grow.apply(spec, child.history[-1]) == child


@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
@pytest.mark.parametrize("operator", grow.OPERATORS)
def test_grown_children_build_and_keep_the_parents_function(operator, activation):
    parent_spec = tiny(tied_head=operator != "widen_heads", activation=activation)
    parent = build_transformer(parent_spec, seed=1)
    x = tokens(parent_spec, seed=4)
    expected = np.array(parent(x))
    for child_spec in grow.candidates(parent_spec, grow.Limits(), (operator,)):
        child = grow.grow_weights(parent, parent_spec, child_spec, seed=2)
        assert child.count_params() == child_spec.param_count
        got = np.array(child(x))
        assert got.shape == expected.shape
        difference = np.abs(got - expected).max()
        assert difference < 1e-5, (child_spec.history[-1], difference)


@pytest.mark.parametrize(
    "changes",
    [
        {"tied_head": True},
        {"tied_head": False, "norm": "rms"},
        {"head_dim": 8, "heads": 3, "activation": "swiglu"},  # the heads keep their width
    ],
)
def test_widening_the_model_keeps_the_function_and_lets_the_copies_part(changes):
    """widen_model duplicates the stream (aiperf/arch/grow.py): the child computes the parent's
    function under either norm, either head and whether or not its heads widen with it; the copies
    of a reader's rows are different shares of the parent's, so they train apart."""
    parent_spec = tiny(**changes)
    parent = build_transformer(parent_spec, seed=1)
    x = tokens(parent_spec, seed=4)
    child_spec = grow.widen_model(parent_spec, 2)
    child = grow.grow_weights(parent, parent_spec, child_spec, seed=2)
    difference = np.abs(np.array(child(x)) - np.array(parent(x))).max()
    assert difference < 1e-5, difference
    query = np.array(child.get_layer("block0_attention").query_dense.kernel.numpy())
    d = parent_spec.d_model
    assert not np.allclose(query[:d], query[d:]), "the two copies' shares are drawn apart"


@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
def test_deepening_puts_the_new_block_where_asked(activation):
    parent_spec = tiny(activation=activation)
    parent = build_transformer(parent_spec, seed=1)
    child = grow.grow_weights(parent, parent_spec, grow.deepen(parent_spec, 1), seed=2)
    parts = ["mlp_up", "mlp_gate"] if activation == "swiglu" else ["mlp_up"]
    for part in parts:
        for name, source in [
            (f"block0_{part}", f"block0_{part}"),
            (f"block2_{part}", f"block1_{part}"),
        ]:
            np.testing.assert_array_equal(
                np.array(child.get_layer(name).kernel.numpy()),
                np.array(parent.get_layer(source).kernel.numpy()),
            )
        assert np.array(child.get_layer(f"block1_{part}").kernel.numpy()).any()
    assert not np.array(child.get_layer("block1_mlp_down").kernel.numpy()).any()


def test_widening_a_swiglu_mlp_keeps_gate_and_up_and_zeroes_the_new_rows_of_down():
    parent_spec = tiny(activation="swiglu", layers=1)
    parent = build_transformer(parent_spec, seed=1)
    child = grow.grow_weights(parent, parent_spec, grow.widen_mlp(parent_spec), seed=2)
    width = parent_spec.mlp_width
    for part in ("gate", "up"):
        old = np.array(parent.get_layer(f"block0_mlp_{part}").kernel.numpy())
        new = np.array(child.get_layer(f"block0_mlp_{part}").kernel.numpy())
        assert new.shape == (32, 2 * width)
        np.testing.assert_array_equal(new[:, :width], old)
        assert np.abs(new[:, width:]).max() > 0  # fresh columns, not zero
    down = np.array(child.get_layer("block0_mlp_down").kernel.numpy())
    assert down.shape == (2 * width, 32) and not down[width:].any()
    np.testing.assert_array_equal(down[:width], parent.get_layer("block0_mlp_down").kernel.numpy())


def test_grow_weights_refuses_a_child_that_is_not_one_step_on():
    parent_spec = tiny()
    parent = build_transformer(parent_spec, seed=1)
    two_steps = grow.widen_mlp(grow.deepen(parent_spec, 0))
    with pytest.raises(ValueError, match="not one growth step"):
        grow.grow_weights(parent, parent_spec, two_steps, seed=2)
    with pytest.raises(ValueError, match="records no growth"):
        grow.grow_weights(parent, parent_spec, tiny(mlp_width=128), seed=2)


def test_history_replays_to_the_same_spec():
    seed = tiny()
    rng, spec = random.Random(7), seed
    for _ in range(6):
        spec = rng.choice(grow.candidates(spec, grow.Limits(max_params=2_000_000)))
    assert len(spec.history) == 6
    assert grow.replay(seed, spec.history) == spec
    assert grow.replay(seed, list(TransformerSpec.from_json(spec.to_json()).history)) == spec
    with pytest.raises(ValueError, match="unknown growth step 'shrink'"):
        grow.apply(seed, "shrink(factor=2)")
    with pytest.raises(ValueError, match="inserts a block at 0 .. 2"):
        grow.deepen(seed, 3)


def test_candidates_stay_within_the_limits():
    spec = tiny()
    deep_enough = grow.Limits(max_layers=spec.layers)
    children = grow.candidates(spec, deep_enough)
    assert children and all(c.layers == spec.layers for c in children)
    tight = grow.Limits(max_params=spec.param_count + 8_000)
    assert all(c.param_count <= tight.max_params for c in grow.candidates(spec, tight))
    full = grow.Limits(max_params=spec.param_count)
    assert grow.candidates(spec, full) == []


def test_the_distance_moves_about_one_a_step():
    spec = tiny()
    assert grow.distance(spec, spec) == 0
    assert grow.distance(spec, grow.deepen(spec, 0)) == 1
    assert grow.distance(spec, grow.widen_mlp(spec)) == 1
    assert grow.distance(spec, grow.widen_heads(spec, 4)) == 1
    assert grow.distance(spec, grow.widen_model(spec)) == 2  # the heads widen with d_model
    far = grow.widen_mlp(grow.deepen(grow.deepen(spec, 0), 0))
    assert grow.distance(spec, far) == grow.distance(far, spec) == 3
    assert grow.distance(spec, tiny(norm="rms", activation="relu")) == 1
    # Every other activation is half a step away: one-hot over ACTIVATIONS, 0.25 each.
    assert grow.distance(spec, tiny(activation="swiglu")) == 0.5
    assert grow.distance(tiny(activation="relu"), tiny(activation="swiglu")) == 0.5
    assert len(grow.describe(spec)) == 7 + len(ACTIVATIONS)
    specs = [spec, far, *grow.candidates(spec, grow.Limits())]
    features = [grow.describe(s) for s in specs]
    matrix = grow.distance_matrix(features, features[:3])
    assert matrix.shape == (len(specs), 3)
    for i, a in enumerate(specs):
        for j, b in enumerate(specs[:3]):
            assert matrix[i, j] == pytest.approx(grow.distance(a, b))
    assert grow.distance_matrix([], features).shape == (0, len(specs))


# --- the package and the other backend --------------------------------------------------------


def test_the_spec_loads_without_a_framework():
    code = (
        "import sys; from aiperf.arch import TransformerSpec, transformer_seed; "
        "from aiperf.arch import grow; "
        "grow.candidates(transformer_seed('lm-tiny'), grow.Limits()); "
        "print('keras' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


JAX_SCRIPT = r"""
import json
import numpy as np
import keras
from aiperf.arch import TransformerSpec, build_transformer, grow_weights
from aiperf.arch.grow import deepen

spec = TransformerSpec(vocab_size=61, seq_len=16, layers=1, d_model=32, heads=4, mlp_width=64)
model = build_transformer(spec, seed=1)
x = np.random.default_rng(0).integers(0, 61, (2, 16)).astype("int32")
logits = np.array(model(x))
changed = x.copy()
changed[:, 9:] = (changed[:, 9:] + 1) % 61
causal = float(np.abs(np.array(model(changed))[:, :9] - logits[:, :9]).max())
again = build_transformer(spec, seed=1)
same = all(np.array_equal(np.array(a.numpy()), np.array(b.numpy()))
           for a, b in zip(model.weights, again.weights))
child = grow_weights(model, spec, deepen(spec, 1), seed=2)
grown = float(np.abs(np.array(child(x)) - logits).max())
print(json.dumps({"backend": keras.backend.backend(), "shape": list(logits.shape),
                  "causal": causal, "same": same, "grown": grown,
                  "params": [model.count_params(), spec.param_count]}))
"""


@pytest.mark.skipif(
    importlib.util.find_spec("jax") is None,
    reason="JAX is not installed (pip install -e '.[jax]')",
)
def test_the_builder_and_growth_work_on_jax():
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", JAX_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["backend"] == "jax"
    assert found["shape"] == [2, 16, 61]
    assert found["causal"] < 1e-6 and found["same"] is True
    assert found["params"][0] == found["params"][1]
    assert found["grown"] < 1e-5
