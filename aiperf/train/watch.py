"""The per-step watches of a trial that never make the host wait for a step: the deadline and a
diverged loss.

Keras 3 dispatches `on_*_batch_end` hooks on a thread of their own (the step goes on while the
hook waits for the step's logs) only when every callback that overrides one declares
`async_safe = True`; one callback without it makes every step wait for its loss on the host, so
the next batch's copy to the device cannot overlap the step. (The TensorFlow backend never
dispatches them asynchronously: `keras.backend.IS_THREAD_SAFE` is false there.)

- `DeadlineWatch` overrides no batch-end hook. It counts the batches a `fit` or `evaluate` begins
  (a begun batch always finishes: the loop only stops between batches) and stops the call from a
  timer thread at the deadline, by the flag the loop reads after every batch: the trial stops
  within the batch it is in when the deadline comes, as sharply as a check after every batch did,
  and every batch it began is counted. The timer starts in `on_train_begin`/`on_test_begin`,
  after the loop has cleared the flag, so a deadline that passes just before a call still stops it
  after its first batch.
- `NanWatch` reads the loss every `every` batches on Keras' callback thread (async-safe), and the
  trial reads it again at the epoch's end (aiperf.train.trial: a diverged epoch is never complete).
"""

from __future__ import annotations

import threading
import time
from typing import Any

NAN_EVERY = 4  # batches between two looks at the loss (at the epoch's end it is looked at anyway)


def stop_loop(callback: Any, flag: str = "stop_training") -> None:
    """Set the flag a Keras loop reads between batches (`stop_training`, `stop_evaluating`), safely
    from any thread. Not through `callback.model`: on JAX that property first writes the loop's
    latest state into the model's variables (`jax_state_sync`) and marks it synced; from a timer or
    Keras' callback thread that races the loop, whose next step donates those very buffers and
    which, told the state was synced, reads them back deleted ("Buffer has been deleted or
    donated": the worker aborts). Seen on a two-device JAX trial stopped at its deadline."""
    setattr(callback._model, flag, True)  # the model set_model gave it, with no sync


def deadline_watch(deadline: float) -> Any:
    """A Keras callback that stops training or evaluation at `deadline` (time.time()) and counts
    the batches each begins: `train_batches`, `test_batches`, `hit_deadline`."""
    import keras

    class DeadlineWatch(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.train_batches = 0
            self.test_batches = 0
            self.hit_deadline = False
            self._timer: threading.Timer | None = None

        def _start(self, flag: str) -> None:
            self._stop_timer()

            def stop() -> None:
                self.hit_deadline = True
                stop_loop(self, flag)

            left = deadline - time.time()
            if left <= 0:
                stop()
                return
            self._timer = threading.Timer(left, stop)
            self._timer.daemon = True
            self._timer.start()

        def _stop_timer(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def on_train_begin(self, logs=None):
            self._start("stop_training")

        def on_train_end(self, logs=None):
            self._stop_timer()

        def on_test_begin(self, logs=None):
            self._start("stop_evaluating")

        def on_test_end(self, logs=None):
            self._stop_timer()
            if self.hit_deadline:  # an evaluation inside fit must not leave training running
                stop_loop(self)

        def on_train_batch_begin(self, batch, logs=None):
            self.train_batches += 1

        def on_test_batch_begin(self, batch, logs=None):
            self.test_batches += 1

    return DeadlineWatch()


def nan_watch(every: int = NAN_EVERY) -> Any:
    """A Keras callback that stops training once the loss is NaN or infinite, looking every
    `every` batches, on Keras' callback thread where the backend allows it."""
    import math

    import keras

    class NanWatch(keras.callbacks.Callback):
        async_safe = True  # reads only its own logs and sets the flag the loop reads

        def on_train_batch_end(self, batch, logs=None):
            if (batch + 1) % every or not logs or "loss" not in logs:
                return
            loss = float(logs["loss"])
            if math.isnan(loss) or math.isinf(loss):
                stop_loop(self)

    return NanWatch()
