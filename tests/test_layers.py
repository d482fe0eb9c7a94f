"""The layers of docs/design.md hold: import-linter's contracts in pyproject.toml (imports inside
functions count) pass on the tree, and fail as soon as a lower part imports a higher one."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of aiperf/, flows/ and the contracts, to break without touching the checkout."""
    for name in ("aiperf", "flows"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def _append(path: Path, code: str) -> None:
    path.write_text(path.read_text() + "\n\n" + code)


def test_the_tree_keeps_its_layers(tree: Path) -> None:
    result = _lint(tree)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def test_a_lower_layer_importing_a_higher_one_inside_a_function_fails(tree: Path) -> None:
    _append(
        tree / "aiperf" / "store" / "records.py",
        "def _upward() -> None:\n    from aiperf.lifecycle import run  # noqa: F401\n",
    )
    result = _lint(tree)
    assert result.returncode != 0
    assert "aiperf.store is not allowed to import aiperf.lifecycle" in result.stdout


def test_a_cycle_between_two_modules_of_one_package_fails(tree: Path) -> None:
    """Within a layer imports may go either way, but never both: run.py builds on liveness.py."""
    _append(
        tree / "aiperf" / "lifecycle" / "liveness.py",
        "def _back() -> None:\n    from aiperf.lifecycle import run  # noqa: F401\n",
    )
    result = _lint(tree)
    assert result.returncode != 0
    assert "No cycles are allowed in aiperf.lifecycle" in result.stdout
