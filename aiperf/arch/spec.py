"""Architecture spec: plain data describing a ResNet-family network, with a JSON round-trip.

A spec is what the search proposes, what a worker builds and what the database stores, so it is
frozen, hashable, and holds nothing but numbers and names. The builder (builder.py) is the one
place that turns it into a Keras model.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

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
    dropout: float = 0.0
    name: str = field(default="resnet", compare=False)

    def __post_init__(self) -> None:
        problems = []
        if len(self.input_shape) != 3 or min(self.input_shape) < 1:
            problems.append(f"input_shape must be (height, width, channels), got {self.input_shape}")
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
        if not 0.0 <= self.dropout < 1.0:
            problems.append(f"dropout must be in [0, 1), got {self.dropout}")
        if problems:
            raise ValueError("invalid architecture: " + "; ".join(problems))

    def with_io(self, input_shape: tuple[int, int, int] | None = None,
                num_classes: int | None = None) -> ArchSpec:
        """The same network for another input shape or class count."""
        return replace(self, input_shape=tuple(input_shape or self.input_shape),
                       num_classes=num_classes or self.num_classes)

    @property
    def depth(self) -> int:
        """Weighted layers on the main path (stem conv + block convs + head), as ResNet names count."""
        per_block = 2 if self.block == "basic" else 3
        return 1 + per_block * sum(s.blocks for s in self.stages) + 1

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

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ArchSpec:
        return cls.from_dict(json.loads(text))


def load_spec(path: str | Path) -> ArchSpec:
    """Read an architecture JSON file; a bad file is the user's mistake, said in one line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"architecture file {path} does not exist")
    try:
        return ArchSpec.from_json(path.read_text())
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"architecture file {path} is not a valid aiperf spec: {exc}") from None
