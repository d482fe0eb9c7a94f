"""The published references of docs/flops.md, to the unit: keras.applications.ResNet50
(weights=None, 224x224x3, 1000 classes) costs 7,806,583,495 operations per evaluated image and
23,053,458,315 per trained image under the aiperf convention (AIPerf's 7.807 G and 23.053 G), and
7,715,946,496 forward under the tensor convention."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402

from aiperf.ops import count_all  # noqa: E402


@pytest.fixture(scope="module")
def resnet50_ops():
    model = keras.applications.ResNet50(weights=None, input_shape=(224, 224, 3), classes=1000)
    return count_all(model)


def test_resnet50_aiperf_convention_matches_aiperf_published_figures(resnet50_ops) -> None:
    ops = resnet50_ops["aiperf"]
    assert ops.eval_per_sample == 7_806_583_495
    assert ops.train_per_sample == 23_053_458_315


def test_resnet50_tensor_convention_matches_the_profiler_figure(resnet50_ops) -> None:
    ops = resnet50_ops["tensor"]
    assert ops.forward == 7_715_946_496
    assert ops.train_per_sample == 3 * 7_715_946_496


def test_resnet50_first_conv_and_classifier(resnet50_ops) -> None:
    rows = {row.name: row for row in resnet50_ops["aiperf"].layers}
    # conv1: 7x7x3x64 at 112x112, no input gradient: K^2*Cin*Cout*(2*O^2 + 2)
    assert rows["conv1_conv"].forward == 2 * 112 * 112 * 49 * 3 * 64
    assert rows["conv1_conv"].backward == 49 * 3 * 64 * (2 * 112 * 112 + 2)
    # conv2_block1_1_conv: 1x1x64x64 at 56x56, the input gradient counted
    assert rows["conv2_block1_1_conv"].backward == 64 * 64 * (4 * 56 * 56 + 2)
    # predictions: Dense 2048 -> 1000 with softmax
    assert rows["predictions"].forward == 2 * 2048 * 1000 + 13 * 1000 - 1
    assert rows["predictions"].backward == 4 * 2048 * 1000 + 2 * 2049 * 1000
    assert rows["avg_pool"].forward == (7 * 7 - 1) * 2048 + 4 * 2048
    assert len(resnet50_ops["aiperf"].layers) == len(
        keras.applications.ResNet50(weights=None).layers
    )
