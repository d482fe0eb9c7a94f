"""The training recipe of one trial: its learning-rate schedule, weight decay and loss.

AIPerf's ImageNet recipe (SGD from 0.1 decayed over the trial's epochs, momentum 0.9, weight decay
1e-4, label smoothing 0.1) is what lets a ResNet trained from scratch reach ImageNet accuracies in
the epochs a round gives it; a constant rate with no regularisation does not. The LM track's is
the field's for transformers (aiperf-rules-1.8): AdamW with decoupled weight decay, beta_2 0.95,
gradients clipped to a global norm of 1, a warm-up then cosine. Each part is a setting
(train.optimizer, train.lr_schedule, train.warmup_epochs, train.weight_decay, train.beta_2,
train.clip_norm, train.label_smoothing) whose default is the plain training the other profiles use,
and at its default each part builds exactly what a trial built before the setting existed (a float
learning rate, Keras' own SGD or Adam, the string loss), so those workloads train as they did.

Keras is imported inside the functions: a worker sizes the framework's thread pools before it
imports it (aiperf.train.trial.configure_threads).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from aiperf.train import lars

# Warm-up starts at this fraction of the trial's learning rate and rises linearly to it.
WARMUP_START = 0.1
# Adam's second-moment decay unless train.beta_2 says otherwise: Keras' default, which every Adam
# trial had before the setting existed. The LM track's AdamW takes the field's 0.95.
ADAM_BETA_2 = 0.999
# The train settings that make the recipe: what a result says it trained with (`aiperf show --json`).
SETTINGS = (
    "optimizer",
    "momentum",
    "beta_2",
    "weight_decay",
    "clip_norm",
    "lr_schedule",
    "lr_floor",
    "warmup_epochs",
    "lr_reference_batch",
    "label_smoothing",
)


def scaled_rate(rate: float, global_batch: int, reference_batch: int | None) -> float:
    """The rate a trial trains at: the searched `rate`, times `global_batch` / `reference_batch`
    where the profile scales it (train.lr_reference_batch), else as searched.

    Goyal et al. (2017, "Accurate, Large Minibatch SGD") train ResNet-50 on ImageNet to the small
    batch's accuracy up to a global batch of 8,192 with the rate scaled linearly with the batch
    (0.1 x batch / 256) and a gradual warm-up (train.warmup_epochs, from WARMUP_START of the rate):
    a node's 8 devices at a per-device batch b step 8 x b samples, and take a rate 8 x b / 256
    times the one searched for 256. Pure arithmetic, so the orchestrator can put the rate into the
    trial's request and the trial builds its schedule from it (`learning_rate`)."""
    if reference_batch is None:
        return rate
    return rate * global_batch / reference_batch


def learning_rate(
    rate: float,
    schedule: str,
    *,
    epochs: int,
    steps_per_epoch: int,
    warmup_epochs: float = 0.0,
    floor: float = 0.0,
) -> Any:
    """The optimizer's learning rate: a float for a constant rate with no warm-up, otherwise a
    LearningRateSchedule over the optimizer's step count.

    The schedule spans the trial's own epochs (`epochs` x `steps_per_epoch`: the trial's whole
    batches), and is read from `optimizer.iterations`, which carries across the trial's per-epoch
    `fit` calls, so every step gets its rate however the epochs are run. A warm-up longer than the
    trial (an oracle that gives fewer epochs than train.epochs) is cut to the trial's length. A
    cosine ends at `floor` times the rate (train.lr_floor: 0, to nothing; GPT-3's and Chinchilla's
    0.1, the LM track's: a trial's last steps still learn).
    """
    import keras

    total = max(1, epochs * steps_per_epoch)
    warmup = min(total - 1, round(warmup_epochs * steps_per_epoch))
    if schedule == "constant" and warmup == 0:
        return rate
    if schedule == "polynomial":  # MLPerf's ResNet reference, with LARS (aiperf.train.lars)
        return lars.warmup_polynomial(rate, total_steps=total, warmup_steps=warmup)
    if schedule not in ("constant", "cosine"):
        raise ValueError(
            f"unknown learning-rate schedule {schedule!r}; use constant, cosine or polynomial"
        )
    # CosineDecay's alpha is the rate it ends at, as a fraction of the start: 1 keeps it constant.
    alpha = 1.0 if schedule == "constant" else floor
    if warmup == 0:
        return keras.optimizers.schedules.CosineDecay(rate, decay_steps=total, alpha=alpha)
    return keras.optimizers.schedules.CosineDecay(
        rate * WARMUP_START,
        decay_steps=total - warmup,
        alpha=alpha,
        warmup_target=rate,
        warmup_steps=warmup,
    )


def optimizer(
    name: str,
    rate: Any,
    *,
    momentum: float,
    weight_decay: float = 0.0,
    beta_2: float = ADAM_BETA_2,
    clip_norm: float | None = None,
) -> Any:
    """SGD (with momentum), Adam, AdamW or LARS at `rate`, with `weight_decay` as an L2 term on
    the gradient (SGD, Adam, LARS) or decoupled from it (AdamW, `adamw`). `beta_2` is Adam's and
    AdamW's second-moment decay (train.beta_2); `clip_norm` scales every step's gradients down to
    that global norm where their norm is larger (train.clip_norm, Keras' `global_clipnorm`; None:
    never). LARS takes the term inside its own update, as MLPerf's reference does: in the trust
    ratio's denominator too (aiperf.train.lars).

    Weight decay is added to the gradient of every kernel (convolutions and dense layers:
    variables of rank 2 or more) before the optimizer's own update, g + weight_decay * w, so it
    passes through SGD's momentum as the ResNet recipes' "weight decay 1e-4" does (the gradient of
    an L2 penalty weight_decay / 2 * |w|^2; TensorFlow's reference ResNet, torch.optim.SGD).
    Keras' own `weight_decay` argument is decoupled (w -= rate * weight_decay * w each step,
    outside the momentum): at momentum 0.9 it decays about ten times less than the recipe means,
    so the same figure would train a different model. Kept out of the model (no kernel
    regularisers), the reported loss is the data loss alone and the model the builder made is
    unchanged. BatchNormalization's scale and offset and the biases are not decayed.

    `adamw` is the LM track's recipe (aiperf-rules-1.8): the decoupled form, which is the one
    that regularises under Adam (`decoupled_adamw`)."""
    import keras

    if name == "lars":
        return lars.lars(
            rate, momentum=momentum, weight_decay=weight_decay, global_clipnorm=clip_norm
        )
    if name == "adamw":
        return decoupled_adamw(rate, weight_decay=weight_decay, beta_2=beta_2, clip_norm=clip_norm)
    base = keras.optimizers.Adam if name == "adam" else keras.optimizers.SGD
    options: dict[str, Any] = {"learning_rate": rate}
    if name == "adam":
        options["beta_2"] = beta_2
    else:
        options["momentum"] = momentum
    if clip_norm is not None:
        options["global_clipnorm"] = clip_norm
    if weight_decay <= 0:
        return base(**options)
    return _with_l2(base)(l2=weight_decay, **options)


def decoupled_adamw(
    rate: Any, *, weight_decay: float, beta_2: float, clip_norm: float | None
) -> Any:
    """AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization"): Adam's update
    with beta_1 0.9 and `beta_2`, and each step w -= rate * weight_decay * w outside it, on the
    matrices only (rank 2 and more: dense kernels, attention projections, embeddings), never on
    biases or LayerNorm/RMSNorm scales, as GPT-2's and nanoGPT's training decays; gradients
    clipped first to a global norm of `clip_norm` (None: never).

    Why decoupled: an L2 term added to Adam's gradient (the `adam` recipe) is divided by Adam's
    running root-mean-square of that gradient, so a weight with large gradients is barely decayed
    and one with small gradients decays hard, and the figure means something else for every
    weight; at the 1e-4 the LM profiles had, it did next to nothing. Decoupled, each matrix
    shrinks by exactly rate * weight_decay a step whatever its gradients, as torch.optim.AdamW
    and nanoGPT decay (the field's 0.1 means the same here). The rate is the schedule's at the
    step, so the decay warms up and anneals with it.

    Keras' AdamW decays every trainable variable unless told which to skip; it asks
    `_use_weight_decay` of each variable on every backend (TensorFlow, JAX, torch), so the subclass
    answers by rank there rather than by names (`exclude_from_weight_decay`), which the builder
    would have to keep stable, or by a list of variables taken before the optimizer is built."""
    return _matrix_adamw()(
        learning_rate=rate,
        weight_decay=weight_decay,
        beta_1=0.9,
        beta_2=beta_2,
        global_clipnorm=clip_norm,
    )


@cache
def _matrix_adamw() -> type:
    """Keras' AdamW decaying only variables of rank 2 and more (made once Keras is imported)."""
    import keras

    class MatrixAdamW(keras.optimizers.AdamW):
        def _use_weight_decay(self, variable: Any) -> bool:
            return len(variable.shape) >= 2 and bool(super()._use_weight_decay(variable))

    return MatrixAdamW


@cache
def _with_l2(base: type) -> type:
    """`base` with an L2 term added to each kernel's gradient (one class per optimizer)."""
    from keras import ops

    class WithL2(base):
        def __init__(self, *, l2: float, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.l2 = l2

        def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
            if len(variable.shape) >= 2:
                gradient = ops.add(
                    ops.cast(gradient, variable.dtype),
                    ops.multiply(ops.cast(self.l2, variable.dtype), variable),
                )
            super().update_step(gradient, variable, learning_rate)

        def get_config(self) -> dict[str, Any]:
            return {**super().get_config(), "l2": self.l2}

    WithL2.__name__ = WithL2.__qualname__ = f"{base.__name__}WithL2"
    return WithL2


def loss(label_smoothing: float = 0.0) -> Any:
    """The training loss over integer labels: sparse categorical cross-entropy, or with smoothing
    the categorical cross-entropy of the one-hot labels as Keras smooths them (the target class
    gets 1 - s + s / classes, every other s / classes).

    Keras' SparseCategoricalCrossentropy takes no label_smoothing, so the labels are one-hot
    encoded inside the loss: the feed and the labels the metrics see stay integers, and the
    compiled "accuracy" stays sparse categorical accuracy. One (batch, classes) one-hot per step
    is the whole extra cost, on every backend. Validation loss is the same smoothed loss, so early
    stopping compares like with like."""
    if label_smoothing <= 0:
        return "sparse_categorical_crossentropy"
    import keras
    from keras import ops

    def smoothed_crossentropy(y_true: Any, y_pred: Any) -> Any:
        labels = ops.reshape(ops.cast(y_true, "int32"), (-1,))
        one_hot = ops.one_hot(labels, y_pred.shape[-1], dtype=y_pred.dtype)
        return keras.losses.categorical_crossentropy(
            one_hot, y_pred, label_smoothing=label_smoothing
        )

    return smoothed_crossentropy
