"""Which kernel computes an LM's causal attention (train.attention), chosen once per run.

The LM search grows transformers towards a billion weights at windows of 1,024 tokens. An unfused
attention holds every query's T x T scores (and their softmax, for the backward pass) in device
memory: at 64 windows of 1,024, 16 heads and bfloat16 that is 2 GiB per layer. A fused kernel
(flash attention: cuDNN's under JAX on NVIDIA GPUs of compute capability 8.0 and later, in
bfloat16 or float16) holds a tile at a time and recomputes the scores in its backward pass. Keras'
MultiHeadAttention calls `keras.ops.dot_product_attention(..., is_causal=True)` either way; left to
guess (flash_attention None), its JAX backend tries cuDNN and falls back to the unfused kernel with
no more than a log line. So the run chooses, and says what it chose:

- each worker's peak record says whether cuDNN's fused causal attention really runs on its device
  (`fused_attention_runs`: a small bfloat16 attention through `jax.nn.dot_product_attention(
  implementation="cudnn")`, the kernel Keras asks for; on a CPU, a stand-in GPU node's included, it
  cannot run);
- `resolve_attention`: train.attention auto is "fused" when the run trains on JAX in bfloat16 or
  float16 and every worker's device ran the fused kernel, "unfused" otherwise; "fused" asked for
  where it cannot run is refused in one line; "unfused" is always possible;
- the choice is stored in the run's config in place of auto, with train.precision's (aiperf.train.
  auto.resolved_settings), so every trial builds its attention with it (aiperf.arch.keras_layers.
  causal_self_attention) and `aiperf show` says it. Like train.backend it is an implementation of the
  same training: out of the workload hash, never a deviation (aiperf.results.division).

The counted operations are the model's, never the kernel's (aiperf.ops.transformer_costs): both kernels
count the whole T x T, as MLPerf and PaLM's MFU count attention.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from aiperf.errors import UserError

if TYPE_CHECKING:
    from aiperf.config import BenchmarkConfig

AUTO, FUSED, UNFUSED = "auto", "fused", "unfused"  # as arch.keras_layers.ATTENTION_KERNELS
SETTING = "train.attention"
# The backend whose fused attention a worker's probe checks: GPU runs train on JAX (config.gpu_backend).
FUSED_BACKEND = "jax"
# cuDNN's flash attention computes in 16-bit floats only.
FUSED_PRECISIONS = ("mixed_bfloat16", "mixed_float16")
# The peak record's field that says whether the worker's device ran the fused kernel.
PROBED = "fused_attention"
# The probe's shape (batch, positions, heads, head width): small, and within cuDNN's limits.
PROBE_SHAPE = (1, 128, 2, 64)


def fused_attention_runs() -> bool:
    """Whether cuDNN's fused causal attention runs on this process's first JAX device: a small
    bfloat16 attention through `jax.nn.dot_product_attention(implementation="cudnn")`, which raises
    where cuDNN, a GPU of compute capability 8.0 or later, or the kernel is missing. False without
    JAX as the Keras backend (the other backends' GPU runs are not fused here)."""
    import keras

    if keras.backend.backend() != FUSED_BACKEND:
        return False
    import jax
    import jax.numpy as jnp

    if jax.devices()[0].platform not in ("gpu", "cuda"):
        return False  # cuDNN's kernels are NVIDIA's: a CPU (or a stand-in GPU node) has none
    q = jnp.ones(PROBE_SHAPE, dtype=jnp.bfloat16)
    try:
        out = jax.nn.dot_product_attention(q, q, q, is_causal=True, implementation="cudnn")
        jax.block_until_ready(out)
    except Exception:  # any reason cuDNN cannot run it: the answer is no
        return False
    return True


def fused_problem(
    backend: str, precision: str, peaks: Sequence[Mapping[str, Any]] | None
) -> str | None:
    """Why the run cannot take the fused kernel (None: it can), from its backend, its resolved
    precision and its workers' peak records (each with PROBED, from `fused_attention_runs`)."""
    if backend != FUSED_BACKEND:
        return f"train.backend is {backend}; the fused kernel is cuDNN's under jax"
    if precision not in FUSED_PRECISIONS:
        return f"train.precision is {precision}; cuDNN's fused attention computes in 16 bits"
    if not peaks:
        return "no worker's device was probed"
    if not all(peak.get(PROBED) for peak in peaks):
        return (
            "a worker's device did not run cuDNN's fused attention (it needs an NVIDIA GPU of "
            "compute capability 8.0 or later and cuDNN)"
        )
    return None


def resolve_attention(
    setting: str,
    *,
    backend: str,
    precision: str,
    peaks: Sequence[Mapping[str, Any]] | None,
) -> str:
    """The kernel the run's trials use: auto is fused where `fused_problem` finds nothing in the
    way, unfused elsewhere; fused asked for where it cannot run is the user's mistake, said in one
    line; unfused stands anywhere."""
    problem = fused_problem(backend, precision, peaks)
    if setting == AUTO:
        return UNFUSED if problem else FUSED
    if setting == FUSED and problem is not None:
        raise UserError(
            f"train.attention fused cannot run on this run's workers: {problem}; set "
            "train.attention auto (fused wherever it runs) or unfused"
        )
    return setting


def attention_settings(
    config: BenchmarkConfig, peaks: Sequence[Mapping[str, Any]] | None, precision: str
) -> dict[str, str]:
    """{"train.attention": kernel} for an LM run (token data) whose setting is auto, resolved with
    its resolved `precision`; {} for an image run (no attention) or a kernel given (checked here:
    fused where it cannot run is refused)."""
    from aiperf.config.workload import TOKEN_KINDS

    if config.data.kind not in TOKEN_KINDS or config.train.trainer != "keras":
        return {}
    chosen = resolve_attention(
        config.train.attention,
        backend=config.train.backend,
        precision=precision,
        peaks=peaks,
    )
    return {SETTING: chosen} if config.train.attention == AUTO else {}
