"""The layers of docs/design.md hold: import-linter's contracts in pyproject.toml (imports inside
functions count) pass on the tree, and fail as soon as a lower part imports a higher one; and
aiperf/ keeps at most 8 modules of its own beside its packages."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import textwrap
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


# --- the import diagram in docs/design.md, generated from the code -----------------------------

DIAGRAM_START = "<!-- imports: generated from the code; tests/test_layers.py holds it -->"


def _part(module: str) -> str | None:
    """The part of aiperf (a package or top-level module, or flows) a module name is in."""
    names = module.split(".")
    if names[0] == "aiperf_flows":
        return "flows"
    if names[0] != "aiperf" or len(names) < 2 or names[1].startswith("__"):
        return None
    return names[1]


def _imported(path: Path) -> set[str]:
    """The modules `path` imports, at its top or inside its functions (absolute imports only)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def imports_of_parts(root: Path = ROOT) -> dict[str, set[str]]:
    """Each part of aiperf (and flows) -> the other parts its code imports."""
    edges: dict[str, set[str]] = {}
    for path in sorted((root / "aiperf").rglob("*.py")) + sorted((root / "flows").rglob("*.py")):
        inside = path.relative_to(root).parts
        me = "flows" if inside[0] == "flows" else _part(".".join(inside[:2]).removesuffix(".py"))
        if me is None:
            continue
        targets = {_part(module) for module in _imported(path)} - {None, me}
        edges.setdefault(me, set()).update(t for t in targets if t is not None)
    return edges


def diagram(edges: dict[str, set[str]]) -> str:
    """One entry per part: what it imports, wrapped at 100 columns; the parts that import most
    first."""
    order = sorted(edges, key=lambda part: (-len(edges[part]), part))
    width = max(map(len, order))
    lines = []
    for part in order:
        head = f"    {part:<{width}} -> "
        lines += textwrap.wrap(
            ", ".join(sorted(edges[part])) or "(nothing of aiperf)",
            width=100,
            initial_indent=head,
            subsequent_indent=" " * len(head),
        )
    return "\n".join(lines)


def test_the_design_docs_import_diagram_is_the_codes() -> None:
    """docs/design.md's diagram of which part imports which is regenerated here: a new import
    between two parts fails this test until the diagram shows it (paste the printed one)."""
    text = (ROOT / "docs" / "design.md").read_text()
    assert DIAGRAM_START in text, "docs/design.md has lost its import diagram"
    shown = text.split(DIAGRAM_START, 1)[1].split("\n\n", 2)[1]
    expected = diagram(imports_of_parts())
    assert shown == expected, (
        f"docs/design.md's import diagram is out of date; it is now:\n{expected}"
    )
