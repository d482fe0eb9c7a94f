"""The model's input range made on the device: what a trial trains is its counted model behind one
Rescaling layer that turns uint8 pixels into [-1, 1].

Why here and not on the host: a batch of 224-px images is 4x the bytes in float32 (27 GB/s for the
~45,000 images/s of an 8-GPU node), and the cast and scaling cost the host cores a pass over every
pixel. As a layer of the trained model the cast runs inside its compiled train (and evaluate) step,
on the model's devices, after the uint8 batch was copied.

Why in front of the model rather than inside it: the counted model (aiperf.ops, the reference
figures of tests/test_ops_reference.py, what `verify` counts again) is the network the search
proposed; the scaling is one multiply-add per input element, outside AIPerf's convention, and is
left out of the count, as docs/flops.md says. The weights saved and evaluated again are the inner
model's (the Rescaling layer has none), so a saved file loads into `build_model`'s model as before.

Synthetic data (an .npz of generated float arrays) is already in the model's range: its feed says
`pixels=False`, and the model trains as built.
"""

from __future__ import annotations

from typing import Any

SCALE = 1 / 127.5  # 0..255 -> [0, 2]
OFFSET = -1.0  # -> [-1, 1], the range the host pipeline produced before it sent uint8
LAYER_NAME = "pixels_to_unit_range"


def on_device(model: Any, pixels: bool) -> Any:
    """`model` fed uint8 pixels (scaled to [-1, 1] by its first layer, on its devices), or `model`
    itself when the feed already gives model inputs (`pixels` false). The returned model shares
    every variable with `model`: training one trains the other."""
    if not pixels:
        return model
    import keras

    shape = tuple(model.input_shape[1:])
    inputs = keras.Input(shape=shape, dtype="uint8", name="pixels")
    # Rescaling casts its input to the layer's compute dtype (the model's precision) before scaling.
    scaled = keras.layers.Rescaling(SCALE, offset=OFFSET, name=LAYER_NAME)(inputs)
    return keras.Model(inputs, model(scaled), name=f"{model.name}_on_pixels")
