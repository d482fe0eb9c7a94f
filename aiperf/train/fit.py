"""Fit before paying: what one training step needs of each device's memory, read from XLA before
the step runs, against what the device has.

A trial that does not fit its devices used to compile, then end out_of_memory: minutes of a GPU
node spent on a step that could never run. XLA knows what a compiled step needs before it runs
(`jax.jit(f).lower(...).compile().memory_analysis()`), so the trial asks it: `step_memory` lowers
and compiles the very function Keras' JAX trainer will call in `fit` (the jitted train step that
`model.make_train_function()` keeps on the model) from abstract shapes (jax.ShapeDtypeStruct, each
with the sharding of the variable or batch it stands for under a distribution, none without one),
so the check costs a compile, not a step. JAX keeps that executable in its compilation cache, and
`fit` then calls the same jitted function with arrays of the same shapes, types and shardings, so
the trial does not compile its step twice (docs/performance.md, "Fit before paying"). The model is
compiled by one builder (`trainable`, with a `StepRecipe`) wherever a step is read: the trial, the
seed's check before the window and the GPU check read the same program.

Under a data-parallel distribution the program XLA compiles is the per-device (SPMD-partitioned)
one, so its figures are each device's: the arguments (the replicated state and one device's share
of the batch), the outputs, the temporaries, the code, less what the outputs alias in the donated
arguments (Keras donates the step's state: the new state is written over the old).

What a device has is what JAX's allocator may take of it: the allocator's own limit where the
device reports one (a GPU's memory_stats()["bytes_limit"], which already applies JAX's memory
share), else nvidia-smi's memory.total of the smallest GPU times that share (XLA_PYTHON_CLIENT_MEM_
FRACTION, JAX's default 0.75): the stand-in node, whose devices are the CPU's, declares its memory
that way. The ruleset's fit rule (aiperf.rules.FitRule) keeps a headroom of it free for what XLA's
analysis does not see (the allocator's fragmentation, the feed's buffers on the device).

Only a JAX run on accelerators (aiperf.train.peak.device) with jit checks: on a CPU nothing changes
and nothing is paid.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, fields
from typing import Any

from aiperf.rules import DEFAULT_RULESET, FitRule, load_ruleset
from aiperf.train.seed import SeedModel

MEM_FRACTION_ENV = "XLA_PYTHON_CLIENT_MEM_FRACTION"  # what JAX reads as it starts
JAX_DEFAULT_FRACTION = 0.75  # JAX's share of a GPU where the variable is unset
MIB = 2**20
# A worker's peak record (runs.worker_peaks) keeps its seed's fit figures under this key:
# {"fits", "checked": [StepMemory dicts]} (aiperf.lifecycle.prepare.record_seed_fit).
SEED_FIT = "seed_fit"


@dataclass(frozen=True)
class StepMemory:
    """What one training step needs of each device, as XLA planned it, and whether it fits.

    `bytes_needed`: per device, arguments + outputs - aliased + temporaries + generated code.
    `bytes_available`: per device, what the check compares against (the allocator's share, less
    the rule's headroom); None where the device's memory is unknown (then `fits` is true: nothing
    says otherwise)."""

    bytes_needed: int
    bytes_available: int | None
    fits: bool
    global_batch: int
    devices: int
    precision: str
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    code_bytes: int
    device_bytes: int | None  # the allocator's share of one device, before the headroom
    headroom: float
    compile_s: float  # the lowering and compile this check paid (the trial's own step compile)

    def to_dict(self) -> dict[str, Any]:
        """As JSON stores it."""
        return asdict(self)

    def line(self) -> str:
        """One line: what the step needs per device against what it may have."""
        per_device = self.global_batch // max(1, self.devices)
        needed = f"{self.bytes_needed / MIB:,.0f} MiB"
        where = f"batch {per_device} per device" + (
            f" on {self.devices} devices" if self.devices > 1 else ""
        )
        if self.bytes_available is None:
            return f"the step needs {needed} per device at {where} (device memory unknown)"
        verb = "fits in" if self.fits else "does not fit in"
        return (
            f"the step needs {needed} per device at {where} in {self.precision}: it {verb} "
            f"{self.bytes_available / MIB:,.0f} MiB ({self.headroom:.0%} headroom kept of "
            f"{(self.device_bytes or 0) / MIB:,.0f} MiB)"
        )


def memory_share() -> float:
    """JAX's share of each GPU's memory in this process: XLA_PYTHON_CLIENT_MEM_FRACTION as JAX read
    it when it started (the worker's environment sets it), JAX's default where unset or unreadable."""
    try:
        share = float(os.environ.get(MEM_FRACTION_ENV, JAX_DEFAULT_FRACTION))
    except ValueError:
        return JAX_DEFAULT_FRACTION
    return share if 0 < share <= 1 else JAX_DEFAULT_FRACTION


def device_bytes(device: Any = None) -> int | None:
    """What JAX's allocator may take of one of this process's devices: the device's own limit where
    it reports one (a GPU), else the smallest GPU's memory.total from nvidia-smi times JAX's share
    (aiperf.train.auto.device_facts; the stand-in node declares its memory so); None where neither
    says."""
    import jax

    device = device or jax.devices()[0]
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    from aiperf.train.auto import device_facts

    total = device_facts(True).memory_bytes
    return None if total is None else int(total * memory_share())


def build_step_state(model) -> None:
    """Create the optimizer's slots and the compiled metrics' variables now, before the first step.

    Without a distribution strategy, Keras' TensorFlow backend leaves them to be created inside the
    first trace of the train step, and a tf.function whose first trace creates variables traces
    its Python function a second time, so a trial would pay for tracing its train step twice. Built
    here, with the public `optimizer.build` and one `compute_metrics` call on a zero batch (whose
    counts `fit` resets at every epoch), it is traced once, which roughly halves a trial's first
    `fit` (docs/performance.md). Other backends build this state before they trace anyway, so for
    them this only happens earlier."""
    import keras

    model.optimizer.build(model.trainable_variables)
    # One sample's outputs and labels: (classes,) and () for an image model, (seq_len, vocab) and
    # (seq_len,) for a language model (a label per position, the next token).
    outputs = tuple(int(d) for d in model.output_shape[1:])
    model.compute_metrics(
        None,
        keras.ops.zeros((1, *outputs[:-1]), dtype="int32"),
        keras.ops.zeros((1, *outputs)),
        sample_weight=None,
    )


@dataclass(frozen=True)
class StepRecipe:
    """What a trial's step is compiled with besides its network: the trial's optimizer (its
    momentum, its weight decay inside the update), its loss (label smoothing's one-hot), its
    metrics and XLA setting. One recipe gives one step, so what the seed check, the GPU check and
    the trial compile is the same program: each optimizer slot, the one-hot labels and the
    metrics' variables are in XLA's figures wherever they are read."""

    optimizer: str = "sgd"
    momentum: float = 0.9
    weight_decay: float = 0.0
    label_smoothing: float = 0.0
    jit_compile: bool = True
    language: bool = False  # an LM's loss and metrics (aiperf.train.lm)
    beta_2: float = 0.999  # Adam's and AdamW's (train.beta_2)
    clip_norm: float | None = None  # the gradients' global norm (train.clip_norm; None: no clip)

    @classmethod
    def of_train(cls, train: Any, language: bool = False) -> StepRecipe:
        """The recipe of what carries its settings by name: a run's train settings (aiperf.config's
        TrainConfig: its seed's step) or a trial's request (aiperf.train.messages.TrialRequest)."""
        named = {f.name: getattr(train, f.name) for f in fields(cls) if f.name != "language"}
        return cls(**named, language=language)


def trainable(
    model: Any, recipe: StepRecipe, *, pixels: bool, rate: Any = 0.01, devices: int = 1
) -> Any:
    """`model` as a trial trains it: behind the device-side scaling of uint8 pixels where the feed
    gives them (aiperf.data.normalise.on_device; `model` itself otherwise, sharing its
    variables), compiled with `recipe` at learning rate `rate` (a float or the trial's schedule:
    neither changes the step's memory), its step state built now on one device
    (`build_step_state`; a strategy's replicas build theirs as they trace once). The one builder
    of a trial's step: the trial, the seed's fit check and the GPU check call it."""
    from aiperf.data.normalise import on_device
    from aiperf.train import lm
    from aiperf.train import recipe as recipes

    fed = on_device(model, pixels)
    fed.compile(
        optimizer=recipes.optimizer(
            recipe.optimizer,
            rate,
            momentum=recipe.momentum,
            weight_decay=recipe.weight_decay,
            beta_2=recipe.beta_2,
            clip_norm=recipe.clip_norm,
        ),
        loss=lm.lm_loss() if recipe.language else recipes.loss(recipe.label_smoothing),
        metrics=lm.lm_metrics() if recipe.language else ["accuracy"],
        jit_compile=recipe.jit_compile,
    )
    if devices == 1:
        build_step_state(fed)
    return fed


# The free variable of the function Keras' JAX trainer keeps as model.train_function that holds the
# jitted step (keras/src/backend/jax/trainer.py, JAXTrainer._make_function's iterator_step). A
# Keras that renames it fails here, in one line, and in tests/test_fit.py, never silently.
STEP_FREEVAR = "step_function"


def _jitted_train_step(model: Any) -> Any:
    """The jitted train step Keras' JAX trainer calls in `fit`: made once on the model
    (make_train_function keeps it), read from the closure of the function it wraps it in by the
    free variable's name (`STEP_FREEVAR`)."""
    model.make_train_function()
    function = model.train_function
    names = getattr(getattr(function, "__code__", None), "co_freevars", ())
    if STEP_FREEVAR not in names:
        raise ValueError(
            f"this Keras keeps no {STEP_FREEVAR!r} in its train function (free variables: "
            f"{', '.join(names) or 'none'}): aiperf.train.fit needs updating for it"
        )
    step = function.__closure__[names.index(STEP_FREEVAR)].cell_contents
    if not hasattr(step, "lower"):
        raise ValueError(
            "the model's train function is not jitted: compile it with jit_compile=True"
        )
    return step


def _abstract_state(model: Any) -> tuple[list[Any], ...]:
    """The step's state as Keras' trainer passes it (its _get_jax_state order), as shapes. Under a
    distribution each stands with its variable's sharding, as `fit` passes it; without one with
    none: `fit` then passes uncommitted arrays, and a shape naming the device's sharding would be
    another entry in JAX's cache, so the trial would compile its step a second time."""
    import jax
    import keras

    sharded = keras.distribution.distribution() is not None

    def abstract(value: Any) -> Any:
        sharding = value.sharding if sharded else None
        return jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=sharding)

    return (
        [abstract(v.value) for v in model.trainable_variables],
        [abstract(v.value) for v in model.non_trainable_variables],
        [abstract(v.value) for v in model.optimizer.variables],
        [abstract(v.value) for v in model.metrics_variables],
    )


def _abstract_batch(model: Any, global_batch: int) -> tuple[Any, Any]:
    """One global batch as the feed gives it: the model's inputs at their own dtypes and integer
    labels (a class per image, a next token per position), sharded over the distribution's batch
    axis as Keras distributes the data."""
    import jax
    import keras

    distribution = keras.distribution.distribution()

    def shaped(shape: tuple[int, ...], dtype: str) -> Any:
        sharding = None
        if distribution is not None:
            sharding = distribution.get_data_layout(shape).backend_layout
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

    inputs = [shaped((global_batch, *map(int, i.shape[1:])), str(i.dtype)) for i in model.inputs]
    outputs = tuple(int(d) for d in model.output_shape[1:])
    labels = shaped((global_batch, *outputs[:-1]), "int32")
    return (inputs[0] if len(inputs) == 1 else inputs), labels


def _devices_of_distribution() -> int:
    import keras

    distribution = keras.distribution.distribution()
    return 1 if distribution is None else int(distribution.device_mesh.devices.size)


def _ready(model: Any, devices: int, precision: str) -> None:
    """Refuse, in one line, a model whose step cannot be read as a trial's would be."""
    import keras

    if keras.backend.backend() != "jax":
        raise ValueError("step_memory reads XLA's analysis of a JAX step: set KERAS_BACKEND=jax")
    if getattr(model, "optimizer", None) is None:
        raise ValueError("compile the model (optimizer, loss, jit_compile=True) before its step")
    if model.dtype_policy.name != precision:
        raise ValueError(f"the model was built in {model.dtype_policy.name}, not {precision}")
    if _devices_of_distribution() != devices:
        raise ValueError(
            f"the step is for {devices} devices, the distribution set has "
            f"{_devices_of_distribution()}: build and compile inside the trial's data_parallel"
        )


def step_memory(
    model: Any,
    *,
    global_batch: int,
    devices: int,
    precision: str,
    headroom: float | None = None,
    available: int | None = None,
) -> StepMemory:
    """Compile `model`'s training step for `global_batch` samples over `devices` devices ahead of
    time and read XLA's memory analysis (per device). `model`: a Keras model on the JAX backend,
    built under `precision`'s dtype policy and compiled with jit_compile (its optimizer and loss
    are the step's: `trainable` compiles it as a trial does), inside the trial's data-parallel
    distribution when `devices` > 1 (aiperf.train.devices.data_parallel). `headroom`: the
    fraction of the device's memory kept free (default: the packaged fit rule's); `available`:
    the allocator's share of one device in bytes (default: `device_bytes()`). Its optimizer's
    slots and metrics are built if they are not yet (`build_step_state`)."""
    _ready(model, devices, precision)
    if not model.optimizer.built:  # its slots and the metrics' variables: the step's state
        build_step_state(model)
    started = time.perf_counter()
    compiled = (
        _jitted_train_step(model)
        .lower(_abstract_state(model), _abstract_batch(model, global_batch))
        .compile()
    )
    compile_s = time.perf_counter() - started
    analysis = compiled.memory_analysis()
    rule = FitRule() if headroom is None else FitRule(headroom=headroom)
    share = device_bytes() if available is None else available
    limit = None if share is None else int(share * (1 - rule.headroom))
    parts = {
        "argument_bytes": int(analysis.argument_size_in_bytes),
        "output_bytes": int(analysis.output_size_in_bytes),
        "alias_bytes": int(analysis.alias_size_in_bytes),
        "temp_bytes": int(analysis.temp_size_in_bytes),
        "code_bytes": int(analysis.generated_code_size_in_bytes),
    }
    needed = sum(parts.values()) - 2 * parts["alias_bytes"]
    return StepMemory(
        bytes_needed=needed,
        bytes_available=limit,
        fits=limit is None or needed <= limit,
        global_batch=global_batch,
        devices=devices,
        precision=precision,
        **parts,
        device_bytes=share,
        headroom=rule.headroom,
        compile_s=compile_s,
    )


def fit_rule(ruleset: str | None) -> FitRule:
    """The fit rule of a run judged by `ruleset` (one naming none: the default ruleset's, whose
    rule is the packaged default)."""
    return load_ruleset(ruleset or DEFAULT_RULESET).fit


def checks_fit(jit_compile: bool) -> bool:
    """Whether this worker checks a trial's fit before it trains: JAX with jit, on accelerators
    (on a CPU a step's memory is the host's and nothing is checked, so nothing is paid)."""
    import keras

    if not jit_compile or keras.backend.backend() != "jax":
        return False
    from aiperf.train.peak import device

    return device()[1]


def too_large_message(memory: StepMemory) -> str:
    """A trial's message when its step does not fit: the figures and what to change."""
    return (
        f"too large for its devices: {memory.line()}; it was not trained (a smaller "
        "architecture or batch fits: lower search.space.batch_per_gib or batch_size)"
    )


def reductions(
    sizes: list[int], rule: FitRule, per_gib: list[int] | None = None
) -> list[list[int]]:
    """The run's per-device batch sizes, then each smaller list the rule's "halve" gives, in the
    order they are tried before the window: per-GiB batches (`per_gib`, the list being each
    multiplier times one GiB count) are sized by half that GiB count (so the list stays what
    aiperf.results.division.sized_by_memory accepts), other lists have each size halved; none
    below `rule.min_batch` per device. Pure arithmetic: verify checks a run's list against it."""
    found = [sorted(sizes)]
    gib = min(sizes) // min(per_gib) if per_gib and min(sizes) % min(per_gib) == 0 else None
    while True:
        if gib is not None:
            gib //= 2
            smaller = sorted({m * gib for m in per_gib or ()}) if gib else []
        else:
            smaller = sorted({size // 2 for size in found[-1]})
        if not smaller or min(smaller) < rule.min_batch:
            return found
        found.append(smaller)


def seed_fit_on_worker(
    seed: SeedModel,
    *,
    batches: list[int],
    headroom: float,
    recipe: StepRecipe,
    dask_worker: Any = None,
) -> dict[str, Any]:
    """Before the window, on a worker: the run's seed network built and compiled as a trial does
        (`trainable`: its recipe, uint8 pixels from staged shards, its devices and precision), its
        step's memory read at each per-device batch of `batches` in turn until one fits. {"worker",
        "fits": the index of the first batch that fits (None: none does; -1: this worker does not
        check), "checked": [StepMemory as a dict, ...]}, the worker named as its peak record names it
    (aiperf.train.worker.peak_on_worker; Client.run passes `dask_worker`). The recipe, not
    `seed.jit_compile`, says whether the step is XLA-compiled; `seed.feed` plays no part."""
    import keras

    from aiperf.arch import build_model
    from aiperf.arch.seeds import seed_spec
    from aiperf.train.devices import data_parallel

    name = str(dask_worker.name) if dask_worker is not None else "local"
    found: dict[str, Any] = {"worker": name, "fits": -1, "checked": []}
    if not checks_fit(recipe.jit_compile):
        return found
    devices, precision = seed.devices, seed.precision
    keras.mixed_precision.set_global_policy(precision)
    try:
        with data_parallel(keras.backend.backend(), devices):
            network = build_model(seed_spec(seed.seed_architecture, seed.shape, seed.classes))
            model = trainable(network, recipe, pixels=True, devices=devices)
            found["fits"] = None
            for index, batch in enumerate(batches):
                memory = step_memory(
                    model,
                    global_batch=batch * devices,
                    devices=devices,
                    precision=precision,
                    headroom=headroom,
                )
                found["checked"].append(memory.to_dict())
                if memory.fits:
                    found["fits"] = index
                    break
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return found
