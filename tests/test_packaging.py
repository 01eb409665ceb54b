"""The package metadata says what a registry page and an installer need to know."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _project() -> dict[str, object]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    project: dict[str, object] = data["project"]
    return project


def test_license_is_mit_and_shipped() -> None:
    """An SPDX license expression, and the LICENSE file it refers to."""
    project = _project()
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License")


def test_classifiers_name_python_versions_and_status() -> None:
    """Python 3.11 to 3.13 and a development status are declared."""
    classifiers = _project()["classifiers"]
    assert isinstance(classifiers, list)
    for version in ("3.11", "3.12", "3.13"):
        assert f"Programming Language :: Python :: {version}" in classifiers
    assert any(c.startswith("Development Status :: ") for c in classifiers)
    assert _project()["authors"]


def test_init_templates_are_package_data() -> None:
    """`tubeless init` reads its templates from the installed package."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    shipped = data["tool"]["setuptools"]["package-data"]["tubeless"]
    assert "_cli/_init_files/*.tmpl" in shipped
    assert sorted(p.name for p in (ROOT / "tubeless/_cli/_init_files").iterdir()) == [
        "module.py.tmpl",
        "project.yaml.tmpl",
        "test_module.py.tmpl",
    ]
