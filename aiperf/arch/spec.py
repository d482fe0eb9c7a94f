"""ResNet families as a few numbers (stages of basic or bottleneck blocks), and loading specs.

An ArchSpec is how keras-tuner's own oracles describe a network (a handful of hyperparameters);
`to_network()` expands it into the graph (graph.py) that every trial stores and builds.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from aiperf.arch.compose import Composer, ConvStyle
from aiperf.arch.graph import Network, image_shape
from aiperf.errors import UserError

BlockKind = Literal["basic", "bottleneck"]


@dataclass(frozen=True)
class StageSpec:
    """A run of residual blocks at one resolution; the first block applies the stride."""

    blocks: int
    filters: int
    stride: int = 1


@dataclass(frozen=True)
class ArchSpec:
    input_shape: tuple[int, int, int]
    num_classes: int
    stages: tuple[StageSpec, ...]
    block: BlockKind = "basic"
    stem_filters: int = 16
    stem_kernel: int = 3
    stem_stride: int = 1
    stem_pool: bool = False
    kernel_size: int = 3
    # Moving statistics that follow training quickly: with small data sets and few steps an
    # epoch, Keras' default 0.99 leaves evaluation-mode accuracy far behind training-mode.
    bn_momentum: float = 0.9
    name: str = field(default="resnet", compare=False)

    def __post_init__(self) -> None:
        problems = []
        if len(self.input_shape) != 3 or min(self.input_shape) < 1:
            problems.append(
                f"input_shape must be (height, width, channels), got {self.input_shape}"
            )
        if self.num_classes < 2:
            problems.append(f"num_classes must be at least 2, got {self.num_classes}")
        if not self.stages:
            problems.append("at least one stage is needed")
        if any(s.blocks < 1 or s.filters < 1 or s.stride < 1 for s in self.stages):
            problems.append("every stage needs blocks >= 1, filters >= 1 and stride >= 1")
        if self.block not in ("basic", "bottleneck"):
            problems.append(f"block must be 'basic' or 'bottleneck', got {self.block!r}")
        if self.kernel_size < 1 or self.stem_kernel < 1:
            problems.append("kernel sizes must be positive")
        if problems:
            raise ValueError("invalid architecture: " + "; ".join(problems))

    def with_io(
        self, input_shape: tuple[int, int, int] | None = None, num_classes: int | None = None
    ) -> ArchSpec:
        return replace(
            self,
            input_shape=image_shape(input_shape or self.input_shape),
            num_classes=num_classes or self.num_classes,
        )

    def to_network(self) -> Network:
        g = Composer()
        bn = ConvStyle(momentum=self.bn_momentum)
        x = g.conv_bn(
            "input", "stem", self.stem_filters, self.stem_kernel, self.stem_stride, style=bn
        )
        if self.stem_pool:
            x = g.add("stem_pool", "maxpool", x, pool=3, stride=2, padding="same")
        channels = self.stem_filters
        for s, stage in enumerate(self.stages, start=1):
            for b in range(1, stage.blocks + 1):
                stride = stage.stride if b == 1 else 1
                name = f"stage{s}_block{b}"
                out_channels = stage.filters * (4 if self.block == "bottleneck" else 1)
                if self.block == "basic":
                    y = g.conv_bn(
                        x, f"{name}_1", stage.filters, self.kernel_size, stride, style=bn
                    )
                    y = g.conv_bn(
                        y, f"{name}_2", stage.filters, self.kernel_size, relu=False, style=bn
                    )
                else:
                    y = g.conv_bn(x, f"{name}_1", stage.filters, 1, stride, style=bn)
                    y = g.conv_bn(y, f"{name}_2", stage.filters, self.kernel_size, style=bn)
                    y = g.conv_bn(y, f"{name}_3", out_channels, 1, relu=False, style=bn)
                shortcut = x
                if stride != 1 or channels != out_channels:
                    shortcut = g.conv_bn(
                        x, f"{name}_proj", out_channels, 1, stride, relu=False, style=bn
                    )
                y = g.add(f"{name}_add", "add", [shortcut, y])
                x = g.add(f"{name}_out", "relu", y)
                channels = out_channels
        x = g.add("pool", "gap", x)
        g.add("predictions", "dense", x, units="classes", activation="softmax")
        return g.network(self.name, self.input_shape, self.num_classes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["input_shape"] = list(self.input_shape)
        data["stages"] = [asdict(s) for s in self.stages]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ArchSpec:
        data = dict(data)
        data["input_shape"] = tuple(data["input_shape"])
        data["stages"] = tuple(StageSpec(**s) for s in data["stages"])
        return cls(**data)


def network_from_dict(data: dict[str, Any]) -> Network:
    """A network from either stored form: a graph ('nodes') or a family spec ('stages')."""
    if "nodes" in data:
        return Network.from_dict(data)
    return ArchSpec.from_dict(data).to_network()


def load_spec(path: str | Path) -> Network:
    """Read an architecture JSON file; a bad file is the user's mistake, said in one line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"architecture file {path} does not exist")
    try:
        return network_from_dict(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"architecture file {path} is not a valid aiperf spec: {exc}") from None
