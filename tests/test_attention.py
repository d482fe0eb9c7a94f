"""The LM's attention kernel (train.attention): chosen per run, recorded, the same arithmetic.

Which kernel a run takes is decided by pure functions (aiperf.train.attention) from the run's
backend, precision and each worker's peak record, tested here for GPUs no test machine has; the
probe that fills the record runs for real on this CPU (where cuDNN's kernel cannot run). The layer
(aiperf.arch.keras_layers.causal_self_attention) runs for real: its unfused kernel against Keras'
MultiHeadAttention on the same weights, and its fused kernel shown to reach the backend (which
refuses it on a CPU rather than falling back). Nothing trains.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from aiperf.arch.keras_layers import causal_self_attention
from aiperf.arch.transformer import attention_kernel, build_transformer, transformer_seed
from aiperf.config import BenchmarkConfig, load_config
from aiperf.errors import UserError
from aiperf.ops import count_all
from aiperf.report.summary import training_text
from aiperf.results.division import CLOSED, classify, config_hash
from aiperf.rules import load_ruleset
from aiperf.train.attention import PROBED, fused_attention_runs, resolve_attention
from aiperf.train.auto import DeviceFacts, resolved_settings
from aiperf.train.peak import compute_dtype

F32, BF16, F16 = "float32", "mixed_bfloat16", "mixed_float16"
H100 = DeviceFacts(accelerator=True, gpus=1, compute_capability=(9, 0), memory_bytes=80 * 2**30)


def peak(fused: bool, facts: DeviceFacts = H100) -> dict:
    """A GPU worker's peak record as peak_on_worker returns it with candidates: its probes, its
    device's facts and whether cuDNN's fused attention ran on it."""
    rates = {F32: 5e13, BF16: 7e14}
    return {
        "worker": "w0",
        "flops": rates[F32],
        "dtype": "float32",
        "device": "GPU test",
        "seconds": 0.2,
        "probes": {
            p: {"flops": r, "dtype": compute_dtype(p), "seconds": 0.2} for p, r in rates.items()
        },
        "device_facts": facts.to_dict(),
        PROBED: fused,
    }


def lm(**overrides) -> BenchmarkConfig:
    return load_config("lm", workers=1, overrides=overrides, runs_here=False)


# --- the kernel chosen per platform --------------------------------------------------------------


def test_auto_is_fused_only_on_jax_in_16_bits_where_every_worker_ran_cudnn():
    gpus = [peak(True), peak(True)]
    assert resolve_attention("auto", backend="jax", precision=BF16, peaks=gpus) == "fused"
    assert resolve_attention("auto", backend="jax", precision=F16, peaks=gpus) == "fused"
    assert resolve_attention("auto", backend="jax", precision=F32, peaks=gpus) == "unfused"
    assert resolve_attention("auto", backend="tensorflow", precision=BF16, peaks=gpus) == "unfused"
    # A stand-in GPU node (CPU devices), or one worker whose cuDNN did not run the kernel.
    assert (
        resolve_attention("auto", backend="jax", precision=BF16, peaks=[peak(True), peak(False)])
        == "unfused"
    )
    assert resolve_attention("auto", backend="jax", precision=BF16, peaks=None) == "unfused"
    # Given: unfused stands anywhere; fused where it cannot run is refused in one line.
    assert resolve_attention("unfused", backend="jax", precision=BF16, peaks=gpus) == "unfused"
    assert resolve_attention("fused", backend="jax", precision=BF16, peaks=gpus) == "fused"
    with pytest.raises(UserError, match="train.attention fused cannot run .*16 bits.*unfused"):
        resolve_attention("fused", backend="jax", precision=F32, peaks=gpus)


def test_the_probe_says_no_on_this_cpu():
    """cuDNN's kernel cannot run here (nor on the stand-in GPU node's CPU devices): the probe says
    so, rather than raising or guessing."""
    assert fused_attention_runs() is False


def test_the_run_records_its_kernel_in_its_config_without_changing_hash_or_division():
    """The lm profile (jax, precision auto) on H100s whose cuDNN ran the kernel stores fused with
    bfloat16; on a stand-in node (probe false) unfused. Either is the same workload, closed."""
    config = lm()
    on_gpus = resolved_settings(config, [peak(True)])
    assert on_gpus["train.precision"] == BF16 and on_gpus["train.attention"] == "fused"
    on_standin = resolved_settings(config, [peak(False)])
    assert on_standin["train.attention"] == "unfused"
    assert (
        resolved_settings(lm(**{"train.attention": "unfused"}), [peak(True)]).get(
            "train.attention"
        )
        is None
    ), "a kernel given is kept as given"
    image = load_config("imagenet", workers=1, overrides={"data.source": "/d"}, runs_here=False)
    assert "train.attention" not in resolved_settings(image, [peak(True)]), "no attention"

    ruleset = load_ruleset(config.ruleset or "")
    for settled in (on_gpus, on_standin):
        raw = config.model_dump()
        raw["train"]["precision"] = settled["train.precision"]
        raw["train"]["attention"] = settled["train.attention"]
        stored = BenchmarkConfig.model_validate(raw)
        division = classify(stored)
        assert division.name == CLOSED, division.deviations
        bf16 = BenchmarkConfig.model_validate(
            {**raw, "train": {**raw["train"], "attention": "auto"}}
        )
        assert config_hash(stored, ruleset) == config_hash(bf16, ruleset)


def test_show_says_the_kernel_of_an_lm_run(monkeypatch):
    class Run:  # the fields training_text reads from a RunRecord
        precision, backend, jit_compile = BF16, "jax", True
        config = {"train": {"attention": "fused"}}

    assert training_text(Run()) == "mixed_bfloat16 on jax, jit_compile on, attention fused"  # type: ignore[arg-type]
    Run.config = {"train": {}}  # an image run, or one recorded before the choice
    assert training_text(Run()) == "mixed_bfloat16 on jax, jit_compile on"  # type: ignore[arg-type]


# --- the layer: same weights, same numbers, the kernel it is told ---------------------------------


def _pair(attention: str) -> tuple[keras.layers.Layer, keras.layers.Layer, np.ndarray]:
    """Keras' MultiHeadAttention and a causal_self_attention of `attention` with the same weights,
    and an input of 2 windows of 16 positions, width 32."""
    x = np.random.default_rng(0).normal(size=(2, 16, 32)).astype("float32")
    plain = keras.layers.MultiHeadAttention(num_heads=4, key_dim=8)
    ours = causal_self_attention(4, 8, attention=attention)
    plain(x, x, use_causal_mask=True)
    ours(x, x, use_causal_mask=True)
    ours.set_weights(plain.get_weights())
    return plain, ours, x


def test_unfused_equals_multi_head_attention_and_its_materialised_scores():
    plain, ours, x = _pair("unfused")
    got = keras.ops.convert_to_numpy(ours(x, x, use_causal_mask=True))
    today = keras.ops.convert_to_numpy(plain(x, x, use_causal_mask=True))
    # return_attention_scores takes MultiHeadAttention's own path: T x T scores, masked softmax.
    scored, _ = plain(x, x, use_causal_mask=True, return_attention_scores=True)
    np.testing.assert_allclose(got, today, atol=1e-5)
    np.testing.assert_allclose(got, keras.ops.convert_to_numpy(scored), atol=1e-5)
    assert [w.path.split("/", 1)[1] for w in ours.weights] == [
        w.path.split("/", 1)[1] for w in plain.weights
    ], "the same weights by the same paths"


def test_fused_reaches_the_backend_which_refuses_it_on_a_cpu():
    """MultiHeadAttention(flash_attention=False) would guess (Keras keeps False or the global
    setting); causal_self_attention passes its kernel through: fused on a CPU is an error from the
    backend (TensorFlow has no flash kernel; JAX finds no cuDNN), never a silent fallback."""
    _, _, x = _pair("unfused")
    fused = causal_self_attention(4, 8, attention="fused")
    with pytest.raises((RuntimeError, ValueError, NotImplementedError)):
        fused(x, x, use_causal_mask=True)
    with pytest.raises(ValueError, match="attention must be one of auto, fused, unfused"):
        causal_self_attention(4, 8, attention="flash")


# --- the model: counted the same whatever its kernel, its weights files as before -------------------

# count_all of lm-tiny, and of a SwiGLU, RMS-norm, untied variant, measured on d62c594 (before the
# kernel was chosen): (train, eval) per sequence, per convention.
COUNTED_BEFORE = {
    "gelu": {"aiperf": (51210164, 17407488), "tensor": (50331648, 16777216)},
    "swiglu": {"aiperf": (63864244, 21573120), "tensor": (62914560, 20971520)},
}


@pytest.mark.parametrize("attention", ["auto", "fused", "unfused"])
def test_operation_counts_are_the_models_not_the_kernels(attention):
    for name, changes in (
        ("gelu", {}),
        ("swiglu", {"activation": "swiglu", "norm": "rms", "tied_head": False}),
    ):
        spec = transformer_seed("lm-tiny", **changes)
        model = build_transformer(spec, seed=0, attention=attention)
        counts = count_all(model)
        got = {k: (v.train_per_sample, v.eval_per_sample) for k, v in counts.items()}
        assert got == COUNTED_BEFORE[name]
        assert model.count_params() == spec.param_count


def test_a_head_too_wide_for_cudnn_is_left_to_keras():
    spec = transformer_seed("lm-tiny")  # key_dim 16
    assert attention_kernel(spec, "fused") == "fused"
    assert attention_kernel(spec, "unfused") == "unfused"
    wide = transformer_seed("lm-tiny", d_model=1024, heads=4)  # key_dim 256
    assert attention_kernel(wide, "fused") == "auto"


def test_weights_kept_before_the_kernel_was_chosen_still_load(tmp_path):
    """A weights file names an attention's weights by its class (layers/multi_head_attention/...),
    as earlier runs' kept weights have them: the model built with a chosen kernel reads them back
    (verify's re-measurement) and computes what the saving model computed."""
    import h5py

    spec = transformer_seed("lm-tiny")
    saved = build_transformer(spec, seed=3, attention="auto")
    path = tmp_path / "trial-0.weights.h5"
    saved.save_weights(str(path))
    with h5py.File(path) as kept:
        assert "layers/multi_head_attention/query_dense/vars/0" in kept
    loaded = build_transformer(spec, seed=4, attention="unfused")
    loaded.load_weights(str(path))
    tokens = np.arange(2 * spec.seq_len).reshape(2, spec.seq_len) % spec.vocab_size
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(loaded(tokens)),
        keras.ops.convert_to_numpy(saved(tokens)),
        atol=1e-5,
    )
