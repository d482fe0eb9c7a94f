"""The run's seed model as the measurements before the timed window train it on each worker.

The bare Keras reference (aiperf.train.bare_reference), the feed and device rates
(aiperf.train.feedrate) and the seed's fit check (aiperf.train.fit.seed_fit_on_worker) each build
the run's seed network at the staged data's shape and classes, on a trial's devices, in the run's
precision and XLA setting, fed as its trials are fed. `SeedModel` is that description, made from
aiperf.lifecycle.feedcheck.seed_model's keyword arguments (`SeedModel(**seed_model(...))`) and sent
to every worker.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SeedModel:
    """The seed network (`seed_architecture`) at `input_shape` (height, width, channels) and
    `classes`, trained on `devices` devices in `precision`, XLA-compiled when `jit_compile`, fed by
    the run's data.feed (`feed`: "auto", "tf.data" or "dali")."""

    input_shape: tuple[int, int, int] | list[int]
    classes: int
    seed_architecture: str
    devices: int
    precision: str
    jit_compile: bool
    feed: str = "auto"

    @property
    def shape(self) -> tuple[int, int, int]:
        """`input_shape` as a tuple of three ints."""
        height, width, channels = (int(d) for d in self.input_shape)
        return (height, width, channels)
