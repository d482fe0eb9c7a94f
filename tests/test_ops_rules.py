"""Each layer rule on a hand-computed case, in both conventions; then the model walk (first conv,
nested models, shared layers, shapes) and the errors."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402
from keras import layers  # noqa: E402

from aiperf.ops import CONVENTIONS, LayerOps, ModelOps, UnknownLayerError, count_all, count_model  # noqa: E402
from aiperf.ops.layer_costs import RULES  # noqa: E402


@dataclass(frozen=True)
class Case:
    """One layer on given input shapes (batch excluded), with the expected per-sample counts.

    upstream: put a BatchNormalization (trainable) in front of every input, so the layer has to
    compute its input gradient; without it the layer is a "first" layer.
    """

    id: str
    make: Callable[[], layers.Layer]
    inputs: tuple[tuple[int, ...], ...]
    aiperf: tuple[int, int]
    tensor: tuple[int, int] = (0, 0)
    output_shape: tuple[int, ...] | None = None
    upstream: bool = True


def _row(case: Case, convention: str) -> LayerOps:
    layer = case.make()
    inputs = [keras.Input(shape) for shape in case.inputs]
    xs = [layers.BatchNormalization()(x) for x in inputs] if case.upstream else inputs
    layer(xs[0] if len(xs) == 1 else xs)
    model = keras.Model(inputs, layer.output)
    (row,) = [r for r in count_model(model, convention).layers if r.name == layer.name]
    return row


# Conv arithmetic: params = Kh*Kw*Cin/groups*Cout, MACs = Ho*Wo*params,
# aiperf forward 2*MACs, backward 4*MACs + 2*params (first conv: 2*MACs + 2*params).
CASES = [
    # 3x3, Cin 4, Cout 8, 10x12 "same": params 288, MACs 120*288 = 34560
    Case(
        "conv2d",
        lambda: layers.Conv2D(8, 3, padding="same"),
        ((10, 12, 4),),
        aiperf=(69120, 4 * 34560 + 576),
        tensor=(69120, 138240),
        output_shape=(10, 12, 8),
    ),
    Case(
        "conv2d-channels-first",
        lambda: layers.Conv2D(8, 3, padding="same", data_format="channels_first"),
        ((4, 10, 12),),
        aiperf=(69120, 4 * 34560 + 576),
        tensor=(69120, 138240),
        output_shape=(8, 10, 12),
    ),
    Case(
        "conv2d-first",
        lambda: layers.Conv2D(8, 3, padding="same"),
        ((10, 12, 4),),
        aiperf=(69120, 2 * 34560 + 576),
        tensor=(69120, 138240),
        upstream=False,
    ),
    # kernel (5,3), stride 2, valid on 11x9: out 4x4; params 5*3*3*6 = 270, MACs 16*270 = 4320
    Case(
        "conv2d-strided-nonsquare",
        lambda: layers.Conv2D(6, (5, 3), strides=2),
        ((11, 9, 3),),
        aiperf=(8640, 4 * 4320 + 540),
        tensor=(8640, 17280),
        output_shape=(4, 4, 6),
    ),
    # 3x3 dilation 2, valid on 9x9: out 5x5; params 3*3*2*3 = 54, MACs 25*54 = 1350
    Case(
        "conv2d-dilated",
        lambda: layers.Conv2D(3, 3, dilation_rate=2),
        ((9, 9, 2),),
        aiperf=(2700, 4 * 1350 + 108),
        tensor=(2700, 5400),
        output_shape=(5, 5, 3),
    ),
    # groups 2: params 3*3*(4/2)*6 = 108, 6x6 "same": MACs 36*108 = 3888
    Case(
        "conv2d-grouped",
        lambda: layers.Conv2D(6, 3, padding="same", groups=2),
        ((6, 6, 4),),
        aiperf=(7776, 4 * 3888 + 216),
        tensor=(7776, 15552),
    ),
    # a fused ReLU adds one per output element (10*12*8 = 960) to the aiperf forward only
    Case(
        "conv2d-relu",
        lambda: layers.Conv2D(8, 3, padding="same", activation="relu"),
        ((10, 12, 4),),
        aiperf=(69120 + 960, 4 * 34560 + 576),
        tensor=(69120, 138240),
    ),
    # a fused softmax over C = 8 channels at 120 positions: 120 * (13*8 - 1)
    Case(
        "conv2d-softmax",
        lambda: layers.Conv2D(8, 3, padding="same", activation="softmax"),
        ((10, 12, 4),),
        aiperf=(69120 + 120 * 103, 4 * 34560 + 576),
        tensor=(69120, 138240),
    ),
    # depthwise 3x3, M 2, Cin 3, 8x6 "same": params 54, MACs 48*54 = 2592
    Case(
        "depthwise",
        lambda: layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2),
        ((8, 6, 3),),
        aiperf=(5184, 4 * 2592 + 108),
        tensor=(5184, 10368),
        output_shape=(8, 6, 6),
    ),
    Case(
        "depthwise-first",
        lambda: layers.DepthwiseConv2D(3, padding="same", depth_multiplier=2),
        ((8, 6, 3),),
        aiperf=(5184, 2 * 2592 + 108),
        tensor=(5184, 10368),
        upstream=False,
    ),
    # depthwise 3x3 of Cin 4 (36 params) then 1x1 4->8 (32 params), 6x7 "same" = 42 positions
    Case(
        "separable",
        lambda: layers.SeparableConv2D(8, 3, padding="same"),
        ((6, 7, 4),),
        aiperf=(2 * 42 * 68, (4 * 42 * 36 + 72) + (4 * 42 * 32 + 64)),
        tensor=(2 * 42 * 68, 4 * 42 * 68),
        output_shape=(6, 7, 8),
    ),
    Case(
        "separable-first",
        lambda: layers.SeparableConv2D(8, 3, padding="same"),
        ((6, 7, 4),),
        aiperf=(2 * 42 * 68, (2 * 42 * 36 + 72) + (4 * 42 * 32 + 64)),
        tensor=(2 * 42 * 68, 4 * 42 * 68),
        upstream=False,
    ),
    # Dense 20 -> 10 with softmax, docs/flops.md: 2*in*out + 13*out - 1 ; 4*in*out + 2*(in+1)*out
    Case(
        "dense-softmax",
        lambda: layers.Dense(10, activation="softmax"),
        ((20,),),
        aiperf=(400 + 129, 800 + 420),
        tensor=(400, 800),
    ),
    Case(
        "dense-softmax-first",
        lambda: layers.Dense(10, activation="softmax"),
        ((20,),),
        aiperf=(400 + 129, 400 + 420),
        tensor=(400, 800),
        upstream=False,
    ),
    Case(
        "dense-relu",
        lambda: layers.Dense(10, activation="relu"),
        ((20,),),
        aiperf=(400 + 10, 800 + 420),
        tensor=(400, 800),
    ),
    Case(
        "dense-linear-nobias",
        lambda: layers.Dense(10, use_bias=False),
        ((20,),),
        aiperf=(400, 800 + 400),
        tensor=(400, 800),
    ),
    # Dense 6 -> 3 at each of 5*4 positions: MACs 20*18 = 360
    Case(
        "dense-on-feature-map",
        lambda: layers.Dense(3),
        ((5, 4, 6),),
        aiperf=(720, 4 * 360 + 2 * 7 * 3),
        tensor=(720, 1440),
        output_shape=(5, 4, 3),
    ),
    Case("batchnorm", lambda: layers.BatchNormalization(), ((5, 6, 4),), aiperf=(7 * 120, 36)),
    Case("batchnorm-vector", lambda: layers.BatchNormalization(), ((10,),), aiperf=(70, 36)),
    Case("layernorm", lambda: layers.LayerNormalization(), ((5, 6, 4),), aiperf=(7 * 120, 36)),
    Case("activation-relu", lambda: layers.Activation("relu"), ((5, 6, 4),), aiperf=(120, 0)),
    Case("activation-swish", lambda: layers.Activation("swish"), ((5, 6, 4),), aiperf=(120, 0)),
    Case(
        "activation-softmax",
        lambda: layers.Activation("softmax"),
        ((5, 6, 4),),
        aiperf=(30 * 51, 0),
    ),
    Case("activation-linear", lambda: layers.Activation("linear"), ((5, 6, 4),), aiperf=(0, 0)),
    Case("relu", lambda: layers.ReLU(), ((5, 6, 4),), aiperf=(120, 0)),
    Case("relu6", lambda: layers.ReLU(max_value=6.0), ((5, 6, 4),), aiperf=(120, 0)),
    Case("leaky-relu", lambda: layers.LeakyReLU(), ((5, 6, 4),), aiperf=(120, 0)),
    Case("elu", lambda: layers.ELU(), ((5, 6, 4),), aiperf=(120, 0)),
    Case("softmax", lambda: layers.Softmax(), ((3, 5),), aiperf=(3 * 64, 0)),
    Case("add", lambda: layers.Add(), ((5, 6, 4), (5, 6, 4)), aiperf=(120, 0)),
    Case("add-three", lambda: layers.Add(), ((5, 6, 4),) * 3, aiperf=(240, 0)),
    Case("subtract", lambda: layers.Subtract(), ((5, 6, 4), (5, 6, 4)), aiperf=(120, 0)),
    Case(
        "multiply-broadcast",
        lambda: layers.Multiply(),
        ((5, 6, 4), (1, 1, 4)),
        aiperf=(120, 0),
        output_shape=(5, 6, 4),
    ),
    Case("maximum", lambda: layers.Maximum(), ((5, 6, 4), (5, 6, 4)), aiperf=(120, 0)),
    Case("minimum", lambda: layers.Minimum(), ((5, 6, 4), (5, 6, 4)), aiperf=(120, 0)),
    Case("average", lambda: layers.Average(), ((5, 6, 4), (5, 6, 4)), aiperf=(240, 0)),
    Case(
        "concatenate",
        lambda: layers.Concatenate(),
        ((5, 6, 4), (5, 6, 2)),
        aiperf=(0, 0),
        output_shape=(5, 6, 6),
    ),
    Case("rescaling", lambda: layers.Rescaling(1 / 255), ((4, 5, 3),), aiperf=(120, 0)),
    Case(
        "normalization",
        lambda: layers.Normalization(mean=0.0, variance=1.0),
        ((4, 5, 3),),
        aiperf=(120, 0),
    ),
    # 3x3 stride 2 "same" on 9x7: out 5x4x2 = 40 elements, 9 each
    Case(
        "maxpool",
        lambda: layers.MaxPooling2D(3, strides=2, padding="same"),
        ((9, 7, 2),),
        aiperf=(360, 0),
        output_shape=(5, 4, 2),
    ),
    Case("avgpool", lambda: layers.AveragePooling2D(2), ((8, 6, 3),), aiperf=(4 * 3 * 3 * 4, 0)),
    # docs/flops.md: (Hin*Win - 1)*C + 4*C on 7x5x3
    Case(
        "global-avgpool",
        lambda: layers.GlobalAveragePooling2D(),
        ((7, 5, 3),),
        aiperf=(34 * 3 + 12, 0),
    ),
    Case(
        "global-avgpool-channels-first",
        lambda: layers.GlobalAveragePooling2D(data_format="channels_first"),
        ((3, 7, 5),),
        aiperf=(34 * 3 + 12, 0),
    ),
    Case("global-maxpool", lambda: layers.GlobalMaxPooling2D(), ((7, 5, 3),), aiperf=(34 * 3, 0)),
    Case(
        "zeropadding",
        lambda: layers.ZeroPadding2D(((1, 2), (3, 4))),
        ((5, 6, 4),),
        aiperf=(0, 0),
        output_shape=(8, 13, 4),
    ),
    Case(
        "cropping",
        lambda: layers.Cropping2D(1),
        ((5, 6, 4),),
        aiperf=(0, 0),
        output_shape=(3, 4, 4),
    ),
    Case("flatten", lambda: layers.Flatten(), ((5, 6, 4),), aiperf=(0, 0), output_shape=(120,)),
    Case(
        "reshape",
        lambda: layers.Reshape((30, 4)),
        ((5, 6, 4),),
        aiperf=(0, 0),
        output_shape=(30, 4),
    ),
    Case(
        "permute",
        lambda: layers.Permute((2, 1, 3)),
        ((5, 6, 4),),
        aiperf=(0, 0),
        output_shape=(6, 5, 4),
    ),
    Case("dropout", lambda: layers.Dropout(0.5), ((5, 6, 4),), aiperf=(0, 0)),
    Case("spatial-dropout", lambda: layers.SpatialDropout2D(0.5), ((5, 6, 4),), aiperf=(0, 0)),
    Case("identity", lambda: layers.Identity(), ((5, 6, 4),), aiperf=(0, 0)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_layer_rule(case: Case) -> None:
    aiperf, tensor = _row(case, "aiperf"), _row(case, "tensor")
    assert (aiperf.forward, aiperf.backward) == case.aiperf
    assert (tensor.forward, tensor.backward) == case.tensor
    if case.output_shape is not None:
        assert aiperf.output_shape == case.output_shape


def test_input_layer_costs_nothing() -> None:
    inputs = keras.Input((5, 6, 4), name="pixels")
    model = keras.Model(inputs, layers.Flatten()(inputs))
    row = count_model(model).layers[0]
    assert (row.name, row.type, row.output_shape, row.forward, row.backward) == (
        "pixels",
        "InputLayer",
        (5, 6, 4),
        0,
        0,
    )


def test_every_registered_rule_has_a_case() -> None:
    # The transformer rules (aiperf/ops/transformer_costs.py) have their cases in tests/test_ops_lm.py.
    tested = {type(case.make()) for case in CASES} | {layers.InputLayer}
    assert {
        cls for cls, fn in RULES.items() if fn.__module__ == "aiperf.ops.layer_costs"
    } - tested == set()


# ---------------------------------------------------------------------------------------------
# The walk


def _conv(name: str) -> layers.Conv2D:
    return layers.Conv2D(2, 3, padding="same", use_bias=False, name=name)


def _rows(model: keras.Model, convention: str = "aiperf") -> dict[str, LayerOps]:
    return {row.name: row for row in count_model(model, convention).layers}


# 3x3 conv 2 -> 2 channels on 4x5: params 36, MACs 20*36 = 720
FIRST_BACKWARD, OTHER_BACKWARD = 2 * 720 + 72, 4 * 720 + 72


def test_first_conv_is_the_one_with_nothing_trainable_upstream() -> None:
    inputs = keras.Input((4, 5, 2))
    x = layers.Rescaling(0.5)(layers.ZeroPadding2D(0)(inputs))  # no weights: still "first"
    x = _conv("c1")(x)
    x = _conv("c2")(layers.ReLU()(x))
    rows = _rows(keras.Model(inputs, x))
    assert rows["c1"].backward == FIRST_BACKWARD
    assert rows["c2"].backward == OTHER_BACKWARD


def test_a_conv_after_a_trainable_layer_is_not_first() -> None:
    inputs = keras.Input((4, 5, 2))
    x = _conv("c1")(layers.BatchNormalization()(inputs))
    assert _rows(keras.Model(inputs, x))["c1"].backward == OTHER_BACKWARD


def test_parallel_convs_on_the_input_both_skip_the_input_gradient() -> None:
    inputs = keras.Input((4, 5, 2))
    x = layers.Add()([_conv("a")(inputs), _conv("b")(inputs)])
    x = _conv("c")(x)
    rows = _rows(keras.Model(inputs, x))
    assert (rows["a"].backward, rows["b"].backward, rows["c"].backward) == (
        FIRST_BACKWARD,
        FIRST_BACKWARD,
        OTHER_BACKWARD,
    )


def _inner_model() -> keras.Model:
    inner_in = keras.Input((4, 5, 2))
    y = layers.BatchNormalization(name="bn")(_conv("conv")(inner_in))
    return keras.Model(inner_in, y, name="inner")


def test_nested_model_is_walked_through_its_layers() -> None:
    inputs = keras.Input((4, 5, 2))
    x = _inner_model()(inputs)
    x = _conv("after")(x)
    ops = count_model(keras.Model(inputs, x))
    rows = {row.name: row for row in ops.layers}
    assert "inner" not in rows
    assert rows["inner/conv"].forward == 1440 and rows["inner/conv"].backward == FIRST_BACKWARD
    assert rows["inner/bn"].forward == 7 * 40
    assert rows["after"].backward == OTHER_BACKWARD  # the nested conv is upstream
    assert ops.forward == sum(row.forward for row in ops.layers) == 1440 + 280 + 1440


def test_nested_model_sees_trainable_layers_of_the_outer_model() -> None:
    inputs = keras.Input((4, 5, 2))
    x = _inner_model()(_conv("before")(inputs))
    rows = _rows(keras.Model(inputs, x))
    assert rows["before"].backward == FIRST_BACKWARD
    assert rows["inner/conv"].backward == OTHER_BACKWARD


def test_nested_sequential_and_sequential_top_level() -> None:
    block = keras.Sequential(
        [keras.Input((4, 5, 2)), _conv("conv"), layers.ReLU(name="relu")], name="block"
    )
    inputs = keras.Input((4, 5, 2))
    rows = _rows(keras.Model(inputs, block(inputs)))
    assert rows["block/conv"].forward == 1440 and rows["block/relu"].forward == 40
    top = keras.Sequential([keras.Input((4, 5, 2)), _conv("conv"), layers.ReLU(name="relu")])
    assert count_model(top).forward == 1480


def test_nested_model_built_for_any_size_counts_the_size_it_is_called_with() -> None:
    inner_in = keras.Input((None, None, 2))
    inner = keras.Model(inner_in, _conv("conv")(inner_in), name="inner")
    inputs = keras.Input((4, 5, 2))
    rows = _rows(keras.Model(inputs, inner(inputs)))
    assert rows["inner/conv"].output_shape == (4, 5, 2)
    assert rows["inner/conv"].forward == 1440


def test_shared_layer_counts_once_per_call() -> None:
    a, b = keras.Input((20,)), keras.Input((20,))
    shared = layers.Dense(10, name="shared")
    model = keras.Model([a, b], layers.Add()([shared(a), shared(b)]))
    rows = count_model(model, "tensor").layers
    assert [r.name for r in rows if r.type == "Dense"] == ["shared", "shared#2"]
    assert count_model(model, "tensor").forward == 2 * 400


def test_non_square_input_shapes_flow_through() -> None:
    inputs = keras.Input((12, 20, 3))
    x = layers.Conv2D(4, 3, strides=2, padding="same")(inputs)
    rows = count_model(keras.Model(inputs, x)).layers
    assert rows[-1].output_shape == (6, 10, 4)
    assert rows[-1].forward == 2 * 60 * 9 * 3 * 4


def test_undefined_shape_is_an_error_unless_input_shape_is_given() -> None:
    inputs = keras.Input((None, None, 2))
    model = keras.Model(inputs, _conv("conv")(inputs))
    with pytest.raises(ValueError, match="undefined dimension"):
        count_model(model)
    assert count_model(model, input_shape=(4, 5, 2)).forward == 1440
    with pytest.raises(ValueError, match="does not fit"):
        count_model(model, input_shape=(4, 5, 3))


def test_count_all_gives_both_conventions() -> None:
    inputs = keras.Input((20,))
    model = keras.Model(inputs, layers.Dense(10, activation="softmax")(inputs))
    both = count_all(model)
    assert tuple(both) == CONVENTIONS
    assert (both["aiperf"].eval_per_sample, both["aiperf"].train_per_sample) == (529, 529 + 820)
    assert (both["tensor"].eval_per_sample, both["tensor"].train_per_sample) == (400, 1200)


def test_model_ops_to_dict() -> None:
    inputs = keras.Input((20,))
    ops = count_model(
        keras.Model(inputs, layers.Dense(10, activation="softmax", name="fc")(inputs))
    )
    assert isinstance(ops, ModelOps)
    as_dict = ops.to_dict()
    assert {
        k: as_dict[k]
        for k in ("convention", "forward", "backward", "eval_per_sample", "train_per_sample")
    } == {
        "convention": "aiperf",
        "forward": 529,
        "backward": 820,
        "eval_per_sample": 529,
        "train_per_sample": 1349,
    }
    assert as_dict["layers"][1] == {
        "name": "fc",
        "type": "Dense",
        "output_shape": [10],
        "forward": 529,
        "backward": 820,
    }


# ---------------------------------------------------------------------------------------------
# Errors


class Mystery(layers.Layer):
    def call(self, x):
        return x * 2.0


def test_unknown_layer_is_an_error_naming_it_and_its_type() -> None:
    inputs = keras.Input((4,))
    model = keras.Model(inputs, Mystery(name="foo")(layers.Dense(4)(inputs)))
    with pytest.raises(UnknownLayerError) as raised:
        count_model(model)
    assert str(raised.value) == (
        "no operation rule for layer 'foo' of type Mystery; add one in aiperf/ops/layer_costs.py"
    )
    assert isinstance(raised.value, ValueError)
    assert (raised.value.layer_name, raised.value.layer_type) == ("foo", "Mystery")


def test_subclass_of_a_known_layer_does_not_inherit_its_rule() -> None:
    class MyConv(layers.Conv2D):
        pass

    inputs = keras.Input((4, 4, 2))
    with pytest.raises(UnknownLayerError, match="of type MyConv"):
        count_model(keras.Model(inputs, MyConv(2, 3, name="mine")(inputs)))


def test_unknown_layer_inside_a_nested_model_is_named_with_its_path() -> None:
    inner_in = keras.Input((4,))
    inner = keras.Model(inner_in, Mystery(name="foo")(inner_in), name="inner")
    inputs = keras.Input((4,))
    with pytest.raises(UnknownLayerError, match="'inner/foo' of type Mystery"):
        count_model(keras.Model(inputs, inner(inputs)))


def test_raw_keras_op_in_a_graph_is_an_unknown_layer() -> None:
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.ops.exp(inputs))
    with pytest.raises(UnknownLayerError, match=r"of type keras\.src\.ops\..*Exp"):
        count_model(model)


def test_unknown_convention_names_the_valid_ones() -> None:
    inputs = keras.Input((4,))
    model = keras.Model(inputs, layers.Dense(2)(inputs))
    with pytest.raises(ValueError, match="'mlperf'.*'aiperf', 'tensor'"):
        count_model(model, "mlperf")


def test_models_without_a_graph_are_errors() -> None:
    with pytest.raises(ValueError, match="is not built"):
        count_model(keras.Sequential([layers.Dense(2)]))

    class Subclassed(keras.Model):
        def call(self, x):
            return x

    with pytest.raises(ValueError, match="has no layer graph"):
        count_model(Subclassed())
