"""Architecture specs: JSON round-trip, validation, the one builder, and the seeds."""

import json

import keras
import pytest

from aiperf.arch import (
    ArchSpec,
    Network,
    StageSpec,
    build_model,
    count_params,
    load_spec,
    seed_names,
    seed_spec,
)
from aiperf.arch.graph import Node
from aiperf.errors import UserError


def test_network_json_round_trip():
    net = seed_spec("resnet-mini", (24, 24, 3), 7)
    again = Network.from_json(net.to_json())
    assert again == net and again.to_json() == net.to_json()
    assert again.topology_key() == net.topology_key()


@pytest.mark.parametrize("shape, classes", [((16, 16, 3), 10), ((40, 24, 1), 3)])
def test_builder_takes_any_input_shape_and_class_count(shape, classes):
    model = build_model(seed_spec("resnet-mini"), shape, classes)
    assert tuple(model.input_shape[1:]) == shape and model.output_shape == (None, classes)
    assert model.count_params() == count_params(seed_spec("resnet-mini", shape, classes))


def test_resnet50_seed_is_keras_resnet50_layer_for_layer():
    ours = build_model(seed_spec("resnet50", (64, 64, 3), 10))
    reference = keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10)
    assert [type(layer).__name__ for layer in ours.layers] == [
        type(layer).__name__ for layer in reference.layers
    ]
    assert [layer.name for layer in ours.layers[1:]] == [
        layer.name for layer in reference.layers[1:]
    ]
    assert [tuple(layer.output.shape) for layer in ours.layers] == [
        tuple(layer.output.shape) for layer in reference.layers
    ]
    assert (
        ours.count_params()
        == reference.count_params()
        == count_params(seed_spec("resnet50", (64, 64, 3), 10))
    )


def test_family_spec_expands_to_a_graph():
    spec = ArchSpec((32, 32, 3), 10, (StageSpec(2, 8, 1), StageSpec(1, 16, 2)), block="bottleneck")
    net = spec.to_network()
    assert net.conv_count == 1 + 3 * 3 + 2  # stem, three bottlenecks, two projections
    assert net.skip_count == 3
    assert build_model(spec).count_params() == count_params(net)


def test_invalid_graphs_are_refused():
    good = seed_spec("resnet-mini")
    with pytest.raises(ValueError, match="not defined before"):
        Network(
            good.name,
            good.input_shape,
            good.num_classes,
            (good.nodes[0], Node("x", "relu", ("nope",)), good.nodes[-1]),
        )
    with pytest.raises(ValueError, match="add of different shapes"):
        nodes = list(good.nodes[:-1])
        nodes.insert(4, Node("bad_add", "add", ("input", "stem_relu")))
        Network(good.name, good.input_shape, good.num_classes, tuple(nodes) + (good.nodes[-1],))


def test_load_spec_reads_both_forms_and_reports_bad_files(tmp_path):
    graph_file = tmp_path / "net.json"
    graph_file.write_text(seed_spec("resnet-mini").to_json())
    family_file = tmp_path / "family.json"
    family_file.write_text(json.dumps(ArchSpec((32, 32, 3), 10, (StageSpec(1, 8, 1),)).to_dict()))
    assert load_spec(graph_file) == seed_spec("resnet-mini")
    assert (
        load_spec(family_file).conv_count == 4
    )  # stem (16 filters), two block convs, a projection to 8
    broken = tmp_path / "broken.json"
    broken.write_text(
        '{"nodes": [{"id": "x", "kind": "warp"}], "input_shape": [8, 8, 3], "num_classes": 2}'
    )
    with pytest.raises(UserError, match="not a valid aiperf spec"):
        load_spec(broken)
    assert "resnet50" in seed_names()
