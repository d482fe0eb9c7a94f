"""The "tensor" convention against TensorFlow's own profiler.

TensorFlow registers a float-operation statistic for its Conv2D, DepthwiseConv2dNative and
MatMul kernels (2 per multiply-accumulate); tf.compat.v1.profiler adds them up over a graph.
We freeze a model's inference graph at batch 1 and compare the profiler's sum for those node
types with the counter's tensor-convention forward, which must agree within 0.1%.

Two details of how Keras 3 lowers layers onto TensorFlow matter here:
- a grouped Conv2D runs inside a separate XLA-compiled function that is never inlined, so its
  Conv2D node lives in the graph's function library; we profile those function bodies too;
- a dilated convolution becomes SpaceToBatchND + Conv2D + BatchToSpaceND. Where the (padded)
  input does not divide by the dilation rate TensorFlow pads it further and computes outputs it
  then crops: work the convolution itself does not need (the counter counts the convolution), so
  the random networks below dilate only feature maps that divide by the rate.
"""

from __future__ import annotations

import os
import random

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import layers  # noqa: E402
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2  # noqa: E402
from tensorflow.python.framework.function_def_to_graph import function_def_to_graph  # noqa: E402

from aiperf.ops import count_model  # noqa: E402

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow",
    reason="the reference is TensorFlow's profiler; it needs the TensorFlow backend",
)

PROFILED_OP_TYPES = frozenset({"Conv2D", "DepthwiseConv2dNative", "MatMul"})
CALL_OP_TYPES = frozenset({"StatefulPartitionedCall", "PartitionedCall"})
TOLERANCE = 1e-3


# ---------------------------------------------------------------------------------------------
# The reference: TensorFlow's profiler


def _profile_graph(graph: tf.Graph) -> int:
    """Float operations the profiler reports for the conv/matmul nodes of `graph`."""
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    with graph.as_default():
        result = tf.compat.v1.profiler.profile(graph=graph, cmd="op", options=options)
    # The "op" view nests one node per op type; each node's float_ops is its own share.
    total, stack = 0, [result]
    while stack:
        node = stack.pop()
        if node.name in PROFILED_OP_TYPES:
            total += node.float_ops
        stack.extend(node.children)
    return total


def _functions_called(graph: tf.Graph, library: dict) -> int:
    """Profile the bodies of functions `graph` calls (grouped convolutions live there)."""
    total = 0
    for op in graph.get_operations():
        if op.type not in CALL_OP_TYPES:
            continue
        fdef = library[op.get_attr("f").name]
        body = function_def_to_graph(fdef, input_shapes=[x.shape for x in op.inputs])
        total += _profile_graph(body) + _functions_called(body, library)
    return total


def profiler_flops(model: keras.Model) -> int:
    """TensorFlow profiler's float operations of Conv2D, DepthwiseConv2dNative and MatMul nodes
    in `model`'s frozen inference graph at batch 1."""
    spec = tf.TensorSpec((1, *model.inputs[0].shape[1:]), tf.float32)
    concrete = tf.function(lambda x: model(x, training=False)).get_concrete_function(spec)
    graph_def = convert_variables_to_constants_v2(concrete).graph.as_graph_def()
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    library = {f.signature.name: f for f in graph_def.library.function}
    return _profile_graph(graph) + _functions_called(graph, library)


def assert_tensor_matches_profiler(model: keras.Model) -> None:
    ours = count_model(model, "tensor").forward
    reference = profiler_flops(model)
    assert reference > 0
    assert abs(ours - reference) <= TOLERANCE * reference, (model.name, ours, reference)


# ---------------------------------------------------------------------------------------------
# Random small convolutional networks, built here, covering every counted layer's options


def random_convnet(seed: int) -> keras.Model:
    """A random small network: kernels 1-5 (some non-square), strides, both paddings, dilation,
    groups, depthwise and separable convolutions, residual adds, Dense on a feature map, and a
    Flatten or global-pooling head; non-square inputs."""
    rng = random.Random(seed)
    height, width = rng.randint(16, 40), rng.randint(16, 40)
    inputs = keras.Input((height, width, rng.choice([1, 3, 4])), name=f"input_{seed}")
    x = inputs
    for _ in range(rng.randint(3, 7)):
        h, w, channels = x.shape[1:]
        kind = rng.choice(
            [
                "conv",
                "conv",
                "grouped",
                "dilated",
                "depthwise",
                "separable",
                "dense",
                "residual",
                "pool",
            ]
        )
        kernel = (
            (rng.choice([1, 3, 5]), rng.choice([1, 3, 5]))
            if rng.random() < 0.3
            else rng.choice([1, 3, 5])
        )
        padding = rng.choice(["same", "valid"])
        stride = rng.choice([1, 2]) if min(h, w) >= 8 else 1
        if padding == "valid" and min(h, w) < 6:
            padding = "same"
        if kind == "conv":
            x = layers.Conv2D(
                rng.choice([4, 8, 12, 16]),
                kernel,
                strides=stride,
                padding=padding,
                activation=rng.choice([None, "relu"]),
            )(x)
        elif kind == "grouped":
            groups = rng.choice([g for g in (2, 3, 4) if channels % g == 0] or [1])
            x = layers.Conv2D(
                groups * rng.choice([2, 4]), kernel, strides=stride, padding=padding, groups=groups
            )(x)
        elif kind == "dilated" and h % 2 == 0 and w % 2 == 0 and min(h, w) >= 6:
            x = layers.Conv2D(rng.choice([4, 8]), 3, dilation_rate=2, padding=padding)(x)
        elif kind == "depthwise":
            x = layers.DepthwiseConv2D(
                kernel, strides=stride, padding=padding, depth_multiplier=rng.choice([1, 2])
            )(x)
        elif kind == "separable":
            x = layers.SeparableConv2D(
                rng.choice([4, 8, 16]),
                kernel,
                strides=stride,
                padding=padding,
                depth_multiplier=rng.choice([1, 2]),
            )(x)
        elif kind == "dense":
            x = layers.Dense(rng.choice([4, 8]), activation="relu")(x)
        elif kind == "residual":
            y = layers.Conv2D(channels, 3, padding="same", use_bias=False)(x)
            y = layers.BatchNormalization()(y)
            x = layers.ReLU()(layers.Add()([x, y]))
        elif kind == "pool" and min(h, w) >= 4:
            pool = rng.choice([layers.MaxPooling2D, layers.AveragePooling2D])
            x = pool(2, padding=padding)(x)
    if rng.random() < 0.5:
        x = layers.Flatten()(x)
    else:
        x = rng.choice([layers.GlobalAveragePooling2D, layers.GlobalMaxPooling2D])()(x)
    outputs = layers.Dense(rng.randint(2, 12), activation="softmax")(x)
    return keras.Model(inputs, outputs, name=f"random_convnet_{seed}")


@pytest.mark.parametrize("seed", range(20))
def test_tensor_convention_matches_profiler_on_random_convnets(seed: int) -> None:
    assert_tensor_matches_profiler(random_convnet(seed))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20))
def test_tensor_convention_matches_profiler_on_search_space(seed: int) -> None:
    from aiperf.arch import build_model
    from aiperf.config import SpaceConfig
    from aiperf.search import space

    rng, choices = random.Random(seed), SpaceConfig()
    values = {
        space.STAGES: rng.choice(choices.stages),
        space.BLOCKS_PER_STAGE: rng.choice(choices.blocks_per_stage),
        space.BASE_FILTERS: rng.choice(choices.base_filters),
        space.KERNEL_SIZE: rng.choice(choices.kernel_size),
    }
    spec = space.architecture(values, (32, 32, 3), 10)  # one family member drawn from the space
    assert_tensor_matches_profiler(build_model(spec))


@pytest.mark.slow
@pytest.mark.parametrize(
    "application", ["MobileNetV2", "DenseNet121", "EfficientNetB0", "ResNet50"]
)
def test_tensor_convention_matches_profiler_on_keras_applications(application: str) -> None:
    build = getattr(keras.applications, application)
    assert_tensor_matches_profiler(build(weights=None, input_shape=(48, 64, 3), classes=10))
