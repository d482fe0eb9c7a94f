"""pyproject.toml's packaging, checked without building anything: every package of aiperf/ is in its
explicit list of packages, flows/ installs as aiperf_flows, and the license is an SPDX expression.
tests/test_wheel.py builds and installs the real wheel."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _packages_on_disk(folder: Path, name: str) -> set[str]:
    """`name` and every folder below `folder` holding Python files, as dotted package names."""
    found = {name}
    for path in folder.rglob("*.py"):
        if "__pycache__" not in path.parts:
            parts = path.parent.relative_to(folder).parts
            found.add(".".join((name, *parts)) if parts else name)
    for path in folder.rglob("*.yaml"):  # data-only folders (profiles, rules) ship as packages too
        parts = path.parent.relative_to(folder).parts
        if parts:
            found.add(".".join((name, *parts)))
    return found


def test_every_package_of_aiperf_is_listed_in_pyproject():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    on_disk = _packages_on_disk(REPO / "aiperf", "aiperf")
    missing = sorted(on_disk - listed)
    assert not missing, (
        f"pyproject.toml's [tool.setuptools] packages lacks {missing}: a wheel would leave them "
        "out; add them to the list"
    )
    gone = sorted(p for p in listed - on_disk if p.startswith("aiperf."))
    assert not gone, f"pyproject.toml lists packages that no longer exist: {gone}"


def test_flows_install_as_aiperf_flows_only():
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"aiperf_flows": "flows"}
    assert "aiperf_flows" in setuptools["packages"] and "flows" not in setuptools["packages"]


def test_the_editable_install_maps_aiperf_flows_to_the_checkouts_flows():
    import aiperf_flows.benchmark

    assert Path(aiperf_flows.benchmark.__file__).resolve() == REPO / "flows" / "benchmark.py", (
        "reinstall the checkout: pip install -e ."
    )


def test_the_license_is_an_spdx_expression_setuptools_reads():
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in PYPROJECT["build-system"]["requires"], (
        "setuptools reads a license expression from 77 on"
    )
