"""`aiperf flops MODEL`: count a model's operations per sample and show them.

Registered by aiperf/cli/main.py with `app.command("flops")(flops)`. TensorFlow is imported only when
the command runs, so `aiperf --help` stays fast. Bad input (unknown model name, missing file,
malformed --input-shape, unknown layer or convention) is one line on stderr and exit code 2.
A model whose input is integer token ids (a GPT) is counted per sequence, and also per token.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer

from aiperf.ops.conventions import CONVENTIONS, check_convention
from aiperf.units import ops_per_sample

DEFAULT_INPUT_SHAPE = (224, 224, 3)
DEFAULT_CLASSES = 1000

# Built-in keras.applications models (weights=None: never pretrained), by CLI name.
APPLICATIONS = {
    "resnet50": "ResNet50",
    "mobilenetv2": "MobileNetV2",
    "densenet121": "DenseNet121",
    "efficientnetb0": "EfficientNetB0",
}


class _BadInput(Exception):
    """A user mistake, reported as one line naming the problem and the fix."""


def flops(
    model: str = typer.Argument(
        ...,
        help="A built-in model (resnet50, mobilenetv2, densenet121, efficientnetb0, "
        "or a seed model of the search), a saved .keras file, or an architecture "
        ".json file.",
    ),
    input_shape: str | None = typer.Option(
        None,
        "--input-shape",
        help="H,W,C of one input sample, or T (tokens) for a model of token ids. Default: "
        "224,224,3 for keras.applications models, the model's own otherwise.",
    ),
    classes: int | None = typer.Option(
        None,
        "--classes",
        help="Number of output classes. Default: 1000 for "
        "keras.applications models, the model's own otherwise.",
    ),
    convention: str = typer.Option(
        "aiperf",
        "--convention",
        help="aiperf (AIPerf's rules) or tensor "
        "(2 x conv/matmul multiply-adds; train = 3 x forward).",
    ),
    json_output: bool = typer.Option(
        False, "--json", help="Print one JSON object instead of a table."
    ),
) -> None:
    """Count a model's operations per sample (forward, backward, eval, train) layer by layer."""
    try:
        _check_convention(convention)
        shape = _parse_input_shape(input_shape)
        if classes is not None and classes < 1:
            raise _BadInput(
                f"--classes {classes} is not a positive number of classes; pass e.g. --classes 1000"
            )
        keras_model = _resolve_model(model, shape, classes)
        ops = _count(keras_model, convention, model, shape)
    except _BadInput as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(2) from None

    if json_output:
        result = {
            "model": model,
            "input_shape": list(_input_shape_of(keras_model, shape)),
            **ops.to_dict(),
        }
        tokens = _tokens_per_sample(keras_model, shape)
        if tokens is not None:  # a sample is one sequence; per token is per sample / T
            result["tokens_per_sample"] = tokens
            result["eval_per_token"] = ops.eval_per_sample / tokens
            result["train_per_token"] = ops.train_per_sample / tokens
        typer.echo(json.dumps(result))
    else:
        _print_table(model, keras_model, ops, shape)


# ---------------------------------------------------------------------------------------------


def _check_convention(convention: str) -> None:
    try:
        check_convention(convention)
    except ValueError:
        raise _BadInput(
            f"unknown convention {convention!r}; pass --convention "
            f"{' or --convention '.join(CONVENTIONS)}"
        ) from None


def _parse_input_shape(text: str | None) -> tuple[int, ...] | None:
    """H,W,C of an image, or T, the sequence length of a model whose input is token ids."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (1, 3) or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise _BadInput(
            f"--input-shape {text!r} is not H,W,C (three positive integers separated by commas) "
            "nor T (the sequence length of a token model); pass e.g. --input-shape 224,224,3 "
            "or --input-shape 1024"
        )
    return tuple(int(p) for p in parts)


def _resolve_model(name: str, shape: tuple[int, ...] | None, classes: int | None) -> Any:
    # Keep TensorFlow's start-up chatter off stderr, where our one-line errors go. The oneDNN
    # notice ignores TF_CPP_MIN_LOG_LEVEL; switching oneDNN off is harmless here: nothing runs.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    path = Path(name)
    if name.lower() in APPLICATIONS:
        return _build(name, lambda: _application(name.lower(), shape, classes))
    if path.suffix in (".keras", ".json") or path.exists():
        if not path.exists():
            raise _BadInput(f"model file {name} does not exist; check the path")
        if not path.is_file():
            raise _BadInput(
                f"{name} is not a model file; pass a saved .keras model or an architecture .json"
            )
        if path.suffix == ".keras":
            return _load_keras(path, classes)
        if path.suffix == ".json":
            return _load_spec(path, shape, classes)
        raise _BadInput(
            f"cannot count {name}: a model file must be a saved .keras model or an architecture .json"
        )
    return _seed(name, shape, classes)


def _build(what: str, build: Any) -> Any:
    """Build a model; anything Keras or the builder rejects is the user's input, in one line."""
    from aiperf.errors import UserError

    try:
        return build()
    except _BadInput:
        raise
    except (UserError, ValueError, TypeError, KeyError) as error:
        raise _BadInput(f"cannot build {what}: {_first_line(error)}") from None


def _application(name: str, shape: tuple[int, ...] | None, classes: int | None) -> Any:
    import keras

    build = getattr(keras.applications, APPLICATIONS[name])
    return build(
        weights=None, input_shape=shape or DEFAULT_INPUT_SHAPE, classes=classes or DEFAULT_CLASSES
    )


def _load_keras(path: Path, classes: int | None) -> Any:
    import keras

    import aiperf.arch.keras_layers  # noqa: F401  registers aiperf's own layers (PositionEmbedding) for loading

    try:
        # safe_mode: a user's file never runs its own Python (a Lambda layer's code, a pickled
        # function); Keras >= 3.11.3 closes the known ways around it (pyproject's floor).
        model = keras.saving.load_model(path, compile=False, safe_mode=True)
    except Exception as error:  # a corrupt or foreign file: Keras raises many types
        if "safe_mode" in str(error):
            raise _BadInput(
                f"cannot load {path}: it holds Python code (a Lambda layer or a custom function), "
                "which aiperf never runs from a file; save the model without it"
            ) from None
        raise _BadInput(
            f"cannot load {path}: {_first_line(error)}; pass a model saved with model.save()"
        ) from None
    out = model.outputs[0].shape[-1] if getattr(model, "outputs", None) else None
    if classes is not None and classes != out:
        raise _BadInput(
            f"{path} has {out} outputs, not --classes {classes}; a saved model's classes are "
            "fixed, drop --classes"
        )
    return model


def _load_spec(path: Path, shape: tuple[int, ...] | None, classes: int | None) -> Any:
    try:
        from aiperf.arch import build_model, load_spec
    except ImportError:
        raise _BadInput(
            f"cannot read {path}: architecture files need aiperf.arch, which is not installed"
        ) from None
    return _build(
        f"the architecture in {path}",
        lambda: build_model(
            load_spec(path), input_shape=_image_shape(shape, str(path)), num_classes=classes
        ),
    )


def _seed(name: str, shape: tuple[int, ...] | None, classes: int | None) -> Any:
    try:
        from aiperf.arch import build_seed, seed_names
    except ImportError:
        seeds: list[str] = []
    else:
        seeds = list(seed_names())
    if name not in seeds:
        known = ", ".join([*APPLICATIONS, *seeds])
        raise _BadInput(
            f"unknown model {name!r}; pass one of {known}, a .keras file or an architecture .json file"
        )
    # None leaves a seed's own input shape and classes (those of the benchmark's data).
    return _build(
        f"seed model {name!r}", lambda: build_seed(name, _image_shape(shape, name), classes)
    )


def _image_shape(shape: tuple[int, ...] | None, what: str) -> tuple[int, int, int] | None:
    """The H,W,C a builder of image models takes; a sequence length T is for saved token models."""
    if shape is None:
        return None
    if len(shape) != 3:
        raise _BadInput(
            f"{what} takes images: pass --input-shape H,W,C (e.g. 224,224,3), not a sequence length"
        )
    height, width, channels = shape
    return height, width, channels


def _count(keras_model: Any, convention: str, name: str, shape: tuple[int, ...] | None) -> Any:
    from aiperf.ops import UnknownLayerError, count_model

    built = tuple(keras_model.inputs[0].shape[1:]) if getattr(keras_model, "inputs", None) else ()
    extra = {"input_shape": shape} if shape is not None and None in built else {}
    if shape is not None and None not in built and built != shape:
        raise _BadInput(
            f"{name} is built for inputs of shape {','.join(map(str, built))}, not --input-shape "
            f"{','.join(map(str, shape))}; drop --input-shape or pass the built shape"
        )
    try:
        return count_model(keras_model, convention, **extra)
    except UnknownLayerError as error:
        raise _BadInput(str(error)) from None
    except ValueError as error:
        raise _BadInput(f"cannot count {name}: {_first_line(error)}") from None


def _input_shape_of(keras_model: Any, shape: tuple[int, ...] | None) -> tuple:
    return shape or tuple(keras_model.inputs[0].shape[1:])


def _tokens_per_sample(keras_model: Any, shape: tuple[int, ...] | None) -> int | None:
    """T for a model whose one input is a sequence of integer token ids, else None."""
    inputs = getattr(keras_model, "inputs", None)
    if not inputs or len(inputs) != 1 or "int" not in str(inputs[0].dtype):
        return None
    sequence = _input_shape_of(keras_model, shape)
    return sequence[0] if len(sequence) == 1 else None


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def _print_table(
    name: str, keras_model: Any, ops: Any, input_shape: tuple[int, ...] | None
) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{name}: operations per sample, convention {ops.convention!r}")
    table.add_column("#", justify="right", style="dim")
    table.add_column("layer", overflow="fold")
    table.add_column("type", overflow="fold")
    table.add_column("output shape")
    table.add_column("forward", justify="right")
    table.add_column("backward", justify="right")
    for index, layer in enumerate(ops.layers):
        table.add_row(
            str(index),
            layer.name,
            layer.type,
            _shape_text(layer.output_shape),
            f"{layer.forward:,}",
            f"{layer.backward:,}",
        )
    table.add_section()
    table.add_row("", "total", "", "", f"{ops.forward:,}", f"{ops.backward:,}", style="bold")
    console = Console()
    console.print(table)
    # The shape counted: --input-shape where the model leaves dimensions open.
    shape = ",".join(map(str, _input_shape_of(keras_model, input_shape)))
    eval_, train = ops.eval_per_sample, ops.train_per_sample
    console.print(
        f"input shape {shape}; eval per sample [bold]{eval_:,}[/bold] ({ops_per_sample(eval_)})  "
        f"train per sample [bold]{train:,}[/bold] ({ops_per_sample(train)})  "
        f"({ops.convention} convention)"
    )
    tokens = _tokens_per_sample(keras_model, input_shape)
    if tokens is not None:
        console.print(
            f"a sample is a sequence of {tokens} tokens; per token: eval {eval_ / tokens:,.1f}  "
            f"train {train / tokens:,.1f}"
        )


def _shape_text(shape: tuple) -> str:
    if shape and isinstance(shape[0], tuple):
        return " ".join(_shape_text(s) for s in shape)
    return "(" + ", ".join(map(str, shape)) + ")"
