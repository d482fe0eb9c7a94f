"""`aiperf flops`, through a Typer app that registers the command the way aiperf/cli/main.py does."""

from __future__ import annotations

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402
import typer  # noqa: E402
from keras import layers  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from aiperf.cli import flops as ops_cli  # noqa: E402
from aiperf.ops import count_model  # noqa: E402

app = typer.Typer()
app.command("flops")(ops_cli.flops)


@app.command("other")
def _other() -> None:  # a second command, so "flops" is a subcommand as in the real CLI
    pass


runner = CliRunner()


def flops(*args: str):
    return runner.invoke(app, ["flops", *args])


def flops_json(*args: str) -> dict:
    result = flops(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0]


def small_model(input_shape=(12, 10, 3)) -> keras.Model:
    inputs = keras.Input(input_shape, name="pixels")
    x = layers.Conv2D(4, 3, padding="same", name="conv")(inputs)
    x = layers.BatchNormalization(name="bn")(x)
    x = layers.Activation("relu", name="relu")(x)
    x = layers.GlobalAveragePooling2D(name="gap")(x)
    return keras.Model(inputs, layers.Dense(5, activation="softmax", name="fc")(x))


@pytest.fixture
def saved_model(tmp_path):
    path = tmp_path / "small.keras"
    small_model().save(path)
    return path


# ---------------------------------------------------------------------------------------------


def test_resnet50_json_gives_the_published_figures() -> None:
    data = flops_json("resnet50", "--input-shape", "224,224,3", "--classes", "1000")
    assert data["convention"] == "aiperf"
    assert data["eval_per_sample"] == data["forward"] == 7_806_583_495
    assert data["train_per_sample"] == data["forward"] + data["backward"] == 23_053_458_315
    assert len(data["layers"]) == 177
    assert data["layers"][2] == {
        "name": "conv1_conv",
        "type": "Conv2D",
        "output_shape": [112, 112, 64],
        "forward": 236_027_904,
        "backward": 236_046_720,
    }


def test_resnet50_tensor_convention_by_default_shape() -> None:
    data = flops_json("resnet50", "--convention", "tensor")
    assert data["forward"] == 7_715_946_496
    assert data["train_per_sample"] == 3 * 7_715_946_496
    assert data["input_shape"] == [224, 224, 3]


def test_saved_keras_file_counts_like_the_model(saved_model) -> None:
    expected = count_model(small_model())
    data = flops_json(str(saved_model))
    assert (data["forward"], data["backward"]) == (expected.forward, expected.backward)
    assert [row["name"] for row in data["layers"]] == ["pixels", "conv", "bn", "relu", "gap", "fc"]
    assert (
        flops_json(str(saved_model), "--input-shape", "12,10,3", "--classes", "5")["forward"]
        == expected.forward
    )


def test_table_output(saved_model) -> None:
    result = flops(str(saved_model), "--convention", "tensor")
    assert result.exit_code == 0, result.output
    expected = count_model(small_model(), "tensor")
    for text in (
        "conv",
        "Conv2D",
        "(12, 10, 4)",
        "total",
        f"{expected.forward:,}",
        f"{expected.train_per_sample:,}",
        "tensor",
    ):
        assert text in result.stdout


def test_saved_model_with_open_input_shape_takes_input_shape(tmp_path) -> None:
    path = tmp_path / "open.keras"
    small_model((None, None, 3)).save(path)
    data = flops_json(str(path), "--input-shape", "12,10,3")
    assert data["forward"] == count_model(small_model()).forward
    assert data["input_shape"] == [12, 10, 3]
    assert_one_line_error(flops(str(path)), "undefined dimension")


def test_seed_model_and_architecture_file(tmp_path) -> None:
    arch = pytest.importorskip("aiperf.arch", reason="seed models need aiperf.arch")
    name = arch.seed_names()[0]
    expected = count_model(arch.build_seed(name, (32, 40, 3), 7))
    assert (
        flops_json(name, "--input-shape", "32,40,3", "--classes", "7")["forward"]
        == expected.forward
    )
    spec_file = tmp_path / "arch.json"
    spec_file.write_text(arch.seed_spec(name).to_json())
    assert (
        flops_json(str(spec_file), "--input-shape", "32,40,3", "--classes", "7")["forward"]
        == expected.forward
    )


# ---------------------------------------------------------------------------------------------
# Bad input: one line on stderr naming the problem and the fix, exit code 2


def test_unknown_model_name() -> None:
    assert_one_line_error(flops("resnet51"), "unknown model 'resnet51'", "resnet50", ".keras")


def test_missing_file(tmp_path) -> None:
    assert_one_line_error(flops(str(tmp_path / "gone.keras")), "does not exist", "gone.keras")
    assert_one_line_error(flops(str(tmp_path / "gone.json")), "does not exist")


def test_unreadable_files(tmp_path) -> None:
    bad = tmp_path / "bad.keras"
    bad.write_text("not a zip")
    assert_one_line_error(flops(str(bad)), "cannot load", "bad.keras")
    other = tmp_path / "model.h5"
    other.write_text("x")
    assert_one_line_error(flops(str(other)), ".keras", ".json")
    assert_one_line_error(flops(str(tmp_path)), "not a model file")


@pytest.mark.parametrize(
    "shape", ["224x224x3", "224,224", "224,224,3,1", "a,b,c", "0,224,3", "-1,2,3", ""]
)
def test_malformed_input_shape(shape: str) -> None:
    assert_one_line_error(flops("resnet50", "--input-shape", shape), "--input-shape", "224,224,3")


def test_input_shape_a_builtin_cannot_take() -> None:
    assert_one_line_error(
        flops("resnet50", "--input-shape", "8,8,3"), "cannot build resnet50", "32"
    )


def test_input_shape_or_classes_not_matching_a_saved_model(saved_model) -> None:
    assert_one_line_error(
        flops(str(saved_model), "--input-shape", "32,32,3"), "12,10,3", "drop --input-shape"
    )
    assert_one_line_error(flops(str(saved_model), "--classes", "10"), "drop --classes")
    assert_one_line_error(flops("resnet50", "--classes", "0"), "--classes")


def test_unknown_convention() -> None:
    assert_one_line_error(
        flops("resnet50", "--convention", "mlperf"), "'mlperf'", "--convention aiperf"
    )


class Mystery(layers.Layer):
    def call(self, x):
        return x


def test_unknown_layer(monkeypatch) -> None:
    inputs = keras.Input((4,))
    model = keras.Model(inputs, Mystery(name="foo")(inputs))
    monkeypatch.setattr(ops_cli, "_resolve_model", lambda name, shape, classes: model)
    assert_one_line_error(
        flops("anything"), "layer 'foo' of type Mystery", "aiperf/ops/layer_costs.py"
    )
