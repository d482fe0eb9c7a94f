"""The layers of docs/design.md hold: import-linter's contracts in pyproject.toml (imports inside
functions count) pass on the tree, and fail as soon as a lower part imports a higher one; and
aiperf/ keeps at most 8 modules of its own beside its packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


# aiperf/'s modules outside its packages are the bases every layer may import (errors, settings,
# paths, ...). Held at 8 so that the next feature's module goes into the package it belongs to
# instead of beside them (issue 50: two arrived after the last pass had set 8).
MAX_TOP_LEVEL_MODULES = 8
NOT_MODULES = {"__init__.py", "__main__.py"}


def _top_level_modules(package: Path) -> list[str]:
    return sorted(path.name for path in package.glob("*.py") if path.name not in NOT_MODULES)


def _too_many_top_level_modules(package: Path) -> str | None:
    """Why `package` has too many top-level modules, or None."""
    modules = _top_level_modules(package)
    if len(modules) <= MAX_TOP_LEVEL_MODULES:
        return None
    return (
        f"{package.name}/ has {len(modules)} top-level modules ({', '.join(modules)}), at most "
        f"{MAX_TOP_LEVEL_MODULES}: put the new one in the package it belongs to"
    )


def test_aiperf_has_at_most_eight_top_level_modules() -> None:
    assert _too_many_top_level_modules(ROOT / "aiperf") is None


def test_a_ninth_top_level_module_fails(tmp_path: Path) -> None:
    package = tmp_path / "aiperf"
    package.mkdir()
    for name in ["__init__.py", "__main__.py", *(f"m{i}.py" for i in range(8))]:
        (package / name).write_text("")
    (package / "sub").mkdir()
    (package / "sub" / "inner.py").write_text("")
    assert _too_many_top_level_modules(package) is None
    (package / "ninth.py").write_text("")
    assert "has 9 top-level modules" in (_too_many_top_level_modules(package) or "")


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
