"""LARS, the large-batch optimizer of MLPerf's ResNet-50 reference, and its learning-rate schedule.

Keras 3 ships SGD, Adam and LAMB but no LARS (You, Gitman and Ginsburg 2017, "Large Batch Training
of Convolutional Networks"). At a node's global batch of 7,000-8,000 images, SGD with the rate
scaled linearly with the batch sits at the edge of what Goyal et al. (2017) showed to reach the
small batch's accuracy; MLPerf's ResNet-50 reference and every closed submission beyond it train
with LARS: each layer's step is scaled by a trust ratio, eta x |w| / (|g| + weight_decay x |w|),
so no layer's update is large against its weights however large the global rate.

Written with keras.ops only, so it runs as is on the TensorFlow, JAX and torch backends, inside a
data-parallel distribution as any Keras optimizer does. The figures it is used with (base rate,
warm-up, decay, weight decay, eta, epsilon) are the reference's, in docs/rules.md ("LARS at a
node's global batch") and aiperf/rules/aiperf-rules-1.6.yaml.

Keras is imported inside the functions: a worker sizes the framework's thread pools before it
imports it (aiperf.train.trial.configure_threads).
"""

from __future__ import annotations

from functools import cache
from typing import Any

# The reference's LARS coefficient and epsilon (MLPerf logs them as lars_epsilon: 0).
ETA = 0.001
EPSILON = 0.0
# The reference's decay after the warm-up: polynomial, power 2, to an end rate of 1e-4.
POLY_POWER = 2.0
POLY_END_RATE = 1e-4


def lars(
    rate: Any, *, momentum: float, weight_decay: float, global_clipnorm: float | None = None
) -> Any:
    """A LARS optimizer at `rate` (a float or a schedule), with the reference's eta and epsilon;
    gradients clipped to `global_clipnorm` first where it is set (train.clip_norm)."""
    return _lars_class()(
        learning_rate=rate,
        momentum=momentum,
        weight_decay_rate=weight_decay,
        eta=ETA,
        global_clipnorm=global_clipnorm,
    )


def adapted(variable: Any) -> bool:
    """Whether LARS scales and decays this variable: kernels (rank 2 and more) only. The
    reference skips BatchNormalization's scale and offset and every bias by name; in a Keras
    model those are exactly its 1-D variables, and the shape needs no naming convention."""
    return len(variable.shape) >= 2


@cache
def _lars_class() -> type:
    """The optimizer class, made once Keras is imported (a subclass of Keras' SGD)."""
    import keras
    from keras import ops

    class LARS(keras.optimizers.SGD):
        """SGD with momentum whose step for each kernel is the global rate times the kernel's
        trust ratio, on the gradient plus the L2 term: the reference's update,

            trust = eta |w| / (|g| + wd |w| + epsilon)   (1 where |w| or |g| is 0)
            v <- momentum v - rate trust (g + wd w);  w <- w + v

        and plain momentum SGD (no decay, no trust ratio) for biases and BatchNormalization. The
        weight decay lives here, not in Keras' decoupled `weight_decay` (which the base class
        would apply outside the momentum), so it is named `weight_decay_rate`."""

        def __init__(
            self,
            *,
            weight_decay_rate: float = 0.0,
            eta: float = ETA,
            epsilon: float = EPSILON,
            **kwargs: Any,
        ) -> None:
            super().__init__(**kwargs)
            self.weight_decay_rate = weight_decay_rate
            self.eta = eta
            self.epsilon = epsilon

        def update_step(self, gradient: Any, variable: Any, learning_rate: Any) -> None:
            if not adapted(variable):
                super().update_step(gradient, variable, learning_rate)
                return
            dtype = variable.dtype
            gradient = ops.cast(gradient, dtype)
            decay = ops.cast(self.weight_decay_rate, dtype)
            w_norm = ops.sqrt(ops.sum(ops.square(variable)))
            g_norm = ops.sqrt(ops.sum(ops.square(gradient)))
            ratio = ops.divide(
                ops.multiply(ops.cast(self.eta, dtype), w_norm),
                ops.add(ops.add(g_norm, ops.multiply(decay, w_norm)), self.epsilon),
            )
            both = ops.logical_and(ops.greater(w_norm, 0), ops.greater(g_norm, 0))
            # The division above is never taken where either norm is 0 (it may be inf or nan).
            trust = ops.where(both, ratio, ops.ones_like(ratio))
            rate = ops.multiply(ops.cast(learning_rate, dtype), trust)
            decayed = ops.add(gradient, ops.multiply(decay, variable))
            super().update_step(decayed, variable, rate)

        def get_config(self) -> dict[str, Any]:
            return {
                **super().get_config(),
                "weight_decay_rate": self.weight_decay_rate,
                "eta": self.eta,
                "epsilon": self.epsilon,
            }

    return LARS


def warmup_polynomial(rate: float, *, total_steps: int, warmup_steps: int) -> Any:
    """The reference's schedule over `total_steps`: a linear warm-up from 0 to `rate` over
    `warmup_steps`, then a polynomial decay of power 2 to POLY_END_RATE (or `rate`, if lower) at
    the last step. Step s (from 0) of the warm-up trains at rate x (s + 1) / warmup_steps, so its
    first step is not wasted at 0 as the reference's is."""
    return _schedule_class()(rate, total_steps, warmup_steps)


@cache
def _schedule_class() -> type:
    import keras
    from keras import ops

    class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
        def __init__(self, rate: float, total_steps: int, warmup_steps: int) -> None:
            self.rate = float(rate)
            self.total_steps = int(total_steps)
            self.warmup_steps = int(warmup_steps)
            self.end_rate = min(POLY_END_RATE, self.rate)

        def __call__(self, step: Any) -> Any:
            step = ops.cast(step, "float32")
            warmup = float(max(1, self.warmup_steps))
            warming = ops.multiply(self.rate, ops.divide(ops.add(step, 1.0), warmup))
            span = float(max(1, self.total_steps - self.warmup_steps))
            done = ops.clip(ops.divide(ops.subtract(step, self.warmup_steps), span), 0.0, 1.0)
            decayed = ops.add(
                ops.multiply(self.rate - self.end_rate, ops.power(1.0 - done, POLY_POWER)),
                self.end_rate,
            )
            return ops.where(ops.less(step, float(self.warmup_steps)), warming, decayed)

        def get_config(self) -> dict[str, Any]:
            return {
                "rate": self.rate,
                "total_steps": self.total_steps,
                "warmup_steps": self.warmup_steps,
            }

    return WarmupPolynomialDecay
