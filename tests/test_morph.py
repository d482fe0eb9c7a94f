"""Each morphism keeps the model valid and changes its operation count exactly as docs/flops.md predicts."""

import random

import pytest

from aiperf.arch import build_model, count_params, infer_shapes, seed_spec
from aiperf.arch.morph import (
    Limits,
    Morphism,
    apply,
    deepen,
    random_morphism,
    skip,
    skip_pairs,
    widen,
    widenable,
)
from aiperf.ops import count_model


def ops(net):
    return count_model(build_model(net), "aiperf")


@pytest.fixture(scope="module")
def seed():
    return seed_spec("resnet-mini", (16, 16, 3), 10)


def test_deepen_adds_conv_bn_relu_with_predicted_operations(seed):
    h, w, c = infer_shapes(seed)["stage2_block1_out"]
    child = deepen(seed, "stage2_block1_out", kernel=5)
    before, after = ops(seed), ops(child)
    area = h * w
    forward = 2 * area * 25 * c * c + 7 * area * c + area * c  # conv + BN + ReLU
    backward = 25 * c * c * (4 * area + 2) + 36  # conv (not the first) + BN
    assert after.forward - before.forward == forward
    assert after.backward - before.backward == backward
    assert child.history[-1] == "deepen(after=stage2_block1_out,kernel=5)"
    assert build_model(child).output_shape == (None, 10)


def test_widen_doubles_one_convolution_and_its_consumers_follow(seed):
    conv = "stage2_block1_1_conv"
    assert conv in widenable(seed)
    child = widen(seed, conv)
    shapes = infer_shapes(seed)
    (h, w, f), cin = shapes[conv], shapes["stage1_block1_out"][-1]
    h2, w2, f2 = shapes["stage2_block1_2_conv"]  # the next conv, whose input doubles
    before, after = ops(seed), ops(child)
    expected = (
        2 * h * w * 9 * cin * f  # the widened conv's own extra filters
        + 7 * h * w * f
        + h * w * f  # its BN and ReLU on twice the channels
        + 2 * h2 * w2 * 9 * f * f2
    )  # the next conv reads twice the channels
    assert after.forward - before.forward == expected
    assert build_model(child).count_params() > build_model(seed).count_params()


def test_widen_refuses_a_convolution_that_feeds_an_add(seed):
    assert "stage2_block1_2_conv" not in widenable(seed)
    with pytest.raises(ValueError, match="cannot be widened"):
        widen(seed, "stage2_block1_2_conv")
    last_conv = [n.id for n in seed.nodes if n.kind == "conv"][-1]
    assert last_conv not in widenable(seed)


def test_skip_with_projection_when_sizes_differ(seed):
    source, target = "stem_relu", "stage3_block1_out"
    assert (source, target) in skip_pairs(seed)
    child = skip(seed, source, target)
    (_hs, _ws, cs), (ht, wt, ct) = infer_shapes(seed)[source], infer_shapes(seed)[target]
    before, after = ops(seed), ops(child)
    stride_area = ht * wt
    forward = (
        2 * stride_area * cs * ct + 7 * stride_area * ct + stride_area * ct
    )  # 1x1 conv, BN, add
    assert after.forward - before.forward == forward
    assert after.backward - before.backward == cs * ct * (4 * stride_area + 2) + 36
    assert child.skip_count == seed.skip_count + 1


def test_skip_without_projection_when_shapes_match(seed):
    grown = deepen(seed, "stage1_block1_out", 3)
    child = skip(grown, "stage1_block1_out", "m1_relu")
    area_c = 1
    for d in infer_shapes(grown)["m1_relu"]:
        area_c *= d
    assert ops(child).forward - ops(grown).forward == area_c  # just the add
    assert not any(n.id.endswith("proj_conv") for n in child.nodes if n.id.startswith("m2"))


def test_recorded_morphisms_replay_exactly_and_respect_limits(seed):
    rng = random.Random(4)
    net = seed
    for _ in range(25):
        child = random_morphism(net, rng, 3, Limits())
        assert apply(net, Morphism.parse(child.history[-1])) == child
        net = child
    build_model(net)
    # Every operator adds layers or weights: at the seed's own size nothing is within the limits.
    at_seed = Limits(max_layers=len(seed.nodes), max_params=count_params(seed))
    assert random_morphism(seed, rng, 3, at_seed) is None
